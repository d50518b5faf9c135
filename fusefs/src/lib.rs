//! Basalt FUSE filesystem: the mount root lists collections, a file at path `p` in a
//! collection is the document with key `p`, large files are chunked into engine
//! records. See `ARCHITECTURE.md` for the key layout and `README.md` for usage.

mod acl;
mod answer;
mod collections;
mod connection;
mod document;
mod error;
mod external;
mod fids;
mod fs;
mod fuse;
pub mod layout;
mod lazy;
mod load;
mod mount;
pub mod mounts;
mod nullfs;
mod read_pool;
mod rename;
mod requests;
pub mod ring;
mod ring_serve;
mod state;
mod tree_snapshot;
mod views;

// Linked for `return_freed_memory` (mimalloc's `mi_collect`) even in a process whose
// global allocator is another one (the tests).
extern crate mimalloc;

pub use connection::abort_mount as abort_connection;
pub use document::{write_document, DocumentReader, DEFAULT_CHUNK_SIZE};
pub use error::FsError;
pub use mount::{
    disable_transparent_huge_pages, force_unmount, is_stale_mount, mount, mount_null,
    readahead_file, return_freed_memory, MountConfig, MountHandle, DEFAULT_READAHEAD_KB,
};
pub use tree_snapshot::{
    verify as verify_tree_snapshot, Verdict as TreeSnapshotVerdict, AUX_NAME as TREE_SNAPSHOT_AUX,
};

/// Incompressible bytes (a xorshift stream), for the unit tests.
#[cfg(test)]
pub(crate) fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

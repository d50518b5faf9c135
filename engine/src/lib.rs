//! Basalt storage engine: an index+log key-value store in the style of Couchbase
//! Magma.
//!
//! Documents are appended to log segments in checksummed, compressed blocks written
//! with O_DIRECT; the log doubles as the write-ahead log. A key index (memtable + a
//! small LSM of index runs with bloom filters) maps (collection, key) to the block
//! holding the newest version. Garbage is accounted exactly from index merges (a
//! delete list), so GC never looks anything up in the index. See `ARCHITECTURE.md`.
//!
//! ```no_run
//! use basalt_engine::{Db, Options};
//! let db = Db::open("/tmp/basalt-demo", Options::default())?;
//! let users = db.collection_or_create("users")?;
//! users.put(b"alice", b"{\"age\":30}")?;
//! assert_eq!(users.get(b"alice")?.as_deref(), Some(&b"{\"age\":30}"[..]));
//! # Ok::<(), basalt_engine::Error>(())
//! ```

mod aligned;
mod batch;
mod block;
mod bloom;
mod cache;
mod catalog;
mod changes;
mod check;
mod checkpoint;
mod codec;
mod data_block;
mod db;
mod entry;
mod error;
mod failpoint;
mod flush;
mod garbage;
mod gc;
mod index_block;
mod index_run;
mod index_warm;
mod io;
mod kway;
mod lock;
mod log_io;
mod log_writer;
mod memtable;
mod observer;
mod options;
mod paged;
mod partial_read;
mod prefetch;
mod read_path;
mod record;
mod recovery;
mod recycle;
mod segment;
mod segments;
mod snapshot;
mod stats;
mod uring;

pub use aligned::AlignedBuf;
pub use batch::{BatchOp, WriteBatch};
pub use catalog::MAX_COLLECTION_NAME;
pub use changes::{Change, ChangeIter};
pub use check::{check, CheckReport};
pub use db::{Collection, Db, MAX_KEY_LEN, MAX_VALUE_LEN};
pub use error::{Error, Result};
#[doc(hidden)]
pub use failpoint::fail_log_writes;
pub use flush::{BOTTOM_MERGE_DEBT, MERGE_DEBT_THROTTLE};
pub use io::IoMode;
pub use observer::{WriteObserver, Written};
pub use options::{Compression, Durability, IoBackend, Options, DEFAULT_READ_POLL_MICROS};
pub use partial_read::{PartSink, RangeRequest};
pub use record::{CollId, Seqno};
pub use snapshot::{prefix_successor, Direction, KeyIter, KeyLenIter, ScanIter, Snapshot};
pub use stats::{SegmentStats, Stats, SPACE_AMP_MIN_LIVE};
pub use uring::poll_reads_on_this_thread;

/// Decoders of on-disk structures, exposed for fuzzing and property tests. Each
/// returns an error (never panics) on arbitrary input.
pub mod decoders {
    use std::path::Path;

    /// Decodes a log block (header, checksum, decompression) and indexes its records
    /// as the data cache does.
    pub fn log_block(b: &[u8]) {
        if let Ok((h, raw)) = crate::block::decode(b, Path::new("fuzz"), 0, 0) {
            let _ = crate::data_block::DataBlock::new(raw, h.nrecs as usize);
        }
    }
    /// Parses a paged block's head as a read of part of a value does (the block at a
    /// file offset given by the first byte), then checks a part of the value.
    pub fn paged_head(b: &[u8]) {
        let Some((&first, rest)) = b.split_first() else {
            return;
        };
        let off = first as u64 * 16;
        let mut file = vec![0u8; off as usize];
        file.extend_from_slice(rest);
        if let Ok(h) = crate::paged::PagedHead::parse(&file, 0, off, 0, b"k", 1, 0) {
            let z = h.value_len().saturating_sub(100);
            for read in h.reads_for(100, z) {
                let end = (read.start + read.len as u64).min(file.len() as u64);
                if let Some(buf) = file.get(read.start as usize..end as usize) {
                    let _ = h.extract(buf, read.start, read.part);
                }
            }
        }
    }
    /// Decodes a segment footer.
    pub fn segment_footer(b: &[u8]) {
        let _ = crate::segment::decode_footer(b, Path::new("fuzz"), 0);
    }
    /// Decodes an index run data block.
    pub fn index_block(b: &[u8]) {
        let _ = crate::index_block::verify_block(b);
        let _ = crate::index_block::decode_block_entries(b);
        let mut g = crate::index_block::Group::default();
        for i in 0..crate::index_block::group_count(b).unwrap_or(0) {
            let _ = crate::index_block::decode_group(b, i, &mut g);
        }
    }
    /// Decodes a checkpoint file.
    pub fn checkpoint(b: &[u8]) {
        let _ = crate::checkpoint::decode(b, Path::new("fuzz"));
    }
    /// Decodes a delete list.
    pub fn delete_list(b: &[u8]) {
        let _ = crate::garbage::decode_items(b, Path::new("fuzz"));
    }
}

//! Recycled segment files (RocksDB's `recycle_log_file_num`): a segment GC retired is
//! renamed to `free-NNNNNNNN.log` instead of deleted, and the next new segment reuses
//! the file. Its blocks are then already allocated and written, so a synced write into
//! it is a plain overwrite: `fdatasync` has no extent to convert and no file size to
//! log, which on ext4 saves a journal commit per sync (see ARCHITECTURE.md "Recycled
//! segments").
//!
//! Old blocks in a reused file cannot be mistaken for new ones: from segment format 5
//! every block checksum is seeded with its segment's id ([`crate::segment::block_seed`]).

use crate::segment::SegId;
use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// File name of a free (recycled) segment file that held segment `id`.
pub fn free_path(dir: &Path, id: SegId) -> PathBuf {
    dir.join(format!("free-{id:08}.log"))
}

/// Parses the segment id from a free file's name.
pub fn parse_free_name(name: &str) -> Option<SegId> {
    name.strip_prefix("free-")?
        .strip_suffix(".log")?
        .parse()
        .ok()
}

/// The pool of free segment files of one data directory.
pub struct Recycler {
    dir: PathBuf,
    /// Most files kept; a retired segment beyond that is deleted.
    max: usize,
    /// Free files by the id of the segment they held, oldest first.
    free: Mutex<Vec<SegId>>,
    /// Segments created in a recycled file.
    reused: AtomicU64,
}

impl Recycler {
    /// The pool of `dir`, keeping at most `max` files: adopts the free files found there
    /// (their content is never read; a reuse rewrites the header first) and, unless
    /// `read_only`, deletes those beyond `max`.
    pub fn open(dir: &Path, max: usize, read_only: bool) -> Recycler {
        let mut found: Vec<SegId> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| parse_free_name(&e.file_name().to_string_lossy()))
            .collect();
        found.sort_unstable();
        let excess = found.len().saturating_sub(max);
        for id in found.drain(..excess) {
            if !read_only {
                let _ = std::fs::remove_file(free_path(dir, id));
            }
        }
        Recycler {
            dir: dir.to_path_buf(),
            max,
            free: Mutex::new(found),
            reused: AtomicU64::new(0),
        }
    }

    /// Takes the file of retired segment `id` at `path` into the pool if it has room
    /// (renaming it); `false` if not, and the caller deletes it.
    pub fn offer(&self, path: &Path, id: SegId) -> bool {
        let mut free = self.free.lock();
        if free.len() >= self.max {
            return false;
        }
        match std::fs::rename(path, free_path(&self.dir, id)) {
            Ok(()) => {
                free.push(id);
                true
            }
            Err(e) => {
                tracing::warn!("cannot keep {} for reuse: {e}", path.display());
                false
            }
        }
    }

    /// A free file to reuse (the oldest), leaving the pool: `(id it held, path)`.
    pub fn take(&self) -> Option<(SegId, PathBuf)> {
        let mut free = self.free.lock();
        if free.is_empty() {
            return None;
        }
        let id = free.remove(0);
        Some((id, free_path(&self.dir, id)))
    }

    /// Counts a segment created in a recycled file.
    pub fn note_reused(&self) {
        self.reused.fetch_add(1, Ordering::Relaxed);
    }

    /// Segments created in recycled files since open.
    pub fn reused(&self) -> u64 {
        self.reused.load(Ordering::Relaxed)
    }

    /// Files in the pool now.
    pub fn free_files(&self) -> usize {
        self.free.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_adopts_free_files_up_to_its_size_and_hands_out_the_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        for id in [3, 9, 5] {
            std::fs::write(free_path(dir.path(), id), b"x").unwrap();
        }
        std::fs::write(dir.path().join("seg-00000001.log"), b"y").unwrap();
        let r = Recycler::open(dir.path(), 2, false);
        assert_eq!(r.free_files(), 2);
        assert!(
            !free_path(dir.path(), 3).exists(),
            "the oldest beyond 2 goes"
        );
        let seg = dir.path().join("seg-00000001.log");
        assert!(!r.offer(&seg, 1), "full pool");
        assert!(seg.exists());
        assert_eq!(r.take().unwrap().0, 5);
        assert!(r.offer(&seg, 1));
        assert!(!seg.exists() && free_path(dir.path(), 1).exists());
        assert_eq!(
            r.take().map(|t| t.0),
            Some(9),
            "oldest first: 9 was adopted before 1 was offered"
        );
        assert_eq!(r.take().map(|t| t.0), Some(1));
        assert!(r.take().is_none());
        let ro = Recycler::open(dir.path(), 0, true);
        assert_eq!(ro.free_files(), 0, "nothing adopted with max 0");
        assert!(
            free_path(dir.path(), 1).exists(),
            "read-only deletes nothing"
        );
    }
}

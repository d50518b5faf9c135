//! Live segment handles shared by writers, readers, snapshots and GC.

use crate::cache::ClockCache;
use crate::data_block::DataBlock;
use crate::io::DataFile;
use crate::paged::PagedHead;
use crate::recycle::Recycler;
use crate::segment::{block_seed, BlockInfo, SegHeader, SegId};
use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// Cache of decompressed log block payloads, keyed by (segment, block offset).
pub type DataCache = ClockCache<(SegId, u64), DataBlock>;
/// Heads of paged blocks (see [`crate::paged`]), by block.
pub type HeadCache = ClockCache<(SegId, u64), PagedHead>;

/// The caches keyed by block of a segment, and the pool its file goes to once
/// retired; a retired segment's cache entries go with it.
#[derive(Clone)]
pub struct SegmentCaches {
    pub blocks: Arc<DataCache>,
    pub heads: Arc<HeadCache>,
    pub recycler: Arc<Recycler>,
}

/// One log segment in use. When GC retired the segment and the last reference (index
/// read, iterator or snapshot) is gone, the file is kept for reuse
/// ([`crate::recycle`]) or deleted.
pub struct Segment {
    pub id: SegId,
    pub file: DataFile,
    /// Seed of the block checksums ([`block_seed`] of the header's version and the id;
    /// changes only when an empty tail is given the current header).
    seed: AtomicU32,
    /// The segment whose file this one reuses (0: none): bytes after the end of the log
    /// may be that segment's blocks.
    pub recycled_from: SegId,
    /// Sealed blocks in offset order.
    pub blocks: RwLock<Vec<BlockInfo>>,
    /// Footer written: no more blocks.
    pub sealed: AtomicBool,
    /// Bytes written to the file so far (readable with pread).
    pub written_end: AtomicU64,
    /// Sum of uncompressed block payloads (the records' encoded sizes).
    pub raw_bytes: AtomicU64,
    retired: AtomicBool,
    caches: SegmentCaches,
}

impl Segment {
    pub fn new(
        id: SegId,
        header: SegHeader,
        file: DataFile,
        blocks: Vec<BlockInfo>,
        sealed: bool,
        written_end: u64,
        caches: SegmentCaches,
    ) -> Self {
        let raw = blocks.iter().map(|b| b.raw_len as u64).sum();
        Segment {
            id,
            file,
            seed: AtomicU32::new(block_seed(header.version, id)),
            recycled_from: header.recycled_from,
            blocks: RwLock::new(blocks),
            sealed: AtomicBool::new(sealed),
            written_end: AtomicU64::new(written_end),
            raw_bytes: AtomicU64::new(raw),
            retired: AtomicBool::new(false),
            caches,
        }
    }

    /// Seed of this segment's block checksums.
    pub fn seed(&self) -> u32 {
        self.seed.load(Ordering::Relaxed)
    }

    /// Records that the (empty) segment was given header format `version`.
    pub fn set_version(&self, version: u32) {
        self.seed
            .store(block_seed(version, self.id), Ordering::Relaxed);
    }

    /// The sealed block starting at `off`, if any.
    pub fn block_at(&self, off: u64) -> Option<BlockInfo> {
        let b = self.blocks.read();
        b.binary_search_by_key(&off, |x| x.off).ok().map(|i| b[i])
    }

    /// Marks the segment for deletion once unreferenced.
    pub fn retire(&self) {
        self.retired.store(true, Ordering::SeqCst);
    }

    /// Bytes on disk (allocated file length).
    pub fn disk_bytes(&self) -> u64 {
        self.file.len().unwrap_or(0)
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        if self.retired.load(Ordering::SeqCst) {
            if !self.caches.recycler.offer(self.file.path(), self.id) {
                let _ = std::fs::remove_file(self.file.path());
            }
            let id = self.id;
            self.caches.blocks.retain(|(s, _)| *s != id);
            self.caches.heads.retain(|(s, _)| *s != id);
        }
    }
}

/// Copy-on-write map of live segments; snapshots keep the map they saw.
pub type SegmentMap = Arc<BTreeMap<SegId, Arc<Segment>>>;

impl crate::uring::ReadTarget for Segment {
    fn data_file(&self) -> &DataFile {
        &self.file
    }
}

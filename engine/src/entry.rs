//! Index entries: what the key index stores per (collection, key).

use crate::record::{Kind, Seqno};
use crate::segment::SegId;

/// Where a record's block lives in the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Location {
    pub seg: SegId,
    /// Byte offset of the block in the segment.
    pub off: u64,
    /// On-disk block length; 0 while the block is still being filled (resolved
    /// through the segment's block table).
    pub len: u32,
}

/// The index's view of one version of a document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexEntry {
    pub seqno: Seqno,
    /// `Put` or `Delete` (a tombstone).
    pub kind: Kind,
    /// A GC copy: valid only if no version with a higher seqno exists further down.
    pub reloc: bool,
    pub loc: Location,
    /// Encoded record size in its uncompressed block (for garbage accounting).
    pub rec_size: u32,
}

impl IndexEntry {
    pub fn is_tombstone(&self) -> bool {
        self.kind == Kind::Delete
    }

    /// Of two versions of the same key, whether `self` shadows `other`:
    /// the higher seqno wins; on a tie the relocated copy wins.
    pub fn supersedes(&self, other: &IndexEntry) -> bool {
        self.seqno > other.seqno || (self.seqno == other.seqno && self.reloc && !other.reloc)
    }
}

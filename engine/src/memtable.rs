//! The write cache in front of the on-disk index: a concurrent skip list holding
//! every version written since the last flush, so snapshots read at their seqno
//! and readers never block writers.

use crate::checkpoint::LogPos;
use crate::entry::IndexEntry;
use crate::record::{CollId, Seqno};
use crossbeam_skiplist::SkipMap;
use std::cmp::Reverse;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};

/// Sort key: collection, key, then newest version first.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct MemKey {
    pub coll: CollId,
    pub key: Box<[u8]>,
    pub seqno: Reverse<Seqno>,
}

/// Fixed per-entry overhead charged to the memory budget (node, key box, entry).
const ENTRY_OVERHEAD: u64 = 96;

/// One memtable. Immutable once rotated out; flushed to an index run.
pub struct Memtable {
    pub id: u64,
    /// Log position from which this memtable's records were written.
    pub start: LogPos,
    map: SkipMap<MemKey, IndexEntry>,
    bytes: AtomicU64,
}

impl Memtable {
    pub fn new(id: u64, start: LogPos) -> Self {
        Memtable {
            id,
            start,
            map: SkipMap::new(),
            bytes: AtomicU64::new(0),
        }
    }

    /// Inserts a version. Returns the entry it replaced with the same (key, seqno),
    /// which only happens for relocated copies.
    pub fn insert(&self, coll: CollId, key: &[u8], e: IndexEntry) -> Option<IndexEntry> {
        let k = MemKey {
            coll,
            key: key.into(),
            seqno: Reverse(e.seqno),
        };
        let prev = if e.reloc {
            self.map.get(&k).map(|x| *x.value())
        } else {
            None
        };
        if prev.is_none() {
            self.bytes
                .fetch_add(ENTRY_OVERHEAD + key.len() as u64, Ordering::Relaxed);
        }
        self.map.insert(k, e);
        prev
    }

    /// Bytes charged to the write cache.
    pub fn approx_bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Newest version of `key` with seqno ≤ `snap`.
    pub fn get(&self, coll: CollId, key: &[u8], snap: Seqno) -> Option<IndexEntry> {
        let lo = MemKey {
            coll,
            key: key.into(),
            seqno: Reverse(snap),
        };
        let e = self.map.lower_bound(Bound::Included(&lo))?;
        (e.key().coll == coll && &*e.key().key == key).then(|| *e.value())
    }

    /// Up to `limit` versions of `coll` between `lo` and `hi` (bounds on whole
    /// `MemKey`s, so a chunked walk can resume exactly after the last one returned),
    /// ascending or descending.
    pub fn chunk(
        &self,
        lo: Bound<&MemKey>,
        hi: Bound<&MemKey>,
        reverse: bool,
        limit: usize,
    ) -> Vec<(MemKey, IndexEntry)> {
        let r = self.map.range::<MemKey, _>((lo, hi));
        if reverse {
            r.rev()
                .take(limit)
                .map(|e| (e.key().clone(), *e.value()))
                .collect()
        } else {
            r.take(limit)
                .map(|e| (e.key().clone(), *e.value()))
                .collect()
        }
    }

    /// Owned snapshot of all entries, sorted (used by flush).
    pub fn sorted_entries(&self) -> Vec<(CollId, Box<[u8]>, IndexEntry)> {
        self.map
            .iter()
            .map(|e| (e.key().coll, e.key().key.clone(), *e.value()))
            .collect()
    }
}

//! The write cache in front of the on-disk index: a concurrent skip list holding
//! every version written since the last flush, so snapshots read at their seqno
//! and readers never block writers. A bloom filter in front of it lets the gets of
//! keys it does not hold (most of them, in a read-heavy phase) skip the skip list.

use crate::bloom::{key_hash, SharedBloom};
use crate::checkpoint::LogPos;
use crate::entry::IndexEntry;
use crate::kway::MergeOrder;
use crate::record::{CollId, Seqno};
use crossbeam_skiplist::SkipMap;
use std::cmp::Reverse;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};

/// Sort key: collection, key, then newest version first.
///
/// `prefix` holds the key's first 8 bytes inline (`index_block::key_prefix`), so most
/// comparisons in the skip list are decided without dereferencing the boxed key (one
/// cache miss less per level).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct MemKey {
    pub coll: CollId,
    prefix: u64,
    pub key: Box<[u8]>,
    pub seqno: Reverse<Seqno>,
}

impl MemKey {
    pub fn new(coll: CollId, key: &[u8], seqno: Seqno) -> Self {
        MemKey {
            coll,
            prefix: crate::index_block::key_prefix(key),
            key: key.into(),
            seqno: Reverse(seqno),
        }
    }
}

/// Fixed per-entry overhead charged to the memory budget (skip-list node with its
/// tower, key box, entry, allocator headers): measured at 126 bytes beyond the key
/// (300,000 random 20-byte keys: 146 bytes of RSS per entry).
const ENTRY_OVERHEAD: u64 = 128;

/// Bloom bits per entry a memtable can hold (its capacity over [`ENTRY_OVERHEAD`]):
/// 10 or more, about 1% false positives.
const BLOOM_BITS_PER_ENTRY: usize = 10;

/// One memtable. Immutable once rotated out; flushed to an index run.
pub struct Memtable {
    pub id: u64,
    /// Log position from which this memtable's records were written.
    pub start: LogPos,
    map: SkipMap<MemKey, IndexEntry>,
    /// Every (collection, key) inserted, by [`key_hash`].
    bloom: SharedBloom,
    /// Charged bytes: the filter, then each entry.
    bytes: AtomicU64,
    /// Tombstones inserted (each may make versions in the log garbage).
    tombstones: AtomicU64,
}

impl Memtable {
    /// An empty memtable whose filter is sized for `capacity` charged bytes (more
    /// still work, with more false positives).
    pub fn new(id: u64, start: LogPos, capacity: u64) -> Self {
        let bloom =
            SharedBloom::with_capacity((capacity / ENTRY_OVERHEAD) as usize, BLOOM_BITS_PER_ENTRY);
        Memtable {
            id,
            start,
            map: SkipMap::new(),
            bytes: AtomicU64::new(bloom.bytes() as u64),
            bloom,
            tombstones: AtomicU64::new(0),
        }
    }

    /// Inserts a version. Returns the entry it replaced with the same (key, seqno),
    /// which only happens for relocated copies.
    ///
    /// The key's filter bits are set after the skip-list insert (whose search hides
    /// the fetch of their cache line) and before this returns: a get sees an entry
    /// only once the commit has published its seqno, after its inserts returned.
    /// (Relocated copies repeat a visible seqno; a get that misses one finds the
    /// original, which GC keeps readable until its copies are installed.)
    pub fn insert(&self, coll: CollId, key: &[u8], e: IndexEntry) -> Option<IndexEntry> {
        let h = key_hash(coll, key);
        self.bloom.prefetch(h);
        let k = MemKey::new(coll, key, e.seqno);
        let prev = if e.reloc {
            self.map.get(&k).map(|x| *x.value())
        } else {
            None
        };
        if prev.is_none() {
            self.bytes
                .fetch_add(ENTRY_OVERHEAD + key.len() as u64, Ordering::Relaxed);
            if e.is_tombstone() {
                self.tombstones.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.map.insert(k, e);
        self.bloom.insert(h);
        prev
    }

    /// Bytes charged to the write cache.
    pub fn approx_bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Tombstones inserted.
    pub fn tombstones(&self) -> u64 {
        self.tombstones.load(Ordering::Relaxed)
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Asks the CPU to fetch the filter line a `get` of the key hashed `hash` reads
    /// (nothing for an empty table, whose `get` reads no filter).
    pub fn prefetch(&self, hash: u64) {
        if !self.map.is_empty() {
            self.bloom.prefetch(hash);
        }
    }

    /// Newest version of `key` with seqno ≤ `snap`; `hash` is its [`key_hash`].
    pub fn get(&self, coll: CollId, key: &[u8], hash: u64, snap: Seqno) -> Option<IndexEntry> {
        // An empty table's length is one hot word; its filter line would be a miss.
        if self.map.is_empty() || !self.bloom.may_contain(hash) {
            return None;
        }
        let lo = MemKey::new(coll, key, snap);
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
}

/// Calls `f(coll, key, versions)` for every key of the memtables `tables` in order,
/// with all the versions they hold of it (newest first; a version in two tables, a GC
/// copy beside its original, comes first from the table listed first), walking the
/// tables in place: a flush of several memtables streams them into one run.
pub fn for_each_key_of<E>(
    tables: &[&Memtable],
    mut f: impl FnMut(CollId, &[u8], &[IndexEntry]) -> Result<(), E>,
) -> Result<(), E> {
    type Entry<'a> = crossbeam_skiplist::map::Entry<'a, MemKey, IndexEntry>;
    let mut iters: Vec<_> = tables.iter().map(|t| t.map.iter()).collect();
    let mut heads: Vec<Option<Entry<'_>>> = iters.iter_mut().map(|i| i.next()).collect();
    let less = |heads: &[Option<Entry<'_>>], a: usize, b: usize| match (&heads[a], &heads[b]) {
        (Some(x), Some(y)) => (x.key(), a) < (y.key(), b),
        (x, _) => x.is_some(),
    };
    let mut order = MergeOrder::new(
        tables.len(),
        |i| heads[i].is_some(),
        |a, b| less(&heads, a, b),
    );
    let mut versions: Vec<IndexEntry> = Vec::new();
    let mut cur: Option<Entry<'_>> = None;
    while let Some(i) = order.first() {
        let e = heads[i].take().expect("ordered sources have an entry");
        heads[i] = iters[i].next();
        order.advanced(heads[i].is_some(), |a, b| less(&heads, a, b));
        let same = cur
            .as_ref()
            .is_some_and(|c| c.key().coll == e.key().coll && c.key().key == e.key().key);
        if !same {
            if let Some(c) = cur.take() {
                f(c.key().coll, &c.key().key, &versions)?;
            }
            versions.clear();
        }
        versions.push(*e.value());
        if !same {
            cur = Some(e);
        }
    }
    match cur {
        Some(c) => f(c.key().coll, &c.key().key, &versions),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    #[test]
    fn for_each_key_visits_keys_in_order_with_all_versions_newest_first() {
        let m = Memtable::new(1, LogPos { seg: 0, off: 0 }, 1 << 20);
        let e = |seqno| IndexEntry {
            seqno,
            kind: crate::record::Kind::Put,
            reloc: false,
            loc: crate::entry::Location {
                seg: 1,
                off: seqno,
                len: 10,
            },
            rec_size: 10,
        };
        for (coll, key, seqno) in [
            (2, "a", 1),
            (1, "b", 2),
            (1, "a", 3),
            (1, "b", 4),
            (1, "b", 5),
        ] {
            m.insert(coll, key.as_bytes(), e(seqno));
        }
        assert_eq!(
            walk(&[&m]),
            vec![
                (1, "a".to_string(), vec![(3, false)]),
                (1, "b".to_string(), vec![(5, false), (4, false), (2, false)]),
                (2, "a".to_string(), vec![(1, false)]),
            ]
        );
        assert_eq!(for_each_key_of(&[&m], |_, _, _| Err("stop")), Err("stop"));
    }

    #[test]
    fn gets_find_every_key_beyond_the_filters_capacity_and_the_filter_skips_absent_ones() {
        let h = |coll, key: &[u8]| key_hash(coll, key);
        // Sized for 100 entries, filled with 3,000: more false positives, never a miss.
        let small = Memtable::new(1, LogPos { seg: 0, off: 0 }, 100 * ENTRY_OVERHEAD);
        let full = Memtable::new(2, LogPos { seg: 0, off: 0 }, 10_000 * ENTRY_OVERHEAD);
        assert_eq!(
            full.approx_bytes(),
            full.bloom.bytes() as u64,
            "the filter is charged"
        );
        for i in 0..3_000u32 {
            small.insert(1, &i.to_be_bytes(), entry(i as u64 + 1, false));
            full.insert(1, &i.to_be_bytes(), entry(i as u64 + 1, false));
        }
        for i in 0..3_000u32 {
            let k = i.to_be_bytes();
            for m in [&small, &full] {
                let got = m.get(1, &k, h(1, &k), u64::MAX).map(|e| e.seqno);
                assert_eq!(got, Some(i as u64 + 1), "key {i}");
            }
            // The same key in another collection is absent.
            assert_eq!(full.get(2, &k, h(2, &k), u64::MAX), None);
        }
        let passed = (3_000..103_000u32)
            .filter(|i| full.bloom.may_contain(h(1, &i.to_be_bytes())))
            .count();
        assert!(
            passed < 1_000,
            "{passed} of 100,000 absent keys passed the filter"
        );
        for i in 3_000..4_000u32 {
            let k = i.to_be_bytes();
            assert_eq!(small.get(1, &k, h(1, &k), u64::MAX), None);
        }
    }

    /// `(coll, key, [(seqno, reloc)])` as `for_each_key_of` hands them out.
    type Walked = Vec<(CollId, String, Vec<(u64, bool)>)>;

    fn walk(tables: &[&Memtable]) -> Walked {
        let mut seen = Vec::new();
        for_each_key_of(tables, |coll, key, versions| {
            let v = versions.iter().map(|v| (v.seqno, v.reloc)).collect();
            seen.push((coll, String::from_utf8(key.to_vec()).unwrap(), v));
            Ok::<(), ()>(())
        })
        .unwrap();
        seen
    }

    fn entry(seqno: u64, reloc: bool) -> IndexEntry {
        IndexEntry {
            seqno,
            kind: crate::record::Kind::Put,
            reloc,
            loc: crate::entry::Location {
                seg: 1,
                off: seqno,
                len: 10,
            },
            rec_size: 10,
        }
    }

    proptest! {
        /// Several memtables walked together give each key once, with every version
        /// any of them holds, newest first, as one table holding them all would; a
        /// GC copy (same seqno, in a newer table) comes before its original.
        #[test]
        fn walking_several_tables_is_walking_their_union(
            puts in proptest::collection::vec((0u32..2, 0u8..12, 0usize..3), 0..80),
            copies in proptest::collection::vec(0usize..80, 0..10),
        ) {
            let tables: Vec<Memtable> =
                (0..3).map(|i| Memtable::new(i, LogPos { seg: 0, off: 0 }, 1 << 20)).collect();
            let union = Memtable::new(9, LogPos { seg: 0, off: 0 }, 1 << 20);
            // Per key, ordered newest first and a copy before its original:
            // (seqno, not a copy, is a copy).
            type Versions = BTreeSet<(Reverse<u64>, bool, bool)>;
            let mut want: BTreeMap<(CollId, String), Versions> = BTreeMap::new();
            for (i, &(coll, key, t)) in puts.iter().enumerate() {
                let key = format!("k{key:02}");
                let seqno = i as u64 + 1;
                tables[t].insert(coll, key.as_bytes(), entry(seqno, false));
                union.insert(coll, key.as_bytes(), entry(seqno, false));
                want.entry((coll, key)).or_default().insert((Reverse(seqno), true, false));
            }
            // GC copies land in the newest table (listed first) with their seqno; one
            // there replaces its original in that table.
            for &c in &copies {
                if let Some(&(coll, key, t)) = puts.get(c) {
                    let key = format!("k{key:02}");
                    let seqno = c as u64 + 1;
                    tables[0].insert(coll, key.as_bytes(), entry(seqno, true));
                    let v = want.get_mut(&(coll, key)).unwrap();
                    if t == 0 {
                        v.remove(&(Reverse(seqno), true, false));
                    }
                    v.insert((Reverse(seqno), false, true));
                }
            }
            let want: Walked = want
                .into_iter()
                .map(|((coll, key), v)| (coll, key, v.into_iter().map(|(s, _, r)| (s.0, r)).collect()))
                .collect();
            let got = walk(&[&tables[0], &tables[1], &tables[2]]);
            prop_assert_eq!(&got, &want);
            let keys: Vec<_> = walk(&[&union]).into_iter().map(|(c, k, _)| (c, k)).collect();
            prop_assert_eq!(got.into_iter().map(|(c, k, _)| (c, k)).collect::<Vec<_>>(), keys);
        }
    }

    proptest! {
        #[test]
        fn memkey_order_is_collection_then_key_bytes_then_newest_first(
            a in (0u32..3, proptest::collection::vec(0u8..3, 0..12), 0u64..4),
            b in (0u32..3, proptest::collection::vec(0u8..3, 0..12), 0u64..4),
        ) {
            let (ka, kb) = (MemKey::new(a.0, &a.1, a.2), MemKey::new(b.0, &b.1, b.2));
            let want = (a.0, &a.1, Reverse(a.2)).cmp(&(b.0, &b.1, Reverse(b.2)));
            prop_assert_eq!(ka.cmp(&kb), want);
            prop_assert_eq!(ka == kb, want.is_eq());
        }
    }
}

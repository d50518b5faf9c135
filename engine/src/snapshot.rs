//! Consistent snapshots and ordered scans.
//!
//! A snapshot pins a seqno, the index version (memtables and runs) and the segment
//! map of its moment, so reads through it see exactly the writes acknowledged before
//! it, even while flushes, merges and GC change the engine underneath.

use crate::db::{Inner, Version};
use crate::entry::IndexEntry;
use crate::error::{Error, Result};
use crate::index_run::RunCursor;
use crate::kway::MergeOrder;
use crate::memtable::{MemKey, Memtable};
use crate::record::{CollId, Seqno};
use crate::segments::SegmentMap;
use std::cmp::Ordering as CmpOrdering;
use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Scan direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Forward,
    Backward,
}

/// A read-only, point-in-time view.
#[derive(Clone)]
pub struct Snapshot {
    inner: Arc<Inner>,
    seqno: Seqno,
    version: Arc<Version>,
    segs: SegmentMap,
}

impl Snapshot {
    pub(crate) fn new(inner: Arc<Inner>) -> Snapshot {
        // Under the version lock no memtable can be rotated or flushed, so every write
        // up to `seqno` is in this version's memtables or runs.
        let (seqno, version) = {
            let v = inner.version.read();
            (inner.visible_seqno.load(Ordering::SeqCst), v.clone())
        };
        let segs = inner.segments.read().clone();
        Snapshot {
            inner,
            seqno,
            version,
            segs,
        }
    }

    /// Writes with seqno ≤ this are visible.
    pub fn seqno(&self) -> Seqno {
        self.seqno
    }

    fn coll(&self, name: &str) -> Result<CollId> {
        self.inner.catalog.read().id(name)
    }

    /// Point read as of the snapshot.
    pub fn get(&self, collection: &str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let id = self.coll(collection)?;
        self.inner
            .get_at(id, key, self.seqno, Some((&self.version, &self.segs)))
    }

    /// Ordered scan within bounds, as of the snapshot.
    pub fn scan(
        &self,
        collection: &str,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        dir: Direction,
    ) -> Result<ScanIter> {
        Ok(self.scan_id(self.coll(collection)?, lo, hi, dir))
    }

    /// Ordered scan of keys with a prefix, as of the snapshot.
    pub fn scan_prefix(&self, collection: &str, prefix: &[u8], dir: Direction) -> Result<ScanIter> {
        Ok(self.scan_prefix_id(self.coll(collection)?, prefix, dir))
    }

    pub(crate) fn scan_prefix_id(&self, coll: CollId, prefix: &[u8], dir: Direction) -> ScanIter {
        let hi = prefix_successor(prefix);
        let hi_b = match &hi {
            Some(h) => Bound::Excluded(h.as_slice()),
            None => Bound::Unbounded,
        };
        self.scan_id(coll, Bound::Included(prefix), hi_b, dir)
    }

    pub(crate) fn scan_id(
        &self,
        coll: CollId,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        dir: Direction,
    ) -> ScanIter {
        ScanIter::new(
            self.clone(),
            coll,
            own(lo),
            own(hi),
            dir == Direction::Backward,
        )
    }
}

/// Smallest key greater than every key starting with `p` (None: no such key).
pub fn prefix_successor(p: &[u8]) -> Option<Vec<u8>> {
    let mut v = p.to_vec();
    while let Some(last) = v.pop() {
        if last != 0xff {
            v.push(last + 1);
            return Some(v);
        }
    }
    None
}

fn own(b: Bound<&[u8]>) -> Bound<Vec<u8>> {
    match b {
        Bound::Included(k) => Bound::Included(k.to_vec()),
        Bound::Excluded(k) => Bound::Excluded(k.to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

fn bref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_slice()),
        Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// Walks one memtable in chunks (the skip list cannot be borrowed across calls).
struct MemSource {
    mt: Arc<Memtable>,
    lo: Bound<MemKey>,
    hi: Bound<MemKey>,
    reverse: bool,
    buf: VecDeque<(MemKey, IndexEntry)>,
    exhausted: bool,
    snap: Seqno,
    /// Entries copied out per refill: small first (a short scan copies little), then
    /// doubling up to 256.
    chunk: usize,
}

impl MemSource {
    fn new(
        mt: Arc<Memtable>,
        coll: CollId,
        lo: &Bound<Vec<u8>>,
        hi: &Bound<Vec<u8>>,
        reverse: bool,
        snap: Seqno,
    ) -> Self {
        let mk = |k: &[u8], s: u64| MemKey::new(coll, k, s);
        let lo = match lo {
            Bound::Included(k) => Bound::Included(mk(k, u64::MAX)),
            Bound::Excluded(k) => Bound::Excluded(mk(k, 0)),
            Bound::Unbounded => Bound::Included(mk(&[], u64::MAX)),
        };
        let hi = match hi {
            Bound::Included(k) => Bound::Included(mk(k, 0)),
            Bound::Excluded(k) => Bound::Excluded(mk(k, u64::MAX)),
            Bound::Unbounded => Bound::Excluded(MemKey::new(coll + 1, &[], u64::MAX)),
        };
        let mut s = MemSource {
            mt,
            lo,
            hi,
            reverse,
            buf: VecDeque::new(),
            exhausted: false,
            snap,
            chunk: 16,
        };
        s.fill();
        s
    }

    fn fill(&mut self) {
        while self.buf.is_empty() && !self.exhausted {
            let limit = self.chunk;
            self.chunk = (self.chunk * 2).min(256);
            let chunk = self.mt.chunk(
                bound_ref(&self.lo),
                bound_ref(&self.hi),
                self.reverse,
                limit,
            );
            if chunk.len() < limit {
                self.exhausted = true;
            }
            if let Some((last, _)) = chunk.last() {
                if self.reverse {
                    self.hi = Bound::Excluded(last.clone());
                } else {
                    self.lo = Bound::Excluded(last.clone());
                }
            }
            self.buf
                .extend(chunk.into_iter().filter(|(_, e)| e.seqno <= self.snap));
        }
    }

    fn peek(&self) -> Option<(&[u8], IndexEntry)> {
        self.buf.front().map(|(k, e)| (&*k.key, *e))
    }

    fn advance(&mut self) {
        self.buf.pop_front();
        self.fill();
    }
}

fn bound_ref(b: &Bound<MemKey>) -> Bound<&MemKey> {
    match b {
        Bound::Included(k) => Bound::Included(k),
        Bound::Excluded(k) => Bound::Excluded(k),
        Bound::Unbounded => Bound::Unbounded,
    }
}

enum Source {
    Mem(MemSource),
    Run(RunCursor, CollId),
}

impl Source {
    fn peek(&self) -> Option<(&[u8], IndexEntry)> {
        match self {
            Source::Mem(m) => m.peek(),
            Source::Run(c, coll) => c
                .peek()
                .filter(|(cc, _, _)| cc == coll)
                .map(|(_, k, e)| (k, e)),
        }
    }

    fn advance(&mut self) -> Result<()> {
        match self {
            Source::Mem(m) => {
                m.advance();
                Ok(())
            }
            Source::Run(c, _) => c.advance(),
        }
    }
}

/// Iterator over `(key, value)` pairs of a scan. Yields an error once and stops if a
/// block cannot be read.
pub struct ScanIter {
    snap: Snapshot,
    coll: CollId,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    reverse: bool,
    sources: Vec<Source>,
    /// The sources in key order, from the first call on.
    order: Option<MergeOrder>,
    started: bool,
    failed: bool,
    /// Upcoming winners, with their values once read.
    ready: VecDeque<(Vec<u8>, IndexEntry, Option<Vec<u8>>)>,
    batch: usize,
}

impl ScanIter {
    fn new(
        snap: Snapshot,
        coll: CollId,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        reverse: bool,
    ) -> ScanIter {
        ScanIter {
            snap,
            coll,
            lo,
            hi,
            reverse,
            sources: Vec::new(),
            order: None,
            started: false,
            failed: false,
            ready: VecDeque::new(),
            batch: 8,
        }
    }

    fn start(&mut self) -> Result<()> {
        let v = self.snap.version.clone();
        for mt in v.memtables() {
            self.sources.push(Source::Mem(MemSource::new(
                mt.clone(),
                self.coll,
                &self.lo,
                &self.hi,
                self.reverse,
                self.snap.seqno,
            )));
        }
        let seek_key: Option<&[u8]> = if self.reverse {
            match &self.hi {
                Bound::Included(k) | Bound::Excluded(k) => Some(k),
                Bound::Unbounded => None,
            }
        } else {
            match &self.lo {
                Bound::Included(k) | Bound::Excluded(k) => Some(k),
                Bound::Unbounded => Some(&[]),
            }
        };
        for r in &v.runs {
            self.sources.push(Source::Run(
                RunCursor::seek(r.clone(), self.coll, seek_key, self.reverse)?,
                self.coll,
            ));
        }
        Ok(())
    }

    fn in_range(&self, k: &[u8]) -> (bool, bool) {
        let above_lo = match bref(&self.lo) {
            Bound::Included(l) => k >= l,
            Bound::Excluded(l) => k > l,
            Bound::Unbounded => true,
        };
        let below_hi = match bref(&self.hi) {
            Bound::Included(h) => k <= h,
            Bound::Excluded(h) => k < h,
            Bound::Unbounded => true,
        };
        // (inside, past the end in scan direction)
        (
            above_lo && below_hi,
            if self.reverse { !above_lo } else { !below_hi },
        )
    }

    /// Next (key, value). A value whose block is cached is read at once; on a miss the
    /// values of a batch of upcoming keys are read together, so their block reads go to
    /// the device in one submission: 8 keys, doubling up to 64, and none added once the
    /// batch's records reach [`crate::read_path::READ_AHEAD_BYTES`].
    fn next_entry(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        if !self.started {
            self.started = true;
            self.start()?;
        }
        if self.ready.is_empty() {
            match self.next_winner()? {
                Some((k, e)) => self.ready.push_back((k, e, None)),
                None => return Ok(None),
            }
        }
        let inner = self.snap.inner.clone();
        let (key, e, value) = self.ready.front_mut().expect("filled above");
        if value.is_none() {
            *value = inner.cached_value(self.coll, key, e, Some(&self.snap.segs))?;
        }
        if value.is_none() {
            let mut bytes: u64 = self.ready.iter().map(|r| r.1.rec_size as u64).sum();
            while self.ready.len() < self.batch && bytes < crate::read_path::READ_AHEAD_BYTES {
                match self.next_winner()? {
                    Some((k, e)) => {
                        bytes += e.rec_size as u64;
                        self.ready.push_back((k, e, None));
                    }
                    None => break,
                }
            }
            self.batch = (self.batch * 2).min(64);
            let want = (0..self.ready.len()).filter(|&i| self.ready[i].2.is_none());
            let items = want.map(|i| Ok((i, self.ready[i].0.as_slice(), self.ready[i].1)));
            let f =
                inner.fetch_values(self.coll, self.ready.len(), items, Some(&self.snap.segs))?;
            if let Some(&i) = f.retired.first() {
                return Err(retired_segment(&inner, &self.ready[i].1));
            }
            for (i, v) in f.values.into_iter().enumerate() {
                if v.is_some() {
                    self.ready[i].2 = v;
                }
            }
        }
        let (key, _, value) = self.ready.pop_front().expect("filled above");
        Ok(Some((key, value.expect("read above"))))
    }

    /// The next visible, in-range key and its winning index entry.
    fn next_winner(&mut self) -> Result<Option<(Vec<u8>, IndexEntry)>> {
        let reverse = self.reverse;
        // Source `a`'s entry comes before `b`'s: by key in scan direction, then position.
        let before = move |s: &[Source], a: usize, b: usize| {
            let (ka, _) = s[a].peek().expect("ordered sources have an entry");
            let (kb, _) = s[b].peek().expect("ordered sources have an entry");
            match ka.cmp(kb) {
                CmpOrdering::Equal => a < b,
                o => (o == CmpOrdering::Less) != reverse,
            }
        };
        loop {
            let (key, best) = {
                let sources = &mut self.sources;
                let order = self.order.get_or_insert_with(|| {
                    MergeOrder::new(
                        sources.len(),
                        |i| sources[i].peek().is_some(),
                        |a, b| before(sources, a, b),
                    )
                });
                let Some(first) = order.first() else {
                    return Ok(None);
                };
                let key = sources[first]
                    .peek()
                    .expect("ordered sources have an entry")
                    .0
                    .to_vec();
                let mut best: Option<IndexEntry> = None;
                while let Some(i) = order.first() {
                    let (k, e) = sources[i].peek().expect("ordered sources have an entry");
                    if k != key.as_slice() {
                        break;
                    }
                    if best.is_none_or(|b| e.supersedes(&b)) {
                        best = Some(e);
                    }
                    sources[i].advance()?;
                    order.advanced(sources[i].peek().is_some(), |a, b| before(sources, a, b));
                }
                (key, best.expect("key came from a source"))
            };
            let (inside, past) = self.in_range(&key);
            if past {
                return Ok(None);
            }
            if !inside || best.is_tombstone() {
                continue;
            }
            return Ok(Some((key, best)));
        }
    }
}

/// The keys of a scan without their values: only the index is read, never the log
/// (see [`ScanIter::keys`]).
pub struct KeyIter(ScanIter);

/// The keys of a scan with their values' lengths: only the index is read, never the
/// log (see [`ScanIter::keys_with_lens`]).
pub struct KeyLenIter(ScanIter);

impl ScanIter {
    /// The scan's keys alone, in the same order. No value is read, so listing or
    /// deleting a range costs index reads only.
    pub fn keys(self) -> KeyIter {
        KeyIter(self)
    }

    /// The scan's keys with the length of each value, in the same order. No value is
    /// read (the index keeps each record's size), so sizing every document of a
    /// collection costs index reads only.
    pub fn keys_with_lens(self) -> KeyLenIter {
        KeyLenIter(self)
    }

    /// The next key and its winning index entry, without reading the value.
    fn next_key_entry(&mut self) -> Result<Option<(Vec<u8>, IndexEntry)>> {
        if self.failed {
            return Ok(None);
        }
        let step = |s: &mut ScanIter| {
            if !s.started {
                s.started = true;
                s.start()?;
            }
            if let Some((k, e, _)) = s.ready.pop_front() {
                return Ok(Some((k, e)));
            }
            s.next_winner()
        };
        let r = step(self);
        self.failed = r.is_err();
        r
    }
}

/// What a scan reports when an index entry it holds points to a segment GC retired
/// (its snapshot pins the segments, so this is damage, not a race).
fn retired_segment(inner: &Inner, e: &IndexEntry) -> Error {
    Error::corruption(
        crate::segment::segment_path(&inner.dir, e.loc.seg),
        e.loc.off,
        "scan found an index entry pointing to a segment that no longer exists",
    )
}

/// Distinct blocks whose values [`ScanIter::gather`] reads in one go: bounds the
/// decoded blocks held at once (a block is at most a few tens of KiB but for a large
/// value's, which holds only that value).
const GATHER_BLOCKS: usize = 512;

impl ScanIter {
    /// All of the scan's keys and values, in scan order, read block by block: the
    /// index entries first, then every block holding any of the values once, in log
    /// order. Where the scan's records lie scattered through the log among other data
    /// (the file system's metadata among small files' contents), iterating reads a
    /// block again for each batch of keys that needs it; this reads it once and
    /// sequentially. Holds the whole result in memory: for scans whose values are
    /// small, not for a collection of large documents.
    pub fn gather(mut self) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut entries = Vec::new();
        while let Some(ke) = self.next_key_entry()? {
            entries.push(ke);
        }
        let mut order: Vec<usize> = (0..entries.len()).collect();
        order.sort_unstable_by_key(|&i| (entries[i].1.loc.seg, entries[i].1.loc.off));
        let mut values: Vec<Option<Vec<u8>>> = vec![None; entries.len()];
        let inner = self.snap.inner.clone();
        let mut start = 0;
        while start < order.len() {
            // The next run of entries in at most GATHER_BLOCKS distinct blocks.
            let (mut end, mut blocks) = (start, 0);
            while end < order.len() {
                let loc = entries[order[end]].1.loc;
                let new_block = end == start || {
                    let prev = entries[order[end - 1]].1.loc;
                    (prev.seg, prev.off) != (loc.seg, loc.off)
                };
                if new_block {
                    if blocks == GATHER_BLOCKS {
                        break;
                    }
                    blocks += 1;
                }
                end += 1;
            }
            let run = &order[start..end];
            let items = run
                .iter()
                .enumerate()
                .map(|(j, &i)| Ok((j, entries[i].0.as_slice(), entries[i].1)));
            let f = inner.fetch_values(self.coll, run.len(), items, Some(&self.snap.segs))?;
            if let Some(&j) = f.retired.first() {
                return Err(retired_segment(&inner, &entries[run[j]].1));
            }
            for (j, v) in f.values.into_iter().enumerate() {
                values[run[j]] = v;
            }
            start = end;
        }
        entries
            .into_iter()
            .zip(values)
            .map(|((key, e), v)| {
                v.map(|v| (key, v)).ok_or_else(|| {
                    Error::corruption(
                        crate::segment::segment_path(&inner.dir, e.loc.seg),
                        e.loc.off,
                        "scan found no record where the index points",
                    )
                })
            })
            .collect()
    }
}

impl Iterator for KeyIter {
    type Item = Result<Vec<u8>>;
    fn next(&mut self) -> Option<Self::Item> {
        self.0
            .next_key_entry()
            .map(|o| o.map(|(k, _)| k))
            .transpose()
    }
}

impl Iterator for KeyLenIter {
    type Item = Result<(Vec<u8>, u64)>;
    fn next(&mut self) -> Option<Self::Item> {
        let s = &mut self.0;
        let (key, e) = match s.next_key_entry() {
            Ok(Some(ke)) => ke,
            Ok(None) => return None,
            Err(e) => return Some(Err(e)),
        };
        match crate::record::value_len(s.coll, e.seqno, key.len(), e.rec_size as usize) {
            Some(len) => Some(Ok((key, len as u64))),
            None => {
                s.failed = true;
                let path = crate::segment::segment_path(&s.snap.inner.dir, e.loc.seg);
                Some(Err(Error::corruption(
                    path,
                    e.loc.off,
                    format!("index entry's record size {} fits no value", e.rec_size),
                )))
            }
        }
    }
}

impl Iterator for ScanIter {
    type Item = Result<(Vec<u8>, Vec<u8>)>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        match self.next_entry() {
            Ok(Some(kv)) => Some(Ok(kv)),
            Ok(None) => None,
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::prefix_successor;
    use crate::read_path::READ_AHEAD_BYTES;
    use crate::{Db, Direction, Options};

    #[test]
    fn a_scan_reads_ahead_a_bounded_number_of_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), Options::for_unit_test(8 << 20)).unwrap();
        let c = db.create_collection("c").unwrap();
        let (small, big) = (1000usize, 1536 << 10);
        for i in 0..200u32 {
            let len = if i < 100 { small } else { big };
            c.put(format!("k{i:03}").as_bytes(), &vec![i as u8; len])
                .unwrap();
        }
        db.flush().unwrap();
        drop(c);
        drop(db);
        let db = Db::open(dir.path(), Options::for_unit_test(8 << 20)).unwrap();
        let c = db.collection("c").unwrap();
        let mut it = c.scan_prefix(b"k", Direction::Forward).unwrap();
        let mut most_small = 0;
        let mut most_big = 0;
        for i in 0..200u32 {
            let (k, v) = it.next().unwrap().unwrap();
            assert_eq!(k, format!("k{i:03}").into_bytes());
            assert!(v.iter().all(|&b| b == i as u8));
            let held: u64 = it.ready.iter().map(|r| r.1.rec_size as u64).sum();
            assert!(
                held <= READ_AHEAD_BYTES + big as u64 + 64,
                "{held} bytes of records held after value {i}"
            );
            if i < 90 {
                most_small = most_small.max(it.ready.len());
            } else if i >= 100 {
                most_big = most_big.max(it.ready.len());
            }
        }
        assert!(it.next().is_none());
        assert!(
            most_small >= 31,
            "small values still come in big batches: {most_small}"
        );
        assert!(most_big <= 3, "big values come a few at a time: {most_big}");
    }

    #[test]
    fn prefix_successor_handles_ff_bytes() {
        assert_eq!(prefix_successor(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_successor(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_successor(b"\xff\xff"), None);
        assert_eq!(prefix_successor(b""), None);
    }
}

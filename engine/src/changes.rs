//! The change feed: every put and delete after a seqno, in seqno order, read from
//! the log through each segment's block index (blocks carry their seqno range).
//!
//! Versions known to be superseded (in the delete list) are skipped, GC copies of a
//! record appear once, and records of dropped collections never appear. A consumer
//! resumes by passing the last seqno it processed. Deletes older than the purge seqno
//! (see `Stats::purge_seqno`) may have been collected.

use crate::data_block::DataBlock;
use crate::db::{Inner, OwnedRecord};
use crate::entry::Location;
use crate::error::Result;
use crate::read_path::READ_AHEAD_BYTES;
use crate::record::{CollId, Kind, RecordIter, Seqno};
use crate::segment::BlockInfo;
use crate::segments::{Segment, SegmentMap};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// One change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub seqno: Seqno,
    pub collection: String,
    pub key: Vec<u8>,
    /// `None` for a delete.
    pub value: Option<Vec<u8>>,
}

struct BlockSrc {
    seg: Arc<Segment>,
    info: BlockInfo,
    recs: Option<VecDeque<(Seqno, OwnedRecord)>>,
}

/// Iterator over changes in seqno order.
pub struct ChangeIter {
    inner: Arc<Inner>,
    coll: Option<CollId>,
    since: Seqno,
    upto: Seqno,
    _segs: SegmentMap,
    srcs: Vec<BlockSrc>,
    heap: BinaryHeap<Reverse<(Seqno, usize)>>,
    last: Seqno,
    failed: bool,
    prefetched: HashMap<usize, Arc<DataBlock>>,
}

/// Blocks read together when the feed needs a block that is not loaded yet.
const PREFETCH: usize = 32;

impl ChangeIter {
    pub(crate) fn new(inner: Arc<Inner>, coll: Option<CollId>, since: Seqno) -> Result<ChangeIter> {
        // Seal the open block so every visible write is in a listed block.
        let upto = {
            let mut w = inner.writer.lock();
            w.seal_block(0)?;
            inner.visible_seqno.load(Ordering::SeqCst)
        };
        let segs = inner.segments.read().clone();
        let mut srcs = Vec::new();
        for s in segs.values() {
            for b in s.blocks.read().iter() {
                if b.max_seqno > since && b.min_seqno <= upto {
                    srcs.push(BlockSrc {
                        seg: s.clone(),
                        info: *b,
                        recs: None,
                    });
                }
            }
        }
        // In seqno order, so that prefetching the next blocks in `srcs` reads ahead.
        srcs.sort_by_key(|s| (s.info.min_seqno, s.seg.id, s.info.off));
        let heap = srcs
            .iter()
            .enumerate()
            .map(|(i, s)| Reverse((s.info.min_seqno.max(since + 1), i)))
            .collect();
        Ok(ChangeIter {
            inner,
            coll,
            since,
            upto,
            _segs: segs,
            srcs,
            heap,
            last: since,
            failed: false,
            prefetched: HashMap::new(),
        })
    }

    /// Reads block `i` and, in the same device submission, up to 31 following blocks
    /// (in seqno order) that the feed will need next, no more than [`READ_AHEAD_BYTES`]
    /// in all unless block `i` alone is bigger.
    fn prefetch(&mut self, i: usize) -> Result<()> {
        let mut batch = Vec::new();
        let mut bytes = 0u64;
        for j in i..self.srcs.len().min(i + PREFETCH) {
            let s = &self.srcs[j];
            if s.recs.is_some() || self.prefetched.contains_key(&j) {
                continue;
            }
            let loc = Location {
                seg: s.seg.id,
                off: s.info.off,
                len: s.info.len,
            };
            if self.inner.readable_len(&s.seg, loc).is_some() {
                if !batch.is_empty() && bytes + u64::from(s.info.len) > READ_AHEAD_BYTES {
                    break;
                }
                bytes += u64::from(s.info.len);
                batch.push(j);
            }
        }
        let reads: Vec<(&Arc<Segment>, u64, u32)> = batch
            .iter()
            .map(|&j| {
                (
                    &self.srcs[j].seg,
                    self.srcs[j].info.off,
                    self.srcs[j].info.len,
                )
            })
            .collect();
        let payloads = self.inner.read_blocks(&reads)?;
        self.prefetched.extend(batch.into_iter().zip(payloads));
        Ok(())
    }

    fn load(&mut self, i: usize) -> Result<()> {
        if !self.prefetched.contains_key(&i) {
            self.prefetch(i)?;
        }
        let src = &self.srcs[i];
        let payload = match self.prefetched.remove(&i) {
            Some(p) => p,
            None => {
                let loc = Location {
                    seg: src.seg.id,
                    off: src.info.off,
                    len: src.info.len,
                };
                match self.inner.block_payload(&src.seg, loc, None)? {
                    crate::read_path::BlockPayload::Raw(p) => p,
                    crate::read_path::BlockPayload::Value(_) => unreachable!("no record requested"),
                }
            }
        };
        let garbage = self.inner.garbage.lock();
        let catalog = self.inner.catalog.read();
        let mut recs = Vec::new();
        for item in RecordIter::new(payload.payload()) {
            let (_, r) = item.map_err(|at| {
                crate::Error::malformed_record(src.seg.file.path(), src.info.off, at)
            })?;
            if r.kind == Kind::Catalog || r.seqno <= self.since || r.seqno > self.upto {
                continue;
            }
            if self.coll.is_some_and(|c| c != r.coll) || !catalog.is_live(r.coll) {
                continue;
            }
            if garbage.is_dead(src.seg.id, r.seqno) {
                continue;
            }
            recs.push((r.seqno, OwnedRecord::from(r)));
        }
        recs.sort_by_key(|r| r.0);
        self.srcs[i].recs = Some(recs.into());
        Ok(())
    }

    fn next_change(&mut self) -> Result<Option<Change>> {
        while let Some(Reverse((_, i))) = self.heap.pop() {
            if self.srcs[i].recs.is_none() {
                self.load(i)?;
                if let Some((s, _)) = self.srcs[i].recs.as_ref().and_then(|r| r.front()) {
                    self.heap.push(Reverse((*s, i)));
                }
                continue;
            }
            let Some((seqno, rec)) = self.srcs[i].recs.as_mut().and_then(|r| r.pop_front()) else {
                continue;
            };
            if let Some((s, _)) = self.srcs[i].recs.as_ref().and_then(|r| r.front()) {
                self.heap.push(Reverse((*s, i)));
            } else {
                self.srcs[i].recs = Some(VecDeque::new());
            }
            if seqno <= self.last {
                continue; // a GC copy of a record already emitted
            }
            self.last = seqno;
            let collection = self
                .inner
                .catalog
                .read()
                .name_of(rec.coll)
                .unwrap_or_default()
                .to_string();
            return Ok(Some(Change {
                seqno,
                collection,
                key: rec.key,
                value: (rec.kind == Kind::Put).then_some(rec.value),
            }));
        }
        Ok(None)
    }
}

impl Iterator for ChangeIter {
    type Item = Result<Change>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        match self.next_change() {
            Ok(c) => c.map(Ok),
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::read_path::READ_AHEAD_BYTES;
    use crate::{Db, Options};

    /// Incompressible bytes, so a value's block is as big as the value.
    fn noise(len: usize, seed: u64) -> Vec<u8> {
        use rand::{RngCore, SeedableRng};
        let mut v = vec![0u8; len];
        rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut v);
        v
    }

    #[test]
    fn the_feed_reads_ahead_a_bounded_number_of_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), Options::for_unit_test(8 << 20)).unwrap();
        let c = db.create_collection("c").unwrap();
        let (small, big) = (200usize, 1536 << 10);
        for i in 0..60u64 {
            let len = if i < 30 { small } else { big };
            c.put(format!("k{i:02}").as_bytes(), &noise(len, i))
                .unwrap();
            // One block per value: the feed's read-ahead is counted in blocks.
            db.sync().unwrap();
        }
        let mut feed = c.changes(0).unwrap();
        let (mut most_small, mut most_big) = (0, 0);
        for i in 0..60u64 {
            let ch = feed.next().unwrap().unwrap();
            assert_eq!(ch.key, format!("k{i:02}").into_bytes());
            assert_eq!(ch.value.unwrap().len(), if i < 30 { small } else { big });
            let held: u64 = feed
                .prefetched
                .values()
                .map(|b| b.payload().len() as u64)
                .sum();
            assert!(
                held <= READ_AHEAD_BYTES + big as u64,
                "{held} bytes of blocks held after change {i}"
            );
            if i < 10 {
                most_small = most_small.max(feed.prefetched.len());
            } else if i >= 30 {
                most_big = most_big.max(feed.prefetched.len());
            }
        }
        assert!(feed.next().is_none());
        assert!(
            most_small >= 16,
            "small blocks still come many at a time: {most_small}"
        );
        assert!(most_big <= 3, "big blocks come a few at a time: {most_big}");
    }
}

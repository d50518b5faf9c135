//! Reads of parts of values (`multi_get_ranges`): a value in a paged block
//! ([`crate::paged`]) is read a page range at a time, verified against its block's
//! page checksums; any other value is read whole (as `multi_get` does) and cut.
//!
//! A part costs one device read of the pages that hold it once the block's head is
//! cached (two when it reaches into a rotated value's tail from before it); the first
//! part read from a block reads the head first (one more read of the block's first
//! page or two), unless the part is at least half the value: then the whole block is
//! read at once. All reads of a step go to the device at once.

use crate::db::Inner;
use crate::entry::IndexEntry;
use crate::error::{Error, Result};
use crate::paged::{Geometry, PagedHead};
use crate::record::{CollId, Seqno};
use crate::segments::Segment;
use crate::uring::ReadReq;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A request for part of a value: the key and the byte range of its value.
pub type RangeRequest<'k> = (&'k [u8], Range<usize>);

/// A part of a value to read from a paged block whose head is known.
struct Part {
    slot: usize,
    seg: Arc<Segment>,
    head: Arc<PagedHead>,
}

impl Inner {
    /// Bytes `range` of the values of `reqs`' keys (cut to the value's length; `None`
    /// for a missing key), in the order of `reqs`.
    pub(crate) fn multi_get_ranges(
        &self,
        coll: CollId,
        reqs: &[RangeRequest<'_>],
        snap: Seqno,
    ) -> Result<Vec<Option<Vec<u8>>>> {
        let v = self.version.read().clone();
        self.stats
            .gets
            .fetch_add(reqs.len() as u64, Ordering::Relaxed);
        let mut out: Vec<Option<Vec<u8>>> = vec![None; reqs.len()];
        let mut whole: Vec<(usize, &[u8], IndexEntry)> = Vec::new();
        let mut heads: Vec<(usize, Arc<Segment>, Geometry, Seqno)> = Vec::new();
        let mut parts: Vec<Part> = Vec::new();
        for (slot, (key, range)) in reqs.iter().enumerate() {
            let Some(e) = self.lookup(&v, coll, key, snap)? else {
                continue;
            };
            if e.is_tombstone() {
                continue;
            }
            let Some((seg, g)) = self.paged_geometry(coll, key, &e) else {
                whole.push((slot, *key, e));
                continue;
            };
            let at = (seg.id, e.loc.off);
            if let Some(b) = self.data_cache.get(&at) {
                let path = seg.file.path();
                let r = crate::read_path::find_record_ref(&b, coll, key, e.seqno, path, at.1)?;
                out[slot] = Some(cut(r.value, range));
            } else if let Some(head) = self.head_cache.get(&at) {
                parts.push(Part { slot, seg, head });
            } else if 2 * (range.end.min(g.value_len)).saturating_sub(range.start) >= g.value_len {
                // Most of the value (a sequential reader): one read of the whole block
                // beats a read of its head and then of the part.
                whole.push((slot, *key, e));
            } else {
                heads.push((slot, seg, g, e.seqno));
            }
        }
        // Heads not cached: read, verify and cache them.
        let spans: Vec<_> = heads
            .iter()
            .map(|(_, seg, g, _)| {
                let (start, len) = g.head_pages();
                (seg, start, len)
            })
            .collect();
        self.read_spans(&spans, |j, r| {
            let (slot, seg, g, seqno) = &heads[j];
            let key = reqs[*slot].0;
            let head = PagedHead::parse(&r.buf[..r.done], r.off, g.off, coll, key, *seqno)
                .map_err(|m| Error::corruption(seg.file.path(), g.off, m))?;
            let head = Arc::new(head);
            self.head_cache
                .insert((seg.id, g.off), head.clone(), head.charge());
            parts.push(Part {
                slot: *slot,
                seg: seg.clone(),
                head,
            });
            Ok(())
        })?;
        // The parts themselves: the pages holding each (an empty part reads nothing).
        let mut spans = Vec::with_capacity(parts.len());
        let mut reading = Vec::with_capacity(parts.len());
        for (j, p) in parts.iter().enumerate() {
            let r = &reqs[p.slot].1;
            let z = r.end.min(p.head.value_len());
            out[p.slot] = Some(vec![0; z - r.start.min(z)]);
            for read in p.head.reads_for(r.start, r.end) {
                spans.push((&p.seg, read.start, read.len));
                reading.push((j, read.part));
            }
        }
        self.read_spans(&spans, |i, r| {
            let (j, part) = &reading[i];
            let p = &parts[*j];
            let bytes = p
                .head
                .extract(&r.buf[..r.done], r.off, part.clone())
                .map_err(|(page, m)| Error::corruption(p.seg.file.path(), page, m))?;
            let at = part.start - reqs[p.slot].1.start;
            let dest = out[p.slot].as_mut().expect("allocated above");
            dest[at..at + bytes.len()].copy_from_slice(bytes);
            Ok(())
        })?;
        // Everything else: whole values, cut.
        let slots = reqs.len();
        let mut f = self.fetch_values(coll, slots, whole.into_iter().map(Ok), None)?;
        for i in std::mem::take(&mut f.retired) {
            f.values[i] = self.get_at(coll, reqs[i].0, snap, None)?;
        }
        for (slot, value) in f.values.into_iter().enumerate() {
            if let Some(value) = value {
                out[slot] = Some(cut(&value, &reqs[slot].1));
            }
        }
        Ok(out)
    }

    /// The segment and layout of the block holding `e`'s record, if it is a paged block
    /// written out to the file.
    fn paged_geometry(
        &self,
        coll: CollId,
        key: &[u8],
        e: &IndexEntry,
    ) -> Option<(Arc<Segment>, Geometry)> {
        if (e.rec_size as usize) < crate::block::PAGED_MIN {
            return None;
        }
        let seg = self.segment(e.loc.seg, None)?;
        let len = self.readable_len(&seg, e.loc)?;
        let g = Geometry::guess(
            e.loc.off,
            len,
            e.rec_size as usize,
            coll,
            e.seqno,
            key.len(),
        )?;
        Some((seg, g))
    }

    /// Reads the file ranges `spans` (`(segment, offset, length)`), all submitted at
    /// once (io_uring) or one `pread` each, and hands each completed read to `on_done`
    /// with its index. Counted as point-read device reads.
    pub(crate) fn read_spans(
        &self,
        spans: &[(&Arc<Segment>, u64, u32)],
        mut on_done: impl FnMut(usize, &ReadReq<Arc<Segment>>) -> Result<()>,
    ) -> Result<()> {
        if spans.is_empty() {
            return Ok(());
        }
        self.with_reader(|reader| {
            let mut done = |i: usize, r: &ReadReq<Arc<Segment>>| -> Result<()> {
                self.count_read(r);
                on_done(i, r)
            };
            for &(seg, off, len) in spans {
                reader.queue(ReadReq::covering(seg.clone(), off, len), &mut done)?;
            }
            reader.finish(&mut done)?;
            reader.recycle();
            Ok(())
        })
    }
}

/// Bytes `range` of `value`, cut to its length.
fn cut(value: &[u8], range: &Range<usize>) -> Vec<u8> {
    let z = range.end.min(value.len());
    value[range.start.min(z)..z].to_vec()
}

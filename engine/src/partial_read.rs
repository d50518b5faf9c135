//! Reads of parts of values (`multi_get_ranges`): a value in a paged block
//! ([`crate::paged`]) is read a page range at a time, verified against its block's
//! page checksums; any other value is read whole (as `multi_get` does) and cut.
//!
//! A part costs one device read of the pages that hold it once the block's head is
//! cached (two when it reaches into a rotated value's tail from before it). The first
//! part read from a block also reads the head (the block's first page or two), in the
//! same submission: where a rotated block keeps the part is known from the index entry,
//! so the head and the part take one round trip, and a part next to the head is read
//! with it. Only a block of segment format 3 (not rotated) needs a second round trip
//! once its head is known; there a part of at least half the value reads the whole
//! block at once instead. All reads of a step go to the device at once.

use crate::aligned::PAGE;
use crate::db::Inner;
use crate::entry::IndexEntry;
use crate::error::{Error, Result};
use crate::paged::{Geometry, PageRead, PagedHead};
use crate::record::{CollId, Seqno};
use crate::segments::Segment;
use crate::uring::ReadReq;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A request for part of a value: the key and the byte range of its value.
pub type RangeRequest<'k> = (&'k [u8], Range<usize>);

/// Where a done part goes: its index, its length (`None`: no such key), its buffer.
pub(crate) type OnPart<'c> = dyn FnMut(usize, Option<usize>, &mut [u8]) + 'c;

/// Where [`crate::Db::multi_get_ranges_to`] puts what it reads: the caller owns the
/// buffers and hears of each part as soon as it is complete, so it can use a buffer
/// that holds several parts (a file read of several chunks) once all of them are in.
/// Whole device pages of a part whose place in its buffer is page-aligned are read
/// from the device straight into it (and verified there), not copied in.
///
/// # Safety
/// During one call, `buf(i)` returns the same memory every time, which stays valid and
/// is neither read nor written by anyone else until `done(i)`: the device may be
/// writing into it (asynchronously, outside any borrow) until then.
pub unsafe trait PartSink {
    /// The buffer for part `i`: at least as long as its range.
    fn buf(&mut self, i: usize) -> &mut [u8];
    /// Part `i` is complete: its first `len` bytes are in its buffer (`None`: no such
    /// key). Called once per part; nothing is written to its buffer afterwards.
    fn done(&mut self, i: usize, len: Option<usize>);
}

/// A part of a value in a paged block whose head is not cached.
struct Cold {
    slot: usize,
    seg: Arc<Segment>,
    g: Geometry,
    seqno: Seqno,
}

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
        let mut out: Vec<Option<Vec<u8>>> = vec![None; reqs.len()];
        self.ranges_into(coll, reqs, snap, &mut out)?;
        Ok(out)
    }

    /// Like [`Self::multi_get_ranges`], but part `i` is written to `bufs[i]` (which must
    /// hold `reqs[i]`'s range), and handed to `on_part(i, len, buf)` (`len` is `None`
    /// for a missing key) as soon as it is in place: a part whose pages arrive first
    /// is handed on while the batch's other reads are still in flight. Every part is
    /// handed on exactly once when this returns `Ok`.
    pub(crate) fn multi_get_ranges_each(
        &self,
        coll: CollId,
        reqs: &[RangeRequest<'_>],
        bufs: &mut [&mut [u8]],
        snap: Seqno,
        on_part: &mut OnPart<'_>,
    ) -> Result<()> {
        if reqs.len() != bufs.len() {
            return Err(Error::InvalidArgument(format!(
                "{} buffers for {} ranges: one buffer per range",
                bufs.len(),
                reqs.len()
            )));
        }
        self.multi_get_ranges_to(coll, reqs, snap, &mut Slices { bufs, on_part })
    }

    /// Like [`Self::multi_get_ranges_each`], with the buffers and the news of each
    /// done part in `sink`.
    pub(crate) fn multi_get_ranges_to(
        &self,
        coll: CollId,
        reqs: &[RangeRequest<'_>],
        snap: Seqno,
        sink: &mut (impl PartSink + ?Sized),
    ) -> Result<()> {
        for (i, (_, r)) in reqs.iter().enumerate() {
            let have = sink.buf(i).len();
            if have < r.len() {
                return Err(Error::InvalidArgument(format!(
                    "buffer {i} holds {have} bytes, less than the {} of its range",
                    r.len()
                )));
            }
        }
        let mut out = Sunk {
            sink,
            lens: vec![None; reqs.len()],
        };
        self.ranges_into(coll, reqs, snap, &mut out)
    }

    /// The work of both: each found part is opened in `out`, its bytes placed, and
    /// then it is marked done (once, as soon as nothing more comes for it).
    fn ranges_into(
        &self,
        coll: CollId,
        reqs: &[RangeRequest<'_>],
        snap: Seqno,
        out: &mut impl Parts,
    ) -> Result<()> {
        let out = &mut Tracked {
            out,
            reported: vec![false; reqs.len()],
        };
        let v = self.version.read().clone();
        self.stats
            .gets
            .fetch_add(reqs.len() as u64, Ordering::Relaxed);
        let mut whole: Vec<(usize, &[u8], IndexEntry)> = Vec::new();
        let mut heads: Vec<Cold> = Vec::new();
        let mut parts: Vec<Part> = Vec::new();
        let keys: Vec<&[u8]> = reqs.iter().map(|(key, _)| *key).collect();
        let found = self.lookup_many(&v, coll, &keys, snap)?;
        for (slot, ((key, range), e)) in reqs.iter().zip(found).enumerate() {
            let Some(e) = e else {
                out.done(slot);
                continue;
            };
            if e.is_tombstone() {
                out.done(slot);
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
                put_cut(out, slot, r.value, range);
                out.done(slot);
            } else if let Some(head) = self.head_cache.get(&at) {
                parts.push(Part { slot, seg, head });
            } else if 2 * (range.end.min(g.value_len)).saturating_sub(range.start) >= g.value_len
                && !is_rotated(&seg, e.loc.off)
            {
                // Most of an unrotated value (segment format 3): one read of the whole
                // block beats a read of its head and then of the part. A rotated block's
                // part is read with its head in one round trip anyway, and copied once
                // into place instead of decoded, cached and cut.
                whole.push((slot, *key, e));
            } else {
                heads.push(Cold {
                    slot,
                    seg,
                    g,
                    seqno: e.seqno,
                });
            }
        }
        // Heads not cached: read each with the part's pages where the rotated layout
        // puts them (one round trip), then verify and cache the head.
        self.read_cold_parts(coll, reqs, &heads, out, &mut parts)?;
        // The parts themselves: the pages holding each (an empty part reads nothing),
        // each part done when its last read has landed.
        let mut spans = Vec::with_capacity(parts.len());
        let mut reading = Vec::with_capacity(parts.len());
        let mut left = vec![0usize; parts.len()];
        for (j, p) in parts.iter().enumerate() {
            let r = &reqs[p.slot].1;
            out.open(p.slot, part_len(&p.head, r));
            let reads = p.head.reads_for(r.start, r.end);
            for (read, into) in reads
                .into_iter()
                .flat_map(|x| in_place(out, p.slot, x, r.start))
            {
                spans.push(Span {
                    seg: &p.seg,
                    off: read.start,
                    len: read.len,
                    into,
                });
                reading.push((j, read.part, into.is_some()));
                left[j] += 1;
            }
            if left[j] == 0 {
                out.done(p.slot);
            }
        }
        self.read_spans(&spans, |i, r| {
            let (j, part, direct) = &reading[i];
            let p = &parts[*j];
            let read = (r.off, &r.buf[..r.done]);
            if *direct {
                self.check_in_place(&p.seg, &p.head, read, part)?;
            } else {
                let from = reqs[p.slot].1.start;
                copy_part(&p.seg, &p.head, read, part, from, (&mut *out, p.slot))?;
            }
            left[*j] -= 1;
            if left[*j] == 0 {
                out.done(p.slot);
            }
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
                put_cut(out, slot, &value, &reqs[slot].1);
            }
        }
        for slot in 0..slots {
            out.done(slot);
        }
        Ok(())
    }

    /// Reads the parts `cold` of `reqs` together with their blocks' heads: each head's
    /// pages and, in the same submission, the pages that hold the part if the block is
    /// rotated (a read next to or inside the head's pages joins the head's read). Heads
    /// are verified and cached; a part is checked against its page checksums, put in
    /// `out` and marked done once all these reads have landed. A block whose head shows
    /// another layout (segment format 3) has its part queued in `parts`, to be read with
    /// the head known.
    fn read_cold_parts(
        &self,
        coll: CollId,
        reqs: &[RangeRequest<'_>],
        cold: &[Cold],
        out: &mut impl Parts,
        parts: &mut Vec<Part>,
    ) -> Result<()> {
        // Per cold part: the span of its head read, and its reads with the span each
        // is served from.
        let mut spans: Vec<Span<'_>> = Vec::new();
        let mut plans = Vec::with_capacity(cold.len());
        for c in cold {
            let range = &reqs[c.slot].1;
            let (mut start, len) = c.g.head_pages();
            let mut end = start + len as u64;
            // A read that can land in the caller's buffer goes there on its own; the
            // others join the head's read where they touch it.
            let (reads, intos): (Vec<PageRead>, Vec<Option<*mut u8>>) = (c.g.rotated_layout())
                .reads_for(range.start, range.end)
                .into_iter()
                .flat_map(|r| in_place(out, c.slot, r, range.start))
                .unzip();
            let mut joins = Vec::with_capacity(reads.len());
            for (r, into) in reads.iter().zip(&intos) {
                let r_end = r.start + r.len as u64;
                let join = into.is_none() && r.start <= end && r_end >= start;
                if join {
                    start = start.min(r.start);
                    end = end.max(r_end);
                }
                joins.push(join);
            }
            let head_span = spans.len();
            spans.push(Span {
                seg: &c.seg,
                off: start,
                len: (end - start) as u32,
                into: None,
            });
            let mut served = Vec::with_capacity(reads.len());
            for ((r, join), into) in reads.iter().zip(joins).zip(intos) {
                if join {
                    served.push(head_span);
                } else {
                    served.push(spans.len());
                    spans.push(Span {
                        seg: &c.seg,
                        off: r.start,
                        len: r.len,
                        into,
                    });
                }
            }
            plans.push((head_span, reads, served));
        }
        let direct: Vec<bool> = spans.iter().map(|s| s.into.is_some()).collect();
        // Each read is used where it lands: a head is parsed and cached at once, and a
        // part read is copied straight into its value's buffer once its head is known.
        // Only a part read landing before its own head is kept (copied) until then.
        let mut owner = vec![0usize; spans.len()];
        for (c, (head_span, _, served)) in plans.iter().enumerate() {
            owner[*head_span] = c;
            for &i in served {
                owner[i] = c;
            }
        }
        let mut heads: Vec<Option<Arc<PagedHead>>> = vec![None; cold.len()];
        // Whether the head showed the predicted layout (the part is opened in `out`).
        let mut matched = vec![false; cold.len()];
        // Reads landing before their head: copied until it comes, or (`None`) already
        // in the caller's buffer, to be verified there.
        let mut early: Vec<(usize, u64, Option<Vec<u8>>)> = Vec::new();
        // Copies the parts of cold part `c` that read `span` holds into `out`, or
        // verifies them where the read put them (none if its head showed another
        // layout: those are read again below).
        let fill = |c: usize,
                    span: usize,
                    (buf_off, buf): (u64, &[u8]),
                    head: &PagedHead,
                    matched: bool,
                    out: &mut dyn Parts|
         -> Result<()> {
            if !matched {
                return Ok(());
            }
            let (_, reads, served) = &plans[c];
            let (slot, from) = (cold[c].slot, reqs[cold[c].slot].1.start);
            for (r, _) in reads.iter().zip(served).filter(|(_, &i)| i == span) {
                if direct[span] {
                    self.check_in_place(&cold[c].seg, head, (buf_off, buf), &r.part)?;
                    continue;
                }
                copy_part(
                    &cold[c].seg,
                    head,
                    (buf_off, buf),
                    &r.part,
                    from,
                    (out, slot),
                )?;
            }
            Ok(())
        };
        self.read_spans(&spans, |i, r| {
            let c = owner[i];
            let read = (r.off, &r.buf[..r.done]);
            if plans[c].0 == i {
                let cd = &cold[c];
                let key = reqs[cd.slot].0;
                let head =
                    PagedHead::parse(read.1, read.0, cd.g.off, coll, key, cd.seqno, cd.seg.seed())
                        .map_err(|m| Error::corruption(cd.seg.file.path(), cd.g.off, m))?;
                let head = Arc::new(head);
                self.head_cache
                    .insert((cd.seg.id, cd.g.off), head.clone(), head.charge());
                if *head.layout() == cd.g.rotated_layout() {
                    matched[c] = true;
                    out.open(cd.slot, part_len(&head, &reqs[cd.slot].1));
                }
                fill(c, i, read, &head, matched[c], out)?;
                heads[c] = Some(head);
            } else if let Some(head) = &heads[c] {
                fill(c, i, read, head, matched[c], out)?;
            } else if direct[i] {
                early.push((i, r.off, None));
            } else {
                early.push((i, r.off, Some(read.1.to_vec())));
            }
            Ok(())
        })?;
        for (i, off, copy) in early {
            let c = owner[i];
            let head = heads[c].as_ref().expect("every head was read");
            match copy {
                Some(buf) => fill(c, i, (off, &buf), head, matched[c], out)?,
                None if matched[c] => {
                    // A read in place serves exactly one part: its bytes are where
                    // that part's go.
                    let (_, reads, served) = &plans[c];
                    let r = (reads.iter().zip(served))
                        .find(|(_, &s)| s == i)
                        .map(|(r, _)| r)
                        .expect("a read serves its part");
                    let at = r.part.start - reqs[cold[c].slot].1.start;
                    let buf = out.direct(cold[c].slot).expect("read in place");
                    let bytes = &buf[at..at + r.len as usize];
                    self.check_in_place(&cold[c].seg, head, (off, bytes), &r.part)?;
                }
                None => {}
            }
        }
        for (c, head) in heads.into_iter().enumerate() {
            let head = head.expect("every head was read");
            if matched[c] {
                out.done(cold[c].slot);
            } else {
                parts.push(Part {
                    slot: cold[c].slot,
                    seg: cold[c].seg.clone(),
                    head,
                });
            }
        }
        Ok(())
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
    /// with its index. Counted as point-read device reads. They are queued in file
    /// order, so that ranges which continue each other (a block's head page and its
    /// value's pages, the next block's) go to the device as one read.
    pub(crate) fn read_spans(
        &self,
        spans: &[Span<'_>],
        mut on_done: impl FnMut(usize, &ReadReq<Arc<Segment>>) -> Result<()>,
    ) -> Result<()> {
        if spans.is_empty() {
            return Ok(());
        }
        let mut order: Vec<usize> = (0..spans.len()).collect();
        order.sort_by_key(|&i| (spans[i].seg.id, spans[i].off));
        self.with_reader(|reader| {
            let mut done = |k: usize, r: &ReadReq<Arc<Segment>>| -> Result<()> {
                self.count_read(r);
                on_done(order[k], r)
            };
            for &i in &order {
                let Span {
                    seg,
                    off,
                    len,
                    into,
                } = spans[i];
                let req = match into {
                    None => ReadReq::covering(seg.clone(), off, len),
                    // SAFETY: `into` is page-aligned memory of a `PartSink`'s for
                    // `len` (whole pages) bytes at the page-aligned `off`
                    // ([`in_place`]), valid and untouched until the part is done,
                    // which is after this reader has finished.
                    Some(dest) => unsafe {
                        ReadReq::into_place(seg.clone(), off, dest, len as usize)
                    },
                };
                reader.queue(req, &mut done)?;
            }
            reader.finish(&mut done)?;
            reader.recycle();
            Ok(())
        })
    }
}

/// A file range to read: the whole pages covering `len` bytes at `off` of `seg`, into
/// a buffer of the reader's, or (`into`) straight into a part's place in the caller's
/// buffer.
#[derive(Clone, Copy)]
pub(crate) struct Span<'s> {
    pub seg: &'s Arc<Segment>,
    pub off: u64,
    pub len: u32,
    pub into: Option<*mut u8>,
}

impl<'s> Span<'s> {
    /// A read into a buffer of the reader's.
    pub fn buffered(seg: &'s Arc<Segment>, off: u64, len: u32) -> Self {
        Span {
            seg,
            off,
            len,
            into: None,
        }
    }
}

/// Read `r` of slot `slot`'s part (which starts at value byte `from`), split for
/// reading in place: the whole pages the part fills from the read's first byte on go
/// straight into their place in the slot's buffer when that place is page-aligned
/// (O_DIRECT reads into any page-aligned memory), with where; what is left (a last
/// page the part fills only in part, as a value's body ends before its tail) is read
/// into a buffer of the reader's. A read that cannot land in place is one such read.
fn in_place(
    out: &mut (impl Parts + ?Sized),
    slot: usize,
    r: PageRead,
    from: usize,
) -> impl Iterator<Item = (PageRead, Option<*mut u8>)> {
    let whole = r.part.len() / PAGE * PAGE;
    let dest = (r.lead == 0 && whole > 0)
        .then(|| {
            let at = r.part.start.checked_sub(from)?;
            let dest = out.direct(slot)?.get_mut(at..at + whole)?;
            let ptr = dest.as_mut_ptr();
            (ptr as usize).is_multiple_of(PAGE).then_some(ptr)
        })
        .flatten();
    let Some(dest) = dest else {
        return [Some((r, None)), None].into_iter().flatten();
    };
    let split = r.part.start + whole;
    let pages = PageRead {
        start: r.start,
        len: whole as u32,
        part: r.part.start..split,
        lead: 0,
    };
    let rest = (split < r.part.end).then(|| PageRead {
        start: r.start + whole as u64,
        len: r.len - whole as u32,
        part: split..r.part.end,
        lead: 0,
    });
    [Some((pages, Some(dest))), rest.map(|r| (r, None))]
        .into_iter()
        .flatten()
}

impl Inner {
    /// Verifies value bytes `part`, read in place (they are where they belong), against
    /// `head`'s page checksums, and counts them.
    fn check_in_place(
        &self,
        seg: &Segment,
        head: &PagedHead,
        (buf_off, buf): (u64, &[u8]),
        part: &Range<usize>,
    ) -> Result<()> {
        let bytes = head
            .extract(buf, buf_off, part.clone())
            .map_err(|(page, m)| Error::corruption(seg.file.path(), page, m))?;
        self.stats
            .part_bytes_in_place
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// Whether the block at `off` of `seg` is a rotated paged block (segment format 4).
fn is_rotated(seg: &Segment, off: u64) -> bool {
    seg.block_at(off)
        .is_some_and(|b| b.flags & crate::block::FLAG_ROTATED != 0)
}

/// Where found parts go: a buffer per part, or the caller's buffers.
pub(crate) trait Parts {
    /// Slot `slot`'s key exists; its part is `len` bytes, placed next.
    fn open(&mut self, slot: usize, len: usize);
    /// Bytes at offset `at` of slot `slot`'s (opened) part.
    fn place(&mut self, slot: usize, at: usize, bytes: &[u8]);
    /// Slot `slot` is complete (opened and placed, or missing): nothing more comes for
    /// it.
    fn done(&mut self, _slot: usize) {}
    /// Slot `slot`'s buffer in the caller's memory, where page-aligned whole pages of
    /// its part may be read from the device in place ([`PartSink`]'s promise); `None`:
    /// every byte goes through [`Parts::place`].
    fn direct(&mut self, _slot: usize) -> Option<&mut [u8]> {
        None
    }
}

/// Forwards to `out`, marking each slot done at most once.
struct Tracked<'o, P: Parts> {
    out: &'o mut P,
    reported: Vec<bool>,
}

impl<P: Parts> Parts for Tracked<'_, P> {
    fn open(&mut self, slot: usize, len: usize) {
        self.out.open(slot, len);
    }

    fn place(&mut self, slot: usize, at: usize, bytes: &[u8]) {
        self.out.place(slot, at, bytes);
    }

    fn done(&mut self, slot: usize) {
        if !std::mem::replace(&mut self.reported[slot], true) {
            self.out.done(slot);
        }
    }

    fn direct(&mut self, slot: usize) -> Option<&mut [u8]> {
        self.out.direct(slot)
    }
}

impl Parts for Vec<Option<Vec<u8>>> {
    fn open(&mut self, slot: usize, len: usize) {
        self[slot] = Some(Vec::with_capacity(len));
    }

    fn place(&mut self, slot: usize, at: usize, bytes: &[u8]) {
        place(self[slot].as_mut().expect("opened"), at, bytes);
    }
}

/// A caller's sink and the length of each found part.
struct Sunk<'s, S: PartSink + ?Sized> {
    sink: &'s mut S,
    lens: Vec<Option<usize>>,
}

impl<S: PartSink + ?Sized> Parts for Sunk<'_, S> {
    fn open(&mut self, slot: usize, len: usize) {
        self.lens[slot] = Some(len);
    }

    fn place(&mut self, slot: usize, at: usize, bytes: &[u8]) {
        self.sink.buf(slot)[at..at + bytes.len()].copy_from_slice(bytes);
    }

    fn done(&mut self, slot: usize) {
        self.sink.done(slot, self.lens[slot]);
    }

    fn direct(&mut self, slot: usize) -> Option<&mut [u8]> {
        Some(self.sink.buf(slot))
    }
}

/// The caller's buffers, one per part, and where done parts go.
struct Slices<'a, 'b, 'c> {
    bufs: &'a mut [&'b mut [u8]],
    on_part: &'c mut OnPart<'c>,
}

// SAFETY: each buffer is the caller's slice, borrowed for the whole call.
unsafe impl PartSink for Slices<'_, '_, '_> {
    fn buf(&mut self, i: usize) -> &mut [u8] {
        self.bufs[i]
    }

    fn done(&mut self, i: usize, len: Option<usize>) {
        (self.on_part)(i, len, self.bufs[i]);
    }
}

/// Length of bytes `range` of the value `head` describes, cut to its length.
fn part_len(head: &PagedHead, range: &Range<usize>) -> usize {
    let z = range.end.min(head.value_len());
    z - range.start.min(z)
}

/// Checks value bytes `part` of the read `(offset, bytes)` of `seg` against `head`'s
/// page checksums and places them in slot `slot` of `out`, whose part holds the value
/// from `from` on.
fn copy_part(
    seg: &Segment,
    head: &PagedHead,
    (buf_off, buf): (u64, &[u8]),
    part: &Range<usize>,
    from: usize,
    (out, slot): (&mut (impl Parts + ?Sized), usize),
) -> Result<()> {
    let bytes = head
        .extract(buf, buf_off, part.clone())
        .map_err(|(page, m)| Error::corruption(seg.file.path(), page, m))?;
    out.place(slot, part.start - from, bytes);
    Ok(())
}

/// Writes `bytes` at offset `at` of `dest`: appended when they continue it (reads
/// mostly land in order, and nothing is zeroed first), else over it, extending it with
/// zeros first where they reach past its end (for an earlier part landing later).
fn place(dest: &mut Vec<u8>, at: usize, bytes: &[u8]) {
    if at == dest.len() {
        dest.extend_from_slice(bytes);
        return;
    }
    let end = at + bytes.len();
    if dest.len() < end {
        dest.resize(end, 0);
    }
    dest[at..end].copy_from_slice(bytes);
}

/// Opens slot `slot` of `out` with bytes `range` of `value`, cut to its length.
fn put_cut(out: &mut impl Parts, slot: usize, value: &[u8], range: &Range<usize>) {
    let z = range.end.min(value.len());
    let part = &value[range.start.min(z)..z];
    out.open(slot, part.len());
    out.place(slot, 0, part);
}

#[cfg(test)]
mod tests {
    use super::place;

    #[test]
    fn parts_placed_in_any_order_give_the_value() {
        let value: Vec<u8> = (0..100u8).collect();
        let pieces = [0..30, 30..64, 64..100];
        for order in [[0, 1, 2], [2, 1, 0], [1, 2, 0], [2, 0, 1]] {
            let mut dest = Vec::with_capacity(100);
            for i in order {
                let r = pieces[i].clone();
                place(&mut dest, r.start, &value[r]);
            }
            assert_eq!(dest, value, "pieces placed in the order {order:?}");
        }
    }
}

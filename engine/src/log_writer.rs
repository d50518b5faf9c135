//! The tail of the log: the open block being filled, a page-aligned write buffer, and
//! segment rolling. All of it sits behind the engine's writer mutex.
//!
//! Blocks are packed back to back, but cut so that they end at page boundaries: a
//! point read then costs the fewest pages the block can occupy (a compressed 2 KiB
//! block that straddles a boundary costs an 8 KiB read). The writer estimates a
//! block's compressed size from the previous block's ratio, seals the open block before
//! a record would carry it past its page limit, and, when too little of a page is left
//! for another block, zero-fills the rest of the page ([`FLAG_PAD`]). A block of one
//! large record that is stored raw gets page checksums ([`crate::block::FLAG_PAGED`]),
//! so a part of its value can be read alone.
//!
//! The buffer always starts at a page boundary; when it is written out, a trailing
//! partial page stays in the buffer and is written again (with more data) next time,
//! so every device write is 4 KiB aligned. A buffer that fills up is written on the
//! log IO thread ([`crate::log_io`]) while the writer goes on with the next one;
//! [`LogWriter::write_buf`] (before a sync, a seal or a read of a block not yet on
//! the file) waits for everything queued to land and writes the rest itself.

use crate::aligned::{AlignedBuf, PAGE};
use crate::block::{BlockBuilder, FLAG_CONTINUES, FLAG_PAD, HEADER_LEN, PAGED_MIN};
use crate::codec::{align_down, align_up};
use crate::data_block::DataBlock;
use crate::error::{Error, Result};
use crate::io::{sync_dir, DataFile, IoCounters, IoMode};
use crate::log_io::{Job, LogIo};
use crate::options::Compression;
use crate::record::{RecordRef, Seqno};
use crate::segment::{
    encode_end_page, encode_footer, segment_path, write_header, BlockInfo, SegHeader, SegId,
    DATA_START, SEG_VERSION,
};
use crate::segments::{Segment, SegmentCaches};
use roaring::RoaringTreemap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

const WRITE_BUF: usize = 1 << 20;

/// Extra room preallocated past `segment_size` for the footer (≤ 33 bytes per block).
fn segment_slack(size: u64) -> u64 {
    size / 32 + (64 << 10)
}

pub struct LogWriter {
    pub seg: Arc<Segment>,
    buf: AlignedBuf,
    buf_start: u64,
    buf_len: usize,
    /// Writes full buffers in the background.
    io: LogIo,
    open: BlockBuilder,
    /// Records of the batch in progress that sit in the open block.
    batch_in_open: usize,
    /// Records of the batch in progress added so far.
    batch_added: usize,
    in_batch: bool,
    scratch: Vec<u8>,
    /// The tail segment has an older format version: roll to a new one before the next
    /// write ([`Self::upgrade_format`]).
    roll_before_write: bool,
    /// Where a paged block is laid out; trades places with `scratch`.
    paged_scratch: Vec<u8>,
    pub next_seqno: Seqno,
    /// Seqnos of the GC copies in the tail segment (`None`: unknown, after recovery).
    /// GC leaves out a copy whose seqno the tail already holds (an interrupted attempt's
    /// copy of the same record), so that no segment ever holds a seqno twice (GC's dead
    /// sets are keyed by seqno); while they are unknown, GC starts a fresh segment.
    tail_copies: Option<RoaringTreemap>,
    pub next_seg_id: SegId,
    dir: PathBuf,
    mode: IoMode,
    counters: Arc<IoCounters>,
    cache: SegmentCaches,
    /// Sealed blocks go into the block cache ([`crate::Options::cache_writes`]).
    cache_writes: bool,
    compression: Compression,
    block_size: usize,
    /// Compressed / raw size of the last sealed block (estimates the open block's size).
    ratio: f64,
    segment_size: u64,
    /// Set after a write error that leaves the tail in an unknown state.
    pub poisoned: Option<String>,
}

/// Creates segment `id`: in a recycled file if the pool has one (see
/// [`crate::recycle`]), else in a new one; preallocates its space (so that running out
/// of disk shows up here, before any record is accepted), writes the header page and
/// syncs.
pub fn create_segment(
    dir: &std::path::Path,
    id: SegId,
    mode: IoMode,
    counters: Arc<IoCounters>,
    cache: SegmentCaches,
    size: u64,
) -> Result<Arc<Segment>> {
    let path = segment_path(dir, id);
    let room = size + segment_slack(size);
    let mut header = SegHeader::current(0);
    let mut file = None;
    if let Some((old, free)) = cache.recycler.take() {
        match reuse_file(&free, &path, id, old, mode, &counters, room) {
            Ok(f) => {
                cache.recycler.note_reused();
                header = SegHeader::current(old);
                file = Some(f);
            }
            Err(e) => {
                tracing::warn!(
                    "cannot reuse {} for segment {id}: {e}; creating a new file",
                    free.display()
                );
                // Whichever name the file has now: a new file is made below.
                let _ = std::fs::remove_file(&free);
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    let file = match file {
        Some(f) => f,
        None => {
            let file = DataFile::open(&path, mode, true, counters)?;
            let res = file
                .preallocate(room)
                .and_then(|_| write_header(&file, id, header));
            if let Err(e) = res {
                drop(file);
                let _ = std::fs::remove_file(&path);
                return Err(e);
            }
            file
        }
    };
    sync_dir(dir)?;
    if header.recycled_from != 0 {
        crate::failpoint::hit("recycled-segment-created");
    }
    Ok(Arc::new(Segment::new(
        id,
        header,
        file,
        Vec::new(),
        false,
        DATA_START,
        cache,
    )))
}

/// Makes the free file `free` (which held segment `old`) segment `id` at `path`:
/// preallocates `room`, zeroes its last page (the old footer's end marker, so the file
/// reads as an unsealed tail), writes the new header naming `old`, syncs, renames.
/// The blocks `old` left in the file stay: their checksums carry `old`'s seed.
fn reuse_file(
    free: &std::path::Path,
    path: &std::path::Path,
    id: SegId,
    old: SegId,
    mode: IoMode,
    counters: &Arc<IoCounters>,
    room: u64,
) -> Result<DataFile> {
    {
        let file = DataFile::open(free, mode, false, counters.clone())?;
        file.preallocate(room)?;
        let len = file.len()?;
        if len > DATA_START {
            let last = crate::codec::align_down(len - 1, PAGE as u64);
            file.write_aligned(&AlignedBuf::zeroed(PAGE), last)?;
        }
        write_header(&file, id, SegHeader::current(old))?;
    }
    std::fs::rename(free, path).map_err(|e| Error::io(path, e))?;
    DataFile::open(path, mode, false, counters.clone())
}

impl LogWriter {
    #[allow(clippy::too_many_arguments)]
    /// A writer appending to `seg` at `end` (the end of its last committed block).
    pub fn resume(
        seg: Arc<Segment>,
        end: u64,
        next_seqno: Seqno,
        next_seg_id: SegId,
        dir: PathBuf,
        mode: IoMode,
        counters: Arc<IoCounters>,
        cache: SegmentCaches,
        opts: &crate::Options,
    ) -> Result<Self> {
        let buf_start = align_down(end, PAGE as u64);
        let mut buf = AlignedBuf::zeroed(WRITE_BUF);
        let buf_len = (end - buf_start) as usize;
        if buf_len > 0 {
            let n = seg.file.read_full(&mut buf[..PAGE], buf_start)?;
            if n < buf_len {
                return Err(Error::corruption(
                    seg.file.path(),
                    buf_start,
                    "tail page shorter than the committed data",
                ));
            }
            buf[buf_len..PAGE].fill(0);
        }
        Ok(LogWriter {
            seg,
            buf,
            buf_start,
            buf_len,
            io: LogIo::start(WRITE_BUF),
            open: BlockBuilder::default(),
            batch_in_open: 0,
            batch_added: 0,
            in_batch: false,
            scratch: Vec::new(),
            roll_before_write: false,
            paged_scratch: Vec::new(),
            next_seqno,
            // An empty tail holds no copies; a recovered one may.
            tail_copies: (end <= DATA_START).then(RoaringTreemap::new),
            next_seg_id,
            dir,
            mode,
            counters,
            cache,
            cache_writes: opts.cache_writes,
            compression: opts.compression,
            block_size: opts.block_size,
            ratio: 1.0,
            segment_size: opts.segment_size,
            poisoned: None,
        })
    }

    /// End of the committed log in the tail segment (where the open block will go).
    pub fn end(&self) -> u64 {
        self.buf_start + self.buf_len as u64
    }

    pub fn check_poisoned(&self) -> Result<()> {
        match &self.poisoned {
            Some(m) => Err(Error::Poisoned(m.clone())),
            None => Ok(()),
        }
    }

    /// Makes sure the tail segment can take a batch of about `bytes`; rolls to a new
    /// segment if needed, or if the batch holds GC copies (`copies`) and the tail's
    /// copies are unknown. Errors here (e.g. ENOSPC) leave the log unchanged.
    pub fn prepare(&mut self, bytes: u64, copies: bool) -> Result<Option<Arc<Segment>>> {
        self.check_poisoned()?;
        let full = self.end() + self.open.raw_len() as u64 + bytes > self.segment_size
            && self.end() > DATA_START;
        let unknown_copies = copies && self.tail_copies.is_none() && self.end() > DATA_START;
        if !self.seg.sealed.load(Ordering::SeqCst)
            && !full
            && !unknown_copies
            && !self.roll_before_write
        {
            if self.tail_copies.is_none() && self.end() == DATA_START {
                self.tail_copies = Some(RoaringTreemap::new());
            }
            return Ok(None);
        }
        if !self.seg.sealed.load(Ordering::SeqCst) {
            self.seal_segment()?;
        }
        let size = self.segment_size.max(bytes + PAGE as u64);
        let seg = create_segment(
            &self.dir,
            self.next_seg_id,
            self.mode,
            self.counters.clone(),
            self.cache.clone(),
            size,
        )?;
        self.next_seg_id += 1;
        self.roll_before_write = false;
        self.seg = seg.clone();
        self.tail_copies = Some(RoaringTreemap::new());
        self.buf_start = DATA_START;
        self.buf_len = 0;
        Ok(Some(seg))
    }

    /// Whether the tail segment already holds a GC copy of `seqno`.
    pub fn tail_holds_copy(&self, seqno: Seqno) -> bool {
        self.tail_copies.as_ref().is_some_and(|c| c.contains(seqno))
    }

    /// Records the seqnos of the GC copies a committed batch put in the tail.
    pub fn note_copies(&mut self, seqnos: impl IntoIterator<Item = Seqno>) {
        if let Some(c) = &mut self.tail_copies {
            c.extend(seqnos);
        }
    }

    /// A batch of copies failed part way: which copies the tail holds is unknown, so
    /// the next GC commit starts a fresh segment.
    pub fn forget_copies(&mut self) {
        self.tail_copies = None;
    }

    /// Makes the tail segment, written by an older format version, take no blocks of
    /// this one: an empty tail gets this version's header (a single-sector write); a
    /// tail holding data is sealed and a new segment started before the next write.
    pub fn upgrade_format(&mut self) -> Result<()> {
        if self.end() == DATA_START {
            let h = SegHeader::current(self.seg.recycled_from);
            write_header(&self.seg.file, self.seg.id, h)?;
            self.seg.set_version(SEG_VERSION);
            return Ok(());
        }
        self.roll_before_write = true;
        Ok(())
    }

    /// Starts a write batch.
    pub fn begin_batch(&mut self) {
        self.in_batch = true;
        self.batch_in_open = 0;
        self.batch_added = 0;
    }

    /// Ends a write batch: its records may now share a block with the next batch.
    pub fn end_batch(&mut self) {
        self.in_batch = false;
        self.batch_in_open = 0;
        self.batch_added = 0;
    }

    /// Ends a batch that failed with `err`. If any of its records were added, part of
    /// it is in the tail (an [`Self::add`] fails only while sealing a block that then
    /// stays in the log stream), and the next batch would seal the rest of the open
    /// block and end the chain, making a half batch durable. So the writer refuses
    /// every write until the database is reopened; recovery drops a batch whose
    /// chain has no end. A batch that failed before adding anything changes nothing.
    pub fn fail_batch(&mut self, err: &Error) {
        if self.batch_added > 0 && self.poisoned.is_none() {
            self.poisoned = Some(format!(
                "a write batch failed after {} of its records were logged ({err}); \
                 reopen the database to go on writing",
                self.batch_added
            ));
        }
        self.end_batch();
    }

    /// Appends a record to the open block; returns the offset the block will have.
    pub fn add(&mut self, rec: &RecordRef<'_>) -> Result<u64> {
        if !self.open.is_empty()
            && (self.open.raw_len() + rec.encoded_len() > self.block_size
                || !self.open.has_room()
                || self.would_pass_page_limit(rec.encoded_len()))
        {
            let flags = if self.in_batch && self.batch_in_open > 0 {
                FLAG_CONTINUES
            } else {
                0
            };
            self.seal_block(flags)?;
        }
        self.open.add(rec);
        if self.in_batch {
            self.batch_in_open += 1;
            self.batch_added += 1;
        }
        Ok(self.end())
    }

    /// Estimated on-disk length of a block holding `raw` bytes of records.
    fn estimated_len(&self, raw: usize) -> u64 {
        HEADER_LEN as u64 + (raw as f64 * self.ratio) as u64
    }

    /// Whether adding `more` raw bytes to the open block would carry it past the page
    /// boundary it should end at.
    ///
    /// That boundary is the last one a full block (`block_size` raw bytes) starting
    /// here would reach, so that a block occupies the fewest pages its size allows; or,
    /// when the open block already reaches past that one (or a full block would end
    /// inside this page), the first boundary the open block has not reached yet.
    fn would_pass_page_limit(&self, more: usize) -> bool {
        let start = self.end();
        let page = PAGE as u64;
        let now = start + self.estimated_len(self.open.raw_len());
        let full_end = align_down(start + self.estimated_len(self.block_size), page);
        let limit = if full_end > start && full_end >= now {
            full_end
        } else {
            align_up(now, page)
        };
        start + self.estimated_len(self.open.raw_len() + more) > limit
    }

    /// Whether a block ending at `end` should be followed by zeros up to the page
    /// boundary: true when the rest of the page could not hold a block of one record as
    /// large as the largest in the block just sealed (`largest` raw bytes). At most an
    /// eighth of a page is given up this way.
    fn pad_after(&self, end: u64, largest: usize) -> bool {
        let left = align_up(end, PAGE as u64) - end;
        left > 0 && left < self.estimated_len(largest).min(PAGE as u64 / 8)
    }

    /// Finds `(coll, key, seqno)` in the open block (for reads of unsealed records).
    pub fn read_open(&self, off: u64, coll: u32, key: &[u8], seqno: Seqno) -> Option<Vec<u8>> {
        if off != self.end() || self.open.is_empty() {
            return None;
        }
        crate::record::RecordIter::new(self.open.raw())
            .filter_map(|r| r.ok())
            .find(|(_, r)| r.coll == coll && r.key == key && r.seqno == seqno)
            .map(|(_, r)| r.value.to_vec())
    }

    /// Seals the open block (if any) into the write buffer.
    pub fn seal_block(&mut self, flags: u8) -> Result<()> {
        if self.open.is_empty() {
            return Ok(());
        }
        // A buffer left full by a failed write goes out first, so that a write that
        // still fails leaves the open block as it is (the append below could not
        // take any of it, and the block would be lost).
        if self.buf_len == self.buf.len() {
            let r = self.submit_buf();
            self.note_io_error(r)?;
        }
        let off = self.end();
        let raw_len = self.open.raw_len();
        let nrecs = self.open.nrecs();
        let largest = self.open.largest();
        let cached = self.cache_writes.then(|| {
            Arc::new(
                DataBlock::new(self.open.raw().to_vec(), nrecs as usize)
                    .expect("records the writer encoded decode"),
            )
        });
        self.scratch.clear();
        self.open.seal_unframed(&mut self.scratch, self.compression);
        self.ratio = (self.scratch.len() - HEADER_LEN) as f64 / raw_len.max(1) as f64;
        if nrecs == 1 && raw_len >= PAGED_MIN && self.scratch[9] == 0 {
            crate::block::make_paged(&mut self.scratch, off, true, &mut self.paged_scratch);
        }
        let disk_len = self.scratch.len();
        let pad = self.pad_after(off + disk_len as u64, largest);
        let flags = if pad { flags | FLAG_PAD } else { flags };
        crate::block::frame(&mut self.scratch, flags, self.seg.seed());
        let h =
            crate::block::BlockHeader::parse(&self.scratch).expect("freshly sealed block parses");
        debug_assert_eq!(h.nrecs, nrecs);
        let info = BlockInfo {
            off,
            len: self.scratch.len() as u32,
            raw_len: raw_len as u32,
            min_seqno: h.min_seqno,
            max_seqno: h.max_seqno,
            flags: h.flags,
        };
        if let Some(cached) = cached {
            let charge = cached.charge();
            self.cache.blocks.insert((self.seg.id, off), cached, charge);
        }
        // Listed before it is appended: an append that fails once the whole block is
        // in the buffer leaves it in the log stream (written when the write is retried).
        self.seg
            .raw_bytes
            .fetch_add(info.raw_len as u64, Ordering::Relaxed);
        self.seg.blocks.write().push(info);
        if flags & FLAG_CONTINUES == 0 {
            self.batch_in_open = 0;
        }
        let data = std::mem::take(&mut self.scratch);
        let mut res = self.append(&data);
        self.scratch = data;
        if pad && res.is_ok() {
            let gap = (align_up(self.end(), PAGE as u64) - self.end()) as usize;
            res = self.append(&[0u8; PAGE][..gap]);
        }
        res
    }

    /// Appends `data` to the write buffer, writing out the buffers it fills. When a
    /// write fails (e.g. ENOSPC) after part of `data` went into the buffer, the log
    /// would go on after a cut-short block, so the writer is poisoned (reopen to go
    /// on); a failure with all of `data` buffered can be retried.
    fn append(&mut self, mut data: &[u8]) -> Result<()> {
        while !data.is_empty() {
            if crate::aligned::fill(&mut self.buf, &mut self.buf_len, &mut data) {
                let r = self.submit_buf();
                if let Err(e) = self.note_io_error(r) {
                    if !data.is_empty() && self.poisoned.is_none() {
                        self.poisoned = Some(format!(
                            "a log write failed in the middle of a block ({e}); \
                             reopen the database to go on writing"
                        ));
                    }
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Writes the buffer out (padding the last page with zeros) and waits until it and
    /// every write before it have landed; a trailing partial page stays in memory to
    /// be rewritten with more data later.
    pub fn write_buf(&mut self) -> Result<()> {
        let r = self.write_inline();
        self.note_io_error(r)
    }

    /// Writes the buffer on this thread once the queued writes have landed, and keeps
    /// its trailing partial page at the front for the next write. A failed write
    /// changes nothing here: the same bytes go out again with the next one.
    fn write_inline(&mut self) -> Result<()> {
        if self.buf_len == 0 {
            return self.io.wait_all();
        }
        let aligned = align_up(self.buf_len as u64, PAGE as u64) as usize;
        self.buf[self.buf_len..aligned].fill(0);
        self.io
            .write_now(&self.seg, &self.buf, self.buf_start, self.buf_len)?;
        let full = align_down(self.buf_len as u64, PAGE as u64) as usize;
        self.buf.copy_within(full..self.buf_len, 0);
        self.buf_start += full as u64;
        self.buf_len -= full;
        Ok(())
    }

    /// Hands the buffer to the log IO thread and goes on in a fresh one that starts
    /// with the trailing partial page.
    fn submit_buf(&mut self) -> Result<()> {
        if self.buf_len == 0 {
            return Ok(());
        }
        let mut next = self.io.buffer()?;
        let aligned = align_up(self.buf_len as u64, PAGE as u64) as usize;
        self.buf[self.buf_len..aligned].fill(0);
        let full = align_down(self.buf_len as u64, PAGE as u64) as usize;
        let tail = self.buf_len - full;
        next[..tail].copy_from_slice(&self.buf[full..self.buf_len]);
        let buf = std::mem::replace(&mut self.buf, next);
        self.io.submit(Job {
            seg: self.seg.clone(),
            buf,
            start: self.buf_start,
            len: self.buf_len,
        });
        self.buf_start += full as u64;
        self.buf_len = tail;
        Ok(())
    }

    /// A failed log write leaves the tail in an unknown state, except for a full disk:
    /// the write is tried again once space is freed.
    fn note_io_error(&mut self, r: Result<()>) -> Result<()> {
        if let Err(e) = &r {
            if !matches!(e, Error::NoSpace { .. }) {
                self.poisoned = Some(e.to_string());
            }
        }
        r
    }

    /// Seals the open block and writes everything out; returns the segment to fsync
    /// and the end position covered.
    pub fn flush_tail(&mut self) -> Result<(Arc<Segment>, u64)> {
        self.check_poisoned()?;
        self.seal_block(0)?;
        self.write_buf()?;
        Ok((self.seg.clone(), self.end()))
    }

    /// Seals the tail segment: writes its footer and fsyncs.
    fn seal_segment(&mut self) -> Result<()> {
        self.flush_tail()?;
        let data_end = self.end();
        let footer = {
            let blocks = self.seg.blocks.read();
            encode_footer(&blocks, data_end)
        };
        let at = align_up(data_end, PAGE as u64);
        let end = at + footer.len() as u64;
        let res = self.seg.file.write_aligned(&footer, at).and_then(|_| {
            let len = self.seg.file.len()?;
            if self.seg.recycled_from != 0 && len % PAGE as u64 == 0 && len >= end + PAGE as u64 {
                // A reused file keeps its length, all of it written, for its next
                // reuse: the end marker goes on its last page (zeroed at reuse).
                self.seg
                    .file
                    .write_aligned(&encode_end_page(at), len - PAGE as u64)?;
            } else {
                self.seg.file.set_len(end)?;
            }
            self.seg.file.sync_data()
        });
        if let Err(e) = res {
            self.poisoned = Some(e.to_string());
            return Err(e);
        }
        self.seg.sealed.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Seals and closes the tail for shutdown (no footer: it stays the tail).
    pub fn close(&mut self) -> Result<()> {
        let (seg, _) = self.flush_tail()?;
        seg.file.sync_data()
    }
}

#[cfg(test)]
mod tests {
    use crate::segment::BlockInfo;
    use crate::{Compression, Db, Durability, Options};
    use rand::{Rng, SeedableRng};

    /// Pages a block touches, and the fewest it could touch given its length.
    fn pages(b: &BlockInfo) -> (u64, u64) {
        let page = crate::aligned::PAGE as u64;
        let first = b.off / page;
        let last = (b.off + b.len as u64 - 1) / page;
        (last - first + 1, (b.len as u64).div_ceil(page))
    }

    /// Writes `n` db_bench-like records (20-byte keys, values that lz4 halves: 400 bytes,
    /// or 40 to 1200 when `varied`), then returns every block of every segment in log
    /// order.
    fn load(dir: &std::path::Path, block_size: usize, varied: bool, n: u64) -> Vec<BlockInfo> {
        let db = Db::open(
            dir,
            Options {
                block_size,
                compression: Compression::Lz4,
                durability: Durability::NoSync,
                background_gc: false,
                ..Options::default()
            },
        )
        .unwrap();
        let c = db.create_collection("c").unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for i in 0..n {
            let len = if varied { rng.gen_range(40..1200) } else { 400 };
            let mut v = vec![b'x'; len];
            rng.fill(&mut v[..len / 2]);
            c.put(format!("{i:020}").as_bytes(), &v).unwrap();
        }
        db.flush().unwrap();
        let segs = db.inner.segments.read().clone();
        let blocks = segs
            .values()
            .flat_map(|s| s.blocks.read().clone())
            .collect();
        drop(c);
        db.close().unwrap();
        blocks
    }

    /// A synced commit writes the log itself once the IO thread has nothing queued,
    /// rather than handing the write over and waiting to be woken; a batch larger than
    /// the write buffer still hands its full buffers to the IO thread. Both read back
    /// after a reopen.
    #[test]
    fn synced_commits_write_the_log_on_the_committing_thread() {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options {
            durability: Durability::SyncEveryWrite,
            background_gc: false,
            ..Options::default()
        };
        let db = Db::open(dir.path(), opts.clone()).unwrap();
        let c = db.create_collection("c").unwrap();
        let inline = |db: &Db| db.inner.writer.lock().io.written_inline();
        let before = inline(&db);
        for i in 0..50u32 {
            c.put(format!("small{i}").as_bytes(), &vec![i as u8; 3000])
                .unwrap();
        }
        let small = inline(&db) - before;
        let mut big = crate::WriteBatch::new();
        for i in 0..40u32 {
            big.put("c", format!("big{i}").as_bytes(), &vec![i as u8; 64 << 10]);
        }
        let before = inline(&db);
        db.write(&big).unwrap();
        let after_big = inline(&db) - before;
        println!("50 synced puts: {small} buffers written inline; a 2.5 MiB batch: {after_big}");
        assert_eq!(small, 50, "each synced put writes its own page(s) inline");
        assert_eq!(
            after_big, 1,
            "the batch's last partial buffer is written inline"
        );
        drop(c);
        db.close().unwrap();
        let db = Db::open(dir.path(), opts).unwrap();
        let c = db.collection("c").unwrap();
        for i in 0..50u32 {
            assert_eq!(
                c.get(format!("small{i}").as_bytes()).unwrap().unwrap(),
                vec![i as u8; 3000]
            );
        }
        for i in 0..40u32 {
            assert_eq!(
                c.get(format!("big{i}").as_bytes()).unwrap().unwrap(),
                vec![i as u8; 64 << 10]
            );
        }
    }

    #[test]
    fn blocks_end_at_page_boundaries_and_padding_stays_small() {
        for (block_size, varied) in [(4096, false), (16384, false), (4096, true)] {
            let dir = tempfile::tempdir().unwrap();
            let blocks = load(dir.path(), block_size, varied, 20_000);
            let extra = blocks.iter().filter(|b| pages(b).0 > pages(b).1).count();
            let data: u64 = blocks.iter().map(|b| b.len as u64).sum();
            let gaps: u64 = blocks
                .windows(2)
                .filter(|w| w[1].off > w[0].off)
                .map(|w| w[1].off - (w[0].off + w[0].len as u64))
                .sum();
            println!(
                "block_size {block_size}, varied sizes {varied}: {} blocks, {extra} touch a \
                 page more than their length needs; padding {gaps} B over {data} B of blocks",
                blocks.len()
            );
            // Packed back to back, about half of them would.
            assert!(
                extra * 20 <= blocks.len(),
                "block_size {block_size}: {extra} of {} blocks touch an extra page",
                blocks.len()
            );
            assert!(
                gaps * 16 <= data,
                "block_size {block_size}: padding {gaps} B is over 1/16 of {data} B"
            );
            // Every padded block is followed by zeros up to a page boundary.
            for w in blocks.windows(2).filter(|w| w[1].off > w[0].off) {
                let padded = w[0].flags & crate::block::FLAG_PAD != 0;
                let end = w[0].off + w[0].len as u64;
                assert_eq!(w[1].off != end, padded, "{w:?}");
                if padded {
                    assert_eq!(w[1].off % crate::aligned::PAGE as u64, 0, "{w:?}");
                }
            }
            // Recovery reads the padded log back and `check` accepts it.
            let db = Db::open(dir.path(), Options::default()).unwrap();
            let c = db.collection("c").unwrap();
            for i in (0..20_000u64).step_by(97) {
                assert!(c.get(format!("{i:020}").as_bytes()).unwrap().is_some());
            }
            drop(c);
            db.close().unwrap();
            let report = crate::check::check(dir.path()).unwrap();
            assert!(report.problems.is_empty(), "{:?}", report.problems);
        }
    }

    #[test]
    fn a_non_zero_byte_in_padding_is_reported_with_its_offset() {
        let dir = tempfile::tempdir().unwrap();
        let blocks = load(dir.path(), 4096, false, 2_000);
        let b = blocks
            .iter()
            .find(|b| b.flags & crate::block::FLAG_PAD != 0)
            .expect("some block is padded");
        let at = b.off + b.len as u64 + 1;
        let seg = crate::segment::segment_path(dir.path(), 1);
        let mut bytes = std::fs::read(&seg).unwrap();
        bytes[at as usize] = 0x5a;
        std::fs::write(&seg, &bytes).unwrap();
        let report = crate::check::check(dir.path()).unwrap();
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.contains(&format!("non-zero byte at offset {at}"))),
            "{:?}",
            report.problems
        );
        // In the tail, intact blocks follow: damage in the middle of the log refuses to
        // open instead of dropping acknowledged writes.
        let err = Db::open(dir.path(), Options::default())
            .err()
            .expect("refused");
        assert!(err.to_string().contains("seg-00000001.log"), "{err}");
    }
}

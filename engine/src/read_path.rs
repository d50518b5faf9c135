//! Point reads: the index lookup, and values fetched from the data cache, the
//! writer's memory or the device. Batched reads (`multi_get`, scans) queue each
//! block read as soon as the index has resolved its key, so the device works while
//! the next key is looked up, and decode each block as its read completes.

use crate::bloom::key_hash;
use crate::data_block::DataBlock;
use crate::db::{Inner, Version};
use crate::entry::{IndexEntry, Location};
use crate::error::{Error, Result};
use crate::index_run::{IndexReads, Probe};
use crate::options::IoBackend;
use crate::record::{CollId, RecordRef, Seqno};
use crate::segment::{segment_path, SegId};
use crate::segments::{Segment, SegmentMap};
use crate::uring::{ReadReq, Reader, SyncReader};
use foldhash::fast::FixedState;
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Keys a `multi_get` resolves through the index together before queueing their
/// reads. More keys overlap more cache misses (cached lookups in a 3M-key index on
/// the test VM: 0.78 of the one-by-one CPU per key at 4, 0.70 at 8, 0.68 at 16), fewer
/// start the device sooner (16 keys' lookups are ~37 µs, half an NVMe read).
const LOOKUP_CHUNK: usize = 8;

/// Bytes a scan or the change feed reads in one batch (a batch always takes its first
/// record or block): 64 values or 32 blocks of up to 64 KiB, one at a time when bigger
/// (64 values of 12 MiB had made `basalt dump` hold 1.8 GB, 32 such blocks
/// `basalt changes` 0.9 GB).
pub(crate) const READ_AHEAD_BYTES: u64 = 4 << 20;

/// `(slot, key, seqno)` of a record wanted from a block.
type Item<'k> = (usize, &'k [u8], Seqno);

/// A block read on behalf of a batch, and the records waiting for it (the first
/// inline: most blocks serve one key, and every allocation here is per key).
struct Want<'k> {
    off: u64,
    len: u32,
    first: Option<Item<'k>>,
    more: Vec<Item<'k>>,
    /// The block once its read has completed (for records that ask for it later).
    block: Option<Arc<DataBlock>>,
}

/// Values fetched for a batch of index entries, by slot.
pub(crate) struct Fetched {
    pub values: Vec<Option<Vec<u8>>>,
    /// Slots whose segment was retired by GC meanwhile: look those keys up again.
    pub retired: Vec<usize>,
}

impl Inner {
    /// Index lookup: newest version of `key` visible at `snap`, honouring relocated copies.
    pub(crate) fn lookup(
        &self,
        v: &Version,
        coll: CollId,
        key: &[u8],
        snap: Seqno,
    ) -> Result<Option<IndexEntry>> {
        let h = key_hash(coll, key);
        let (mut found, done) = lookup_memtables(v, coll, key, h, snap);
        if done {
            return Ok(found);
        }
        for run in &v.runs {
            if let Some(e) = run.get(
                coll,
                key,
                h,
                &self.stats.device_reads,
                &self.stats.get_bytes_read,
            )? {
                if take_run_entry(&mut found, e, snap) {
                    break;
                }
            }
        }
        Ok(found)
    }

    /// [`Inner::lookup`] of each key of a batch (same answers, in the order of
    /// `keys`), each run searched for all keys still open at once
    /// ([`crate::index_run::Run::get_many`]) so that their memory stalls overlap.
    pub(crate) fn lookup_many(
        &self,
        v: &Version,
        coll: CollId,
        keys: &[&[u8]],
        snap: Seqno,
    ) -> Result<Vec<Option<IndexEntry>>> {
        if let [key] = keys {
            // Nothing to overlap: spare the batch's bookkeeping.
            return Ok(vec![self.lookup(v, coll, key, snap)?]);
        }
        let hashes: Vec<u64> = keys.iter().map(|k| key_hash(coll, k)).collect();
        for mt in v.memtables() {
            for &h in &hashes {
                mt.prefetch(h);
            }
        }
        let mut found = Vec::with_capacity(keys.len());
        // Positions of the keys the runs must still be asked about.
        let mut open = Vec::with_capacity(keys.len());
        for (j, (key, &h)) in keys.iter().zip(&hashes).enumerate() {
            let (f, done) = lookup_memtables(v, coll, key, h, snap);
            found.push(f);
            if !done {
                open.push(j);
            }
        }
        let mut probes = Vec::with_capacity(open.len());
        let io = IndexReads {
            reads: &self.stats.device_reads,
            bytes: &self.stats.get_bytes_read,
            ring: self.ring(),
        };
        for run in &v.runs {
            if open.is_empty() {
                break;
            }
            probes.clear();
            probes.extend(open.iter().map(|&j| Probe {
                key: keys[j],
                hash: hashes[j],
            }));
            let mut closed = false;
            run.get_many(coll, &probes, &io, |p, e| {
                closed |= take_run_entry(&mut found[open[p]], e, snap)
            })?;
            if closed {
                open.retain(|&j| found[j].is_none_or(|f| f.reloc));
            }
        }
        Ok(found)
    }

    /// Point read at a snapshot seqno. `pinned` is a snapshot's segment map.
    pub(crate) fn get_at(
        &self,
        coll: CollId,
        key: &[u8],
        snap: Seqno,
        pinned: Option<(&Arc<Version>, &SegmentMap)>,
    ) -> Result<Option<Vec<u8>>> {
        self.stats.gets.fetch_add(1, Ordering::Relaxed);
        for _ in 0..16 {
            let v = match pinned {
                Some((v, _)) => v.clone(),
                None => self.version.read().clone(),
            };
            let Some(e) = self.lookup(&v, coll, key, snap)? else {
                return Ok(None);
            };
            if e.is_tombstone() {
                return Ok(None);
            }
            if let Some(val) = self.read_value(coll, key, &e, pinned.map(|p| p.1))? {
                return Ok(Some(val));
            }
        }
        Err(Error::corruption(
            segment_path(&self.dir, 0),
            0,
            format!(
                "key {:?} points to a segment that keeps disappearing",
                String::from_utf8_lossy(key)
            ),
        ))
    }

    /// Reads the value of the record an index entry points at. `Ok(None)` means the
    /// segment was retired by GC in the meantime: look the key up again.
    pub(crate) fn read_value(
        &self,
        coll: CollId,
        key: &[u8],
        e: &IndexEntry,
        pinned: Option<&SegmentMap>,
    ) -> Result<Option<Vec<u8>>> {
        let Some(seg) = self.segment(e.loc.seg, pinned) else {
            return Ok(None);
        };
        match self.block_payload(&seg, e.loc, Some((coll, key, e.seqno)))? {
            BlockPayload::Value(v) => Ok(Some(v)),
            BlockPayload::Raw(p) => {
                find_record(&p, coll, key, e.seqno, seg.file.path(), e.loc.off).map(Some)
            }
        }
    }

    /// A live segment, from a snapshot's pinned map first.
    pub(crate) fn segment(&self, id: SegId, pinned: Option<&SegmentMap>) -> Option<Arc<Segment>> {
        pinned
            .and_then(|m| m.get(&id).cloned())
            .or_else(|| self.segments.read().get(&id).cloned())
    }

    /// On-disk length of the block at `loc` if it is sealed and fully written to the
    /// file; `None` if it is still the open block or only in the write buffer.
    pub(crate) fn readable_len(&self, seg: &Segment, loc: Location) -> Option<u32> {
        let len = if loc.len > 0 {
            loc.len
        } else {
            seg.block_at(loc.off)?.len
        };
        (loc.off + len as u64 <= seg.written_end.load(Ordering::SeqCst)).then_some(len)
    }

    /// The uncompressed payload of the block at `loc` (from cache, the writer's memory,
    /// or one aligned device read). With `want`, a record still in the open block is
    /// returned directly.
    pub(crate) fn block_payload(
        &self,
        seg: &Arc<Segment>,
        loc: Location,
        want: Option<(CollId, &[u8], Seqno)>,
    ) -> Result<BlockPayload> {
        if let Some(p) = self.data_cache.get(&(seg.id, loc.off)) {
            return Ok(BlockPayload::Raw(p));
        }
        let len = match self.readable_len(seg, loc) {
            Some(len) => len,
            None => {
                let mut w = self.writer.lock();
                if let (Some((coll, key, seqno)), true) = (want, w.seg.id == seg.id) {
                    if let Some(v) = w.read_open(loc.off, coll, key, seqno) {
                        return Ok(BlockPayload::Value(v));
                    }
                }
                let Some(b) = seg.block_at(loc.off) else {
                    return Err(Error::corruption(
                        seg.file.path(),
                        loc.off,
                        "index points to a block that does not exist",
                    ));
                };
                // Sealed but still in the write buffer: write it out, then read it.
                if w.seg.id == seg.id
                    && loc.off + b.len as u64 > seg.written_end.load(Ordering::SeqCst)
                {
                    w.write_buf()?;
                }
                b.len
            }
        };
        let mut out = self.read_blocks(&[(seg, loc.off, len)])?;
        Ok(BlockPayload::Raw(out.pop().expect("one block read")))
    }

    /// Runs `f` with a reader of the active backend: this thread's io_uring ring, or
    /// `pread`s.
    pub(crate) fn with_reader<R>(
        &self,
        f: impl FnOnce(&mut dyn Reader<Arc<Segment>>) -> Result<R>,
    ) -> Result<R> {
        match self.ring() {
            Some((counters, poll)) => crate::uring::with_batch(counters, poll, |b| f(b)),
            None => f(&mut SyncReader::default()),
        }
    }

    /// The io_uring counters and polling budget of reads, `None` with the psync backend.
    fn ring(&self) -> Option<(&crate::uring::RingCounters, std::time::Duration)> {
        match self.io_backend {
            IoBackend::IoUring => Some((
                &self.stats.ring,
                std::time::Duration::from_micros(self.opts.read_poll_micros),
            )),
            IoBackend::Psync => None,
        }
    }

    /// Counts a finished point read in the stats.
    pub(crate) fn count_read(&self, r: &ReadReq<Arc<Segment>>) {
        if !r.merged {
            self.stats.device_reads.fetch_add(1, Ordering::Relaxed);
        }
        self.stats
            .get_bytes_read
            .fetch_add(r.done as u64, Ordering::Relaxed);
    }

    /// Verifies and decodes a finished block read, and offers the block to the cache.
    fn decode_read(&self, off: u64, len: u32, r: &ReadReq<Arc<Segment>>) -> Result<Arc<DataBlock>> {
        let seg = &r.target;
        let skip = (off - r.off) as usize;
        let end = skip + len as usize;
        if r.done < end {
            return Err(Error::corruption(
                seg.file.path(),
                off,
                format!(
                    "short read: block needs {len} bytes, file has {}",
                    r.done.saturating_sub(skip)
                ),
            ));
        }
        let (h, raw) = crate::block::decode(&r.buf[skip..end], seg.file.path(), off, seg.seed())?;
        let block = Arc::new(
            DataBlock::new(raw, h.nrecs as usize)
                .map_err(|at| Error::malformed_record(seg.file.path(), off, at))?,
        );
        self.data_cache
            .offer((seg.id, off), block.clone(), block.charge());
        Ok(block)
    }

    /// Reads, verifies and caches several blocks, all submitted at once (io_uring) or
    /// one `pread` each (psync).
    pub(crate) fn read_blocks(
        &self,
        blocks: &[(&Arc<Segment>, u64, u32)],
    ) -> Result<Vec<Arc<DataBlock>>> {
        let mut out: Vec<Option<Arc<DataBlock>>> = vec![None; blocks.len()];
        let spans: Vec<crate::partial_read::Span<'_>> = (blocks.iter())
            .map(|&(seg, off, len)| crate::partial_read::Span::buffered(seg, off, len))
            .collect();
        self.read_spans(&spans, |i, r| {
            let (_, off, len) = blocks[i];
            out[i] = Some(self.decode_read(off, len, r)?);
            Ok(())
        })?;
        Ok(out
            .into_iter()
            .map(|b| b.expect("every read was handed to on_done"))
            .collect())
    }

    /// Batched point reads: each key is resolved through the index and its block read
    /// queued at once, so lookups overlap the device's work. Keys in the same block
    /// share one read. Results are in the order of `keys`.
    pub(crate) fn multi_get(
        &self,
        coll: CollId,
        keys: &[&[u8]],
        snap: Seqno,
    ) -> Result<Vec<Option<Vec<u8>>>> {
        let v = self.version.read().clone();
        self.stats
            .gets
            .fetch_add(keys.len() as u64, Ordering::Relaxed);
        self.stats.multi_get_batches.fetch_add(1, Ordering::Relaxed);
        // Keys are resolved a chunk at a time: enough for their memory stalls to
        // overlap, few enough that the first reads are queued early.
        let items = keys
            .chunks(LOOKUP_CHUNK)
            .enumerate()
            .flat_map(|(c, chunk)| match self.lookup_many(&v, coll, chunk, snap) {
                Ok(found) => found
                    .into_iter()
                    .enumerate()
                    .filter_map(|(j, e)| {
                        let e = e.filter(|e| !e.is_tombstone())?;
                        let i = c * LOOKUP_CHUNK + j;
                        Some(Ok((i, keys[i], e)))
                    })
                    .collect::<Vec<_>>(),
                Err(err) => vec![Err(err)],
            });
        let mut f = self.fetch_values(coll, keys.len(), items, None)?;
        for i in f.retired {
            f.values[i] = self.get_at(coll, keys[i], snap, None)?;
        }
        Ok(f.values)
    }

    /// The value of an index entry if its block is in the data cache (no device read).
    pub(crate) fn cached_value(
        &self,
        coll: CollId,
        key: &[u8],
        e: &IndexEntry,
        pinned: Option<&SegmentMap>,
    ) -> Result<Option<Vec<u8>>> {
        match self.segment(e.loc.seg, pinned) {
            Some(seg) => self.cached_value_in(&seg, coll, key, e),
            None => Ok(None),
        }
    }

    fn cached_value_in(
        &self,
        seg: &Segment,
        coll: CollId,
        key: &[u8],
        e: &IndexEntry,
    ) -> Result<Option<Vec<u8>>> {
        match self.data_cache.get(&(seg.id, e.loc.off)) {
            Some(b) => find_record(&b, coll, key, e.seqno, seg.file.path(), e.loc.off).map(Some),
            None => Ok(None),
        }
    }

    /// Values of the index entries `items` yields as `(slot, key, entry)`, taken from
    /// the data cache, else read from the device: each block's read is queued as soon
    /// as its entry arrives (one read per block however many entries want it) and
    /// decoded when it completes. Records still in the writer's memory are read after
    /// the batch. Slots not yielded stay `None`.
    pub(crate) fn fetch_values<'k>(
        &self,
        coll: CollId,
        slots: usize,
        items: impl Iterator<Item = Result<(usize, &'k [u8], IndexEntry)>>,
        pinned: Option<&SegmentMap>,
    ) -> Result<Fetched> {
        let mut f = Fetched {
            values: vec![None; slots],
            retired: Vec::new(),
        };
        let mut in_writer: Vec<(usize, &'k [u8], IndexEntry)> = Vec::new();
        let mut wants: Vec<Want<'k>> = Vec::with_capacity(slots);
        let mut by_block: HashMap<(SegId, u64), usize, FixedState> =
            HashMap::with_capacity_and_hasher(slots, FixedState::default());
        self.with_reader(|reader| {
            for item in items {
                let (i, key, e) = item?;
                let Some(seg) = self.segment(e.loc.seg, pinned) else {
                    f.retired.push(i);
                    continue;
                };
                if let Some(&j) = by_block.get(&(seg.id, e.loc.off)) {
                    let w = &mut wants[j];
                    match &w.block {
                        Some(b) => {
                            f.values[i] =
                                Some(find_record(b, coll, key, e.seqno, seg.file.path(), w.off)?)
                        }
                        None => w.more.push((i, key, e.seqno)),
                    }
                    continue;
                }
                if let Some(v) = self.cached_value_in(&seg, coll, key, &e)? {
                    f.values[i] = Some(v);
                    continue;
                }
                let Some(len) = self.readable_len(&seg, e.loc) else {
                    in_writer.push((i, key, e));
                    continue;
                };
                by_block.insert((seg.id, e.loc.off), wants.len());
                wants.push(Want {
                    off: e.loc.off,
                    len,
                    first: Some((i, key, e.seqno)),
                    more: Vec::new(),
                    block: None,
                });
                let req = ReadReq::covering(seg, e.loc.off, len);
                reader.push(req, &mut |j, r| {
                    self.complete(coll, &mut wants[j], &mut f.values, r)
                })?;
            }
            reader.finish(&mut |j, r| self.complete(coll, &mut wants[j], &mut f.values, r))?;
            reader.recycle();
            Ok(())
        })?;
        for (i, key, e) in in_writer {
            match self.read_value(coll, key, &e, pinned)? {
                Some(v) => f.values[i] = Some(v),
                None => f.retired.push(i),
            }
        }
        Ok(f)
    }

    /// A block read for `w` has completed: decode it and hand out the records waiting.
    fn complete(
        &self,
        coll: CollId,
        w: &mut Want<'_>,
        values: &mut [Option<Vec<u8>>],
        r: &ReadReq<Arc<Segment>>,
    ) -> Result<()> {
        self.count_read(r);
        let block = self.decode_read(w.off, w.len, r)?;
        for (i, key, seqno) in w.first.take().into_iter().chain(w.more.drain(..)) {
            values[i] = Some(find_record(
                &block,
                coll,
                key,
                seqno,
                r.target.file.path(),
                w.off,
            )?);
        }
        w.block = Some(block);
        Ok(())
    }
}

/// The write caches' part of an index lookup: the newest version of `key` they hold
/// visible at `snap`, and whether it settles the lookup (a version that is not a
/// relocated copy: the runs hold only older ones).
fn lookup_memtables(
    v: &Version,
    coll: CollId,
    key: &[u8],
    h: u64,
    snap: Seqno,
) -> (Option<IndexEntry>, bool) {
    let mut found: Option<IndexEntry> = None;
    for mt in v.memtables() {
        if let Some(e) = mt.get(coll, key, h, snap) {
            if found.is_none_or(|f| e.supersedes(&f)) {
                found = Some(e);
            }
            if !found.expect("set").reloc {
                return (found, true);
            }
        }
    }
    (found, false)
}

/// Takes a run's entry `e` for a key into the lookup's `found` if it is visible at
/// `snap` and newer; true if the lookup is settled (older runs need not be asked).
fn take_run_entry(found: &mut Option<IndexEntry>, e: IndexEntry, snap: Seqno) -> bool {
    if e.seqno <= snap && found.is_none_or(|f| e.supersedes(&f)) {
        *found = Some(e);
    }
    found.is_some_and(|f| !f.reloc)
}

/// Finds the record (coll, key, seqno) in a block payload and returns its value.
pub(crate) fn find_record(
    block: &DataBlock,
    coll: CollId,
    key: &[u8],
    seqno: Seqno,
    file: &Path,
    off: u64,
) -> Result<Vec<u8>> {
    find_record_ref(block, coll, key, seqno, file, off).map(|r| r.value.to_vec())
}

/// Finds the record (coll, key, seqno) in a block payload, borrowed from it.
pub(crate) fn find_record_ref<'b>(
    block: &'b DataBlock,
    coll: CollId,
    key: &[u8],
    seqno: Seqno,
    file: &Path,
    off: u64,
) -> Result<RecordRef<'b>> {
    block
        .find(coll, key, seqno)
        .ok_or_else(|| Error::corruption(file, off, not_in_block(key, seqno)))
}

/// What is wrong when an index entry's record is not in the block it points at.
pub(crate) fn not_in_block(key: &[u8], seqno: Seqno) -> String {
    format!(
        "index entry for key {:?} seqno {seqno} not found in its block",
        String::from_utf8_lossy(key)
    )
}

pub(crate) enum BlockPayload {
    Raw(Arc<DataBlock>),
    Value(Vec<u8>),
}

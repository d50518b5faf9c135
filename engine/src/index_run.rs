//! Index runs: immutable sorted files of index entries (`idx-NNNNNNNN.run`), the
//! on-disk part of the key index (a small LSM).
//!
//! Layout: 4 KiB-aligned data blocks, then a meta area (block index: first key, offset
//! and page count of every block; then a bloom filter), then a footer page.
//!
//! Data blocks are prefix-compressed entries with restart points (see `index_block`).
//!
//! Footer page: `"BSLTIDX1" | version:u32 | meta_off:u64 | meta_len:u64 | bloom_len:u64 |
//! entries:u64 | min_seqno:u64 | max_seqno:u64 | meta_crc:u32 | footer_crc:u32`.

use crate::aligned::{AlignedBuf, PAGE};
use crate::bloom::{key_hash, Bloom, BloomBuilder};
use crate::cache::ClockCache;
use crate::codec::{align_up, Reader};
use crate::entry::IndexEntry;
use crate::error::{Error, Result};
use crate::index_block::{
    block_get, block_get_many, decode_group, group_count, group_for, prefetch_search, used_len,
    verify_block, BlockBuilder, Group,
};
use crate::index_block::{decode_block_entries, key_prefix};
use crate::io::{DataFile, IoCounters, IoMode};
use crate::record::{CollId, Seqno};
use crate::uring::{ReadReq, RingCounters};
use std::cmp::Ordering as CmpOrdering;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

const RUN_MAGIC: &[u8; 8] = b"BSLTIDX1";
/// Index run format version written by this build.
pub const RUN_VERSION: u32 = 3;
const WRITE_BUF: usize = 1 << 20;
/// Bytes read at once when warming the index cache.
const WARM_READ: usize = 1 << 20;
/// Bloom filter bits per key (about 1% false positives).
const BLOOM_BITS_PER_KEY: usize = 10;

/// Cache of verified index blocks, keyed by (run id, block offset).
pub type IndexCache = ClockCache<(u64, u64), Vec<u8>>;

/// File name of run `id`.
pub fn run_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("idx-{id:08}.run"))
}

/// Parses a run id from a file name.
pub fn parse_run_name(name: &str) -> Option<u64> {
    name.strip_prefix("idx-")?
        .strip_suffix(".run")?
        .parse()
        .ok()
}

/// Streams sorted, unique (collection, key) entries into a new run file.
pub struct RunWriter {
    id: u64,
    file: DataFile,
    buf: AlignedBuf,
    buf_len: usize,
    file_off: u64,
    block: BlockBuilder,
    block_first: Option<(CollId, Box<[u8]>)>,
    index: Vec<(CollId, Box<[u8]>, u64, u32)>,
    bloom: BloomBuilder,
    entries: u64,
    min_seqno: Seqno,
    max_seqno: Seqno,
}

impl RunWriter {
    /// A writer for run `id`, its bloom filter sized for `expected` entries.
    pub fn create(
        dir: &Path,
        id: u64,
        expected: usize,
        mode: IoMode,
        counters: Arc<IoCounters>,
    ) -> Result<Self> {
        let path = run_path(dir, id);
        let file = DataFile::open(&path, mode, true, counters)?;
        file.set_len(0)?;
        Ok(RunWriter {
            id,
            file,
            buf: AlignedBuf::zeroed(WRITE_BUF),
            buf_len: 0,
            file_off: 0,
            block: BlockBuilder::default(),
            block_first: None,
            index: Vec::new(),
            bloom: BloomBuilder::with_capacity(expected, BLOOM_BITS_PER_KEY),
            entries: 0,
            min_seqno: u64::MAX,
            max_seqno: 0,
        })
    }

    /// Adds the next entry; keys must be strictly increasing.
    pub fn add(&mut self, coll: CollId, key: &[u8], e: &IndexEntry) -> Result<()> {
        debug_assert!(e.loc.len > 0, "index runs store resolved block lengths");
        let mut starts_block = self.block.is_empty();
        if !self.block.add_within(coll, key, e, PAGE) {
            self.finish_block()?;
            self.block.add(coll, key, e);
            starts_block = true;
        }
        if starts_block {
            self.block_first = Some((coll, key.into()));
        }
        self.bloom.insert(key_hash(coll, key));
        self.entries += 1;
        self.min_seqno = self.min_seqno.min(e.seqno);
        self.max_seqno = self.max_seqno.max(e.seqno);
        Ok(())
    }

    fn finish_block(&mut self) -> Result<()> {
        if self.block.is_empty() {
            return Ok(());
        }
        let b = self.block.finish();
        let pages = b.len() / PAGE;
        let (coll, key) = self.block_first.take().expect("block has a first key");
        let off = self.file_off + self.buf_len as u64;
        self.index.push((coll, key, off, pages as u32));
        self.append(&b)?;
        Ok(())
    }

    fn append(&mut self, mut data: &[u8]) -> Result<()> {
        while !data.is_empty() {
            if crate::aligned::fill(&mut self.buf, &mut self.buf_len, &mut data) {
                self.file.write_aligned(&self.buf, self.file_off)?;
                self.file_off += self.buf_len as u64;
                self.buf_len = 0;
            }
        }
        Ok(())
    }

    /// Writes meta and footer, fsyncs, and returns the opened run.
    pub fn finish(mut self, cache: Arc<IndexCache>) -> Result<Run> {
        self.finish_block()?;
        let mut meta = Vec::new();
        meta.extend_from_slice(&(self.index.len() as u32).to_le_bytes());
        for (c, k, off, pages) in &self.index {
            meta.extend_from_slice(&c.to_le_bytes());
            meta.extend_from_slice(&(k.len() as u16).to_le_bytes());
            meta.extend_from_slice(k);
            meta.extend_from_slice(&off.to_le_bytes());
            meta.extend_from_slice(&pages.to_le_bytes());
        }
        let meta_len = meta.len() as u64;
        self.bloom.bloom().encode(&mut meta);
        let bloom_len = meta.len() as u64 - meta_len;
        let meta_off = self.file_off + self.buf_len as u64;
        let meta_crc = crc32c::crc32c(&meta);
        meta.resize(align_up(meta.len() as u64, PAGE as u64) as usize, 0);
        let mut footer = vec![0u8; PAGE];
        {
            let mut f = Vec::new();
            f.extend_from_slice(RUN_MAGIC);
            f.extend_from_slice(&RUN_VERSION.to_le_bytes());
            for v in [
                meta_off,
                meta_len,
                bloom_len,
                self.entries,
                self.min_seqno,
                self.max_seqno,
            ] {
                f.extend_from_slice(&v.to_le_bytes());
            }
            f.extend_from_slice(&meta_crc.to_le_bytes());
            let crc = crc32c::crc32c(&f);
            f.extend_from_slice(&crc.to_le_bytes());
            footer[..f.len()].copy_from_slice(&f);
        }
        self.append(&meta)?;
        self.append(&footer)?;
        if self.buf_len > 0 {
            let n = self.buf_len;
            self.file.write_aligned(&self.buf[..n], self.file_off)?;
            self.file_off += n as u64;
            self.buf_len = 0;
        }
        self.file.sync_data()?;
        Run::from_parts(self.id, self.file, cache)
    }
}

/// A verified block without its page padding.
fn data_part(block: &[u8]) -> &[u8] {
    &block[..used_len(block).unwrap_or(block.len())]
}

/// One data block of a run, as its block index lists it.
struct BlockRef {
    first: Box<[u8]>,
    off: u64,
    pages: u32,
}

/// The search key of a block's first entry (or of a key looked up): its collection,
/// then its key's first 8 bytes. Blocks are found by a binary search over these,
/// 16 bytes each in one array (four to a cache line), touching a block's `first`
/// only on a tie.
fn fence(coll: CollId, key: &[u8]) -> u128 {
    ((coll as u128) << 64) | key_prefix(key) as u128
}

/// How a batched lookup reads index blocks missing from the cache, and where it
/// counts those reads.
pub struct IndexReads<'a> {
    /// Device reads of index blocks (added to the engine's point-read counters).
    pub reads: &'a AtomicU64,
    pub bytes: &'a AtomicU64,
    /// The ring's counters and polling budget: several missing blocks go to the device
    /// in one io_uring submission. `None`: one `pread` each (the psync backend).
    pub ring: Option<(&'a RingCounters, std::time::Duration)>,
}

/// A key looked up in [`Run::get_many`], by its position in the caller's batch.
pub struct Probe<'k> {
    pub key: &'k [u8],
    /// `key_hash` of the key (and the collection).
    pub hash: u64,
}

/// An open, immutable index run.
pub struct Run {
    pub id: u64,
    file: DataFile,
    /// End of meta + bloom (start of the zero padding before the footer page).
    meta_end: u64,
    blocks: Vec<BlockRef>,
    /// `fence` of each block's first key, in block order.
    fences: Vec<u128>,
    bloom: Bloom,
    pub entries: u64,
    pub file_size: u64,
    cache: Arc<IndexCache>,
    obsolete: AtomicBool,
}

impl Run {
    /// Opens run `id` in `dir`, verifying its footer and meta checksums.
    pub fn open(
        dir: &Path,
        id: u64,
        mode: IoMode,
        counters: Arc<IoCounters>,
        cache: Arc<IndexCache>,
    ) -> Result<Run> {
        let file = DataFile::open(&run_path(dir, id), mode, false, counters)?;
        Run::from_parts(id, file, cache)
    }

    fn from_parts(id: u64, file: DataFile, cache: Arc<IndexCache>) -> Result<Run> {
        let len = file.len()?;
        let path = file.path().to_path_buf();
        if len < PAGE as u64 || len % PAGE as u64 != 0 {
            return Err(Error::corruption(
                &path,
                len,
                "index run size is not a whole number of pages",
            ));
        }
        let mut page = AlignedBuf::zeroed(PAGE);
        file.read_full(&mut page, len - PAGE as u64)?;
        let foff = len - PAGE as u64;
        let bad = |d: &str| Error::corruption(&path, foff, format!("index run footer: {d}"));
        let mut r = Reader::new(&page);
        if r.bytes(8) != Some(RUN_MAGIC) {
            return Err(bad("bad magic"));
        }
        let version = r.u32().ok_or_else(|| bad("truncated"))?;
        let fields: Vec<u64> = (0..6).map(|_| r.u64().unwrap_or(0)).collect();
        let meta_crc = r.u32().ok_or_else(|| bad("truncated"))?;
        let body_end = r.pos();
        let crc = r.u32().ok_or_else(|| bad("truncated"))?;
        if crc32c::crc32c(&page[..body_end]) != crc {
            return Err(bad("checksum mismatch"));
        }
        if version != RUN_VERSION {
            return Err(Error::FormatVersion {
                file: path,
                found: version,
                supported: RUN_VERSION,
            });
        }
        let (meta_off, meta_len, bloom_len, entries) = (fields[0], fields[1], fields[2], fields[3]);
        if meta_off % PAGE as u64 != 0 || meta_off + meta_len + bloom_len > foff {
            return Err(bad("meta area outside the file"));
        }
        let mlen = align_up(meta_len + bloom_len, PAGE as u64) as usize;
        let mut meta = AlignedBuf::zeroed(mlen.max(PAGE));
        meta.set_len(mlen);
        file.read_full(&mut meta, meta_off)?;
        let meta = &meta[..(meta_len + bloom_len) as usize];
        if crc32c::crc32c(meta) != meta_crc {
            return Err(Error::corruption(
                &path,
                meta_off,
                "index run meta checksum mismatch",
            ));
        }
        let mbad = || Error::corruption(&path, meta_off, "index run block index malformed");
        let mut r = Reader::new(&meta[..meta_len as usize]);
        let n = r.u32().ok_or_else(mbad)? as usize;
        if n > meta.len() {
            return Err(mbad());
        }
        let mut blocks = Vec::with_capacity(n);
        let mut fences = Vec::with_capacity(n);
        for _ in 0..n {
            let c = r.u32().ok_or_else(mbad)?;
            let kl = r.u16().ok_or_else(mbad)? as usize;
            let k = r.bytes(kl).ok_or_else(mbad)?;
            let off = r.u64().ok_or_else(mbad)?;
            let pages = r.u32().ok_or_else(mbad)?;
            if off % PAGE as u64 != 0 || off + pages as u64 * PAGE as u64 > meta_off {
                return Err(mbad());
            }
            fences.push(fence(c, k));
            blocks.push(BlockRef {
                first: k.into(),
                off,
                pages,
            });
        }
        let bloom = Bloom::decode(&meta[meta_len as usize..]).ok_or_else(|| {
            Error::corruption(
                &path,
                meta_off + meta_len,
                "index run bloom filter malformed",
            )
        })?;
        Ok(Run {
            id,
            file,
            meta_end: meta_off + meta_len + bloom_len,
            blocks,
            fences,
            bloom,
            entries,
            file_size: len,
            cache,
            obsolete: AtomicBool::new(false),
        })
    }

    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// Number of data blocks.
    pub fn block_count(&self) -> usize {
        self.blocks.len()
    }

    /// Memory held by this run's block index and bloom filter.
    pub fn memory_bytes(&self) -> usize {
        self.bloom.bytes()
            + self
                .blocks
                .iter()
                .map(|b| {
                    b.first.len() + std::mem::size_of::<BlockRef>() + std::mem::size_of::<u128>()
                })
                .sum::<usize>()
    }

    /// Offset of the first non-zero byte in the padding between the meta area and the
    /// end of the footer's fields (used by `check`).
    pub fn padding_damage(&self) -> Result<Option<u64>> {
        let start = crate::codec::align_down(self.meta_end, PAGE as u64);
        let mut buf = AlignedBuf::zeroed((self.file_size - start) as usize);
        self.file.read_full(&mut buf, start)?;
        let footer_at = (self.file_size - PAGE as u64 - start) as usize;
        let gap = &buf[(self.meta_end - start) as usize..footer_at];
        if let Some(i) = gap.iter().position(|&b| b != 0) {
            return Ok(Some(self.meta_end + i as u64));
        }
        let fields = 8 + 4 + 6 * 8 + 4 + 4;
        if let Some(i) = buf[footer_at + fields..].iter().position(|&b| b != 0) {
            return Ok(Some(start + (footer_at + fields + i) as u64));
        }
        Ok(None)
    }

    /// Verifies every block (checksum, entries, zero padding) and the padding around
    /// the meta area; returns one message per problem, naming file and offset.
    pub fn verify(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let p = self.path().display();
        match self.padding_damage() {
            Ok(Some(at)) => problems.push(format!(
                "corruption in {p} at offset {at}: non-zero byte in padding"
            )),
            Ok(None) => {}
            Err(e) => problems.push(e.to_string()),
        }
        for i in 0..self.blocks.len() {
            let off = self.blocks[i].off;
            match self.block(i, false) {
                Ok(b) => {
                    let used = used_len(&b).unwrap_or(b.len());
                    if decode_block_entries(&b).is_none() {
                        problems.push(format!(
                            "corruption in {p} at offset {off}: index block entries malformed"
                        ));
                    } else if let Some(at) = b[used..].iter().position(|&x| x != 0) {
                        problems.push(format!(
                            "corruption in {p} at offset {}: non-zero byte in block padding",
                            off + (used + at) as u64
                        ));
                    }
                }
                Err(e) => problems.push(e.to_string()),
            }
        }
        problems
    }

    /// Marks the file for deletion once the last reference is dropped.
    pub fn mark_obsolete(&self) {
        self.obsolete.store(true, Ordering::SeqCst);
    }

    /// Whether a merge or drop has replaced this run.
    pub fn is_obsolete(&self) -> bool {
        self.obsolete.load(Ordering::SeqCst)
    }

    /// Reads and verifies data block `i` (through the cache when `cached`).
    pub fn block(&self, i: usize, cached: bool) -> Result<Arc<Vec<u8>>> {
        self.block_counting(i, cached, None)
    }

    /// Like [`Run::block`]; a device read (cache miss) is added to `counters`
    /// (reads, bytes).
    fn block_counting(
        &self,
        i: usize,
        cached: bool,
        counters: Option<(&AtomicU64, &AtomicU64)>,
    ) -> Result<Arc<Vec<u8>>> {
        if cached {
            if let Some(b) = self.cache.get(&(self.id, self.blocks[i].off)) {
                return Ok(b);
            }
        }
        self.read_block(i, cached, counters)
    }

    /// Block `i` read from the device with one `pread`, then as [`Run::loaded`].
    fn read_block(
        &self,
        i: usize,
        cached: bool,
        counters: Option<(&AtomicU64, &AtomicU64)>,
    ) -> Result<Arc<Vec<u8>>> {
        let BlockRef { off, pages, .. } = self.blocks[i];
        let mut buf = AlignedBuf::for_read(pages as usize * PAGE);
        let n = self.file.read_full(&mut buf, off)?;
        let b = self.loaded(i, (n == buf.len()).then_some(&buf[..]), cached, counters);
        buf.recycle();
        b
    }

    /// Block `i` once its pages are read (`None`: a short read): counted in
    /// `counters`, verified, and kept in the cache when `cached`.
    fn loaded(
        &self,
        i: usize,
        pages: Option<&[u8]>,
        cached: bool,
        counters: Option<(&AtomicU64, &AtomicU64)>,
    ) -> Result<Arc<Vec<u8>>> {
        let BlockRef { off, pages: n, .. } = self.blocks[i];
        if let Some((reads, bytes)) = counters {
            reads.fetch_add(1, Ordering::Relaxed);
            bytes.fetch_add(n as u64 * PAGE as u64, Ordering::Relaxed);
        }
        let pages = self.verified(pages, off)?;
        // The cache keeps only the bytes that carry data, not the page padding
        // (which `verify` checks).
        let b = Arc::new(if cached { data_part(pages) } else { pages }.to_vec());
        if cached {
            self.cache.insert((self.id, off), b.clone(), b.len());
        }
        Ok(b)
    }

    /// Blocks `idx` (distinct, none cached) read at once: one io_uring submission
    /// with `ring`, else one `pread` each; counted and cached as [`Run::block_counting`].
    fn load_together(&self, idx: &[usize], io: &IndexReads<'_>) -> Result<Vec<Arc<Vec<u8>>>> {
        let counters = Some((io.reads, io.bytes));
        let (Some((ring, poll)), true) = (io.ring, idx.len() > 1) else {
            return idx
                .iter()
                .map(|&i| self.read_block(i, true, counters))
                .collect();
        };
        let mut out: Vec<Option<Arc<Vec<u8>>>> = vec![None; idx.len()];
        crate::uring::with_batch::<&DataFile, _>(ring, poll, |batch| {
            let mut on_done = |k: usize, r: &ReadReq<&DataFile>| -> Result<()> {
                let pages = (r.done == r.buf.len()).then_some(&r.buf[..]);
                // A read merged into its neighbour's device read adds bytes, not a read.
                let counted = if r.merged {
                    io.bytes.fetch_add(r.buf.len() as u64, Ordering::Relaxed);
                    None
                } else {
                    counters
                };
                out[k] = Some(self.loaded(idx[k], pages, true, counted)?);
                Ok(())
            };
            for &i in idx {
                let BlockRef { off, pages, .. } = self.blocks[i];
                let req = ReadReq::covering(&self.file, off, pages * PAGE as u32);
                crate::uring::Reader::queue(batch, req, &mut on_done)?;
            }
            let r = crate::uring::Reader::finish(batch, &mut on_done);
            crate::uring::Reader::recycle(batch);
            r
        })?;
        Ok(out
            .into_iter()
            .map(|b| b.expect("every read was handed to on_done"))
            .collect())
    }

    /// The block at `off`, read whole into `pages` (`None`: a short read), once its
    /// checksum is verified.
    fn verified<'a>(&self, pages: Option<&'a [u8]>, off: u64) -> Result<&'a [u8]> {
        match pages {
            Some(p) if verify_block(p) => Ok(p),
            _ => Err(Error::corruption(
                self.file.path(),
                off,
                "index block checksum mismatch",
            )),
        }
    }

    /// Reads blocks `first..` with one read of at most `max_bytes` (always at least
    /// block `first`), around the cache, and verifies each: a merge walks a run in
    /// large reads instead of one device round trip per 4 KiB block under O_DIRECT.
    fn read_ahead(&self, first: usize, max_bytes: usize) -> Result<Vec<Arc<Vec<u8>>>> {
        let start = self.blocks[first].off;
        let mut len = self.blocks[first].pages as usize * PAGE;
        let mut end = first + 1;
        while let Some(b) = self.blocks.get(end) {
            let blen = b.pages as usize * PAGE;
            if b.off != start + len as u64 || len + blen > max_bytes {
                break;
            }
            len += blen;
            end += 1;
        }
        let mut buf = AlignedBuf::for_read(len);
        let n = self.file.read_full(&mut buf, start)?;
        let mut out = Vec::with_capacity(end - first);
        for b in &self.blocks[first..end] {
            let from = (b.off - start) as usize;
            let to = from + b.pages as usize * PAGE;
            let pages = (n >= to).then(|| &buf[from..to]);
            out.push(Arc::new(data_part(self.verified(pages, b.off)?).to_vec()));
        }
        buf.recycle();
        Ok(out)
    }

    /// Loads the run's blocks into the index cache in large sequential reads while the
    /// cache has room without evicting anything, so the first lookups after an open
    /// do not each wait for a 4 KiB index read (RocksDB prefetches index blocks into
    /// its cache at table open for the same reason). Stops once `stop` is set.
    /// Returns the bytes cached and whether the cache refused one (it is full).
    pub fn warm(&self, stop: &AtomicBool) -> Result<(u64, bool)> {
        let mut cached = 0u64;
        let mut i = 0;
        while i < self.blocks.len() && !stop.load(Ordering::Relaxed) {
            let chunk = self.read_ahead(i, WARM_READ)?;
            for b in chunk {
                let len = b.len();
                if !self
                    .cache
                    .insert_if_room((self.id, self.blocks[i].off), b, len)
                {
                    return Ok((cached, true));
                }
                cached += len as u64;
                i += 1;
            }
        }
        Ok((cached, false))
    }

    /// Whether block `i`'s first entry is at or before (coll, key), whose fence is `f`.
    fn starts_at_or_before(&self, i: usize, f: u128, key: &[u8]) -> bool {
        match self.fences[i].cmp(&f) {
            CmpOrdering::Less => true,
            CmpOrdering::Greater => false,
            // Same collection and first 8 bytes: the whole keys decide.
            CmpOrdering::Equal => *self.blocks[i].first <= *key,
        }
    }

    /// Index of the block that may hold (coll, key): the last whose first key ≤ it.
    pub fn find_block(&self, coll: CollId, key: &[u8]) -> Option<usize> {
        let f = fence(coll, key);
        let mut base = 0;
        let mut size = self.fences.len();
        if size == 0 {
            return None;
        }
        // Halving as `slice::partition_point` does, keeping the answer in
        // `base..base + size`.
        while size > 1 {
            let half = size / 2;
            if self.starts_at_or_before(base + half, f, key) {
                base += half;
            }
            size -= half;
        }
        self.starts_at_or_before(base, f, key).then_some(base)
    }

    /// Point lookup. An index block read from the device (a cache miss) is counted in
    /// `reads`/`bytes_read`, so "device reads per get" covers index and data.
    pub fn get(
        &self,
        coll: CollId,
        key: &[u8],
        hash: u64,
        reads: &AtomicU64,
        bytes_read: &AtomicU64,
    ) -> Result<Option<IndexEntry>> {
        if !self.bloom.may_contain(hash) {
            return Ok(None);
        }
        let Some(i) = self.find_block(coll, key) else {
            return Ok(None);
        };
        let b = self.block_counting(i, true, Some((reads, bytes_read)))?;
        self.block_get(i, &b, coll, key)
    }

    /// [`Run::get`] of several keys at once, calling `found(j, entry)` for each
    /// `probes[j]` the run holds. Each step is taken for every key before the next
    /// (filter lines, then the binary searches over blocks level by level, then the
    /// blocks), with the memory the next step needs prefetched, so that one key's
    /// cache misses overlap the others' instead of stalling in turn.
    pub fn get_many(
        &self,
        coll: CollId,
        probes: &[Probe<'_>],
        io: &IndexReads<'_>,
        mut found: impl FnMut(usize, IndexEntry),
    ) -> Result<()> {
        if self.fences.is_empty() {
            return Ok(());
        }
        for p in probes {
            self.bloom.prefetch(p.hash);
        }
        // (probe, fence, base): the search state of each key the filter lets through.
        let mut search: Vec<(usize, u128, usize)> = probes
            .iter()
            .enumerate()
            .filter(|(_, p)| self.bloom.may_contain(p.hash))
            .map(|(j, p)| (j, fence(coll, p.key), 0))
            .collect();
        let mut size = self.fences.len();
        while size > 1 {
            let half = size / 2;
            let next = (size - half) / 2;
            for (j, f, base) in &mut search {
                if self.starts_at_or_before(*base + half, *f, probes[*j].key) {
                    *base += half;
                }
                crate::prefetch::prefetch(&self.fences[*base + next]);
            }
            size -= half;
        }
        let mut blocks = Vec::with_capacity(search.len());
        // Keys whose block is not cached: their blocks are read together below, so
        // that k misses cost one device round trip, not k in turn.
        let mut missing: Vec<(usize, usize)> = Vec::new();
        for (j, f, i) in search {
            if self.starts_at_or_before(i, f, probes[j].key) {
                match self.cache.get(&(self.id, self.blocks[i].off)) {
                    Some(b) => {
                        prefetch_search(&b);
                        blocks.push((j, i, b));
                    }
                    None => missing.push((j, i)),
                }
            }
        }
        if !missing.is_empty() {
            let mut idx: Vec<usize> = missing.iter().map(|&(_, i)| i).collect();
            idx.sort_unstable();
            idx.dedup();
            let loaded = self.load_together(&idx, io)?;
            for (j, i) in missing {
                let b = &loaded[idx.binary_search(&i).expect("listed above")];
                blocks.push((j, i, b.clone()));
            }
        }
        let lookups: Vec<(&[u8], &[u8])> = blocks
            .iter()
            .map(|(j, _, b)| (&b[..], probes[*j].key))
            .collect();
        let mut malformed = None;
        block_get_many(&lookups, coll, |n, answer| match answer {
            Ok(Some(e)) => found(blocks[n].0, e),
            Ok(None) => {}
            Err(()) => malformed = malformed.or(Some(blocks[n].1)),
        });
        match malformed {
            Some(i) => Err(self.malformed_block(i)),
            None => Ok(()),
        }
    }

    /// [`block_get`] in block `i`, whose bytes are `b`, with a malformed block reported
    /// as corruption at its offset.
    fn block_get(
        &self,
        i: usize,
        b: &[u8],
        coll: CollId,
        key: &[u8],
    ) -> Result<Option<IndexEntry>> {
        block_get(b, coll, key).map_err(|()| self.malformed_block(i))
    }

    /// The error for data block `i` whose entries do not decode.
    fn malformed_block(&self, i: usize) -> Error {
        Error::corruption(
            self.file.path(),
            self.blocks[i].off,
            "index block entries malformed",
        )
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if self.obsolete.load(Ordering::SeqCst) {
            let _ = std::fs::remove_file(self.file.path());
            self.cache.retain(|(id, _)| *id != self.id);
        }
    }
}

/// A cursor walking a run's entries in either direction from a start key. It decodes
/// one restart group (≤ 16 entries) of one block at a time into reused buffers.
pub struct RunCursor {
    run: Arc<Run>,
    block: usize,
    data: Arc<Vec<u8>>,
    groups: usize,
    group: usize,
    g: Group,
    pos: usize,
    reverse: bool,
    done: bool,
    cached: bool,
    /// Bytes read at once going forward around the cache (0: one block per read).
    readahead: usize,
    /// Blocks read ahead, the first being block `ahead_first`.
    ahead: std::collections::VecDeque<Arc<Vec<u8>>>,
    ahead_first: usize,
}

impl RunCursor {
    /// A forward cursor for merges: reads blocks around the cache, `readahead` bytes
    /// of consecutive blocks at a time.
    pub fn seek_uncached(
        run: Arc<Run>,
        coll: CollId,
        key: Option<&[u8]>,
        readahead: usize,
    ) -> Result<RunCursor> {
        Self::seek_with(run, coll, key, false, false, readahead)
    }

    /// Positions at the first entry ≥ (coll, key) going forward, or the last entry
    /// ≤ (coll, key) going backward (`key = None`: the end of `coll` backward).
    pub fn seek(
        run: Arc<Run>,
        coll: CollId,
        key: Option<&[u8]>,
        reverse: bool,
    ) -> Result<RunCursor> {
        Self::seek_with(run, coll, key, reverse, true, 0)
    }

    fn seek_with(
        run: Arc<Run>,
        coll: CollId,
        key: Option<&[u8]>,
        reverse: bool,
        cached: bool,
        readahead: usize,
    ) -> Result<RunCursor> {
        let nblocks = run.blocks.len();
        let mut c = RunCursor {
            run,
            block: 0,
            data: Arc::new(Vec::new()),
            groups: 0,
            group: 0,
            g: Group::default(),
            pos: 0,
            reverse,
            done: nblocks == 0,
            cached,
            readahead,
            ahead: Default::default(),
            ahead_first: 0,
        };
        if c.done {
            return Ok(c);
        }
        let (sc, sk): (CollId, &[u8]) = match key {
            Some(k) => (coll, k),
            None if reverse => (coll.saturating_add(1), &[]),
            None => (coll, &[]),
        };
        c.load_block(c.run.find_block(sc, sk).unwrap_or(0))?;
        let found = group_for(&c.data, sc, sk).map_err(|()| c.malformed())?;
        if reverse {
            // Last entry ≤ (coll, key) (for key=None: < (coll+1, "")).
            let Some(gi) = found else {
                return c.step_back().map(|()| c);
            };
            c.load_group(gi)?;
            match c.g.count_below(sc, sk, key.is_some()) {
                0 => c.step_back()?,
                p => c.pos = p - 1,
            }
        } else {
            c.load_group(found.unwrap_or(0))?;
            c.pos = c.g.count_below(sc, sk, false);
            if c.pos >= c.g.len() {
                c.step_forward()?;
            }
        }
        Ok(c)
    }

    fn malformed(&self) -> Error {
        self.run.malformed_block(self.block)
    }

    fn load_block(&mut self, i: usize) -> Result<()> {
        self.block = i;
        self.data = if self.readahead > 0 {
            while self.ahead_first < i && self.ahead.pop_front().is_some() {
                self.ahead_first += 1;
            }
            if self.ahead_first != i || self.ahead.is_empty() {
                self.ahead = self.run.read_ahead(i, self.readahead)?.into();
                self.ahead_first = i;
            }
            self.ahead_first += 1;
            self.ahead.pop_front().expect("read_ahead returns block i")
        } else {
            self.run.block(i, self.cached)?
        };
        self.groups = group_count(&self.data).ok_or_else(|| self.malformed())?;
        Ok(())
    }

    fn load_group(&mut self, i: usize) -> Result<()> {
        self.group = i;
        decode_group(&self.data, i, &mut self.g).ok_or_else(|| self.malformed())
    }

    /// To the first entry after the current group (next group or next block).
    fn step_forward(&mut self) -> Result<()> {
        loop {
            if self.group + 1 < self.groups {
                self.load_group(self.group + 1)?;
            } else if self.block + 1 < self.run.blocks.len() {
                self.load_block(self.block + 1)?;
                if self.groups == 0 {
                    continue;
                }
                self.load_group(0)?;
            } else {
                self.done = true;
                return Ok(());
            }
            if !self.g.is_empty() {
                self.pos = 0;
                return Ok(());
            }
        }
    }

    /// To the last entry before the current group (previous group or previous block).
    fn step_back(&mut self) -> Result<()> {
        loop {
            if self.group > 0 {
                self.load_group(self.group - 1)?;
            } else if self.block > 0 {
                self.load_block(self.block - 1)?;
                if self.groups == 0 {
                    continue;
                }
                self.load_group(self.groups - 1)?;
            } else {
                self.done = true;
                return Ok(());
            }
            if !self.g.is_empty() {
                self.pos = self.g.len() - 1;
                return Ok(());
            }
        }
    }

    /// The current entry, if any: (collection, key, index entry).
    pub fn peek(&self) -> Option<(CollId, &[u8], IndexEntry)> {
        (!self.done).then(|| self.g.get(self.pos))
    }

    /// Moves to the next entry in the cursor's direction.
    pub fn advance(&mut self) -> Result<()> {
        if self.done {
            return Ok(());
        }
        if self.reverse {
            if self.pos == 0 {
                self.step_back()
            } else {
                self.pos -= 1;
                Ok(())
            }
        } else {
            self.pos += 1;
            if self.pos >= self.g.len() {
                self.step_forward()
            } else {
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::Location;
    use crate::record::Kind;

    fn entry(seqno: u64) -> IndexEntry {
        IndexEntry {
            seqno,
            kind: Kind::Put,
            reloc: false,
            loc: Location {
                seg: 1,
                off: 4096,
                len: 100,
            },
            rec_size: 50,
        }
    }

    /// Writes run `id` in `dir` holding `keys` (in order) with seqnos 1, 2, ..., and
    /// an index cache of `cache_bytes`; returns it and its IO counters.
    fn write_run(
        dir: &Path,
        id: u64,
        keys: &[(CollId, Vec<u8>)],
        cache_bytes: usize,
    ) -> (Run, Arc<IoCounters>) {
        let counters = Arc::new(IoCounters::default());
        let mut w =
            RunWriter::create(dir, id, keys.len(), IoMode::Buffered, counters.clone()).unwrap();
        for (i, (c, k)) in keys.iter().enumerate() {
            w.add(*c, k, &entry(i as u64 + 1)).unwrap();
        }
        let cache = Arc::new(IndexCache::new(cache_bytes));
        (w.finish(cache).unwrap(), counters)
    }

    #[test]
    fn run_roundtrip_lookup_and_cursors() {
        let dir = tempfile::tempdir().unwrap();
        let keys: Vec<(CollId, Vec<u8>)> = (0..5000u32)
            .map(|i| (3, format!("key{:08}", i * 2).into_bytes()))
            .collect();
        let (run, counters) = write_run(dir.path(), 1, &keys, 1 << 20);
        let cache = run.cache.clone();
        let run = Arc::new(run);
        assert!(run.block_count() > 10);
        let keys: Vec<Vec<u8>> = keys.into_iter().map(|(_, k)| k).collect();
        let n = AtomicU64::new(0);
        for (i, k) in keys.iter().enumerate() {
            let h = key_hash(3, k);
            assert_eq!(
                run.get(3, k, h, &n, &n).unwrap().unwrap().seqno,
                i as u64 + 1
            );
        }
        assert_eq!(
            run.get(3, b"key00000001", key_hash(3, b"key00000001"), &n, &n)
                .unwrap(),
            None
        );
        assert_eq!(
            run.get(4, &keys[0], key_hash(4, &keys[0]), &n, &n).unwrap(),
            None
        );
        // forward from a missing key lands on the next one
        let c = RunCursor::seek(run.clone(), 3, Some(b"key00000003"), false).unwrap();
        assert_eq!(c.peek().unwrap().1, b"key00000004");
        // backward from the end
        let mut c = RunCursor::seek(run.clone(), 3, None, true).unwrap();
        let mut n = 0;
        let mut prev: Option<Vec<u8>> = None;
        while let Some((_, k, _)) = c.peek() {
            if let Some(p) = &prev {
                assert!(k < p.as_slice());
            }
            prev = Some(k.to_vec());
            n += 1;
            c.advance().unwrap();
        }
        assert_eq!(n, keys.len());
        // reopen from disk
        drop(run);
        let r2 = Run::open(dir.path(), 1, IoMode::Buffered, counters, cache).unwrap();
        assert_eq!(r2.entries, 5000);
    }

    /// Keys of three collections that share their first 8 bytes in long stretches
    /// (so block fences tie and whole first keys decide), some shorter than 8 bytes.
    fn tied_keys() -> Vec<(CollId, Vec<u8>)> {
        let mut keys = Vec::new();
        for c in [1, 2, 7] {
            keys.push((c, b"a".to_vec()));
            keys.push((c, b"user".to_vec()));
            for i in 0..4000u32 {
                keys.push((c, format!("user0000{:06}", i * 3).into_bytes()));
            }
            for i in 0..500u32 {
                keys.push((c, format!("zz{:04}", i * 3).into_bytes()));
            }
        }
        keys.sort();
        keys
    }

    /// The block the model says holds (coll, key): the last whose first key ≤ it.
    fn model_block(firsts: &[(CollId, Vec<u8>)], coll: CollId, key: &[u8]) -> Option<usize> {
        firsts
            .partition_point(|(c, k)| (*c, k.as_slice()) <= (coll, key))
            .checked_sub(1)
    }

    #[test]
    fn find_block_and_get_many_answer_as_the_model_when_fences_tie() {
        let dir = tempfile::tempdir().unwrap();
        let keys = tied_keys();
        let (run, _) = write_run(dir.path(), 1, &keys, 1 << 20);
        assert!(run.block_count() > 20, "{} blocks", run.block_count());
        let firsts: Vec<(CollId, Vec<u8>)> = (0..run.block_count())
            .map(|i| {
                let b = run.block(i, false).unwrap();
                let e = decode_block_entries(&b).unwrap();
                (e[0].0, e[0].1.to_vec())
            })
            .collect();
        assert!(
            firsts
                .windows(2)
                .any(|w| fence(w[0].0, &w[0].1) == fence(w[1].0, &w[1].1)),
            "the keys must make neighbouring blocks' fences tie"
        );
        // Every key, its neighbours (missing) and keys of a missing collection.
        let mut probes: Vec<(CollId, Vec<u8>)> = Vec::new();
        for (c, k) in &keys {
            probes.push((*c, k.clone()));
            let mut after = k.clone();
            after.push(b'!');
            probes.push((*c, after));
            probes.push((*c, k[..k.len() - 1].to_vec()));
        }
        probes.extend([(0, b"user".to_vec()), (9, b"a".to_vec()), (7, Vec::new())]);
        let n = AtomicU64::new(0);
        let want: Vec<Option<u64>> = probes
            .iter()
            .map(|(c, k)| {
                assert_eq!(
                    run.find_block(*c, k),
                    model_block(&firsts, *c, k),
                    "{c} {k:?}"
                );
                keys.binary_search(&(*c, k.clone()))
                    .ok()
                    .map(|i| i as u64 + 1)
            })
            .collect();
        // get_many per collection, in batches of assorted sizes.
        let mut got: Vec<Option<u64>> = vec![None; probes.len()];
        for c in [0, 1, 2, 7, 9] {
            let idx: Vec<usize> = (0..probes.len()).filter(|&i| probes[i].0 == c).collect();
            for chunk in idx.chunks(1 + c as usize * 5) {
                let batch: Vec<Probe> = chunk
                    .iter()
                    .map(|&i| Probe {
                        key: &probes[i].1,
                        hash: key_hash(c, &probes[i].1),
                    })
                    .collect();
                let io = IndexReads {
                    reads: &n,
                    bytes: &n,
                    ring: None,
                };
                run.get_many(c, &batch, &io, |j, e| {
                    assert!(got[chunk[j]].replace(e.seqno).is_none(), "answered twice");
                })
                .unwrap();
            }
        }
        for (i, (c, k)) in probes.iter().enumerate() {
            assert_eq!(got[i], want[i], "get_many {c} {k:?}");
            assert_eq!(
                run.get(*c, k, key_hash(*c, k), &n, &n)
                    .unwrap()
                    .map(|e| e.seqno),
                want[i],
                "get {c} {k:?}"
            );
        }
    }

    /// The index blocks a batch misses in the cache are read together: with a ring,
    /// all in one submission (its queue-depth histogram sees them at once), each read
    /// and counted once, then cached; without (psync), one `pread` each. Both answer
    /// as `get`.
    #[test]
    fn get_many_reads_the_index_blocks_a_batch_misses_together() {
        let dir = tempfile::tempdir().unwrap();
        let keys: Vec<(CollId, Vec<u8>)> = (0..20000u32)
            .map(|i| (3, format!("key{i:08}").into_bytes()))
            .collect();
        let (run, _) = write_run(dir.path(), 1, &keys, 64 << 20);
        assert!(run.block_count() >= 32, "{} blocks", run.block_count());
        // Eight keys in eight blocks, and a ninth sharing the first one's block.
        let step = keys.len() / 8;
        let mut batch: Vec<&[u8]> = (0..8).map(|b| &keys[b * step + 1].1[..]).collect();
        batch.push(&keys[2].1);
        let probes: Vec<Probe> = batch
            .iter()
            .map(|k| Probe {
                key: k,
                hash: key_hash(3, k),
            })
            .collect();
        let rings = if crate::uring::available() {
            vec![true, false]
        } else {
            eprintln!("io_uring unavailable: only the psync path is checked");
            vec![false]
        };
        for ring in rings {
            run.cache.retain(|_| false);
            let counters = RingCounters::default();
            let (reads, bytes) = (AtomicU64::new(0), AtomicU64::new(0));
            let io = IndexReads {
                reads: &reads,
                bytes: &bytes,
                ring: ring.then_some((&counters, std::time::Duration::ZERO)),
            };
            let mut got = vec![None; probes.len()];
            run.get_many(3, &probes, &io, |j, e| got[j] = Some(e.seqno))
                .unwrap();
            let n = AtomicU64::new(0);
            for (j, k) in batch.iter().enumerate() {
                let want = run.get(3, k, key_hash(3, k), &n, &n).unwrap();
                assert_eq!(got[j], want.map(|e| e.seqno), "ring {ring}, key {j}");
            }
            assert_eq!(
                reads.load(Ordering::Relaxed),
                8,
                "ring {ring}: one read per block"
            );
            assert!(bytes.load(Ordering::Relaxed) >= 8 * PAGE as u64);
            let depths = counters.queue_depth.snapshot();
            let at_once: u64 = depths[3..].iter().map(|(_, c)| c).sum();
            if ring {
                assert_eq!(at_once, 1, "the eight reads in one submission: {depths:?}");
            } else {
                assert!(depths.iter().all(|(_, c)| *c == 0), "{depths:?}");
            }
            // Now cached: the same batch reads nothing.
            run.get_many(3, &probes, &io, |_, _| {}).unwrap();
            assert_eq!(
                reads.load(Ordering::Relaxed),
                8,
                "ring {ring}: served from the cache"
            );
        }
    }

    /// A merge cursor reads `readahead` bytes of blocks at a time: it walks the same
    /// entries as a cached cursor with one device read per 64 KiB instead of one per
    /// block, and still finds a flipped bit (naming the block's offset).
    #[test]
    fn merge_cursors_read_ahead_in_large_reads_and_verify_every_block() {
        let dir = tempfile::tempdir().unwrap();
        let keys: Vec<(CollId, Vec<u8>)> = (0..200_000u32)
            .map(|i| (2, format!("k{i:08}").into_bytes()))
            .collect();
        let (run, counters) = write_run(dir.path(), 1, &keys, 16 << 20);
        let run = Arc::new(run);
        let walk = |mut c: RunCursor| {
            let mut out = Vec::new();
            while let Some((coll, k, e)) = c.peek() {
                out.push((coll, k.to_vec(), e.seqno));
                c.advance().unwrap();
            }
            out
        };
        let want = walk(RunCursor::seek(run.clone(), 0, Some(&[]), false).unwrap());
        assert_eq!(want.len(), 200_000);
        let before = counters.reads.load(Ordering::Relaxed);
        let got = walk(RunCursor::seek_uncached(run.clone(), 0, Some(&[]), 64 << 10).unwrap());
        let reads = counters.reads.load(Ordering::Relaxed) - before;
        let blocks = run.block_count() as u64;
        println!("{blocks} blocks walked in {reads} reads");
        assert_eq!(got, want);
        assert!(blocks > 64, "{blocks} blocks: too few to read ahead");
        assert!(
            reads <= blocks / 16 + 1,
            "{reads} reads for {blocks} blocks"
        );
        // A flipped bit in a block in the middle of a read-ahead chunk.
        let victim = run.blocks[40].off;
        drop(run);
        let path = run_path(dir.path(), 1);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[victim as usize + 100] ^= 4;
        std::fs::write(&path, &bytes).unwrap();
        let cache = Arc::new(IndexCache::new(1 << 20));
        let run = Arc::new(Run::open(dir.path(), 1, IoMode::Buffered, counters, cache).unwrap());
        let mut c = RunCursor::seek_uncached(run, 0, Some(&[]), 64 << 10).unwrap();
        let err = loop {
            if let Err(e) = c.advance() {
                break e;
            }
            assert!(c.peek().is_some(), "walked past a corrupt block");
        };
        let msg = err.to_string();
        assert!(msg.contains(&victim.to_string()), "{msg}");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
        /// Cursors seeking anywhere in a multi-block, multi-collection run walk exactly
        /// the entries a sorted model holds from that point, forwards and backwards
        /// (group and block boundaries included).
        #[test]
        fn cursors_walk_exactly_the_model_from_any_seek(
            keys in proptest::collection::btree_set((1u32..4, proptest::collection::vec(0u8..4, 1..9)), 1..1500),
            seeks in proptest::collection::vec((0u32..5, proptest::collection::vec(0u8..4, 0..9), proptest::bool::ANY, proptest::bool::ANY), 1..12),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let keys: Vec<(CollId, Vec<u8>)> = keys.into_iter().collect();
            let run = Arc::new(write_run(dir.path(), 1, &keys, 1 << 20).0);
            let model: Vec<(CollId, Vec<u8>, u64)> =
                keys.into_iter().enumerate().map(|(i, (c, k))| (c, k, i as u64 + 1)).collect();
            for (coll, key, reverse, whole) in seeks {
                let key = (!whole).then_some(key);
                let mut c = RunCursor::seek(run.clone(), coll, key.as_deref(), reverse).unwrap();
                let mut got = Vec::new();
                while let Some((gc, gk, e)) = c.peek() {
                    got.push((gc, gk.to_vec(), e.seqno));
                    c.advance().unwrap();
                }
                fn at(m: &(CollId, Vec<u8>, u64)) -> (CollId, &[u8]) {
                    (m.0, m.1.as_slice())
                }
                let want: Vec<(CollId, Vec<u8>, u64)> = match (&key, reverse) {
                    (Some(k), false) => model.iter().filter(|m| at(m) >= (coll, k.as_slice())).cloned().collect(),
                    (None, false) => model.iter().filter(|m| m.0 >= coll).cloned().collect(),
                    (Some(k), true) => model.iter().rev().filter(|m| at(m) <= (coll, k.as_slice())).cloned().collect(),
                    (None, true) => model.iter().rev().filter(|m| m.0 <= coll).cloned().collect(),
                };
                proptest::prop_assert_eq!(got, want);
            }
        }
    }

    #[test]
    fn flipped_bits_in_a_run_file_are_detected() {
        let dir = tempfile::tempdir().unwrap();
        let keys: Vec<(CollId, Vec<u8>)> =
            (0..300u32).map(|i| (1, i.to_be_bytes().to_vec())).collect();
        let counters = write_run(dir.path(), 7, &keys, 1 << 20).1;
        let path = run_path(dir.path(), 7);
        let orig = std::fs::read(&path).unwrap();
        let mut rng = 12345u64;
        for _ in 0..200 {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let bit = (rng >> 11) as usize % (orig.len() * 8);
            let mut c = orig.clone();
            c[bit / 8] ^= 1 << (bit % 8);
            std::fs::write(&path, &c).unwrap();
            let cache = Arc::new(IndexCache::new(1 << 20));
            let detected = match Run::open(dir.path(), 7, IoMode::Buffered, counters.clone(), cache)
            {
                Err(_) => true,
                Ok(r) => !r.verify().is_empty(),
            };
            assert!(detected, "flip of bit {bit} not detected");
        }
    }
}

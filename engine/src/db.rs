//! The engine handle: opening and recovery, the write path (one log write per
//! batch, group commit), point reads, collections, and background threads.

use crate::batch::{BatchOp, WriteBatch};
use crate::cache::ClockCache;
use crate::catalog::{Catalog, CatalogOp};
use crate::checkpoint::{self, Checkpoint, LogPos};
use crate::entry::{IndexEntry, Location};
use crate::error::{Error, Result};
use crate::garbage::{DeadRecord, DeletesPos, GarbageMap};
use crate::index_run::{parse_run_name, run_path, IndexCache, Run};
use crate::io::{probe_direct_io, DataFile, IoCounters, IoMode};
use crate::lock::DirLock;
use crate::log_writer::{create_segment, LogWriter};
use crate::memtable::Memtable;
use crate::observer::{WriteObserver, Written};
use crate::options::{Durability, IoBackend, Options};
use crate::record::{CollId, Kind, RecordIter, RecordRef, Seqno};
use crate::segment::{
    block_seed, check_header, parse_segment_name, read_footer, scan_blocks, segment_path, SegId,
    DATA_START, SEG_VERSION,
};
use crate::segments::{DataCache, HeadCache, Segment, SegmentCaches, SegmentMap};
use crate::stats::StatCounters;
use parking_lot::{Condvar, Mutex, RwLock};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Largest memtable. A skip-list insert costs a cache miss per level, so a huge
/// memtable makes every write slower: 3M db_bench fillrandom/overwrite (lz4, 1 GiB
/// budget) ran at 395k/398k ops/s with 85 MiB memtables, 491k/453k with 32 MiB and
/// 516k/506k with 16 MiB, on the same VM in one sitting.
pub(crate) const MEMTABLE_MAX: u64 = 16 << 20;

/// A writer slowed for GC sleeps once it owes this much delay (shorter sleeps are
/// mostly timer slack).
const GC_DELAY_MIN_SLEEP: Duration = Duration::from_micros(200);
/// Longest GC delay one write pays at once (the rest is owed by the next writes).
const GC_DELAY_MAX_SLEEP: Duration = Duration::from_millis(50);

/// Longest key in bytes.
pub const MAX_KEY_LEN: usize = 4096;
/// Largest value in bytes.
pub const MAX_VALUE_LEN: usize = 16 << 20;

/// The index as of one moment: memtables (newest first) and runs (newest first).
pub(crate) struct Version {
    pub active: Arc<Memtable>,
    pub imm: Vec<Arc<Memtable>>,
    pub runs: Vec<Arc<Run>>,
}

impl Version {
    pub fn memtables(&self) -> impl Iterator<Item = &Arc<Memtable>> {
        std::iter::once(&self.active).chain(self.imm.iter())
    }
}

/// Counters the checkpoint needs, behind the metadata lock that serializes checkpoints.
pub(crate) struct MetaState {
    pub next_run_id: u64,
    pub purge_seqno: Seqno,
}

pub(crate) struct SyncState {
    pub synced_commit: u64,
}

/// Shared state of one open engine.
pub(crate) struct Inner {
    pub dir: PathBuf,
    pub opts: Options,
    pub io_mode: IoMode,
    /// Read backend in use (after any fallback).
    pub io_backend: IoBackend,
    pub counters: Arc<IoCounters>,
    /// Retired segment files kept for reuse.
    pub recycler: Arc<crate::recycle::Recycler>,
    _lock: Option<DirLock>,
    pub read_only: bool,
    pub writer: Mutex<LogWriter>,
    pub commit_no: AtomicU64,
    pub sync: Mutex<SyncState>,
    pub visible_seqno: AtomicU64,
    pub version: RwLock<Arc<Version>>,
    pub segments: RwLock<SegmentMap>,
    pub catalog: RwLock<Catalog>,
    pub garbage: Mutex<GarbageMap>,
    pub meta: Mutex<MetaState>,
    /// Held while flushing a memtable.
    pub flush_lock: Mutex<()>,
    /// Serializes merges (a merge runs without blocking GC; see `index_install`).
    pub merge_lock: Mutex<()>,
    /// Held by GC while it re-checks dead records and inserts copies, and by a merge
    /// or flush while it installs its run, and from its first dropped entry on (see
    /// `flush::maybe_merge`; a flush that may drop entries holds it throughout).
    pub index_install: Mutex<()>,
    pub gc_lock: Mutex<()>,
    pub data_cache: Arc<DataCache>,
    /// Heads of paged blocks, for reads of part of a large value.
    pub head_cache: Arc<HeadCache>,
    pub index_cache: Arc<IndexCache>,
    pub stats: StatCounters,
    pub bg_mutex: Mutex<()>,
    pub bg_cond: Condvar,
    pub shutdown: AtomicBool,
    pub flush_error: Mutex<Option<String>>,
    /// Delay owed per KiB written (ns) while GC is behind its target or merges are
    /// behind (`flush::merge_debt`).
    pub gc_delay_nanos_per_kib: AtomicU64,
    /// The merge debt's part of `gc_delay_nanos_per_kib` (the rest is GC's): the time
    /// writers sleep is counted for each cause in this proportion.
    pub merge_delay_nanos_per_kib: AtomicU64,
    /// A collection was dropped: merge all runs to purge its entries.
    pub want_full_merge: AtomicBool,
    /// Collections created, dropped or renamed since open (see `Db::catalog_changes`).
    pub catalog_changes: AtomicU64,
    /// Of the newer runs' entries, how many (per mille) the last merge into the oldest
    /// run found shadowing an older version (kept in the checkpoint;
    /// `flush::SHADOW_UNMEASURED`, counted as all, until one has measured it). Drives
    /// the merge policy and the merge-debt throttle (`flush::merge_debt`).
    pub shadow_permille: AtomicU64,
    /// A merge's output for the warm-up thread to read into the index cache
    /// (`index_warm::after_merge`); a newer one replaces it.
    pub warm_request: Mutex<Option<Arc<Run>>>,
    /// `stats.gets` at the end of the last merge, and when a merge last found that
    /// gets had run since the one before it (`index_warm::after_merge`).
    pub reads_at_merge: Mutex<(u64, Option<Instant>)>,
    pub next_mem_id: AtomicU64,
    /// Pinned bytes (bloom filters, run block indexes, garbage map) at the last
    /// [`Inner::rebalance_caches`], for resizing the caches without taking the
    /// garbage lock.
    pub pinned_bytes: AtomicU64,
    /// Told about every committed user write (`Db::observe_writes`).
    pub observers: crate::observer::Observers,
}

/// An open engine. Cheap to clone; the engine shuts down when the last clone drops.
#[derive(Clone)]
pub struct Db {
    pub(crate) inner: Arc<Inner>,
    _guard: Arc<CloseGuard>,
}

struct CloseGuard {
    inner: Arc<Inner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for CloseGuard {
    fn drop(&mut self) {
        self.inner.shutdown.store(true, Ordering::SeqCst);
        self.inner.bg_cond.notify_all();
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
        if !self.inner.read_only {
            if let Err(e) = self.inner.writer.lock().close() {
                tracing::error!("closing the log failed: {e}");
            }
        }
    }
}

/// A handle to one collection.
#[derive(Clone)]
pub struct Collection {
    db: Db,
    id: CollId,
    name: String,
}

/// A decoded record for GC and the change feed.
pub(crate) struct OwnedRecord {
    pub kind: Kind,
    pub coll: CollId,
    pub seqno: Seqno,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
}

/// Background loop of `Durability::SyncEveryMs`: one shared fdatasync per interval.
fn periodic_sync_thread(inner: &Arc<Inner>) {
    let Durability::SyncEveryMs(ms) = inner.opts.durability else {
        return;
    };
    while !inner.shutdown.load(Ordering::SeqCst) {
        {
            let mut g = inner.bg_mutex.lock();
            inner
                .bg_cond
                .wait_for(&mut g, Duration::from_millis(ms.max(1)));
        }
        let target = inner.commit_no.load(Ordering::SeqCst);
        if let Err(e) = inner.sync_upto(target) {
            tracing::error!("periodic sync failed: {e}");
        }
    }
}

impl From<RecordRef<'_>> for OwnedRecord {
    fn from(r: RecordRef<'_>) -> Self {
        OwnedRecord {
            kind: r.kind,
            coll: r.coll,
            seqno: r.seqno,
            key: r.key.to_vec(),
            value: r.value.to_vec(),
        }
    }
}

/// What a commit writes: user operations or GC copies.
pub(crate) enum CommitOps<'a> {
    User(Vec<(CollId, Kind, &'a [u8], &'a [u8])>),
    /// GC copies (those the tail segment already holds are left out).
    Reloc(&'a [OwnedRecord]),
    /// Catalog changes, planned from the catalog under the writer lock, logged in one
    /// batch and applied together.
    Catalog(&'a dyn Fn(&Catalog) -> Result<Vec<CatalogOp>>),
}

fn validate_kv(key: &[u8], value: &[u8]) -> Result<()> {
    if key.len() > MAX_KEY_LEN {
        return Err(Error::KeyTooLarge {
            len: key.len(),
            max: MAX_KEY_LEN,
        });
    }
    if value.len() > MAX_VALUE_LEN {
        return Err(Error::ValueTooLarge {
            len: value.len(),
            max: MAX_VALUE_LEN,
        });
    }
    Ok(())
}

impl Db {
    /// Opens (creating if allowed) the engine in `path`, recovering after a crash:
    /// loads the checkpoint, then replays only the log written after it.
    pub fn open(path: impl AsRef<Path>, opts: Options) -> Result<Db> {
        Self::open_inner(path.as_ref(), opts, false)
    }

    /// Opens an existing engine without writing anything and without background
    /// threads (for checks of a stopped engine: `check`, the filesystem's tree
    /// snapshot); writes are refused.
    pub fn open_read_only(path: &Path, opts: Options) -> Result<Db> {
        Self::open_inner(path, opts, true)
    }

    fn open_inner(dir: &Path, opts: Options, read_only: bool) -> Result<Db> {
        opts.validate()?;
        if !dir.exists() {
            if !opts.create_if_missing || read_only {
                return Err(Error::io(
                    dir,
                    std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "data directory does not exist",
                    ),
                ));
            }
            std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        }
        let lock = if read_only {
            None
        } else {
            Some(DirLock::acquire(dir)?)
        };
        let io_mode = if opts.direct_io && probe_direct_io(dir) {
            IoMode::Direct
        } else {
            if opts.direct_io {
                tracing::warn!(
                    "O_DIRECT is not supported on {}: using buffered IO",
                    dir.display()
                );
                eprintln!(
                    "basalt: warning: O_DIRECT is not supported on {}; falling back to buffered IO",
                    dir.display()
                );
            }
            IoMode::Buffered
        };
        let io_backend = match opts.io_backend {
            IoBackend::IoUring if !crate::uring::available() => {
                tracing::warn!("io_uring is not available: reading with pread");
                eprintln!("basalt: warning: io_uring is not available here; falling back to pread (psync)");
                IoBackend::Psync
            }
            b => b,
        };
        let counters = Arc::new(IoCounters::default());
        let cache_bytes = opts.cache_bytes(0, opts.write_cache_bytes());
        let index_cache: Arc<IndexCache> = Arc::new(ClockCache::new((cache_bytes / 2) as usize));
        let data_cache: Arc<DataCache> = Arc::new(ClockCache::with_doorkeeper(
            (cache_bytes / 2) as usize,
            (opts.memory_budget / crate::aligned::PAGE as u64) as usize,
        ));
        // Gets its share with the others at the rebalance that ends `open`.
        let head_cache: Arc<HeadCache> = Arc::new(ClockCache::new(0));
        let recycler = Arc::new(crate::recycle::Recycler::open(
            dir,
            opts.recycle_segments,
            read_only,
        ));
        let caches = SegmentCaches {
            blocks: data_cache.clone(),
            heads: head_cache.clone(),
            recycler: recycler.clone(),
        };

        let ckpt = match checkpoint::read(dir)? {
            Some(c) => c,
            None => {
                let has_data = std::fs::read_dir(dir)
                    .map_err(|e| Error::io(dir, e))?
                    .flatten()
                    .any(|e| {
                        e.file_name()
                            .to_str()
                            .is_some_and(|n| parse_segment_name(n).is_some())
                    });
                if has_data {
                    return Err(Error::corruption(
                        checkpoint::checkpoint_path(dir),
                        0,
                        "CHECKPOINT is missing but segment files exist",
                    ));
                }
                if read_only {
                    return Err(Error::io(
                        dir,
                        std::io::Error::new(
                            std::io::ErrorKind::NotFound,
                            "not a Basalt data directory (no CHECKPOINT)",
                        ),
                    ));
                }
                let c = Checkpoint {
                    last_seqno: 0,
                    replay_from: LogPos {
                        seg: 1,
                        off: DATA_START,
                    },
                    runs: vec![],
                    segments: vec![],
                    deletes_len: 0,
                    deletes_gen: 0,
                    next_run_id: 1,
                    catalog: Catalog::new(),
                    purge_seqno: 0,
                    shadow_permille: None,
                };
                checkpoint::write(dir, &c, &counters)?;
                c
            }
        };

        // Files on disk.
        let mut seg_files = Vec::new();
        let mut run_files = Vec::new();
        for e in std::fs::read_dir(dir)
            .map_err(|e| Error::io(dir, e))?
            .flatten()
        {
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            if let Some(id) = parse_segment_name(name) {
                seg_files.push(id);
            } else if let Some(id) = parse_run_name(name) {
                run_files.push(id);
            }
        }
        seg_files.sort_unstable();
        let max_listed = ckpt.segments.iter().copied().max().unwrap_or(0);
        let live_segs: Vec<SegId> = seg_files
            .iter()
            .copied()
            .filter(|id| ckpt.segments.contains(id) || *id > max_listed)
            .collect();
        for id in &ckpt.segments {
            if !seg_files.contains(id) {
                return Err(Error::corruption(
                    segment_path(dir, *id),
                    0,
                    "segment listed in CHECKPOINT is missing",
                ));
            }
        }
        if !read_only {
            for id in seg_files.iter().filter(|id| !live_segs.contains(id)) {
                let _ = std::fs::remove_file(segment_path(dir, *id));
            }
            for id in run_files.iter().filter(|id| !ckpt.runs.contains(id)) {
                let _ = std::fs::remove_file(run_path(dir, *id));
            }
        }

        let runs = ckpt
            .runs
            .iter()
            .map(|&id| {
                Run::open(dir, id, io_mode, counters.clone(), index_cache.clone()).map(Arc::new)
            })
            .collect::<Result<Vec<_>>>()?;

        // Segments: sealed ones from their footers; the last may be an unsealed tail.
        let mut segments: BTreeMap<SegId, Arc<Segment>> = BTreeMap::new();
        let mut tail_end = None;
        // Format version of the writer's segment's header.
        let mut tail_version = SEG_VERSION;
        let mut next_seqno = ckpt.last_seqno + 1;
        let mut catalog = ckpt.catalog.clone();
        let mut mem_id = 1;
        // Replay fills one memtable with up to the whole write cache.
        let active = Arc::new(Memtable::new(
            mem_id,
            ckpt.replay_from,
            opts.write_cache_bytes(),
        ));
        mem_id += 1;
        let mut replay_dead: Vec<DeadRecord> = Vec::new();
        for (i, &id) in live_segs.iter().enumerate() {
            let path = segment_path(dir, id);
            let file = if read_only {
                DataFile::open_read(&path, io_mode, counters.clone())?
            } else {
                DataFile::open(&path, io_mode, false, counters.clone())?
            };
            let mut hdr = crate::aligned::AlignedBuf::zeroed(crate::aligned::PAGE);
            let n = file.read_full(&mut hdr, 0)?;
            if n < crate::aligned::PAGE {
                if i + 1 == live_segs.len() && !ckpt.segments.contains(&id) && !read_only {
                    // Crashed while creating this segment: nothing was written to it.
                    drop(file);
                    std::fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
                    continue;
                }
                return Err(Error::corruption(&path, 0, "segment header missing"));
            }
            let header = check_header(&hdr, id, &path)?;
            let seed = block_seed(header.version, id);
            tail_version = header.version;
            let footer = read_footer(&file)?;
            let is_last = i + 1 == live_segs.len();
            if footer.is_none() && !is_last {
                return Err(Error::corruption(
                    &path,
                    0,
                    "segment is not sealed but is not the last one",
                ));
            }
            let replay_start = if id < ckpt.replay_from.seg {
                None
            } else if id == ckpt.replay_from.seg {
                Some(ckpt.replay_from.off)
            } else {
                Some(DATA_START)
            };
            let limit = footer.as_ref().map(|(_, end)| *end);
            let (blocks, sealed, end) = match (&footer, replay_start) {
                (Some((blocks, end)), None) => (blocks.clone(), true, *end),
                _ => {
                    // Replay blocks after the checkpoint into the memtable.
                    let start = replay_start.unwrap_or(DATA_START);
                    let scan = scan_blocks(&file, start, limit, seed, |off, _h, bytes| {
                        let (_, raw) = crate::block::decode(bytes, &path, off, seed)?;
                        for item in RecordIter::new(&raw) {
                            let (_, r) =
                                item.map_err(|at| Error::malformed_record(&path, off, at))?;
                            next_seqno = next_seqno.max(r.seqno + 1);
                            match r.kind {
                                Kind::Catalog => {
                                    let op: CatalogOp =
                                        serde_json::from_slice(r.value).map_err(|e| {
                                            Error::corruption(
                                                &path,
                                                off,
                                                format!("catalog record: {e}"),
                                            )
                                        })?;
                                    catalog.apply(&op);
                                }
                                Kind::Put | Kind::Delete => {
                                    let e = IndexEntry {
                                        seqno: r.seqno,
                                        kind: r.kind,
                                        reloc: r.reloc,
                                        loc: Location {
                                            seg: id,
                                            off,
                                            len: bytes.len() as u32,
                                        },
                                        rec_size: r.encoded_len() as u32,
                                    };
                                    if let Some(prev) = active.insert(r.coll, r.key, e) {
                                        if prev.loc.seg != e.loc.seg || prev.loc.off != e.loc.off {
                                            replay_dead.push(DeadRecord {
                                                seg: prev.loc.seg,
                                                off: prev.loc.off,
                                                seqno: prev.seqno,
                                                size: prev.rec_size,
                                            });
                                        }
                                    }
                                }
                            }
                        }
                        Ok(())
                    })?;
                    let mut blocks = match &footer {
                        Some((b, _)) => b
                            .iter()
                            .copied()
                            .filter(|b| b.off < start)
                            .collect::<Vec<_>>(),
                        None => {
                            // Unsealed tail: blocks before the replay start must be found
                            // by scanning. They are covered by the checkpoint, so any damage
                            // there is damage in the middle of the log.
                            if start > DATA_START {
                                let pre = scan_blocks(
                                    &file,
                                    DATA_START,
                                    Some(start),
                                    seed,
                                    |_, _, _| Ok(()),
                                )?;
                                if pre.stop_reason.is_some() || pre.committed_end != start {
                                    return Err(Error::corruption(
                                        &path,
                                        pre.committed_end,
                                        format!(
                                            "{}, before the checkpoint's replay point at offset {start}: refusing to discard acknowledged data",
                                            pre.stop_reason.as_deref().unwrap_or("blocks end early")
                                        ),
                                    ));
                                }
                                pre.blocks
                            } else {
                                Vec::new()
                            }
                        }
                    };
                    blocks.extend(scan.blocks.iter().copied());
                    if let Some(reason) = &scan.stop_reason {
                        if footer.is_some() {
                            return Err(Error::corruption(
                                &path,
                                scan.committed_end,
                                format!("sealed segment damaged: {reason}"),
                            ));
                        }
                        // Intact blocks of an unfinished batch (before `stopped_at`)
                        // are part of the torn tail, not damage before it.
                        if let Some(at) =
                            crate::recovery::valid_block_after(&file, scan.stopped_at, seed)?
                        {
                            return Err(Error::corruption(
                                &path,
                                scan.committed_end,
                                format!("{reason}, but a valid block follows at offset {at}: refusing to discard acknowledged data"),
                            ));
                        }
                        if header.recycled_from != 0 {
                            // In a recycled file the log ends where blocks stop
                            // verifying: the older segment's blocks follow (with its
                            // seed). Only an unfinished batch's intact blocks are ours
                            // to discard; the file keeps its written extents.
                            if scan.committed_end < scan.stopped_at {
                                tracing::warn!(
                                    "{}: {reason}; discarding the unfinished batch at offsets {}..{}",
                                    path.display(),
                                    scan.committed_end,
                                    scan.stopped_at
                                );
                            } else {
                                tracing::debug!(
                                    "{}: log ends at offset {} ({reason}; recycled from segment {})",
                                    path.display(),
                                    scan.committed_end,
                                    header.recycled_from
                                );
                            }
                            // A clean end needs no write: the writer zero-pads its
                            // last page, and old blocks never verify here.
                            if !read_only && scan.committed_end < scan.stopped_at {
                                crate::recovery::zero_range(
                                    &file,
                                    scan.committed_end,
                                    scan.stopped_at,
                                )?;
                            }
                        } else {
                            tracing::warn!(
                                "{}: {reason}; discarding the torn tail after offset {}",
                                path.display(),
                                scan.committed_end
                            );
                            if !read_only {
                                crate::recovery::truncate_tail(&file, scan.committed_end)?;
                            }
                        }
                    }
                    let end = footer
                        .as_ref()
                        .map(|(_, e)| *e)
                        .unwrap_or(scan.committed_end);
                    (blocks, footer.is_some(), end)
                }
            };
            if !sealed {
                tail_end = Some(end);
            }
            let seg = Arc::new(Segment::new(
                id,
                header,
                file,
                blocks,
                sealed,
                end,
                caches.clone(),
            ));
            segments.insert(id, seg);
        }

        let mut garbage = GarbageMap::open(
            dir,
            DeletesPos {
                gen: ckpt.deletes_gen,
                len: ckpt.deletes_len,
            },
            |s| segments.contains_key(&s),
            read_only,
            counters.clone(),
        )?;
        garbage.add(
            replay_dead
                .into_iter()
                .filter(|d| segments.contains_key(&d.seg)),
        );

        let next_seg_id = segments
            .keys()
            .next_back()
            .map_or(1, |id| id + 1)
            .max(ckpt.replay_from.seg);
        let writer_seg = match (segments.values().next_back(), tail_end) {
            (Some(s), Some(_)) if !s.sealed.load(Ordering::SeqCst) => s.clone(),
            _ if read_only => match segments.values().next_back() {
                Some(s) => s.clone(),
                None => {
                    return Err(Error::corruption(
                        dir,
                        0,
                        "data directory has no log segment",
                    ))
                }
            },
            _ => {
                let s = create_segment(
                    dir,
                    next_seg_id,
                    io_mode,
                    counters.clone(),
                    caches.clone(),
                    opts.segment_size,
                )?;
                segments.insert(s.id, s.clone());
                tail_end = Some(DATA_START);
                tail_version = SEG_VERSION;
                s
            }
        };
        let writer_end = tail_end.unwrap_or(writer_seg.written_end.load(Ordering::SeqCst));
        let writer_next_seg = segments.keys().next_back().map_or(1, |id| id + 1);
        let mut writer = LogWriter::resume(
            writer_seg,
            writer_end,
            next_seqno,
            writer_next_seg,
            dir.to_path_buf(),
            io_mode,
            counters.clone(),
            caches,
            &opts,
        )?;
        if tail_version < SEG_VERSION && !read_only {
            // Blocks of this version go only into segments whose header says so (an
            // older build then refuses them instead of misreading them).
            writer.upgrade_format()?;
        }

        let inner = Arc::new(Inner {
            dir: dir.to_path_buf(),
            io_mode,
            io_backend,
            counters,
            recycler,
            _lock: lock,
            read_only,
            writer: Mutex::new(writer),
            commit_no: AtomicU64::new(0),
            sync: Mutex::new(SyncState { synced_commit: 0 }),
            visible_seqno: AtomicU64::new(next_seqno - 1),
            version: RwLock::new(Arc::new(Version {
                active,
                imm: vec![],
                runs,
            })),
            segments: RwLock::new(Arc::new(segments)),
            catalog: RwLock::new(catalog),
            garbage: Mutex::new(garbage),
            meta: Mutex::new(MetaState {
                next_run_id: ckpt.next_run_id,
                purge_seqno: ckpt.purge_seqno,
            }),
            next_mem_id: AtomicU64::new(mem_id),
            flush_lock: Mutex::new(()),
            merge_lock: Mutex::new(()),
            index_install: Mutex::new(()),
            gc_lock: Mutex::new(()),
            data_cache,
            head_cache,
            index_cache,
            pinned_bytes: AtomicU64::new(0),
            stats: StatCounters::default(),
            bg_mutex: Mutex::new(()),
            bg_cond: Condvar::new(),
            shutdown: AtomicBool::new(false),
            flush_error: Mutex::new(None),
            gc_delay_nanos_per_kib: AtomicU64::new(0),
            merge_delay_nanos_per_kib: AtomicU64::new(0),
            want_full_merge: AtomicBool::new(false),
            catalog_changes: AtomicU64::new(0),
            shadow_permille: AtomicU64::new(
                ckpt.shadow_permille
                    .map_or(crate::flush::SHADOW_UNMEASURED, |v| v.min(1000)),
            ),
            warm_request: Mutex::new(None),
            reads_at_merge: Mutex::new((0, None)),
            observers: Default::default(),
            opts,
        });
        let guard = Arc::new(CloseGuard {
            inner: inner.clone(),
            threads: Mutex::new(Vec::new()),
        });
        let db = Db {
            inner,
            _guard: guard,
        };
        db.inner.rebalance_caches();
        if !read_only {
            db.start_background();
        }
        Ok(db)
    }

    fn start_background(&self) {
        let mut threads = self._guard.threads.lock();
        let mut spawn = |name: &str, body: fn(&Arc<Inner>)| {
            let inner = self.inner.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("basalt-{name}"))
                    .spawn(move || body(&inner))
                    .unwrap_or_else(|e| panic!("spawn {name} thread: {e}")),
            );
        };
        spawn("flush", crate::flush::flush_thread);
        spawn("merge", crate::flush::merge_thread);
        if self.inner.opts.background_gc {
            spawn("gc", crate::gc::gc_thread);
        }
        if let Durability::SyncEveryMs(_) = self.inner.opts.durability {
            spawn("sync", periodic_sync_thread);
        }
        if self.inner.opts.warm_index_cache {
            self.inner
                .stats
                .index_warming
                .store(true, Ordering::Relaxed);
            spawn("warm", crate::index_warm::warm_index_thread);
        }
    }

    /// The data directory.
    pub fn path(&self) -> &Path {
        &self.inner.dir
    }

    /// Durably replaces the small file `name` that another component keeps beside the
    /// engine's own files (the filesystem keeps its mount root's attributes so):
    /// written whole to a temporary file, synced, renamed over `<dir>/<name>.aux`, and
    /// the directory synced, so a crash leaves the old or the new bytes. `name` is
    /// 1-64 of `[A-Za-z0-9_-]`, which no engine file name takes.
    pub fn write_aux(&self, name: &str, bytes: &[u8]) -> Result<()> {
        if self.inner.read_only {
            return Err(Error::InvalidArgument(format!(
                "{}: opened read-only",
                self.inner.dir.display()
            )));
        }
        crate::io::write_file_atomic(
            &aux_path(&self.inner.dir, name)?,
            bytes,
            &self.inner.counters,
        )
    }

    /// The bytes of the file [`Db::write_aux`] last wrote as `name`, if any.
    pub fn read_aux(&self, name: &str) -> Result<Option<Vec<u8>>> {
        let path = aux_path(&self.inner.dir, name)?;
        match std::fs::read(&path) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(&path, e)),
        }
    }

    /// The options the engine runs with.
    pub fn options(&self) -> &Options {
        &self.inner.opts
    }

    /// Read backend in use (io_uring, or psync after a fallback).
    pub fn io_backend(&self) -> IoBackend {
        self.inner.io_backend
    }

    /// Active IO mode (O_DIRECT or buffered fallback).
    pub fn io_mode(&self) -> IoMode {
        self.inner.io_mode
    }

    // ---- collections ----

    /// Creates a collection.
    pub fn create_collection(&self, name: &str) -> Result<Collection> {
        self.change_catalog(&|c| Ok(vec![c.plan_create(name)?]))?;
        self.collection(name)
    }

    /// Returns the collection, creating it when missing.
    pub fn collection_or_create(&self, name: &str) -> Result<Collection> {
        match self.collection(name) {
            Err(Error::UnknownCollection(_)) => match self.create_collection(name) {
                Err(Error::CollectionExists(_)) => self.collection(name),
                r => r,
            },
            r => r,
        }
    }

    /// A handle to an existing collection.
    pub fn collection(&self, name: &str) -> Result<Collection> {
        let id = self.inner.catalog.read().id(name)?;
        Ok(Collection {
            db: self.clone(),
            id,
            name: name.to_string(),
        })
    }

    /// Drops a collection: gone at once for readers; its space is reclaimed by GC.
    pub fn drop_collection(&self, name: &str) -> Result<()> {
        self.change_catalog(&|c| Ok(vec![c.plan_drop(name)?]))?;
        self.inner.want_full_merge.store(true, Ordering::SeqCst);
        {
            let mut w = self.inner.writer.lock();
            self.inner.rotate_memtable(&mut w)?;
        }
        self.inner.bg_cond.notify_all();
        Ok(())
    }

    /// Renames a collection.
    pub fn rename_collection(&self, from: &str, to: &str) -> Result<()> {
        self.change_catalog(&|c| Ok(vec![c.plan_rename(from, to)?]))
    }

    /// Swaps the names of two collections atomically (`renameat2(RENAME_EXCHANGE)` of
    /// two collection directories): readers, and recovery after a crash, see both
    /// names swapped or neither. Durable on return, as every catalog change.
    pub fn exchange_collections(&self, a: &str, b: &str) -> Result<()> {
        if a == b {
            return self.inner.catalog.read().id(a).map(|_| ());
        }
        self.change_catalog(&|c| c.plan_exchange(a, b))
    }

    /// Commits the catalog changes `plan` makes of the catalog as it is once the
    /// writer lock is held, so that no other change comes between planning them and
    /// logging them (planned before, a drop racing a rename or an exchange could mark
    /// as dropped a live collection that had just taken another name).
    fn change_catalog(&self, plan: &dyn Fn(&Catalog) -> Result<Vec<CatalogOp>>) -> Result<()> {
        self.inner.commit(CommitOps::Catalog(plan))?;
        self.inner.catalog_changes.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// How many collections were created, dropped or renamed since the engine opened:
    /// a cheap test (one atomic load) for whether a view of the collections is stale.
    pub fn catalog_changes(&self) -> u64 {
        self.inner.catalog_changes.load(Ordering::SeqCst)
    }

    /// Names of all collections, sorted.
    pub fn list_collections(&self) -> Vec<String> {
        self.inner.catalog.read().by_name.keys().cloned().collect()
    }

    // ---- writes ----

    /// Puts `key` = `value` in `collection`; returns the write's seqno.
    pub fn put(&self, collection: &str, key: &[u8], value: &[u8]) -> Result<Seqno> {
        self.collection(collection)?.put(key, value)
    }

    /// Deletes `key` in `collection`; returns the tombstone's seqno.
    pub fn delete(&self, collection: &str, key: &[u8]) -> Result<Seqno> {
        self.collection(collection)?.delete(key)
    }

    /// Applies a batch atomically; returns the seqno of its last write.
    pub fn write(&self, batch: &WriteBatch) -> Result<Seqno> {
        if batch.is_empty() {
            return Ok(self.inner.visible_seqno.load(Ordering::SeqCst));
        }
        let cat = self.inner.catalog.read();
        let mut ops = Vec::with_capacity(batch.len());
        for op in batch.ops() {
            match op {
                BatchOp::Put {
                    collection,
                    key,
                    value,
                } => ops.push((
                    cat.id(collection)?,
                    Kind::Put,
                    key.as_slice(),
                    value.as_slice(),
                )),
                BatchOp::Delete { collection, key } => {
                    ops.push((cat.id(collection)?, Kind::Delete, key.as_slice(), &[][..]))
                }
            }
        }
        drop(cat);
        // The ids as resolved for the commit, for observers (a rename may follow).
        let ids: Vec<CollId> = match self.inner.observers.active() {
            true => ops.iter().map(|op| op.0).collect(),
            false => Vec::new(),
        };
        let _telling = self.inner.observers.begin();
        let seqno = self.inner.commit(CommitOps::User(ops))?;
        self.inner.observers.tell(|| {
            batch
                .ops()
                .iter()
                .zip(ids)
                .map(|(op, collection_id)| match op {
                    BatchOp::Put {
                        collection, key, ..
                    } => Written {
                        collection,
                        collection_id,
                        key,
                        deleted: false,
                    },
                    BatchOp::Delete { collection, key } => Written {
                        collection,
                        collection_id,
                        key,
                        deleted: true,
                    },
                })
                .collect()
        });
        Ok(seqno)
    }

    /// Registers `f` to be told about every user write committed from now on (see
    /// [`WriteObserver`]); returns an id for [`Db::stop_observing`].
    pub fn observe_writes(&self, f: WriteObserver) -> u64 {
        self.inner.observers.add(f)
    }

    /// The seqno of the last visible write, read at a moment when every user write up
    /// to it had been told to the observers (waiting while one is being committed or
    /// told, for up to `within`; `None` if writes never paused that long). An observer
    /// that has taken in everything it was told by the time this returns `s` has seen
    /// every write with a seqno up to `s`.
    pub fn settled_seqno(&self, within: Duration) -> Option<Seqno> {
        let deadline = Instant::now() + within;
        let mut tries = 0u32;
        loop {
            let s = self.inner.visible_seqno.load(Ordering::SeqCst);
            if self.inner.observers.all_told() {
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tries += 1;
            if tries < 64 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(100));
            }
        }
    }

    /// The seqno of the last visible write (0 for none).
    pub fn last_seqno(&self) -> Seqno {
        self.inner.visible_seqno.load(Ordering::SeqCst)
    }

    /// Unregisters the observer `id` returned by [`Db::observe_writes`].
    pub fn stop_observing(&self, id: u64) {
        self.inner.observers.remove(id)
    }

    /// Makes every acknowledged write durable (one fdatasync of the log).
    pub fn sync(&self) -> Result<()> {
        let target = self.inner.commit_no.load(Ordering::SeqCst);
        self.inner.sync_upto(target)
    }

    /// Syncs the log and moves the write cache into an index run (a checkpoint), so
    /// that reopening replays nothing.
    pub fn flush(&self) -> Result<()> {
        self.sync()?;
        {
            let mut w = self.inner.writer.lock();
            self.inner.rotate_memtable(&mut w)?;
        }
        crate::flush::flush_all(&self.inner)?;
        crate::flush::merge_all(&self.inner)
    }

    // ---- reads ----

    /// Reads `key` from `collection`.
    pub fn get(&self, collection: &str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.collection(collection)?.get(key)
    }

    /// Reads many keys of one collection; results are in the order of `keys`.
    pub fn multi_get(&self, collection: &str, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        self.collection(collection)?.multi_get(keys)
    }

    /// Reads parts of many values of one collection: bytes `range` of each key's value
    /// (cut to the value's length; `None` for a missing key), in the order of `reqs`.
    /// A part of a large value costs a read of the pages that hold it, verified by
    /// their checksums, not a read of the whole value.
    pub fn multi_get_ranges(
        &self,
        collection: &str,
        reqs: &[crate::RangeRequest<'_>],
    ) -> Result<Vec<Option<Vec<u8>>>> {
        self.collection(collection)?.multi_get_ranges(reqs)
    }

    /// Like [`Db::multi_get_ranges`], but each part is written into the caller's
    /// buffer `bufs[i]` (at least as long as `reqs[i]`'s range), with no buffer
    /// allocated per part; returns each part's length (`None` for a missing key).
    pub fn multi_get_ranges_into(
        &self,
        collection: &str,
        reqs: &[crate::RangeRequest<'_>],
        bufs: &mut [&mut [u8]],
    ) -> Result<Vec<Option<usize>>> {
        let mut lens = vec![None; reqs.len()];
        self.multi_get_ranges_each(collection, reqs, bufs, |i, len, _| lens[i] = len)?;
        Ok(lens)
    }

    /// Like [`Db::multi_get_ranges_into`], but hands each part to `on_part(i, len,
    /// buf)` (`len` is `None` for a missing key; `buf` is `bufs[i]`) as soon as its
    /// bytes are in place (a part whose block head is cached as its last page lands;
    /// parts whose heads are read too once those reads have landed), while the batch's
    /// other reads are still in flight. On `Ok` every part has been handed on exactly once;
    /// on an error, the parts not yet handed on are not.
    pub fn multi_get_ranges_each(
        &self,
        collection: &str,
        reqs: &[crate::RangeRequest<'_>],
        bufs: &mut [&mut [u8]],
        mut on_part: impl FnMut(usize, Option<usize>, &mut [u8]),
    ) -> Result<()> {
        let c = self.collection(collection)?;
        c.check_live()?;
        let snap = self.inner.visible_seqno.load(Ordering::SeqCst);
        self.inner
            .multi_get_ranges_each(c.id, reqs, bufs, snap, &mut on_part)
    }

    /// Like [`Db::multi_get_ranges_each`], but the buffers are the sink's and each
    /// complete part is reported to it ([`crate::PartSink`]): one buffer may hold
    /// several parts, and the caller can use it as soon as all of them are done.
    pub fn multi_get_ranges_to(
        &self,
        collection: &str,
        reqs: &[crate::RangeRequest<'_>],
        sink: &mut impl crate::PartSink,
    ) -> Result<()> {
        let c = self.collection(collection)?;
        c.check_live()?;
        let snap = self.inner.visible_seqno.load(Ordering::SeqCst);
        self.inner.multi_get_ranges_to(c.id, reqs, snap, sink)
    }

    /// A consistent read-only view of the whole engine as of now.
    pub fn snapshot(&self) -> crate::Snapshot {
        crate::snapshot::Snapshot::new(self.inner.clone())
    }

    /// Runs GC now until no segment qualifies (or only one pass with `once`).
    /// Returns the number of segments collected.
    pub fn gc_now(&self) -> Result<usize> {
        let mut n = 0;
        while crate::gc::gc_once(&self.inner, false)? {
            n += 1;
        }
        Ok(n)
    }

    /// Collects the sealed segment with the most garbage even if the target fill is met.
    pub fn gc_force_one(&self) -> Result<bool> {
        crate::gc::gc_once(&self.inner, true)
    }

    /// Finds every superseded version (flushes, then merges the whole index once) and
    /// waits until GC has nothing left to do at the target fill. Garbage is found when
    /// versions meet in a merge, so between merges some of it still counts as live;
    /// afterwards `stats` counts none of it as live.
    pub fn wait_for_gc(&self) -> Result<()> {
        self.flush()?;
        self.inner.want_full_merge.store(true, Ordering::SeqCst);
        loop {
            self.flush()?;
            if self.gc_now()? == 0 {
                return Ok(());
            }
        }
    }

    /// Statistics as of now.
    pub fn stats(&self) -> crate::Stats {
        crate::stats::collect(&self.inner)
    }

    /// Closes the engine, syncing the log. Other clones keep it open until they drop.
    pub fn close(self) -> Result<()> {
        let r = if self.inner.read_only {
            Ok(())
        } else {
            self.sync()
        };
        drop(self);
        r
    }
}

/// Where [`Db::write_aux`] keeps `name`, once `name` is checked.
fn aux_path(dir: &Path, name: &str) -> Result<PathBuf> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-');
    if !ok {
        return Err(Error::InvalidArgument(format!(
            "auxiliary file name {name:?}: 1-64 of [A-Za-z0-9_-]"
        )));
    }
    Ok(dir.join(format!("{name}.aux")))
}

impl Collection {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn id(&self) -> CollId {
        self.id
    }

    /// The engine this collection belongs to.
    pub fn db(&self) -> &Db {
        &self.db
    }

    fn check_live(&self) -> Result<()> {
        if self.db.inner.catalog.read().is_live(self.id) {
            Ok(())
        } else {
            Err(Error::UnknownCollection(self.name.clone()))
        }
    }

    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<Seqno> {
        self.write_one(Kind::Put, key, value)
    }

    pub fn delete(&self, key: &[u8]) -> Result<Seqno> {
        self.write_one(Kind::Delete, key, &[])
    }

    fn write_one(&self, kind: Kind, key: &[u8], value: &[u8]) -> Result<Seqno> {
        let inner = &self.db.inner;
        let _telling = inner.observers.begin();
        let seqno = inner.commit(CommitOps::User(vec![(self.id, kind, key, value)]))?;
        inner.observers.tell(|| {
            vec![Written {
                collection: &self.name,
                collection_id: self.id,
                key,
                deleted: kind == Kind::Delete,
            }]
        });
        Ok(seqno)
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.check_live()?;
        let snap = self.db.inner.visible_seqno.load(Ordering::SeqCst);
        self.db.inner.get_at(self.id, key, snap, None)
    }

    pub fn multi_get(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        self.check_live()?;
        let snap = self.db.inner.visible_seqno.load(Ordering::SeqCst);
        self.db.inner.multi_get(self.id, keys, snap)
    }

    /// Bytes `range` of the values of `reqs`' keys; see [`Db::multi_get_ranges`].
    pub fn multi_get_ranges(
        &self,
        reqs: &[crate::RangeRequest<'_>],
    ) -> Result<Vec<Option<Vec<u8>>>> {
        self.check_live()?;
        let snap = self.db.inner.visible_seqno.load(Ordering::SeqCst);
        self.db.inner.multi_get_ranges(self.id, reqs, snap)
    }

    /// Bytes `range` of `key`'s value (cut to its length).
    pub fn get_range(&self, key: &[u8], range: std::ops::Range<usize>) -> Result<Option<Vec<u8>>> {
        Ok(self.multi_get_ranges(&[(key, range)])?.pop().flatten())
    }

    /// Ordered scan of keys within the bounds, forwards or backwards.
    pub fn scan(
        &self,
        lo: std::ops::Bound<&[u8]>,
        hi: std::ops::Bound<&[u8]>,
        dir: crate::Direction,
    ) -> Result<crate::ScanIter> {
        self.check_live()?;
        Ok(self.db.snapshot().scan_id(self.id, lo, hi, dir))
    }

    /// Ordered scan of keys starting with `prefix`.
    pub fn scan_prefix(&self, prefix: &[u8], dir: crate::Direction) -> Result<crate::ScanIter> {
        self.check_live()?;
        Ok(self.db.snapshot().scan_prefix_id(self.id, prefix, dir))
    }

    /// The change feed of this collection after `since`, in seqno order.
    pub fn changes(&self, since: Seqno) -> Result<crate::ChangeIter> {
        self.check_live()?;
        crate::changes::ChangeIter::new(self.db.inner.clone(), Some(self.id), since)
    }
}

impl Db {
    /// The change feed over all collections after `since`, in seqno order.
    pub fn changes(&self, since: Seqno) -> Result<crate::ChangeIter> {
        crate::changes::ChangeIter::new(self.inner.clone(), None, since)
    }
}

impl Inner {
    /// Appends one batch to the log and the write cache. Durable on return when the
    /// durability mode says so (one shared fdatasync for concurrent writers).
    pub(crate) fn commit(&self, ops: CommitOps<'_>) -> Result<Seqno> {
        if self.read_only {
            return Err(Error::InvalidArgument("engine is open read-only".into()));
        }
        let mut user_bytes = 0u64;
        let mut encoded = 0u64;
        match &ops {
            CommitOps::User(v) => {
                for (_, _, k, val) in v {
                    validate_kv(k, val)?;
                    user_bytes += (k.len() + val.len()) as u64;
                    encoded += crate::record::encoded_len(0, u64::MAX, k.len(), val.len()) as u64;
                }
            }
            CommitOps::Reloc(recs) => {
                encoded = recs
                    .iter()
                    .map(|r| {
                        crate::record::encoded_len(r.coll, r.seqno, r.key.len(), r.value.len())
                            as u64
                    })
                    .sum()
            }
            // Up to three records (an exchange) of two names of up to 255 bytes,
            // each byte at most six in JSON.
            CommitOps::Catalog(_) => encoded = 3 * 4096,
        }
        if matches!(ops, CommitOps::User(_)) {
            self.throttle(encoded)?;
        }
        let is_catalog = matches!(ops, CommitOps::Catalog(_));
        let mut w = self.writer.lock();
        let copies = matches!(ops, CommitOps::Reloc(_));
        if let Some(seg) = w.prepare(encoded + crate::block::HEADER_LEN as u64 * 4, copies)? {
            let mut segs = self.segments.write();
            let mut m = (**segs).clone();
            m.insert(seg.id, seg);
            *segs = Arc::new(m);
        }
        let v = self.version.read().clone();
        let seg_id = w.seg.id;
        let mut last = 0;
        let mut dead = Vec::new();
        let mut copied = Vec::new();
        let mut logged: Vec<(CollId, &[u8], IndexEntry)> = Vec::new();
        let first_seqno = w.next_seqno;
        w.begin_batch();
        let res: Result<()> = (|| {
            match &ops {
                CommitOps::User(list) => {
                    for &(coll, kind, key, value) in list {
                        let seqno = w.next_seqno;
                        w.next_seqno += 1;
                        let rec = RecordRef {
                            kind,
                            reloc: false,
                            coll,
                            seqno,
                            key,
                            value,
                        };
                        let off = w.add(&rec)?;
                        logged.push((
                            coll,
                            key,
                            IndexEntry {
                                seqno,
                                kind,
                                reloc: false,
                                loc: Location {
                                    seg: seg_id,
                                    off,
                                    len: 0,
                                },
                                rec_size: rec.encoded_len() as u32,
                            },
                        ));
                        last = seqno;
                    }
                }
                CommitOps::Reloc(recs) => {
                    for r in recs.iter() {
                        if w.tail_holds_copy(r.seqno) {
                            continue;
                        }
                        let rec = RecordRef {
                            kind: r.kind,
                            reloc: true,
                            coll: r.coll,
                            seqno: r.seqno,
                            key: &r.key,
                            value: &r.value,
                        };
                        let off = w.add(&rec)?;
                        copied.push(r.seqno);
                        logged.push((
                            r.coll,
                            &r.key,
                            IndexEntry {
                                seqno: r.seqno,
                                kind: r.kind,
                                reloc: true,
                                loc: Location {
                                    seg: seg_id,
                                    off,
                                    len: 0,
                                },
                                rec_size: rec.encoded_len() as u32,
                            },
                        ));
                    }
                }
                CommitOps::Catalog(plan) => {
                    let ops = plan(&self.catalog.read())?;
                    for op in &ops {
                        let seqno = w.next_seqno;
                        w.next_seqno += 1;
                        let value = serde_json::to_vec(op).expect("catalog op serializes");
                        let rec = RecordRef {
                            kind: Kind::Catalog,
                            reloc: false,
                            coll: 0,
                            seqno,
                            key: b"",
                            value: &value,
                        };
                        w.add(&rec)?;
                        last = seqno;
                    }
                    // All at once: no reader sees a catalog between two of them.
                    let mut cat = self.catalog.write();
                    for op in &ops {
                        cat.apply(op);
                    }
                }
            }
            Ok(())
        })();
        match &res {
            Ok(()) => {
                w.end_batch();
                w.note_copies(copied);
            }
            Err(e) => {
                w.fail_batch(e);
                w.next_seqno = first_seqno;
                // Some copies may be in the tail: which ones is not known any more.
                if copies {
                    w.forget_copies();
                }
            }
        }
        res?;
        // Into the write cache only once the whole batch is logged: readers never see
        // part of a batch, nor one whose commit failed.
        for (coll, key, e) in logged {
            let prev = v.active.insert(coll, key, e);
            if let Some(prev) = prev.filter(|_| e.reloc) {
                if prev.loc.seg != e.loc.seg || prev.loc.off != e.loc.off {
                    dead.push(DeadRecord {
                        seg: prev.loc.seg,
                        off: prev.loc.off,
                        seqno: prev.seqno,
                        size: prev.rec_size,
                    });
                }
            }
        }
        if last > 0 {
            self.visible_seqno.store(last, Ordering::SeqCst);
        }
        let my_commit = self.commit_no.fetch_add(1, Ordering::SeqCst) + 1;
        if v.active.approx_bytes() >= self.memtable_target() {
            self.rotate_memtable(&mut w)?;
        }
        drop(w);
        if !dead.is_empty() {
            let segs = self.segments.read().clone();
            self.garbage
                .lock()
                .add(dead.into_iter().filter(|d| segs.contains_key(&d.seg)));
        }
        self.stats
            .user_bytes_written
            .fetch_add(user_bytes, Ordering::Relaxed);
        if let CommitOps::User(list) = &ops {
            self.stats
                .writes
                .fetch_add(list.len() as u64, Ordering::Relaxed);
            self.stats.commits.fetch_add(1, Ordering::Relaxed);
        }
        if is_catalog || self.opts.durability == Durability::SyncEveryWrite {
            self.sync_upto(my_commit)?;
        }
        Ok(last)
    }

    /// Size at which the active memtable rotates: the active one plus those waiting
    /// for flush (writers stall when they fill the rest) stay within the write cache.
    pub(crate) fn memtable_target(&self) -> u64 {
        (self.opts.write_cache_bytes() / 3).min(MEMTABLE_MAX)
    }

    /// Seals the open block and starts a new memtable (under the writer lock).
    pub(crate) fn rotate_memtable(&self, w: &mut LogWriter) -> Result<()> {
        let cur = self.version.read().clone();
        if cur.active.is_empty() {
            return Ok(());
        }
        w.seal_block(0)?;
        // Lock order: the writer lock is held here, so never take `meta` (checkpoints
        // hold `meta` and read engine state).
        let id = self.next_mem_id.fetch_add(1, Ordering::SeqCst);
        let start = LogPos {
            seg: w.seg.id,
            off: w.end(),
        };
        let fresh = Arc::new(Memtable::new(id, start, self.memtable_target()));
        {
            let mut v = self.version.write();
            let mut imm = vec![v.active.clone()];
            imm.extend(v.imm.iter().cloned());
            *v = Arc::new(Version {
                active: fresh,
                imm,
                runs: v.runs.clone(),
            });
        }
        // The rotated memtable now holds its share: take it back from the caches.
        let v = self.version.read().clone();
        self.resize_caches(&v, self.pinned_bytes.load(Ordering::Relaxed));
        self.bg_cond.notify_all();
        Ok(())
    }

    /// Re-divides the memory budget after the index or garbage map changed size: the
    /// index cache gets priority (up to 7/8 of what is left, as much as the runs' data
    /// blocks need: once data is many times the budget, a data-block hit is rare while
    /// an index miss costs a device read per get), data blocks get the rest.
    pub(crate) fn rebalance_caches(&self) {
        let v = self.version.read().clone();
        let pinned: u64 = v.runs.iter().map(|r| r.memory_bytes() as u64).sum::<u64>()
            + self.garbage.lock().memory_bytes() as u64
            + self.data_cache.filter_bytes() as u64;
        self.pinned_bytes.store(pinned, Ordering::Relaxed);
        self.resize_caches(&v, pinned);
    }

    /// Write-cache bytes the memtables can fill before the caches are resized again:
    /// the active memtable's full share plus what the rotated ones hold. The rest of
    /// the write cache (the shares of memtables not waiting for flush) is lent to the
    /// caches, so a read-only phase uses nearly the whole budget for caching.
    fn write_cache_reserved(&self, v: &Version) -> u64 {
        let imm: u64 = v.imm.iter().map(|m| m.approx_bytes()).sum();
        (self.memtable_target().max(v.active.approx_bytes()) + imm)
            .min(self.opts.write_cache_bytes())
    }

    fn resize_caches(&self, v: &Version, pinned: u64) {
        let total = self.opts.cache_bytes(pinned, self.write_cache_reserved(v));
        let index_need: u64 = v.runs.iter().map(|r| r.file_size).sum();
        let index = index_need.min(total * 7 / 8).max(total / 8);
        self.index_cache.set_capacity(index as usize);
        let rest = total - index;
        self.head_cache.set_capacity((rest / 8) as usize);
        self.data_cache.set_capacity((rest - rest / 8) as usize);
    }

    /// True while memtables waiting for flush fill the write cache beyond the active
    /// memtable's share: a writer must wait for the flush thread. The limit is in
    /// bytes, so a large write cache absorbs a burst of many small memtables.
    fn flush_backlog_full(&self) -> bool {
        let v = self.version.read();
        let waiting: u64 = v.imm.iter().map(|m| m.approx_bytes()).sum();
        let room = self
            .opts
            .write_cache_bytes()
            .saturating_sub(self.memtable_target())
            .max(2 * self.memtable_target());
        waiting >= room
    }

    /// Slows writers down when flushes or GC fall behind (smoothly, not by stopping).
    /// The two waits are counted apart in the stats.
    fn throttle(&self, bytes: u64) -> Result<()> {
        if self.flush_backlog_full() {
            let started = Instant::now();
            while self.flush_backlog_full() {
                if let Some(e) = self.flush_error.lock().clone() {
                    if e.contains("no space") {
                        return Err(Error::NoSpace {
                            path: self.dir.clone(),
                        });
                    }
                }
                self.bg_cond.notify_all();
                let mut g = self.bg_mutex.lock();
                self.bg_cond.wait_for(&mut g, Duration::from_millis(1));
            }
            self.stats
                .stall_flush_micros
                .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        }
        self.gc_delay(bytes);
        Ok(())
    }

    /// Slows a writer in proportion to the bytes it writes while GC is behind: each
    /// write adds `bytes × gc_delay_nanos_per_kib / 1024` to the thread's debt, paid
    /// by sleeping once it reaches [`GC_DELAY_MIN_SLEEP`] (sleeps are never shorter
    /// than the timer's slack, so a delay per write would stop small writes). The
    /// time actually slept is paid off (oversleep too), at most
    /// [`GC_DELAY_MAX_SLEEP`] per write.
    fn gc_delay(&self, bytes: u64) {
        thread_local!(static OWED_NANOS: std::cell::Cell<i64> = const { std::cell::Cell::new(0) });
        let per_kib = self.gc_delay_nanos_per_kib.load(Ordering::Relaxed);
        if per_kib == 0 {
            OWED_NANOS.with(|o| o.set(0));
            return;
        }
        let add = (bytes.saturating_mul(per_kib) / 1024).min(i64::MAX as u64 / 2) as i64;
        let owed = OWED_NANOS.with(|o| {
            let v = o.get().saturating_add(add);
            o.set(v);
            v
        });
        let min = GC_DELAY_MIN_SLEEP.as_nanos() as i64;
        if owed < min {
            return;
        }
        let started = Instant::now();
        std::thread::sleep(Duration::from_nanos(owed as u64).min(GC_DELAY_MAX_SLEEP));
        let slept = started.elapsed();
        // Oversleep is credited, up to one minimum sleep.
        OWED_NANOS.with(|o| o.set((owed - slept.as_nanos() as i64).max(-min)));
        // Counted for GC and for the merge debt in the proportion of their delays.
        let slept = slept.as_micros() as u64;
        let merge = self
            .merge_delay_nanos_per_kib
            .load(Ordering::Relaxed)
            .min(per_kib);
        let for_merge = (slept as u128 * merge as u128 / per_kib as u128) as u64;
        self.stats
            .stall_merge_micros
            .fetch_add(for_merge, Ordering::Relaxed);
        self.stats
            .stall_gc_micros
            .fetch_add(slept - for_merge, Ordering::Relaxed);
    }

    /// Group commit: makes the log durable up to commit number `target`. One caller
    /// does the fdatasync; the others waiting behind it find their commit covered.
    pub(crate) fn sync_upto(&self, target: u64) -> Result<()> {
        let mut s = self.sync.lock();
        if s.synced_commit >= target {
            return Ok(());
        }
        let (seg, covered) = {
            let mut w = self.writer.lock();
            let covered = self.commit_no.load(Ordering::SeqCst);
            let (seg, _) = w.flush_tail()?;
            (seg, covered)
        };
        seg.file.sync_data()?;
        self.stats.syncs.fetch_add(1, Ordering::Relaxed);
        s.synced_commit = covered;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn open(dir: &Path, budget: u64) -> Db {
        Db::open(dir, Options::for_unit_test(budget)).unwrap()
    }

    /// Stats after 20 writes of 4 KiB slowed by `delay` ns per KiB (each owes about
    /// `delay` × 4 ns and sleeps it), `merge` of them for the merge debt.
    fn slowed_writes(delay: u64, merge: u64) -> crate::Stats {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path(), 32 << 20);
        let c = db.create_collection("c").unwrap();
        db.inner
            .merge_delay_nanos_per_kib
            .store(merge, Ordering::Relaxed);
        db.inner
            .gc_delay_nanos_per_kib
            .store(delay, Ordering::Relaxed);
        for i in 0..20u32 {
            c.put(&i.to_be_bytes(), &[7u8; 4096]).unwrap();
        }
        db.stats()
    }

    #[test]
    fn gc_slow_down_is_counted_apart_from_flush_waits() {
        // 100 µs per KiB: each 4 KiB write owes about 400 µs and sleeps it.
        let s = slowed_writes(100_000, 0);
        assert!(
            s.write_stall_gc_micros >= 20 * 400 - 200,
            "20 writes of 4 KiB slowed by 100 µs per KiB: {} µs counted",
            s.write_stall_gc_micros
        );
        assert_eq!(s.write_stall_flush_micros, 0, "no flush was waited for");
        assert_eq!(s.write_stall_merge_micros, 0, "no merge debt");
        assert_eq!(
            s.write_stall_micros,
            s.write_stall_gc_micros + s.write_stall_flush_micros
        );
    }

    #[test]
    fn the_merge_debts_share_of_a_slow_down_is_counted_as_merge_stall() {
        // 100 µs per KiB, of which 75 for the merge debt and 25 for GC.
        let s = slowed_writes(100_000, 75_000);
        let (merge, gc) = (s.write_stall_merge_micros, s.write_stall_gc_micros);
        println!("slept {} µs: merge {merge}, gc {gc}", merge + gc);
        assert!(merge + gc >= 20 * 400 - 200, "{merge} + {gc} µs counted");
        // 3:1, give or take a microsecond of rounding per sleep.
        assert!(
            merge.abs_diff(3 * gc) <= 4 * 20,
            "merge {merge} µs, gc {gc} µs"
        );
        assert_eq!(
            s.write_stall_micros,
            merge + gc + s.write_stall_flush_micros
        );
    }

    /// A small GC debt slows small writes a little, not each by a whole sleep: the
    /// delay is owed per byte and paid in sleeps of at least 200 µs, so the time
    /// slept follows the bytes written (a sleep per write, as GC's throttle once did,
    /// took at least the timer slack, ~50 µs, per 150-byte write).
    #[test]
    fn gc_slow_down_is_proportional_to_bytes_written() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path(), 32 << 20);
        let c = db.create_collection("c").unwrap();
        let per_kib = 10_000u64; // 10 µs per KiB
        db.inner
            .gc_delay_nanos_per_kib
            .store(per_kib, Ordering::Relaxed);
        let n = 10_000u32;
        for i in 0..n {
            c.put(&i.to_be_bytes(), &[1u8; 120]).unwrap();
        }
        let s = db.stats();
        let encoded = n as u64 * crate::record::encoded_len(0, u64::MAX, 4, 120) as u64;
        let owed_micros = encoded * per_kib / 1024 / 1000;
        println!(
            "{n} writes, {encoded} bytes: {owed_micros} µs owed, {} µs slept",
            s.write_stall_gc_micros
        );
        // Short by at most what is still owed (under one 200 µs sleep) plus the
        // whole-µs truncation of each sleep's count (under 1 µs for each of ~70).
        assert!(
            s.write_stall_gc_micros + 300 >= owed_micros,
            "slept {} µs of {owed_micros} owed",
            s.write_stall_gc_micros
        );
        assert!(
            s.write_stall_gc_micros <= owed_micros + 50_000,
            "slept {} µs for {owed_micros} owed: more than one sleep per write?",
            s.write_stall_gc_micros
        );
    }

    /// With a write cache of 64 MiB (256 MiB budget) memtables rotate at 16 MiB, so
    /// three may wait for flush before a writer stalls; a count limit of two would
    /// stall the third rotation (and, with the flush thread held here, never return).
    #[test]
    fn memtables_waiting_for_flush_are_limited_by_bytes_not_by_count() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path(), 256 << 20);
        assert_eq!(db.inner.memtable_target(), MEMTABLE_MAX);
        let c = db.create_collection("c").unwrap();
        let flush_held = db.inner.flush_lock.lock();
        let (tx, rx) = mpsc::channel();
        let writer = {
            let (db, c) = (db.clone(), c.clone());
            std::thread::spawn(move || {
                let value = [7u8; 16];
                let mut i = 0u32;
                while db.inner.version.read().imm.len() < 3 {
                    c.put(&i.to_be_bytes(), &value).unwrap();
                    i += 1;
                }
                tx.send(i).unwrap();
            })
        };
        let got = rx.recv_timeout(Duration::from_secs(120));
        drop(flush_held);
        writer.join().unwrap();
        let writes = got.expect("the writer stalled with fewer than three memtables waiting");
        assert_eq!(db.stats().write_stall_flush_micros, 0);
        println!("{writes} writes rotated three memtables without a stall");
    }
}

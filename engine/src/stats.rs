//! Engine statistics, as a struct and as JSON. Space figures are computed from the
//! files and the garbage map at the moment of the call, never from stale counters.

use crate::db::Inner;
use crate::io::IoMode;
use crate::record::Seqno;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};

/// Monotonic counters updated on the hot paths.
#[derive(Default, Debug)]
pub struct StatCounters {
    pub user_bytes_written: AtomicU64,
    pub writes: AtomicU64,
    pub commits: AtomicU64,
    pub gets: AtomicU64,
    pub device_reads: AtomicU64,
    pub syncs: AtomicU64,
    pub flushes: AtomicU64,
    pub idle_flushes: AtomicU64,
    pub merges: AtomicU64,
    pub gc_runs: AtomicU64,
    pub gc_bytes_moved: AtomicU64,
    pub gc_bytes_reclaimed: AtomicU64,
    pub gc_bytes_read: AtomicU64,
    /// Writer time spent waiting for memtable flushes (the write cache was full).
    pub stall_flush_micros: AtomicU64,
    /// Writer time spent in GC's smooth slow-down (the log below its target fill).
    pub stall_gc_micros: AtomicU64,
    /// Writer time spent in the merge debt's slow-down (merges behind the writes).
    pub stall_merge_micros: AtomicU64,
    /// Bytes read from the device for point reads (gets and multi-gets).
    pub get_bytes_read: AtomicU64,
    /// Of those, bytes of value parts read straight into the caller's buffers.
    pub part_bytes_in_place: AtomicU64,
    pub multi_get_batches: AtomicU64,
    /// Index bytes loaded into the index cache by the warm-up at open.
    pub index_warm_bytes: AtomicU64,
    /// The warm-up at open is still reading.
    pub index_warming: std::sync::atomic::AtomicBool,
    /// io_uring submissions and waits.
    pub ring: crate::uring::RingCounters,
}

/// One segment's space accounting.
#[derive(Clone, Debug, Serialize)]
pub struct SegmentStats {
    pub id: u32,
    pub disk_bytes: u64,
    pub record_bytes: u64,
    pub garbage_bytes: u64,
    pub garbage_ratio: f64,
    pub sealed: bool,
}

/// A point-in-time view of the engine's counters and space use.
#[derive(Clone, Debug, Serialize)]
pub struct Stats {
    /// `direct` or `buffered`.
    pub io_mode: IoMode,
    /// `io_uring` or `psync` (the backend in use, after any fallback).
    pub io_backend: &'static str,
    pub compression: String,
    pub target_fill_pct: u8,
    pub last_seqno: Seqno,
    /// Deletes at or below this seqno may be missing from the change feed.
    pub purge_seqno: Seqno,
    pub collections: usize,
    /// Key + value bytes accepted from users.
    pub user_bytes_written: u64,
    /// Records (puts and deletes) written by users.
    pub writes: u64,
    /// User write batches committed (a single put or delete is one): `writes /
    /// commits` records per batch.
    pub commits: u64,
    pub gets: u64,
    /// Bytes the engine wrote to its files (log, index runs, checkpoints, delete list),
    /// including alignment padding and rewritten tail pages.
    pub device_bytes_written: u64,
    pub device_bytes_read: u64,
    pub device_reads: u64,
    pub device_writes: u64,
    pub syncs: u64,
    /// device_bytes_written / user_bytes_written.
    pub write_amp: f64,
    /// Encoded bytes of records not known to be garbage.
    pub live_bytes: u64,
    /// Encoded bytes of all records in live segments.
    pub log_record_bytes: u64,
    /// Bytes of all files in the data directory.
    pub disk_bytes: u64,
    pub log_disk_bytes: u64,
    pub index_disk_bytes: u64,
    /// disk_bytes / live_bytes; `None` while live data is under
    /// [`SPACE_AMP_MIN_LIVE`], where the fixed part of `disk_bytes` (the tail segment,
    /// segment files kept for reuse, index runs) makes the ratio meaningless (a store
    /// emptied by deletes once showed 1,254,281).
    pub space_amp: Option<f64>,
    pub segments: Vec<SegmentStats>,
    pub index_runs: usize,
    pub index_entries: u64,
    /// Index entries outside the oldest run (in memtables and newer runs). Garbage is
    /// found when two versions of a key meet in a merge, so each of these may still
    /// hide one superseded version that `live_bytes` counts as live. `Db::wait_for_gc`
    /// merges the whole index, after which only entries written since remain.
    pub index_entries_unmerged: u64,
    /// Garbage GC cannot see yet, expected from the index: the newer runs' size over
    /// the oldest run's, times the share of newer entries the last merge into the
    /// oldest run found superseding one (`index_shadow_ratio`). From
    /// [`crate::BOTTOM_MERGE_DEBT`] the newer runs are merged into the oldest; above
    /// [`crate::MERGE_DEBT_THROTTLE`] writers are slowed down.
    pub index_merge_debt: f64,
    /// Share of the newer runs' entries that superseded a version in the last merge
    /// into the oldest run (1 until one has run).
    pub index_shadow_ratio: f64,
    pub memtable_entries: usize,
    pub memtable_bytes: u64,
    pub flushes: u64,
    /// Flushes of a write cache that was not full, after writes paused (option
    /// `idle_flush_ms`; also counted in `flushes`).
    pub idle_flushes: u64,
    pub merges: u64,
    pub gc_runs: u64,
    pub gc_bytes_moved: u64,
    pub gc_bytes_reclaimed: u64,
    /// Bytes GC read from its victims (each once, plus the chunks holding live user
    /// writes that did not fit in memory between its two passes, again).
    pub gc_bytes_read: u64,
    /// Segments created since open in a file GC had retired (option
    /// `recycle_segments`), and retired files waiting for reuse now (counted in
    /// `disk_bytes`).
    pub segments_recycled: u64,
    pub free_segment_files: usize,
    /// Current budgets of the block and index caches (rebalanced as the index grows).
    pub block_cache_capacity: u64,
    pub index_cache_capacity: u64,
    pub block_cache_hits: u64,
    pub block_cache_misses: u64,
    /// Blocks read after a miss but not cached: the admission filter saw no earlier
    /// miss of them (see the data cache's doorkeeper).
    pub block_cache_declined: u64,
    pub index_cache_hits: u64,
    pub index_cache_misses: u64,
    /// Index bytes the warm-up loaded into the index cache (option
    /// `warm_index_cache`: at open, and merge outputs while reads run), and whether a
    /// warm-up is running or asked for.
    pub index_cache_warmed_bytes: u64,
    pub index_cache_warming: bool,
    /// Heads of paged blocks (page checksum tables) cached for reads of parts of
    /// large values: budget, hits and misses.
    pub head_cache_capacity: u64,
    pub head_cache_hits: u64,
    pub head_cache_misses: u64,
    /// Memory accounted against the budget: caches (with the block cache's admission
    /// filter, and the head cache), memtables, bloom filters and block indexes of
    /// runs, garbage map.
    pub memory_bytes: u64,
    pub memory_budget: u64,
    /// Device reads per get (reads of log blocks, not cache hits).
    pub device_reads_per_get: f64,
    /// Device bytes read per get.
    pub bytes_read_per_get: f64,
    pub block_cache_hit_rate: f64,
    pub index_cache_hit_rate: f64,
    pub multi_get_batches: u64,
    /// Bytes of value parts read from the device straight into the caller's
    /// page-aligned buffers (`Db::multi_get_ranges_to`), verified there and never
    /// copied.
    pub part_bytes_read_in_place: u64,
    /// Device reads in flight per io_uring submission: (bucket, submissions).
    pub io_queue_depth: Vec<(&'static str, u64)>,
    /// Reads that went to the device inside the one before them (adjacent in one
    /// segment file: one vectored read); not counted in `device_reads`.
    pub reads_merged: u64,
    /// How long an io_uring wait polls for a completion before it sleeps (0: never).
    pub read_poll_micros: u64,
    /// io_uring waits that ended while polling.
    pub read_waits_polled: u64,
    /// io_uring waits that slept (polling off or busy on other threads, or too slow).
    pub read_waits_slept: u64,
    /// Total writer stall: `write_stall_flush_micros + write_stall_gc_micros +
    /// write_stall_merge_micros`.
    pub write_stall_micros: u64,
    /// Stall waiting for memtable flushes because the write cache was full.
    pub write_stall_flush_micros: u64,
    /// Stall from GC's slow-down while the log was below its target fill.
    pub write_stall_gc_micros: u64,
    /// Stall from the merge debt's slow-down (garbage the index merges have not found
    /// yet above [`crate::MERGE_DEBT_THROTTLE`]).
    pub write_stall_merge_micros: u64,
}

impl Stats {
    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("stats serialize")
    }
}

/// Live data below which [`Stats::space_amp`] is not given: 1 MiB.
pub const SPACE_AMP_MIN_LIVE: u64 = 1 << 20;

/// `disk / live`, once live data reaches [`SPACE_AMP_MIN_LIVE`].
fn space_amp(disk: u64, live: u64) -> Option<f64> {
    (live >= SPACE_AMP_MIN_LIVE).then(|| ratio(disk, live))
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

pub(crate) fn collect(inner: &Inner) -> Stats {
    let segs = inner.segments.read().clone();
    let v = inner.version.read().clone();
    let shadow = inner.shadow_permille.load(Ordering::Relaxed);
    let (segments, live, total) = {
        let g = inner.garbage.lock();
        let mut out = Vec::new();
        let (mut live, mut total) = (0u64, 0u64);
        for s in segs.values() {
            let rec = s.raw_bytes.load(Ordering::Relaxed);
            let dead = g.dead_bytes(s.id).min(rec);
            total += rec;
            live += rec - dead;
            out.push(SegmentStats {
                id: s.id,
                disk_bytes: s.disk_bytes(),
                record_bytes: rec,
                garbage_bytes: dead,
                garbage_ratio: ratio(dead, rec),
                sealed: s.sealed.load(Ordering::Relaxed),
            });
        }
        (out, live, total)
    };
    let mut disk_bytes = 0u64;
    let mut log_disk = 0u64;
    let mut idx_disk = 0u64;
    if let Ok(rd) = std::fs::read_dir(&inner.dir) {
        for e in rd.flatten() {
            let len = e.metadata().map(|m| m.len()).unwrap_or(0);
            disk_bytes += len;
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.ends_with(".log") {
                log_disk += len;
            } else if name.ends_with(".run") {
                idx_disk += len;
            }
        }
    }
    let c = &inner.counters;
    let s = &inner.stats;
    let user = s.user_bytes_written.load(Ordering::Relaxed);
    let dev_w = c.bytes_written.load(Ordering::Relaxed);
    let gets = s.gets.load(Ordering::Relaxed);
    let stall_flush = s.stall_flush_micros.load(Ordering::Relaxed);
    let stall_gc = s.stall_gc_micros.load(Ordering::Relaxed);
    let stall_merge = s.stall_merge_micros.load(Ordering::Relaxed);
    let dreads = s.device_reads.load(Ordering::Relaxed);
    let mem_tables: u64 = v.memtables().map(|m| m.approx_bytes()).sum();
    let mem_entries: usize = v.memtables().map(|m| m.len()).sum();
    let run_mem: u64 = v.runs.iter().map(|r| r.memory_bytes() as u64).sum();
    let memory = mem_tables
        + run_mem
        + inner.data_cache.used() as u64
        + inner.data_cache.filter_bytes() as u64
        + inner.index_cache.used() as u64
        + inner.head_cache.used() as u64
        + inner.garbage.lock().memory_bytes() as u64;
    let meta = inner.meta.lock();
    Stats {
        io_mode: inner.io_mode,
        io_backend: inner.io_backend.name(),
        compression: format!("{:?}", inner.opts.compression).to_lowercase(),
        target_fill_pct: inner.opts.target_fill_pct,
        last_seqno: inner.visible_seqno.load(Ordering::SeqCst),
        purge_seqno: meta.purge_seqno,
        collections: inner.catalog.read().by_name.len(),
        user_bytes_written: user,
        writes: s.writes.load(Ordering::Relaxed),
        commits: s.commits.load(Ordering::Relaxed),
        gets,
        device_bytes_written: dev_w,
        device_bytes_read: c.bytes_read.load(Ordering::Relaxed),
        device_reads: c.reads.load(Ordering::Relaxed),
        device_writes: c.writes.load(Ordering::Relaxed),
        syncs: s.syncs.load(Ordering::Relaxed),
        write_amp: ratio(dev_w, user),
        live_bytes: live,
        log_record_bytes: total,
        disk_bytes,
        log_disk_bytes: log_disk,
        index_disk_bytes: idx_disk,
        space_amp: space_amp(disk_bytes, live),
        segments,
        index_runs: v.runs.len(),
        index_entries: v.runs.iter().map(|r| r.entries).sum(),
        index_entries_unmerged: mem_entries as u64
            + v.runs.iter().rev().skip(1).map(|r| r.entries).sum::<u64>(),
        index_merge_debt: crate::flush::merge_debt(&v.runs, shadow),
        index_shadow_ratio: shadow.min(1000) as f64 / 1000.0,
        memtable_entries: mem_entries,
        memtable_bytes: mem_tables,
        flushes: s.flushes.load(Ordering::Relaxed),
        idle_flushes: s.idle_flushes.load(Ordering::Relaxed),
        merges: s.merges.load(Ordering::Relaxed),
        gc_runs: s.gc_runs.load(Ordering::Relaxed),
        gc_bytes_moved: s.gc_bytes_moved.load(Ordering::Relaxed),
        gc_bytes_reclaimed: s.gc_bytes_reclaimed.load(Ordering::Relaxed),
        gc_bytes_read: s.gc_bytes_read.load(Ordering::Relaxed),
        segments_recycled: inner.recycler.reused(),
        free_segment_files: inner.recycler.free_files(),
        block_cache_capacity: inner.data_cache.capacity() as u64,
        index_cache_capacity: inner.index_cache.capacity() as u64,
        block_cache_hits: inner.data_cache.hits(),
        block_cache_misses: inner.data_cache.misses(),
        block_cache_declined: inner.data_cache.declined.load(Ordering::Relaxed),
        index_cache_hits: inner.index_cache.hits(),
        index_cache_misses: inner.index_cache.misses(),
        index_cache_warmed_bytes: s.index_warm_bytes.load(Ordering::Relaxed),
        index_cache_warming: s.index_warming.load(Ordering::Relaxed),
        head_cache_capacity: inner.head_cache.capacity() as u64,
        head_cache_hits: inner.head_cache.hits(),
        head_cache_misses: inner.head_cache.misses(),
        memory_bytes: memory,
        memory_budget: inner.opts.memory_budget,
        device_reads_per_get: ratio(dreads, gets),
        bytes_read_per_get: ratio(s.get_bytes_read.load(Ordering::Relaxed), gets),
        block_cache_hit_rate: {
            let (h, m) = (inner.data_cache.hits(), inner.data_cache.misses());
            ratio(h, h + m)
        },
        index_cache_hit_rate: {
            let (h, m) = (inner.index_cache.hits(), inner.index_cache.misses());
            ratio(h, h + m)
        },
        multi_get_batches: s.multi_get_batches.load(Ordering::Relaxed),
        part_bytes_read_in_place: s.part_bytes_in_place.load(Ordering::Relaxed),
        io_queue_depth: s.ring.queue_depth.snapshot(),
        reads_merged: s.ring.merged_reads.load(Ordering::Relaxed),
        read_poll_micros: inner.opts.read_poll_micros,
        read_waits_polled: s.ring.polled_waits.load(Ordering::Relaxed),
        read_waits_slept: s.ring.slept_waits.load(Ordering::Relaxed),
        write_stall_micros: stall_flush + stall_gc + stall_merge,
        write_stall_flush_micros: stall_flush,
        write_stall_gc_micros: stall_gc,
        write_stall_merge_micros: stall_merge,
    }
}

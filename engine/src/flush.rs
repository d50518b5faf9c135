//! Moving the write cache to disk and keeping the index small:
//! memtable flush → new index run → (maybe) merge of runs → checkpoint.
//!
//! Garbage is found here, never by lookups on the write path: whenever two versions
//! of a key meet (in a memtable being flushed or in a merge), the loser's
//! `(segment, block, seqno, size)` goes to the delete list, which is made durable
//! before the checkpoint that installs the new run.

use crate::checkpoint::{self, Checkpoint, LogPos};
use crate::db::{Inner, MetaState, Version};
use crate::entry::IndexEntry;
use crate::error::{Error, Result};
use crate::garbage::DeadRecord;
use crate::index_run::{Run, RunCursor, RunWriter};
use crate::kway::MergeOrder;
use crate::memtable::{self, Memtable};
use crate::record::CollId;
use crate::segment::SegId;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Background loop: flush rotated memtables (merges run in their own thread, so a
/// long merge never holds up a flush and the writers behind it).
pub fn flush_thread(inner: &Arc<Inner>) {
    let idle = IdleWatch::default();
    background_loop(
        inner,
        "index flush",
        |inner| {
            if inner.version.read().imm.is_empty() && idle.due(inner) {
                inner.rotate_memtable(&mut inner.writer.lock())?;
                inner.stats.idle_flushes.fetch_add(1, Ordering::Relaxed);
            }
            flush_waiting(inner)
        },
        |inner| !inner.version.read().imm.is_empty() || idle.due(inner),
    );
}

/// When the write cache is flushed although not full (option `idle_flush_ms`): once no
/// commit has come for that long, if the active memtable holds a tombstone or began in
/// a segment before the tail. Until its flush, GC can neither learn what its tombstones
/// and overwrites made garbage nor collect the segments it replays from: deleting a
/// 1 GiB file and then writing nothing kept all 1 GiB on disk, and a restart replays
/// all of that log.
#[derive(Default)]
struct IdleWatch {
    /// The commit count last seen and when it was first seen.
    last: std::sync::Mutex<Option<(u64, std::time::Instant)>>,
}

impl IdleWatch {
    fn due(&self, inner: &Inner) -> bool {
        let idle_ms = inner.opts.idle_flush_ms;
        if idle_ms == 0 || inner.read_only {
            return false;
        }
        let now = inner.commit_no.load(Ordering::SeqCst);
        let since = {
            let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
            match *last {
                Some((n, at)) if n == now => at,
                _ => {
                    *last = Some((now, std::time::Instant::now()));
                    return false;
                }
            }
        };
        if since.elapsed() < Duration::from_millis(idle_ms) {
            return false;
        }
        let active = inner.version.read().active.clone();
        !active.is_empty()
            && (active.tombstones() > 0 || active.start.seg != inner.writer.lock().seg.id)
    }
}

/// Background loop: merge index runs (and purge dropped collections).
pub fn merge_thread(inner: &Arc<Inner>) {
    background_loop(
        inner,
        "index merge",
        |inner| {
            let _m = inner.merge_lock.lock();
            let full = inner.want_full_merge.swap(false, Ordering::SeqCst);
            let did = maybe_merge(inner, full)?;
            if did {
                inner.rebalance_caches();
            }
            Ok(did)
        },
        |inner| {
            inner.want_full_merge.load(Ordering::SeqCst)
                || pick_merge(
                    &inner.version.read().runs,
                    false,
                    inner.shadow_permille.load(Ordering::Relaxed),
                ) >= 2
        },
    );
}

/// Runs `step` while `has_work`, sleeping on the background condition variable
/// otherwise; errors are logged, recorded for writers, and retried with backoff.
fn background_loop(
    inner: &Arc<Inner>,
    what: &str,
    step: impl Fn(&Arc<Inner>) -> Result<bool>,
    has_work: impl Fn(&Arc<Inner>) -> bool,
) {
    let mut backoff = Duration::from_millis(10);
    while !inner.shutdown.load(Ordering::SeqCst) {
        if !has_work(inner) {
            let mut g = inner.bg_mutex.lock();
            inner.bg_cond.wait_for(&mut g, Duration::from_millis(100));
            continue;
        }
        match step(inner) {
            Ok(_) => {
                *inner.flush_error.lock() = None;
                backoff = Duration::from_millis(10);
                inner.bg_cond.notify_all();
            }
            Err(e) => {
                tracing::error!("{what} failed (will retry): {e}");
                *inner.flush_error.lock() = Some(e.to_string());
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}

/// Runs merges until the policy is satisfied (used by `Db::flush`, so that garbage
/// discovered by merges is accounted when it returns).
pub fn merge_all(inner: &Arc<Inner>) -> Result<()> {
    let _m = inner.merge_lock.lock();
    let full = inner.want_full_merge.swap(false, Ordering::SeqCst);
    let mut first = true;
    while maybe_merge(inner, full && first)? {
        first = false;
    }
    inner.rebalance_caches();
    Ok(())
}

/// Flushes every rotated memtable now (used by `Db::flush`).
pub fn flush_all(inner: &Arc<Inner>) -> Result<()> {
    while flush_waiting(inner)? {}
    Ok(())
}

/// Writes the checkpoint describing the current state. The delete list is synced
/// first so the checkpoint never points past durable garbage entries.
pub fn write_checkpoint(inner: &Inner, meta: &MetaState) -> Result<()> {
    let deletes = inner.garbage.lock().persist()?;
    crate::failpoint::pause("checkpoint-after-deletes-sync");
    let v = inner.version.read().clone();
    let replay_from = v.imm.last().map(|m| m.start).unwrap_or(v.active.start);
    let segments: Vec<_> = inner.segments.read().keys().copied().collect();
    // Every seqno in the runs is visible; replay covers anything newer.
    let last_seqno = inner.visible_seqno.load(Ordering::SeqCst);
    let c = Checkpoint {
        last_seqno,
        replay_from,
        runs: v.runs.iter().map(|r| r.id).collect(),
        segments,
        deletes_len: deletes.len,
        deletes_gen: deletes.gen,
        next_run_id: meta.next_run_id,
        catalog: inner.catalog.read().clone(),
        purge_seqno: meta.purge_seqno,
        shadow_permille: match inner.shadow_permille.load(Ordering::Relaxed) {
            SHADOW_UNMEASURED => None,
            measured => Some(measured),
        },
    };
    checkpoint::write(&inner.dir, &c, &inner.counters)?;
    inner.garbage.lock().remove_superseded();
    Ok(())
}

/// Whether any memtable other than those in `skip` holds a version of the key. A
/// tombstone must not be dropped while one does: it may be a GC copy of an older
/// version that the tombstone still has to shadow. Called under `index_install`,
/// which GC holds while it inserts copies, so no copy can slip in after the check.
fn in_other_memtables(v: &Version, skip: &[u64], coll: CollId, key: &[u8]) -> bool {
    let h = crate::bloom::key_hash(coll, key);
    v.memtables()
        .filter(|m| !skip.contains(&m.id))
        .any(|m| m.get(coll, key, h, u64::MAX).is_some())
}

/// Shadowed versions a merge collects before handing them to the garbage map.
const PUBLISH_DEAD_EVERY: usize = 16 << 10;

/// Hands versions that are shadowed in the installed index to the garbage map (in
/// memory; durable with the next checkpoint, which syncs the delete list first). If
/// they are lost in a crash, redoing the merge finds them again.
fn publish_dead(inner: &Inner, dead: &mut Vec<DeadRecord>) {
    let segs = inner.segments.read().clone();
    inner
        .garbage
        .lock()
        .add(dead.drain(..).filter(|d| segs.contains_key(&d.seg)));
}

/// Installs an index change (`install` makes the new version from the current one),
/// records the versions it dropped in the delete list (those of live segments) and
/// writes the checkpoint that makes it durable (the delete list is synced first, see
/// `write_checkpoint`), all under `meta`, which every checkpoint holds.
///
/// Installing before taking `meta` let another thread's checkpoint fall between the
/// install and the recording: it listed the new runs without the dead versions they
/// leave behind, and after a crash there nothing found those again (a change the
/// checkpoint lists is not redone). GC then copied a version that a dropped tombstone
/// had been hiding, and a deleted key came back (the crash harness, with checkpoints
/// paused after their delete-list sync, found it within a hundred kills).
fn install_and_checkpoint(
    inner: &Inner,
    install: impl FnOnce(&Version) -> Version,
    dead: Vec<DeadRecord>,
    purged: u64,
) -> Result<()> {
    let mut meta = inner.meta.lock();
    {
        let mut ver = inner.version.write();
        *ver = Arc::new(install(&ver));
    }
    let segs = inner.segments.read().clone();
    inner
        .garbage
        .lock()
        .add(dead.into_iter().filter(|d| segs.contains_key(&d.seg)));
    meta.purge_seqno = meta.purge_seqno.max(purged);
    write_checkpoint(inner, &meta)
}

/// `(offset, length)` of every block from a memtable's start on, by segment, copied
/// once per flush. Looking each entry's block up in the live segment map and block
/// table instead (two locks, an `Arc` clone and a binary search over a whole
/// segment's blocks per entry) was ~5% of an overwrite's CPU, in the flush thread.
struct BlockLengths(Vec<(SegId, Vec<(u64, u32)>)>);

impl BlockLengths {
    fn from(inner: &Inner, start: LogPos) -> BlockLengths {
        let segs = inner.segments.read().clone();
        BlockLengths(
            segs.range(start.seg..)
                .map(|(&id, seg)| {
                    let from = if id == start.seg { start.off } else { 0 };
                    let blocks = seg.blocks.read();
                    let first = blocks.partition_point(|b| b.off < from);
                    (id, blocks[first..].iter().map(|b| (b.off, b.len)).collect())
                })
                .collect(),
        )
    }

    /// Fills in `e`'s block length if unknown; entries outside the copy (none are
    /// expected) take the live tables' path.
    fn resolve(&self, inner: &Inner, e: &mut IndexEntry) -> Result<()> {
        if e.loc.len != 0 {
            return Ok(());
        }
        let found = self
            .0
            .iter()
            .find(|(id, _)| *id == e.loc.seg)
            .and_then(|(_, b)| {
                b.binary_search_by_key(&e.loc.off, |x| x.0)
                    .ok()
                    .map(|i| b[i].1)
            });
        match found {
            Some(len) => {
                e.loc.len = len;
                Ok(())
            }
            None => resolve(inner, e),
        }
    }
}

/// Resolves block lengths still unknown in a memtable entry (its block was sealed
/// after the entry was inserted).
fn resolve(inner: &Inner, e: &mut IndexEntry) -> Result<()> {
    if e.loc.len == 0 {
        let seg = inner.segments.read().get(&e.loc.seg).cloned();
        let b = seg
            .as_ref()
            .and_then(|s| s.block_at(e.loc.off))
            .ok_or_else(|| {
                Error::corruption(
                    crate::segment::segment_path(&inner.dir, e.loc.seg),
                    e.loc.off,
                    "memtable entry points to an unknown block",
                )
            })?;
        e.loc.len = b.len;
    }
    Ok(())
}

fn dead_of(e: &IndexEntry) -> DeadRecord {
    DeadRecord {
        seg: e.loc.seg,
        off: e.loc.off,
        seqno: e.seqno,
        size: e.rec_size,
    }
}

/// Flushes every rotated memtable into one run. Returns false if there was none.
///
/// Flushing all that wait at once, rather than the oldest alone, pays a flush's fixed
/// cost (a log sync, the run's fsync, the delete list's and the checkpoint's) once for
/// all of them. With a small write cache (an 8 MiB budget, db_bench's default
/// `--cache_size`: 680 KiB memtables) a flush a memtable meant ~100 flushes a second
/// and writers waited for the flush thread half of the time.
pub fn flush_waiting(inner: &Arc<Inner>) -> Result<bool> {
    let _f = inner.flush_lock.lock();
    // Oldest last, as in the version; the oldest's start is where their records begin.
    let tables: Vec<Arc<Memtable>> = inner.version.read().imm.clone();
    let Some(oldest) = tables.last() else {
        return Ok(false);
    };
    let ids: Vec<u64> = tables.iter().map(|m| m.id).collect();
    // Newer versions that make older ones garbage must be durable first.
    let target = inner.commit_no.load(Ordering::SeqCst);
    inner.sync_upto(target)?;

    let dropped: BTreeSet<CollId> = inner.catalog.read().dropped.clone();
    let v = inner.version.read().clone();
    let no_older_data = v.runs.is_empty();
    // A flush that may drop entries (tombstones with no run below, a dropped
    // collection's) holds GC's copies off throughout, as a merge does from its first
    // drop (see `maybe_merge`); any other flush only while it installs.
    let may_drop = no_older_data || !dropped.is_empty();
    let gc_held = may_drop.then(|| inner.index_install.lock());
    let run_id = {
        let mut m = inner.meta.lock();
        m.next_run_id += 1;
        m.next_run_id - 1
    };
    let mut dead = Vec::new();
    let mut w = RunWriter::create(
        &inner.dir,
        run_id,
        tables.iter().map(|m| m.len()).sum(),
        inner.io_mode,
        inner.counters.clone(),
    )?;
    let mut written = 0u64;
    let mut purged = 0;
    let lengths = BlockLengths::from(inner, oldest.start);
    let walk: Vec<&Memtable> = tables.iter().map(|m| &**m).collect();
    memtable::for_each_key_of(&walk, |coll, key, versions| -> Result<()> {
        let mut best = versions[0];
        for e in &versions[1..] {
            if e.supersedes(&best) {
                best = *e;
            }
        }
        for e in versions {
            if *e != best {
                dead.push(dead_of(e));
            }
        }
        let drop_tombstone = best.is_tombstone()
            && no_older_data
            && !in_other_memtables(&inner.version.read(), &ids, coll, key);
        if dropped.contains(&coll) || drop_tombstone {
            if best.is_tombstone() {
                purged = purged.max(best.seqno);
            }
            dead.push(dead_of(&best));
        } else {
            lengths.resolve(inner, &mut best)?;
            w.add(coll, key, &best)?;
            written += 1;
        }
        Ok(())
    })?;
    let run = Arc::new(w.finish(inner.index_cache.clone())?);
    let keep_run = written > 0;
    let install = |ver: &Version| {
        let imm: Vec<_> = ver
            .imm
            .iter()
            .filter(|m| !ids.contains(&m.id))
            .cloned()
            .collect();
        let mut runs = ver.runs.clone();
        if keep_run {
            runs.insert(0, run.clone());
        }
        Version {
            active: ver.active.clone(),
            imm,
            runs,
        }
    };
    let _install = gc_held.unwrap_or_else(|| inner.index_install.lock());
    install_and_checkpoint(inner, install, dead, purged)?;
    if !keep_run {
        run.mark_obsolete();
    }
    // The flushed memtable's share of the write cache goes back to the caches.
    inner.rebalance_caches();
    inner.stats.flushes.fetch_add(1, Ordering::Relaxed);
    inner.bg_cond.notify_all();
    Ok(true)
}

/// Bytes a merge reads ahead over all its inputs (each input reads 64 KiB..1 MiB at a
/// time): under O_DIRECT a block-at-a-time walk paid a device round trip per 4 KiB,
/// and merges fell so far behind an overwrite that the index grew to 125 runs.
const MERGE_READAHEAD: usize = 8 << 20;

/// The newer runs are merged into the oldest one once the garbage they are expected
/// to hide there reaches this fraction of the oldest run (or, as between the other
/// levels, once they reach half its size). Every entry outside the oldest run may
/// shadow a version in it that GC does not know of yet, so the log holds that much
/// unknown garbage on top of what GC's target fill allows. How many do is measured by
/// each merge into the oldest run ([`Inner::shadow_permille`]): nearly all under
/// overwrites, none while keys are only added (where merging early would rewrite the
/// whole index for nothing).
pub const BOTTOM_MERGE_DEBT: f64 = 0.15;

/// [`Inner::shadow_permille`] before any merge into the oldest run has measured it
/// (counted as every newer entry shadowing one; not written to the checkpoint).
pub(crate) const SHADOW_UNMEASURED: u64 = 1001;

/// Above this merge debt writers are slowed down ([`merge_delay_nanos_per_kib`]): the
/// one merge thread cannot keep up (a bottom merge of a 150 MB index runs for seconds,
/// on the cores the writers use), and unknown garbage would grow without bound. An
/// overwrite of 3M keys at full speed for 60 s ended with 2.2M entries outside the
/// oldest run, 2.6x the user data on disk.
pub const MERGE_DEBT_THROTTLE: f64 = 0.2;

/// Expected unknown garbage of an index as a fraction of its oldest run: bytes of the
/// newer runs over the oldest run's, times the fraction of newer entries the last
/// merge into the oldest run found shadowing something.
pub(crate) fn merge_debt(runs: &[Arc<Run>], shadow_permille: u64) -> f64 {
    debt_of_sizes(&run_sizes(runs), shadow_permille)
}

fn run_sizes(runs: &[Arc<Run>]) -> Vec<u64> {
    runs.iter().map(|r| r.file_size).collect()
}

/// [`merge_debt`] of runs of these file sizes, newest first.
fn debt_of_sizes(sizes: &[u64], shadow_permille: u64) -> f64 {
    let Some((bottom, newer)) = sizes.split_last() else {
        return 0.0;
    };
    let newer: u64 = newer.iter().sum();
    newer as f64 * shadow_permille.min(1000) as f64 / 1000.0 / (*bottom).max(1) as f64
}

/// Writer delay per KiB (ns) for a merge debt: the GC throttle's rule
/// ([`crate::gc::delay_nanos_per_kib`]) for each point above [`MERGE_DEBT_THROTTLE`].
pub(crate) fn merge_delay_nanos_per_kib(debt: f64) -> u64 {
    crate::gc::delay_nanos_per_kib((debt - MERGE_DEBT_THROTTLE) * 100.0)
}

/// Picks the newest runs to merge: the longest prefix whose total size reaches half
/// the next run's size (~log2 levels, merged early so that superseded versions meet —
/// that is when their garbage is found), into the oldest run also once the merge debt
/// reaches [`BOTTOM_MERGE_DEBT`], at most 6 runs in all, or everything with `full`.
fn pick_merge(runs: &[Arc<Run>], full: bool, shadow_permille: u64) -> usize {
    if full {
        return runs.len();
    }
    pick_by_size(&run_sizes(runs), shadow_permille)
}

/// [`pick_merge`] over runs of these file sizes, newest first.
fn pick_by_size(sizes: &[u64], shadow_permille: u64) -> usize {
    let indebted = debt_of_sizes(sizes, shadow_permille) >= BOTTOM_MERGE_DEBT;
    let mut acc = 0u64;
    let mut k = 0;
    for (i, &size) in sizes.iter().enumerate() {
        let due = acc * 2 >= size || (indebted && i + 1 == sizes.len());
        if i > 0 && !due {
            break;
        }
        acc += size;
        k = i + 1;
    }
    if sizes.len() > 6 {
        k = k.max(sizes.len() - 4);
    }
    k
}

/// Whether `key` has a version in a memtable or in a run that is not one of the
/// merge's `inputs` (flushed while the merge ran): its tombstone must stay.
fn outside_merge(inner: &Inner, inputs: &[Arc<Run>], coll: CollId, key: &[u8]) -> Result<bool> {
    let v = inner.version.read().clone();
    if in_other_memtables(&v, &[], coll, key) {
        return Ok(true);
    }
    let hash = crate::bloom::key_hash(coll, key);
    let (reads, bytes) = (AtomicU64::new(0), AtomicU64::new(0));
    for r in v
        .runs
        .iter()
        .filter(|r| !inputs.iter().any(|i| i.id == r.id))
    {
        if r.get(coll, key, hash, &reads, &bytes)?.is_some() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Merges runs when the policy says so (all of them with `full`, e.g. after a drop).
/// Caller holds `merge_lock`. Returns whether a merge happened.
///
/// The merge runs beside GC. Only dropping an entry (a tombstone at the bottom, or a
/// dropped collection's) could conflict with GC: a copy GC inserts afterwards might
/// be an older version the dropped tombstone was shadowing. So at its first drop the
/// merge takes `index_install`, which GC holds while it inserts copies, and keeps it
/// until installed; whether a key's tombstone may go is decided under it. Merges that
/// drop nothing (all of them in an overwrite workload) never hold GC up.
pub fn maybe_merge(inner: &Arc<Inner>, full: bool) -> Result<bool> {
    let v = inner.version.read().clone();
    let k = pick_merge(&v.runs, full, inner.shadow_permille.load(Ordering::Relaxed));
    if k < 2 && !(full && k == 1) {
        return Ok(false);
    }
    let inputs: Vec<Arc<Run>> = v.runs[..k].to_vec();
    let bottom = k == v.runs.len();
    let dropped: BTreeSet<CollId> = inner.catalog.read().dropped.clone();
    let run_id = {
        let mut m = inner.meta.lock();
        m.next_run_id += 1;
        m.next_run_id - 1
    };
    let expected = inputs.iter().map(|r| r.entries as usize).sum();
    let mut w = RunWriter::create(
        &inner.dir,
        run_id,
        expected,
        inner.io_mode,
        inner.counters.clone(),
    )?;
    let readahead = (MERGE_READAHEAD / inputs.len()).clamp(64 << 10, 1 << 20);
    let mut cursors = inputs
        .iter()
        .map(|r| RunCursor::seek_uncached(r.clone(), 0, Some(&[]), readahead))
        .collect::<Result<Vec<_>>>()?;
    let mut dead = Vec::new();
    let mut shadowed = Vec::new();
    let mut written = 0u64;
    let mut purged = 0;
    let mut gc_held = None;
    // Cursor `a`'s entry comes before `b`'s: by key, then the newer run first.
    let before = |cursors: &[RunCursor], a: usize, b: usize| {
        let (ca, ka, _) = cursors[a].peek().expect("ordered cursors have an entry");
        let (cb, kb, _) = cursors[b].peek().expect("ordered cursors have an entry");
        (ca, ka, a) < (cb, kb, b)
    };
    let mut order = MergeOrder::new(
        cursors.len(),
        |i| cursors[i].peek().is_some(),
        |a, b| before(&cursors, a, b),
    );
    let mut key: Vec<u8> = Vec::new();
    let mut losers = Vec::new();
    let mut lost = 0u64;
    while let Some(first) = order.first() {
        let (coll, k, _) = cursors[first]
            .peek()
            .expect("ordered cursors have an entry");
        key.clear();
        key.extend_from_slice(k);
        let mut best: Option<IndexEntry> = None;
        losers.clear();
        while let Some(i) = order.first() {
            let (cc, ck, e) = cursors[i].peek().expect("ordered cursors have an entry");
            if cc != coll || ck != key.as_slice() {
                break;
            }
            match best {
                Some(b) if e.supersedes(&b) => {
                    losers.push(b);
                    best = Some(e);
                }
                Some(_) => losers.push(e),
                None => best = Some(e),
            }
            cursors[i].advance()?;
            order.advanced(cursors[i].peek().is_some(), |a, b| before(&cursors, a, b));
        }
        let best = best.expect("min key came from a cursor");
        // A loser is shadowed by the winner in the installed index too, so GC may
        // learn of it now: garbage found by a long merge reaches GC as the merge
        // goes, not in one burst at its end. (Dropped winners wait for the install.)
        lost += losers.len() as u64;
        shadowed.extend(losers.iter().map(dead_of));
        if shadowed.len() >= PUBLISH_DEAD_EVERY {
            publish_dead(inner, &mut shadowed);
        }
        let drop_coll = dropped.contains(&coll);
        let bottom_tombstone = bottom && best.is_tombstone();
        if (drop_coll || bottom_tombstone) && gc_held.is_none() {
            gc_held = Some(inner.index_install.lock());
        }
        let drop_tombstone = bottom_tombstone && !outside_merge(inner, &inputs, coll, &key)?;
        if drop_coll || drop_tombstone {
            if best.is_tombstone() {
                purged = purged.max(best.seqno);
            }
            dead.push(dead_of(&best));
        } else {
            w.add(coll, &key, &best)?;
            written += 1;
        }
    }
    let run = Arc::new(w.finish(inner.index_cache.clone())?);
    let _install = gc_held.unwrap_or_else(|| inner.index_install.lock());
    let install = |ver: &Version| {
        let ids: Vec<u64> = inputs.iter().map(|r| r.id).collect();
        let mut runs: Vec<Arc<Run>> = Vec::new();
        let mut placed = false;
        for r in &ver.runs {
            if ids.contains(&r.id) {
                if !placed && written > 0 {
                    runs.push(run.clone());
                }
                placed = true;
            } else {
                runs.push(r.clone());
            }
        }
        Version {
            active: ver.active.clone(),
            imm: ver.imm.clone(),
            runs,
        }
    };
    // Measured before the install, so that its checkpoint keeps it.
    if bottom && k >= 2 {
        let newer: u64 = inputs[..k - 1].iter().map(|r| r.entries).sum();
        inner
            .shadow_permille
            .store((lost * 1000 / newer.max(1)).min(1000), Ordering::Relaxed);
    }
    dead.append(&mut shadowed);
    install_and_checkpoint(inner, install, dead, purged)?;
    for r in &inputs {
        r.mark_obsolete();
    }
    if written == 0 {
        run.mark_obsolete();
    }
    crate::index_warm::after_merge(inner, (written > 0).then_some(&run), &inputs);
    inner.stats.merges.fetch_add(1, Ordering::Relaxed);
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::{debt_of_sizes, merge_delay_nanos_per_kib, pick_by_size};
    use crate::{Db, Options};
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    fn dead_bytes(db: &Db) -> u64 {
        db.inner
            .garbage
            .lock()
            .segs
            .values()
            .map(|s| s.dead_bytes)
            .sum()
    }

    /// Writes `keys` once more and flushes the memtable into a run of its own.
    fn round(db: &Db, keys: std::ops::Range<u32>, round: u8) {
        let c = db.collection("c").unwrap();
        for k in keys {
            c.put(&k.to_be_bytes(), &[round; 100]).unwrap();
        }
        db.inner
            .rotate_memtable(&mut db.inner.writer.lock())
            .unwrap();
        while super::flush_waiting(&db.inner).unwrap() {}
    }

    #[test]
    fn newer_runs_that_shadow_go_into_the_oldest_run_once_the_debt_is_due() {
        assert_eq!(super::BOTTOM_MERGE_DEBT, 0.15, "the cases below assume it");
        // (run sizes newest first, shadow per mille, runs merged, why)
        let cases: &[(&[u64], u64, usize, &str)] = &[
            // Under overwrites (every newer entry shadows one) 15% is enough ...
            (&[8, 7, 100], 1000, 3, "debt 0.15: merge all"),
            (&[7, 7, 100], 1000, 2, "debt 0.14: not the oldest"),
            // ... while keys are only added, the newer runs wait until half its size.
            (&[20, 25, 100], 0, 2, "nothing shadowed: not yet"),
            (&[20, 25, 100], 1000, 3, "all shadowed: merge all"),
            (&[20, 30, 100], 0, 3, "half its size: merge all"),
            (&[15, 15, 100], 500, 3, "debt 30 x 0.5 = 0.15"),
            // Between newer runs the half-size rule is unchanged.
            (&[5, 20, 1000], 1000, 1, "5 < 20/2: no merge"),
            (&[10, 20, 1000], 1000, 2, "10 >= 20/2"),
            (&[100], 1000, 1, "one run: nothing to merge"),
        ];
        for &(sizes, shadow, want, why) in cases {
            assert_eq!(
                pick_by_size(sizes, shadow),
                want,
                "{sizes:?} {shadow}: {why}"
            );
        }
    }

    #[test]
    fn merge_debt_slows_writers_only_above_its_line_and_never_stops_them() {
        let line = super::MERGE_DEBT_THROTTLE;
        assert!(
            line > super::BOTTOM_MERGE_DEBT,
            "the merge is due before writers slow"
        );
        assert_eq!(debt_of_sizes(&[], 1000), 0.0);
        assert_eq!(debt_of_sizes(&[100], 1000), 0.0);
        assert!((debt_of_sizes(&[30, 20, 100], 1000) - 0.5).abs() < 1e-9);
        assert!((debt_of_sizes(&[30, 20, 100], 400) - 0.2).abs() < 1e-9);
        assert_eq!(merge_delay_nanos_per_kib(0.0), 0);
        assert_eq!(merge_delay_nanos_per_kib(line), 0, "at the line");
        let a = merge_delay_nanos_per_kib(line + 0.05);
        let b = merge_delay_nanos_per_kib(line + 0.15);
        assert!(a > 0 && b > a, "grows with the debt: {a} then {b}");
        assert_eq!(
            merge_delay_nanos_per_kib(50.0),
            200_000,
            "capped at 200 us/KiB"
        );
    }

    /// Two runs, the newer one's 1000 keys starting at `from` (the older one holds
    /// 0..1000), merged into one: what the merge measured as shadowing, per mille.
    fn shadow_measured_by_a_bottom_merge(from: u32) -> u64 {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), Options::for_unit_test(64 << 20)).unwrap();
        db.create_collection("c").unwrap();
        let _no_merge = db.inner.merge_lock.lock();
        round(&db, 0..1000, 1);
        round(&db, from..from + 1000, 2);
        assert_eq!(db.stats().index_runs, 2);
        assert_eq!(
            db.inner.shadow_permille.load(Ordering::Relaxed),
            super::SHADOW_UNMEASURED
        );
        assert!(super::maybe_merge(&db.inner, true).unwrap());
        assert_eq!(db.stats().index_runs, 1);
        let measured = db.inner.shadow_permille.load(Ordering::Relaxed);
        drop(_no_merge);
        drop(db);
        let db = Db::open(dir.path(), Options::for_unit_test(64 << 20)).unwrap();
        let reopened = db.inner.shadow_permille.load(Ordering::Relaxed);
        assert_eq!(reopened, measured, "the checkpoint keeps the measurement");
        measured
    }

    #[test]
    fn a_merge_into_the_oldest_run_measures_how_many_newer_entries_shadow_one() {
        assert_eq!(shadow_measured_by_a_bottom_merge(0), 1000, "overwrite");
        assert_eq!(
            shadow_measured_by_a_bottom_merge(500),
            500,
            "half overwrite"
        );
        assert_eq!(shadow_measured_by_a_bottom_merge(1000), 0, "new keys only");
    }

    /// Memtables that wait for the flush thread go into one run together: one flush
    /// pays one log sync, run fsync and checkpoint for all of them, and the versions
    /// of a key in different memtables meet there (the older become garbage at once).
    #[test]
    fn one_flush_writes_every_waiting_memtable_into_one_run() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), Options::for_unit_test(64 << 20)).unwrap();
        let c = db.create_collection("c").unwrap();
        let _no_merge = db.inner.merge_lock.lock();
        let flushing = db.inner.flush_lock.lock();
        let rotate = || {
            db.inner
                .rotate_memtable(&mut db.inner.writer.lock())
                .unwrap()
        };
        for round in 0..3u8 {
            for k in 0..1000u32 {
                c.put(&k.to_be_bytes(), &[round; 100]).unwrap();
            }
            rotate();
        }
        for k in 0..100u32 {
            c.delete(&k.to_be_bytes()).unwrap();
        }
        rotate();
        assert_eq!(db.inner.version.read().imm.len(), 4);
        let flushes = db.stats().flushes;
        drop(flushing);
        while super::flush_waiting(&db.inner).unwrap() {}
        let s = db.stats();
        assert_eq!(s.flushes - flushes, 1, "one flush for four memtables");
        assert_eq!(s.index_runs, 1);
        // The oldest tombstones go (no run below): one entry per live key.
        assert_eq!(s.index_entries, 900);
        // Three superseded puts per key, and the 100 deleted keys' last puts.
        let per_record = crate::record::encoded_len(1, 1, 4, 100) as u64;
        assert!(
            dead_bytes(&db) >= (3 * 1000 - 900) * per_record,
            "{} dead bytes",
            dead_bytes(&db)
        );
        for k in 0..1000u32 {
            let want = (k >= 100).then(|| vec![2u8; 100]);
            assert_eq!(c.get(&k.to_be_bytes()).unwrap(), want, "key {k}");
        }
    }

    /// A bottom merge of millions of entries runs for seconds; the versions it finds
    /// shadowed must reach GC while it runs, not in one burst when it installs.
    #[test]
    fn a_running_merge_hands_shadowed_versions_to_gc_before_it_installs() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), Options::for_unit_test(64 << 20)).unwrap();
        db.create_collection("c").unwrap();
        let keys = (super::PUBLISH_DEAD_EVERY + 1000) as u32;
        // The merge lock keeps the background merge from starting while the two
        // flushes install their runs (which takes the install lock); then the install
        // lock keeps the merge from installing.
        let merging = db.inner.merge_lock.lock();
        round(&db, 0..keys, 0);
        assert_eq!(dead_bytes(&db), 0, "one run holds every key once");
        round(&db, 0..keys, 1);
        assert_eq!(dead_bytes(&db), 0, "the two runs have not met");
        let install = db.inner.index_install.lock();
        drop(merging);
        let start = Instant::now();
        while dead_bytes(&db) == 0 && start.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let early = dead_bytes(&db);
        assert_eq!(db.stats().index_runs, 2, "the merge has not installed");
        drop(install);
        assert!(
            early > 0,
            "no shadowed version reached GC before the merge installed"
        );
        db.flush().unwrap();
        let c = db.collection("c").unwrap();
        for k in (0..keys).step_by(97) {
            assert_eq!(c.get(&k.to_be_bytes()).unwrap().unwrap(), vec![1u8; 100]);
        }
        println!(
            "{early} dead bytes known before the install, {} after",
            dead_bytes(&db)
        );
    }
}

//! Garbage collection of log segments, without index lookups.
//!
//! A victim is the sealed segment with the highest garbage ratio (dead bytes from the
//! delete list over the segment's record bytes) among segments entirely covered by the
//! last checkpoint. GC runs while the live fraction of the log is below the target
//! fill (`target_fill_pct`, Magma's PctUsed). Live records — those not in the delete
//! list and not of a dropped collection — are copied to the log tail in runs of
//! ascending seqnos as *relocated* records (same seqno, flag set), which the index
//! treats as winning ties but never shadowing a newer seqno. Once the copies are
//! durable, a checkpoint without the victim is written and the file is kept for reuse
//! or deleted when no reader, iterator or snapshot holds it any more.

use crate::aligned::{AlignedBuf, PAGE};
use crate::codec::{align_down, align_up};
use crate::db::{CommitOps, Inner, OwnedRecord};
use crate::error::{Error, Result};
use crate::flush::{merge_debt, merge_delay_nanos_per_kib, write_checkpoint};
use crate::record::{Kind, RecordIter, RecordRef};
use crate::segment::{BlockInfo, SegId};
use crate::segments::Segment;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Bytes of copies GC inserts per commit (under the writer lock).
const GC_COMMIT_BYTES: usize = 128 << 10;

/// Background loop: collect while below the target fill; adjust writer throttling.
pub fn gc_thread(inner: &Arc<Inner>) {
    while !inner.shutdown.load(Ordering::SeqCst) {
        let did = match gc_once(inner, false) {
            Ok(d) => d,
            Err(e) => {
                tracing::error!("GC failed (will retry): {e}");
                false
            }
        };
        update_throttle(inner);
        if !did {
            let mut g = inner.bg_mutex.lock();
            inner.bg_cond.wait_for(&mut g, Duration::from_millis(50));
        }
    }
    inner.gc_delay_nanos_per_kib.store(0, Ordering::Relaxed);
}

/// Live fraction of all record bytes in the log, in percent, and total bytes. With
/// `collectable_only`, only the garbage GC can collect now counts as dead.
pub fn fill_pct(inner: &Inner, collectable_only: bool) -> (f64, u64) {
    let segs = inner.segments.read().clone();
    let can = collectable_only.then(|| collectable(inner));
    let g = inner.garbage.lock();
    let mut total = 0u64;
    let mut dead = 0u64;
    for s in segs.values() {
        total += s.raw_bytes.load(Ordering::Relaxed);
        if can.as_ref().is_none_or(|can| can(s)) {
            dead += g.dead_bytes(s.id);
        }
    }
    if total == 0 {
        return (100.0, 0);
    }
    (
        100.0 * (total.saturating_sub(dead)) as f64 / total as f64,
        total,
    )
}

/// Which segments GC may collect now: sealed ones other than the tail, wholly before
/// the oldest memtable's first record (so covered by the last checkpoint).
fn collectable(inner: &Inner) -> impl Fn(&Segment) -> bool {
    let v = inner.version.read().clone();
    let replay_seg = v.imm.last().map(|m| m.start).unwrap_or(v.active.start).seg;
    let tail = inner.writer.lock().seg.id;
    move |s| s.id < replay_seg && s.id != tail && s.sealed.load(Ordering::SeqCst)
}

/// Most delay a writer owes per KiB (ns), whatever is behind.
const MAX_DELAY_NANOS_PER_KIB: u64 = 200_000;

/// The writer throttle's rule: 2 µs of delay per KiB written per point behind (a
/// 420-byte write, ~2.5 µs unthrottled, by ~0.9 µs per point), at most
/// [`MAX_DELAY_NANOS_PER_KIB`], so the background catches up without writes ever
/// stopping.
pub(crate) fn delay_nanos_per_kib(points_behind: f64) -> u64 {
    if points_behind > 0.0 {
        (points_behind * 2000.0).min(MAX_DELAY_NANOS_PER_KIB as f64) as u64
    } else {
        0
    }
}

/// Slows writers while GC (or merging) is behind. Garbage GC cannot collect yet (in
/// segments a memtable still replays from, or the tail) does not count: slowing
/// writers would only put off the flush that makes it collectable. (It did: after
/// 100,000 files were created and deleted, writers slept 0.8 s of every second while
/// GC had nothing to collect, and an untar took 2.5 times as long.)
fn update_throttle(inner: &Inner) {
    let (fill, total) = fill_pct(inner, true);
    let (delay, merge_share) = if total > 4 * inner.opts.segment_size {
        // GC is behind once the fill is more than 10 points below its target.
        let gc = delay_nanos_per_kib(inner.opts.target_fill_pct as f64 - 10.0 - fill);
        // Garbage GC cannot see yet counts too: while merges are behind, writers are
        // slowed the same way (see `flush::merge_debt`).
        let merge = merge_delay_nanos_per_kib(merge_debt(
            &inner.version.read().runs,
            inner.shadow_permille.load(Ordering::Relaxed),
        ));
        let total = (gc + merge).min(MAX_DELAY_NANOS_PER_KIB);
        (total, merge.min(total))
    } else {
        (0, 0)
    };
    inner
        .merge_delay_nanos_per_kib
        .store(merge_share, Ordering::Relaxed);
    inner.gc_delay_nanos_per_kib.store(delay, Ordering::Relaxed);
}

fn pick_victim(inner: &Inner, force: bool) -> Option<Arc<Segment>> {
    let (fill, _) = fill_pct(inner, false);
    if !force && fill >= inner.opts.target_fill_pct as f64 {
        return None;
    }
    let can = collectable(inner);
    let segs = inner.segments.read().clone();
    let g = inner.garbage.lock();
    let dropped = !inner.catalog.read().dropped.is_empty();
    segs.values()
        .filter(|s| can(s))
        .map(|s| {
            let raw = s.raw_bytes.load(Ordering::Relaxed).max(1);
            (g.dead_bytes(s.id) as f64 / raw as f64, s)
        })
        .filter(|(ratio, _)| *ratio > 0.0 || (force && dropped))
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, s)| s.clone())
}

/// Bytes GC reads from a victim at once (whole blocks; a larger block alone).
const READ_CHUNK: u64 = 1 << 20;

/// Splits a segment's blocks into ranges read together, at most `READ_CHUNK` bytes each.
fn read_chunks(blocks: &[BlockInfo]) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < blocks.len() {
        let start = align_down(blocks[i].off, PAGE as u64);
        let mut j = i + 1;
        while j < blocks.len() && blocks[j].off + blocks[j].len as u64 - start <= READ_CHUNK {
            j += 1;
        }
        out.push(i..j);
        i = j;
    }
    out
}

/// Chunks read ahead of the one being parsed, on a reader thread: a victim is read
/// while the previous chunk is decoded and copied, not one 1 MiB read at a time.
const CHUNKS_AHEAD: usize = 2;

/// Live user writes of a victim kept in memory from the first pass for the second, at
/// most this many bytes (and a sixteenth of the memory budget); the chunks holding any
/// beyond are read again.
const KEEP_USERS_MAX: u64 = 16 << 20;

/// Blocks `range` of a segment, read in one aligned read: the buffer, its file offset
/// and the bytes read.
struct Chunk {
    buf: AlignedBuf,
    start: u64,
    len: usize,
}

fn fetch_chunk(inner: &Inner, seg: &Segment, blocks: &[BlockInfo]) -> Result<Chunk> {
    let (Some(first), Some(last)) = (blocks.first(), blocks.last()) else {
        return Ok(Chunk {
            buf: AlignedBuf::zeroed(0),
            start: 0,
            len: 0,
        });
    };
    let start = align_down(first.off, PAGE as u64);
    let end = align_up(last.off + last.len as u64, PAGE as u64);
    let mut buf = AlignedBuf::zeroed((end - start) as usize);
    let len = seg.file.read_full(&mut buf, start)?;
    inner
        .stats
        .gc_bytes_read
        .fetch_add(len as u64, Ordering::Relaxed);
    Ok(Chunk { buf, start, len })
}

/// Hands every record of `blocks`, read into `chunk`, to `f` (checksums verified;
/// nothing is copied out of the chunk).
fn parse_chunk(
    seg: &Segment,
    blocks: &[BlockInfo],
    chunk: &Chunk,
    mut f: impl FnMut(RecordRef<'_>) -> Result<()>,
) -> Result<()> {
    for b in blocks {
        let s = (b.off - chunk.start) as usize;
        let e = s + b.len as usize;
        if e > chunk.len {
            return Err(Error::corruption(
                seg.file.path(),
                b.off,
                "block extends past the end of the file",
            ));
        }
        let (_, raw) = crate::block::decode(&chunk.buf[s..e], seg.file.path(), b.off, seg.seed())?;
        for item in RecordIter::new(&raw) {
            let (_, r) = item.map_err(|at| Error::malformed_record(seg.file.path(), b.off, at))?;
            f(r)?;
        }
    }
    Ok(())
}

/// Hands every record of the chunks `ranges` of a sealed segment, in order, to `f`
/// with the index of its chunk in `ranges`. A reader thread keeps up to
/// `CHUNKS_AHEAD` chunks read ahead; it stops at the first error, either side's.
fn for_each_chunk(
    inner: &Inner,
    seg: &Segment,
    blocks: &[BlockInfo],
    ranges: &[Range<usize>],
    mut f: impl FnMut(usize, RecordRef<'_>) -> Result<()>,
) -> Result<()> {
    let mut parse = |i: usize, chunk: Result<Chunk>| {
        parse_chunk(seg, &blocks[ranges[i].clone()], &chunk?, |rec| f(i, rec))
    };
    if ranges.len() < 2 {
        for (i, r) in ranges.iter().enumerate() {
            parse(i, fetch_chunk(inner, seg, &blocks[r.clone()]))?;
        }
        return Ok(());
    }
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::sync_channel(CHUNKS_AHEAD);
        std::thread::Builder::new()
            .name("basalt-gc-read".into())
            .spawn_scoped(s, move || {
                for r in ranges {
                    let got = fetch_chunk(inner, seg, &blocks[r.clone()]);
                    let failed = got.is_err();
                    // A closed channel: the parser stopped at an error.
                    if tx.send(got).is_err() || failed {
                        break;
                    }
                }
            })
            .map_err(|e| Error::io(seg.file.path(), e))?;
        rx.into_iter()
            .enumerate()
            .try_for_each(|(i, got)| parse(i, got))
    })
}

/// How many bytes of live user writes GC keeps from a victim's first pass.
fn keep_users_limit(inner: &Inner) -> u64 {
    (inner.opts.memory_budget / 16).min(KEEP_USERS_MAX)
}

/// Collects one segment if GC is due (or the best candidate with `force`).
/// Returns whether a segment was collected.
///
/// Copies are made in runs of ascending seqnos, reading the victim once or, where its
/// live user writes are many, partly twice. A segment holds user writes, in seqno
/// order in the file, and GC copies, each GC run's in seqno order (consecutive runs
/// share the tail segment), and every copy is older than every user write beside it
/// (copies come from segments sealed before this one was started). So the first pass
/// copies the GC copies as it meets them and keeps the live user writes, up to
/// `keep_users_limit` bytes; the second copies those, then reads the chunks holding the
/// rest again (all after the kept ones in the file) and copies them. Blocks of copies
/// thus keep narrow seqno ranges, which bounds what the change feed holds at once.
pub fn gc_once(inner: &Arc<Inner>, force: bool) -> Result<bool> {
    gc_once_keeping(inner, force, keep_users_limit(inner))
}

fn gc_once_keeping(inner: &Arc<Inner>, force: bool, keep_limit: u64) -> Result<bool> {
    if inner.read_only {
        return Ok(false);
    }
    let _g = inner.gc_lock.lock();
    let Some(victim) = pick_victim(inner, force) else {
        return Ok(false);
    };
    collect(inner, &victim, keep_limit)?;
    Ok(true)
}

/// Copies the live records of `victim` (see [`gc_once`]) and retires it. The caller
/// holds `gc_lock`.
fn collect(inner: &Arc<Inner>, victim: &Arc<Segment>, keep_limit: u64) -> Result<()> {
    let (dead, dead_bytes) = inner
        .garbage
        .lock()
        .segs
        .get(&victim.id)
        .map(|s| (s.dead.clone(), s.dead_bytes))
        .unwrap_or_default();
    // The dead records' sizes are their encoded sizes, and a block's payload is its
    // records encoded: when they add up to every record byte of the segment, nothing
    // in it is live (a catalog record, never listed dead, keeps this from holding), so
    // it is retired unread. Deleting a 4 GiB file used to read 4 GiB back here.
    if dead_bytes >= victim.raw_bytes.load(Ordering::Relaxed) {
        return finish(inner, victim, 0);
    }
    let catalog = inner.catalog.read().clone();
    let keep = |r: &RecordRef<'_>| match r.kind {
        Kind::Catalog => false,
        Kind::Put | Kind::Delete => {
            !dead.contains(r.seqno) && !catalog.dropped.contains(&r.coll) && catalog.is_live(r.coll)
        }
    };
    let blocks = victim.blocks.read().clone();
    let chunks = read_chunks(&blocks);
    let mut copier = Copier {
        inner,
        victim: victim.id,
        piece: Vec::new(),
        piece_bytes: 0,
        moved: 0,
    };
    // Chunks holding live user writes, in file order, with those writes where they
    // fit in `keep_limit` (once one does not, no later chunk keeps its writes either,
    // so kept writes all come before those read again).
    let mut user_chunks: Vec<(usize, Option<Vec<OwnedRecord>>)> = Vec::new();
    let mut kept = 0u64;
    for_each_chunk(inner, victim, &blocks, &chunks, |i, r| {
        if !keep(&r) {
            return Ok(());
        }
        if r.reloc {
            return copier.add(OwnedRecord::from(r));
        }
        if user_chunks.last().is_none_or(|(c, _)| *c != i) {
            let full = user_chunks.last().is_some_and(|(_, recs)| recs.is_none());
            user_chunks.push((i, (!full).then(Vec::new)));
        }
        let slot = &mut user_chunks.last_mut().expect("pushed above").1;
        if let Some(recs) = slot {
            kept += (r.key.len() + r.value.len() + 16) as u64;
            if kept > keep_limit {
                *slot = None;
            } else {
                recs.push(OwnedRecord::from(r));
            }
        }
        Ok(())
    })?;
    let mut again = Vec::new();
    for (i, recs) in user_chunks {
        match recs {
            Some(recs) => recs.into_iter().try_for_each(|r| copier.add(r))?,
            None => again.push(chunks[i].clone()),
        }
    }
    for_each_chunk(inner, victim, &blocks, &again, |_, r| {
        if keep(&r) && !r.reloc {
            return copier.add(OwnedRecord::from(r));
        }
        Ok(())
    })?;
    copier.flush()?;
    let target = inner.commit_no.load(Ordering::SeqCst);
    inner.sync_upto(target)?;
    finish(inner, victim, copier.moved)
}

/// Retires `victim` once its live records (`moved` bytes) are durable in the tail.
fn finish(inner: &Inner, victim: &Segment, moved: u64) -> Result<()> {
    crate::failpoint::hit("gc-before-retire");
    retire(inner, victim.id)?;
    inner.stats.gc_runs.fetch_add(1, Ordering::Relaxed);
    inner.rebalance_caches();
    inner
        .stats
        .gc_bytes_moved
        .fetch_add(moved, Ordering::Relaxed);
    inner
        .stats
        .gc_bytes_reclaimed
        .fetch_add(victim.disk_bytes(), Ordering::Relaxed);
    inner.bg_cond.notify_all();
    Ok(())
}

/// Gathers a GC run's copies into pieces of about `GC_COMMIT_BYTES`, each inserted as
/// one commit.
struct Copier<'a> {
    inner: &'a Inner,
    victim: SegId,
    piece: Vec<OwnedRecord>,
    piece_bytes: usize,
    /// Bytes copied so far (keys and values).
    moved: u64,
}

impl Copier<'_> {
    fn add(&mut self, r: OwnedRecord) -> Result<()> {
        self.piece_bytes += r.key.len() + r.value.len() + 16;
        self.piece.push(r);
        if self.piece_bytes >= GC_COMMIT_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    /// Inserts the gathered copies, leaving out those that merges have found dead since
    /// they were read.
    ///
    /// A merge or flush that drops a tombstone must not decide so between this check
    /// and the copies entering the memtable (a copy of an older version would outlive
    /// its tombstone): from its first dropped entry (a flush that may drop: from its
    /// start) until installed, it holds `index_install`. GC holds it for one piece
    /// only, so merges and flushes go on between pieces. (Waiting for a long bottom
    /// merge had stalled GC for seconds; holding `flush_lock` too made every piece
    /// wait for a whole memtable flush, a third of the time in an overwrite.)
    fn flush(&mut self) -> Result<()> {
        self.piece_bytes = 0;
        if self.piece.is_empty() {
            return Ok(());
        }
        let inner = self.inner;
        let _guard = inner.index_install.lock();
        {
            let g = inner.garbage.lock();
            self.piece.retain(|r| !g.is_dead(self.victim, r.seqno));
        }
        self.moved += self
            .piece
            .iter()
            .map(|r| (r.key.len() + r.value.len()) as u64)
            .sum::<u64>();
        if !self.piece.is_empty() {
            inner.commit(CommitOps::Reloc(&self.piece))?;
        }
        self.piece.clear();
        Ok(())
    }
}

/// Removes a collected segment from the live set: checkpoint first, then the file
/// goes when the last reference drops.
fn retire(inner: &Inner, id: SegId) -> Result<()> {
    let meta = inner.meta.lock();
    let victim = {
        let mut segs = inner.segments.write();
        let mut m = (**segs).clone();
        let v = m.remove(&id);
        *segs = Arc::new(m);
        v
    };
    let dead = inner.garbage.lock().forget(id);
    if let Err(e) = write_checkpoint(inner, &meta) {
        // Put it back: the old checkpoint still lists it.
        if let Some(v) = victim {
            let mut segs = inner.segments.write();
            let mut m = (**segs).clone();
            m.insert(id, v);
            *segs = Arc::new(m);
        }
        if let Some(d) = dead {
            inner.garbage.lock().restore(id, d);
        }
        return Err(e);
    }
    if let Some(v) = victim {
        v.retire();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{for_each_chunk, read_chunks};
    use crate::{Db, Options};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{mpsc, Arc};
    use std::time::Duration;

    const KEYS: u32 = 6000;

    fn value(k: u32, round: u8) -> Vec<u8> {
        let mut v = vec![round; 1000];
        v[..4].copy_from_slice(&k.to_be_bytes());
        v
    }

    /// A key written once in `round` and never again.
    fn cold_key(k: u32, round: u8) -> Vec<u8> {
        [&[b'c', round][..], &k.to_be_bytes()].concat()
    }

    /// Overwrites every hot key and writes a cold key for every fourth, so that every
    /// segment keeps some live records.
    fn write_round(c: &crate::Collection, round: u8) {
        for k in 0..KEYS {
            c.put(&k.to_be_bytes(), &value(k, round)).unwrap();
            if k % 4 == 0 {
                c.put(&cold_key(k, round), &value(k, round)).unwrap();
            }
        }
    }

    /// (relocated, seqno) of every record of every segment, in file order.
    fn records_in_file_order(db: &Db) -> Vec<Vec<(bool, u64)>> {
        let segs = db.inner.segments.read().clone();
        segs.values()
            .map(|seg| {
                let blocks = seg.blocks.read().clone();
                let mut recs = Vec::new();
                for_each_chunk(&db.inner, seg, &blocks, &read_chunks(&blocks), |_, r| {
                    recs.push((r.reloc, r.seqno));
                    Ok(())
                })
                .unwrap();
                recs
            })
            .collect()
    }

    fn open_db(dir: &std::path::Path, segment_size: u64, budget: u64) -> Db {
        Db::open(
            dir,
            Options {
                segment_size,
                ..Options::for_unit_test(budget)
            },
        )
        .unwrap()
    }

    fn assert_no_seqno_twice(recs: &[(bool, u64)]) {
        let mut seen = std::collections::HashSet::new();
        for r in recs {
            assert!(seen.insert(r.1), "seqno {} twice in one segment", r.1);
        }
    }

    /// Loads three rounds into 1 MiB segments and flushes, so that the first round's
    /// segments are mostly garbage.
    fn loaded_db(dir: &std::path::Path) -> (Db, crate::Collection) {
        let db = open_db(dir, 1 << 20, 32 << 20);
        let c = db.create_collection("c").unwrap();
        for round in 0..3u8 {
            write_round(&c, round);
        }
        db.flush().unwrap();
        (db, c)
    }

    fn segment_ids(db: &Db) -> Vec<crate::segment::SegId> {
        db.inner.segments.read().keys().copied().collect()
    }

    fn assert_last_round_and_check(dir: &std::path::Path, db: Db, c: crate::Collection) {
        for k in 0..KEYS {
            assert_eq!(c.get(&k.to_be_bytes()).unwrap().unwrap(), value(k, 2));
            if k % 4 == 0 {
                for round in 0..3 {
                    let v = c.get(&cold_key(k, round)).unwrap();
                    assert_eq!(v.unwrap(), value(k, round));
                }
            }
        }
        for recs in records_in_file_order(&db) {
            assert_no_seqno_twice(&recs);
        }
        drop((c, db));
        let rep = crate::check(dir).unwrap();
        assert!(rep.is_ok(), "{:?}", rep.problems);
    }

    /// GC used to start every run's copies in a fresh segment, so a stretch of GC left
    /// one small segment per run (the next victims, and the recycled files user
    /// writes then found too short). Consecutive runs now fill the tail together.
    #[test]
    fn consecutive_gc_runs_share_the_tail_segment() {
        let dir = tempfile::tempdir().unwrap();
        let (db, c) = loaded_db(dir.path());
        let before = *segment_ids(&db).last().unwrap();
        let runs = 8;
        for _ in 0..runs {
            assert!(db.gc_force_one().unwrap());
        }
        let st = db.stats();
        let new: Vec<_> = segment_ids(&db)
            .into_iter()
            .filter(|id| *id > before)
            .collect();
        println!(
            "{runs} GC runs copied {} bytes into {} new segment(s) of 1 MiB: {new:?}",
            st.gc_bytes_moved,
            new.len()
        );
        assert!(st.gc_bytes_moved > 0, "the runs copied something");
        assert!(
            (new.len() as u64) <= st.gc_bytes_moved / (1 << 20) + 2,
            "{} new segments for {} bytes of copies",
            new.len(),
            st.gc_bytes_moved
        );
        assert!(new.len() < runs, "runs shared a segment: {new:?}");
        assert_last_round_and_check(dir.path(), db, c);
    }

    /// A GC attempt that stops after some of its copies are in the tail (an error
    /// before the victim is retired) and is retried leaves each record once in the
    /// tail: the retry leaves out the copies the tail already holds.
    #[test]
    fn a_retried_gc_attempt_does_not_copy_a_record_twice_into_the_tail() {
        let dir = tempfile::tempdir().unwrap();
        let (db, c) = loaded_db(dir.path());
        let inner = &db.inner;
        let _g = inner.gc_lock.lock();
        let victim = super::pick_victim(inner, true).unwrap();
        let dead = inner
            .garbage
            .lock()
            .segs
            .get(&victim.id)
            .unwrap()
            .dead
            .clone();
        let blocks = victim.blocks.read().clone();
        let mut live = Vec::new();
        for_each_chunk(inner, &victim, &blocks, &read_chunks(&blocks), |_, r| {
            if !dead.contains(r.seqno) && !r.reloc {
                live.push(crate::db::OwnedRecord::from(r));
            }
            Ok(())
        })
        .unwrap();
        assert!(
            live.len() > 10,
            "the victim has live records: {}",
            live.len()
        );
        // The interrupted attempt: half of the copies, then no retirement.
        let mut first = super::Copier {
            inner,
            victim: victim.id,
            piece: Vec::new(),
            piece_bytes: 0,
            moved: 0,
        };
        let half = live.len() / 2;
        live.drain(..half).try_for_each(|r| first.add(r)).unwrap();
        first.flush().unwrap();
        let tail = inner.writer.lock().seg.id;
        super::collect(inner, &victim, u64::MAX).unwrap();
        assert!(
            !inner.segments.read().contains_key(&victim.id),
            "victim retired"
        );
        assert_eq!(
            inner.writer.lock().seg.id,
            tail,
            "the retry wrote into the same tail"
        );
        drop(_g);
        assert_last_round_and_check(dir.path(), db, c);
    }

    fn ascending(seqnos: impl Iterator<Item = u64>) -> bool {
        let v: Vec<u64> = seqnos.collect();
        v.windows(2).all(|w| w[0] < w[1])
    }

    /// A victim written while GC ran holds user writes and GC copies interleaved. GC
    /// still copies each run's records in seqno order and user writes after them, whether it keeps a victim's live
    /// user writes from its first pass (read once), keeps none (the chunks holding
    /// them read twice) or runs out of room for them part way.
    #[test]
    fn gc_copies_in_ascending_runs_reading_a_victim_once_when_its_user_writes_fit() {
        let dir = tempfile::tempdir().unwrap();
        let db = open_db(dir.path(), 4 << 20, 32 << 20);
        let c = db.create_collection("c").unwrap();
        for round in 0..3u8 {
            write_round(&c, round);
        }
        db.flush().unwrap();
        // GC runs while a writer keeps overwriting, so that its copies and user writes
        // share tail segments. The writer finishes its round after `stop`.
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (c, stop) = (c.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut round = 3u8;
                loop {
                    write_round(&c, round);
                    if stop.load(Ordering::SeqCst) || round == u8::MAX {
                        return round;
                    }
                    round += 1;
                }
            })
        };
        let mut while_writing = 0;
        while while_writing < 6 {
            if db.gc_force_one().unwrap() {
                while_writing += 1;
            }
            db.flush().unwrap();
        }
        stop.store(true, Ordering::SeqCst);
        let last_round = writer.join().unwrap();
        db.flush().unwrap();
        let mixed = records_in_file_order(&db)
            .iter()
            .filter(|recs| {
                let first_user = recs.iter().position(|r| !r.0);
                let first_copy = recs.iter().position(|r| r.0);
                match (first_user, first_copy) {
                    (Some(u), Some(g)) => recs[u.max(g)..].iter().any(|r| r.0 != recs[u.max(g)].0),
                    _ => false,
                }
            })
            .count();
        assert!(
            mixed > 0,
            "no segment interleaves user writes and GC copies: the test did not set up its case"
        );
        // (bytes of victims, bytes read) per limit on kept user writes.
        let limits = [0, 512 << 10, u64::MAX];
        let mut totals = [(0u64, 0u64); 3];
        let mut collected = 0;
        loop {
            let phase = (collected / 2).min(2);
            let before = db.stats();
            if !super::gc_once_keeping(&db.inner, true, limits[phase]).unwrap() {
                break;
            }
            let after = db.stats();
            totals[phase].0 += after.gc_bytes_reclaimed - before.gc_bytes_reclaimed;
            totals[phase].1 += after.gc_bytes_read - before.gc_bytes_read;
            collected += 1;
        }
        println!(
            "{mixed} segment(s) interleaved user writes and copies; collected {collected} segments; (victim bytes, bytes read) keeping none, 512 KiB, all of their user writes: {totals:?}"
        );
        assert!(collected > 4, "every limit was tried");
        let [none, part, all] = totals;
        assert!(
            none.1 > none.0 && none.1 <= 2 * none.0,
            "keeping nothing, chunks with user writes are read twice: {none:?}"
        );
        assert!(
            part.1 > part.0 && part.1 + (1 << 20) <= 2 * part.0,
            "keeping 512 KiB, the first chunks are read once, the rest again: {part:?}"
        );
        assert!(
            all.1 <= all.0,
            "keeping all, a victim is read once: {all:?}"
        );
        for recs in records_in_file_order(&db) {
            // Consecutive runs share a segment: each run's copies ascend, so every
            // descent in a segment's copies starts another run's.
            let copies: Vec<u64> = recs.iter().filter(|r| r.0).map(|r| r.1).collect();
            let descents = copies.windows(2).filter(|w| w[0] > w[1]).count();
            assert!(
                descents < while_writing + collected,
                "copies in at most one ascending run per GC run: {descents} descents"
            );
            assert!(
                ascending(recs.iter().filter(|r| !r.0).map(|r| r.1)),
                "user writes in seqno order"
            );
            assert_no_seqno_twice(&recs);
        }
        for k in 0..KEYS {
            assert_eq!(
                c.get(&k.to_be_bytes()).unwrap().unwrap(),
                value(k, last_round)
            );
        }
        drop((c, db));
        let rep = crate::check(dir.path()).unwrap();
        assert!(rep.is_ok(), "{:?}", rep.problems);
    }

    /// Overwriting every key leaves the first round's segments wholly dead: GC
    /// retires them without reading a byte, and still reads the ones with a live
    /// record (the first holds the collection's catalog record).
    #[test]
    fn gc_retires_a_wholly_dead_segment_without_reading_it() {
        let dir = tempfile::tempdir().unwrap();
        let db = open_db(dir.path(), 1 << 20, 32 << 20);
        let c = db.create_collection("c").unwrap();
        for round in 0..2u8 {
            for k in 0..KEYS {
                c.put(&k.to_be_bytes(), &value(k, round)).unwrap();
            }
        }
        db.flush().unwrap();
        let (mut unread, mut read) = (0, 0);
        loop {
            let before = db.stats();
            if !db.gc_force_one().unwrap() {
                break;
            }
            let after = db.stats();
            assert!(after.gc_bytes_reclaimed > before.gc_bytes_reclaimed);
            if after.gc_bytes_read == before.gc_bytes_read {
                assert_eq!(after.gc_bytes_moved, before.gc_bytes_moved);
                unread += 1;
            } else {
                read += 1;
            }
        }
        println!("{unread} wholly dead segment(s) retired unread, {read} read");
        assert!(unread >= 3, "the first round's later segments went unread");
        assert!(read >= 1, "the segment with the catalog record was read");
        for k in 0..KEYS {
            assert_eq!(c.get(&k.to_be_bytes()).unwrap().unwrap(), value(k, 1));
        }
        drop((c, db));
        let db = open_db(dir.path(), 1 << 20, 32 << 20);
        let c = db.collection("c").unwrap();
        for k in 0..KEYS {
            assert_eq!(c.get(&k.to_be_bytes()).unwrap().unwrap(), value(k, 1));
        }
        drop((c, db));
        let rep = crate::check(dir.path()).unwrap();
        assert!(rep.is_ok(), "{:?}", rep.problems);
    }

    /// Garbage in the tail segment (or one a memtable still replays from) cannot be
    /// collected yet: writers are not slowed for it (that only puts off the moment
    /// it becomes collectable), and are once it is. Compressible values put many
    /// times the segment size of records, two thirds of them dead, in the tail.
    #[test]
    fn writers_are_throttled_only_for_garbage_gc_can_collect() {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options {
            segment_size: 1 << 20,
            compression: crate::Compression::Lz4,
            ..Options::for_unit_test(64 << 20)
        };
        let db = Db::open(dir.path(), opts).unwrap();
        let c = db.create_collection("c").unwrap();
        for round in 0..3u8 {
            for k in 0..KEYS {
                c.put(&k.to_be_bytes(), &value(k, round)).unwrap();
            }
        }
        db.flush().unwrap();
        let inner = &db.inner;
        let delay = || inner.gc_delay_nanos_per_kib.load(Ordering::Relaxed);
        let (fill_all, total) = super::fill_pct(inner, false);
        let (fill_now, _) = super::fill_pct(inner, true);
        super::update_throttle(inner);
        println!(
            "garbage in the tail: {total} record bytes in {} segment(s), fill {fill_all:.0}% ({fill_now:.0}% counting collectable garbage), delay {} ns/KiB",
            segment_ids(&db).len(),
            delay()
        );
        assert!(total > 4 << 20, "more than four segments of records");
        assert!(fill_all < 40.0, "two thirds of the log is garbage");
        assert!(fill_now > 99.0, "none of it collectable yet");
        assert_eq!(delay(), 0, "no throttle for garbage GC cannot collect");
        // Incompressible records move the tail on; the flush moves the replay point.
        for k in 0..2000u32 {
            c.put(
                &cold_key(k, 9),
                &crate::block::tests::noise(1000, u64::from(k)),
            )
            .unwrap();
        }
        db.flush().unwrap();
        super::update_throttle(inner);
        println!(
            "collectable: fill {:.0}%, delay {} ns/KiB",
            super::fill_pct(inner, true).0,
            delay()
        );
        assert!(delay() > 0, "GC is behind once the garbage is collectable");
        while db.gc_force_one().unwrap() {}
        super::update_throttle(inner);
        assert_eq!(delay(), 0, "caught up");
    }

    /// A bottom merge can take seconds; GC used to wait for it before inserting its
    /// copies. Holding the merge lock here stands for such a merge.
    #[test]
    fn gc_collects_while_a_merge_is_running() {
        let dir = tempfile::tempdir().unwrap();
        let db = open_db(dir.path(), 128 << 10, 8 << 20);
        let c = db.create_collection("c").unwrap();
        for round in 0..4u8 {
            for k in 0..400u32 {
                c.put(&k.to_be_bytes(), &[round; 300]).unwrap();
            }
        }
        db.flush().unwrap();
        let merge_held = db.inner.merge_lock.lock();
        let (tx, rx) = mpsc::channel();
        let gc = {
            let db = db.clone();
            std::thread::spawn(move || tx.send(db.gc_force_one()).unwrap())
        };
        let got = rx.recv_timeout(Duration::from_secs(60));
        drop(merge_held);
        gc.join().unwrap();
        let collected = got.expect("GC waited for the merge lock").unwrap();
        assert!(collected, "a segment with garbage was collected");
        for k in 0..400u32 {
            assert_eq!(c.get(&k.to_be_bytes()).unwrap().unwrap(), vec![3u8; 300]);
        }
    }
}

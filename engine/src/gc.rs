//! Garbage collection of log segments, without index lookups.
//!
//! A victim is the sealed segment with the highest garbage ratio (dead bytes from the
//! delete list over the segment's record bytes) among segments entirely covered by the
//! last checkpoint. GC runs while the live fraction of the log is below the target
//! fill (`target_fill_pct`, Magma's PctUsed). Live records — those not in the delete
//! list and not of a dropped collection — are copied to the log tail in seqno order as
//! *relocated* records (same seqno, flag set), which the index treats as winning ties
//! but never shadowing a newer seqno. Once the copies are durable, a checkpoint
//! without the victim is written and the file is deleted when no reader, iterator or
//! snapshot holds it any more.

use crate::aligned::{AlignedBuf, PAGE};
use crate::codec::{align_down, align_up};
use crate::db::{CommitOps, Inner, OwnedRecord};
use crate::error::{Error, Result};
use crate::flush::write_checkpoint;
use crate::record::{Kind, RecordIter};
use crate::segment::SegId;
use crate::segments::Segment;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Numbers GC attempts (process-wide; only uniqueness matters). Each attempt's copies
/// start in a fresh segment, so a segment never holds two records with one seqno.
static NEXT_GC_RUN: AtomicU64 = AtomicU64::new(0);

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
    inner.gc_throttle_micros.store(0, Ordering::Relaxed);
}

/// Live fraction of all record bytes in the log, in percent, and total bytes.
pub fn fill_pct(inner: &Inner) -> (f64, u64) {
    let segs = inner.segments.read().clone();
    let g = inner.garbage.lock();
    let mut total = 0u64;
    let mut dead = 0u64;
    for s in segs.values() {
        total += s.raw_bytes.load(Ordering::Relaxed);
        dead += g.dead_bytes(s.id);
    }
    if total == 0 {
        return (100.0, 0);
    }
    (
        100.0 * (total.saturating_sub(dead)) as f64 / total as f64,
        total,
    )
}

fn update_throttle(inner: &Inner) {
    let (fill, total) = fill_pct(inner);
    let target = inner.opts.target_fill_pct as f64;
    // Below target by more than 10 points: delay each write batch, growing smoothly
    // with the debt (up to 1 ms), so GC catches up without writes ever stopping.
    let debt = target - 10.0 - fill;
    let t = if total > 4 * inner.opts.segment_size && debt > 0.0 {
        (debt * 50.0).min(1000.0) as u64
    } else {
        0
    };
    inner.gc_throttle_micros.store(t, Ordering::Relaxed);
}

fn pick_victim(inner: &Inner, force: bool) -> Option<Arc<Segment>> {
    let v = inner.version.read().clone();
    let replay_seg = v.imm.last().map(|m| m.start).unwrap_or(v.active.start).seg;
    let tail = inner.writer.lock().seg.id;
    let (fill, _) = fill_pct(inner);
    if !force && fill >= inner.opts.target_fill_pct as f64 {
        return None;
    }
    let segs = inner.segments.read().clone();
    let g = inner.garbage.lock();
    let dropped = !inner.catalog.read().dropped.is_empty();
    segs.values()
        .filter(|s| s.id < replay_seg && s.id != tail && s.sealed.load(Ordering::SeqCst))
        .map(|s| {
            let raw = s.raw_bytes.load(Ordering::Relaxed).max(1);
            (g.dead_bytes(s.id) as f64 / raw as f64, s)
        })
        .filter(|(ratio, _)| *ratio > 0.0 || (force && dropped))
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, s)| s.clone())
}

/// Reads every record of a sealed segment (large sequential reads, checksums verified).
pub(crate) fn read_segment_records(
    seg: &Segment,
    mut f: impl FnMut(u64, OwnedRecord) -> Result<()>,
) -> Result<()> {
    let blocks = seg.blocks.read().clone();
    const CHUNK: u64 = 4 << 20;
    let mut i = 0;
    while i < blocks.len() {
        let start = align_down(blocks[i].off, PAGE as u64);
        let mut j = i;
        while j < blocks.len() && blocks[j].off + blocks[j].len as u64 - start <= CHUNK {
            j += 1;
        }
        let j = j.max(i + 1);
        let end = align_up(blocks[j - 1].off + blocks[j - 1].len as u64, PAGE as u64);
        let mut buf = AlignedBuf::zeroed((end - start) as usize);
        let n = seg.file.read_full(&mut buf, start)?;
        for b in &blocks[i..j] {
            let s = (b.off - start) as usize;
            let e = s + b.len as usize;
            if e > n {
                return Err(Error::corruption(
                    seg.file.path(),
                    b.off,
                    "block extends past the end of the file",
                ));
            }
            let (_, raw) = crate::block::decode(&buf[s..e], seg.file.path(), b.off)?;
            for item in RecordIter::new(&raw) {
                let (_, r) =
                    item.map_err(|at| Error::malformed_record(seg.file.path(), b.off, at))?;
                f(b.off, OwnedRecord::from(r))?;
            }
        }
        i = j;
    }
    Ok(())
}

/// Collects one segment if GC is due (or the best candidate with `force`).
/// Returns whether a segment was collected.
pub fn gc_once(inner: &Arc<Inner>, force: bool) -> Result<bool> {
    if inner.read_only {
        return Ok(false);
    }
    let _g = inner.gc_lock.lock();
    let Some(victim) = pick_victim(inner, force) else {
        return Ok(false);
    };
    let dead = inner
        .garbage
        .lock()
        .segs
        .get(&victim.id)
        .map(|s| s.dead.clone())
        .unwrap_or_default();
    let catalog = inner.catalog.read().clone();
    let mut live = Vec::new();
    read_segment_records(&victim, |_, r| {
        let keep = match r.kind {
            Kind::Catalog => false,
            Kind::Put | Kind::Delete => {
                !dead.contains(r.seqno)
                    && !catalog.dropped.contains(&r.coll)
                    && catalog.is_live(r.coll)
            }
        };
        if keep {
            live.push(r);
        }
        Ok(())
    })?;
    // Merges may have found more of the victim's records dead while we were reading.
    // A merge that drops a tombstone must not decide so between this check and the
    // copies entering the memtable (a copy of an older version would outlive its
    // tombstone): from its first dropped entry until installed, a merge holds
    // `index_install`. A flush may drop tombstones too (when no run exists), so hold
    // `flush_lock` as well. Other merges go on meanwhile: waiting for a long bottom
    // merge had stalled GC for seconds.
    let flush_guard = (inner.flush_lock.lock(), inner.index_install.lock());
    let mut live: Vec<OwnedRecord> = {
        let g = inner.garbage.lock();
        live.into_iter()
            .filter(|r| !g.is_dead(victim.id, r.seqno))
            .collect()
    };
    live.sort_by_key(|r| r.seqno);
    let live_bytes: u64 = live
        .iter()
        .map(|r| (r.key.len() + r.value.len()) as u64)
        .sum::<u64>();
    let run = NEXT_GC_RUN.fetch_add(1, Ordering::SeqCst);
    // Copy in small chunks: memtables rotate normally, and a user write waits behind
    // one chunk's insertion at most.
    let mut start = 0;
    while start < live.len() {
        let mut end = start;
        let mut bytes = 0;
        while end < live.len() && (bytes < GC_COMMIT_BYTES || end == start) {
            bytes += live[end].key.len() + live[end].value.len() + 16;
            end += 1;
        }
        inner.commit(CommitOps::Reloc(&live[start..end], run))?;
        start = end;
    }
    drop(flush_guard);
    let target = inner.commit_no.load(Ordering::SeqCst);
    inner.sync_upto(target)?;
    crate::failpoint::hit("gc-before-retire");
    retire(inner, victim.id)?;
    inner.stats.gc_runs.fetch_add(1, Ordering::Relaxed);
    inner.rebalance_caches();
    inner
        .stats
        .gc_bytes_moved
        .fetch_add(live_bytes, Ordering::Relaxed);
    inner
        .stats
        .gc_bytes_reclaimed
        .fetch_add(victim.disk_bytes(), Ordering::Relaxed);
    inner.bg_cond.notify_all();
    Ok(true)
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
    inner.garbage.lock().forget(id);
    if let Err(e) = write_checkpoint(inner, &meta) {
        // Put it back: the old checkpoint still lists it.
        if let Some(v) = victim {
            let mut segs = inner.segments.write();
            let mut m = (**segs).clone();
            m.insert(id, v);
            *segs = Arc::new(m);
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
    use crate::{Db, Options};
    use std::sync::mpsc;
    use std::time::Duration;

    /// A bottom merge can take seconds; GC used to wait for it before inserting its
    /// copies. Holding the merge lock here stands for such a merge.
    #[test]
    fn gc_collects_while_a_merge_is_running() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(
            dir.path(),
            Options {
                segment_size: 128 << 10,
                ..Options::for_unit_test(8 << 20)
            },
        )
        .unwrap();
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

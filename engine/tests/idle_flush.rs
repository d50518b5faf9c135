//! The write cache is flushed when writes pause (option `idle_flush_ms`) if it holds a
//! delete or its log began in a segment before the tail: deleted data is then given
//! back without waiting for more writes, and a quiet store never flushes for nothing.

use basalt_engine::{Compression, Db, Options, Stats, WriteBatch};
use std::time::{Duration, Instant};

const IDLE_MS: u64 = 300;

fn opts(idle_flush_ms: u64) -> Options {
    Options {
        segment_size: 1 << 20,
        block_size: 16 << 10,
        memory_budget: 64 << 20,
        compression: Compression::None,
        recycle_segments: 0,
        idle_flush_ms,
        ..Options::default()
    }
}

fn value(k: u32) -> Vec<u8> {
    let mut v = vec![(k % 251) as u8; 4096];
    v[..4].copy_from_slice(&k.to_be_bytes());
    v
}

/// Writes `n` values of 4 KiB (about `n / 256` segments of 1 MiB), in batches of 50.
fn write(db: &Db, n: u32) {
    for start in (0..n).step_by(50) {
        let mut b = WriteBatch::new();
        for k in start..(start + 50).min(n) {
            b.put("c", &k.to_be_bytes(), &value(k));
        }
        db.write(&b).unwrap();
    }
}

/// Polls the stats until `done` holds or `limit` passes; returns the last stats.
fn wait_for(db: &Db, limit: Duration, done: impl Fn(&Stats) -> bool) -> Stats {
    let t0 = Instant::now();
    loop {
        let st = db.stats();
        if done(&st) || t0.elapsed() > limit {
            return st;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn deleted_values_are_given_back_once_writes_pause_without_further_writes() {
    for idle in [IDLE_MS, 0] {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), opts(idle)).unwrap();
        let c = db.create_collection("c").unwrap();
        write(&db, 2000);
        let full = db.stats().disk_bytes;
        let mut b = WriteBatch::new();
        for k in 0..2000u32 {
            b.delete("c", &k.to_be_bytes());
        }
        db.write(&b).unwrap();
        let limit = if idle > 0 { 30 } else { 2 };
        let st = wait_for(&db, Duration::from_secs(limit), |s| s.disk_bytes < full / 4);
        println!(
            "idle_flush_ms {idle}: {full} bytes on disk after 2000 puts, {} after deleting them all and {limit} s at most without writes ({} idle flushes, {} GC runs)",
            st.disk_bytes, st.idle_flushes, st.gc_runs
        );
        if idle > 0 {
            assert!(st.idle_flushes >= 1, "the paused write cache was flushed");
            assert!(
                st.disk_bytes < full / 4,
                "GC gave the deleted values back: {} of {full} bytes left",
                st.disk_bytes
            );
        } else {
            assert_eq!(st.idle_flushes, 0);
            assert!(
                st.disk_bytes > full / 2,
                "without idle flushes the garbage waits for more writes"
            );
        }
        assert!(c.get(&7u32.to_be_bytes()).unwrap().is_none());
        drop((c, db));
        let db = Db::open(dir.path(), opts(idle)).unwrap();
        let c = db.collection("c").unwrap();
        assert!((0..2000u32).all(|k| c.get(&k.to_be_bytes()).unwrap().is_none()));
    }
}

#[test]
fn a_paused_write_cache_is_flushed_once_when_it_spans_segments_and_never_when_it_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts(IDLE_MS)).unwrap();
    let c = db.create_collection("c").unwrap();
    // A few puts in the tail segment: nothing GC could gain, no flush.
    write(&db, 100);
    std::thread::sleep(Duration::from_millis(4 * IDLE_MS));
    let st = db.stats();
    println!(
        "100 puts, paused: {} flushes, {} idle",
        st.flushes, st.idle_flushes
    );
    assert_eq!(
        (st.flushes, st.idle_flushes),
        (0, 0),
        "no flush for a write cache in the tail segment"
    );
    // Puts spanning several segments: one flush once they pause, then none.
    write(&db, 1200);
    let st = wait_for(&db, Duration::from_secs(30), |s| s.idle_flushes >= 1);
    assert_eq!(st.idle_flushes, 1, "flushed after the pause");
    std::thread::sleep(Duration::from_millis(4 * IDLE_MS));
    let again = db.stats();
    println!(
        "1200 more puts (several segments), paused: {} idle flush(es), {} after another pause",
        st.idle_flushes, again.idle_flushes
    );
    assert_eq!(again.idle_flushes, 1, "an empty write cache is not flushed");
    assert_eq!(again.memtable_entries, 0);
    for k in 0..1200u32 {
        assert_eq!(c.get(&k.to_be_bytes()).unwrap().unwrap(), value(k));
    }
}

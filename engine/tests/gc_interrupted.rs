//! GC interrupted between making its copies durable and retiring the victim (the
//! process dies at the `gc-before-retire` failpoint): after recovery the victim is
//! collected again. The second attempt must write its copies to a fresh segment, so
//! no segment holds a seqno twice (GC's dead sets are keyed by seqno), `check` passes,
//! and every document has its last value.

use basalt_engine::{check, Compression, Db, Options};
use std::process::Command;

const KEYS: u32 = 2000;

fn opts() -> Options {
    Options {
        segment_size: 512 << 10,
        block_size: 4096,
        memory_budget: 8 << 20,
        background_gc: false,
        target_fill_pct: 85,
        compression: Compression::None,
        ..Options::default()
    }
}

fn value(k: u32, round: u32) -> Vec<u8> {
    let mut v = format!("{k}:{round}:").into_bytes();
    v.resize(300, b'v' + (round % 3) as u8);
    v
}

/// Most keys of the first segment's range: it is the one victim, and both GC attempts'
/// copies fit in the tail segment together.
fn overwritten(k: u32) -> bool {
    k < 1500 && !k.is_multiple_of(10)
}

fn key(k: u32) -> Vec<u8> {
    format!("key{k:05}").into_bytes()
}

/// Child: load, overwrite some, flush (garbage found), then GC until the failpoint
/// aborts the process.
#[test]
fn gc_interrupted_child_entry() {
    let Ok(dir) = std::env::var("BASALT_GCI_CHILD_DIR") else {
        return;
    };
    let db = Db::open(&dir, opts()).unwrap();
    let c = db.collection_or_create("docs").unwrap();
    for k in 0..KEYS {
        c.put(&key(k), &value(k, 0)).unwrap();
    }
    for k in (0..KEYS).filter(|k| overwritten(*k)) {
        c.put(&key(k), &value(k, 1)).unwrap();
    }
    db.flush().unwrap();
    let collected = db.gc_force_one().unwrap();
    panic!(
        "the gc-before-retire failpoint did not fire (collected: {collected}, stats: {})",
        serde_json::to_string(&db.stats()).unwrap()
    );
}

#[test]
fn gc_retried_after_a_crash_before_retire_keeps_seqnos_unique_per_segment() {
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "gc_interrupted_child_entry", "--nocapture"])
        .env("BASALT_GCI_CHILD_DIR", dir.path())
        .env("BASALT_FAILPOINT", "gc-before-retire")
        .status()
        .unwrap();
    assert!(
        !status.success(),
        "child should have died at the failpoint, got {status}"
    );
    let check_ok = |when: &str| {
        let report = check(dir.path()).unwrap();
        assert!(report.is_ok(), "check {when} found: {:#?}", report.problems);
    };
    {
        let db = Db::open(dir.path(), opts()).unwrap();
        assert!(
            db.gc_force_one().unwrap(),
            "recovery left nothing to collect"
        );
    }
    check_ok("after the retried GC");
    {
        let db = Db::open(dir.path(), opts()).unwrap();
        db.flush().unwrap();
        for _ in 0..3 {
            db.gc_force_one().unwrap();
        }
        db.flush().unwrap();
    }
    check_ok("after more GC");
    let db = Db::open(dir.path(), opts()).unwrap();
    let c = db.collection("docs").unwrap();
    for k in 0..KEYS {
        let want = value(k, overwritten(k) as u32);
        assert_eq!(c.get(&key(k)).unwrap(), Some(want), "key {k}");
    }
}

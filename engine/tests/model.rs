//! Randomized model test: the engine against a `BTreeMap` model under puts, deletes,
//! batches, scans, change-feed reads, snapshots, flushes, GC and close-and-reopen.

use basalt_engine::{Db, Direction, Durability, IoBackend, Options, WriteBatch};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::ops::Bound;

const COLLS: [&str; 2] = ["a", "b"];
type Model = BTreeMap<(usize, Vec<u8>), Vec<u8>>;
static GC_RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[derive(Clone, Debug)]
enum Op {
    Put(usize, u8, u16),
    Delete(usize, u8),
    Batch(Vec<(usize, u8, Option<u16>)>),
    Get(usize, u8),
    MultiGet(usize, Vec<u8>),
    Scan(usize, u8, u8, bool),
    Changes,
    TakeSnapshot,
    CheckSnapshot,
    Flush,
    Gc,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => (0..2usize, any::<u8>(), 0..600u16).prop_map(|(c, k, v)| Op::Put(c, k % 64, v)),
        3 => (0..2usize, any::<u8>()).prop_map(|(c, k)| Op::Delete(c, k % 64)),
        2 => proptest::collection::vec((0..2usize, any::<u8>(), proptest::option::of(0..300u16)), 1..8)
            .prop_map(|v| Op::Batch(v.into_iter().map(|(c, k, x)| (c, k % 64, x)).collect())),
        4 => (0..2usize, any::<u8>()).prop_map(|(c, k)| Op::Get(c, k % 64)),
        2 => (0..2usize, proptest::collection::vec(any::<u8>(), 0..40))
            .prop_map(|(c, ks)| Op::MultiGet(c, ks.into_iter().map(|k| k % 80).collect())),
        2 => (0..2usize, any::<u8>(), any::<u8>(), any::<bool>()).prop_map(|(c, a, b, r)| Op::Scan(c, a % 64, b % 64, r)),
        1 => Just(Op::Changes),
        1 => Just(Op::TakeSnapshot),
        1 => Just(Op::CheckSnapshot),
        1 => Just(Op::Flush),
        1 => Just(Op::Gc),
        1 => Just(Op::Reopen),
    ]
}

fn key(k: u8) -> Vec<u8> {
    format!("key-{k:03}").into_bytes()
}

/// Deterministic, poorly compressible value for (key, version).
fn value(k: u8, v: u16) -> Vec<u8> {
    let mut out = format!("{k}:{v}:").into_bytes();
    let mut x = (k as u64) << 16 | v as u64 | 1;
    for _ in 0..v {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push(b'a' + (x % 26) as u8);
    }
    out
}

fn opts(io_backend: IoBackend) -> Options {
    Options {
        io_backend,
        segment_size: 64 << 10,
        block_size: 2048,
        memory_budget: 8 << 20,
        durability: Durability::NoSync,
        background_gc: false,
        target_fill_pct: 80,
        ..Options::default()
    }
}

/// Runs the operations once per read backend.
fn run(ops: Vec<Op>) {
    for backend in [IoBackend::IoUring, IoBackend::Psync] {
        run_with(&ops, backend);
    }
}

fn run_with(ops: &[Op], backend: IoBackend) {
    let ops = ops.to_vec();
    let dir = tempfile::tempdir().unwrap();
    let mut db = Db::open(dir.path(), opts(backend)).unwrap();
    assert_eq!(
        db.io_backend(),
        backend,
        "this machine should support {backend:?}"
    );
    for c in COLLS {
        db.create_collection(c).unwrap();
    }
    let mut model: Model = BTreeMap::new();
    let mut snap: Option<(basalt_engine::Snapshot, Model)> = None;
    for op in ops {
        match op {
            Op::Put(c, k, v) => {
                db.put(COLLS[c], &key(k), &value(k, v)).unwrap();
                model.insert((c, key(k)), value(k, v));
            }
            Op::Delete(c, k) => {
                db.delete(COLLS[c], &key(k)).unwrap();
                model.remove(&(c, key(k)));
            }
            Op::Batch(items) => {
                let mut b = WriteBatch::new();
                for (c, k, v) in &items {
                    match v {
                        Some(v) => {
                            b.put(COLLS[*c], &key(*k), &value(*k, *v));
                        }
                        None => {
                            b.delete(COLLS[*c], &key(*k));
                        }
                    }
                }
                db.write(&b).unwrap();
                for (c, k, v) in items {
                    match v {
                        Some(v) => model.insert((c, key(k)), value(k, v)),
                        None => model.remove(&(c, key(k))),
                    };
                }
            }
            Op::Get(c, k) => {
                assert_eq!(
                    db.get(COLLS[c], &key(k)).unwrap(),
                    model.get(&(c, key(k))).cloned(),
                    "get {c} {k}"
                );
            }
            Op::MultiGet(c, ks) => {
                let keys: Vec<Vec<u8>> = ks.iter().map(|k| key(*k)).collect();
                let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
                let got = db.multi_get(COLLS[c], &refs).unwrap();
                let want: Vec<_> = keys
                    .iter()
                    .map(|k| model.get(&(c, k.clone())).cloned())
                    .collect();
                assert_eq!(got, want, "multi_get {c} {ks:?}");
            }
            Op::Scan(c, a, b, rev) => {
                let (lo, hi) = (key(a.min(b)), key(a.max(b)));
                let dir = if rev {
                    Direction::Backward
                } else {
                    Direction::Forward
                };
                let got: Vec<_> = db
                    .collection(COLLS[c])
                    .unwrap()
                    .scan(Bound::Included(&lo), Bound::Excluded(&hi), dir)
                    .unwrap()
                    .map(|r| r.unwrap())
                    .collect();
                let mut want: Vec<_> = model
                    .range((c, lo.clone())..(c, hi.clone()))
                    .map(|((_, k), v)| (k.clone(), v.clone()))
                    .collect();
                if rev {
                    want.reverse();
                }
                assert_eq!(got, want, "scan {c} {a}..{b} rev={rev}");
            }
            Op::Changes => {
                let mut last = 0;
                let mut latest: BTreeMap<(String, Vec<u8>), Option<Vec<u8>>> = BTreeMap::new();
                for ch in db.changes(0).unwrap() {
                    let ch = ch.unwrap();
                    assert!(ch.seqno > last, "change feed out of order");
                    last = ch.seqno;
                    latest.insert((ch.collection.clone(), ch.key.clone()), ch.value.clone());
                }
                for ((c, k), v) in &model {
                    assert_eq!(
                        latest.get(&(COLLS[*c].to_string(), k.clone())),
                        Some(&Some(v.clone())),
                        "feed misses the latest version"
                    );
                }
                for ((c, k), v) in &latest {
                    let ci = COLLS.iter().position(|x| x == c).unwrap();
                    if v.is_some() {
                        assert!(
                            model.contains_key(&(ci, k.clone())),
                            "feed ends with a put of a deleted key"
                        );
                    }
                }
            }
            Op::TakeSnapshot => snap = Some((db.snapshot(), model.clone())),
            Op::CheckSnapshot => {
                if let Some((s, m)) = &snap {
                    for (ci, c) in COLLS.iter().enumerate() {
                        let got: Vec<_> = s
                            .scan(c, Bound::Unbounded, Bound::Unbounded, Direction::Forward)
                            .unwrap()
                            .map(|r| r.unwrap())
                            .collect();
                        let want: Vec<_> = m
                            .iter()
                            .filter(|((x, _), _)| *x == ci)
                            .map(|((_, k), v)| (k.clone(), v.clone()))
                            .collect();
                        assert_eq!(got, want, "snapshot of {c} changed");
                    }
                }
            }
            Op::Flush => db.flush().unwrap(),
            Op::Gc => {
                if db.gc_force_one().unwrap() {
                    GC_RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
            Op::Reopen => {
                snap = None;
                drop(db);
                db = Db::open(dir.path(), opts(backend)).unwrap();
            }
        }
    }
    for ((c, k), v) in &model {
        assert_eq!(db.get(COLLS[*c], k).unwrap().as_ref(), Some(v));
    }
    drop(snap);
    drop(db);
    let rep = basalt_engine::check(dir.path()).unwrap();
    assert!(rep.is_ok(), "check after the run: {:?}", rep.problems);
    assert_eq!(rep.documents as usize, model.len());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn engine_matches_btreemap_model(ops in proptest::collection::vec(op(), 1..300)) {
        run(ops);
    }
}

#[test]
fn model_run_with_heavy_overwrites_exercises_gc() {
    // A fixed sequence: many overwrites, flushes and GC passes, then every check.
    let mut ops = Vec::new();
    for round in 0..12u16 {
        for k in 0..64u8 {
            ops.push(Op::Put((k % 2) as usize, k, 300 + round));
        }
        if round == 3 {
            ops.push(Op::TakeSnapshot);
        }
        ops.push(Op::Flush);
        ops.push(Op::Gc);
        ops.push(Op::CheckSnapshot);
        ops.push(Op::Changes);
    }
    ops.push(Op::Reopen);
    ops.push(Op::Scan(0, 0, 63, true));
    let before = GC_RUNS.load(std::sync::atomic::Ordering::Relaxed);
    run(ops);
    assert!(
        GC_RUNS.load(std::sync::atomic::Ordering::Relaxed) > before,
        "GC never collected a segment"
    );
}

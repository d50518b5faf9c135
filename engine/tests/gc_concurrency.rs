//! GC under concurrency: readers, scans and iterators running while GC relocates and
//! drops segments always see correct values; a segment still referenced by a snapshot
//! is never deleted.

use basalt_engine::{Db, Direction, Durability, Options};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

const KEYS: u32 = 400;

fn opts() -> Options {
    Options {
        segment_size: 128 << 10,
        block_size: 4096,
        memory_budget: 8 << 20,
        durability: Durability::NoSync,
        background_gc: true,
        target_fill_pct: 80,
        compression: basalt_engine::Compression::None,
        ..Options::default()
    }
}

/// Value for (key, version): self-describing so readers can validate what they see.
fn value(k: u32, ver: u64) -> Vec<u8> {
    let mut v = format!("{k}:{ver}:").into_bytes();
    v.resize(250, (k % 250) as u8);
    v
}

fn parse(k: u32, v: &[u8]) -> u64 {
    let mut parts = v.splitn(3, |&b| b == b':');
    let key: u32 = std::str::from_utf8(parts.next().unwrap())
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(key, k, "value belongs to another key");
    let ver: u64 = std::str::from_utf8(parts.next().unwrap())
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(v, value(k, ver).as_slice(), "value bytes damaged");
    ver
}

#[test]
fn readers_and_iterators_see_correct_values_while_gc_moves_and_drops_segments() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    let c = db.create_collection("c").unwrap();
    for k in 0..KEYS {
        c.put(&k.to_be_bytes(), &value(k, 0)).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let version = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    // Writer: rounds of overwrites; `version` is the last fully written round.
    {
        let (c, stop, version) = (c.clone(), stop.clone(), version.clone());
        threads.push(std::thread::spawn(move || {
            for round in 1..=40u64 {
                for k in 0..KEYS {
                    c.put(&k.to_be_bytes(), &value(k, round)).unwrap();
                }
                version.store(round, Ordering::SeqCst);
                if round % 5 == 0 {
                    c.db().flush().unwrap();
                }
            }
            stop.store(true, Ordering::SeqCst);
        }));
    }
    // Forced GC in a loop on top of the background GC.
    {
        let (db, stop) = (db.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                db.gc_force_one().unwrap();
                std::thread::yield_now();
            }
        }));
    }
    // Point readers: versions never go backwards and never lag a completed round.
    for t in 0..2u32 {
        let (c, stop, version) = (c.clone(), stop.clone(), version.clone());
        threads.push(std::thread::spawn(move || {
            let mut seen = vec![0u64; KEYS as usize];
            let mut i = t;
            while !stop.load(Ordering::SeqCst) {
                let k = (i * 7919) % KEYS;
                let floor = version.load(Ordering::SeqCst);
                let v = c.get(&k.to_be_bytes()).unwrap().expect("key never deleted");
                let ver = parse(k, &v);
                assert!(
                    ver >= seen[k as usize] && ver >= floor,
                    "key {k}: version {ver} went back (seen {}, floor {floor})",
                    seen[k as usize]
                );
                seen[k as usize] = ver;
                i += 1;
            }
        }));
    }
    // Iterators: a scan opened now must return every key exactly once with intact values,
    // even if GC deletes segments while it is being consumed.
    {
        let (c, stop) = (c.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let it = c
                    .scan(Bound::Unbounded, Bound::Unbounded, Direction::Forward)
                    .unwrap();
                let mut n = 0u32;
                for item in it {
                    let (k, v) = item.unwrap();
                    let k = u32::from_be_bytes(k.try_into().unwrap());
                    assert_eq!(k, n, "scan skipped or repeated a key");
                    parse(k, &v);
                    n += 1;
                    if n.is_multiple_of(64) {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                }
                assert_eq!(n, KEYS);
            }
        }));
    }
    for t in threads {
        t.join().unwrap();
    }
    let s = db.stats();
    assert!(s.gc_runs > 0, "GC never ran: {s:?}");
    for k in 0..KEYS {
        assert_eq!(parse(k, &c.get(&k.to_be_bytes()).unwrap().unwrap()), 40);
    }
    drop((c, db));
    let rep = basalt_engine::check(dir.path()).unwrap();
    assert!(rep.is_ok(), "{:?}", rep.problems);
}

#[test]
fn a_segment_referenced_by_a_snapshot_is_not_deleted_until_released() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path(),
        Options {
            background_gc: false,
            ..opts()
        },
    )
    .unwrap();
    let c = db.create_collection("c").unwrap();
    for k in 0..KEYS {
        c.put(&k.to_be_bytes(), &value(k, 0)).unwrap();
    }
    db.flush().unwrap();
    let first_seg = dir.path().join("seg-00000001.log");
    let snap = db.snapshot();
    for round in 1..4 {
        for k in 0..KEYS {
            c.put(&k.to_be_bytes(), &value(k, round)).unwrap();
        }
        db.flush().unwrap();
    }
    while db.gc_force_one().unwrap() {}
    assert!(
        !db.stats().segments.iter().any(|s| s.id == 1),
        "segment 1 should have been collected"
    );
    assert!(
        first_seg.exists(),
        "a segment the snapshot references was deleted"
    );
    for k in 0..KEYS {
        assert_eq!(
            parse(k, &snap.get("c", &k.to_be_bytes()).unwrap().unwrap()),
            0
        );
    }
    drop(snap);
    assert!(
        !first_seg.exists(),
        "the collected segment must go once the snapshot is released"
    );
}

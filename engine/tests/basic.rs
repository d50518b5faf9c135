//! End-to-end behaviour of the engine API on a real data directory.

mod common;

use basalt_engine::{
    Compression, Db, Direction, Durability, Error, Options, WriteBatch, MAX_KEY_LEN, MAX_VALUE_LEN,
};
use common::Rng;
use std::ops::Bound;

fn small_opts() -> Options {
    Options {
        segment_size: 1 << 20,
        block_size: 4096,
        memory_budget: 16 << 20,
        durability: Durability::NoSync,
        background_gc: false,
        ..Options::default()
    }
}

fn all(db: &Db, coll: &str, dir: Direction) -> Vec<(Vec<u8>, Vec<u8>)> {
    db.collection(coll)
        .unwrap()
        .scan(Bound::Unbounded, Bound::Unbounded, dir)
        .unwrap()
        .map(|r| r.unwrap())
        .collect()
}

#[test]
fn put_get_delete_survive_reopen_with_every_compression() {
    for c in [Compression::None, Compression::Lz4, Compression::Zstd(3)] {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options {
            compression: c,
            ..small_opts()
        };
        {
            let db = Db::open(dir.path(), opts.clone()).unwrap();
            let u = db.create_collection("users").unwrap();
            for i in 0..2000u32 {
                u.put(
                    format!("k{i:05}").as_bytes(),
                    format!("value-{i}-{}", "x".repeat(100)).as_bytes(),
                )
                .unwrap();
            }
            for i in (0..2000u32).step_by(3) {
                u.delete(format!("k{i:05}").as_bytes()).unwrap();
            }
            assert_eq!(
                u.get(b"k00001").unwrap().unwrap(),
                format!("value-1-{}", "x".repeat(100)).into_bytes()
            );
            assert_eq!(u.get(b"k00000").unwrap(), None);
            db.close().unwrap();
        }
        let db = Db::open(dir.path(), opts).unwrap();
        let u = db.collection("users").unwrap();
        for i in 0..2000u32 {
            let got = u.get(format!("k{i:05}").as_bytes()).unwrap();
            if i % 3 == 0 {
                assert_eq!(got, None, "{c:?}: deleted key {i} came back");
            } else {
                assert_eq!(
                    got.unwrap(),
                    format!("value-{i}-{}", "x".repeat(100)).into_bytes(),
                    "{c:?} key {i}"
                );
            }
        }
    }
}

/// Every put that has returned is seen by every reader, while memtables fill, rotate
/// and flush under two writers (each memtable's bloom filter must hold a key before a
/// reader can be told the key was written). Readers also check keys of a collection
/// nobody writes to stay absent.
#[test]
fn a_returned_put_is_seen_by_every_reader_while_memtables_rotate_and_flush() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let dir = tempfile::tempdir().unwrap();
    // The smallest budget: memtables of under 1 MiB, so they rotate every few
    // thousand puts.
    let db = Db::open(
        dir.path(),
        Options {
            memory_budget: 8 << 20,
            ..small_opts()
        },
    )
    .unwrap();
    let (c, other) = (
        db.create_collection("c").unwrap(),
        db.create_collection("other").unwrap(),
    );
    const PER_WRITER: u64 = 30_000;
    let key = |w: u64, i: u64| format!("w{w}-{i:08}").into_bytes();
    let written = [AtomicU64::new(0), AtomicU64::new(0)];
    let stop = AtomicBool::new(false);
    let flushes_before = db.stats().flushes;
    let checked = std::thread::scope(|s| {
        for w in 0..2u64 {
            let (c, written) = (&c, &written);
            s.spawn(move || {
                for i in 0..PER_WRITER {
                    c.put(&key(w, i), &i.to_le_bytes()).unwrap();
                    written[w as usize].store(i + 1, Ordering::Release);
                }
            });
        }
        let readers: Vec<_> = (0..2u64)
            .map(|r| {
                let (c, other, written, stop) = (&c, &other, &written, &stop);
                s.spawn(move || {
                    let mut rng = Rng(r + 1);
                    let mut checked = 0u64;
                    // Until the writers are done, and at least 1,000 checks each (a
                    // fast machine writes everything in a fraction of a second).
                    while !stop.load(Ordering::Acquire) || checked < 1_000 {
                        let x = rng.next();
                        let w = x % 2;
                        let n = written[w as usize].load(Ordering::Acquire);
                        if n == 0 {
                            continue;
                        }
                        // The newest returned put half the time, else any before it.
                        let i = if x & 1 == 0 { n - 1 } else { (x >> 8) % n };
                        let got = c.get(&key(w, i)).unwrap();
                        assert_eq!(
                            got,
                            Some(i.to_le_bytes().to_vec()),
                            "writer {w} key {i} of {n}"
                        );
                        assert_eq!(other.get(&key(w, i)).unwrap(), None);
                        checked += 1;
                    }
                    checked
                })
            })
            .collect();
        while written
            .iter()
            .any(|n| n.load(Ordering::Acquire) < PER_WRITER)
        {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        stop.store(true, Ordering::Release);
        readers.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
    });
    assert!(checked > 1_000, "readers checked {checked} keys");
    assert!(
        db.stats().flushes >= flushes_before + 2,
        "memtables rotated and flushed during the run"
    );
}

#[test]
fn scans_are_ordered_both_ways_and_respect_bounds_and_prefixes() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    let c = db.create_collection("c").unwrap();
    db.create_collection("other").unwrap();
    db.put("other", b"b1", b"not mine").unwrap();
    for k in ["a1", "a2", "b1", "b2", "b3", "c1"] {
        c.put(k.as_bytes(), k.to_uppercase().as_bytes()).unwrap();
    }
    db.flush().unwrap();
    c.put(b"b2", b"NEW").unwrap();
    c.delete(b"a2").unwrap();
    let keys = |v: Vec<(Vec<u8>, Vec<u8>)>| {
        v.into_iter()
            .map(|(k, _)| String::from_utf8(k).unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        keys(all(&db, "c", Direction::Forward)),
        ["a1", "b1", "b2", "b3", "c1"]
    );
    assert_eq!(
        keys(all(&db, "c", Direction::Backward)),
        ["c1", "b3", "b2", "b1", "a1"]
    );
    let p: Vec<_> = c
        .scan_prefix(b"b", Direction::Forward)
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(
        p,
        vec![
            (b"b1".to_vec(), b"B1".to_vec()),
            (b"b2".to_vec(), b"NEW".to_vec()),
            (b"b3".to_vec(), b"B3".to_vec())
        ]
    );
    let r: Vec<_> = c
        .scan(
            Bound::Excluded(b"b1"),
            Bound::Included(b"c1"),
            Direction::Backward,
        )
        .unwrap()
        .map(|r| r.unwrap().0)
        .collect();
    assert_eq!(r, vec![b"c1".to_vec(), b"b3".to_vec(), b"b2".to_vec()]);
}

#[test]
fn key_scans_list_the_scans_keys_without_reading_a_value() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        compression: Compression::None,
        ..small_opts()
    };
    let mut rng = Rng(7);
    {
        let db = Db::open(dir.path(), opts.clone()).unwrap();
        let c = db.create_collection("c").unwrap();
        for i in 0..400u32 {
            let v: Vec<u8> = (0..3000).map(|_| rng.next() as u8).collect();
            c.put(format!("k{i:04}").as_bytes(), &v).unwrap();
        }
        db.flush().unwrap();
        for i in (0..400u32).step_by(7) {
            c.delete(format!("k{i:04}").as_bytes()).unwrap();
        }
        c.put(b"k0100x", b"in the memtable").unwrap();
        db.close().unwrap();
    }
    let db = Db::open(dir.path(), opts).unwrap();
    let c = db.collection("c").unwrap();
    // Listing may read index blocks, never the ~1 MiB of values.
    let index_bytes = db.stats().index_disk_bytes;
    assert!(index_bytes < 100 << 10, "index {index_bytes} B");
    let read = |db: &Db| db.stats().device_bytes_read;
    for (lo, hi, dir) in [
        (Bound::Unbounded, Bound::Unbounded, Direction::Forward),
        (
            Bound::Included(&b"k0100"[..]),
            Bound::Excluded(&b"k0200"[..]),
            Direction::Backward,
        ),
    ] {
        let before = read(&db);
        let keys: Vec<Vec<u8>> = c
            .scan(lo, hi, dir)
            .unwrap()
            .keys()
            .map(|k| k.unwrap())
            .collect();
        let listed = read(&db) - before;
        assert!(
            listed <= index_bytes,
            "listing keys read {listed} B: no value"
        );
        let full: Vec<Vec<u8>> = c.scan(lo, hi, dir).unwrap().map(|r| r.unwrap().0).collect();
        assert!(read(&db) - before > 200 * 1000, "the full scan read values");
        assert_eq!(keys, full, "same keys, same order ({dir:?})");
        assert!(
            !keys.iter().any(|k| k == b"k0105"),
            "deleted keys are not listed"
        );
    }
    let p: Vec<Vec<u8>> = c
        .scan_prefix(b"k010", Direction::Forward)
        .unwrap()
        .keys()
        .map(|k| k.unwrap())
        .collect();
    assert_eq!(
        p.len(),
        10,
        "k0100..k0109 without k0105 (deleted), with k0100x: {p:?}"
    );
}

/// Value lengths around the varint boundaries of the record encoding, empty values
/// and values large enough for paged blocks: `keys_with_lens` gives each value's
/// length from the index alone, for records in index runs, relocated by GC, in the
/// memtable and after a reopen.
#[test]
fn key_scans_with_lengths_give_each_values_length_without_reading_it() {
    let dir = tempfile::tempdir().unwrap();
    let lens = [0usize, 1, 127, 128, 300, 16383, 16384, 70_000, 200_000];
    let key = |i: usize, j: usize| format!("k{i:03}-{j}").into_bytes();
    let mut want = std::collections::BTreeMap::new();
    let check = |db: &Db, want: &std::collections::BTreeMap<Vec<u8>, u64>, when: &str| {
        let c = db.collection("c").unwrap();
        let before = db.stats().device_bytes_read;
        let got: Vec<(Vec<u8>, u64)> = c
            .scan(Bound::Unbounded, Bound::Unbounded, Direction::Forward)
            .unwrap()
            .keys_with_lens()
            .map(|r| r.unwrap())
            .collect();
        let read = db.stats().device_bytes_read - before;
        let index = db.stats().index_disk_bytes;
        assert!(
            read <= index,
            "{when}: sizing read {read} B (index {index} B)"
        );
        let want: Vec<(Vec<u8>, u64)> = want.iter().map(|(k, v)| (k.clone(), *v)).collect();
        assert_eq!(got, want, "{when}");
    };
    let opts = small_opts();
    let mut rng = Rng(11);
    {
        let db = Db::open(dir.path(), opts.clone()).unwrap();
        let c = db.create_collection("c").unwrap();
        for round in 0..2 {
            for (i, len) in lens.iter().enumerate() {
                // Round 1 overwrites half the keys: segments keep live records.
                for j in 0..20 - 10 * round {
                    let v: Vec<u8> = (0..*len).map(|_| rng.next() as u8).collect();
                    c.put(&key(i, j), &v).unwrap();
                    want.insert(key(i, j), *len as u64);
                }
            }
        }
        db.wait_for_gc().unwrap();
        while db.gc_force_one().unwrap() {}
        let st = db.stats();
        assert!(
            st.gc_bytes_moved > 0,
            "GC relocated records: {}",
            serde_json::to_string(&st).unwrap()
        );
        for (i, len) in lens.iter().enumerate() {
            c.put(&key(i, 99), &vec![7u8; len + 1]).unwrap();
            want.insert(key(i, 99), *len as u64 + 1);
            c.delete(&key(i, 0)).unwrap();
            want.remove(&key(i, 0));
        }
        check(&db, &want, "runs, GC copies and the memtable");
        db.close().unwrap();
    }
    let db = Db::open(dir.path(), opts).unwrap();
    check(&db, &want, "after a reopen");
}

#[test]
fn snapshot_sees_the_past_while_writes_flushes_and_gc_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    let c = db.create_collection("c").unwrap();
    for i in 0..500u32 {
        c.put(&i.to_be_bytes(), &[1u8; 200]).unwrap();
    }
    let snap = db.snapshot();
    for round in 2..6u8 {
        for i in 0..500u32 {
            c.put(&i.to_be_bytes(), &[round; 200]).unwrap();
        }
        db.flush().unwrap();
        while db.gc_force_one().unwrap() {}
    }
    for i in 0..500u32 {
        assert_eq!(
            snap.get("c", &i.to_be_bytes()).unwrap().unwrap(),
            vec![1u8; 200]
        );
        assert_eq!(c.get(&i.to_be_bytes()).unwrap().unwrap(), vec![5u8; 200]);
    }
    let n = snap
        .scan("c", Bound::Unbounded, Bound::Unbounded, Direction::Forward)
        .unwrap()
        .map(|r| r.unwrap())
        .filter(|(_, v)| v[0] == 1)
        .count();
    assert_eq!(n, 500);
}

#[test]
fn batches_are_atomic_across_collections_and_changes_come_in_seqno_order() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    db.create_collection("a").unwrap();
    db.create_collection("b").unwrap();
    let mut b = WriteBatch::new();
    b.put("a", b"x", b"1")
        .put("b", b"y", b"2")
        .delete("a", b"missing");
    let last = db.write(&b).unwrap();
    db.put("a", b"x", b"3").unwrap();
    let all: Vec<_> = db.changes(0).unwrap().map(|c| c.unwrap()).collect();
    let seqnos: Vec<_> = all.iter().map(|c| c.seqno).collect();
    let mut sorted = seqnos.clone();
    sorted.sort();
    assert_eq!(seqnos, sorted);
    assert_eq!(all.len(), 4);
    assert_eq!(all[3].value.as_deref(), Some(&b"3"[..]));
    let only_b: Vec<_> = db
        .collection("b")
        .unwrap()
        .changes(0)
        .unwrap()
        .map(|c| c.unwrap())
        .collect();
    assert_eq!(only_b.len(), 1);
    assert_eq!(only_b[0].key, b"y");
    // resuming after the batch yields only the later put
    let rest: Vec<_> = db.changes(last).unwrap().map(|c| c.unwrap().key).collect();
    assert_eq!(rest, vec![b"x".to_vec()]);
}

#[test]
fn collections_create_rename_drop_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    db.create_collection("one")
        .unwrap()
        .put(b"k", b"v")
        .unwrap();
    assert!(matches!(
        db.create_collection("one"),
        Err(Error::CollectionExists(_))
    ));
    db.rename_collection("one", "two").unwrap();
    assert!(matches!(
        db.get("one", b"k"),
        Err(Error::UnknownCollection(_))
    ));
    assert_eq!(db.get("two", b"k").unwrap().unwrap(), b"v");
    db.drop_collection("two").unwrap();
    assert_eq!(db.list_collections(), Vec::<String>::new());
    db.create_collection("two").unwrap();
    assert_eq!(
        db.get("two", b"k").unwrap(),
        None,
        "a re-created collection starts empty"
    );
    drop(db);
    let db = Db::open(dir.path(), small_opts()).unwrap();
    assert_eq!(db.list_collections(), vec!["two".to_string()]);
    assert_eq!(db.get("two", b"k").unwrap(), None);
}

/// `exchange_collections` swaps two names with their documents, leaves the others
/// alone, and holds after a reopen that replays the log and after one from a
/// checkpoint; a missing name changes nothing.
#[test]
fn exchanging_two_collections_swaps_their_documents_and_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    for name in ["a", "b", "c"] {
        db.create_collection(name)
            .unwrap()
            .put(b"k", name.as_bytes())
            .unwrap();
    }
    let expect_swapped = |db: &Db| {
        assert_eq!(db.list_collections(), ["a", "b", "c"]);
        for (name, holds) in [("a", b"b"), ("b", b"a"), ("c", b"c")] {
            assert_eq!(db.get(name, b"k").unwrap().unwrap(), holds, "{name}");
        }
    };
    let before = db.catalog_changes();
    assert!(matches!(
        db.exchange_collections("a", "missing"),
        Err(Error::UnknownCollection(_))
    ));
    db.exchange_collections("a", "a").unwrap();
    assert_eq!(db.catalog_changes(), before, "nothing was exchanged");
    db.exchange_collections("a", "b").unwrap();
    assert_eq!(db.catalog_changes(), before + 1);
    expect_swapped(&db);
    drop(db);
    let db = Db::open(dir.path(), small_opts()).unwrap();
    expect_swapped(&db);
    db.flush().unwrap();
    drop(db);
    let db = Db::open(dir.path(), small_opts()).unwrap();
    expect_swapped(&db);
}

/// Catalog changes racing from two threads end in a state that one of their serial
/// orders gives: an exchange against a drop of one of its names, and a rename against
/// a create of its target name (each planned under the writer lock: planned before it,
/// the rename could take the created collection's name and orphan it).
#[test]
fn racing_catalog_changes_end_as_some_serial_order() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    let race = |f: &(dyn Fn() -> basalt_engine::Result<()> + Sync),
                g: &(dyn Fn() -> basalt_engine::Result<()> + Sync)| {
        let go = std::sync::Barrier::new(2);
        std::thread::scope(|s| {
            let a = s.spawn(|| {
                go.wait();
                f().is_ok()
            });
            go.wait();
            let b = g().is_ok();
            (a.join().unwrap(), b)
        })
    };
    let held = |name: &str| db.get(name, b"who").ok().flatten();
    for i in 0..150 {
        let (a, b) = (format!("a{i}"), format!("b{i}"));
        for n in [&a, &b] {
            db.create_collection(n)
                .unwrap()
                .put(b"who", n.as_bytes())
                .unwrap();
        }
        let got = race(&|| db.exchange_collections(&a, &b), &|| {
            db.drop_collection(&b)
        });
        let after = (got, held(&a), held(&b));
        let exchange_first = ((true, true), Some(b.clone().into_bytes()), None);
        let drop_first = ((false, true), Some(a.clone().into_bytes()), None);
        assert!(
            after == exchange_first || after == drop_first,
            "round {i}: exchange against drop ended as {after:?}"
        );

        let (x, y) = (format!("x{i}"), format!("y{i}"));
        db.create_collection(&x)
            .unwrap()
            .put(b"who", x.as_bytes())
            .unwrap();
        let got = race(&|| db.rename_collection(&x, &y), &|| {
            db.create_collection(&y).map(|_| ())
        });
        let after = (got, held(&x), held(&y));
        let rename_first = ((true, false), None, Some(x.clone().into_bytes()));
        let create_first = ((false, true), Some(x.clone().into_bytes()), None);
        assert!(
            after == rename_first || after == create_first,
            "round {i}: rename against create ended as {after:?}"
        );
    }
    let n = db.list_collections().len();
    drop(db);
    let db = Db::open(dir.path(), small_opts()).unwrap();
    assert_eq!(db.list_collections().len(), n, "the same after a reopen");
}

#[test]
fn limits_give_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    let c = db.create_collection("c").unwrap();
    let e = c.put(&vec![0; MAX_KEY_LEN + 1], b"v").unwrap_err();
    assert!(
        e.to_string().contains("exceeds the limit of 4096 bytes"),
        "{e}"
    );
    let e = c.put(b"k", &vec![0; MAX_VALUE_LEN + 1]).unwrap_err();
    assert!(matches!(e, Error::ValueTooLarge { .. }), "{e}");
    assert!(matches!(
        db.put("nope", b"k", b"v"),
        Err(Error::UnknownCollection(_))
    ));
    assert!(matches!(
        db.create_collection("a/b"),
        Err(Error::InvalidCollectionName { .. })
    ));
    let e = Db::open(dir.path(), small_opts())
        .err()
        .expect("second open must fail");
    assert!(
        e.to_string()
            .contains(&format!("pid {}", std::process::id())),
        "{e}"
    );
    let bad = Options {
        target_fill_pct: 99,
        ..small_opts()
    };
    assert!(matches!(
        Db::open(tempfile::tempdir().unwrap().path(), bad),
        Err(Error::InvalidArgument(_))
    ));
    // a large value round-trips
    let big = vec![7u8; 3 << 20];
    c.put(b"big", &big).unwrap();
    assert_eq!(c.get(b"big").unwrap().unwrap(), big);
}

/// A small run of overwrites above a large one (3% of its entries, under the merge
/// debt that would send it into the large one) is not merged into it by policy, so the
/// versions it supersedes count as live until a merge meets them; `wait_for_gc`
/// merges the whole index first, after which live bytes are the latest versions' alone.
#[test]
fn wait_for_gc_finds_every_superseded_version_before_counting_live_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    let c = db.create_collection("c").unwrap();
    let val = |i: u32, r: u8| vec![r; 200 + (i % 7) as usize];
    for i in 0..10_000u32 {
        c.put(&i.to_be_bytes(), &val(i, 0)).unwrap();
    }
    db.flush().unwrap();
    let first = db.stats();
    for i in 0..300u32 {
        c.put(&i.to_be_bytes(), &val(i, 1)).unwrap();
    }
    db.flush().unwrap();
    let before = db.stats();
    assert_eq!(
        (before.index_runs, before.index_entries),
        (2, 10_300),
        "the overwrites stay in a run of their own above the first"
    );
    assert_eq!(
        before.index_entries_unmerged, 300,
        "the overwrites' run is above the oldest"
    );
    db.wait_for_gc().unwrap();
    let after = db.stats();
    assert_eq!(
        (after.index_entries, after.index_entries_unmerged),
        (10_000, 0),
        "one entry per key after the merge, all in one run"
    );
    let ratio = after.live_bytes as f64 / first.live_bytes as f64;
    assert!(
        (0.99..=1.01).contains(&ratio),
        "live bytes {} after, {} when every key had one version ({} before the merge)",
        after.live_bytes,
        first.live_bytes,
        before.live_bytes
    );
    for i in (0..10_000u32).step_by(37) {
        let want = val(i, if i < 300 { 1 } else { 0 });
        assert_eq!(c.get(&i.to_be_bytes()).unwrap().unwrap(), want);
    }
}

#[test]
fn gc_reclaims_space_and_keeps_every_live_value() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        target_fill_pct: 70,
        compression: Compression::None,
        ..small_opts()
    };
    let db = Db::open(dir.path(), opts).unwrap();
    let c = db.create_collection("c").unwrap();
    let val = |i: u32, r: u32| format!("{i}-{r}-{}", "v".repeat(1100)).into_bytes();
    for r in 0..16 {
        for i in 0..1000u32 {
            c.put(&i.to_be_bytes(), &val(i, r)).unwrap();
        }
        db.flush().unwrap();
    }
    let before = db.stats();
    let amp_before = before
        .space_amp
        .expect("1.1 MB of live data: space-amp is given");
    assert!(
        amp_before > 3.0,
        "16 overwrites should leave garbage: {amp_before}"
    );
    db.wait_for_gc().unwrap();
    let after = db.stats();
    assert!(after.gc_runs > 0);
    assert!(
        after.disk_bytes < before.disk_bytes,
        "GC reclaimed nothing: {} -> {}",
        before.disk_bytes,
        after.disk_bytes
    );
    // Only the tail segment and the one holding unflushed index entries may keep garbage.
    let fill = after.live_bytes as f64 / after.log_record_bytes as f64;
    assert!(
        fill >= 0.6,
        "live fraction {fill} far below the 70% target after GC"
    );
    let amp_after = after.space_amp.expect("the same live data after GC");
    assert!(
        amp_after < amp_before / 2.0,
        "space-amp {amp_before} -> {amp_after}"
    );
    for i in 0..1000u32 {
        assert_eq!(c.get(&i.to_be_bytes()).unwrap().unwrap(), val(i, 15));
    }
    drop((c, db));
    let db = Db::open(dir.path(), small_opts()).unwrap();
    let c = db.collection("c").unwrap();
    for i in 0..1000u32 {
        assert_eq!(c.get(&i.to_be_bytes()).unwrap().unwrap(), val(i, 15));
    }
    drop((c, db));
    let rep = basalt_engine::check(dir.path()).unwrap();
    assert!(rep.is_ok(), "{:?}", rep.problems);
}

#[test]
fn check_passes_on_a_clean_directory_and_counts_documents() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), small_opts()).unwrap();
        let c = db.create_collection("c").unwrap();
        for i in 0..300u32 {
            c.put(&i.to_be_bytes(), b"v").unwrap();
        }
        db.flush().unwrap();
        for i in 0..100u32 {
            c.put(&i.to_be_bytes(), b"w").unwrap();
        }
    }
    let rep = basalt_engine::check(dir.path()).unwrap();
    assert!(rep.is_ok(), "{:?}", rep.problems);
    assert_eq!(rep.documents, 300);
    assert!(rep.blocks > 0 && rep.index_runs > 0);
}

/// Observers hear of every committed put and delete (batches and single writes, each
/// write visible to reads when told, with its collection's name and id), and of
/// nothing that failed or came after they stopped observing.
#[test]
fn write_observers_are_told_each_committed_write_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    let c = db.create_collection("docs").unwrap();
    type Heard = Vec<Vec<(String, Vec<u8>, bool, bool)>>;
    let heard: std::sync::Arc<std::sync::Mutex<Heard>> = Default::default();
    let (h, reader) = (heard.clone(), db.clone());
    let id = db.observe_writes(std::sync::Arc::new(move |ws| {
        let batch = ws
            .iter()
            .map(|w| {
                let visible = reader.get(w.collection, w.key).unwrap().is_some() != w.deleted;
                let id = reader.collection(w.collection).unwrap().id();
                assert_eq!(w.collection_id, id, "{}", w.collection);
                (w.collection.to_string(), w.key.to_vec(), w.deleted, visible)
            })
            .collect();
        h.lock().unwrap().push(batch);
    }));
    c.put(b"a", b"1").unwrap();
    let mut b = WriteBatch::new();
    b.put("docs", b"b", b"2").delete("docs", b"a");
    db.write(&b).unwrap();
    c.delete(b"b").unwrap();
    let mut bad = WriteBatch::new();
    bad.put("docs", b"c", b"3").put("missing", b"d", b"4");
    assert!(db.write(&bad).is_err());
    db.stop_observing(id);
    c.put(b"e", b"5").unwrap();
    let w = |k: &[u8], deleted| ("docs".to_string(), k.to_vec(), deleted, true);
    assert_eq!(
        *heard.lock().unwrap(),
        vec![
            vec![w(b"a", false)],
            vec![w(b"b", false), w(b"a", true)],
            vec![w(b"b", true)],
        ]
    );
}

/// `settled_seqno` does not return the seqno of a write whose observers are still
/// being told: while an observer holds a put's telling, it waits; once told, it returns
/// that put's seqno, which `last_seqno` showed as soon as the put was visible. A
/// failed write leaves nothing to wait for, and an unchanged engine keeps its last
/// seqno across a clean reopen.
#[test]
fn settled_seqno_waits_for_the_observers_of_visible_writes() {
    use std::sync::{mpsc, Arc, Mutex};
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    let c = db.create_collection("docs").unwrap();
    c.put(b"a", b"1").unwrap();
    let second = std::time::Duration::from_secs(1);
    let before = db.settled_seqno(second).unwrap();
    assert_eq!(before, db.last_seqno());
    let (entered_tx, entered) = mpsc::channel::<()>();
    let (release, release_rx) = mpsc::channel::<()>();
    let gate = Mutex::new((entered_tx, release_rx));
    db.observe_writes(Arc::new(move |_| {
        let g = gate.lock().unwrap();
        g.0.send(()).unwrap();
        g.1.recv().unwrap();
    }));
    let writer = {
        let c = c.clone();
        std::thread::spawn(move || c.put(b"b", b"2").unwrap())
    };
    entered.recv().unwrap();
    let visible = db.last_seqno();
    assert!(visible > before, "the put is visible while being told");
    assert_eq!(
        db.settled_seqno(std::time::Duration::from_millis(20)),
        None,
        "gave up while the put is being told"
    );
    let settled = {
        let db = db.clone();
        std::thread::spawn(move || db.settled_seqno(std::time::Duration::from_secs(60)))
    };
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(!settled.is_finished(), "settled_seqno returned mid-telling");
    release.send(()).unwrap();
    let put = writer.join().unwrap();
    assert_eq!(put, visible);
    assert_eq!(settled.join().unwrap(), Some(visible));
    let mut bad = WriteBatch::new();
    bad.put("missing", b"x", b"y");
    assert!(db.write(&bad).is_err());
    assert_eq!(
        db.settled_seqno(second),
        Some(visible),
        "a failed write is not waited for"
    );
    db.flush().unwrap();
    drop((c, db));
    let db = Db::open(dir.path(), small_opts()).unwrap();
    assert_eq!(db.last_seqno(), visible, "after a clean reopen");
}

/// `catalog_changes` counts each successful create, drop and rename of a collection,
/// and nothing else (document writes, failed catalog operations, lookups).
#[test]
fn catalog_changes_count_successful_collection_changes_only() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    assert_eq!(db.catalog_changes(), 0);
    let c = db.create_collection("a").unwrap();
    assert_eq!(db.catalog_changes(), 1);
    c.put(b"k", b"v").unwrap();
    db.delete("a", b"k").unwrap();
    db.collection_or_create("a").unwrap();
    assert!(db.create_collection("a").is_err());
    assert!(db.rename_collection("missing", "b").is_err());
    assert!(db.drop_collection("missing").is_err());
    assert_eq!(
        db.catalog_changes(),
        1,
        "writes and failures change nothing"
    );
    db.rename_collection("a", "b").unwrap();
    db.collection_or_create("c").unwrap();
    db.drop_collection("b").unwrap();
    assert_eq!(db.catalog_changes(), 4);
}

#[test]
fn auxiliary_files_are_replaced_whole_kept_across_reopen_and_named_safely() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), small_opts()).unwrap();
        assert_eq!(db.read_aux("fs-root").unwrap(), None, "nothing written yet");
        db.write_aux("fs-root", b"first version, longer").unwrap();
        db.write_aux("fs-root", b"second").unwrap();
        assert_eq!(
            db.read_aux("fs-root").unwrap().as_deref(),
            Some(&b"second"[..])
        );
        for bad in [
            "",
            "a/b",
            "..",
            "CHECKPOINT.aux/x",
            "with space",
            &"x".repeat(65),
        ] {
            let e = db.write_aux(bad, b"x").unwrap_err();
            assert!(
                e.to_string().contains("auxiliary file name"),
                "{bad:?}: {e}"
            );
            assert!(db.read_aux(bad).is_err(), "{bad:?} read");
        }
        let c = db.create_collection("c").unwrap();
        c.put(b"k", b"v").unwrap();
    }
    let files: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("fs-root"))
        .collect();
    assert_eq!(files, ["fs-root.aux"], "no temporary file left behind");
    let db = Db::open(dir.path(), small_opts()).unwrap();
    assert_eq!(
        db.read_aux("fs-root").unwrap().as_deref(),
        Some(&b"second"[..])
    );
    let c = db.collection("c").unwrap();
    assert_eq!(
        c.get(b"k").unwrap().as_deref(),
        Some(&b"v"[..]),
        "the engine ignores it"
    );
    let report = basalt_engine::check(dir.path()).unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
}

#[test]
fn stats_count_records_and_the_batches_that_committed_them() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    let c = db.create_collection("c").unwrap();
    let before = db.stats();
    let mut b = WriteBatch::new();
    b.put("c", b"a", b"1")
        .put("c", b"b", b"2")
        .delete("c", b"z");
    db.write(&b).unwrap();
    c.put(b"d", b"4").unwrap();
    c.delete(b"a").unwrap();
    let after = db.stats();
    assert_eq!(
        (after.writes - before.writes, after.commits - before.commits),
        (5, 3),
        "a batch of three records, then one put and one delete"
    );
}

#[test]
fn space_amp_is_not_given_once_deletes_leave_almost_no_live_data() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        compression: Compression::None,
        ..small_opts()
    };
    let db = Db::open(dir.path(), opts).unwrap();
    let c = db.create_collection("c").unwrap();
    let val = vec![7u8; 4096];
    for i in 0..600u32 {
        c.put(&i.to_be_bytes(), &val).unwrap();
    }
    db.flush().unwrap();
    let full = db.stats();
    assert!(full.live_bytes >= basalt_engine::SPACE_AMP_MIN_LIVE);
    let amp = full.space_amp.expect("2.4 MB live: space-amp is given");
    assert!(
        (1.0..10.0).contains(&amp),
        "disk {} / live {} gave {amp}",
        full.disk_bytes,
        full.live_bytes
    );
    for i in 1..600u32 {
        c.delete(&i.to_be_bytes()).unwrap();
    }
    db.flush().unwrap();
    db.wait_for_gc().unwrap();
    let empty = db.stats();
    assert!(empty.live_bytes < basalt_engine::SPACE_AMP_MIN_LIVE);
    assert!(empty.disk_bytes > 0);
    assert_eq!(
        empty.space_amp, None,
        "disk {} over {} live bytes is no amplification figure",
        empty.disk_bytes, empty.live_bytes
    );
}

//! `ScanIter::gather`: a scan's keys and values read block by block. It must give what
//! iterating the scan gives (latest versions, no deleted keys, scan order, values still
//! in the write cache too), and read each block that holds any of them once, where the
//! iterating scan reads a block again for every batch of keys that needs it.

use basalt_engine::{Compression, Db, Direction, Options, WriteBatch};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::ops::Bound;

fn opts() -> Options {
    Options {
        segment_size: 1 << 20,
        block_size: 16 << 10,
        memory_budget: 8 << 20,
        compression: Compression::None,
        background_gc: false,
        ..Options::default()
    }
}

/// Small `m` records written in random key order among 2 KiB `d` records, with
/// overwrites, deletes and flushes in between; the last writes stay in the write
/// cache. Returns the model of the `m` records.
fn scattered_metadata(db: &Db, seed: u64) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut model = BTreeMap::new();
    for round in 0..40u32 {
        let mut b = WriteBatch::new();
        for i in 0..100u32 {
            let key = format!("m{:06}", rng.gen_range(0..3000u32)).into_bytes();
            if rng.gen_bool(0.1) {
                b.delete("c", &key);
                model.remove(&key);
            } else {
                let value = format!("meta {round} {i} {}", "x".repeat(rng.gen_range(10..200)));
                b.put("c", &key, value.as_bytes());
                model.insert(key, value.into_bytes());
            }
            let data = vec![(i % 251) as u8; 2048];
            b.put("c", format!("d{round:03}{i:03}").as_bytes(), &data);
        }
        db.write(&b).unwrap();
        if round % 8 == 7 && round < 39 {
            db.flush().unwrap();
        }
    }
    model
}

fn scan_m(db: &Db) -> basalt_engine::ScanIter {
    db.collection("c")
        .unwrap()
        .scan(
            Bound::Included(b"m"),
            Bound::Excluded(b"n"),
            Direction::Forward,
        )
        .unwrap()
}

#[test]
fn gather_gives_what_iterating_the_scan_gives() {
    for seed in [1, 2, 3] {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), opts()).unwrap();
        db.create_collection("c").unwrap();
        let model = scattered_metadata(&db, seed);
        let want: Vec<(Vec<u8>, Vec<u8>)> = model.into_iter().collect();
        assert!(want.len() > 1000, "seed {seed}: {} keys", want.len());
        let iterated: Vec<_> = scan_m(&db).map(Result::unwrap).collect();
        assert_eq!(
            iterated, want,
            "seed {seed}: the iterating scan disagrees with the model"
        );
        assert_eq!(
            scan_m(&db).gather().unwrap(),
            want,
            "seed {seed}: gather, open store"
        );
        // Cold, after a restart: everything from the log.
        drop(db);
        let db = Db::open(dir.path(), opts()).unwrap();
        assert_eq!(
            scan_m(&db).gather().unwrap(),
            want,
            "seed {seed}: gather after reopen"
        );
    }
}

#[test]
fn gather_reads_each_block_once_where_iterating_reads_them_again() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), opts()).unwrap();
        db.create_collection("c").unwrap();
        scattered_metadata(&db, 7);
        db.close().unwrap();
    }
    let read_by = |gather: bool| {
        let db = Db::open(dir.path(), opts()).unwrap();
        let before = db.stats();
        let n = if gather {
            scan_m(&db).gather().unwrap().len()
        } else {
            scan_m(&db).count()
        };
        let after = db.stats();
        (
            n,
            after.device_bytes_read - before.device_bytes_read,
            after.log_disk_bytes,
        )
    };
    let (n_iter, iter_bytes, _) = read_by(false);
    let (n_gather, gather_bytes, log_bytes) = read_by(true);
    println!(
        "{n_gather} keys: iterating read {iter_bytes} bytes, gather {gather_bytes}; log {log_bytes}"
    );
    assert_eq!(n_iter, n_gather);
    assert!(
        gather_bytes <= log_bytes,
        "gather read {gather_bytes} bytes, more than the log's {log_bytes}: a block twice"
    );
    assert!(
        2 * iter_bytes > 3 * gather_bytes,
        "iterating read {iter_bytes} bytes, gather {gather_bytes}: expected the iterating \
         scan to read blocks again"
    );
}

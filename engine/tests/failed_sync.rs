//! A synced commit whose log write fails (ENOSPC injected with `fail_log_writes`) is
//! reported as such, and the log is left as it was: once the disk has room the next
//! synced commit writes the same bytes again, every acknowledged write is there after
//! reopening and the log verifies. Synced commits write the log's last buffer on their
//! own thread (not the log IO thread), so this is the path that takes the failure.
//! Its own test binary: the injection is process-wide.

use basalt_engine::{check, fail_log_writes, Compression, Db, Durability, Error, Options};

fn value(i: u32) -> Vec<u8> {
    format!("{i:06}-{}", "v".repeat(3000)).into_bytes()
}

#[test]
fn a_synced_commit_whose_log_write_fails_leaves_the_log_to_be_written_again() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        compression: Compression::None,
        durability: Durability::SyncEveryWrite,
        background_gc: false,
        ..Options::default()
    };
    let db = Db::open(dir.path(), opts.clone()).unwrap();
    let c = db.create_collection("c").unwrap();
    for i in 0..20u32 {
        c.put(format!("k{i:03}").as_bytes(), &value(i)).unwrap();
    }
    fail_log_writes(libc::ENOSPC);
    let mut refused = 0;
    for i in 20..25u32 {
        match c.put(format!("k{i:03}").as_bytes(), &value(i)) {
            Err(Error::NoSpace { .. }) => refused += 1,
            other => panic!("put {i} with the disk full: {other:?}"),
        }
    }
    fail_log_writes(0);
    for i in 25..40u32 {
        c.put(format!("k{i:03}").as_bytes(), &value(i)).unwrap();
    }
    println!("{refused} synced puts refused with ENOSPC, 35 acknowledged");
    drop(c);
    db.close().unwrap();

    let db = Db::open(dir.path(), opts).unwrap();
    let c = db.collection("c").unwrap();
    for i in (0..20u32).chain(25..40) {
        assert_eq!(
            c.get(format!("k{i:03}").as_bytes()).unwrap(),
            Some(value(i)),
            "acknowledged write k{i:03} after reopening"
        );
    }
    // A refused put may or may not be there (its records were in the buffer the next
    // sync wrote), but never cut short.
    for i in 20..25u32 {
        if let Some(v) = c.get(format!("k{i:03}").as_bytes()).unwrap() {
            assert_eq!(v, value(i), "refused write k{i:03} is there but differs");
        }
    }
    drop(c);
    db.close().unwrap();
    let report = check(dir.path()).unwrap();
    assert!(
        report.is_ok(),
        "the data directory does not verify: {:?}",
        report.problems
    );
    println!(
        "check: {} segments, {} blocks, no problem",
        report.segments, report.blocks
    );
}

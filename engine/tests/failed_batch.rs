//! A write batch whose log writes fail part way (ENOSPC injected with
//! `fail_log_writes`, after several of its blocks were sealed) never half-appears:
//! not to readers in the process, not after the writer goes on, not after reopening.
//! Its own test binary: the injection is process-wide.

use basalt_engine::{fail_log_writes, Compression, Db, Direction, Error, Options, WriteBatch};

const BATCH: u32 = 6000;

fn value(tag: &str, i: u32) -> Vec<u8> {
    format!("{tag}-{i:06}-{}", "v".repeat(1000)).into_bytes()
}

fn count_prefix(db: &Db, prefix: &[u8]) -> usize {
    let c = db.collection("c").unwrap();
    c.scan_prefix(prefix, Direction::Forward)
        .unwrap()
        .inspect(|r| assert!(r.is_ok(), "{r:?}"))
        .count()
}

#[test]
fn a_batch_whose_log_write_fails_part_way_never_half_appears() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        compression: Compression::None,
        segment_size: 64 << 20,
        ..Options::default()
    };
    let db = Db::open(dir.path(), opts.clone()).unwrap();
    let c = db.create_collection("c").unwrap();
    for i in 0..200u32 {
        c.put(format!("before/{i:06}").as_bytes(), &value("before", i))
            .unwrap();
    }
    db.sync().unwrap();

    // About 6 MiB: the log's 1 MiB buffers fill several times inside the batch, and
    // the injected failure surfaces once three of them are queued.
    let mut batch = WriteBatch::new();
    for i in 0..BATCH {
        batch.put("c", format!("batch/{i:06}").as_bytes(), &value("batch", i));
    }
    fail_log_writes(libc::ENOSPC);
    let err = db.write(&batch).expect_err("the batch's log writes fail");
    fail_log_writes(0);
    assert!(
        matches!(err, Error::NoSpace { .. }),
        "expected ENOSPC, got {err}"
    );
    assert_eq!(
        count_prefix(&db, b"batch/"),
        0,
        "records of the failed batch are visible in the process"
    );
    for i in [0, BATCH / 2, BATCH - 1] {
        assert_eq!(c.get(format!("batch/{i:06}").as_bytes()).unwrap(), None);
    }

    // Part of the batch is in the log's tail: the writer refuses to go on (the next
    // batch would make that part durable) and says how to recover.
    let next = c
        .put(b"after", b"x")
        .expect_err("the writer goes on after a half batch");
    assert!(
        next.to_string().contains("reopen"),
        "the error does not say what to do: {next}"
    );
    assert_eq!(count_prefix(&db, b"before/"), 200);
    drop(c);
    let _ = db.close();

    let db = Db::open(dir.path(), opts.clone()).unwrap();
    assert_eq!(
        count_prefix(&db, b"before/"),
        200,
        "acknowledged writes lost"
    );
    assert_eq!(
        count_prefix(&db, b"batch/"),
        0,
        "part of the failed batch appeared after reopening"
    );
    for i in 0..200u32 {
        assert_eq!(
            db.get("c", format!("before/{i:06}").as_bytes())
                .unwrap()
                .unwrap(),
            value("before", i)
        );
    }
    // Writes work again, the batch among them, and survive another reopen.
    db.write(&batch).unwrap();
    db.close().unwrap();
    let db = Db::open(dir.path(), opts).unwrap();
    assert_eq!(count_prefix(&db, b"batch/"), BATCH as usize);
    drop(db);
    let rep = basalt_engine::check(dir.path()).unwrap();
    assert!(rep.is_ok(), "{:?}", rep.problems);
    println!(
        "a {BATCH}-record batch failed part way with ENOSPC: not visible, writer refused \
         until reopen, absent after reopen; written again afterwards"
    );
}

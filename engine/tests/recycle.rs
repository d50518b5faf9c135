//! Recycled segment files (option `recycle_segments`): segments GC retires are kept as
//! `free-*.log` and reused by new segments. The blocks a reused file still holds from
//! its earlier segment must never be read as the new segment's: not after a clean
//! reopen, not by `check`, and not after the reused segment is sealed and collected in
//! turn.

use basalt_engine::{check, Compression, Db, Options};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

fn opts(recycle: usize) -> Options {
    Options {
        segment_size: 256 << 10,
        block_size: 4096,
        memory_budget: 8 << 20,
        background_gc: false,
        target_fill_pct: 85,
        compression: Compression::None,
        recycle_segments: recycle,
        ..Options::default()
    }
}

/// Keys per round: about six segments of values.
const KEYS: u32 = 600;

/// Values of 2.5-3 KiB: each 4 KiB block holds one and is padded to the page's end,
/// so every block of every segment starts a page. A log that ends at a page boundary
/// is then followed by the older segment's block that started that page, the case
/// where only the checksum seed tells the two apart.
fn value(k: u32, round: u32) -> Vec<u8> {
    let mut v = format!("{k}:{round}:").into_bytes();
    v.resize(2500 + (k as usize * 7) % 500, b'a' + (round % 26) as u8);
    v
}

/// Lengths of the free files now, by the id of the segment each held.
fn free_lengths(dir: &Path) -> BTreeMap<u32, u64> {
    names(dir, "free-")
        .into_iter()
        .map(|n| {
            let id = n["free-".len()..n.len() - ".log".len()].parse().unwrap();
            (id, std::fs::metadata(dir.join(&n)).unwrap().len())
        })
        .collect()
}

/// For every segment file reusing one of `before`'s free files: (its length now, the
/// free file's length).
fn reused_lengths(dir: &Path, before: &BTreeMap<u32, u64>) -> Vec<(u64, u64)> {
    names(dir, "seg-")
        .into_iter()
        .filter_map(|n| {
            let path = dir.join(&n);
            let old = before.get(&recycled_from(&path))?;
            Some((std::fs::metadata(&path).unwrap().len(), *old))
        })
        .collect()
}

fn names(dir: &Path, prefix: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(prefix))
        .collect();
    v.sort();
    v
}

/// Overwrites every key of 0..keys (round `round`), then collects garbage until GC
/// finds nothing more to do, noting the free files' lengths before each GC run in
/// `free_seen` (by the id of the segment each held).
fn overwrite_and_collect_noting(
    db: &Db,
    model: &mut BTreeMap<Vec<u8>, Vec<u8>>,
    keys: u32,
    round: u32,
    free_seen: &mut BTreeMap<u32, u64>,
) {
    let c = db.collection_or_create("docs").unwrap();
    for k in 0..keys {
        if k % 16 == 0 {
            free_seen.extend(free_lengths(db.path()));
        }
        let key = format!("key{k:05}").into_bytes();
        let v = value(k, round);
        c.put(&key, &v).unwrap();
        model.insert(key, v);
    }
    db.flush().unwrap();
    loop {
        free_seen.extend(free_lengths(db.path()));
        if !db.gc_force_one().unwrap() {
            break;
        }
    }
}

fn overwrite_and_collect(db: &Db, model: &mut BTreeMap<Vec<u8>, Vec<u8>>, keys: u32, round: u32) {
    overwrite_and_collect_noting(db, model, keys, round, &mut BTreeMap::new());
}

fn assert_matches(db: &Db, model: &BTreeMap<Vec<u8>, Vec<u8>>, when: &str) {
    let c = db.collection("docs").unwrap();
    for (k, v) in model {
        assert_eq!(
            c.get(k).unwrap().as_deref(),
            Some(&v[..]),
            "{when}: {}",
            String::from_utf8_lossy(k)
        );
    }
}

/// The segment id a segment file's header says its file was recycled from (0: none).
fn recycled_from(path: &Path) -> u32 {
    let b = std::fs::read(path).unwrap();
    u32::from_le_bytes(b[20..24].try_into().unwrap())
}

#[test]
fn retired_segments_are_reused_across_reopens_and_check_passes() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = BTreeMap::new();
    let db = Db::open(dir.path(), opts(2)).unwrap();
    overwrite_and_collect(&db, &mut model, KEYS, 0);
    overwrite_and_collect(&db, &mut model, KEYS, 1);
    let s = db.stats();
    assert!(s.gc_runs > 0, "GC ran: {}", s.gc_runs);
    assert_eq!(
        names(dir.path(), "free-").len(),
        s.free_segment_files,
        "stats count the free files"
    );
    // Writes after the GC runs go to reused files. A reused file never gets shorter
    // (a tail sealed early keeps its length): its written length is what makes the
    // next reuse an overwrite.
    let mut free_seen = BTreeMap::new();
    overwrite_and_collect_noting(&db, &mut model, KEYS, 2, &mut free_seen);
    let reused = reused_lengths(dir.path(), &free_seen);
    assert!(
        !reused.is_empty(),
        "a live segment reuses a file freed before"
    );
    for (now, before) in &reused {
        assert!(
            now >= before,
            "a reused file shrank from {before} to {now} bytes"
        );
    }
    let s = db.stats();
    assert!(
        s.segments_recycled >= 2,
        "segments reused: {}",
        s.segments_recycled
    );
    assert!(
        s.free_segment_files <= 2,
        "pool bounded: {}",
        s.free_segment_files
    );
    assert_matches(&db, &model, "before reopen");
    // More than a segment of writes after the last GC, so the tail is a reused file.
    let c = db.collection("docs").unwrap();
    for k in 0..KEYS / 4 {
        let key = format!("key{k:05}").into_bytes();
        c.put(&key, &value(k, 99)).unwrap();
        model.insert(key, value(k, 99));
    }
    drop(c);
    let before = db.stats();
    let tail = before.segments.last().unwrap().clone();
    assert!(!tail.sealed);
    let tail_path = dir.path().join(format!("seg-{:08}.log", tail.id));
    let tail_len = std::fs::metadata(&tail_path).unwrap().len();
    assert_ne!(
        recycled_from(&tail_path),
        0,
        "the tail is a reused file (its old blocks follow the log's end)"
    );
    db.close().unwrap();

    let rep = check(dir.path()).unwrap();
    assert!(rep.is_ok(), "check: {:?}", rep.problems);

    let db = Db::open(dir.path(), opts(2)).unwrap();
    let after = db.stats();
    assert_eq!(
        after.log_record_bytes, before.log_record_bytes,
        "reopen found exactly the records written (an old block replayed would add its records)"
    );
    let t = after.segments.iter().find(|s| s.id == tail.id).unwrap();
    assert_eq!(t.record_bytes, tail.record_bytes, "tail segment records");
    assert_eq!(
        std::fs::metadata(&tail_path).unwrap().len(),
        tail_len,
        "a reused tail keeps its length (and written extents) across a clean reopen"
    );
    assert_matches(&db, &model, "after reopen");
    // The reused segments are sealed, collected and reused in turn.
    overwrite_and_collect(&db, &mut model, KEYS, 3);
    overwrite_and_collect(&db, &mut model, KEYS, 4);
    assert!(db.stats().segments_recycled >= 2);
    assert_matches(&db, &model, "after reusing reused files");
    let reused: Vec<String> = names(dir.path(), "seg-")
        .into_iter()
        .filter(|n| recycled_from(&dir.path().join(n)) != 0)
        .collect();
    assert!(!reused.is_empty(), "some live segment is a reused file");
    db.close().unwrap();
    let rep = check(dir.path()).unwrap();
    assert!(rep.is_ok(), "check: {:?}", rep.problems);
    let db = Db::open(dir.path(), opts(2)).unwrap();
    assert_matches(&db, &model, "after the second reopen");
}

#[test]
fn with_recycle_segments_0_retired_segments_are_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = BTreeMap::new();
    let db = Db::open(dir.path(), opts(0)).unwrap();
    overwrite_and_collect(&db, &mut model, KEYS, 0);
    overwrite_and_collect(&db, &mut model, KEYS, 1);
    overwrite_and_collect(&db, &mut model, KEYS, 2);
    let s = db.stats();
    assert!(s.gc_runs > 0);
    assert_eq!((s.segments_recycled, s.free_segment_files), (0, 0));
    assert!(names(dir.path(), "free-").is_empty());
    assert_matches(&db, &model, "no recycling");
}

#[test]
fn free_files_beyond_the_pool_size_are_deleted_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = BTreeMap::new();
    {
        let db = Db::open(dir.path(), opts(8)).unwrap();
        overwrite_and_collect(&db, &mut model, KEYS, 0);
        overwrite_and_collect(&db, &mut model, KEYS, 1);
        assert!(db.stats().free_segment_files > 1, "several free files");
        db.close().unwrap();
    }
    let db = Db::open(dir.path(), opts(1)).unwrap();
    assert_eq!(db.stats().free_segment_files, 1);
    assert_eq!(names(dir.path(), "free-").len(), 1);
    assert_matches(&db, &model, "after open with a smaller pool");
}

/// Child of the next test: load, overwrite and collect (the pool fills), then overwrite
/// again until the writer creates a segment in a recycled file, where the
/// `recycled-segment-created` failpoint kills the process.
#[test]
fn recycled_empty_tail_child_entry() {
    let Ok(dir) = std::env::var("BASALT_RECYCLE_CHILD_DIR") else {
        return;
    };
    let db = Db::open(&dir, opts(2)).unwrap();
    let mut model = BTreeMap::new();
    overwrite_and_collect(&db, &mut model, KEYS, 0);
    overwrite_and_collect(&db, &mut model, KEYS, 1);
    assert!(db.stats().free_segment_files > 0);
    let c = db.collection("docs").unwrap();
    for k in 0..KEYS {
        c.put(format!("key{k:05}").as_bytes(), &value(k, 2))
            .unwrap();
    }
    panic!("the recycled-segment-created failpoint did not fire");
}

/// The riskiest moment of a reused file: it is the tail and holds no block of its
/// own yet, so its first page of blocks is entirely the old segment's, starting
/// exactly where the log starts. Recovery must find an empty tail (those blocks carry
/// the old segment's checksum seed), lose no acknowledged write and leave `check`
/// clean. (With unseeded checksums the old blocks were replayed as the tail's.)
#[test]
fn a_crash_right_after_reusing_a_file_leaves_an_empty_tail() {
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "recycled_empty_tail_child_entry", "--nocapture"])
        .env("BASALT_RECYCLE_CHILD_DIR", dir.path())
        .env("BASALT_FAILPOINT", "recycled-segment-created")
        .status()
        .unwrap();
    assert!(
        !status.success(),
        "child should have died at the failpoint, got {status}"
    );
    let tail = names(dir.path(), "seg-").pop().unwrap();
    let tail_path = dir.path().join(&tail);
    assert_ne!(recycled_from(&tail_path), 0, "{tail} is a reused file");
    let rep = check(dir.path()).unwrap();
    assert!(rep.is_ok(), "check after the crash: {:?}", rep.problems);
    let db = Db::open(dir.path(), opts(2)).unwrap();
    let s = db.stats();
    let t = s
        .segments
        .iter()
        .find(|x| format!("seg-{:08}.log", x.id) == tail)
        .unwrap();
    assert_eq!(
        t.record_bytes, 0,
        "the reused tail's old blocks were read as its own"
    );
    // Round 2 reached a prefix of the keys (every put before the crash was synced).
    let c = db.collection("docs").unwrap();
    let mut reached = KEYS;
    for k in 0..KEYS {
        let got = c.get(format!("key{k:05}").as_bytes()).unwrap().unwrap();
        if got == value(k, 1) {
            reached = reached.min(k);
        } else {
            assert_eq!(got, value(k, 2), "key {k}");
            assert!(
                k < reached,
                "key {k} has round 2 after key {reached} had round 1"
            );
        }
    }
    assert!(
        reached > 0 && reached < KEYS,
        "round 2 stopped at key {reached}"
    );
    // The tail takes new writes; all of it survives a reopen and check.
    c.put(b"after", &value(1, 3)).unwrap();
    drop(c);
    db.close().unwrap();
    let rep = check(dir.path()).unwrap();
    assert!(rep.is_ok(), "check after new writes: {:?}", rep.problems);
    let db = Db::open(dir.path(), opts(2)).unwrap();
    assert_eq!(
        db.collection("docs").unwrap().get(b"after").unwrap(),
        Some(value(1, 3))
    );
}

/// After an open, which copies the tail holds is unknown, so GC starts its copies in
/// a fresh segment and the recovered tail is sealed early. When that tail is a
/// reused file, the file keeps its whole (written) length, the footer's end marker
/// moving to its last page: the next reuse then overwrites written blocks all the way.
#[test]
fn a_reused_file_sealed_early_keeps_its_length() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = BTreeMap::new();
    let mut db = Db::open(dir.path(), opts(2)).unwrap();
    overwrite_and_collect(&db, &mut model, KEYS, 0);
    overwrite_and_collect(&db, &mut model, KEYS, 1);
    let mut free_seen = BTreeMap::new();
    for round in 2..8 {
        // A few writes into the tail, then an open and a GC run, which seals it.
        let c = db.collection("docs").unwrap();
        for k in (round..KEYS).step_by(8) {
            let key = format!("key{k:05}").into_bytes();
            c.put(&key, &value(k, round)).unwrap();
            model.insert(key, value(k, round));
        }
        drop(c);
        db.flush().unwrap();
        free_seen.extend(free_lengths(dir.path()));
        db.close().unwrap();
        db = Db::open(dir.path(), opts(2)).unwrap();
        free_seen.extend(free_lengths(dir.path()));
        db.gc_force_one().unwrap();
        free_seen.extend(free_lengths(dir.path()));
    }
    let stats = db.stats();
    let mut kept = 0;
    for s in stats.segments.iter().filter(|s| s.sealed) {
        let path = dir.path().join(format!("seg-{:08}.log", s.id));
        let Some(&before) = free_seen.get(&recycled_from(&path)) else {
            continue;
        };
        let now = std::fs::metadata(&path).unwrap().len();
        assert!(
            now >= before,
            "segment {} shrank from {before} to {now}",
            s.id
        );
        if s.record_bytes < before / 2 {
            kept += 1;
        }
    }
    assert!(
        kept > 0,
        "no reused file was sealed early: {:?}",
        stats.segments
    );
    assert_matches(&db, &model, "after the GC runs");
    db.close().unwrap();
    let rep = check(dir.path()).unwrap();
    assert!(rep.is_ok(), "check: {:?}", rep.problems);
    let db = Db::open(dir.path(), opts(2)).unwrap();
    assert_matches(&db, &model, "after reopen");
    overwrite_and_collect(&db, &mut model, KEYS, 3);
    assert_matches(&db, &model, "after reusing the kept files");
}

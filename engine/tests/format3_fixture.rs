//! A whole data directory written by an older build (segment format 3: paged blocks
//! without rotation; index runs v3), checked in as `fixtures/format3.tar.zst`, opened
//! by this build: every key reads back as that build wrote it (point reads, batches,
//! parts of paged values, scans, the change feed, the log tail replayed at open), and
//! the directory keeps working after new writes, a flush, GC and a reopen.
//!
//! The fixture was written by commit 28953cb (the last before segment format 4) with
//! `Options { segment_size: 64 KiB, block_size: 4096, compression: Lz4, durability:
//! NoSync, memory_budget: 8 MiB, io_backend: Psync, background_gc: false, .. }`:
//! 1. collections `docs` and `files`; `doc-00000`..`doc-00499` = `doc_value(i, 1)`;
//!    `chunk-000`..`chunk-005` = `file_value(i)` (17-42 KB of noise: paged blocks);
//!    flush;
//! 2. every fifth doc rewritten with `doc_value(i, 2)`, docs with `i % 7 == 3`
//!    deleted, `chunk-002` deleted; flush;
//! 3. `doc-00500`..`doc-00539` = `doc_value(i, 1)`, not flushed (only in the log);
//!    close.
//!
//! Four segments (three sealed), one index run.

mod common;

use basalt_engine::{Db, Direction, IoBackend};
use common::{read_test_options, Rng};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;

/// The segment format version this build writes.
const CURRENT: u32 = 5;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/format3.tar.zst"
);

/// Value of doc `i`, version `v`, as the fixture's writer made it.
fn doc_value(i: u64, v: u64) -> Vec<u8> {
    let len = 40 + (i * 37 % 900) as usize;
    let text = b"abcdefghij klmnop";
    (0..len as u64)
        .map(|j| text[((i + v + j / 3) % 17) as usize])
        .collect()
}

/// Value of file chunk `i`, as the fixture's writer made it.
fn file_value(i: u64) -> Vec<u8> {
    let len = 17_000 + i as usize * 5_003;
    let mut r = Rng((i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    (0..len).map(|_| (r.next() >> 32) as u8).collect()
}

/// What the fixture holds: collection → key → value.
type Model = BTreeMap<&'static str, BTreeMap<Vec<u8>, Vec<u8>>>;

fn doc_key(i: u64) -> Vec<u8> {
    format!("doc-{i:05}").into_bytes()
}

fn chunk_key(i: u64) -> Vec<u8> {
    format!("chunk-{i:03}").into_bytes()
}

fn fixture_model() -> Model {
    let mut docs = BTreeMap::new();
    for i in 0..540u64 {
        let v = if i < 500 && i % 5 == 0 { 2 } else { 1 };
        if i >= 500 || i % 7 != 3 {
            docs.insert(doc_key(i), doc_value(i, v));
        }
    }
    let files = (0..6u64)
        .filter(|&i| i != 2)
        .map(|i| (chunk_key(i), file_value(i)))
        .collect();
    BTreeMap::from([("docs", docs), ("files", files)])
}

fn unpack(dir: &Path) {
    let f = std::fs::File::open(FIXTURE).expect("the fixture is in the repository");
    let z = zstd::Decoder::new(f).unwrap();
    tar::Archive::new(z).unpack(dir).unwrap();
}

fn seg_versions(dir: &Path) -> BTreeMap<String, u32> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with("seg-"))
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            let v = u32::from_le_bytes(b[8..12].try_into().unwrap());
            (p.file_name().unwrap().to_str().unwrap().to_string(), v)
        })
        .collect()
}

/// Every way of reading agrees with `model`: parts of every file value, gets (also of
/// keys never written), one batch of all keys, a full scan each way, and the change
/// feed's last word on each key.
fn check(db: &Db, model: &Model, when: &str) {
    for (coll, want) in model {
        let c = db.collection(coll).unwrap();
        // Parts of paged values first, while their blocks are not cached whole: they
        // are read through the blocks' heads and pages.
        for (k, v) in want.iter().filter(|(_, v)| v.len() > 16 << 10) {
            for (a, z) in [
                (0, 4096),
                (4096, 8192),
                (100, 9000),
                (v.len() - 5000, v.len()),
            ] {
                assert_eq!(
                    c.get_range(k, a..z).unwrap().as_deref(),
                    Some(&v[a..z]),
                    "{when}: {coll}/{} bytes {a}..{z}",
                    String::from_utf8_lossy(k)
                );
            }
        }
        let absent: Vec<Vec<u8>> = (0..600).map(doc_key).chain((0..8).map(chunk_key)).collect();
        for k in &absent {
            assert_eq!(
                c.get(k).unwrap().as_ref(),
                want.get(k),
                "{when}: get {coll}/{}",
                String::from_utf8_lossy(k)
            );
        }
        let keys: Vec<&[u8]> = absent.iter().map(|k| k.as_slice()).collect();
        let got = c.multi_get(&keys).unwrap();
        for (k, g) in absent.iter().zip(&got) {
            assert_eq!(g.as_ref(), want.get(k), "{when}: multi_get {coll}");
        }
        for dir in [Direction::Forward, Direction::Backward] {
            let mut scanned: Vec<(Vec<u8>, Vec<u8>)> = c
                .scan(Bound::Unbounded, Bound::Unbounded, dir)
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            if dir == Direction::Backward {
                scanned.reverse();
            }
            let want: Vec<(Vec<u8>, Vec<u8>)> =
                want.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            assert!(scanned == want, "{when}: scan {coll} {dir:?}");
        }
        let mut last: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
        let mut prev = 0;
        for ch in c.changes(0).unwrap() {
            let ch = ch.unwrap();
            assert!(ch.seqno > prev, "{when}: feed of {coll} in seqno order");
            prev = ch.seqno;
            last.insert(ch.key, ch.value);
        }
        let live: BTreeMap<Vec<u8>, Vec<u8>> = last
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect();
        assert!(
            &live == want,
            "{when}: the change feed's last word on each key of {coll}"
        );
    }
}

#[test]
fn a_format_3_directory_reads_back_whole_and_keeps_working_on_both_backends() {
    for backend in [IoBackend::Psync, IoBackend::IoUring] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        unpack(dir);
        let old = seg_versions(dir);
        assert_eq!(old.len(), 4, "the fixture's segments: {old:?}");
        assert!(old.values().all(|&v| v == 3), "{old:?}");
        let opts = || {
            let mut o = read_test_options(backend);
            o.background_gc = false;
            o
        };
        let mut model = fixture_model();
        {
            let db = Db::open(dir, opts()).unwrap();
            assert_eq!(db.list_collections(), ["docs", "files"]);
            check(&db, &model, &format!("{backend:?} as opened"));
            // New writes (current-format blocks, in a new segment), overwrites and deletes
            // of old keys, a paged value, then GC over the old segments.
            let docs = db.collection("docs").unwrap();
            let files = db.collection("files").unwrap();
            for i in (0..540u64).filter(|i| i % 3 == 0) {
                docs.put(&doc_key(i), &doc_value(i, 3)).unwrap();
                model
                    .get_mut("docs")
                    .unwrap()
                    .insert(doc_key(i), doc_value(i, 3));
            }
            files.delete(&chunk_key(0)).unwrap();
            model.get_mut("files").unwrap().remove(&chunk_key(0));
            files.put(&chunk_key(6), &file_value(6)).unwrap();
            model
                .get_mut("files")
                .unwrap()
                .insert(chunk_key(6), file_value(6));
            db.flush().unwrap();
            check(&db, &model, &format!("{backend:?} after new writes"));
            db.wait_for_gc().unwrap();
            for _ in 0..8 {
                if !db.gc_force_one().unwrap() {
                    break;
                }
            }
            check(&db, &model, &format!("{backend:?} after GC"));
            db.close().unwrap();
        }
        let now = seg_versions(dir);
        assert!(
            now.iter()
                .any(|(name, &v)| v == CURRENT && !old.contains_key(name)),
            "no new segment of the current format holds the new writes: {now:?}"
        );
        assert!(
            old.keys().any(|name| !now.contains_key(name)),
            "GC collected a format-3 segment: {old:?} -> {now:?}"
        );
        let db = Db::open(dir, opts()).unwrap();
        check(&db, &model, &format!("{backend:?} reopened"));
        db.close().unwrap();
    }
}

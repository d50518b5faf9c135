//! Damaged files: flipped bits in every file type are reported with file and offset,
//! a torn tail after a crash is discarded without losing earlier synced writes, and
//! damage in the middle of the log is refused rather than silently truncated.

use basalt_engine::{Db, Durability, Options};
use std::path::{Path, PathBuf};

fn opts() -> Options {
    Options {
        segment_size: 128 << 10,
        block_size: 2048,
        memory_budget: 8 << 20,
        durability: Durability::NoSync,
        background_gc: false,
        ..Options::default()
    }
}

/// A directory with sealed segments, a tail, two index runs, a delete list and a checkpoint.
fn populated() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path(),
        Options {
            compression: basalt_engine::Compression::None,
            ..opts()
        },
    )
    .unwrap();
    let c = db.create_collection("c").unwrap();
    for round in 0..3u32 {
        for i in 0..400u32 {
            let v: Vec<u8> = (0..200u32)
                .map(|j| ((i * 31 + j * 7 + round) % 251) as u8)
                .collect();
            c.put(&i.to_be_bytes(), &v).unwrap();
        }
        db.flush().unwrap();
    }
    for i in 0..50u32 {
        c.put(&i.to_be_bytes(), b"tail").unwrap();
    }
    drop(c);
    db.close().unwrap();
    dir
}

fn files(dir: &Path, pred: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| pred(p.file_name().unwrap().to_str().unwrap()))
        .collect();
    v.sort();
    v
}

/// Flips `n` random bits of every file matching `pred`, one at a time, and requires
/// `check` to report each (or refuse to open, naming the file).
fn flips_detected(pred: impl Fn(&str) -> bool, n: usize, seed: u64) {
    let dir = populated();
    let targets = files(dir.path(), &pred);
    assert!(!targets.is_empty());
    let mut x = seed;
    for path in targets {
        let orig = std::fs::read(&path).unwrap();
        for _ in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let bit = (x % (orig.len() as u64 * 8)) as usize;
            let mut bad = orig.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            std::fs::write(&path, &bad).unwrap();
            let rep = basalt_engine::check(dir.path()).unwrap();
            let name = path.file_name().unwrap().to_str().unwrap().to_string();
            assert!(!rep.is_ok(), "flip of bit {bit} in {name} went unnoticed");
            assert!(
                rep.problems
                    .iter()
                    .any(|p| p.contains(&name) || p.contains("CHECKPOINT")),
                "problem does not name {name}: {:?}",
                rep.problems
            );
            std::fs::write(&path, &orig).unwrap();
        }
    }
    assert!(
        basalt_engine::check(dir.path()).unwrap().is_ok(),
        "restored files must check clean"
    );
}

#[test]
fn flipped_bits_in_log_segments_are_reported_with_file_and_offset() {
    flips_detected(|n| n.ends_with(".log"), 60, 0x1234_5678);
}

#[test]
fn flipped_bits_in_index_runs_are_reported() {
    flips_detected(|n| n.ends_with(".run"), 60, 0x9abc_def1);
}

#[test]
fn flipped_bits_in_checkpoint_and_delete_list_are_reported() {
    flips_detected(
        |n| n == "CHECKPOINT" || n.starts_with("DELETES"),
        60,
        0x0f0f_0f0f,
    );
}

#[test]
fn reading_a_damaged_block_names_file_and_offset() {
    let dir = populated();
    let segs = files(dir.path(), |n| n.ends_with(".log"));
    assert!(segs.len() >= 2, "expected sealed segments");
    // Damage one byte in every data page of each sealed segment (all but the tail; the
    // footer, found through the file's last 16 bytes, stays intact so the engine opens).
    for seg in &segs[..segs.len() - 1] {
        let mut b = std::fs::read(seg).unwrap();
        let end = b.len() - 16;
        assert_eq!(&b[end + 8..], b"BSLTEND1", "{seg:?} is sealed");
        let footer = u64::from_le_bytes(b[end..end + 8].try_into().unwrap()) as usize;
        for p in (4096..footer).step_by(4096) {
            b[p + 100] ^= 0xff;
        }
        std::fs::write(seg, &b).unwrap();
    }
    let db = Db::open(dir.path(), opts()).unwrap();
    let c = db.collection("c").unwrap();
    let errs: Vec<String> = (0..400u32)
        .filter_map(|i| c.get(&i.to_be_bytes()).err())
        .map(|e| e.to_string())
        .collect();
    assert!(!errs.is_empty(), "some live key sits in a damaged block");
    assert!(
        errs[0].contains("seg-") && errs[0].contains("at offset") && errs[0].contains("checksum"),
        "{}",
        errs[0]
    );
}

fn tail_segment(dir: &Path) -> PathBuf {
    files(dir, |n| n.ends_with(".log")).pop().unwrap()
}

/// A database in `dir` holding keys 0..20 with 300-byte values, uncompressed (each
/// write one block of ~340 bytes), every write synced.
fn twenty_synced_writes(dir: &Path) -> Db {
    let o = Options {
        durability: Durability::SyncEveryWrite,
        compression: basalt_engine::Compression::None,
        ..opts()
    };
    let db = Db::open(dir, o).unwrap();
    let c = db.create_collection("c").unwrap();
    for i in 0..20u32 {
        c.put(&i.to_be_bytes(), &[i as u8; 300]).unwrap();
    }
    db
}

/// Tears the last block of `file`: zeroes the last `n` bytes of its data, as a
/// partial sector write leaves them.
fn tear_end(file: &Path, n: usize) {
    let mut b = std::fs::read(file).unwrap();
    let end = b.iter().rposition(|&x| x != 0).unwrap() + 1;
    b[end - n..end].fill(0);
    std::fs::write(file, &b).unwrap();
}

#[test]
fn torn_final_block_is_discarded_and_earlier_synced_writes_survive() {
    let dir = tempfile::tempdir().unwrap();
    drop(twenty_synced_writes(dir.path()));
    tear_end(&tail_segment(dir.path()), 150);
    let db = Db::open(dir.path(), opts()).unwrap();
    let c = db.collection("c").unwrap();
    for i in 0..19u32 {
        assert_eq!(
            c.get(&i.to_be_bytes()).unwrap().unwrap(),
            vec![i as u8; 300],
            "synced write {i} lost"
        );
    }
    assert_eq!(
        c.get(&19u32.to_be_bytes()).unwrap(),
        None,
        "the torn last write must be gone entirely"
    );
    c.put(b"after", b"recovery").unwrap();
    drop(c);
    drop(db);
    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(db.get("c", b"after").unwrap().unwrap(), b"recovery");
    drop(db);
    assert!(basalt_engine::check(dir.path()).unwrap().is_ok());
}

#[test]
fn a_torn_last_block_of_a_batch_discards_the_batch_and_its_intact_blocks_before_it() {
    // A batch larger than the write buffer reaches the file in pieces: a crash can
    // leave its first blocks intact and its last one torn. Those intact blocks are not
    // damage in the middle of the log; the batch was never acknowledged.
    let dir = tempfile::tempdir().unwrap();
    {
        let db = twenty_synced_writes(dir.path());
        // 2 KiB blocks: this batch is about four blocks chained by their flags.
        let mut b = basalt_engine::WriteBatch::new();
        for i in 100..120u32 {
            b.put("c", &i.to_be_bytes(), &[7; 300]);
        }
        db.write(&b).unwrap();
    }
    tear_end(&tail_segment(dir.path()), 150);
    let db = Db::open(dir.path(), opts()).expect("a torn batch is a torn tail");
    let c = db.collection("c").unwrap();
    for i in 0..20u32 {
        assert_eq!(
            c.get(&i.to_be_bytes()).unwrap().unwrap(),
            vec![i as u8; 300]
        );
    }
    for i in 100..120u32 {
        assert_eq!(
            c.get(&i.to_be_bytes()).unwrap(),
            None,
            "batch key {i} half-appeared"
        );
    }
    drop(c);
    drop(db);
    assert!(basalt_engine::check(dir.path()).unwrap().is_ok());
}

#[test]
fn damage_in_the_middle_of_the_tail_is_refused_not_truncated() {
    let dir = tempfile::tempdir().unwrap();
    drop(twenty_synced_writes(dir.path()));
    let tail = tail_segment(dir.path());
    let mut b = std::fs::read(&tail).unwrap();
    b[4096 + 200] ^= 0x10; // inside the first data block; valid blocks follow
    std::fs::write(&tail, &b).unwrap();
    let err = Db::open(dir.path(), opts())
        .err()
        .expect("open must refuse");
    let msg = err.to_string();
    assert!(
        msg.contains(tail.file_name().unwrap().to_str().unwrap()) && msg.contains("refusing"),
        "{msg}"
    );
    // Nothing was truncated: the file is as we left it.
    assert_eq!(std::fs::read(&tail).unwrap(), b);
}

//! Segment format versions: files of older versions are read as they are and never get
//! blocks of the current version (an older build would refuse such a segment by its
//! header instead of misreading its blocks); newer versions are refused by name.

mod common;

use basalt_engine::{Db, Error, IoBackend};
use common::{noise, read_test_options};
use std::path::{Path, PathBuf};

/// The format version this build writes (`SEG_VERSION`); the one before it lacks
/// checksums seeded with the segment id.
const CURRENT: u32 = 5;

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with("seg-"))
        .collect();
    v.sort();
    v
}

fn header_version(seg: &Path) -> u32 {
    let b = std::fs::read(seg).unwrap();
    u32::from_le_bytes(b[8..12].try_into().unwrap())
}

/// Rewrites `seg`'s header to say `version` (with a valid checksum: from version 5 it
/// covers bytes 20..24 too).
fn set_header_version(seg: &Path, version: u32) {
    let mut b = std::fs::read(seg).unwrap();
    b[8..12].copy_from_slice(&version.to_le_bytes());
    let mut crc = crc32c::crc32c(&b[0..16]);
    if version >= 5 {
        crc = crc32c::crc32c_append(crc, &b[20..24]);
    }
    b[16..20].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(seg, b).unwrap();
}

/// Makes `seg`, written by this build, what the build before it wrote: a version 4
/// header and block checksums without the segment id's seed. Walks the blocks from
/// offset 4096 (40-byte headers: magic, crc, flags, ..., `payload_len` at 12..16,
/// `pages` at 20..24).
fn make_previous_format(seg: &Path) {
    set_header_version(seg, CURRENT - 1);
    let mut b = std::fs::read(seg).unwrap();
    let mut off = 4096;
    while off + 40 <= b.len() && b[off..off + 4] == *b"BLK1" {
        let field = |at: usize| u32::from_le_bytes(b[off + at..off + at + 4].try_into().unwrap());
        let (flags, payload_len, pages) = (b[off + 8], field(12) as usize, field(20) as usize);
        let covered = if flags & 4 != 0 {
            40 + 4 * pages
        } else {
            40 + payload_len
        };
        let crc = crc32c::crc32c(&b[off + 8..off + covered]);
        b[off + 4..off + 8].copy_from_slice(&crc.to_le_bytes());
        off += 40 + payload_len;
        if flags & 2 != 0 {
            off = off.next_multiple_of(4096);
        }
    }
    std::fs::write(seg, b).unwrap();
}

/// The segment file holding `needle`.
fn segment_holding(dir: &Path, needle: &[u8]) -> PathBuf {
    segments(dir)
        .into_iter()
        .find(|p| {
            let b = std::fs::read(p).unwrap();
            b.windows(needle.len()).any(|w| w == needle)
        })
        .expect("bytes in some segment")
}

#[test]
fn a_tail_segment_of_the_previous_format_is_sealed_not_appended_to() {
    let dir = tempfile::tempdir().unwrap();
    let opts = || read_test_options(IoBackend::Psync);
    {
        let db = Db::open(dir.path(), opts()).unwrap();
        let c = db.create_collection("c").unwrap();
        for k in 0..20u64 {
            c.put(&k.to_be_bytes(), b"small value of the old build")
                .unwrap();
        }
    }
    let old = segments(dir.path());
    let tail = old.last().unwrap().clone();
    make_previous_format(&tail);
    let big = noise(40_000, 3);
    {
        let db = Db::open(dir.path(), opts()).unwrap();
        let c = db.collection("c").unwrap();
        assert_eq!(
            c.get(&5u64.to_be_bytes()).unwrap().unwrap(),
            b"small value of the old build"
        );
        c.put(b"big", &big).unwrap();
        db.flush().unwrap();
        assert_eq!(c.get(b"big").unwrap().unwrap(), big);
        assert_eq!(
            c.get_range(b"big", 8192..12_288).unwrap().unwrap(),
            big[8192..12_288]
        );
    }
    // The new (rotated, paged) block went to a new segment of this version; the old
    // tail keeps its version and its data.
    let holder = segment_holding(dir.path(), &big[4096..8192]);
    assert_ne!(
        holder, tail,
        "a current-format block was appended to an old segment"
    );
    assert_eq!(header_version(&holder), CURRENT);
    assert_eq!(header_version(&tail), CURRENT - 1);
    let db = Db::open(dir.path(), opts()).unwrap();
    let c = db.collection("c").unwrap();
    assert_eq!(
        c.get(&19u64.to_be_bytes()).unwrap().unwrap(),
        b"small value of the old build"
    );
    assert_eq!(c.get(b"big").unwrap().unwrap(), big);
    drop(db);
    let rep = basalt_engine::check(dir.path()).unwrap();
    assert!(rep.is_ok(), "{:?}", rep.problems);
}

#[test]
fn an_empty_tail_segment_of_the_previous_format_gets_the_current_header() {
    let dir = tempfile::tempdir().unwrap();
    let opts = || read_test_options(IoBackend::Psync);
    drop(Db::open(dir.path(), opts()).unwrap());
    let segs = segments(dir.path());
    let tail = segs.last().unwrap().clone();
    make_previous_format(&tail);
    let big = noise(40_000, 4);
    {
        let db = Db::open(dir.path(), opts()).unwrap();
        assert_eq!(header_version(&tail), CURRENT, "re-headed at open");
        let c = db.create_collection("c").unwrap();
        c.put(b"big", &big).unwrap();
    }
    assert_eq!(
        segments(dir.path()),
        segs,
        "no segment added for an empty tail"
    );
    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(
        db.collection("c").unwrap().get(b"big").unwrap().unwrap(),
        big
    );
    drop(db);
    let rep = basalt_engine::check(dir.path()).unwrap();
    assert!(rep.is_ok(), "{:?}", rep.problems);
}

#[test]
fn a_segment_of_a_newer_format_is_refused_with_its_file_and_version() {
    let dir = tempfile::tempdir().unwrap();
    let opts = || read_test_options(IoBackend::Psync);
    {
        let db = Db::open(dir.path(), opts()).unwrap();
        db.create_collection("c").unwrap().put(b"k", b"v").unwrap();
    }
    let tail = segments(dir.path()).pop().unwrap();
    set_header_version(&tail, CURRENT + 1);
    match Db::open(dir.path(), opts()) {
        Err(Error::FormatVersion {
            file,
            found,
            supported,
        }) => {
            assert_eq!(
                (file, found, supported),
                (tail.clone(), CURRENT + 1, CURRENT)
            );
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a newer segment format was opened"),
    }
    // Nothing was changed by the refusal.
    assert_eq!(header_version(&tail), CURRENT + 1);
}

//! Reads of parts of values (`multi_get_ranges`): they return exactly the bytes `get`
//! returns cut to the range, on both IO backends, for values in every state (write
//! cache, open block, on disk, relocated by GC, after a reopen); a part of a large
//! value costs a read of the pages that hold it; a damaged page is reported with file
//! and offset while the value's other pages stay readable.

use basalt_engine::{AlignedBuf, Db, Error, IoBackend, Options};
use std::ops::Range;

mod common;
use common::{noise, read_test_options as opts, Rng};

/// Value `k` of `round`: sizes from a few bytes to 300 KiB, incompressible or text.
fn value(k: u64, round: u64) -> Vec<u8> {
    let len = [100, 15_000, 16_384, 20_000, 65_536, 65_536, 300_000][(k % 7) as usize];
    if k.is_multiple_of(5) {
        // Compressible: stored in a compressed block, read whole.
        format!("{k}/{round} ").repeat(len / 8).into_bytes()
    } else {
        noise(len + round as usize, k * 1000 + round)
    }
}

fn cut(v: &[u8], r: &Range<usize>) -> Vec<u8> {
    let z = r.end.min(v.len());
    v[r.start.min(z)..z].to_vec()
}

/// Random batches of (key, range), some keys missing, some ranges empty or past the
/// end, checked against `get`.
fn check_batches(db: &Db, seed: u64, keys: u64) {
    let c = db.collection("c").unwrap();
    let mut rng = Rng(seed);
    for batch in 0..40 {
        let n = 1 + (rng.next() % 24) as usize;
        let reqs: Vec<([u8; 8], Range<usize>)> = (0..n)
            .map(|_| {
                let k = rng.next() % (keys + keys / 10);
                let a = (rng.next() % 310_000) as usize;
                let len = match rng.next() % 4 {
                    0 => 0,
                    1 => 4096,
                    2 => (rng.next() % 9000) as usize,
                    _ => (rng.next() % 200_000) as usize,
                };
                let a = if rng.next().is_multiple_of(3) {
                    a / 4096 * 4096
                } else {
                    a % 70_000
                };
                (k.to_be_bytes(), a..a + len)
            })
            .collect();
        let refs: Vec<(&[u8], Range<usize>)> =
            reqs.iter().map(|(k, r)| (&k[..], r.clone())).collect();
        let got = c.multi_get_ranges(&refs).unwrap();
        for (i, (k, r)) in refs.iter().enumerate() {
            let want = c.get(k).unwrap().map(|v| cut(&v, r));
            assert_eq!(
                got[i].as_ref().map(|v| v.len()),
                want.as_ref().map(|v| v.len()),
                "batch {batch} key {k:?} range {r:?}: length"
            );
            assert!(got[i] == want, "batch {batch} key {k:?} range {r:?}: bytes");
        }
        // The same parts written into the caller's buffers (filled with junk first).
        let mut bufs: Vec<Vec<u8>> = refs.iter().map(|(_, r)| vec![0xa5; r.len()]).collect();
        let mut slices: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
        let lens = db.multi_get_ranges_into("c", &refs, &mut slices).unwrap();
        for (i, (k, r)) in refs.iter().enumerate() {
            let into = lens[i].map(|n| bufs[i][..n].to_vec());
            assert!(into == got[i], "batch {batch} key {k:?} range {r:?}: into");
        }
        // Into page-aligned buffers: whole pages of a part at a page-aligned offset of
        // its value are read from the device in place (junk first here too).
        let mut bufs: Vec<AlignedBuf> = (refs.iter())
            .map(|(_, r)| {
                let mut b = AlignedBuf::zeroed(r.len());
                b.fill(0x3c);
                b
            })
            .collect();
        let mut slices: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
        let lens = db.multi_get_ranges_into("c", &refs, &mut slices).unwrap();
        for (i, (k, r)) in refs.iter().enumerate() {
            let into = lens[i].map(|n| bufs[i][..n].to_vec());
            assert!(
                into == got[i],
                "batch {batch} key {k:?} range {r:?}: in place"
            );
        }
        // And handed on one by one: each part once, with its bytes in its buffer.
        let mut bufs: Vec<Vec<u8>> = refs.iter().map(|(_, r)| vec![0x5a; r.len()]).collect();
        let mut slices: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
        let mut each: Vec<Option<Option<Vec<u8>>>> = vec![None; refs.len()];
        db.multi_get_ranges_each("c", &refs, &mut slices, |i, len, buf| {
            assert!(each[i].is_none(), "batch {batch}: part {i} handed on twice");
            each[i] = Some(len.map(|n| buf[..n].to_vec()));
        })
        .unwrap();
        for (i, (k, r)) in refs.iter().enumerate() {
            let part = each[i].as_ref().expect("every part is handed on");
            assert!(*part == got[i], "batch {batch} key {k:?} range {r:?}: each");
        }
    }
}

#[test]
fn a_part_is_handed_on_once_its_own_reads_land_not_after_the_whole_batch() {
    for backend in [IoBackend::IoUring, IoBackend::Psync] {
        let (dir, db) = cold_chunks(4, IoBackend::Psync);
        drop(db);
        let db = Db::open(
            dir.path(),
            Options {
                warm_index_cache: false,
                ..opts(backend)
            },
        )
        .unwrap();
        let c = db.collection("c").unwrap();
        // Key 1's head is cached by a first read; key 0's is not.
        c.get_range(&1u64.to_be_bytes(), 0..10).unwrap().unwrap();
        let reads = || db.stats().device_reads;
        let before = reads();
        let (k0, k1, missing) = (0u64.to_be_bytes(), 1u64.to_be_bytes(), 99u64.to_be_bytes());
        let refs: Vec<(&[u8], Range<usize>)> =
            vec![(&k0, 8192..12288), (&missing, 0..4096), (&k1, 16384..20480)];
        let mut bufs = vec![vec![0u8; 4096]; 3];
        let mut slices: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
        let mut order = Vec::new();
        db.multi_get_ranges_each("c", &refs, &mut slices, |i, len, buf| {
            order.push((i, reads() - before));
            let want = refs[i].0 != missing.as_slice();
            assert_eq!(len.is_some(), want, "{backend:?}: part {i} found");
            if let Some(n) = len {
                let key = u64::from_be_bytes(refs[i].0.try_into().unwrap());
                assert_eq!(
                    buf[..n],
                    noise(65_536, key)[refs[i].1.clone()],
                    "{backend:?}: part {i}"
                );
            }
        })
        .unwrap();
        let total = reads() - before;
        // The missing key before any read; key 0 (head and part in one round trip)
        // before key 1's part is read; key 1 last, after every read.
        assert_eq!(
            order.iter().map(|o| o.0).collect::<Vec<_>>(),
            [1, 0, 2],
            "{backend:?}: {order:?}"
        );
        assert_eq!(
            order[0].1, 0,
            "{backend:?}: the missing key waited for a read: {order:?}"
        );
        assert!(
            order[1].1 < total,
            "{backend:?}: key 0 waited for key 1's read: {order:?}"
        );
        assert_eq!(order[2].1, total, "{backend:?}: {order:?}");
    }
}

/// A file read of four chunks: every part goes into one page-aligned buffer of the
/// sink's, as the FUSE mount's reads do (whole pages land there in place).
struct OneBuffer {
    buf: AlignedBuf,
    /// Offset of each part in `buf`, and its range's length.
    at: Vec<(usize, usize)>,
    done: Vec<Option<Option<usize>>>,
}

// SAFETY: `buf` is neither moved nor read while the engine call runs; part `i` is
// always the same range of it.
unsafe impl basalt_engine::PartSink for OneBuffer {
    fn buf(&mut self, i: usize) -> &mut [u8] {
        let (at, len) = self.at[i];
        &mut self.buf[at..at + len]
    }

    fn done(&mut self, i: usize, len: Option<usize>) {
        assert!(self.done[i].is_none(), "part {i} reported twice");
        self.done[i] = Some(len);
    }
}

#[test]
fn parts_put_into_one_sink_buffer_assemble_the_values_and_are_each_reported_once() {
    for backend in [IoBackend::IoUring, IoBackend::Psync] {
        let (_dir, db) = cold_chunks(4, backend);
        let keys: Vec<[u8; 8]> = (0..5u64).map(|k| k.to_be_bytes()).collect();
        // Chunks 0-3 whole, then the middle of chunk 2 again and a missing key.
        let refs: Vec<(&[u8], Range<usize>)> = vec![
            (&keys[0], 0..65_536),
            (&keys[1], 0..65_536),
            (&keys[2], 0..65_536),
            (&keys[3], 0..65_536),
            (&keys[2], 1000..5096),
            (&keys[4], 0..100),
        ];
        let mut at = Vec::new();
        let mut off = 0;
        for (_, r) in &refs {
            at.push((off, r.len()));
            off += r.len();
        }
        let mut buf = AlignedBuf::zeroed(off);
        buf.fill(0xa5);
        let mut sink = OneBuffer {
            buf,
            at,
            done: vec![None; refs.len()],
        };
        db.multi_get_ranges_to("c", &refs, &mut sink).unwrap();
        let want: Vec<u8> = (0..4u64)
            .flat_map(|k| noise(65_536, k))
            .chain(noise(65_536, 2)[1000..5096].iter().copied())
            .collect();
        assert!(
            sink.buf[..want.len()] == want[..],
            "{backend:?}: the four chunks and the part of chunk 2, in place"
        );
        let lens: Vec<Option<Option<usize>>> = sink.done.clone();
        assert_eq!(
            lens,
            [
                Some(Some(65_536)),
                Some(Some(65_536)),
                Some(Some(65_536)),
                Some(Some(65_536)),
                Some(Some(4096)),
                Some(None)
            ],
            "{backend:?}: every part reported once with its length, the missing key as None"
        );
        let mut short = OneBuffer {
            buf: AlignedBuf::zeroed(10),
            at: vec![(0, 10)],
            done: vec![None],
        };
        let err = db
            .multi_get_ranges_to("c", &[(&keys[0][..], 0..11)], &mut short)
            .unwrap_err();
        assert!(err.to_string().contains("holds 10 bytes"), "{err}");
    }
}

#[test]
fn a_buffer_shorter_than_its_range_or_a_missing_buffer_is_refused() {
    let (_dir, db) = cold_chunks(1, IoBackend::Psync);
    let mut short = [0u8; 10];
    let err = db
        .multi_get_ranges_into(
            "c",
            &[(&0u64.to_be_bytes()[..], 0..11)],
            &mut [&mut short[..]],
        )
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    assert!(err.to_string().contains("holds 10 bytes"), "{err}");
    let err = db
        .multi_get_ranges_into("c", &[(&0u64.to_be_bytes()[..], 0..1)], &mut [])
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    assert!(err.to_string().contains("0 buffers for 1 ranges"), "{err}");
}

#[test]
fn parts_of_values_equal_cuts_of_get_on_both_backends() {
    for backend in [IoBackend::IoUring, IoBackend::Psync] {
        let dir = tempfile::tempdir().unwrap();
        let keys = 300u64;
        {
            let db = Db::open(dir.path(), opts(backend)).unwrap();
            let c = db.create_collection("c").unwrap();
            for k in 0..keys {
                c.put(&k.to_be_bytes(), &value(k, 0)).unwrap();
            }
            db.flush().unwrap();
            // Overwrites leave garbage for GC; the last few stay in the write cache.
            for k in (0..keys).step_by(3) {
                c.put(&k.to_be_bytes(), &value(k, 1)).unwrap();
            }
            for k in (0..keys).step_by(13) {
                c.delete(&k.to_be_bytes()).unwrap();
            }
            check_batches(&db, 1, keys);
            db.flush().unwrap();
            db.gc_now().unwrap();
            check_batches(&db, 2, keys);
            let s = db.stats();
            assert!(
                s.head_cache_hits + s.head_cache_misses > 0,
                "{backend:?}: no part was read through a paged block's head"
            );
        }
        // Cold caches: heads are read from the device.
        let db = Db::open(dir.path(), opts(backend)).unwrap();
        check_batches(&db, 3, keys);
        assert!(
            db.stats().part_bytes_read_in_place > 0,
            "{backend:?}: no part was read in place into a page-aligned buffer"
        );
        drop(db);
        let rep = basalt_engine::check(dir.path()).unwrap();
        assert!(rep.is_ok(), "{:?}", rep.problems);
    }
}

/// `n` incompressible 64 KiB values, flushed and reopened so nothing is cached.
fn cold_chunks(n: u64, backend: IoBackend) -> (tempfile::TempDir, Db) {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), opts(backend)).unwrap();
        let c = db.create_collection("c").unwrap();
        for k in 0..n {
            c.put(&k.to_be_bytes(), &noise(65_536, k)).unwrap();
        }
        db.flush().unwrap();
    }
    // The tests count every device read from here on: no index warm-up behind them.
    let cold = Options {
        warm_index_cache: false,
        ..opts(backend)
    };
    let db = Db::open(dir.path(), cold).unwrap();
    (dir, db)
}

#[test]
fn a_4k_page_of_a_64k_value_costs_one_4k_read_once_its_head_is_cached() {
    let (_dir, db) = cold_chunks(48, IoBackend::Psync);
    let c = db.collection("c").unwrap();
    let read = |db: &Db| {
        let s = db.stats();
        (s.device_bytes_read, s.device_reads)
    };
    // First part of each value: the head's page(s), then the part's page.
    let (b0, r0) = read(&db);
    for k in 0..48u64 {
        let got = c.get_range(&k.to_be_bytes(), 4096..8192).unwrap().unwrap();
        assert_eq!(got, noise(65_536, k)[4096..8192]);
    }
    let (b1, r1) = read(&db);
    // (plus the first reads of the index's blocks: one or two for 48 keys)
    assert!(
        (2 * 48..=2 * 48 + 2).contains(&(r1 - r0)),
        "head + part for each value: {} reads",
        r1 - r0
    );
    assert!(
        b1 - b0 <= 48 * (2 * 4096 + 4096) + 2 * 4096,
        "{} bytes",
        b1 - b0
    );
    // Later pages of the value (page-aligned parts): one read of exactly that page.
    for k in 0..48u64 {
        for j in [3usize, 9, 14] {
            let r = j * 4096..(j + 1) * 4096;
            let got = c.get_range(&k.to_be_bytes(), r.clone()).unwrap().unwrap();
            assert_eq!(got, noise(65_536, k)[r]);
        }
    }
    let (b2, r2) = read(&db);
    assert_eq!(r2 - r1, 3 * 48, "one device read per page");
    assert_eq!(
        b2 - b1,
        3 * 48 * 4096,
        "4 KiB from the device per 4 KiB page"
    );
    // The value's last page: its last bytes sit in the block's first page (rotated
    // block), so it is two reads, of one page each.
    for k in 0..48u64 {
        let got = c
            .get_range(&k.to_be_bytes(), 61_440..65_536)
            .unwrap()
            .unwrap();
        assert_eq!(got, noise(65_536, k)[61_440..]);
    }
    let (b3, r3) = read(&db);
    assert_eq!(r3 - r2, 2 * 48, "two reads for a last page");
    assert_eq!(b3 - b2, 2 * 48 * 4096);
    // A whole-value get reads the whole block.
    c.get(&7u64.to_be_bytes()).unwrap().unwrap();
    assert!(read(&db).0 - b3 >= 65_536);
    let s = db.stats();
    assert_eq!(s.head_cache_misses, 48);
    assert_eq!(s.head_cache_hits, 4 * 48);
}

/// The first read of a part of a value also reads its block's head: both go to the
/// device in one io_uring submission (where a rotated block keeps the part is known
/// before its head is read), and a part in the page right after the head is read with
/// the head, as one read.
#[test]
fn a_cold_part_is_read_with_its_blocks_head_in_one_round_trip() {
    let (_dir, db) = cold_chunks(48, IoBackend::IoUring);
    let c = db.collection("c").unwrap();
    let depth = |db: &Db, bucket: &str| {
        let s = db.stats();
        let n = s
            .io_queue_depth
            .iter()
            .find(|(b, _)| *b == bucket)
            .unwrap()
            .1;
        (n, s.device_reads)
    };
    // Warm the index so that only value reads follow.
    c.get_range(&47u64.to_be_bytes(), 0..1).unwrap().unwrap();
    let (d0, r0) = depth(&db, "2-3");
    for k in 0..47u64 {
        let got = c
            .get_range(&k.to_be_bytes(), 8192..12_288)
            .unwrap()
            .unwrap();
        assert_eq!(got, noise(65_536, k)[8192..12_288]);
    }
    let (d1, r1) = depth(&db, "2-3");
    assert_eq!(r1 - r0, 2 * 47, "a head read and a part read per value");
    assert_eq!(
        d1 - d0,
        47,
        "each value's two reads are one submission (of depth 2-3)"
    );
    assert_eq!(db.stats().head_cache_misses, 48);

    // The first page of the value's body starts where the head's pages end: one read.
    let (_dir, db) = cold_chunks(48, IoBackend::IoUring);
    let c = db.collection("c").unwrap();
    c.get_range(&47u64.to_be_bytes(), 0..1).unwrap().unwrap();
    let r0 = db.stats().device_reads;
    for k in 0..47u64 {
        let got = c.get_range(&k.to_be_bytes(), 0..4096).unwrap().unwrap();
        assert_eq!(got, noise(65_536, k)[..4096]);
    }
    assert_eq!(
        db.stats().device_reads - r0,
        47,
        "one read: the head's pages and the part's"
    );
}

/// A sequential reader asks for whole values as parts (a file's 64 KiB chunks): the
/// first read of each is one device read of its block (head and pages joined), copied
/// once into place, and the head is cached.
#[test]
fn a_whole_cold_value_asked_as_a_part_is_one_read_and_caches_only_its_head() {
    let (_dir, db) = cold_chunks(48, IoBackend::IoUring);
    let c = db.collection("c").unwrap();
    // Warm the index so that only value reads follow.
    c.get_range(&47u64.to_be_bytes(), 0..1).unwrap().unwrap();
    let s0 = db.stats();
    for k in 0..47u64 {
        let got = c.get_range(&k.to_be_bytes(), 0..65_536).unwrap().unwrap();
        assert_bytes_eq(&got, &noise(65_536, k), k);
    }
    let more: Vec<[u8; 8]> = (0..47u64).map(|k| k.to_be_bytes()).collect();
    let s1 = db.stats();
    assert_eq!(s1.device_reads - s0.device_reads, 47, "one read per value");
    assert_eq!(s1.head_cache_misses - s0.head_cache_misses, 47);
    // Again: the heads were cached by the first pass (before, a whole-block read cached
    // none), so each value is read as its body and its tail (in the head's page).
    let reqs: Vec<(&[u8], Range<usize>)> = more.iter().map(|k| (&k[..], 0..65_536)).collect();
    let got = c.multi_get_ranges(&reqs).unwrap();
    for (k, v) in got.iter().enumerate() {
        assert_bytes_eq(v.as_ref().unwrap(), &noise(65_536, k as u64), k as u64);
    }
    let s2 = db.stats();
    assert_eq!(s2.head_cache_hits - s1.head_cache_hits, 47);
    // The 94 reads continue each other in the log (each value's tail page, its body,
    // the next one's tail page inside that body...): queued in file order, they go to
    // the device as a few vectored reads.
    let (reads, merged) = (
        s2.device_reads - s1.device_reads,
        s2.reads_merged - s1.reads_merged,
    );
    assert_eq!(reads + merged, 2 * 47, "a body and a tail read per value");
    assert!(
        reads <= 4,
        "{reads} device reads for 47 adjacent values ({merged} merged)"
    );
}

/// A batch of cold whole values stored one after another (a file's chunks, read in
/// order) is one vectored device read per 2 MiB, with the same bytes as one read each.
#[test]
fn adjacent_cold_values_asked_in_one_batch_share_device_reads() {
    for backend in [IoBackend::IoUring, IoBackend::Psync] {
        let (_dir, db) = cold_chunks(40, backend);
        let c = db.collection("c").unwrap();
        c.get_range(&39u64.to_be_bytes(), 0..1).unwrap().unwrap();
        let keys: Vec<[u8; 8]> = (0..40u64).map(|k| k.to_be_bytes()).collect();
        // In reverse order: the reads go in file order whatever the batch's order.
        let reqs: Vec<(&[u8], Range<usize>)> =
            keys.iter().rev().map(|k| (&k[..], 0..65_536)).collect();
        let s0 = db.stats();
        let got = c.multi_get_ranges(&reqs).unwrap();
        for (i, v) in got.iter().enumerate() {
            let k = 39 - i as u64;
            assert_bytes_eq(v.as_ref().unwrap(), &noise(65_536, k), k);
        }
        let s1 = db.stats();
        let (reads, merged) = (
            s1.device_reads - s0.device_reads,
            s1.reads_merged - s0.reads_merged,
        );
        match backend {
            IoBackend::Psync => {
                assert!((40..=42).contains(&reads), "pread: one each, {reads}");
                assert_eq!(merged, 0, "pread merges nothing");
            }
            _ => {
                // (plus a read of an index block or two the warm-up did not bring in)
                assert!(
                    (40..=42).contains(&(reads + merged)),
                    "one read per value, merged or not: {reads} + {merged}"
                );
                assert!(
                    merged >= 37,
                    "{reads} device reads for 2.6 MiB ({merged} merged)"
                );
            }
        }
    }
}

fn assert_bytes_eq(got: &[u8], want: &[u8], k: u64) {
    assert!(
        got == want,
        "value {k}: {} bytes, want {}",
        got.len(),
        want.len()
    );
}

/// Finds `needle` in the segment files of `dir`: (file, offset).
fn find_in_segments(dir: &std::path::Path, needle: &[u8]) -> (std::path::PathBuf, usize) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if !p.file_name().unwrap().to_str().unwrap().starts_with("seg-") {
            continue;
        }
        let data = std::fs::read(&p).unwrap();
        if let Some(at) = data.windows(needle.len()).position(|w| w == needle) {
            return (p, at);
        }
    }
    panic!("value bytes not found in any segment");
}

#[test]
fn a_damaged_page_is_reported_with_file_and_offset_and_the_other_pages_stay_readable() {
    let (dir, db) = cold_chunks(48, IoBackend::IoUring);
    drop(db);
    // Damage value 5's bytes 40000.. on disk (in a sealed segment: 48 values of 64 KiB
    // fill several 1 MiB segments).
    let v = noise(65_536, 5);
    let (file, at) = find_in_segments(dir.path(), &v[40_000..40_064]);
    let mut data = std::fs::read(&file).unwrap();
    data[at + 10] ^= 0x40;
    std::fs::write(&file, &data).unwrap();
    let bad_page = ((at + 10) / 4096 * 4096) as u64;

    let db = Db::open(dir.path(), opts(IoBackend::IoUring)).unwrap();
    let c = db.collection("c").unwrap();
    let k = 5u64.to_be_bytes();
    match c.get_range(&k, 40_000..40_100) {
        Err(Error::Corruption {
            file: f, offset, ..
        }) => {
            assert_eq!(f, file);
            assert_eq!(offset, bad_page, "names the damaged page");
        }
        other => panic!("damaged page read as {other:?}"),
    }
    // Pages of the same value away from the damage read and verify.
    let far = 0..4096;
    assert_eq!(c.get_range(&k, far.clone()).unwrap().unwrap(), v[far]);
    assert!(matches!(c.get(&k), Err(Error::Corruption { .. })));
    drop(db);
    let rep = basalt_engine::check(dir.path()).unwrap();
    assert!(
        rep.problems
            .iter()
            .any(|p| p.contains(file.to_str().unwrap()) && p.contains("page checksum")),
        "check misses the damaged page: {:?}",
        rep.problems
    );
}

/// Reads value `k`'s bytes `range` into `buf` (one part); returns its length.
fn read_into(db: &Db, k: u64, range: Range<usize>, buf: &mut [u8]) -> Result<usize, Error> {
    let key = k.to_be_bytes();
    let lens = db.multi_get_ranges_into("c", &[(&key[..], range)], &mut [buf])?;
    Ok(lens[0].expect("the key exists"))
}

#[test]
fn page_aligned_parts_land_in_place_and_others_are_copied_with_the_same_bytes() {
    for backend in [IoBackend::IoUring, IoBackend::Psync] {
        let (_dir, db) = cold_chunks(16, backend);
        let in_place = |db: &Db| db.stats().part_bytes_read_in_place;
        // (value, range, bytes expected in place): cold heads first, then cached ones.
        let cases: [(u64, Range<usize>, u64); 6] = [
            (1, 0..65_536, 61_440),    // whole value: all body pages but the last
            (2, 8192..24_576, 16_384), // page-aligned pages inside the body
            (3, 100..8292, 0),         // starts inside a page
            (1, 4096..12_288, 8192),   // head cached now
            (2, 61_440..65_536, 0),    // the body's last page and the tail
            (4, 0..4096, 4096),        // one page, cold
        ];
        for (k, range, want) in cases {
            let v = noise(65_536, k);
            let before = in_place(&db);
            let mut aligned = AlignedBuf::zeroed(range.len());
            let n = read_into(&db, k, range.clone(), &mut aligned).unwrap();
            assert_eq!(n, range.len());
            assert!(
                aligned[..] == v[range.clone()],
                "{backend:?} value {k} {range:?}"
            );
            let got = in_place(&db) - before;
            assert!(
                got == want,
                "{backend:?} value {k} {range:?}: {got} bytes in place, want {want}"
            );
            // A buffer one byte off a page boundary: copied, same bytes.
            let mut off = AlignedBuf::zeroed(range.len() + 1);
            let before = in_place(&db);
            read_into(&db, k, range.clone(), &mut off[1..]).unwrap();
            assert_eq!(
                in_place(&db),
                before,
                "{backend:?} value {k}: unaligned in place"
            );
            assert!(
                off[1..] == v[range.clone()],
                "{backend:?} value {k} {range:?} copied"
            );
        }
    }
}

#[test]
fn a_damaged_page_read_in_place_is_reported_with_file_and_offset() {
    let (dir, db) = cold_chunks(48, IoBackend::IoUring);
    drop(db);
    let v = noise(65_536, 7);
    let (file, at) = find_in_segments(dir.path(), &v[20_480..20_544]);
    let mut data = std::fs::read(&file).unwrap();
    data[at + 100] ^= 0x01;
    std::fs::write(&file, &data).unwrap();
    let bad_page = ((at + 100) / 4096 * 4096) as u64;
    for cached_head in [false, true] {
        let db = Db::open(dir.path(), opts(IoBackend::IoUring)).unwrap();
        if cached_head {
            let mut page = AlignedBuf::zeroed(4096);
            read_into(&db, 7, 0..4096, &mut page).unwrap();
            assert!(page[..] == v[..4096]);
        }
        let mut buf = AlignedBuf::zeroed(16_384);
        match read_into(&db, 7, 16_384..32_768, &mut buf) {
            Err(Error::Corruption {
                file: f, offset, ..
            }) => {
                assert_eq!(f, file);
                assert_eq!(offset, bad_page, "names the damaged page");
            }
            other => panic!("damaged page read in place as {other:?} (head cached: {cached_head})"),
        }
        assert!(
            db.stats().part_bytes_read_in_place < 16_384,
            "the damaged part counted as read"
        );
    }
}

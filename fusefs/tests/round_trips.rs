//! FUSE round trips per operation, counted by the daemon (`/.basalt/stats.json`,
//! `filesystem.requests`): the requests this filesystem lets the kernel skip stay
//! skipped, and skipping them loses nothing. Also the device bytes behind a small
//! O_DIRECT read (`engine.device_bytes_read`).

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use basalt_fusefs::{mount, MountHandle};
use common::{assert_bytes, mount_config, mounted_with_collection_c, open_db, pattern};

fn stats(mp: &Path) -> serde_json::Value {
    let s = std::fs::read_to_string(mp.join(".basalt/stats.json")).unwrap();
    serde_json::from_str(&s).unwrap()
}

fn requests(mp: &Path, op: &str) -> u64 {
    stats(mp)["filesystem"]["requests"][op]
        .as_u64()
        .unwrap_or_else(|| panic!("no request count for {op}"))
}

#[test]
fn close_sends_no_flush_and_release_commits_the_data() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let (data, mp) = (tmp.path().join("data"), tmp.path().join("mnt"));
    std::fs::create_dir_all(&mp).unwrap();
    let mut cfg = mount_config(&mp);
    // The flusher must not be what commits the data below.
    cfg.options.push("flush_interval_ms=3600000".into());
    let files: Vec<(String, Vec<u8>)> = (0..20)
        .map(|i| (format!("f{i}"), pattern(i, 3000 + 700 * i as usize)))
        .collect();
    {
        let h = mount(open_db(&data), cfg.clone()).unwrap();
        std::fs::create_dir(mp.join("c")).unwrap();
        let flushes = requests(&mp, "flush");
        for (name, bytes) in &files {
            std::fs::write(mp.join("c").join(name), bytes).unwrap();
        }
        // The first close may still send FLUSH: declining it is how the kernel learns.
        let sent = requests(&mp, "flush") - flushes;
        assert!(sent <= 1, "{sent} FLUSH requests for 20 closes");
        // RELEASE (asynchronous after close) commits each file: nothing stays dirty.
        let t = Instant::now();
        loop {
            let fs = &stats(&mp)["filesystem"];
            if fs["dirty_bytes"] == 0 && fs["dirty_inodes"] == 0 {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "data still dirty 10 s after the last close: {fs}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        for (name, bytes) in &files {
            assert_bytes(
                &std::fs::read(mp.join("c").join(name)).unwrap(),
                bytes,
                name,
            );
        }
        h.unmount().unwrap();
    }
    let db = open_db(&data);
    let c = db.collection("c").unwrap();
    for (name, bytes) in &files {
        let got = c.get(name.as_bytes()).unwrap().expect("document");
        assert_bytes(&got, bytes, name);
    }
}

#[test]
fn writes_ask_for_security_capability_once_per_open_not_once_per_write() {
    require_fuse!();
    let (_tmp, mp, h) = mounted_with_collection_c();
    let path = mp.join("c/f");
    let before = requests(&mp, "getxattr");
    let block = pattern(3, 4096);
    for round in 0..2 {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap();
        for _ in 0..64 {
            std::io::Write::write_all(&mut f, &block).unwrap();
        }
        drop(f);
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            (round + 1) * 64 * 4096
        );
    }
    // The kernel asks again after each attribute refresh (here: the SETATTR of the
    // times at each close), so about once per open; before, it asked before each write.
    let asked = requests(&mp, "getxattr") - before;
    assert!(
        asked <= 2,
        "{asked} GETXATTR requests for 2 opens, 128 writes"
    );
    h.unmount().unwrap();
}

#[test]
fn a_4k_direct_read_from_a_large_file_reads_its_page_not_the_whole_chunk() {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    require_fuse!();
    let content = pattern(7, 4 << 20);
    // Remounted: the engine's caches are cold.
    let (_tmp, mp, h) = written_then_remounted(&[], "big", &content);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(mp.join("c/big"))
        .unwrap();
    let device_bytes = |mp: &Path| stats(mp)["engine"]["device_bytes_read"].as_u64().unwrap();
    let before = device_bytes(&mp);
    // A 4 KiB-aligned buffer, as O_DIRECT wants.
    let mut raw = vec![0u8; 8192];
    let at = raw.as_ptr().align_offset(4096);
    let buf = &mut raw[at..at + 4096];
    let (reads, mut x) = (96u64, 12345u64);
    let (mut chunks, mut last_pages) = (std::collections::BTreeSet::new(), 0u64);
    for _ in 0..reads {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let off = (x >> 33) % ((4 << 20) / 4096) * 4096;
        chunks.insert(off >> 16);
        last_pages += u64::from(off % 65_536 == 61_440);
        let n = f.read_at(buf, off).unwrap();
        assert_eq!(n, 4096);
        assert_bytes(buf, &content[off as usize..off as usize + 4096], "4k read");
    }
    let read = device_bytes(&mp) - before;
    // Each read: its own page (a chunk's last page also needs the chunk's first page,
    // which holds the value's last bytes), plus once per chunk read (64 KiB chunks)
    // the chunk's head (at most two pages), plus a few index blocks. A whole-chunk read
    // would be 96 x 68 KiB.
    let bound = (reads + last_pages) * 4096 + chunks.len() as u64 * 8192 + 16 * 4096;
    println!("{reads} direct 4 KiB reads cost {read} device bytes (bound {bound})");
    assert!(read <= bound, "{read} device bytes for {reads} 4 KiB reads");
    drop(f);
    h.unmount().unwrap();
}

/// A fresh data directory where `c/<name>` was written with `content` through a mount
/// (with the `-o` options `opts`), then mounted again: the engine's caches and the
/// file's page cache are cold.
fn written_then_remounted(
    opts: &[String],
    name: &str,
    content: &[u8],
) -> (tempfile::TempDir, std::path::PathBuf, MountHandle) {
    let tmp = tempfile::tempdir().unwrap();
    let (data, mp) = (tmp.path().join("data"), tmp.path().join("mnt"));
    std::fs::create_dir_all(&mp).unwrap();
    let mut cfg = mount_config(&mp);
    cfg.options.extend(opts.iter().cloned());
    {
        let h = mount(open_db(&data), cfg.clone()).unwrap();
        std::fs::create_dir(mp.join("c")).unwrap();
        std::fs::write(mp.join("c").join(name), content).unwrap();
        h.unmount().unwrap();
    }
    let h = mount(open_db(&data), cfg).unwrap();
    (tmp, mp, h)
}

/// READ requests and the mount's readahead while a cold 16 MiB file is read front to
/// back in 128 KiB `read(2)`s, with `-o readahead_kb=` `ra` (None: the default).
fn sequential_read_requests(ra: Option<u32>) -> (u64, u32) {
    use std::io::Read;
    let opts: Vec<String> = ra
        .map(|kb| format!("readahead_kb={kb}"))
        .into_iter()
        .collect();
    let content = pattern(11, 16 << 20);
    let (_tmp, mp, h) = written_then_remounted(&opts, "seq", &content);
    let ra_file = basalt_fusefs::readahead_file(&mp).unwrap();
    let kb: u32 = std::fs::read_to_string(&ra_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let before = requests(&mp, "read");
    let mut f = std::fs::File::open(mp.join("c/seq")).unwrap();
    let (mut got, mut buf) = (Vec::with_capacity(content.len()), vec![0u8; 128 << 10]);
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    assert_bytes(&got, &content, "sequential read");
    let reads = requests(&mp, "read") - before;
    drop(f);
    h.unmount().unwrap();
    (reads, kb)
}

#[test]
fn a_cold_sequential_read_goes_out_in_1_mib_requests_under_the_default_readahead() {
    require_fuse!();
    let (reads, kb) = sequential_read_requests(None);
    println!("16 MiB read cold with readahead {kb} KiB: {reads} READ requests");
    assert_eq!(kb, basalt_fusefs::DEFAULT_READAHEAD_KB);
    // 1 MiB requests (max_write): 16, plus smaller ones while the readahead window
    // grows to 4 MiB. The kernel's own 128 KiB would take 128.
    assert!(reads <= 40, "{reads} READ requests for 16 MiB");
    let (small, kb) = sequential_read_requests(Some(256));
    println!("16 MiB read cold with readahead {kb} KiB: {small} READ requests");
    assert_eq!(kb, 256);
    assert!(
        small >= 64,
        "{small} READ requests for 16 MiB at 256 KiB readahead"
    );
}

/// Read buffers are reused per thread with their old bytes in place: a read of holes
/// and short chunks right after reads of other data must still return zeros there.
#[test]
fn reused_read_buffers_never_leak_earlier_bytes_into_holes() {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    require_fuse!();
    let (_tmp, mp, h) = mounted_with_collection_c();
    let full = vec![0xabu8; 1 << 20];
    std::fs::write(mp.join("c/full"), &full).unwrap();
    // A hole of 1 MiB, then 100 bytes: its last chunk is shorter than the chunk size.
    let sparse = std::fs::File::create(mp.join("c/sparse")).unwrap();
    sparse.write_all_at(&[7u8; 100], 1 << 20).unwrap();
    sparse.sync_all().unwrap();
    drop(sparse);
    let open = |name: &str| {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(mp.join("c").join(name))
            .unwrap()
    };
    let (f, s) = (open("full"), open("sparse"));
    // 4 KiB-aligned buffers, as O_DIRECT wants.
    let mut raw = vec![0u8; (2 << 20) + 4096];
    let at = raw.as_ptr().align_offset(4096);
    let buf = &mut raw[at..at + (1 << 20) + 4096];
    for round in 0..20 {
        assert_eq!(f.read_at(&mut buf[..1 << 20], 0).unwrap(), 1 << 20);
        assert!(buf[..1 << 20] == full[..], "round {round}: full file");
        let n = s.read_at(buf, 0).unwrap();
        assert_eq!(n, (1 << 20) + 100, "round {round}: sparse file length");
        assert!(
            buf[..1 << 20].iter().all(|&b| b == 0),
            "round {round}: the hole holds non-zero bytes"
        );
        assert!(
            buf[1 << 20..n].iter().all(|&b| b == 7),
            "round {round}: tail"
        );
    }
    drop((f, s));
    h.unmount().unwrap();
}

/// Listing a directory again sends no READDIR while nothing changed: the kernel serves
/// it from its cache (`FOPEN_CACHE_DIR` + `FOPEN_KEEP_CACHE`). The mount's own create,
/// unlink and rename reset that cache, so every listing is current.
#[test]
fn an_unchanged_directory_is_listed_again_from_the_kernel_cache_and_changes_show() {
    require_fuse!();
    let (_tmp, mp, h) = mounted_with_collection_c();
    let dir = mp.join("c/d");
    std::fs::create_dir(&dir).unwrap();
    for i in 0..300 {
        std::fs::write(dir.join(format!("f{i:03}")), b"x").unwrap();
    }
    let names = || -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    };
    let listings = || requests(&mp, "readdir") + requests(&mp, "readdirplus");
    let mut want: Vec<String> = (0..300).map(|i| format!("f{i:03}")).collect();
    assert_eq!(names(), want, "first listing");
    let before = listings();
    for round in 0..3 {
        assert_eq!(names(), want, "listing {round} from the cache");
    }
    assert_eq!(
        listings(),
        before,
        "READDIR sent for an unchanged directory"
    );

    std::fs::write(dir.join("new"), b"n").unwrap();
    std::fs::remove_file(dir.join("f000")).unwrap();
    std::fs::rename(dir.join("f001"), dir.join("g001")).unwrap();
    want.retain(|n| n != "f000" && n != "f001");
    want.extend(["g001".to_string(), "new".to_string()]);
    want.sort();
    assert_eq!(names(), want, "listing after create, unlink and rename");
    assert!(
        listings() > before,
        "the changed directory was not read again"
    );
    h.unmount().unwrap();
}

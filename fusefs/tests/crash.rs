//! Kill the daemon (`kill -9`) during a write-heavy workload, clear the dead mount,
//! remount, and check that every file whose last change was fsync'ed is intact.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{assert_bytes, pattern, DevMount};

#[derive(Clone)]
enum FileState {
    /// Last write completed its fsync: must survive.
    Synced(Vec<u8>),
    /// A write was in flight or not synced: may hold anything.
    Unknown,
}

/// A large file taking small writes, each followed by `fdatasync` (committed as page
/// patches): its content as of the last acknowledged write, and the range of a write
/// still in flight (which may hold old or new bytes).
#[derive(Default)]
struct PagedFile {
    acked: Vec<u8>,
    in_flight: Option<(usize, usize)>,
    writes: usize,
}

/// Small synced writes into `path` until `stop` or the daemon's death.
fn write_pages(path: &std::path::Path, model: &Mutex<PagedFile>, stop: &AtomicBool) {
    let Ok(f) = std::fs::OpenOptions::new().write(true).open(path) else {
        return;
    };
    let size = model.lock().unwrap().acked.len();
    let mut i = 0u64;
    while !stop.load(Ordering::SeqCst) {
        i += 1;
        let len = [100, 4096, 5000, 9000][i as usize % 4];
        let at = (i.wrapping_mul(2_654_435_761) % (size - len) as u64) as usize;
        let bytes = pattern(7_000_000 + i, len);
        model.lock().unwrap().in_flight = Some((at, len));
        if f.write_all_at(&bytes, at as u64).is_err() || f.sync_data().is_err() {
            return; // the daemon is gone
        }
        let mut m = model.lock().unwrap();
        m.acked[at..at + len].copy_from_slice(&bytes);
        m.in_flight = None;
        m.writes += 1;
    }
}

#[test]
fn fsynced_files_survive_kill_9() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let (data, mp) = (tmp.path().join("data"), tmp.path().join("mnt"));
    let m = DevMount::start(&data, &mp, &["--durability", "nosync"]);
    let root = mp.join("crash");
    std::fs::create_dir(&root).unwrap();
    let files: Arc<Mutex<BTreeMap<String, FileState>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    let paged = root.join("paged.bin");
    let initial = pattern(9, 1 << 20);
    std::fs::write(&paged, &initial).unwrap();
    std::fs::File::open(&paged).unwrap().sync_all().unwrap();
    let pages = Arc::new(Mutex::new(PagedFile {
        acked: initial,
        ..Default::default()
    }));
    {
        let (pages, stop, paged) = (pages.clone(), stop.clone(), paged.clone());
        threads.push(std::thread::spawn(move || {
            write_pages(&paged, &pages, &stop)
        }));
    }
    for t in 0..3u64 {
        let (files, stop, root) = (files.clone(), stop.clone(), root.clone());
        threads.push(std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::SeqCst) {
                i += 1;
                // Reuse names so that synced files are also overwritten later.
                let name = format!("t{t}_{}", i % 40);
                let len = ((i * 7919 + t * 104_729) % 700_000) as usize;
                let content = pattern(t * 1_000_000 + i, len);
                files
                    .lock()
                    .unwrap()
                    .insert(name.clone(), FileState::Unknown);
                let r = (|| -> std::io::Result<()> {
                    let mut f = std::fs::File::create(root.join(&name))?;
                    f.write_all(&content)?;
                    if !i.is_multiple_of(3) {
                        f.sync_all()?;
                    }
                    Ok(())
                })();
                match r {
                    Ok(()) if !i.is_multiple_of(3) => {
                        files
                            .lock()
                            .unwrap()
                            .insert(name, FileState::Synced(content));
                    }
                    Ok(()) => {}
                    Err(_) => return, // the daemon is gone
                }
            }
        }));
    }
    std::thread::sleep(Duration::from_millis(2500));
    m.kill();
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().unwrap();
    }
    let snapshot = files.lock().unwrap().clone();
    let synced: Vec<_> = snapshot
        .iter()
        .filter_map(|(n, s)| match s {
            FileState::Synced(c) => Some((n, c)),
            FileState::Unknown => None,
        })
        .collect();
    assert!(
        synced.len() >= 5,
        "workload too short: {} synced files",
        synced.len()
    );
    let m = DevMount::start(&data, &mp, &["--durability", "nosync"]);
    for (name, content) in &synced {
        let got = std::fs::read(root.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_bytes(&got, content, name);
    }
    let p = pages.lock().unwrap();
    assert!(
        p.writes >= 5,
        "workload too short: {} synced page writes",
        p.writes
    );
    let mut got = std::fs::read(&paged).unwrap();
    let mut want = p.acked.clone();
    assert_eq!(got.len(), want.len(), "paged.bin keeps its size");
    if let Some((at, len)) = p.in_flight {
        // Old or new bytes, or some of each: not compared.
        got[at..at + len].fill(0);
        want[at..at + len].fill(0);
    }
    assert_bytes(
        &got,
        &want,
        "paged.bin after its acknowledged synced writes",
    );
    println!("paged.bin: {} synced small writes, all found", p.writes);
    // The recovered tree is usable: write, read back, list.
    std::fs::write(root.join("after"), b"ok").unwrap();
    assert_eq!(std::fs::read(root.join("after")).unwrap(), b"ok");
    assert!(std::fs::read_dir(&root).unwrap().count() >= synced.len());
    m.stop();
}

#[test]
fn a_killed_daemon_is_seen_as_stale_even_with_the_roots_attributes_cached() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let (data, mp) = (tmp.path().join("data"), tmp.path().join("mnt"));
    let mut m = DevMount::start(&data, &mp, &[]);
    assert!(
        !basalt_fusefs::is_stale_mount(&mp),
        "a live mount is not stale"
    );
    // A stat of the root caches its attributes in the kernel.
    assert_eq!(std::fs::metadata(&mp).unwrap().ino(), 1);
    m.kill_only();
    assert!(
        common::is_mounted(&mp),
        "the dead mount is still in the mount table"
    );
    // The kernel answers `stat` of the root from its cache (30 s attribute timeout)...
    let cached = std::fs::metadata(&mp).map(|m| m.ino());
    println!("stat of the dead mount's root: {cached:?}");
    // ...so staleness must not depend on it.
    assert!(
        basalt_fusefs::is_stale_mount(&mp),
        "dead daemon not detected"
    );
    basalt_fusefs::force_unmount(&mp).unwrap();
    assert!(!common::is_mounted(&mp));
}

/// `chmod`, `chown` and `utimensat` of a file whose data is clean are committed at
/// once (not left to the file's next flush: that made a source-tree untar slower), and
/// an fsync of another file makes them durable: after `kill -9` and a remount the file
/// has them.
#[test]
fn attribute_changes_before_an_fsync_of_another_file_survive_kill_9() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let (data, mp) = (tmp.path().join("data"), tmp.path().join("mnt"));
    // The flusher must not be what commits them.
    let m = DevMount::start(&data, &mp, &["-o", "flush_interval_ms=3600000"]);
    std::fs::create_dir(mp.join("c")).unwrap();
    let (a, b) = (mp.join("c/a"), mp.join("c/b"));
    std::fs::write(&a, b"its attributes change").unwrap();
    std::fs::write(&b, b"fsynced").unwrap();
    let t = std::time::Instant::now();
    while common::stats(&mp)["filesystem"]["dirty_inodes"] != 0 {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "never clean after the closes"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let commits = || common::stats(&mp)["engine"]["commits"].as_u64().unwrap();
    let before = commits();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&a, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&a, Some(1234), Some(5678)).unwrap();
    let path = std::ffi::CString::new(a.as_os_str().as_encoded_bytes()).unwrap();
    let times = [
        libc::timespec {
            tv_sec: 1_000_000_000,
            tv_nsec: 0,
        },
        libc::timespec {
            tv_sec: 1_000_000_000,
            tv_nsec: 0,
        },
    ];
    assert_eq!(
        unsafe { libc::utimensat(libc::AT_FDCWD, path.as_ptr(), times.as_ptr(), 0) },
        0
    );
    let after = commits();
    assert!(
        after >= before + 3,
        "chmod, chown and utimensat: one engine commit each, at once ({before} -> {after})"
    );
    std::fs::OpenOptions::new()
        .write(true)
        .open(&b)
        .unwrap()
        .sync_all()
        .unwrap();
    assert!(commits() > before, "the fsync committed nothing");
    m.kill();
    let m = DevMount::start(&data, &mp, &[]);
    let meta = std::fs::metadata(&a).unwrap();
    assert_eq!(
        (meta.mode() & 0o7777, meta.uid(), meta.gid(), meta.mtime()),
        (0o600, 1234, 5678, 1_000_000_000),
        "attributes of c/a after kill -9 and a remount"
    );
    assert_eq!(std::fs::read(&a).unwrap(), b"its attributes change");
    m.stop();
}

/// A file unlinked while open keeps its records until its last close; if the daemon
/// dies before that, the next mount finds an inode record no name refers to and
/// deletes it with the file's chunks and patches (a chunked file and an inline one).
#[test]
fn files_unlinked_while_open_when_the_daemon_died_are_purged_at_the_next_mount() {
    require_fuse!();
    let (_tmp, data, mp) = common::data_and_mountpoint();
    let chunk = basalt_fusefs::DEFAULT_CHUNK_SIZE;
    let m = DevMount::start(&data, &mp, &[]);
    let c = mp.join("c");
    std::fs::create_dir(&c).unwrap();
    std::fs::write(c.join("kept"), pattern(1, 100)).unwrap();
    let mut held = Vec::new();
    for (name, len) in [("chunked", 3 * chunk + 5), ("inline", 4096)] {
        let mut f = std::fs::File::create(c.join(name)).unwrap();
        f.write_all(&pattern(2, len)).unwrap();
        f.sync_all().unwrap();
        held.push(f);
    }
    std::fs::remove_file(c.join("chunked")).unwrap();
    std::fs::remove_file(c.join("inline")).unwrap();
    // The unlinks are made durable by syncing another file; the files stay open.
    std::fs::File::open(c.join("kept"))
        .unwrap()
        .sync_all()
        .unwrap();
    m.kill();
    drop(held);
    // Inode records of the root, `kept` and the two unlinked files; the chunked file's
    // 4 chunks and the inline one's data, moved to a chunk when its last name went.
    let db = common::open_db(&data);
    let stored = common::metadata_keys(&db, "c");
    assert_eq!(
        stored.len(),
        9,
        "records after the kill (the unlinked files' must be there to purge): {stored:?}"
    );
    let h = basalt_fusefs::mount(db.clone(), common::mount_config(&mp)).unwrap();
    let names: Vec<String> = std::fs::read_dir(&c)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["kept"]);
    assert_bytes(
        &std::fs::read(c.join("kept")).unwrap(),
        &pattern(1, 100),
        "kept",
    );
    h.unmount().unwrap();
    let left = common::metadata_keys(&db, "c");
    assert_eq!(
        left.len(),
        2,
        "the collection root's and kept's inode records only: {left:?}"
    );
}

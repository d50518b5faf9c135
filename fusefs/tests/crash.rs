//! Kill the daemon (`kill -9`) during a write-heavy workload, clear the dead mount,
//! remount, and check that every file whose last change was fsync'ed is intact.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
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

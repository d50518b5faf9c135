//! The tree snapshot written at clean unmount: it holds exactly the records a mount
//! would read from the engine, a mount of the unchanged engine builds the same tree
//! from it, and a snapshot of an engine that changed since (a write while unmounted,
//! a killed daemon's writes) or a damaged one is not used.

mod common;

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use basalt_fusefs::{
    mount, verify_tree_snapshot, write_document, TreeSnapshotVerdict as Verdict, TREE_SNAPSHOT_AUX,
};
use common::{
    data_and_mountpoint, differ, mount_config as cfg, open_db, pattern, set_xattr, stats, tree,
    DevMount, TreeView,
};

fn aux(data: &Path) -> PathBuf {
    data.join(format!("{TREE_SNAPSHOT_AUX}.aux"))
}

/// Where the mount took its tree from, and why not from the snapshot.
fn loaded_from(mp: &Path) -> (String, Option<String>) {
    let v = &stats(mp)["filesystem"]["tree_loaded_from"];
    (
        v["source"].as_str().unwrap().to_string(),
        v["snapshot_skipped"].as_str().map(str::to_string),
    )
}

/// Mounts `db` at `mp`, which must read the tree from the engine, having refused the
/// snapshot for a reason containing `why`.
#[track_caller]
fn mount_from_engine(db: &basalt_engine::Db, mp: &Path, why: &str) -> basalt_fusefs::MountHandle {
    let h = mount(db.clone(), cfg(mp)).unwrap();
    let (source, skipped) = loaded_from(mp);
    assert_eq!(source, "engine");
    let skipped = skipped.unwrap_or_default();
    assert!(
        skipped.contains(why),
        "skipped because {skipped:?}, not {why:?}"
    );
    h
}

fn none() -> Vec<String> {
    Vec::new()
}

/// Every kind of thing a tree holds: inline, chunked and patched files, hard links,
/// symlinks, a FIFO, xattrs, modes, renamed files and directories, a file cut back to
/// inline, an empty file, an empty and a renamed collection, and documents written
/// through the engine API before the mount and during it (small, and large with
/// `write_document`).
fn populate(db: &basalt_engine::Db, mp: &Path) {
    let c = mp.join("c");
    std::fs::create_dir_all(c.join("d/e")).unwrap();
    std::fs::write(c.join("d/a"), pattern(1, 100)).unwrap();
    let chunk = basalt_fusefs::DEFAULT_CHUNK_SIZE;
    std::fs::write(c.join("big"), pattern(2, 3 * chunk + 5)).unwrap();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(c.join("big"))
        .unwrap();
    f.sync_all().unwrap();
    f.write_all_at(&pattern(3, 4096), (chunk + 4096) as u64)
        .unwrap();
    f.sync_data().unwrap(); // a patch
    drop(f);
    std::fs::hard_link(c.join("big"), c.join("d/e/big2")).unwrap();
    std::os::unix::fs::symlink("../big", c.join("d/link")).unwrap();
    let fifo = CString::new(c.join("fifo").as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o640) }, 0);
    set_xattr(&c.join("d/a"), "user.colour", b"blue");
    set_xattr(&c.join("d"), "user.dir", b"1");
    std::fs::set_permissions(c.join("d/a"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(c.join("cut"), pattern(4, 2 * chunk)).unwrap();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(c.join("cut"))
        .unwrap();
    f.set_len(100).unwrap();
    drop(f);
    std::fs::write(c.join("empty"), b"").unwrap();
    std::fs::write(c.join("gone"), b"deleted").unwrap();
    std::fs::remove_file(c.join("gone")).unwrap();
    std::fs::rename(c.join("d/e"), c.join("d/moved")).unwrap();
    std::fs::rename(c.join("d/a"), c.join("d/renamed")).unwrap();
    std::fs::create_dir(mp.join("empty-coll")).unwrap();
    std::fs::create_dir(mp.join("old-name")).unwrap();
    std::fs::write(mp.join("old-name/x"), b"x").unwrap();
    std::fs::rename(mp.join("old-name"), mp.join("new-name")).unwrap();
    db.put("c", b"d/api.txt", b"through the engine").unwrap();
    write_document(db, "c", "d/api-large.bin", &mut &pattern(5, 150_000)[..]).unwrap();
    // Taken in by the next request, as every engine-API write while mounted.
    assert!(c.join("d/api-large.bin").exists());
}

/// A clean unmount writes the snapshot; it equals what the engine holds, a mount from
/// it shows the same tree as a mount that reads the engine (snapshot removed), and the
/// tree is the one the first mount showed.
#[test]
fn a_clean_unmount_saves_the_records_a_mount_would_read() {
    require_fuse!();
    let (_tmp, data, mp) = data_and_mountpoint();
    let db = open_db(&data);
    let api = db.collection_or_create("api").unwrap();
    api.put(b"notes/small.txt", b"before any mount").unwrap();
    write_document(&db, "api", "large.bin", &mut &pattern(6, 200_000)[..]).unwrap();
    api.put(b"no//path", b"a key that is no path").unwrap();
    let h = mount(db.clone(), cfg(&mp)).unwrap();
    assert_eq!(
        loaded_from(&mp),
        ("engine".to_string(), None),
        "first mount"
    );
    populate(&db, &mp);
    let shown = tree(&mp, TreeView::Everything);
    h.unmount().unwrap();
    assert!(aux(&data).exists(), "no snapshot after a clean unmount");
    let verdict = verify_tree_snapshot(&db).unwrap();
    assert_eq!(
        verdict,
        Verdict::Current(db.last_seqno()),
        "at the engine's seqno"
    );

    let h = mount(db.clone(), cfg(&mp)).unwrap();
    assert_eq!(loaded_from(&mp), ("snapshot".to_string(), None));
    let from_snapshot = tree(&mp, TreeView::Everything);
    h.unmount().unwrap();
    std::fs::remove_file(aux(&data)).unwrap();
    let h = mount(db.clone(), cfg(&mp)).unwrap();
    assert_eq!(loaded_from(&mp), ("engine".to_string(), None));
    let from_engine = tree(&mp, TreeView::Everything);
    h.unmount().unwrap();
    // Directories implied by engine-API documents (no records) take each mount's time.
    let implied = |mut t: BTreeMap<String, String>| {
        for d in ["api", "api/notes"] {
            let line = t.get_mut(d).unwrap();
            *line = line.split(" mtime").next().unwrap().to_string();
        }
        t
    };
    let (from_snapshot, from_engine) = (implied(from_snapshot), implied(from_engine));
    assert_eq!(
        differ(&from_snapshot, &from_engine),
        none(),
        "snapshot / engine"
    );
    // What the first mount showed, but times (the kernel's cached times of files
    // written under the writeback cache are not always the daemon's).
    let untimed = |t: &BTreeMap<String, String>| -> BTreeMap<String, String> {
        let cut = |l: &String| {
            let (a, rest) = l.split_once(" mtime").unwrap_or((l, ""));
            let b = rest.split_once(" ctime ").map_or("", |(_, r)| r);
            format!("{a} {}", b.split_once(' ').map_or("", |(_, r)| r))
        };
        t.iter().map(|(k, l)| (k.clone(), cut(l))).collect()
    };
    let shown = implied(shown);
    assert_eq!(
        differ(&untimed(&shown), &untimed(&from_engine)),
        none(),
        "first mount / remount"
    );
    // A tree loaded from the snapshot works: write, delete, unmount, a current snapshot.
    let h = mount(db.clone(), cfg(&mp)).unwrap();
    assert_eq!(loaded_from(&mp).0, "snapshot");
    std::fs::write(mp.join("c/after"), b"after").unwrap();
    std::fs::remove_file(mp.join("c/d/renamed")).unwrap();
    h.unmount().unwrap();
    assert!(matches!(verify_tree_snapshot(&db), Ok(Verdict::Current(_))));
    let h = mount(db.clone(), cfg(&mp)).unwrap();
    assert_eq!(std::fs::read(mp.join("c/after")).unwrap(), b"after");
    assert!(!mp.join("c/d/renamed").exists());
    h.unmount().unwrap();
    for p in [
        "c/big",
        "c/d/moved/big2",
        "c/d/api-large.bin",
        "api/large.bin",
    ] {
        assert!(from_engine.contains_key(p), "{p} missing");
    }
}

/// A snapshot of an engine that changed after it (a write while unmounted, a killed
/// daemon's writes), a damaged one and a cut one are not used, saying why; the tree
/// then comes from the engine and shows the change.
#[test]
fn a_stale_or_damaged_snapshot_is_not_used() {
    require_fuse!();
    let (_tmp, data, mp) = data_and_mountpoint();
    let db = open_db(&data);
    let h = mount(db.clone(), cfg(&mp)).unwrap();
    std::fs::create_dir(mp.join("c")).unwrap();
    std::fs::write(mp.join("c/first"), b"1").unwrap();
    h.unmount().unwrap();
    assert!(matches!(verify_tree_snapshot(&db), Ok(Verdict::Current(_))));

    db.put("c", b"while-unmounted", b"2").unwrap();
    let verdict = verify_tree_snapshot(&db).unwrap();
    assert!(
        matches!(&verdict, Verdict::Unused(why) if why.contains("changed since")),
        "{verdict:?}"
    );
    let h = mount_from_engine(&db, &mp, "changed since");
    assert_eq!(std::fs::read(mp.join("c/while-unmounted")).unwrap(), b"2");
    h.unmount().unwrap();
    let good = std::fs::read(aux(&data)).unwrap();

    let mut damaged = good.clone();
    let last = damaged.len() - 1;
    damaged[last] ^= 0x40;
    std::fs::write(aux(&data), &damaged).unwrap();
    let h = mount_from_engine(&db, &mp, "checksum mismatch");
    assert_eq!(std::fs::read(mp.join("c/first")).unwrap(), b"1");
    h.unmount().unwrap();

    std::fs::write(aux(&data), &good[..10]).unwrap();
    let h = mount_from_engine(&db, &mp, "not a tree snapshot");
    h.unmount().unwrap();
    assert!(matches!(verify_tree_snapshot(&db), Ok(Verdict::Current(_))));
    drop(db);

    // A daemon killed after a synced write: its snapshot from the last clean stop is
    // stale, and the write is there.
    let mut m = DevMount::start(&data, &mp, &[]);
    let f = std::fs::File::create(mp.join("c/before-kill")).unwrap();
    f.write_all_at(b"synced", 0).unwrap();
    f.sync_all().unwrap();
    drop(f);
    m.kill_only();
    drop(m);
    let db = open_db(&data);
    let h = mount_from_engine(&db, &mp, "changed since");
    assert_eq!(std::fs::read(mp.join("c/before-kill")).unwrap(), b"synced");
    h.unmount().unwrap();
}

/// A collection named like the `/.basalt` view is hidden by it, not mounted: the
/// snapshot, which lists the mounted collections, is still used next time.
#[test]
fn a_collection_hidden_by_the_view_does_not_make_the_snapshot_stale() {
    require_fuse!();
    let (_tmp, data, mp) = data_and_mountpoint();
    let db = open_db(&data);
    db.create_collection(".basalt").unwrap();
    db.put(".basalt", b"doc", b"kept").unwrap();
    let h = mount(db.clone(), cfg(&mp)).unwrap();
    std::fs::create_dir(mp.join("c")).unwrap();
    std::fs::write(mp.join("c/f"), b"1").unwrap();
    h.unmount().unwrap();
    let verdict = verify_tree_snapshot(&db).unwrap();
    assert!(matches!(verdict, Verdict::Current(_)), "{verdict:?}");

    let h = mount(db.clone(), cfg(&mp)).unwrap();
    assert_eq!(loaded_from(&mp), ("snapshot".to_string(), None));
    assert_eq!(std::fs::read(mp.join("c/f")).unwrap(), b"1");
    assert!(mp.join(".basalt/stats.json").exists());
    h.unmount().unwrap();
    assert_eq!(
        db.get(".basalt", b"doc").unwrap().as_deref(),
        Some(&b"kept"[..])
    );
}

/// Documents written through the engine API while the mount stops: each is a file at
/// the next mount, whether the snapshot was written before the last of them (then it
/// is stale and not used) or after (then it holds them all).
#[test]
fn engine_writes_racing_the_unmount_all_show_after_it() {
    require_fuse!();
    let (_tmp, data, mp) = data_and_mountpoint();
    let db = open_db(&data);
    db.collection_or_create("race").unwrap();
    let mut used = 0;
    for round in 0..6u64 {
        let h = mount(db.clone(), cfg(&mp)).unwrap();
        // Each round writes more documents, a few microseconds apart, from the moment
        // the unmount starts: early rounds end before the tree is saved, later ones
        // go on after it.
        let started = Arc::new(AtomicBool::new(false));
        let writer = {
            let (db, started) = (db.clone(), started.clone());
            std::thread::spawn(move || {
                while !started.load(Ordering::SeqCst) {
                    std::hint::spin_loop();
                }
                let count: u32 = [0, 2, 5, 10, 40, 200][round as usize];
                for n in 0..count {
                    let key = format!("r{round}/doc{n}");
                    db.put("race", key.as_bytes(), &n.to_be_bytes()).unwrap();
                    std::thread::sleep(std::time::Duration::from_micros(50));
                }
                count
            })
        };
        started.store(true, Ordering::SeqCst);
        h.unmount().unwrap();
        let written = writer.join().unwrap();
        let current = matches!(verify_tree_snapshot(&db).unwrap(), Verdict::Current(_));
        used += usize::from(current);
        let h = mount(db.clone(), cfg(&mp)).unwrap();
        let (source, _) = loaded_from(&mp);
        assert_eq!(source == "snapshot", current);
        for n in 0..written {
            let p = mp.join(format!("race/r{round}/doc{n}"));
            assert_eq!(
                std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
                n.to_be_bytes(),
                "round {round} ({source})"
            );
        }
        h.unmount().unwrap();
    }
    eprintln!("snapshots current after a racing unmount: {used} of 6");
}

/// An engine-API writer in a tight loop through the unmount: the unmount ends (the save
/// gives up after eight rounds of taking in new writes, or a second without a pause
/// between them) and the next mount shows every document written, from a current
/// snapshot or from the engine.
#[test]
fn a_busy_engine_api_writer_during_the_unmount_loses_no_document() {
    require_fuse!();
    let (_tmp, data, mp) = data_and_mountpoint();
    let db = open_db(&data);
    db.collection_or_create("busy").unwrap();
    let h = mount(db.clone(), cfg(&mp)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (db, stop) = (db.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u32;
            while !stop.load(Ordering::SeqCst) && n < 50_000 {
                db.put("busy", format!("d{}/k{n}", n % 100).as_bytes(), b"v")
                    .unwrap();
                n += 1;
            }
            n
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(100));
    let t = std::time::Instant::now();
    h.unmount().unwrap();
    let took = t.elapsed();
    stop.store(true, Ordering::SeqCst);
    let written = writer.join().unwrap();
    eprintln!("unmount took {took:?}; {written} documents written meanwhile");
    let h = mount(db.clone(), cfg(&mp)).unwrap();
    let shown: usize = (0..100)
        .map(|d| match std::fs::read_dir(mp.join(format!("busy/d{d}"))) {
            Ok(r) => r.count(),
            Err(_) => 0,
        })
        .sum();
    assert_eq!(
        shown, written as usize,
        "documents shown after the busy unmount"
    );
    h.unmount().unwrap();
}

//! Unmounting while files are open: a file closed a moment after the unmount starts
//! (as when a forked child still holds a copy of its descriptor until it execs) does
//! not make the unmount fail; a mount still in use after a second is refused, and
//! keeps serving.

mod common;

use std::io::Read;

use common::{is_mounted, mounted_with_collection_c, open_db};

#[test]
fn an_unmount_waits_a_moment_for_a_file_closed_just_after_it_starts() {
    require_fuse!();
    let (tmp, mp, h) = mounted_with_collection_c();
    std::fs::write(mp.join("c/f"), b"held").unwrap();
    let f = std::fs::File::open(mp.join("c/f")).unwrap();
    let closer = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(300));
        drop(f);
    });
    h.unmount().unwrap();
    closer.join().unwrap();
    assert!(!is_mounted(&mp));
    let db = open_db(&tmp.path().join("data"));
    assert_eq!(db.get("c", b"f").unwrap().as_deref(), Some(&b"held"[..]));
}

#[test]
fn an_unmount_of_a_mount_still_in_use_is_refused_and_the_mount_keeps_serving() {
    require_fuse!();
    let (_tmp, mp, h) = mounted_with_collection_c();
    std::fs::write(mp.join("c/f"), b"in use").unwrap();
    let mut f = std::fs::File::open(mp.join("c/f")).unwrap();
    let err = h.unmount().unwrap_err().to_string();
    assert!(err.contains("busy"), "{err}");
    let mut got = String::new();
    f.read_to_string(&mut got).unwrap();
    assert_eq!(got, "in use", "read after the refused unmount");
    drop(f);
    basalt_fusefs::force_unmount(&mp).unwrap();
    assert!(!is_mounted(&mp));
}

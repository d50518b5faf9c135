//! Files written through the mount are documents for the engine API (after unmount
//! and remount), and documents written through the engine API are files.

mod common;

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use basalt_fusefs::{mount, write_document, DocumentReader};
use common::{assert_bytes, below, data_and_mountpoint, mount_config as cfg, open_db, pattern};

/// The names in directory `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

/// Truncates the file at `p` to `len` bytes (open, `ftruncate`, close).
fn shrink(p: &Path, len: u64) {
    let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
    f.set_len(len).unwrap();
}

fn doc(db: &basalt_engine::Db, coll: &str, key: &str) -> Vec<u8> {
    let mut r = DocumentReader::open(db, coll, key).unwrap();
    let mut v = Vec::new();
    r.read_to_end(&mut v).unwrap();
    assert_eq!(v.len() as u64, r.len());
    v
}

/// Inside the third chunk of `big.bin`, across no chunk boundary.
const PATCH_AT: usize = 2 * basalt_fusefs::DEFAULT_CHUNK_SIZE + 1000;

#[test]
fn mount_writes_are_engine_documents() {
    require_fuse!();
    let (_tmp, data, mp) = data_and_mountpoint();
    let small = b"hello basalt\n".to_vec();
    let big = pattern(1, 3 * basalt_fusefs::DEFAULT_CHUNK_SIZE + 12345);
    let mut sparse = vec![0u8; 5 << 20];
    sparse[(4 << 20)..(4 << 20) + 4].copy_from_slice(b"tail");
    {
        let h = mount(open_db(&data), cfg(&mp)).unwrap();
        let c = mp.join("users");
        std::fs::create_dir(&c).unwrap();
        std::fs::create_dir_all(c.join("a/b")).unwrap();
        std::fs::write(c.join("a/b/small.txt"), &small).unwrap();
        std::fs::write(c.join("big.bin"), &big).unwrap();
        // Random overwrite inside the large file.
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(c.join("big.bin"))
            .unwrap();
        f.write_all_at(b"PATCH", PATCH_AT as u64).unwrap();
        drop(f);
        // Sparse file: a hole then four bytes.
        let mut f = std::fs::File::create(c.join("sparse")).unwrap();
        f.seek(SeekFrom::Start(4 << 20)).unwrap();
        f.write_all(b"tail").unwrap();
        f.set_len(5 << 20).unwrap();
        drop(f);
        // Grow then shrink back below a chunk: stored inline again.
        std::fs::write(c.join("shrunk"), pattern(2, 1 << 20)).unwrap();
        shrink(&c.join("shrunk"), 100);
        std::fs::hard_link(c.join("big.bin"), c.join("a/link.bin")).unwrap();
        std::os::unix::fs::symlink("a/b/small.txt", c.join("sym")).unwrap();
        std::fs::set_permissions(
            c.join("a/b/small.txt"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        std::fs::rename(c.join("a/b"), c.join("moved")).unwrap();
        assert_eq!(std::fs::read(c.join("moved/small.txt")).unwrap(), small);
        h.unmount().unwrap();
    }
    let mut big_patched = big.clone();
    big_patched[PATCH_AT..PATCH_AT + 5].copy_from_slice(b"PATCH");
    {
        let db = open_db(&data);
        assert_eq!(doc(&db, "users", "moved/small.txt"), small);
        assert_bytes(&doc(&db, "users", "big.bin"), &big_patched, "big.bin");
        assert_bytes(&doc(&db, "users", "a/link.bin"), &big_patched, "link.bin");
        assert_bytes(&doc(&db, "users", "sparse"), &sparse, "sparse");
        let shrunk = pattern(2, 1 << 20)[..100].to_vec();
        assert_eq!(doc(&db, "users", "shrunk"), shrunk);
        // A small file is one plain record.
        let coll = db.collection("users").unwrap();
        assert_eq!(coll.get(b"moved/small.txt").unwrap().unwrap(), small);
        assert_eq!(coll.get(b"shrunk").unwrap().unwrap(), shrunk);
        assert!(coll.get(b"a/b/small.txt").unwrap().is_none());
    }
    // Remount: attributes, links and content survive.
    let h = mount(open_db(&data), cfg(&mp)).unwrap();
    let c = mp.join("users");
    let m = std::fs::metadata(c.join("moved/small.txt")).unwrap();
    assert_eq!(m.mode() & 0o7777, 0o600);
    assert_bytes(
        &std::fs::read(c.join("a/link.bin")).unwrap(),
        &big_patched,
        "link via fs",
    );
    let (m1, m2) = (
        std::fs::metadata(c.join("big.bin")).unwrap(),
        std::fs::metadata(c.join("a/link.bin")).unwrap(),
    );
    assert_eq!((m1.ino(), m1.nlink()), (m2.ino(), 2));
    assert_eq!(
        std::fs::read_link(c.join("sym")).unwrap(),
        Path::new("a/b/small.txt")
    );
    assert_bytes(
        &std::fs::read(c.join("sparse")).unwrap(),
        &sparse,
        "sparse via fs",
    );
    h.unmount().unwrap();
}

#[test]
fn engine_documents_are_files() {
    require_fuse!();
    let (_tmp, data, mp) = data_and_mountpoint();
    let big = pattern(3, 2 * basalt_fusefs::DEFAULT_CHUNK_SIZE + 7);
    {
        let db = open_db(&data);
        let c = db.create_collection("orders").unwrap();
        c.put(b"2024/01/o1.json", b"{\"id\":1}").unwrap();
        c.put(b"top", b"x").unwrap();
        c.put(b"bad//key", b"not a path").unwrap();
        write_document(&db, "orders", "2024/big.bin", &mut &big[..]).unwrap();
        write_document(&db, "orders", "small.txt", &mut &b"small"[..]).unwrap();
        db.close().unwrap();
    }
    {
        let h = mount(open_db(&data), cfg(&mp)).unwrap();
        let c = mp.join("orders");
        assert_eq!(
            std::fs::read(c.join("2024/01/o1.json")).unwrap(),
            b"{\"id\":1}"
        );
        assert_bytes(
            &std::fs::read(c.join("2024/big.bin")).unwrap(),
            &big,
            "big via fs",
        );
        assert_eq!(std::fs::read(c.join("small.txt")).unwrap(), b"small");
        assert_eq!(names(&c), ["2024", "small.txt", "top"]);
        // Change through the mount, then read through the engine.
        std::fs::write(c.join("top"), b"changed").unwrap();
        std::fs::remove_file(c.join("2024/01/o1.json")).unwrap();
        let feed = std::fs::read_to_string(mp.join(".basalt/changes/orders")).unwrap();
        assert!(feed.lines().any(|l| l.contains("\"top\"")), "{feed}");
        let stats = std::fs::read_to_string(mp.join(".basalt/stats.json")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&stats).unwrap();
        assert!(v["filesystem"]["files"].as_u64().unwrap() >= 3);
        h.unmount().unwrap();
    }
    let db = open_db(&data);
    let c = db.collection("orders").unwrap();
    assert_eq!(c.get(b"top").unwrap().unwrap(), b"changed");
    assert!(c.get(b"2024/01/o1.json").unwrap().is_none());
    assert_bytes(&doc(&db, "orders", "2024/big.bin"), &big, "big via engine");
}

#[test]
fn collections_are_root_directories() {
    require_fuse!();
    let (_tmp, data, mp) = data_and_mountpoint();
    let db = open_db(&data);
    let h = mount(db.clone(), cfg(&mp)).unwrap();
    std::fs::create_dir(mp.join("a")).unwrap();
    std::fs::write(mp.join("a/f"), b"1").unwrap();
    std::fs::rename(mp.join("a"), mp.join("b")).unwrap();
    assert_eq!(std::fs::read(mp.join("b/f")).unwrap(), b"1");
    assert_eq!(db.list_collections(), ["b"]);
    let e = std::fs::remove_dir(mp.join("b")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOTEMPTY));
    std::fs::remove_file(mp.join("b/f")).unwrap();
    std::fs::remove_dir(mp.join("b")).unwrap();
    assert!(db.list_collections().is_empty());
    // Files at the root and writes into /.basalt are refused.
    assert!(std::fs::write(mp.join("file"), b"x").is_err());
    assert!(std::fs::write(mp.join(".basalt/stats.json"), b"x").is_err());
    // Over-long names and keys map to ENAMETOOLONG.
    std::fs::create_dir(mp.join("c")).unwrap();
    let long = "x".repeat(256);
    let e = std::fs::write(mp.join("c").join(long), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENAMETOOLONG));
    let health = std::fs::read_to_string(mp.join(".basalt/health.json")).unwrap();
    assert!(health.contains("unknown"));
    h.unmount().unwrap();
}

/// A collection whose directory looks empty but holds documents the mount does not
/// show is not dropped by `rmdir` or by a rename onto it: documents whose keys are no
/// paths (binary keys, as the health history's in `.monitoring`) and documents written
/// through the engine API after the mount. Such keys cost one log line per collection
/// at mount, not one per document.
#[test]
fn collections_holding_unshown_documents_are_not_removed() {
    require_fuse!();
    let (_tmp, data, mp) = data_and_mountpoint();
    {
        let db = open_db(&data);
        let c = db.create_collection("samples").unwrap();
        for i in 0..500u32 {
            let mut key = b"nvme0\0temperature\0r".to_vec();
            key.extend_from_slice(&i.to_be_bytes());
            c.put(&key, &f64::from(i).to_le_bytes()).unwrap();
        }
        c.put(b"bad//key", b"not a path").unwrap();
        db.create_collection("later").unwrap();
        db.close().unwrap();
    }
    let m = common::DevMount::start_logged(&data, &mp, &[]);
    let log = m.stop_with_stderr();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("samples")).collect();
    assert_eq!(lines.len(), 1, "one line for the collection: {log}");
    assert!(lines[0].contains("501 document(s)"), "{log}");

    let db = open_db(&data);
    let h = mount(db.clone(), cfg(&mp)).unwrap();
    assert_eq!(std::fs::read_dir(mp.join("samples")).unwrap().count(), 0);
    let e = std::fs::remove_dir(mp.join("samples")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOTEMPTY), "rmdir samples");
    std::fs::create_dir(mp.join("fresh")).unwrap();
    let e = std::fs::rename(mp.join("fresh"), mp.join("samples")).unwrap_err();
    assert_eq!(
        e.raw_os_error(),
        Some(libc::ENOTEMPTY),
        "rename onto samples"
    );
    // Written through the engine API while mounted: not shown yet, but kept.
    db.put("later", b"report.txt", b"kept").unwrap();
    let e = std::fs::remove_dir(mp.join("later")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOTEMPTY), "rmdir later");
    // A collection that is really empty still goes.
    std::fs::remove_dir(mp.join("fresh")).unwrap();
    h.unmount().unwrap();
    assert_eq!(db.list_collections(), ["later", "samples"]);
    assert_eq!(db.get("later", b"report.txt").unwrap().unwrap(), b"kept");
    let docs = db.collection("samples").unwrap();
    assert_eq!(
        docs.scan_prefix(b"", basalt_engine::Direction::Forward)
            .unwrap()
            .count(),
        501
    );
}

/// Polls until `f` holds (the kernel may serve cached attributes and pages until the
/// mount's flusher takes the engine write in and tells it to forget them: under a
/// second; gives up after 10 s).
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let t = std::time::Instant::now();
    while !f() {
        assert!(t.elapsed().as_secs() < 10, "never happened: {what}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Documents written through the engine API while mounted (by code in the same
/// process) are files at once: new ones with the directories their paths imply,
/// replaced ones with their new content (also over a file the mount created, and as a
/// large chunked document), deleted ones gone; one whose path a directory holds is not
/// shown. A remount shows the same tree.
#[test]
fn engine_api_writes_while_mounted_are_files_at_once() {
    require_fuse!();
    let (_tmp, data, mp) = data_and_mountpoint();
    let db = open_db(&data);
    let h = mount(db.clone(), cfg(&mp)).unwrap();
    let c = mp.join("live");
    std::fs::create_dir(&c).unwrap();
    std::fs::write(c.join("mine.txt"), b"from the mount").unwrap();
    std::fs::create_dir(c.join("d")).unwrap();
    assert_eq!(
        std::fs::read(c.join("mine.txt")).unwrap(),
        b"from the mount"
    );
    let big = pattern(9, 3 * basalt_fusefs::DEFAULT_CHUNK_SIZE + 11);
    write_document(&db, "live", "a/big.bin", &mut &big[..]).unwrap();
    eventually("a/big.bin", || {
        std::fs::read(c.join("a/big.bin")).is_ok_and(|v| v == big)
    });

    db.put("live", b"a/b/new.txt", b"hello").unwrap();
    assert_eq!(names(&c), ["a", "d", "mine.txt"]);
    assert_eq!(std::fs::read(c.join("a/b/new.txt")).unwrap(), b"hello");
    assert_eq!(std::fs::metadata(c.join("a/b/new.txt")).unwrap().len(), 5);

    db.put("live", b"a/b/new.txt", b"hello, world").unwrap();
    eventually("new content of a/b/new.txt", || {
        std::fs::read(c.join("a/b/new.txt")).unwrap() == b"hello, world"
    });
    db.put("live", b"mine.txt", b"replaced through the engine")
        .unwrap();
    eventually("mine.txt replaced", || {
        std::fs::read(c.join("mine.txt")).unwrap() == b"replaced through the engine"
    });
    db.put("live", b"d", b"a directory holds this path")
        .unwrap();
    db.delete("live", b"a/b/new.txt").unwrap();
    eventually("a/b/new.txt deleted", || !c.join("a/b/new.txt").exists());
    assert!(c.join("d").is_dir());
    assert_eq!(names(&c.join("a")), ["b", "big.bin"]);
    // The mount's own writes still work on the files it took in.
    std::fs::write(c.join("a/big.bin"), b"small now").unwrap();
    h.unmount().unwrap();

    let h = mount(db.clone(), cfg(&mp)).unwrap();
    assert_eq!(names(&c), ["a", "d", "mine.txt"]);
    assert_eq!(
        std::fs::read(c.join("mine.txt")).unwrap(),
        b"replaced through the engine"
    );
    assert_eq!(std::fs::read(c.join("a/big.bin")).unwrap(), b"small now");
    assert!(!c.join("a/b/new.txt").exists());
    h.unmount().unwrap();
    assert_eq!(doc(&db, "live", "a/big.bin"), b"small now");
}

/// `renameat2(RENAME_EXCHANGE)` on `a` and `b`.
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    common::rename2(a, b, libc::RENAME_EXCHANGE)
}

/// The errno of a call that must fail.
fn errno(r: std::io::Result<()>) -> Option<i32> {
    r.unwrap_err().raw_os_error()
}

/// `RENAME_EXCHANGE` swaps two entries atomically, of the same or different kinds,
/// in one directory or across two: names, inodes and, for the engine, the documents
/// under both (a moved directory takes its files' documents to their new paths).
/// Swapping a directory into itself is EINVAL, a missing entry ENOENT.
#[test]
fn rename_exchange_swaps_entries_and_their_documents() {
    require_fuse!();
    let (_tmp, data, mp) = data_and_mountpoint();
    let db = open_db(&data);
    let h = mount(db.clone(), cfg(&mp)).unwrap();
    let c = mp.join("x");
    std::fs::create_dir_all(c.join("dir/sub")).unwrap();
    std::fs::create_dir(c.join("other")).unwrap();
    std::fs::write(c.join("a"), b"file a").unwrap();
    std::fs::write(c.join("b"), b"file b, longer").unwrap();
    std::fs::write(c.join("dir/sub/deep"), b"deep").unwrap();
    std::fs::write(c.join("other/f"), b"other f").unwrap();
    let big = pattern(3, 2 * basalt_fusefs::DEFAULT_CHUNK_SIZE + 5);
    std::fs::write(c.join("dir/big"), &big).unwrap();
    let ino = |p: &str| std::fs::metadata(c.join(p)).unwrap().ino();
    let (ia, ib, idir, iof) = (ino("a"), ino("b"), ino("dir"), ino("other/f"));

    exchange(&c.join("a"), &c.join("b")).unwrap();
    assert_eq!(std::fs::read(c.join("a")).unwrap(), b"file b, longer");
    assert_eq!(std::fs::read(c.join("b")).unwrap(), b"file a");
    assert_eq!((ino("a"), ino("b")), (ib, ia));

    // A directory and a file in another directory.
    exchange(&c.join("dir"), &c.join("other/f")).unwrap();
    assert_eq!(std::fs::read(c.join("dir")).unwrap(), b"other f");
    assert_eq!(ino("dir"), iof);
    assert_eq!(ino("other/f"), idir);
    assert_eq!(std::fs::read(c.join("other/f/sub/deep")).unwrap(), b"deep");
    assert_bytes(
        &std::fs::read(c.join("other/f/big")).unwrap(),
        &big,
        "moved big",
    );
    assert_eq!(std::fs::metadata(c.join("other")).unwrap().nlink(), 3);

    assert_eq!(
        errno(exchange(&c.join("other"), &c.join("other/f/sub"))),
        Some(libc::EINVAL)
    );
    assert_eq!(
        errno(exchange(&c.join("a"), &c.join("missing"))),
        Some(libc::ENOENT)
    );
    h.unmount().unwrap();

    for (key, want) in [
        ("a", &b"file b, longer"[..]),
        ("b", b"file a"),
        ("dir", b"other f"),
        ("other/f/sub/deep", b"deep"),
    ] {
        assert_eq!(doc(&db, "x", key), want, "{key}");
    }
    assert_bytes(&doc(&db, "x", "other/f/big"), &big, "big by the engine");
    assert!(db.get("x", b"dir/sub/deep").unwrap().is_none());
    assert!(
        db.get("x", b"other/f").unwrap().is_none(),
        "a directory now"
    );
    let h = mount(db.clone(), cfg(&mp)).unwrap();
    assert_eq!(names(&c), ["a", "b", "dir", "other"]);
    assert_eq!(names(&c.join("other/f")), ["big", "sub"]);
    assert_eq!(std::fs::read(c.join("dir")).unwrap(), b"other f");
    h.unmount().unwrap();
}

/// `RENAME_EXCHANGE` of two collections swaps them whole: names, inodes, files (an
/// unflushed write included) and, for the engine, the documents under each name; it
/// holds after a remount. A collection exchanged with a directory inside a collection
/// is EXDEV, with a missing name ENOENT, with `.basalt` EROFS.
#[test]
fn rename_exchange_of_two_collections_swaps_them_whole() {
    require_fuse!();
    let (_tmp, data, mp) = data_and_mountpoint();
    let db = open_db(&data);
    let h = mount(db.clone(), cfg(&mp)).unwrap();
    for (c, f) in [("p", "only-in-p"), ("q", "only-in-q")] {
        std::fs::create_dir_all(mp.join(c).join("sub")).unwrap();
        std::fs::write(mp.join(c).join("f"), c).unwrap();
        std::fs::write(mp.join(c).join("sub").join(f), f).unwrap();
    }
    let mut open = std::fs::OpenOptions::new()
        .write(true)
        .open(mp.join("p/f"))
        .unwrap();
    open.write_all(b"p, rewritten before the exchange").unwrap();
    let ino = |p: &str| std::fs::metadata(mp.join(p)).unwrap().ino();
    let (ip, iq) = (ino("p"), ino("q"));

    exchange(&mp.join("p"), &mp.join("q")).unwrap();
    assert_eq!((ino("p"), ino("q")), (iq, ip));
    assert_eq!(std::fs::read(mp.join("p/f")).unwrap(), b"q");
    assert_eq!(
        std::fs::read(mp.join("q/f")).unwrap(),
        b"p, rewritten before the exchange"
    );
    assert_eq!(names(&mp.join("p/sub")), ["only-in-q"]);
    assert_eq!(names(&mp.join("q/sub")), ["only-in-p"]);
    // The open file writes on into its collection, now named q.
    open.write_all(b", and after").unwrap();
    drop(open);
    assert_eq!(
        std::fs::read(mp.join("q/f")).unwrap(),
        b"p, rewritten before the exchange, and after"
    );
    assert_eq!(
        errno(exchange(&mp.join("p"), &mp.join("q/sub"))),
        Some(libc::EXDEV)
    );
    assert_eq!(
        errno(exchange(&mp.join("p"), &mp.join("missing"))),
        Some(libc::ENOENT)
    );
    assert_eq!(
        errno(exchange(&mp.join("p"), &mp.join(".basalt"))),
        Some(libc::EROFS)
    );
    h.unmount().unwrap();

    assert_eq!(db.list_collections(), ["p", "q"]);
    for (c, key, want) in [
        ("p", "f", &b"q"[..]),
        ("p", "sub/only-in-q", b"only-in-q"),
        ("q", "f", b"p, rewritten before the exchange, and after"),
        ("q", "sub/only-in-p", b"only-in-p"),
    ] {
        assert_eq!(doc(&db, c, key), want, "{c}/{key}");
    }
    let h = mount(db.clone(), cfg(&mp)).unwrap();
    assert_eq!(std::fs::read(mp.join("p/f")).unwrap(), b"q");
    assert_eq!(names(&mp.join("q/sub")), ["only-in-p"]);
    h.unmount().unwrap();
}

/// Collections created, renamed (also two swapping names) and dropped through the
/// engine API while mounted show in the root at once; a renamed collection keeps its
/// files (and takes in a document written under its old name) and an open file in it
/// stays usable; a dropped one's files go, its unflushed
/// writes with it (nothing brings the collection back), and a remount shows the same.
#[test]
fn engine_api_collection_changes_while_mounted_show_at_once() {
    require_fuse!();
    let (_tmp, data, mp) = data_and_mountpoint();
    let db = open_db(&data);
    let mut config = cfg(&mp);
    config.options = vec!["flush_interval_ms=200".into()];
    let h = mount(db.clone(), config).unwrap();
    for c in ["a", "x", "y", "gone"] {
        std::fs::create_dir(mp.join(c)).unwrap();
        std::fs::write(mp.join(c).join("f"), c).unwrap();
    }
    // The collections in the root (`.basalt` aside).
    let colls =
        |mp: &Path| -> Vec<String> { names(mp).into_iter().filter(|n| n != ".basalt").collect() };
    let names_are = |want: &[&str]| {
        eventually(&format!("root lists {want:?}"), || colls(&mp) == want);
    };
    names_are(&["a", "gone", "x", "y"]);
    let mut open = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(mp.join("a/f"))
        .unwrap();
    let unflushed = std::fs::File::create(mp.join("gone/late")).unwrap();
    (&unflushed).write_all(b"never flushed").unwrap();

    db.create_collection("made").unwrap();
    db.put("made", b"d/doc.txt", b"by the engine").unwrap();
    // Written under the old name, taken in after the rename.
    db.put("a", b"late", b"before the rename").unwrap();
    db.rename_collection("a", "b").unwrap();
    db.rename_collection("x", "tmp").unwrap();
    db.rename_collection("y", "x").unwrap();
    db.rename_collection("tmp", "y").unwrap();
    db.drop_collection("gone").unwrap();
    names_are(&["b", "made", "x", "y"]);
    // Names the kernel cached (a, x, y, gone) change once its notifications land.
    eventually("a and gone/f gone", || {
        !mp.join("a").exists() && !mp.join("gone/f").exists()
    });
    let reads = |p: &str, want: &[u8]| {
        eventually(&format!("{p} reads {want:?}"), || {
            std::fs::read(mp.join(p)).is_ok_and(|v| v == want)
        })
    };
    reads("made/d/doc.txt", b"by the engine");
    reads("b/f", b"a");
    reads("b/late", b"before the rename");
    reads("x/f", b"y");
    reads("y/f", b"x");
    open.write_all(b"A, renamed").unwrap();
    open.sync_all().unwrap();
    drop(open);
    drop(unflushed);
    // The mount goes on working in the new names.
    std::fs::write(mp.join("made/d/mine"), b"mine").unwrap();
    std::fs::create_dir(mp.join("new")).unwrap();
    h.unmount().unwrap();
    assert_eq!(db.list_collections(), ["b", "made", "new", "x", "y"]);
    assert_eq!(db.get("b", b"f").unwrap().unwrap(), b"A, renamed");

    let h = mount(db.clone(), cfg(&mp)).unwrap();
    assert_eq!(colls(&mp), ["b", "made", "new", "x", "y"]);
    assert_eq!(names(&mp.join("made/d")), ["doc.txt", "mine"]);
    assert_eq!(std::fs::read(mp.join("b/f")).unwrap(), b"A, renamed");
    assert_eq!(std::fs::read(mp.join("x/f")).unwrap(), b"y");
    h.unmount().unwrap();
}

/// A reader that runs `at_half` once, when half of `data` has been read.
struct ReadThenAct<'a, F: FnMut()> {
    data: &'a [u8],
    at: usize,
    at_half: Option<F>,
}

impl<F: FnMut()> Read for ReadThenAct<'_, F> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.at >= self.data.len() / 2 {
            if let Some(mut f) = self.at_half.take() {
                f();
            }
        }
        let n = buf.len().min(self.data.len() - self.at);
        buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// `write_document` takes a large document's inode id from the allocator the mount
/// uses: the mount's files whose ids are handed out but not stored yet (a document
/// taken in without metadata, and the directory its path implies) keep theirs when
/// the mount stores them while `write_document` runs, and after a remount every file
/// has its own metadata and content. (Before, `write_document` took the highest stored
/// id plus one, the taken-in file's, and the two files' records collided.)
#[test]
fn write_document_takes_no_inode_id_the_mount_handed_out() {
    require_fuse!();
    let (_tmp, data, mp) = data_and_mountpoint();
    let db = open_db(&data);
    let mut config = cfg(&mp);
    config.options = vec!["flush_interval_ms=600000".into()];
    let h = mount(db.clone(), config).unwrap();
    let c = mp.join("ids");
    std::fs::create_dir(&c).unwrap();
    db.put("ids", b"x/taken.txt", b"taken in").unwrap();
    // Only looked up: a read would store its record with the new atime.
    assert_eq!(std::fs::metadata(c.join("x/taken.txt")).unwrap().len(), 8);
    let big = pattern(5, 2 * basalt_fusefs::DEFAULT_CHUNK_SIZE + 77);
    let mut src = ReadThenAct {
        data: &big,
        at: 0,
        at_half: Some(|| {
            // Stores the records of both ids the mount handed out in memory.
            let mode = |p: &Path, m| std::fs::set_permissions(p, PermissionsExt::from_mode(m));
            mode(&c.join("x/taken.txt"), 0o600).unwrap();
            mode(&c.join("x"), 0o700).unwrap();
        }),
    };
    write_document(&db, "ids", "big.bin", &mut src).unwrap();
    assert!(src.at_half.is_none(), "the mount stored nothing meanwhile");
    eventually("big.bin", || {
        std::fs::read(c.join("big.bin")).is_ok_and(|v| v == big)
    });
    h.unmount().unwrap();

    let h = mount(db.clone(), cfg(&mp)).unwrap();
    let meta = |p: &str| std::fs::metadata(c.join(p)).unwrap();
    assert_eq!(std::fs::read(c.join("x/taken.txt")).unwrap(), b"taken in");
    assert_eq!(meta("x/taken.txt").permissions().mode() & 0o777, 0o600);
    assert_eq!(meta("x").permissions().mode() & 0o777, 0o700);
    assert!(meta("x").is_dir());
    assert_bytes(&std::fs::read(c.join("big.bin")).unwrap(), &big, "big.bin");
    assert_eq!(meta("big.bin").permissions().mode() & 0o777, 0o644);
    let inos = ["x", "x/taken.txt", "big.bin"].map(|p| meta(p).ino());
    assert!(inos[0] != inos[1] && inos[1] != inos[2] && inos[0] != inos[2]);
    assert_eq!(meta("big.bin").nlink(), 1);
    assert_eq!(meta("x/taken.txt").nlink(), 1);
    h.unmount().unwrap();
    assert_bytes(&doc(&db, "ids", "big.bin"), &big, "big.bin by the engine");
}

/// A second mount of an engine in the same process is refused with a clear error
/// (each would keep its own file metadata for the same documents); once the first
/// is unmounted, the engine mounts again.
#[test]
fn an_engine_mounts_once_per_process() {
    require_fuse!();
    let (tmp, data, mp) = data_and_mountpoint();
    let db = open_db(&data);
    let h = mount(db.clone(), cfg(&mp)).unwrap();
    let other = tmp.path().join("mnt2");
    std::fs::create_dir(&other).unwrap();
    let err = mount(db.clone(), cfg(&other)).err().expect("mounted twice");
    assert!(
        err.to_string().contains("already mounted by this process"),
        "{err}"
    );
    assert!(!common::is_mounted(&other));
    h.unmount().unwrap();
    mount(db.clone(), cfg(&other)).unwrap().unmount().unwrap();
}

/// The mount root's mode, owner, times and xattrs (`chmod 1777 /mnt` for a shared
/// scratch area, `chown` for a database's user) are stored when they change and come
/// back at the next mount; a damaged record is reported and the root starts fresh.
#[test]
fn the_mount_roots_attributes_survive_a_remount() {
    require_fuse!();
    let (_tmp, data, mp) = data_and_mountpoint();
    let db = open_db(&data);
    let h = mount(db.clone(), cfg(&mp)).unwrap();
    assert_eq!(common::mode(&mp), 0o755, "a fresh root");
    assert_eq!(db.read_aux("fusefs-root").unwrap(), None);
    std::fs::set_permissions(&mp, PermissionsExt::from_mode(0o1777)).unwrap();
    let stored = db.read_aux("fusefs-root").unwrap();
    assert!(
        stored.is_some(),
        "chmod of the root is stored before it returns"
    );
    std::os::unix::fs::chown(&mp, Some(1000), Some(1001)).unwrap();
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_500_000_000);
    let root = std::fs::File::open(&mp).unwrap();
    root.set_times(std::fs::FileTimes::new().set_modified(t).set_accessed(t))
        .unwrap();
    drop(root);
    let (name, value) = (c"user.purpose", b"scratch");
    let path = std::ffi::CString::new(mp.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: valid C strings and a buffer of the given length.
    let r = unsafe { libc::setxattr(path.as_ptr(), name.as_ptr(), value.as_ptr().cast(), 7, 0) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    std::fs::create_dir(mp.join("c")).unwrap();
    h.unmount().unwrap();

    let h = mount(db.clone(), cfg(&mp)).unwrap();
    let m = std::fs::metadata(&mp).unwrap();
    assert_eq!(m.mode() & 0o7777, 0o1777);
    assert_eq!((m.uid(), m.gid()), (1000, 1001));
    assert_eq!(m.modified().unwrap(), t, "mtime as set");
    let mut got = [0u8; 16];
    // SAFETY: as above.
    let n = unsafe {
        libc::getxattr(
            path.as_ptr(),
            name.as_ptr(),
            got.as_mut_ptr().cast(),
            got.len(),
        )
    };
    assert_eq!(&got[..n.max(0) as usize], value, "the root's xattr");
    assert!(mp.join("c").is_dir(), "collections are unaffected");
    h.unmount().unwrap();

    // A damaged record: the mount still comes up, with a fresh root.
    db.write_aux("fusefs-root", b"not a record").unwrap();
    let h = mount(db.clone(), cfg(&mp)).unwrap();
    assert_eq!(common::mode(&mp), 0o755);
    assert!(mp.join("c").is_dir());
    h.unmount().unwrap();
}

/// Times before the epoch keep their fraction of a second through the mount and a
/// remount (`fuser` decodes them up to two seconds early; `touch -d 1969-12-31` stored
/// a second early before this was corrected).
#[test]
fn times_before_the_epoch_survive_exactly() {
    require_fuse!();
    let (_tmp, data, mp) = data_and_mountpoint();
    let db = open_db(&data);
    let h = mount(db.clone(), cfg(&mp)).unwrap();
    std::fs::create_dir(mp.join("c")).unwrap();
    common::set_awkward_times(&mp.join("c"));
    h.unmount().unwrap();
    let h = mount(db.clone(), cfg(&mp)).unwrap();
    common::assert_awkward_times(&mp.join("c"), "after a remount");
    h.unmount().unwrap();
}

/// A file with writes the mount has not flushed yet keeps them over a document
/// written through the engine API meanwhile: its flush rewrites the document, as if the
/// engine write had come first (the mount and the engine agree after the unmount).
#[test]
fn unflushed_writes_win_over_an_engine_write_taken_in_meanwhile() {
    require_fuse!();
    let (_tmp, data, mp) = data_and_mountpoint();
    let db = open_db(&data);
    let mut config = cfg(&mp);
    config.options = vec!["flush_interval_ms=600000".into()];
    let h = mount(db.clone(), config).unwrap();
    std::fs::create_dir(mp.join("c")).unwrap();
    let path = mp.join("c/w.bin");
    std::fs::write(&path, b"first").unwrap();
    // O_DIRECT: the write reaches the mount now, not at the page cache's writeback.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .unwrap();
    f.write_all_at(b"mount", 0).unwrap();
    db.put("c", b"w.bin", b"from the engine").unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 5);
    drop(f);
    assert_eq!(std::fs::read(&path).unwrap(), b"mount");
    h.unmount().unwrap();
    assert_eq!(db.get("c", b"w.bin").unwrap().unwrap(), b"mount");
}

#[test]
fn unlinked_open_file_lives_until_close() {
    require_fuse!();
    let (_tmp, data, mp) = data_and_mountpoint();
    let h = mount(open_db(&data), cfg(&mp)).unwrap();
    std::fs::create_dir(mp.join("c")).unwrap();
    let p = mp.join("c/tmpfile");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&p)
        .unwrap();
    f.write_all(b"still here").unwrap();
    f.sync_all().unwrap();
    std::fs::remove_file(&p).unwrap();
    assert!(!p.exists());
    let mut s = String::new();
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "still here");
    f.write_all(&pattern(9, 1 << 20)).unwrap();
    f.sync_all().unwrap();
    let mut back = vec![0u8; 1 << 20];
    f.read_exact_at(&mut back, 10).unwrap();
    assert_bytes(&back, &pattern(9, 1 << 20), "unlinked");
    drop(f);
    h.unmount().unwrap();
    // Nothing of the file is left in the engine.
    let db = open_db(&data);
    let keys: Vec<Vec<u8>> = db
        .collection("c")
        .unwrap()
        .scan(
            std::ops::Bound::Unbounded,
            std::ops::Bound::Unbounded,
            basalt_engine::Direction::Forward,
        )
        .unwrap()
        .map(|kv| kv.unwrap().0)
        .filter(|k| !k.starts_with(b"\0N") || k.len() > 2)
        .filter(|k| k.starts_with(b"\0C") || !k.starts_with(b"\0"))
        .collect();
    assert!(keys.is_empty(), "leftover keys {keys:?}");
}

/// Unlinking the last name leaves no record of the file in the engine: neither its
/// inode record nor chunks, whatever storage form it had (inline files created by
/// the mount skip the chunk scan, so the ones that were chunked once must not).
#[test]
fn unlinked_files_leave_no_records() {
    require_fuse!();
    let (_tmp, data, mp) = data_and_mountpoint();
    let chunk = basalt_fusefs::DEFAULT_CHUNK_SIZE;
    let records = |db: &basalt_engine::Db| common::metadata_keys(db, "c");
    let h = mount(open_db(&data), cfg(&mp)).unwrap();
    let c = mp.join("c");
    std::fs::create_dir(&c).unwrap();
    // One inode record: the collection's root.
    let baseline = {
        h.unmount().unwrap();
        let db = open_db(&data);
        records(&db).len()
    };
    let h = mount(open_db(&data), cfg(&mp)).unwrap();
    std::fs::write(c.join("inline"), pattern(1, 4096)).unwrap();
    std::fs::write(c.join("chunked"), pattern(2, 3 * chunk + 5)).unwrap();
    std::fs::write(c.join("shrunk"), pattern(3, 2 * chunk)).unwrap();
    shrink(&c.join("shrunk"), 100);
    std::fs::write(c.join("patched"), pattern(5, 2 * chunk)).unwrap();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(c.join("patched"))
        .unwrap();
    f.sync_all().unwrap();
    f.write_all_at(&pattern(6, 4096), 4096).unwrap();
    f.sync_data().unwrap(); // commits one page as a patch
    drop(f);
    std::fs::write(c.join("linked"), pattern(4, 100)).unwrap();
    std::fs::hard_link(c.join("linked"), c.join("linked2")).unwrap();
    std::fs::remove_file(c.join("linked2")).unwrap();
    let mut open = std::fs::File::open(c.join("inline")).unwrap();
    for name in ["inline", "chunked", "shrunk", "patched", "linked"] {
        std::fs::remove_file(c.join(name)).unwrap();
    }
    let mut got = Vec::new();
    open.read_to_end(&mut got).unwrap();
    assert_bytes(&got, &pattern(1, 4096), "unlinked while open");
    drop(open);
    std::thread::sleep(std::time::Duration::from_millis(200)); // RELEASE is asynchronous
    h.unmount().unwrap();
    let db = open_db(&data);
    let left = records(&db);
    assert_eq!(left.len(), baseline, "records left: {left:?}");
}

/// Engine bytes written (`user_bytes_written`) and the mount's chunk counters: chunks
/// read back, written whole, pages written as patches.
fn write_counters(mp: &Path) -> [u64; 4] {
    let v = common::stats(mp);
    let c = &v["filesystem"]["chunks"];
    let n = |x: &serde_json::Value| x.as_u64().unwrap();
    [
        n(&v["engine"]["user_bytes_written"]),
        n(&c["read_back"]),
        n(&c["written_whole"]),
        n(&c["patch_pages_written"]),
    ]
}

/// Writes `bytes` at `at` through `f`, and into `model`.
fn model_write(f: &std::fs::File, model: &mut Vec<u8>, at: usize, bytes: Vec<u8>) {
    f.write_all_at(&bytes, at as u64).unwrap();
    if model.len() < at + bytes.len() {
        model.resize(at + bytes.len(), 0);
    }
    model[at..at + bytes.len()].copy_from_slice(&bytes);
}

/// [`model_write`], then `fdatasync`.
fn synced_write(f: &std::fs::File, model: &mut Vec<u8>, at: usize, bytes: Vec<u8>) {
    model_write(f, model, at, bytes);
    f.sync_data().unwrap();
}

/// Patch records (`\0P`) stored in collection `coll`.
fn patch_records(db: &basalt_engine::Db, coll: &str) -> usize {
    let c = db.collection(coll).unwrap();
    let keys = c
        .scan_prefix(b"\0P", basalt_engine::Direction::Forward)
        .unwrap();
    keys.keys().count()
}

/// The engine-API reader reads a file 16 chunks at a time: patches, holes and a
/// short last chunk read the same in every window, at and across its edges.
#[test]
fn the_engine_view_reads_patches_and_holes_in_every_read_ahead_window() {
    require_fuse!();
    let (_tmp, data, mp) = data_and_mountpoint();
    let chunk = basalt_fusefs::DEFAULT_CHUNK_SIZE;
    let h = mount(open_db(&data), cfg(&mp)).unwrap();
    std::fs::create_dir(mp.join("db")).unwrap();
    let file = mp.join("db/windows.bin");
    let f = std::fs::File::create(&file).unwrap();
    let mut model = Vec::new();
    // Chunks 0-14 and 18-33 written, 15-17 a hole, the last chunk short.
    model_write(&f, &mut model, 0, pattern(1, 15 * chunk));
    model_write(&f, &mut model, 18 * chunk, pattern(2, 16 * chunk - 700));
    f.sync_all().unwrap();
    // Patches in the first window, on both sides of its edge and in the last chunk.
    for (i, at) in [
        3 * chunk + 4096,
        15 * chunk - 4096,
        16 * chunk + 8192,
        18 * chunk,
        31 * chunk + 2 * 4096,
        33 * chunk + 4096,
    ]
    .into_iter()
    .enumerate()
    {
        synced_write(&f, &mut model, at, pattern(50 + i as u64, 4096));
    }
    drop(f);
    h.unmount().unwrap();
    let db = open_db(&data);
    assert!(
        patch_records(&db, "db") > 0,
        "writes were committed as patches"
    );
    assert_bytes(&doc(&db, "db", "windows.bin"), &model, "engine view");
}

/// Small writes each followed by `fdatasync` (a database's page writes) commit the
/// pages they change as patch records instead of their whole 64 KiB chunks; the file
/// reads the same through the mount, after a remount and through the engine API,
/// also after truncates and once a chunk's patches are folded back into it.
#[test]
fn synced_small_writes_commit_their_pages_not_their_chunks() {
    require_fuse!();
    let (_tmp, data, mp) = data_and_mountpoint();
    let chunk = basalt_fusefs::DEFAULT_CHUNK_SIZE;
    let mut model = pattern(7, 8 * chunk + 3000);
    let h = mount(open_db(&data), cfg(&mp)).unwrap();
    let file = mp.join("db/pages.bin");
    std::fs::create_dir(mp.join("db")).unwrap();
    std::fs::write(&file, &model).unwrap();
    let rw = || {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&file)
            .unwrap()
    };
    let f = rw();
    f.sync_all().unwrap();
    // One aligned page in each chunk: every write is one patch.
    let before = write_counters(&mp);
    for i in 0..8 {
        synced_write(
            &f,
            &mut model,
            i * chunk + (i % 4) * 8192,
            pattern(100 + i as u64, 4096),
        );
    }
    let after = write_counters(&mp);
    let per_write = (after[0] - before[0]) / 8;
    assert!(
        per_write < 6 << 10,
        "{per_write} engine bytes per synced 4 KiB write (a whole chunk is 64 KiB)"
    );
    assert_eq!(
        [
            after[1] - before[1],
            after[2] - before[2],
            after[3] - before[3]
        ],
        [0, 0, 8],
        "chunks read back, written whole, pages patched"
    );
    let patched = &common::stats(&mp)["filesystem"]["chunks"];
    assert_eq!(
        (
            patched["patched_chunks"].as_u64(),
            patched["patched_pages"].as_u64()
        ),
        (Some(8), Some(8))
    );
    // Random sizes and offsets: unaligned, across chunk boundaries, past the end,
    // repeated pages; enough per chunk that some chunks are rewritten whole again.
    let mut next = below(0x5eed_u64);
    for i in 0..96 {
        let len = [1, 100, 4096, 5000, 9000][next(5)];
        let at = next(model.len() + 2000);
        synced_write(&f, &mut model, at, pattern(200 + i, len));
    }
    drop(f);
    // Whole-page writes leave a chunk's stored bytes unread; a read, a partial write
    // or a flush of the whole chunk then needs them. O_DIRECT: writes and reads reach
    // the mount as they are, not as the page cache's pages.
    let d = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&file)
        .unwrap();
    let page = 4096;
    model_write(&d, &mut model, 3 * chunk + 2 * page, pattern(500, 2 * page));
    let mut got = vec![0; chunk];
    d.read_exact_at(&mut got, (3 * chunk) as u64).unwrap();
    assert_bytes(
        &got,
        &model[3 * chunk..4 * chunk],
        "chunk read before its flush",
    );
    model_write(&d, &mut model, 4 * chunk + 5 * page, pattern(501, page));
    model_write(&d, &mut model, 4 * chunk + 777, pattern(502, 100));
    model_write(&d, &mut model, 5 * chunk + page, pattern(503, 12 * page));
    for p in 0..chunk / page {
        model_write(
            &d,
            &mut model,
            6 * chunk + p * page,
            pattern(600 + p as u64, page),
        );
    }
    d.read_exact_at(&mut got, (6 * chunk) as u64).unwrap();
    assert_bytes(
        &got,
        &model[6 * chunk..7 * chunk],
        "chunk written page by page",
    );
    d.sync_all().unwrap();
    d.read_exact_at(&mut got, (4 * chunk) as u64).unwrap();
    assert_bytes(
        &got,
        &model[4 * chunk..5 * chunk],
        "chunk after a partial write",
    );
    drop(d);
    h.unmount().unwrap();
    let db = open_db(&data);
    assert!(
        patch_records(&db, "db") > 0,
        "some writes were committed as patches"
    );
    assert_bytes(&doc(&db, "db", "pages.bin"), &model, "engine view");
    drop(db);
    // A remount finds the patches: reads through the mount, then truncates into a
    // patched chunk, grows the file and patches it again.
    let h = mount(open_db(&data), cfg(&mp)).unwrap();
    assert_bytes(&std::fs::read(&file).unwrap(), &model, "after remount");
    let f = rw();
    let cut = 5 * chunk + 6000;
    f.set_len(cut as u64).unwrap();
    model.truncate(cut);
    f.set_len((7 * chunk) as u64).unwrap();
    model.resize(7 * chunk, 0);
    f.sync_all().unwrap();
    synced_write(&f, &mut model, 5 * chunk + 40_000, pattern(400, 4096));
    synced_write(&f, &mut model, 2 * chunk + 3 * 4096 + 17, pattern(401, 300));
    drop(f);
    h.unmount().unwrap();
    let db = open_db(&data);
    assert_bytes(
        &doc(&db, "db", "pages.bin"),
        &model,
        "engine view after truncates",
    );
    drop(db);
    let h = mount(open_db(&data), cfg(&mp)).unwrap();
    assert_bytes(
        &std::fs::read(&file).unwrap(),
        &model,
        "mount after truncates",
    );
    h.unmount().unwrap();
}

/// The mount's chunks read back so far, and the read-backs it did without (the chunk
/// kept since its flush).
fn read_backs(mp: &Path) -> (u64, u64) {
    let v = common::stats(mp);
    let c = &v["filesystem"]["chunks"];
    (
        c["read_back"].as_u64().unwrap(),
        c["read_back_avoided"].as_u64().unwrap(),
    )
}

/// A file that grows by synced appends (a database's write-ahead log: 4120-byte frames,
/// each followed by `fdatasync`) changes its short last chunk without reading it back,
/// and a chunk rewritten whole after its patches filled up is not read back for the
/// next such rewrite while the file stays open; after the last writer closes nothing
/// is kept. Random appends, overwrites and truncates on the same handle then read the
/// same through the mount (O_DIRECT), after a remount and through the engine API.
#[test]
fn growing_and_rewritten_chunks_are_not_read_back() {
    require_fuse!();
    let (_tmp, data, mp) = data_and_mountpoint();
    let chunk = basalt_fusefs::DEFAULT_CHUNK_SIZE;
    let page = 4096;
    let h = mount(open_db(&data), cfg(&mp)).unwrap();
    std::fs::create_dir(mp.join("db")).unwrap();
    let wal = mp.join("db/wal");
    let f = std::fs::File::create(&wal).unwrap();
    let mut model = Vec::new();
    synced_write(&f, &mut model, 0, pattern(1, 32));
    let before = read_backs(&mp);
    for i in 0..64 {
        let at = model.len();
        synced_write(&f, &mut model, at, pattern(10 + i, 4120));
    }
    let grown = read_backs(&mp);
    assert!(model.len() > 4 * chunk, "the log spans several chunks");
    assert_eq!(grown.0 - before.0, 0, "chunks read back while appending");
    assert!(
        grown.1 > before.1,
        "appends changed a kept chunk: {grown:?}"
    );
    // Chunk 1 is full and stored. Pages 0-8 of it, each synced: the ninth makes the
    // patches cover more than half the chunk, so it is written whole, read back once.
    let rewrite = |f: &std::fs::File, model: &mut Vec<u8>, seed: u64| {
        for p in 0..9 {
            synced_write(f, model, chunk + p * page, pattern(seed + p as u64, page));
        }
    };
    rewrite(&f, &mut model, 100);
    let once = read_backs(&mp);
    assert_eq!(
        once.0 - grown.0,
        1,
        "the first whole rewrite reads the chunk"
    );
    rewrite(&f, &mut model, 200);
    let twice = read_backs(&mp);
    assert_eq!(
        twice.0 - once.0,
        0,
        "the second whole rewrite reads nothing"
    );
    assert!(twice.1 > once.1);
    // Random appends, overwrites and truncates, each synced, on the same handle.
    let mut next = below(0x7a11_u64);
    for i in 0..150u64 {
        match next(6) {
            0 => {
                let cut = model.len().saturating_sub(next(2 * chunk));
                f.set_len(cut as u64).unwrap();
                model.truncate(cut);
                f.sync_data().unwrap();
            }
            1 | 2 => {
                let at = next(model.len() + 1);
                synced_write(&f, &mut model, at, pattern(300 + i, 1 + next(9000)));
            }
            _ => {
                let at = model.len();
                synced_write(&f, &mut model, at, pattern(300 + i, 4120));
            }
        }
    }
    let d = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&wal)
        .unwrap();
    let mut got = vec![0; model.len()];
    d.read_exact_at(&mut got, 0).unwrap();
    assert_bytes(&got, &model, "direct read while open for writing");
    drop((d, f));
    std::thread::sleep(std::time::Duration::from_millis(200)); // RELEASE is asynchronous
                                                               // No writer: nothing kept, so the same rewrite reads chunk 1 back again.
    let f = std::fs::OpenOptions::new().write(true).open(&wal).unwrap();
    let closed = read_backs(&mp);
    rewrite(&f, &mut model, 400);
    assert_eq!(read_backs(&mp).0 - closed.0, 1, "read back after a reopen");
    drop(f);
    assert_bytes(&std::fs::read(&wal).unwrap(), &model, "mount");
    h.unmount().unwrap();
    let db = open_db(&data);
    assert_bytes(&doc(&db, "db", "wal"), &model, "engine view");
    drop(db);
    let h = mount(open_db(&data), cfg(&mp)).unwrap();
    assert_bytes(&std::fs::read(&wal).unwrap(), &model, "after remount");
    h.unmount().unwrap();
}

/// A directory the kernel has listed (and cached) lists documents written and deleted
/// through the engine API while mounted at once: the next OPENDIR drops the cached
/// listing.
#[test]
fn engine_api_changes_show_in_a_directory_listed_before() {
    require_fuse!();
    let (_tmp, data, mp) = data_and_mountpoint();
    let db = open_db(&data);
    let h = mount(db.clone(), cfg(&mp)).unwrap();
    let d = mp.join("listed/d");
    std::fs::create_dir_all(&d).unwrap();
    for n in ["a", "b", "c"] {
        std::fs::write(d.join(n), n).unwrap();
    }
    for _ in 0..2 {
        assert_eq!(names(&d), ["a", "b", "c"]);
    }
    db.put("listed", b"d/e", b"by the engine").unwrap();
    assert_eq!(names(&d), ["a", "b", "c", "e"], "after a put");
    assert_eq!(names(&d), ["a", "b", "c", "e"], "listed again");
    db.delete("listed", b"d/b").unwrap();
    assert_eq!(names(&d), ["a", "c", "e"], "after a delete");
    db.put("listed", b"d/sub/f", b"deeper").unwrap();
    assert_eq!(
        names(&d),
        ["a", "c", "e", "sub"],
        "after a put in a new directory"
    );
    assert_eq!(names(&mp.join("listed")), ["d"]);
    h.unmount().unwrap();
}

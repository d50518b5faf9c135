//! The null filesystem (`basalt-fusefs-dev nullfs`), the FUSE ceiling that Basalt's
//! metadata rates are compared with in ARCHITECTURE.md: it must behave like a
//! filesystem for what the `files` benchmark does, and the kernel must send it the
//! same requests as the Basalt mount (or the comparison says nothing).

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use common::{assert_bytes, pattern, DevMount};

fn err(r: std::io::Result<impl std::fmt::Debug>) -> i32 {
    r.expect_err("must fail").raw_os_error().unwrap_or(0)
}

#[test]
fn null_mount_creates_writes_stats_reads_and_unlinks() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let log = exercise(&tmp.path().join("mnt"), &[]);
    assert!(log.contains("nullfs: requests"), "{log}");
}

/// Creates, writes, stats, reads, lists and unlinks through a null mount started
/// with `extra`; returns the daemon's stderr.
fn exercise(mp: &Path, extra: &[&str]) -> String {
    let m = DevMount::start_null(mp, extra);
    let dir = mp.join("c");
    std::fs::create_dir(&dir).unwrap();
    assert_eq!(err(std::fs::create_dir(&dir)), libc::EEXIST);

    // create + write + stat + read, in one open and across opens
    let big = pattern(1, 300_000);
    std::fs::write(dir.join("big"), &big).unwrap();
    let md = std::fs::metadata(dir.join("big")).unwrap();
    assert_eq!((md.len(), md.is_file(), md.nlink()), (300_000, true, 1));
    assert_eq!(md.permissions().mode() & 0o777, 0o644, "umask 022 applied");
    assert_bytes(&std::fs::read(dir.join("big")).unwrap(), &big, "big");
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.join("big"))
        .unwrap();
    f.seek(SeekFrom::Start(299_998)).unwrap();
    f.write_all(b"tail").unwrap();
    f.set_len(100_001).unwrap();
    drop(f);
    let want = &big[..100_001];
    assert_eq!(std::fs::metadata(dir.join("big")).unwrap().len(), 100_001);
    assert_bytes(&std::fs::read(dir.join("big")).unwrap(), want, "truncated");

    // directory listing and link counts
    for i in 0..50 {
        std::fs::write(dir.join(format!("f{i}")), pattern(i, 4096)).unwrap();
    }
    std::fs::create_dir(dir.join("sub")).unwrap();
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 52, "{names:?}");
    assert_eq!(std::fs::metadata(&dir).unwrap().nlink(), 3);
    for i in 0..50 {
        let p = dir.join(format!("f{i}"));
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 4096);
        assert_bytes(&std::fs::read(&p).unwrap(), &pattern(i, 4096), "small");
    }

    // unlink, also of an open file (readable until closed)
    let mut open = std::fs::File::open(dir.join("f0")).unwrap();
    for i in 0..50 {
        std::fs::remove_file(dir.join(format!("f{i}"))).unwrap();
    }
    let mut got = Vec::new();
    open.read_to_end(&mut got).unwrap();
    assert_bytes(&got, &pattern(0, 4096), "unlinked while open");
    drop(open);
    assert_eq!(err(std::fs::metadata(dir.join("f0"))), libc::ENOENT);
    assert_eq!(err(std::fs::remove_file(dir.join("f0"))), libc::ENOENT);
    assert_eq!(err(std::fs::remove_file(dir.join("sub"))), libc::EISDIR);
    assert_eq!(err(std::fs::remove_dir(&dir)), libc::ENOTEMPTY);
    std::fs::remove_dir(dir.join("sub")).unwrap();
    std::fs::remove_file(dir.join("big")).unwrap();
    std::fs::remove_dir(&dir).unwrap();
    assert_eq!(std::fs::read_dir(mp).unwrap().count(), 0);
    m.stop_with_stderr()
}

/// `files` (create, stat, delete) through a mount; FUSE requests by operation as
/// counted by the daemon over the whole session.
fn files_run(mp: &Path) {
    std::fs::create_dir(mp.join("c")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_basalt-fusefs-dev"))
        .args([
            "files",
            "--count",
            "300",
            "--threads",
            "2",
            "--size",
            "4096",
        ])
        .arg("--dir")
        .arg(mp.join("c/files"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let s = String::from_utf8_lossy(&out.stdout);
    for phase in ["create", "stat", "delete"] {
        assert!(s.contains(phase), "{s}");
    }
}

/// The daemon's request counts by operation (its `nullfs: requests` line).
fn null_counts(log: &str) -> BTreeMap<String, u64> {
    let line = log
        .lines()
        .find_map(|l| l.split_once("nullfs: requests "))
        .unwrap_or_else(|| panic!("no request counts in {log:?}"))
        .1;
    counts(&serde_json::from_str(line).unwrap())
}

fn counts(v: &serde_json::Value) -> BTreeMap<String, u64> {
    v.as_object()
        .unwrap()
        .iter()
        .map(|(k, n)| (k.clone(), n.as_u64().unwrap()))
        .collect()
}

#[test]
fn null_mount_gets_the_requests_of_the_basalt_mount() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();

    let mp = tmp.path().join("null");
    let m = DevMount::start_null(&mp, &[]);
    files_run(&mp);
    let null = null_counts(&m.stop_with_stderr());

    let mp = tmp.path().join("basalt");
    let m = DevMount::start(&tmp.path().join("data"), &mp, &[]);
    files_run(&mp);
    let s = std::fs::read_to_string(mp.join(".basalt/stats.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&s).unwrap();
    let basalt = counts(&v["filesystem"]["requests"]);
    m.stop();

    // 300 files: a request more or less per file would differ by 300. The margin
    // covers reading stats.json and FORGETs the kernel sends at its own pace.
    for op in [
        "lookup", "getattr", "setattr", "create", "write", "flush", "release", "unlink",
        "getxattr", "open",
    ] {
        let (n, b) = (null[op], basalt[op]);
        assert!(
            n.abs_diff(b) <= 10,
            "{op}: null fs got {n} requests, Basalt {b}\nnull {null:?}\nbasalt {basalt:?}"
        );
    }
    assert!(null["create"] >= 300 && null["unlink"] >= 300, "{null:?}");
}

/// The `files` benchmark refuses malformed numbers (exit 2 with its usage), and stops
/// with an error, not a panic, when its stdout is closed before it is done.
#[test]
fn files_bench_rejects_bad_flags_and_survives_a_closed_stdout() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = || Command::new(env!("CARGO_BIN_EXE_basalt-fusefs-dev"));
    for bad in [["--count", "abc"], ["--threads", "0"], ["--size", "-1"]] {
        let out = dev()
            .args(["files", "--dir"])
            .arg(tmp.path())
            .args(bad)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("usage:"));
    }
    let mut child = dev()
        .args(["files", "--count", "50", "--threads", "1", "--dir"])
        .arg(tmp.path().join("f"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("stdout: Broken pipe"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// `-o io_uring`: the same checks pass with every request but FORGET answered over
/// io_uring (INIT, FORGET and INTERRUPT stay on /dev/fuse), with each placement of
/// the queue threads; a kernel with the switch off refuses the mount, saying how
/// to turn it on.
#[test]
fn null_mount_over_io_uring_answers_every_request_on_the_ring() {
    require_fuse!();
    require_io_uring!();
    let tmp = tempfile::tempdir().unwrap();
    {
        let _off = common::UringSwitch::set(false);
        let mp = tmp.path().join("off");
        std::fs::create_dir(&mp).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_basalt-fusefs-dev"))
            .args(["nullfs", "-o", "io_uring"])
            .arg(&mp)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "mounted with io_uring disabled");
        assert!(
            err.contains("echo Y > /sys/module/fuse/parameters/enable_uring"),
            "{err}"
        );
        assert!(!common::is_mounted(&mp), "a refused mount was left behind");
    }
    let _on = common::UringSwitch::set(true);
    for pinning in ["same", "other", "none"] {
        let mp = tmp.path().join(pinning);
        let opt = format!("io_uring={pinning}");
        let log = exercise(&mp, &["-o", &opt]);
        let by_op = null_counts(&log);
        let served = common::ring_served(&log);
        // Opcodes neither front end serves (FUSE_STATX: the kernel then uses GETATTR)
        // are answered ENOSYS, and counted by no operation.
        let declined = log.matches("answered ENOSYS").count() as u64;
        let total: u64 = by_op.values().sum::<u64>() + declined;
        let on_dev_fuse = by_op["forget"];
        assert!(by_op["create"] >= 51 && by_op["read"] > 0, "{by_op:?}");
        assert_eq!(
            served,
            total - on_dev_fuse,
            "{pinning}: requests other than FORGET went to /dev/fuse: {by_op:?}\n{log}"
        );
        assert!(!log.contains("queue stopped"), "{log}");
        println!("io_uring={pinning}: {served} requests over the ring, {on_dev_fuse} FORGETs on /dev/fuse");
    }
}

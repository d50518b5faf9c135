//! Helpers for tests that mount a real FUSE filesystem (root and /dev/fuse needed).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Why FUSE tests cannot run here, or `None` when they can.
pub fn fuse_unavailable() -> Option<String> {
    if unsafe { libc::geteuid() } != 0 {
        return Some("not running as root".into());
    }
    if std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .is_err()
    {
        return Some("/dev/fuse cannot be opened".into());
    }
    None
}

/// Skips the calling test (with the reason printed) when FUSE is not available.
#[macro_export]
macro_rules! require_fuse {
    () => {
        if let Some(why) = common::fuse_unavailable() {
            eprintln!("SKIPPED: FUSE test needs root and /dev/fuse: {why}");
            return;
        }
    };
}

pub fn is_mounted(mp: &Path) -> bool {
    use basalt_fusefs::mounts;
    mounts::mount_at(&mounts::absolute(mp)).is_some_and(|m| m.is_fuse())
}

pub fn wait_mounted(mp: &Path, child: &mut Child) {
    let t = Instant::now();
    while !is_mounted(mp) {
        if let Ok(Some(st)) = child.try_wait() {
            panic!("dev mount exited early: {st}");
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "mount did not appear"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A dev-binary mount running as a separate process.
pub struct DevMount {
    pub child: Child,
    pub mountpoint: PathBuf,
}

impl DevMount {
    pub fn start(data: &Path, mountpoint: &Path, extra: &[&str]) -> DevMount {
        Self::spawn(Self::mount_cmd(data, extra), mountpoint)
    }

    /// Like [`DevMount::start`], with the daemon's stderr kept for
    /// [`DevMount::stop_with_stderr`].
    pub fn start_logged(data: &Path, mountpoint: &Path, extra: &[&str]) -> DevMount {
        let mut cmd = Self::mount_cmd(data, extra);
        cmd.stderr(Stdio::piped());
        Self::spawn(cmd, mountpoint)
    }

    fn mount_cmd(data: &Path, extra: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_basalt-fusefs-dev"));
        cmd.arg("mount").arg("--data").arg(data).args(extra);
        cmd
    }

    /// The null filesystem (`basalt-fusefs-dev nullfs`); its stderr is kept for
    /// [`DevMount::stop_with_stderr`].
    pub fn start_null(mountpoint: &Path, extra: &[&str]) -> DevMount {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_basalt-fusefs-dev"));
        cmd.arg("nullfs").args(extra).stderr(Stdio::piped());
        Self::spawn(cmd, mountpoint)
    }

    fn spawn(mut cmd: Command, mountpoint: &Path) -> DevMount {
        std::fs::create_dir_all(mountpoint).unwrap();
        let mut child = cmd
            .arg(mountpoint)
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn basalt-fusefs-dev");
        wait_mounted(mountpoint, &mut child);
        DevMount {
            child,
            mountpoint: mountpoint.to_path_buf(),
        }
    }

    /// Like [`DevMount::stop`], and returns what the daemon wrote to stderr (piped by
    /// [`DevMount::start_logged`] and [`DevMount::start_null`]).
    pub fn stop_with_stderr(mut self) -> String {
        let mut err = String::new();
        let mut pipe = self.child.stderr.take().expect("stderr piped");
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        std::io::Read::read_to_string(&mut pipe, &mut err).unwrap();
        let st = self.child.wait().unwrap();
        assert!(st.success(), "dev mount exited with {st}: {err}");
        assert!(!is_mounted(&self.mountpoint));
        err
    }

    /// Clean unmount from outside (as `fusermount3 -u` would) and wait for exit.
    pub fn stop(mut self) {
        let pid = self.child.id() as i32;
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let st = self.child.wait().unwrap();
        assert!(st.success(), "dev mount exited with {st}");
        assert!(!is_mounted(&self.mountpoint));
    }

    /// Unmount from outside with `fusermount3 -u`; the daemon must flush and exit 0.
    pub fn stop_external(mut self) {
        let st = Command::new("fusermount3")
            .arg("-u")
            .arg(&self.mountpoint)
            .status()
            .expect("run fusermount3");
        assert!(st.success(), "fusermount3 -u failed: {st}");
        let st = self.child.wait().unwrap();
        assert!(st.success(), "dev mount exited with {st}");
    }

    /// `kill -9` and wait for the daemon to be gone; the dead mount stays until this
    /// is dropped.
    pub fn kill_only(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// `kill -9` and clear the dead mount.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        assert!(basalt_fusefs::is_stale_mount(&self.mountpoint) || !is_mounted(&self.mountpoint));
        if is_mounted(&self.mountpoint) {
            basalt_fusefs::force_unmount(&self.mountpoint).unwrap();
        }
        assert!(!is_mounted(&self.mountpoint));
    }
}

impl Drop for DevMount {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if is_mounted(&self.mountpoint) {
            let _ = basalt_fusefs::force_unmount(&self.mountpoint);
        }
    }
}

/// Deterministic pseudo-random bytes.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// An in-process mount at `mp`: two workers, open to all users (tests run as root).
pub fn mount_config(mp: &Path) -> basalt_fusefs::MountConfig {
    basalt_fusefs::MountConfig {
        mountpoint: mp.to_path_buf(),
        threads: 2,
        allow_other: true,
        ..Default::default()
    }
}

/// A temporary directory (removed when the first value drops) with a data directory
/// path and a created mountpoint.
pub fn data_and_mountpoint() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let (data, mp) = (tmp.path().join("data"), tmp.path().join("mnt"));
    std::fs::create_dir_all(&mp).unwrap();
    (tmp, data, mp)
}

/// A xorshift stream of numbers below the bound each call gives, from `seed`.
pub fn below(seed: u64) -> impl FnMut(usize) -> usize {
    let mut x = seed;
    move |n: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n as u64) as usize
    }
}

/// Sets extended attribute `name` of `p` (not following a symlink), asserting success.
pub fn set_xattr(p: &Path, name: &str, value: &[u8]) {
    use std::os::unix::ffi::OsStrExt;
    let (c, n) = (
        std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap(),
        std::ffi::CString::new(name).unwrap(),
    );
    // SAFETY: valid C strings and a buffer of the given length.
    let r = unsafe {
        libc::lsetxattr(
            c.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(
        r,
        0,
        "setxattr {name} on {}: {}",
        p.display(),
        std::io::Error::last_os_error()
    );
}

/// A fresh data directory (`data` in the returned temporary directory) mounted at
/// `mnt` with the default options, with collection `c`.
pub fn mounted_with_collection_c() -> (tempfile::TempDir, PathBuf, basalt_fusefs::MountHandle) {
    let tmp = tempfile::tempdir().unwrap();
    let (data, mp) = (tmp.path().join("data"), tmp.path().join("mnt"));
    std::fs::create_dir_all(&mp).unwrap();
    let h = basalt_fusefs::mount(open_db(&data), mount_config(&mp)).unwrap();
    std::fs::create_dir(mp.join("c")).unwrap();
    (tmp, mp, h)
}

pub fn open_db(dir: &Path) -> basalt_engine::Db {
    basalt_engine::Db::open(
        dir,
        basalt_engine::Options {
            durability: basalt_engine::Durability::NoSync,
            ..Default::default()
        },
    )
    .unwrap()
}

/// Compares two byte strings, reporting length and first difference (not the bytes).
#[track_caller]
pub fn assert_bytes(got: &[u8], want: &[u8], what: &str) {
    if got != want {
        let first = got.iter().zip(want).position(|(a, b)| a != b);
        panic!(
            "{what}: got {} bytes, want {}, first difference at {:?}",
            got.len(),
            want.len(),
            first
        );
    }
}

/// Permission and set-ID bits of the file at `p`.
pub fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).unwrap().mode() & 0o7777
}

/// Skips the calling test (with the reason printed) when the kernel has no FUSE over
/// io_uring.
#[macro_export]
macro_rules! require_io_uring {
    () => {
        if !std::path::Path::new(common::ENABLE_URING).exists() {
            eprintln!(
                "SKIPPED: this kernel has no FUSE over io_uring ({} missing)",
                common::ENABLE_URING
            );
            return;
        }
    };
}

/// The kernel's FUSE-over-io_uring switch (Linux 6.14+).
pub const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// Tests of one binary that set the switch take turns: one test's restore must not
/// turn it off under another's mount.
static SWITCH_TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Sets the kernel's FUSE-over-io_uring switch, and puts back what it was when
/// dropped (it is global, and CI machines are shared). Held for a whole test: other
/// tests of the binary that set it wait meanwhile.
pub struct UringSwitch {
    was: String,
    _turn: std::sync::MutexGuard<'static, ()>,
}

impl UringSwitch {
    pub fn set(on: bool) -> UringSwitch {
        let turn = SWITCH_TURN.lock().unwrap_or_else(|e| e.into_inner());
        let was = std::fs::read_to_string(ENABLE_URING).unwrap();
        std::fs::write(ENABLE_URING, if on { "Y" } else { "N" }).unwrap();
        UringSwitch {
            was: was.trim().to_string(),
            _turn: turn,
        }
    }
}

impl Drop for UringSwitch {
    fn drop(&mut self) {
        let _ = std::fs::write(ENABLE_URING, &self.was);
    }
}

/// The mount's `/.basalt/stats.json`.
pub fn stats(mp: &Path) -> serde_json::Value {
    let stats = std::fs::read_to_string(mp.join(".basalt/stats.json")).unwrap();
    serde_json::from_str(&stats).unwrap()
}

/// The count a mount's daemon prints at unmount after serving over io_uring
/// (`N requests served over io_uring`).
pub fn ring_served(log: &str) -> u64 {
    log.lines()
        .find_map(|l| l.strip_suffix(" requests served over io_uring"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no io_uring count in {log:?}"))
}

/// `lseek(fd, off, whence)`: the new offset, or the errno.
pub fn seek(f: &std::fs::File, off: i64, whence: i32) -> Result<i64, i32> {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain syscall on an open descriptor.
    let r = unsafe { libc::lseek(f.as_raw_fd(), off, whence) };
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        Ok(r)
    }
}

/// Writes a sparse file at `p` with 64 KiB chunks: 4 KiB of data at 0 and at 1 MiB +
/// 100, then a size of 3 MiB; returns its bytes. Data sits in chunks 0 and 16 only.
pub fn write_sparse_file(p: &Path) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::create(p).unwrap();
    let (a, b) = (pattern(31, 4096), pattern(32, 4096));
    f.write_all_at(&a, 0).unwrap();
    f.write_all_at(&b, (1 << 20) + 100).unwrap();
    f.set_len(3 << 20).unwrap();
    let mut want = vec![0u8; 3 << 20];
    want[..4096].copy_from_slice(&a);
    want[(1 << 20) + 100..(1 << 20) + 4196].copy_from_slice(&b);
    want
}

/// `lseek(f, off, whence)` once it gives `want`, or what it gives after 10 s. The
/// kernel sends the RELEASE of a closed handle in the background: until the daemon
/// has it, the file counts as open for writing and is answered all data.
pub fn seek_settled(
    f: &std::fs::File,
    off: i64,
    whence: i32,
    want: Result<i64, i32>,
) -> Result<i64, i32> {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let got = seek(f, off, whence);
        if got == want || std::time::Instant::now() > until {
            return got;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// The data and holes of [`write_sparse_file`]'s file, asked through `f` once the
/// writing handle's RELEASE has arrived: `SEEK_DATA` / `SEEK_HOLE` name its two data
/// chunks.
#[track_caller]
pub fn assert_sparse_map(f: &std::fs::File, how: &str) {
    let (k64, m1) = (64 << 10, 1 << 20);
    let _ = seek_settled(f, 0, libc::SEEK_HOLE, Ok(k64));
    let cases = [
        (0, libc::SEEK_DATA, Ok(0), "data at the start"),
        (0, libc::SEEK_HOLE, Ok(k64), "first hole after chunk 0"),
        (
            5000,
            libc::SEEK_HOLE,
            Ok(k64),
            "hole after an offset inside chunk 0",
        ),
        (k64, libc::SEEK_DATA, Ok(m1), "next data: chunk 16"),
        (
            m1 + 50,
            libc::SEEK_DATA,
            Ok(m1 + 50),
            "inside chunk 16: the offset itself",
        ),
        (m1, libc::SEEK_HOLE, Ok(m1 + k64), "hole after chunk 16"),
        (
            2 * m1,
            libc::SEEK_HOLE,
            Ok(2 * m1),
            "inside a hole: the offset itself",
        ),
        (
            m1 + k64,
            libc::SEEK_DATA,
            Err(libc::ENXIO),
            "no data before the end",
        ),
        (3 * m1, libc::SEEK_DATA, Err(libc::ENXIO), "at the end"),
        (3 * m1, libc::SEEK_HOLE, Err(libc::ENXIO), "at the end"),
    ];
    for (off, whence, want, what) in cases {
        let name = if whence == libc::SEEK_DATA {
            "SEEK_DATA"
        } else {
            "SEEK_HOLE"
        };
        assert_eq!(
            seek(f, off, whence),
            want,
            "{how}: {name} from {off}: {what}"
        );
    }
}

/// Access and modification times (nanoseconds from the epoch) that a decoder can get
/// wrong: before the epoch with a fraction of a second, the epoch's last nanosecond
/// before it, after it with nanoseconds.
pub const AWKWARD_TIMES: [(i64, i64); 3] = [
    (-1_500_000_000, -86_400_250_000_001),
    (-1, 1_700_000_000_123_456_789),
    (0, -999_999_999),
];

/// Sets `p`'s access and modification times to `atime_ns` and `mtime_ns`
/// (`utimensat`, following symlinks, nanoseconds from the epoch, negative before it).
pub fn try_set_times_ns(p: &Path, atime_ns: i64, mtime_ns: i64) -> std::io::Result<()> {
    let ts = |ns: i64| libc::timespec {
        tv_sec: ns.div_euclid(1_000_000_000),
        tv_nsec: ns.rem_euclid(1_000_000_000),
    };
    let times = [ts(atime_ns), ts(mtime_ns)];
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid C string and two timespecs.
    match unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// [`try_set_times_ns`], asserting success.
pub fn set_times_ns(p: &Path, atime_ns: i64, mtime_ns: i64) {
    if let Err(e) = try_set_times_ns(p, atime_ns, mtime_ns) {
        panic!("utimensat {p:?}: {e}");
    }
}

/// `p`'s access and modification times in nanoseconds from the epoch.
pub fn times_ns(p: &Path) -> (i64, i64) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p).unwrap();
    let ns = |s: i64, n: i64| s * 1_000_000_000 + n;
    (ns(m.atime(), m.atime_nsec()), ns(m.mtime(), m.mtime_nsec()))
}

/// Sets [`AWKWARD_TIMES`] on files `t0`, `t1`... in `dir` (created), checking each.
pub fn set_awkward_times(dir: &Path) {
    for (i, &(a, m)) in AWKWARD_TIMES.iter().enumerate() {
        let p = dir.join(format!("t{i}"));
        std::fs::write(&p, b"x").unwrap();
        set_times_ns(&p, a, m);
        assert_eq!(times_ns(&p), (a, m), "{p:?} right after utimensat");
    }
}

/// Checks the times [`set_awkward_times`] set in `dir`.
pub fn assert_awkward_times(dir: &Path, when: &str) {
    for (i, &want) in AWKWARD_TIMES.iter().enumerate() {
        let p = dir.join(format!("t{i}"));
        assert_eq!(times_ns(&p), want, "{p:?} {when}");
    }
}

/// The extended attributes of `p` (not following a symlink), sorted by name, each
/// with its value.
pub fn xattrs(p: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    let mut buf = vec![0u8; 65536];
    // SAFETY: a valid C string and a buffer of the given length.
    let n = unsafe { libc::llistxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(
        n >= 0,
        "listxattr {p:?}: {}",
        std::io::Error::last_os_error()
    );
    let mut names: Vec<Vec<u8>> = buf[..n as usize]
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let cn = std::ffi::CString::new(name.clone()).unwrap();
            // SAFETY: valid C strings and a buffer of the given length.
            let n = unsafe {
                libc::lgetxattr(c.as_ptr(), cn.as_ptr(), buf.as_mut_ptr().cast(), buf.len())
            };
            let value = if n >= 0 {
                buf[..n as usize].to_vec()
            } else {
                Vec::new()
            };
            (name, value)
        })
        .collect()
}

/// What [`tree`] shows of each entry.
#[derive(Clone, Copy, PartialEq)]
pub enum TreeView {
    /// All but inode numbers and access times.
    Everything,
    /// What two POSIX file systems show alike: no times, no sizes of directories.
    Portable,
    /// What namespace calls and attribute changes decide, which the mount commits
    /// before answering: [`TreeView::Portable`] without file sizes and contents
    /// (file data waits for a flush).
    Namespace,
}

/// The tree under `root` (`.basalt` at its top left out), per relative path: type and
/// mode, owner, links, size, the symlink target or a hash of the content, extended
/// attributes with their values, and with [`TreeView::Everything`] modification and
/// change times.
pub fn tree(root: &Path, view: TreeView) -> std::collections::BTreeMap<String, String> {
    use std::hash::{Hash, Hasher};
    use std::os::unix::fs::MetadataExt;
    let mut out = std::collections::BTreeMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if rel == ".basalt" {
                continue;
            }
            let m = std::fs::symlink_metadata(&p).unwrap();
            let what = if m.is_dir() {
                todo.push(p.clone());
                String::new()
            } else if m.file_type().is_symlink() {
                format!("-> {:?}", std::fs::read_link(&p).unwrap())
            } else if m.is_file() && view != TreeView::Namespace {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                std::fs::read(&p).unwrap().hash(&mut h);
                format!("content {:x}", h.finish())
            } else {
                String::new()
            };
            let size = if view == TreeView::Namespace || (m.is_dir() && view == TreeView::Portable)
            {
                String::new()
            } else {
                format!(" size {}", m.size())
            };
            let times = match view {
                TreeView::Everything => format!(
                    " mtime {}.{} ctime {}.{}",
                    m.mtime(),
                    m.mtime_nsec(),
                    m.ctime(),
                    m.ctime_nsec()
                ),
                TreeView::Portable | TreeView::Namespace => String::new(),
            };
            let line = format!(
                "mode {:o} uid {} gid {} nlink {}{size}{times} {what} xattrs {:?}",
                m.mode(),
                m.uid(),
                m.gid(),
                m.nlink(),
                xattrs(&p)
            );
            out.insert(rel, line);
        }
    }
    out
}

/// The entries in which two listings differ, in words.
pub fn differ(
    a: &std::collections::BTreeMap<String, String>,
    b: &std::collections::BTreeMap<String, String>,
) -> Vec<String> {
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| format!("{k}: {:?} / {:?}", a.get(k), b.get(k)))
        .collect()
}

/// `renameat2(from, to, flags)`.
pub fn rename2(from: &Path, to: &Path, flags: u32) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    let (a, b) = (c(from), c(to));
    // SAFETY: two valid C strings.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            flags,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The keys of the filesystem's own records in collection `coll`: inode records,
/// chunks and chunk patches.
pub fn metadata_keys(db: &basalt_engine::Db, coll: &str) -> Vec<Vec<u8>> {
    let c = db.collection(coll).unwrap();
    let mut keys: Vec<Vec<u8>> = Vec::new();
    for p in [&b"\0I"[..], b"\0C", b"\0P"] {
        for item in c.scan_prefix(p, basalt_engine::Direction::Forward).unwrap() {
            keys.push(item.unwrap().0.to_vec());
        }
    }
    keys
}

/// A zeroed buffer at a 4 KiB-aligned address, as `O_DIRECT` wants.
pub struct Aligned {
    raw: Vec<u8>,
    at: usize,
    len: usize,
}

impl Aligned {
    pub fn new(len: usize) -> Aligned {
        let raw = vec![0u8; len + 4096];
        let at = raw.as_ptr().align_offset(4096);
        Aligned { raw, at, len }
    }

    pub fn bytes(&self) -> &[u8] {
        &self.raw[self.at..self.at + self.len]
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.at..self.at + self.len]
    }
}

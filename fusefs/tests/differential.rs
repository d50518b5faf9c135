//! The mount against the file system holding the temporary directory (ext4 in CI):
//! the same pseudo-random sequence of calls on both, over a small set of names so that
//! they collide (buffered and `O_DIRECT` IO on one file, replacing renames,
//! `copy_file_range`, links to directories, removing what is open, symlink loops...).
//! Each call must have the same outcome on both (success or the same errno, the same
//! bytes read, the same size and link count of a held handle), and the trees must be
//! the same every few calls (types, permission bits, owners, link counts, sizes,
//! contents, symlink targets, extended attributes with values). The mount is
//! unmounted and mounted again at random points (held files closed first), so what it
//! stored is compared too. A failure prints the seed and the calls before it;
//! `DIFFERENTIAL_SEED=N` repeats one sequence, `DIFFERENTIAL_OPS` sets its length and
//! `DIFFERENTIAL_TRACE=1` prints each call before it runs.
//!
//! The last test kills the daemon at a random moment of such calls and checks that
//! the next mount shows the tree of a prefix of them.

mod common;

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use common::{below, differ, open_db, pattern, tree, TreeView};

/// Names of every path component: three, so that calls meet the same entries.
const NAMES: [&str; 3] = ["a", "b", "c"];

/// Files held open across calls (on each side).
const SLOTS: usize = 2;

/// One call, applied alike to both trees.
#[derive(Debug, Clone)]
enum Call {
    /// Open (creating, mode 0644) and write `len` bytes at `off`.
    Write {
        p: String,
        off: u64,
        len: usize,
        seed: u64,
    },
    /// Open with `O_APPEND` (creating) and write.
    Append {
        p: String,
        len: usize,
        seed: u64,
    },
    Read {
        p: String,
    },
    Truncate {
        p: String,
        len: u64,
    },
    /// `fallocate` mode 0 (may extend the size).
    Fallocate {
        p: String,
        off: u64,
        len: u64,
    },
    CreateExcl {
        p: String,
    },
    Unlink {
        p: String,
    },
    Mkdir {
        p: String,
        mode: u32,
    },
    Rmdir {
        p: String,
    },
    Rename {
        from: String,
        to: String,
    },
    /// `renameat2` with `RENAME_NOREPLACE` or `RENAME_EXCHANGE`.
    Rename2 {
        from: String,
        to: String,
        flags: u32,
    },
    Link {
        from: String,
        to: String,
    },
    Symlink {
        target: String,
        p: String,
    },
    Chmod {
        p: String,
        mode: u32,
    },
    Chown {
        p: String,
        uid: u32,
        gid: u32,
    },
    /// Sets access and modification times (nanoseconds from the epoch), then reads
    /// them back with `stat`.
    Times {
        p: String,
        atime: i64,
        mtime: i64,
    },
    Mkfifo {
        p: String,
    },
    SetXattr {
        p: String,
        name: String,
        len: usize,
        seed: u64,
    },
    RemoveXattr {
        p: String,
        name: String,
    },
    /// Opens an existing file read-write into a slot (closing what it held).
    Hold {
        slot: usize,
        p: String,
    },
    HeldWrite {
        slot: usize,
        off: u64,
        len: usize,
        seed: u64,
    },
    /// Reads the whole held file; its size and link count (`fstat`) are compared too.
    HeldRead {
        slot: usize,
    },
    HeldTruncate {
        slot: usize,
        len: u64,
    },
    /// `copy_file_range` from file `from` to file `to` (created if missing).
    CopyRange {
        from: String,
        to: String,
        off_in: u64,
        off_out: u64,
        len: usize,
    },
    /// Opens with `O_DIRECT` (creating) and writes `blocks` pages of 4 KiB at page
    /// `page`.
    DirectWrite {
        p: String,
        page: u64,
        blocks: usize,
        seed: u64,
    },
    /// Opens with `O_DIRECT` and reads `blocks` pages at page `page`.
    DirectRead {
        p: String,
        page: u64,
        blocks: usize,
    },
    /// Opens with `O_TRUNC` (not creating).
    OpenTrunc {
        p: String,
    },
    Close {
        slot: usize,
    },
    /// `fsync` of the root directory: makes every call before it durable.
    Sync,
    /// Closes the held files, unmounts and mounts again (the reference only closes).
    Remount,
}

/// What a call gave: bytes read (empty for calls that read nothing) or an errno.
type Outcome = Result<Vec<u8>, i32>;

/// Paths under the reference root: every entry, and the directories (the root as
/// the empty path).
struct Existing {
    all: Vec<String>,
    dirs: Vec<String>,
}

impl Existing {
    fn under(root: &Path) -> Existing {
        let mut e = Existing {
            all: Vec::new(),
            dirs: vec![String::new()],
        };
        let mut todo = vec![root.to_path_buf()];
        while let Some(dir) = todo.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let entry = entry.unwrap();
                let rel = entry.path().strip_prefix(root).unwrap().to_owned();
                let rel = rel.to_string_lossy().into_owned();
                if entry.file_type().unwrap().is_dir() {
                    todo.push(entry.path());
                    e.dirs.push(rel.clone());
                }
                e.all.push(rel);
            }
        }
        e.all.sort();
        e.dirs.sort();
        e
    }

    /// Three times in five an existing entry, otherwise a path of one to three
    /// [`NAMES`], which may exist or not.
    fn pick(&self, r: &mut impl FnMut(usize) -> usize) -> String {
        if !self.all.is_empty() && r(5) < 3 {
            return self.all[r(self.all.len())].clone();
        }
        let depth = 1 + r(3);
        let parts: Vec<&str> = (0..depth).map(|_| NAMES[r(NAMES.len())]).collect();
        parts.join("/")
    }

    /// A path for a new entry: four times in five a name in an existing directory
    /// (taken or not), otherwise [`Existing::pick`].
    fn pick_new(&self, r: &mut impl FnMut(usize) -> usize) -> String {
        if r(5) == 0 {
            return self.pick(r);
        }
        let dir = &self.dirs[r(self.dirs.len())];
        let name = NAMES[r(NAMES.len())];
        if dir.is_empty() {
            name.to_string()
        } else {
            format!("{dir}/{name}")
        }
    }
}

fn next_call(r: &mut impl FnMut(usize) -> usize, existing: &Existing) -> Call {
    let p = existing.pick(r);
    let new = existing.pick_new(r);
    let slot = r(SLOTS);
    let seed = r(1 << 30) as u64;
    // Offsets around the 64 KiB chunk size, lengths from a byte to past a chunk.
    let off = [0, 1, 4095, 4096, 65535, 65536, 100_000, 200_000][r(8)];
    let len = [1, 100, 4096, 5000, 70_000][r(5)];
    match r(106) {
        0..=13 => Call::Write { p, off, len, seed },
        14..=17 => Call::Append { p, len, seed },
        18..=22 => Call::Read { p },
        23..=27 => Call::Truncate {
            p,
            len: [0, 10, 4096, 65536, 70_000, 300_000][r(6)],
        },
        28..=29 => Call::Fallocate {
            p,
            off,
            len: len as u64,
        },
        30..=32 => Call::CreateExcl { p: new },
        33..=38 => Call::Unlink { p },
        39..=46 => Call::Mkdir {
            p: new,
            mode: [0o755, 0o700, 0o1777, 0o2750][r(4)],
        },
        47..=51 => Call::Rmdir { p },
        52..=61 => Call::Rename { from: p, to: new },
        62..=65 => Call::Link { from: p, to: new },
        66..=68 => Call::Symlink {
            target: existing.pick(r),
            p: new,
        },
        69..=70 => Call::Chmod {
            p,
            mode: [0o644, 0o600, 0o4755, 0o2711, 0o1700, 0o7777, 0][r(7)],
        },
        71 => match r(3) {
            0 => Call::Chown {
                p,
                uid: [0, 1000][r(2)],
                gid: [0, 1001][r(2)],
            },
            1 => Call::Times {
                p,
                atime: common::AWKWARD_TIMES[r(3)].0,
                mtime: common::AWKWARD_TIMES[r(3)].1,
            },
            _ => Call::Mkfifo { p: new },
        },
        72 => Call::Rename2 {
            from: p,
            to: new,
            flags: [libc::RENAME_NOREPLACE, libc::RENAME_EXCHANGE][r(2)],
        },
        73..=76 => Call::SetXattr {
            p,
            name: format!("user.{}", NAMES[r(NAMES.len())]),
            len: [0, 5, 300][r(3)],
            seed,
        },
        77..=78 => Call::RemoveXattr {
            p,
            name: format!("user.{}", NAMES[r(NAMES.len())]),
        },
        79..=83 => Call::Hold { slot, p },
        84..=88 => Call::HeldWrite {
            slot,
            off,
            len,
            seed,
        },
        89..=92 => Call::HeldRead { slot },
        93 => Call::HeldTruncate {
            slot,
            len: [0, 4096, 100_000][r(3)],
        },
        94 => match r(2) {
            0 => Call::CopyRange {
                from: p,
                to: existing.pick(r),
                off_in: off,
                off_out: [0, 4096, 70_000][r(3)],
                len,
            },
            _ => Call::OpenTrunc { p },
        },
        95..=97 => Call::Close { slot },
        98 => Call::Sync,
        99..=101 => Call::DirectWrite {
            p,
            page: [0, 1, 15, 16, 17, 40][r(6)],
            blocks: 1 + r(3),
            seed,
        },
        102..=104 => Call::DirectRead {
            p,
            page: [0, 1, 15, 16, 17, 40][r(6)],
            blocks: 1 + r(3),
        },
        _ => Call::Remount,
    }
}

/// Opens never wait: a FIFO the calls made opens at once (or fails) on both sides.
fn opts() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.custom_flags(libc::O_NONBLOCK);
    o
}

/// [`opts`] for writing, creating the file (mode 0644) if it is missing.
fn writing() -> OpenOptions {
    let mut o = opts();
    o.write(true).create(true).mode(0o644);
    o
}

fn errno(e: io::Error) -> i32 {
    e.raw_os_error().unwrap_or(-1)
}

fn cstr(p: &Path) -> std::ffi::CString {
    std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// `Ok(())` for a libc call's 0, the errno otherwise.
fn check(r: libc::c_int) -> Result<(), i32> {
    if r == 0 {
        Ok(())
    } else {
        Err(errno(io::Error::last_os_error()))
    }
}

fn nothing(r: io::Result<()>) -> Outcome {
    r.map(|()| Vec::new()).map_err(errno)
}

/// One side: the directory its calls run in, and its held files.
struct Side {
    root: std::path::PathBuf,
    held: [Option<File>; SLOTS],
}

impl Side {
    fn at(root: std::path::PathBuf) -> Side {
        Side {
            root,
            held: Default::default(),
        }
    }

    fn run(&mut self, call: &Call) -> Outcome {
        let at = |p: &String| self.root.join(p);
        match call {
            Call::Write { p, off, len, seed } => {
                let f = writing().open(at(p)).map_err(errno)?;
                nothing(f.write_all_at(&pattern(*seed, *len), *off))
            }
            Call::Append { p, len, seed } => {
                let mut f = writing().append(true).open(at(p)).map_err(errno)?;
                nothing(io::Write::write_all(&mut f, &pattern(*seed, *len)))
            }
            Call::Read { p } => {
                let mut f = opts().read(true).open(at(p)).map_err(errno)?;
                let mut buf = Vec::new();
                io::Read::read_to_end(&mut f, &mut buf).map_err(errno)?;
                Ok(buf)
            }
            Call::Truncate { p, len } => {
                let c = cstr(&at(p));
                // SAFETY: a valid C string.
                check(unsafe { libc::truncate(c.as_ptr(), *len as i64) }).map(|()| Vec::new())
            }
            Call::Fallocate { p, off, len } => {
                let f = opts().write(true).open(at(p)).map_err(errno)?;
                // SAFETY: an open file descriptor.
                let r = unsafe { libc::fallocate(f.as_raw_fd(), 0, *off as i64, *len as i64) };
                check(r).map(|()| Vec::new())
            }
            Call::CreateExcl { p } => opts()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(at(p))
                .map(|_| Vec::new())
                .map_err(errno),
            Call::Unlink { p } => nothing(std::fs::remove_file(at(p))),
            Call::Mkdir { p, mode } => {
                let c = cstr(&at(p));
                // SAFETY: a valid C string.
                check(unsafe { libc::mkdir(c.as_ptr(), *mode) }).map(|()| Vec::new())
            }
            Call::Rmdir { p } => nothing(std::fs::remove_dir(at(p))),
            Call::Rename { from, to } => nothing(std::fs::rename(at(from), at(to))),
            Call::Rename2 { from, to, flags } => {
                nothing(common::rename2(&at(from), &at(to), *flags))
            }
            Call::Chown { p, uid, gid } => {
                nothing(std::os::unix::fs::lchown(at(p), Some(*uid), Some(*gid)))
            }
            Call::Times { p, atime, mtime } => {
                common::try_set_times_ns(&at(p), *atime, *mtime).map_err(errno)?;
                Ok(format!("{:?}", common::times_ns(&at(p))).into_bytes())
            }
            Call::Mkfifo { p } => {
                let c = cstr(&at(p));
                // SAFETY: a valid C string.
                check(unsafe { libc::mkfifo(c.as_ptr(), 0o640) }).map(|()| Vec::new())
            }
            Call::Link { from, to } => nothing(std::fs::hard_link(at(from), at(to))),
            Call::Symlink { target, p } => nothing(std::os::unix::fs::symlink(target, at(p))),
            Call::Chmod { p, mode } => nothing(std::fs::set_permissions(
                at(p),
                std::fs::Permissions::from_mode(*mode),
            )),
            Call::SetXattr { p, name, len, seed } => {
                let (c, n, v) = (cstr(&at(p)), cstr(Path::new(name)), pattern(*seed, *len));
                // SAFETY: valid C strings and a buffer of the given length.
                let r = unsafe {
                    libc::setxattr(c.as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), 0)
                };
                check(r).map(|()| Vec::new())
            }
            Call::RemoveXattr { p, name } => {
                let (c, n) = (cstr(&at(p)), cstr(Path::new(name)));
                // SAFETY: valid C strings.
                check(unsafe { libc::removexattr(c.as_ptr(), n.as_ptr()) }).map(|()| Vec::new())
            }
            Call::Hold { slot, p } => {
                let f = opts().read(true).write(true).open(at(p));
                self.held[*slot] = None;
                self.held[*slot] = Some(f.map_err(errno)?);
                Ok(Vec::new())
            }
            Call::HeldWrite {
                slot,
                off,
                len,
                seed,
            } => {
                let f = self.held[*slot].as_ref().ok_or(libc::EBADF)?;
                nothing(f.write_all_at(&pattern(*seed, *len), *off))
            }
            Call::HeldRead { slot } => {
                let f = self.held[*slot].as_ref().ok_or(libc::EBADF)?;
                let m = f.metadata().map_err(errno)?;
                let mut buf = vec![0u8; m.len() as usize];
                f.read_exact_at(&mut buf, 0).map_err(errno)?;
                buf.extend_from_slice(format!(" size {} nlink {}", m.len(), m.nlink()).as_bytes());
                Ok(buf)
            }
            Call::HeldTruncate { slot, len } => {
                let f = self.held[*slot].as_ref().ok_or(libc::EBADF)?;
                nothing(f.set_len(*len))
            }
            Call::CopyRange {
                from,
                to,
                off_in,
                off_out,
                len,
            } => {
                let a = opts().read(true).open(at(from)).map_err(errno)?;
                let b = writing().open(at(to)).map_err(errno)?;
                let (mut i, mut o) = (*off_in as i64, *off_out as i64);
                // SAFETY: two open file descriptors and offsets the call updates.
                let n = unsafe {
                    libc::copy_file_range(a.as_raw_fd(), &mut i, b.as_raw_fd(), &mut o, *len, 0)
                };
                if n < 0 {
                    return Err(errno(io::Error::last_os_error()));
                }
                Ok(format!("copied {n}").into_bytes())
            }
            Call::DirectWrite {
                p,
                page,
                blocks,
                seed,
            } => {
                let f = writing()
                    .custom_flags(libc::O_NONBLOCK | libc::O_DIRECT)
                    .open(at(p))
                    .map_err(errno)?;
                let mut buf = common::Aligned::new(blocks * 4096);
                buf.bytes_mut()
                    .copy_from_slice(&pattern(*seed, blocks * 4096));
                nothing(f.write_all_at(buf.bytes(), page * 4096))
            }
            Call::DirectRead { p, page, blocks } => {
                let f = opts()
                    .read(true)
                    .custom_flags(libc::O_NONBLOCK | libc::O_DIRECT)
                    .open(at(p))
                    .map_err(errno)?;
                let mut buf = common::Aligned::new(blocks * 4096);
                let n = f.read_at(buf.bytes_mut(), page * 4096).map_err(errno)?;
                Ok(buf.bytes()[..n].to_vec())
            }
            Call::OpenTrunc { p } => opts()
                .write(true)
                .truncate(true)
                .open(at(p))
                .map(|_| Vec::new())
                .map_err(errno),
            Call::Close { slot } => {
                self.held[*slot].take().ok_or(libc::EBADF)?;
                Ok(Vec::new())
            }
            Call::Sync => nothing(File::open(&self.root).and_then(|d| d.sync_all())),
            Call::Remount => {
                self.held = Default::default();
                Ok(Vec::new())
            }
        }
    }
}

use std::os::fd::AsRawFd;

/// A short description of an outcome for messages.
fn shown(o: &Outcome) -> String {
    match o {
        Ok(b) if b.is_empty() => "ok".into(),
        Ok(b) if b.len() <= 80 && b.iter().all(|c| c.is_ascii_graphic() || *c == b' ') => {
            format!("ok, {:?}", String::from_utf8_lossy(b))
        }
        Ok(b) => {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            std::hash::Hash::hash(b, &mut h);
            let hash = std::hash::Hasher::finish(&h);
            format!("ok, {} bytes (hash {hash:x})", b.len())
        }
        Err(e) => format!("errno {e} ({})", io::Error::from_raw_os_error(*e)),
    }
}

/// Runs `ops` calls from `seed` against a fresh mount (with `options`, and chunks of
/// `chunk_size` bytes, 0 for the default) and a fresh reference directory.
fn run_sequence(seed: u64, ops: usize, options: &[&str], chunk_size: usize) {
    let (_tmp, data, mp) = common::data_and_mountpoint();
    let reference = data.with_file_name("reference");
    std::fs::create_dir_all(&reference).unwrap();
    let db = open_db(&data);
    let cfg = |mp: &Path| basalt_fusefs::MountConfig {
        options: options.iter().map(|o| o.to_string()).collect(),
        chunk_size,
        ..common::mount_config(mp)
    };
    let mut handle = Some(basalt_fusefs::mount(db.clone(), cfg(&mp)).unwrap());
    std::fs::create_dir(mp.join("c")).unwrap();
    let (mut ours, mut theirs) = (Side::at(mp.join("c")), Side::at(reference));
    let mut r = below(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut log: Vec<String> = Vec::new();
    let trace = std::env::var_os("DIFFERENTIAL_TRACE").is_some();
    let mut counts = std::collections::BTreeMap::<String, (u32, u32)>::new();
    let fail = |log: &[String], what: String| -> ! {
        let tail = log.len().saturating_sub(40);
        panic!(
            "seed {seed}, call {}: {what}\nlast calls:\n{}",
            log.len(),
            log[tail..].join("\n")
        );
    };
    for i in 0..ops {
        let call = next_call(&mut r, &Existing::under(&theirs.root));
        if trace {
            eprintln!("{i}: {call:?}");
        }
        let want = theirs.run(&call);
        if let Call::Remount = call {
            ours.held = Default::default();
            handle.take().unwrap().unmount().unwrap();
            handle = Some(basalt_fusefs::mount(db.clone(), cfg(&mp)).unwrap());
        }
        let got = ours.run(&call);
        log.push(format!("{i}: {call:?} -> {}", shown(&want)));
        let kind = format!("{call:?}");
        let kind = kind
            .split([' ', '{'])
            .next()
            .unwrap_or_default()
            .to_string();
        let e = counts.entry(kind).or_default();
        if want.is_ok() {
            e.0 += 1;
        } else {
            e.1 += 1;
        }
        if got != want {
            fail(
                &log,
                format!(
                    "the mount gave {}, the reference {}",
                    shown(&got),
                    shown(&want)
                ),
            );
        }
        if i % 8 == 7 || matches!(call, Call::Remount) || i + 1 == ops {
            let (a, b) = (
                tree(&ours.root, TreeView::Portable),
                tree(&theirs.root, TreeView::Portable),
            );
            let d = differ(&a, &b);
            if !d.is_empty() {
                fail(
                    &log,
                    format!("trees differ (mount / reference):\n{}", d.join("\n")),
                );
            }
        }
    }
    drop(ours);
    handle.take().unwrap().unmount().unwrap();
    let summary: Vec<String> = counts
        .iter()
        .map(|(k, (ok, err))| format!("{k} {ok}/{err}"))
        .collect();
    println!(
        "seed {seed}, options {options:?}, chunk size {chunk_size}: {ops} calls alike on the mount and the reference \
         (calls succeeded/failed: {})",
        summary.join(", ")
    );
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| v.parse().unwrap())
}

/// The seeds to run: `DIFFERENTIAL_SEED` alone, or `fixed` and one random seed
/// (printed, to repeat a failure).
fn seeds(fixed: &[u64]) -> Vec<u64> {
    if let Some(s) = env_u64("DIFFERENTIAL_SEED") {
        return vec![s];
    }
    let random = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64;
    println!("random seed this run: {random} (DIFFERENTIAL_SEED={random} repeats it)");
    fixed.iter().copied().chain([random]).collect()
}

fn ops() -> usize {
    env_u64("DIFFERENTIAL_OPS").unwrap_or(2000) as usize
}

#[test]
fn random_calls_have_the_same_outcome_on_the_mount_and_on_the_reference() {
    require_fuse!();
    for seed in seeds(&[1, 2, 3]) {
        run_sequence(seed, ops(), &[], 0);
    }
}

/// With 4 KiB chunks most files are chunked and every write spans chunks, patches
/// and kept tails.
#[test]
fn the_same_with_4k_chunks() {
    require_fuse!();
    for seed in seeds(&[11]) {
        run_sequence(seed, ops() / 2, &[], 4096);
    }
}

/// Without the writeback cache every write, size and time goes to the daemon.
#[test]
fn the_same_without_the_writeback_cache() {
    require_fuse!();
    for seed in seeds(&[4]) {
        run_sequence(seed, ops(), &["no_writeback_cache"], 0);
    }
}

/// Over FUSE-over-io_uring, whose requests this crate decodes itself.
#[test]
fn the_same_over_io_uring() {
    require_fuse!();
    require_io_uring!();
    let _on = common::UringSwitch::set(true);
    for seed in seeds(&[5]) {
        run_sequence(seed, ops(), &["io_uring=same"], 0);
    }
}

/// Whether `child` has exited, waiting up to 10 s for it when `expected`.
fn exited(child: &mut std::process::Child, expected: bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return true;
        }
        if !expected || std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Runs calls from `seed` on a mount in a separate process until a thread kills it
/// (`kill -9`) at a random moment, then mounts the data again: its tree must be the
/// reference's after some prefix of the calls, at or after the last acknowledged
/// `Sync`: no call half done, none kept while an earlier one was lost, none lost that
/// a sync covered. File sizes and contents are left out (data waits for a flush; the
/// crash tests check synced data).
fn run_until_killed(seed: u64) {
    let (_tmp, data, mp) = common::data_and_mountpoint();
    let reference = data.with_file_name("reference");
    std::fs::create_dir_all(&reference).unwrap();
    let mut m = common::DevMount::start(&data, &mp, &[]);
    std::fs::create_dir(mp.join("c")).unwrap();
    File::open(mp.join("c")).unwrap().sync_all().unwrap();
    let (mut ours, mut theirs) = (Side::at(mp.join("c")), Side::at(reference));
    let mut r = below(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let delay = std::time::Duration::from_millis(50 + r(1500) as u64);
    let pid = m.child.id() as i32;
    let killer = std::thread::spawn(move || {
        std::thread::sleep(delay);
        // SAFETY: sends a signal to the daemon's process.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    });
    let view = TreeView::Namespace;
    // The reference's trees since the last acknowledged sync: [0] right after it.
    let mut states = vec![tree(&theirs.root, view)];
    let (mut calls, mut syncs) = (0usize, 0usize);
    let mut log: Vec<String> = Vec::new();
    loop {
        let call = next_call(&mut r, &Existing::under(&theirs.root));
        if matches!(call, Call::Remount) {
            continue;
        }
        let got = ours.run(&call);
        // A call the kernel failed because the daemon's connection went is answered
        // while the killed process may still be exiting: wait for it.
        let cut = matches!(got, Err(libc::ENOTCONN | libc::ECONNABORTED));
        let dead = exited(&mut m.child, cut);
        let want = theirs.run(&call);
        log.push(format!("{calls}: {call:?} -> {}", shown(&want)));
        if got != want {
            assert!(
                dead,
                "seed {seed}: the mount gave {}, the reference {}, the daemon alive\n{}",
                shown(&got),
                shown(&want),
                log[log.len().saturating_sub(30)..].join("\n")
            );
            // In flight when the daemon died: done or not.
            states.push(tree(&theirs.root, view));
            break;
        }
        calls += 1;
        if matches!(call, Call::Sync) && got.is_ok() {
            states.clear();
            syncs += 1;
        }
        states.push(tree(&theirs.root, view));
        if dead && calls > 50_000 {
            panic!("seed {seed}: calls still answered long after the daemon died");
        }
    }
    killer.join().unwrap();
    ours.held = Default::default();
    m.kill();
    let db = open_db(&data);
    let h = basalt_fusefs::mount(db.clone(), common::mount_config(&mp)).unwrap();
    let recovered = tree(&mp.join("c"), view);
    h.unmount().unwrap();
    let Some(at) = states.iter().rposition(|s| *s == recovered) else {
        let last = states.last().unwrap();
        panic!(
            "seed {seed}: the recovered tree is the reference's after no prefix of the {} \
             calls since the last sync; against the last:\n{}\nagainst the synced one:\n{}\n\
             calls:\n{}",
            states.len() - 1,
            differ(&recovered, last).join("\n"),
            differ(&recovered, &states[0]).join("\n"),
            log[log.len().saturating_sub(states.len() + 5)..].join("\n")
        );
    };
    println!(
        "seed {seed}: daemon killed after {} ms, {calls} calls answered ({syncs} syncs); \
         recovered the tree after {at} of the {} calls since the last sync (the latest \
         prefix with that tree)",
        delay.as_millis(),
        states.len() - 1
    );
}

#[test]
fn a_killed_daemon_leaves_the_tree_of_a_prefix_of_the_calls() {
    require_fuse!();
    for seed in seeds(&[6, 7, 8, 9, 10]) {
        run_until_killed(seed);
    }
}

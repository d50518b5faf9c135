//! The `fuser::Filesystem` adapter: decodes requests, takes the state lock, replies.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, Errno as FErrno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags,
    Generation, INodeNo, InitFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLseek,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use crate::answer::{
    AnsAttr, AnsCreate, AnsData, AnsDir, AnsDirPlus, AnsEmpty, AnsEntry, AnsLseek, AnsOpen,
    AnsRead, AnsStatfs, AnsWrite, AnsXattr, Pooled, Who,
};
use crate::external::{External, Forget};
use crate::fs::{Caller, NewNode, ReadPlan};
use crate::layout::Kind;
use crate::read_pool::{Finished, ReadPool};
use crate::requests::{Op, Requests};
use crate::state::{Errno, Node, State, ROOT_INO};
use crate::views::{self, Virtual};

/// Health summary provider for `/.basalt/health.json`.
pub type HealthFn = Arc<dyn Fn() -> serde_json::Value + Send + Sync>;

/// Tunables chosen at mount time.
#[derive(Clone, Debug)]
pub struct FsOptions {
    pub attr_ttl: Duration,
    pub entry_ttl: Duration,
    pub writeback_cache: bool,
    pub readdirplus: bool,
    /// The kernel keeps directory listings across opens ([`DIR_CACHE`];
    /// `-o no_dir_cache` turns it off).
    pub dir_cache: bool,
    pub max_write: u32,
    pub flush_interval: Duration,
    /// Threads serving queued engine reads beside the FUSE workers, each in batches
    /// (`-o read_threads=N`).
    pub read_threads: usize,
    /// FUSE worker threads serving this mount (`MountConfig::threads` resolved). With
    /// one, a lone read is never served on it: while it waited for the device the
    /// kernel's other queued requests would wait too.
    pub workers: usize,
    /// Kernel readahead of the mount in KiB (`-o readahead_kb=N`); 0 leaves the
    /// kernel's default (128 KiB for a FUSE mount).
    pub readahead_kb: u32,
    /// Serve requests over io_uring, with queue threads placed so (`-o io_uring`,
    /// `-o io_uring=same|other|none`); the null filesystem only, so far.
    pub io_uring: Option<crate::ring::Pinning>,
    /// Threads per io_uring queue (`-o io_uring_threads=N`), each with one entry: a
    /// handler blocks its thread (device reads, fsync), so each thread takes one
    /// request at a time and the kernel only hands requests to idle ones.
    pub io_uring_threads: usize,
}

/// An open file or directory.
enum Handle {
    File {
        ino: u64,
        /// Opened for writing (counted in the node's `writers`).
        write: bool,
    },
    Dir {
        entries: Vec<(u64, FileType, OsString)>,
    },
    Virtual {
        data: Vec<u8>,
    },
}

/// State shared by the FUSE workers, the flusher thread and the mount handle.
pub struct Shared {
    pub state: Mutex<State>,
    pub opts: FsOptions,
    handles: Mutex<HashMap<u64, Handle>>,
    next_fh: AtomicU64,
    virt: Mutex<HashMap<u64, Virtual>>,
    next_virt: AtomicU64,
    pub health: Option<HealthFn>,
    /// Set once the session ended (unmounted from inside or outside).
    pub done: Arc<Done>,
    /// Engine reads in flight off the FUSE workers.
    reads: ReadPool<(ReadPlan, Pooled)>,
    /// FUSE requests received, by operation.
    pub requests: Requests,
    /// The kernel granted `FUSE_HANDLE_KILLPRIV_V2`: this filesystem clears set-ID bits
    /// and capabilities on write, truncate and chown (see `Node::kill_priv`).
    killpriv: AtomicBool,
    /// INIT granted FUSE over io_uring (asked for with `-o io_uring`).
    pub ring_granted: AtomicBool,
    /// Documents written through the engine API, taken in by [`Shared::lock`], and
    /// where what the kernel must forget then goes (see `crate::external`).
    external: Arc<External>,
    forget: Sender<Forget>,
}

impl Shared {
    pub fn new(
        state: State,
        opts: FsOptions,
        health: Option<HealthFn>,
        external: Arc<External>,
        forget: Sender<Forget>,
    ) -> Shared {
        let mut virt = HashMap::new();
        virt.insert(views::DIR_INO, Virtual::Dir);
        virt.insert(views::STATS_INO, Virtual::Stats);
        virt.insert(views::HEALTH_INO, Virtual::Health);
        virt.insert(views::CHANGES_INO, Virtual::ChangesDir);
        let db = state.db.clone();
        Shared {
            state: Mutex::new(state),
            handles: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            virt: Mutex::new(virt),
            next_virt: AtomicU64::new(views::CHANGE_FILE_BASE),
            health,
            done: Arc::default(),
            reads: {
                ReadPool::new(
                    opts.read_threads,
                    opts.workers > 1,
                    move |batch: Vec<(ReadPlan, Pooled)>, done: &Finished<'_>| {
                        // Reads here sleep for their completions: a spinning reader
                        // takes the core the FUSE workers and the application need
                        // (fio randread 4k qd16: 12-17% slower with polling; qd1 only
                        // 6-7% faster).
                        basalt_engine::poll_reads_on_this_thread(false);
                        ReadPlan::execute_each(batch, &db, |reply, r| {
                            done.one();
                            reply_read(reply, r);
                        });
                    },
                )
            },
            requests: Requests::default(),
            killpriv: AtomicBool::new(false),
            ring_granted: AtomicBool::new(false),
            external,
            forget,
            opts,
        }
    }

    /// The state, with collections and documents changed through the engine API since
    /// the last call taken in.
    pub fn lock(&self) -> MutexGuard<'_, State> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut forget = st.take_in_catalog();
        if let Some(keys) = self.external.take() {
            forget.extend(st.take_in(keys));
        }
        for f in forget {
            if let Forget::Entry { parent, .. } | Forget::Deleted { parent, .. } = &f {
                st.listings_changed.insert(*parent);
            }
            let _ = self.forget.send(f);
        }
        st
    }

    fn handles(&self) -> MutexGuard<'_, HashMap<u64, Handle>> {
        self.handles.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn add_handle(&self, h: Handle) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.handles().insert(fh, h);
        fh
    }

    fn virt(&self, ino: u64) -> Option<Virtual> {
        self.virt
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&ino)
            .cloned()
    }

    fn virt_ino(&self, v: Virtual) -> u64 {
        let mut m = self.virt.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((&ino, _)) = m.iter().find(|(_, x)| **x == v) {
            return ino;
        }
        let ino = self.next_virt.fetch_add(1, Ordering::Relaxed);
        m.insert(ino, v);
        ino
    }

    /// Flushes all dirty data and makes the engine durable.
    pub fn flush_and_sync(&self) -> Result<(), Errno> {
        let db = {
            let mut st = self.lock();
            st.flush_all()?;
            st.db.clone()
        };
        db.flush()
            .map_err(|e| crate::state::engine_err("*", b"(flush)", &e))
    }
}

impl Shared {
    /// Writes the tree snapshot (`crate::tree_snapshot`) of a complete tree: flushed,
    /// with every engine-API write up to the engine's settled seqno taken in (taking
    /// the lock takes in what is queued).
    pub fn save_tree_snapshot(&self) -> Result<(), String> {
        for _ in 0..8 {
            let mut st = self.lock();
            crate::tree_snapshot::mark_unnamed(&mut st);
            st.flush_all()
                .map_err(|e| format!("flush: {}", std::io::Error::from_raw_os_error(e.0)))?;
            // A writer that never pauses (a tight loop through the engine API) must
            // not hold up the unmount: then no snapshot.
            let Some(seqno) = st.db.settled_seqno(std::time::Duration::from_secs(1)) else {
                return Err("engine-API writes never paused for a second".into());
            };
            let caught_up = !self.external.pending() && st.catalog_seen == st.db.catalog_changes();
            if !caught_up || !crate::tree_snapshot::is_settled(&st) {
                continue;
            }
            let snap = crate::tree_snapshot::Snapshot::of_state(&st, seqno)?;
            st.db.sync().map_err(|e| format!("sync: {e}"))?;
            return st
                .db
                .write_aux(crate::tree_snapshot::AUX_NAME, &snap.encode())
                .map_err(|e| format!("write: {e}"));
        }
        Err("the tree kept changing while it was saved".into())
    }
}

/// Set once a session ended (unmounted from inside or outside); shared by a
/// filesystem, its mount handle and the flusher.
#[derive(Default)]
pub struct Done {
    flag: Mutex<bool>,
    cv: Condvar,
}

impl Done {
    pub fn mark(&self) {
        *self.flag.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.cv.notify_all();
    }

    pub fn is_set(&self) -> bool {
        *self.flag.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn wait(&self) {
        let mut done = self.flag.lock().unwrap_or_else(|e| e.into_inner());
        while !*done {
            done = self.cv.wait(done).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Waits at most `d`; true once done.
    pub fn wait_timeout(&self, d: Duration) -> bool {
        let done = self.flag.lock().unwrap_or_else(|e| e.into_inner());
        let (done, _) = self
            .cv
            .wait_timeout_while(done, d, |done| !*done)
            .unwrap_or_else(|e| e.into_inner());
        *done
    }
}

/// `st_blksize` of real inodes.
pub const BLKSIZE: u32 = 128 << 10;

/// What this mount asks of the kernel at INIT (shared with the null filesystem, so
/// that both get the same requests); returns whether `FUSE_HANDLE_KILLPRIV_V2` was
/// granted.
pub fn negotiate(opts: &FsOptions, config: &mut KernelConfig) -> bool {
    // POSIX ACLs: the kernel enforces them; this filesystem stores them and applies the
    // umask itself, which a directory's default ACL replaces (`crate::acl`).
    let mut want = InitFlags::FUSE_PARALLEL_DIROPS
        | InitFlags::FUSE_ASYNC_DIO
        | InitFlags::FUSE_POSIX_ACL
        | InitFlags::FUSE_DONT_MASK;
    if opts.writeback_cache {
        want |= InitFlags::FUSE_WRITEBACK_CACHE;
    }
    if opts.readdirplus {
        want |= InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO;
    }
    for f in want.iter() {
        let _ = config.add_capabilities(f);
    }
    // Without it the kernel asks for security.capability (GETXATTR) before every
    // write(2), since FUSE mounts lack SB_NOSEC; with it, once per inode.
    let killpriv = config
        .add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV_V2)
        .is_ok();
    let _ = config.set_max_write(opts.max_write);
    // The kernel offers its current readahead (128 KiB) as the most it accepts here;
    // the mount raises it afterwards (`mount::set_readahead`).
    let _ = config.set_max_readahead(opts.max_write);
    let _ = config.set_max_background(64);
    let _ = config.set_congestion_threshold(48);
    killpriv
}

/// With `-o io_uring`, asks the kernel at INIT to serve the mount over io_uring;
/// returns whether it agreed (it must offer it: Linux 6.14+ with `enable_uring`).
pub fn ask_io_uring(opts: &FsOptions, config: &mut KernelConfig) -> bool {
    opts.io_uring.is_some()
        && config
            .add_capabilities(InitFlags::FUSE_OVER_IO_URING)
            .is_ok()
}

/// Open flags of a regular file: the page cache stays valid across opens (only this
/// mount changes the data) unless the caller asked for `O_DIRECT`.
pub fn fopen_flags(open_flags: i32) -> FopenFlags {
    if open_flags & libc::O_DIRECT != 0 {
        FopenFlags::FOPEN_DIRECT_IO
    } else {
        FopenFlags::FOPEN_KEEP_CACHE
    }
}

/// Open flags of a directory: the kernel keeps its listing in the directory's page
/// cache across opens and serves `readdir` from it until the directory changes. Its
/// own changes reset it. After changes made through the engine API the next OPENDIR
/// leaves out `FOPEN_KEEP_CACHE` (`State::listings_changed`), which drops it, and the
/// invalidation of the directory (`Forget::Inode`) drops it for handles already open.
pub const DIR_CACHE: FopenFlags = FopenFlags::FOPEN_CACHE_DIR.union(FopenFlags::FOPEN_KEEP_CACHE);

impl FsOptions {
    /// Open flags of a directory the kernel may cache: [`DIR_CACHE`] unless
    /// `-o no_dir_cache`.
    pub fn dir_open_flags(&self) -> FopenFlags {
        if self.dir_cache {
            DIR_CACHE
        } else {
            FopenFlags::empty()
        }
    }
}

/// The filesystem handed to `fuser`.
pub struct BasaltFs {
    pub shared: Arc<Shared>,
}

fn ferr(e: Errno) -> FErrno {
    FErrno::from_i32(e.0)
}

fn file_type(k: Kind) -> FileType {
    match k {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
        Kind::Symlink => FileType::Symlink,
        Kind::Fifo => FileType::NamedPipe,
        Kind::CharDev => FileType::CharDevice,
        Kind::BlockDev => FileType::BlockDevice,
        Kind::Socket => FileType::Socket,
    }
}

fn attr_of(n: &Node) -> FileAttr {
    FileAttr {
        ino: INodeNo(n.ino),
        size: n.size,
        blocks: n.size.div_ceil(512),
        atime: n.atime,
        mtime: n.mtime,
        ctime: n.ctime,
        crtime: n.crtime,
        kind: file_type(n.kind),
        perm: n.perm,
        nlink: n.nlink,
        uid: n.uid,
        gid: n.gid,
        rdev: n.rdev,
        blksize: BLKSIZE,
        flags: 0,
    }
}

fn virt_attr(ino: u64, v: &Virtual) -> FileAttr {
    let t = SystemTime::now();
    FileAttr {
        ino: INodeNo(ino),
        size: 0,
        blocks: 0,
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
        kind: if v.is_dir() {
            FileType::Directory
        } else {
            FileType::RegularFile
        },
        perm: if v.is_dir() { 0o555 } else { 0o444 },
        nlink: if v.is_dir() { 2 } else { 1 },
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

/// What a SETATTR asks to change (`None`: leave it as it is).
#[derive(Debug, Clone, Copy, Default)]
pub struct AttrChanges {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeOrNow>,
    pub mtime: Option<TimeOrNow>,
}

impl AttrChanges {
    /// From the arguments `fuser` hands to `Filesystem::setattr`; times before the
    /// epoch are corrected (see [`from_fuser_time`]).
    pub fn new(
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
    ) -> AttrChanges {
        AttrChanges {
            mode,
            uid,
            gid,
            size,
            atime: atime.map(from_fuser_time),
            mtime: mtime.map(from_fuser_time),
        }
    }
}

/// The time the kernel meant by a time `fuser` 0.18 decoded. For seconds `s < 0` and
/// nanoseconds `n` (the kernel's `-1.5 s` is `s = -2, n = 500_000_000`) it computes
/// `epoch - (|s| s + n ns)` instead of `epoch - |s| s + n ns`, up to two seconds too
/// early (`touch -d` of a time before 1970 stored 1 s early); a time at or after the
/// epoch is right. Undone here: for a time before the epoch, `|s|` and `n` are the
/// whole seconds and nanoseconds of its distance from the epoch.
fn from_fuser_time(t: TimeOrNow) -> TimeOrNow {
    let TimeOrNow::SpecificTime(at) = t else {
        return t;
    };
    match SystemTime::UNIX_EPOCH.duration_since(at) {
        Ok(before) if !before.is_zero() => {
            let secs = i64::try_from(before.as_secs()).ok().map(|s| -s);
            let meant = secs.and_then(|s| crate::layout::time_of(s, before.subsec_nanos()));
            TimeOrNow::SpecificTime(meant.unwrap_or(at))
        }
        _ => t,
    }
}

pub fn to_time(t: TimeOrNow) -> SystemTime {
    match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    }
}

/// The parts of a caller's credentials that a FUSE request does not carry, read from
/// `/proc/<pid>/status`: whether it has `CAP_FSETID` and its supplementary groups.
/// Read only when a set-ID bit is at stake. If the process is gone, root is taken as
/// capable and nobody else.
struct Creds {
    fsetid: bool,
    groups: Vec<u32>,
}

/// `linux/capability.h`
const CAP_FSETID: u32 = 4;

impl Creds {
    fn of(req: &Who) -> Creds {
        Self::parse(
            &std::fs::read_to_string(format!("/proc/{}/status", req.pid())).unwrap_or_default(),
        )
        .unwrap_or(Creds {
            fsetid: req.uid() == 0,
            groups: Vec::new(),
        })
    }

    fn parse(status: &str) -> Option<Creds> {
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
        };
        let cap = u64::from_str_radix(field("CapEff")?, 16).ok()?;
        let groups = field("Groups")?
            .split_whitespace()
            .filter_map(|g| g.parse().ok())
            .collect();
        Some(Creds {
            fsetid: cap & (1 << CAP_FSETID) != 0,
            groups,
        })
    }
}

impl BasaltFs {
    fn killpriv(&self) -> bool {
        self.shared.killpriv.load(Ordering::Relaxed)
    }

    fn caller(req: &Who) -> Caller {
        Caller {
            uid: req.uid(),
            gid: req.gid(),
        }
    }

    /// Attributes of a real or virtual inode.
    fn attr(&self, ino: u64) -> Result<FileAttr, Errno> {
        if let Some(v) = self.shared.virt(ino) {
            return Ok(virt_attr(ino, &v));
        }
        let st = self.shared.lock();
        Ok(attr_of(st.node(ino)?))
    }

    fn lookup_inner(&self, parent: u64, name: &OsStr) -> Result<FileAttr, Errno> {
        if name.len() > 255 {
            return Err(Errno(libc::ENAMETOOLONG));
        }
        if let Some(v) = self.shared.virt(parent) {
            let child = match (v, name.to_str()) {
                (Virtual::Dir, Some("stats.json")) => views::STATS_INO,
                (Virtual::Dir, Some("health.json")) => views::HEALTH_INO,
                (Virtual::Dir, Some("changes")) => views::CHANGES_INO,
                (Virtual::ChangesDir, Some(n)) => {
                    let (collection, since) = views::parse_feed_name(n);
                    if !self.shared.lock().coll_by_name.contains_key(&collection) {
                        return Err(Errno(libc::ENOENT));
                    }
                    self.shared.virt_ino(Virtual::Changes { collection, since })
                }
                _ => return Err(Errno(libc::ENOENT)),
            };
            return self.attr(child);
        }
        if parent == ROOT_INO && name == views::DIR_NAME {
            return self.attr(views::DIR_INO);
        }
        let mut st = self.shared.lock();
        let ino = match st.node(parent)?.children.get(name) {
            Some(&i) => i,
            None if parent == ROOT_INO => *st
                .node(parent)?
                .children
                .get(name)
                .ok_or(Errno(libc::ENOENT))?,
            None => {
                if !st.node(parent)?.is_dir() {
                    return Err(Errno(libc::ENOTDIR));
                }
                return Err(Errno(libc::ENOENT));
            }
        };
        let n = st.node_mut(ino)?;
        n.lookups += 1;
        Ok(attr_of(n))
    }

    fn entry(&self, reply: impl AnsEntry, r: Result<FileAttr, Errno>) {
        match r {
            Ok(a) => reply.entry(&self.shared.opts.entry_ttl, &a, Generation(0)),
            Err(e) => reply.error(ferr(e)),
        }
    }

    /// Creates something and returns its attributes with one lookup counted.
    fn make(
        &self,
        req: &Who,
        parent: u64,
        name: &OsStr,
        new: NewNode<'_>,
    ) -> Result<FileAttr, Errno> {
        if self.shared.virt(parent).is_some() {
            return Err(Errno(libc::EROFS));
        }
        let mut st = self.shared.lock();
        if parent == ROOT_INO {
            return if new.kind == Kind::Dir {
                self.make_collection(&mut st, req, name, new.mode & !new.umask)
            } else {
                Err(Errno(libc::EPERM))
            };
        }
        let ino = st.create(Self::caller(req), parent, name, new)?;
        let n = st.node_mut(ino)?;
        n.lookups += 1;
        Ok(attr_of(n))
    }

    fn make_collection(
        &self,
        st: &mut State,
        req: &Who,
        name: &OsStr,
        mode: u32,
    ) -> Result<FileAttr, Errno> {
        let s = name.to_str().ok_or(Errno(libc::EINVAL))?;
        if s.len() > 255 {
            return Err(Errno(libc::ENAMETOOLONG));
        }
        if s == views::DIR_NAME || st.node(ROOT_INO)?.children.contains_key(name) {
            return Err(Errno(libc::EEXIST));
        }
        st.db
            .create_collection(s)
            .map_err(|e| crate::state::engine_err(s, b"", &e))?;
        let root = crate::load::load_collection(st, s)
            .map_err(|e| crate::state::engine_err(s, b"", &e))?;
        crate::load::link_child(st, ROOT_INO, name.to_os_string(), root);
        let n = st.node_mut(root)?;
        n.perm = (mode & 0o7777) as u16;
        n.uid = req.uid();
        n.gid = req.gid();
        n.meta_dirty = true;
        let mut b = crate::state::Batch::default();
        st.put_inode(&mut b, root, true)?;
        b.commit(st)
            .map_err(|e| crate::state::engine_err(s, b"", &e))?;
        let now = SystemTime::now();
        let r = st.node_mut(ROOT_INO)?;
        r.mtime = now;
        r.ctime = now;
        let n = st.node_mut(root)?;
        n.persisted = true;
        n.meta_dirty = false;
        n.lookups += 1;
        Ok(attr_of(n))
    }

    fn remove(&self, parent: u64, name: &OsStr, dir: bool) -> Result<(), Errno> {
        if self.shared.virt(parent).is_some() || (parent == ROOT_INO && name == views::DIR_NAME) {
            return Err(Errno(libc::EROFS));
        }
        let mut st = self.shared.lock();
        if parent == ROOT_INO {
            let ino = *st
                .node(ROOT_INO)?
                .children
                .get(name)
                .ok_or(Errno(libc::ENOENT))?;
            if !dir {
                return Err(Errno(libc::EISDIR));
            }
            let cname = name.to_str().ok_or(Errno(libc::EINVAL))?.to_string();
            if !st.node(ino)?.children.is_empty() || st.holds_documents(&cname)? {
                return Err(Errno(libc::ENOTEMPTY));
            }
            st.db
                .drop_collection(&cname)
                .map_err(|e| crate::state::engine_err(&cname, b"", &e))?;
            crate::load::unlink_child(&mut st, ROOT_INO, name);
            if let Some(id) = st.coll_by_name.remove(&cname) {
                st.colls.remove(&id);
            }
            st.maybe_forget(ino);
            return Ok(());
        }
        st.unlink(parent, name, dir)
    }

    fn rename_collection(&self, from: &OsStr, to: &OsStr, noreplace: bool) -> Result<(), Errno> {
        let mut st = self.shared.lock();
        let (f, t) = match (from.to_str(), to.to_str()) {
            (Some(f), Some(t)) => (f.to_string(), t.to_string()),
            _ => return Err(Errno(libc::EINVAL)),
        };
        if t == views::DIR_NAME || f == views::DIR_NAME {
            return Err(Errno(libc::EPERM));
        }
        let src = *st
            .node(ROOT_INO)?
            .children
            .get(from)
            .ok_or(Errno(libc::ENOENT))?;
        if f == t {
            return Ok(());
        }
        if let Some(&dst) = st.node(ROOT_INO)?.children.get(to) {
            if noreplace {
                return Err(Errno(libc::EEXIST));
            }
            if !st.node(dst)?.children.is_empty() || st.holds_documents(&t)? {
                return Err(Errno(libc::ENOTEMPTY));
            }
            st.db
                .drop_collection(&t)
                .map_err(|e| crate::state::engine_err(&t, b"", &e))?;
            crate::load::unlink_child(&mut st, ROOT_INO, to);
            if let Some(id) = st.coll_by_name.remove(&t) {
                st.colls.remove(&id);
            }
            st.maybe_forget(dst);
        }
        st.flush_all()?;
        st.db
            .rename_collection(&f, &t)
            .map_err(|e| crate::state::engine_err(&f, b"", &e))?;
        if let Some(id) = st.coll_by_name.remove(&f) {
            st.name_collection(id, &t);
        }
        crate::load::unlink_child(&mut st, ROOT_INO, from);
        crate::load::link_child(&mut st, ROOT_INO, to.to_os_string(), src);
        let now = SystemTime::now();
        let n = st.node_mut(src)?;
        n.ctime = now;
        n.meta_dirty = true;
        st.mark_dirty(src);
        Ok(())
    }

    /// `RENAME_EXCHANGE` of two collections: the engine swaps their names in one
    /// catalog batch, and the root's two entries swap inodes.
    fn exchange_collections(&self, a: &OsStr, b: &OsStr) -> Result<(), Errno> {
        let mut st = self.shared.lock();
        let root = st.node(ROOT_INO)?;
        let ia = *root.children.get(a).ok_or(Errno(libc::ENOENT))?;
        let ib = *root.children.get(b).ok_or(Errno(libc::ENOENT))?;
        if ia == ib {
            return Ok(());
        }
        let (Some(na), Some(nb)) = (a.to_str(), b.to_str()) else {
            return Err(Errno(libc::EINVAL));
        };
        // Unflushed writes are batched by collection name.
        st.flush_all()?;
        st.db
            .exchange_collections(na, nb)
            .map_err(|e| crate::state::engine_err(na, b"", &e))?;
        let (ida, idb) = (st.coll_by_name.remove(na), st.coll_by_name.remove(nb));
        for (id, name) in [(ida, nb), (idb, na)] {
            if let Some(id) = id {
                st.name_collection(id, name);
            }
        }
        crate::load::unlink_child(&mut st, ROOT_INO, a);
        crate::load::unlink_child(&mut st, ROOT_INO, b);
        crate::load::link_child(&mut st, ROOT_INO, a.to_os_string(), ib);
        crate::load::link_child(&mut st, ROOT_INO, b.to_os_string(), ia);
        let now = SystemTime::now();
        for ino in [ia, ib] {
            let n = st.node_mut(ino)?;
            n.ctime = now;
            n.meta_dirty = true;
            st.mark_dirty(ino);
        }
        Ok(())
    }

    fn open_virtual(&self, v: &Virtual) -> Result<Vec<u8>, Errno> {
        let db = self.shared.lock().db.clone();
        let json = match v {
            Virtual::Stats => {
                let engine: serde_json::Value =
                    serde_json::from_str(&db.stats().to_json()).unwrap_or_default();
                let st = self.shared.lock();
                let files = st.nodes.values().filter(|n| n.kind == Kind::File).count();
                let dirs = st.nodes.values().filter(|n| n.is_dir()).count();
                let dirty: usize = st.nodes.values().map(|n| n.chunks.dirty_bytes).sum();
                serde_json::json!({
                    "engine": engine,
                    "filesystem": {
                        "inodes": st.nodes.len(),
                        "files": files,
                        "directories": dirs,
                        "collections": st.colls.len(),
                        "dirty_bytes": dirty,
                        "dirty_inodes": st.dirty_nodes.len(),
                        "chunks": st.chunk_io.to_json(&st.nodes),
                        "chunk_size": st.chunk_size,
                        "writeback_cache": self.shared.opts.writeback_cache,
                        "readdirplus": self.shared.opts.readdirplus,
                        "dir_cache": self.shared.opts.dir_cache,
                        "max_write": self.shared.opts.max_write,
                        "requests": self.shared.requests.to_json(),
                        "read_pool": self.shared.reads.to_json(),
                        "tree_loaded_from": st.tree_loaded.to_json(),
                    }
                })
            }
            Virtual::Health => match &self.shared.health {
                Some(f) => f(),
                None => serde_json::json!({
                    "status": "unknown",
                    "reason": "no SSD health monitor is attached to this mount",
                }),
            },
            Virtual::Changes { collection, since } => {
                return views::change_feed(&db, collection, *since)
                    .map_err(|e| crate::state::engine_err(collection, b"(changes)", &e));
            }
            Virtual::Dir | Virtual::ChangesDir => return Err(Errno(libc::EISDIR)),
        };
        let mut out = serde_json::to_vec_pretty(&json).unwrap_or_default();
        out.push(b'\n');
        Ok(out)
    }

    fn dir_entries(&self, ino: u64) -> Result<Vec<(u64, FileType, OsString)>, Errno> {
        let mut out = Vec::new();
        if let Some(v) = self.shared.virt(ino) {
            let parent = if v == Virtual::Dir {
                ROOT_INO
            } else {
                views::DIR_INO
            };
            out.push((ino, FileType::Directory, OsString::from(".")));
            out.push((parent, FileType::Directory, OsString::from("..")));
            match v {
                Virtual::Dir => {
                    out.push((views::STATS_INO, FileType::RegularFile, "stats.json".into()));
                    out.push((
                        views::HEALTH_INO,
                        FileType::RegularFile,
                        "health.json".into(),
                    ));
                    out.push((views::CHANGES_INO, FileType::Directory, "changes".into()));
                }
                Virtual::ChangesDir => {
                    let names: Vec<String> =
                        self.shared.lock().coll_by_name.keys().cloned().collect();
                    for collection in names {
                        let i = self.shared.virt_ino(Virtual::Changes {
                            collection: collection.clone(),
                            since: 0,
                        });
                        out.push((i, FileType::RegularFile, collection.into()));
                    }
                }
                _ => return Err(Errno(libc::ENOTDIR)),
            }
            return Ok(out);
        }
        let st = self.shared.lock();
        let n = st.node(ino)?;
        if !n.is_dir() {
            return Err(Errno(libc::ENOTDIR));
        }
        let parent = n.links.iter().next().map(|l| l.0).unwrap_or(ROOT_INO);
        out.push((ino, FileType::Directory, OsString::from(".")));
        out.push((parent, FileType::Directory, OsString::from("..")));
        if ino == ROOT_INO {
            out.push((views::DIR_INO, FileType::Directory, views::DIR_NAME.into()));
        }
        for (name, &c) in n.children.iter() {
            if let Some(cn) = st.nodes.get(&c) {
                out.push((c, file_type(cn.kind), name.clone()));
            }
        }
        Ok(out)
    }

    fn setattr_inner(&self, req: &Who, ino: u64, ch: AttrChanges) -> Result<FileAttr, Errno> {
        if self.shared.virt(ino).is_some() {
            return Err(Errno(libc::EROFS));
        }
        let mut st = self.shared.lock();
        if self.killpriv() {
            // With FUSE_HANDLE_KILLPRIV_V2 the kernel leaves these to the filesystem (it
            // flags them with FATTR_KILL_SUIDGID, which fuser does not pass on; the rules
            // below are the ones the kernel applies before setting that flag).
            let n = st.node_mut(ino)?;
            let setid = n.privileged();
            if setid && !n.is_dir() && (ch.uid.is_some() || ch.gid.is_some()) {
                // chown: always, like the VFS; set-group-ID without group execute only
                // when the caller is outside the file's group and not CAP_FSETID.
                let c = Creds::of(req);
                let in_group = req.gid() == n.gid || c.groups.contains(&n.gid);
                n.kill_priv(!in_group && !c.fsetid);
            } else if setid && n.kind == Kind::File && ch.size.is_some() && !Creds::of(req).fsetid {
                // truncate by a caller without CAP_FSETID
                n.kill_priv(false);
            }
        }
        if let Some(s) = ch.size {
            st.truncate(ino, s)?;
        }
        let now = SystemTime::now();
        let n = st.node_mut(ino)?;
        if let Some(m) = ch.mode {
            n.perm = (m & 0o7777) as u16;
            crate::acl::follow_chmod(n);
        }
        if let Some(u) = ch.uid {
            n.uid = u;
        }
        if let Some(g) = ch.gid {
            n.gid = g;
        }
        if let Some(a) = ch.atime {
            n.atime = to_time(a);
        }
        if let Some(m) = ch.mtime {
            n.mtime = to_time(m);
        }
        n.ctime = now;
        n.meta_dirty = true;
        st.mark_dirty(ino);
        // Committed now. Leaving mode, owner and times for the node's next flush cut
        // an untar's engine commits by 60% but made untar of a source tree 15-25%
        // slower (fusefs/ARCHITECTURE.md, "In-memory state and write path").
        st.flush_node(ino)?;
        Ok(attr_of(st.node(ino)?))
    }

    fn open_file(&self, ino: u64, flags: i32) -> Result<(u64, FopenFlags), Errno> {
        if let Some(v) = self.shared.virt(ino) {
            if flags & libc::O_ACCMODE != libc::O_RDONLY {
                return Err(Errno(libc::EROFS));
            }
            let data = if v.is_dir() {
                Vec::new()
            } else {
                self.open_virtual(&v)?
            };
            let fh = self.shared.add_handle(Handle::Virtual { data });
            return Ok((fh, FopenFlags::FOPEN_DIRECT_IO));
        }
        let write = flags & libc::O_ACCMODE != libc::O_RDONLY;
        {
            let mut st = self.shared.lock();
            let n = st.node_mut(ino)?;
            if n.is_dir() && flags & libc::O_ACCMODE != libc::O_RDONLY {
                return Err(Errno(libc::EISDIR));
            }
            if !n.is_dir() && n.nlink == 0 && n.open == 0 {
                // Reached through a name the kernel has not forgotten yet (a document
                // replaced or deleted through the engine API, see `crate::external`):
                // ESTALE makes the kernel look the path up again and open what is
                // there now, as a path walk racing a rename over the file would.
                return Err(Errno(libc::ESTALE));
            }
            n.open += 1;
            if write {
                n.writers += 1;
            }
        }
        let fh = self.shared.add_handle(Handle::File { ino, write });
        Ok((fh, fopen_flags(flags)))
    }

    fn release_file(&self, fh: u64) -> Result<(), Errno> {
        let h = self.shared.handles().remove(&fh);
        let Some(Handle::File { ino, write }) = h else {
            return Ok(());
        };
        let mut st = self.shared.lock();
        let n = st.node_mut(ino)?;
        n.open = n.open.saturating_sub(1);
        if write {
            n.writers = n.writers.saturating_sub(1);
            if n.writers == 0 {
                n.drop_tail();
            }
        }
        if n.open == 0 && n.nlink == 0 {
            // Last close of an unlinked file: its data goes now.
            let mut b = crate::state::Batch::default();
            st.purge_inode(ino, &mut b)?;
            let coll = st.coll_name(st.node(ino)?.coll)?.to_string();
            b.commit(&st)
                .map_err(|e| crate::state::engine_err(&coll, b"(unlinked file)", &e))?;
            st.dirty_nodes.remove(&ino);
            if let Some(n) = st.nodes.get_mut(&ino) {
                n.drop_dirty();
                n.meta_dirty = false;
            }
            st.maybe_forget(ino);
            return Ok(());
        }
        st.flush_node(ino)
    }
}

/// Answers READ with a read's bytes or its error.
pub(crate) fn reply_read(reply: impl AnsData, r: Result<&[u8], Errno>) {
    match r {
        Ok(d) => reply.data(d),
        Err(e) => reply.error(ferr(e)),
    }
}

fn reply_empty(reply: impl AnsEmpty, r: Result<(), Errno>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(ferr(e)),
    }
}

/// Answers READDIR from a directory handle's listing, from entry `offset` on (the
/// offset of an entry is its index + 1), as many entries as fit.
pub(crate) fn reply_listing(
    entries: &[(u64, FileType, OsString)],
    offset: u64,
    mut reply: impl AnsDir,
) {
    for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
        if reply.add(INodeNo(*ino), (i + 1) as u64, *kind, name) {
            break;
        }
    }
    reply.ok();
}

pub fn xattr_reply(reply: impl AnsXattr, size: u32, data: Vec<u8>) {
    if size == 0 {
        reply.size(data.len() as u32);
    } else if (size as usize) < data.len() {
        reply.error(FErrno::from_i32(libc::ERANGE));
    } else {
        reply.data(&data);
    }
}

impl BasaltFs {
    pub(crate) fn do_lookup(
        &self,
        _req: &Who,
        parent: INodeNo,
        name: &OsStr,
        reply: impl AnsEntry,
    ) {
        self.shared.requests.count(Op::Lookup);
        self.entry(reply, self.lookup_inner(parent.0, name));
    }

    pub(crate) fn do_getattr(
        &self,
        _req: &Who,
        ino: INodeNo,
        _fh: Option<FileHandle>,
        reply: impl AnsAttr,
    ) {
        self.shared.requests.count(Op::Getattr);
        match self.attr(ino.0) {
            Ok(a) => reply.attr(&self.shared.opts.attr_ttl, &a),
            Err(e) => reply.error(ferr(e)),
        }
    }

    pub(crate) fn do_setattr(&self, req: &Who, ino: INodeNo, ch: AttrChanges, reply: impl AnsAttr) {
        self.shared.requests.count(Op::Setattr);
        match self.setattr_inner(req, ino.0, ch) {
            Ok(a) => reply.attr(&self.shared.opts.attr_ttl, &a),
            Err(e) => reply.error(ferr(e)),
        }
    }

    pub(crate) fn do_readlink(&self, _req: &Who, ino: INodeNo, reply: impl AnsData) {
        self.shared.requests.count(Op::Readlink);
        let st = self.shared.lock();
        match st.node(ino.0) {
            Ok(n) if n.kind == Kind::Symlink => reply.data(&n.symlink),
            Ok(_) => reply.error(FErrno::from_i32(libc::EINVAL)),
            Err(e) => reply.error(ferr(e)),
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn do_mknod(
        &self,
        req: &Who,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: impl AnsEntry,
    ) {
        self.shared.requests.count(Op::Mknod);
        let kind = match mode & libc::S_IFMT {
            libc::S_IFREG | 0 => Kind::File,
            libc::S_IFIFO => Kind::Fifo,
            libc::S_IFCHR => Kind::CharDev,
            libc::S_IFBLK => Kind::BlockDev,
            libc::S_IFSOCK => Kind::Socket,
            libc::S_IFDIR => Kind::Dir,
            _ => return reply.error(FErrno::from_i32(libc::EINVAL)),
        };
        let new = NewNode {
            kind,
            mode,
            umask,
            rdev,
            symlink: b"",
        };
        self.entry(reply, self.make(req, parent.0, name, new));
    }

    pub(crate) fn do_mkdir(
        &self,
        req: &Who,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: impl AnsEntry,
    ) {
        self.shared.requests.count(Op::Mkdir);
        let new = NewNode {
            kind: Kind::Dir,
            mode,
            umask,
            rdev: 0,
            symlink: b"",
        };
        self.entry(reply, self.make(req, parent.0, name, new));
    }

    pub(crate) fn do_unlink(
        &self,
        _req: &Who,
        parent: INodeNo,
        name: &OsStr,
        reply: impl AnsEmpty,
    ) {
        self.shared.requests.count(Op::Unlink);
        reply_empty(reply, self.remove(parent.0, name, false));
    }

    pub(crate) fn do_rmdir(&self, _req: &Who, parent: INodeNo, name: &OsStr, reply: impl AnsEmpty) {
        self.shared.requests.count(Op::Rmdir);
        reply_empty(reply, self.remove(parent.0, name, true));
    }

    pub(crate) fn do_symlink(
        &self,
        req: &Who,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: impl AnsEntry,
    ) {
        self.shared.requests.count(Op::Symlink);
        let t = target.as_os_str().as_bytes();
        if t.len() >= 4096 {
            return reply.error(FErrno::from_i32(libc::ENAMETOOLONG));
        }
        let new = NewNode {
            kind: Kind::Symlink,
            mode: 0o777,
            umask: 0,
            rdev: 0,
            symlink: t,
        };
        self.entry(reply, self.make(req, parent.0, link_name, new));
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn do_rename(
        &self,
        _req: &Who,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: impl AnsEmpty,
    ) {
        self.shared.requests.count(Op::Rename);
        let noreplace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        let exchange = flags.contains(RenameFlags::RENAME_EXCHANGE);
        if flags.contains(RenameFlags::RENAME_WHITEOUT) || (exchange && noreplace) {
            return reply.error(FErrno::from_i32(libc::EINVAL));
        }
        let (p, np) = (parent.0, newparent.0);
        if self.shared.virt(p).is_some()
            || self.shared.virt(np).is_some()
            || (p == ROOT_INO && name == views::DIR_NAME)
            || (np == ROOT_INO && newname == views::DIR_NAME)
        {
            return reply.error(FErrno::from_i32(libc::EROFS));
        }
        let r = if exchange && p == ROOT_INO && np == ROOT_INO {
            self.exchange_collections(name, newname)
        } else if exchange && (p == ROOT_INO || np == ROOT_INO) {
            Err(Errno(libc::EXDEV)) // a collection is no directory inside one
        } else if exchange {
            self.shared.lock().exchange(p, name, np, newname)
        } else if p == ROOT_INO && np == ROOT_INO {
            self.rename_collection(name, newname, noreplace)
        } else if p == ROOT_INO || np == ROOT_INO {
            Err(Errno(libc::EXDEV))
        } else {
            self.shared.lock().rename(p, name, np, newname, noreplace)
        };
        reply_empty(reply, r);
    }

    pub(crate) fn do_link(
        &self,
        _req: &Who,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: impl AnsEntry,
    ) {
        self.shared.requests.count(Op::Link);
        if self.shared.virt(ino.0).is_some() || self.shared.virt(newparent.0).is_some() {
            return reply.error(FErrno::from_i32(libc::EROFS));
        }
        let r = (|| {
            let mut st = self.shared.lock();
            st.link(ino.0, newparent.0, newname)?;
            let n = st.node_mut(ino.0)?;
            n.lookups += 1;
            Ok(attr_of(n))
        })();
        self.entry(reply, r);
    }

    pub(crate) fn do_open(&self, _req: &Who, ino: INodeNo, flags: OpenFlags, reply: impl AnsOpen) {
        self.shared.requests.count(Op::Open);
        match self.open_file(ino.0, flags.0) {
            Ok((fh, fl)) => reply.opened(FileHandle(fh), fl),
            Err(e) => reply.error(ferr(e)),
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn do_read(
        &self,
        _req: &Who,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: impl AnsRead,
    ) {
        self.shared.requests.count(Op::Read);
        if let Some(Handle::Virtual { data }) = self.shared.handles().get(&fh.0) {
            let a = (offset as usize).min(data.len());
            let z = a.saturating_add(size as usize).min(data.len());
            return reply.data(&data[a..z]);
        }
        let plan = {
            let mut st = self.shared.lock();
            st.plan_read(ino.0, offset, size)
                .map(|p| (p, st.db.clone()))
        };
        match plan {
            Err(e) => reply.error(ferr(e)),
            Ok((p, db)) if p.in_memory() => {
                ReadPlan::execute_each(vec![(p, reply)], &db, reply_read)
            }
            Ok((p, db)) => reply.read_device(p, &db, &self.shared.reads),
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn do_write(
        &self,
        _req: &Who,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: impl AnsWrite,
    ) {
        self.shared.requests.count(Op::Write);
        if self.shared.virt(ino.0).is_some() {
            return reply.error(FErrno::from_i32(libc::EROFS));
        }
        let r = (|| {
            let mut st = self.shared.lock();
            // The kernel has decided (caller without CAP_FSETID) and says so per write.
            if self.killpriv()
                && write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID)
                && st.node_mut(ino.0)?.kill_priv(false)
            {
                st.mark_dirty(ino.0);
            }
            st.write(ino.0, offset, data)
        })();
        match r {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(ferr(e)),
        }
    }

    /// Declined, so that the kernel stops sending FLUSH (it remembers ENOSYS for the
    /// connection) and `close` costs one round trip less. Nothing is lost: with the
    /// writeback cache the kernel has already written the dirty pages (WRITE) and
    /// reported their errors before it would send FLUSH, the data is committed to the
    /// engine at RELEASE (sent right after the last close, without the closer waiting)
    /// or by the flusher, and `fsync` still commits and syncs before it returns. Locks
    /// are the kernel's, so there is no lock owner to release here.
    pub(crate) fn do_flush(
        &self,
        _req: &Who,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: impl AnsEmpty,
    ) {
        self.shared.requests.count(Op::Flush);
        reply.error(FErrno::from_i32(libc::ENOSYS));
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn do_release(
        &self,
        _req: &Who,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: impl AnsEmpty,
    ) {
        self.shared.requests.count(Op::Release);
        reply_empty(reply, self.release_file(fh.0));
    }

    pub(crate) fn do_fsync(
        &self,
        _req: &Who,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: impl AnsEmpty,
    ) {
        self.shared.requests.count(Op::Fsync);
        if self.shared.virt(ino.0).is_some() {
            return reply.ok();
        }
        reply_empty(reply, self.flush_and_sync(ino.0, b"(fsync)"));
    }

    /// `fsync` and `fsyncdir`: flushes `ino` and every node with only attribute
    /// changes pending, then makes the engine durable (`what` names the call in logs).
    fn flush_and_sync(&self, ino: u64, what: &[u8]) -> Result<(), Errno> {
        let db = {
            let mut st = self.shared.lock();
            st.flush_node(ino)?;
            st.flush_attributes()?;
            st.db.clone()
        };
        db.sync()
            .map_err(|e| crate::state::engine_err("*", what, &e))
    }

    pub(crate) fn do_opendir(
        &self,
        _req: &Who,
        ino: INodeNo,
        _flags: OpenFlags,
        reply: impl AnsOpen,
    ) {
        self.shared.requests.count(Op::Opendir);
        match self.dir_entries(ino.0) {
            Ok(entries) => {
                let fh = self.shared.add_handle(Handle::Dir { entries });
                let flags = if self.shared.virt(ino.0).is_some() {
                    FopenFlags::empty() // generated: may change with nothing said
                } else if self.shared.lock().listings_changed.remove(&ino.0) {
                    // At once, not when the forget thread's invalidation lands.
                    self.shared.opts.dir_open_flags() - FopenFlags::FOPEN_KEEP_CACHE
                } else {
                    self.shared.opts.dir_open_flags()
                };
                reply.opened(FileHandle(fh), flags);
            }
            Err(e) => reply.error(ferr(e)),
        }
    }

    pub(crate) fn do_readdir(
        &self,
        _req: &Who,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: impl AnsDir,
    ) {
        self.shared.requests.count(Op::Readdir);
        let handles = self.shared.handles();
        let Some(Handle::Dir { entries }) = handles.get(&fh.0) else {
            return reply.error(FErrno::from_i32(libc::EBADF));
        };
        reply_listing(entries, offset, reply);
    }

    pub(crate) fn do_readdirplus(
        &self,
        _req: &Who,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: impl AnsDirPlus,
    ) {
        self.shared.requests.count(Op::Readdirplus);
        let entries: Vec<(u64, FileType, OsString)> = {
            let handles = self.shared.handles();
            let Some(Handle::Dir { entries }) = handles.get(&fh.0) else {
                return reply.error(FErrno::from_i32(libc::EBADF));
            };
            entries.iter().skip(offset as usize).cloned().collect()
        };
        let ttl = self.shared.opts.entry_ttl;
        for (i, (ino, _kind, name)) in entries.iter().enumerate() {
            let dot = name == "." || name == "..";
            let attr = if let Some(v) = self.shared.virt(*ino) {
                virt_attr(*ino, &v)
            } else {
                let mut st = self.shared.lock();
                let Some(n) = st.nodes.get_mut(ino) else {
                    continue;
                };
                let a = attr_of(n);
                if !dot {
                    n.lookups += 1;
                }
                a
            };
            let full = reply.add(
                INodeNo(*ino),
                offset + i as u64 + 1,
                name,
                &ttl,
                &attr,
                Generation(0),
            );
            if full {
                // Not sent: give back the lookup counted above.
                if !dot && self.shared.virt(*ino).is_none() {
                    let mut st = self.shared.lock();
                    if let Some(n) = st.nodes.get_mut(ino) {
                        n.lookups = n.lookups.saturating_sub(1);
                    }
                }
                break;
            }
        }
        reply.ok();
    }

    pub(crate) fn do_releasedir(
        &self,
        _req: &Who,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: impl AnsEmpty,
    ) {
        self.shared.requests.count(Op::Releasedir);
        self.shared.handles().remove(&fh.0);
        reply.ok();
    }

    pub(crate) fn do_fsyncdir(
        &self,
        _req: &Who,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: impl AnsEmpty,
    ) {
        self.shared.requests.count(Op::Fsyncdir);
        reply_empty(reply, self.flush_and_sync(ino.0, b"(fsyncdir)"));
    }

    pub(crate) fn do_statfs(&self, _req: &Who, _ino: INodeNo, reply: impl AnsStatfs) {
        self.shared.requests.count(Op::Statfs);
        let (path, files) = {
            let st = self.shared.lock();
            (st.db.path().to_path_buf(), st.nodes.len() as u64)
        };
        let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap_or_default();
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: `c` is a valid NUL-terminated path and `s` a valid out pointer.
        let rc = unsafe { libc::statvfs(c.as_ptr(), &mut s) };
        if rc != 0 {
            return reply.error(FErrno::from_i32(libc::EIO));
        }
        let ffree = (s.f_ffree as u64).max(1 << 20);
        reply.statfs(
            s.f_blocks as u64,
            s.f_bfree as u64,
            s.f_bavail as u64,
            files + ffree,
            ffree,
            s.f_bsize as u32,
            255,
            s.f_frsize as u32,
        );
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn do_setxattr(
        &self,
        _req: &Who,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: impl AnsEmpty,
    ) {
        self.shared.requests.count(Op::Setxattr);
        if self.shared.virt(ino.0).is_some() {
            return reply.error(FErrno::from_i32(libc::EROFS));
        }
        let r = (|| {
            let k = name.as_bytes();
            if k.len() > 255 {
                return Err(Errno(libc::ERANGE));
            }
            if value.len() > 65536 {
                return Err(Errno(libc::E2BIG));
            }
            let mut st = self.shared.lock();
            let n = st.node_mut(ino.0)?;
            let exists = n.xattrs.contains_key(k);
            if flags & libc::XATTR_CREATE != 0 && exists {
                return Err(Errno(libc::EEXIST));
            }
            if flags & libc::XATTR_REPLACE != 0 && !exists {
                return Err(Errno(libc::ENODATA));
            }
            match k {
                crate::acl::ACCESS => crate::acl::set_access(n, value)?,
                crate::acl::DEFAULT => {
                    crate::acl::Acl::decode(value)?;
                    n.xattrs.insert(k.to_vec(), value.to_vec());
                }
                _ => {
                    n.xattrs.insert(k.to_vec(), value.to_vec());
                }
            }
            n.ctime = SystemTime::now();
            n.meta_dirty = true;
            st.mark_dirty(ino.0);
            st.flush_node(ino.0)
        })();
        reply_empty(reply, r);
    }

    pub(crate) fn do_getxattr(
        &self,
        _req: &Who,
        ino: INodeNo,
        name: &OsStr,
        size: u32,
        reply: impl AnsXattr,
    ) {
        self.shared.requests.count(Op::Getxattr);
        if self.shared.virt(ino.0).is_some() {
            return reply.error(FErrno::from_i32(libc::ENODATA));
        }
        let st = self.shared.lock();
        match st.node(ino.0) {
            Ok(n) => match n.xattrs.get(name.as_bytes()) {
                Some(v) => xattr_reply(reply, size, v.clone()),
                None => reply.error(FErrno::from_i32(libc::ENODATA)),
            },
            Err(e) => reply.error(ferr(e)),
        }
    }

    pub(crate) fn do_listxattr(&self, _req: &Who, ino: INodeNo, size: u32, reply: impl AnsXattr) {
        self.shared.requests.count(Op::Listxattr);
        if self.shared.virt(ino.0).is_some() {
            return xattr_reply(reply, size, Vec::new());
        }
        let st = self.shared.lock();
        match st.node(ino.0) {
            Ok(n) => {
                let mut out = Vec::new();
                for k in n.xattrs.keys() {
                    out.extend_from_slice(k);
                    out.push(0);
                }
                xattr_reply(reply, size, out)
            }
            Err(e) => reply.error(ferr(e)),
        }
    }

    pub(crate) fn do_removexattr(
        &self,
        _req: &Who,
        ino: INodeNo,
        name: &OsStr,
        reply: impl AnsEmpty,
    ) {
        self.shared.requests.count(Op::Removexattr);
        if self.shared.virt(ino.0).is_some() {
            return reply.error(FErrno::from_i32(libc::EROFS));
        }
        let r = (|| {
            let mut st = self.shared.lock();
            let n = st.node_mut(ino.0)?;
            let removed = (n.xattrs.existing()).and_then(|x| x.remove(name.as_bytes()));
            n.xattrs.shrink();
            if removed.is_none() {
                return Err(Errno(libc::ENODATA));
            }
            n.ctime = SystemTime::now();
            n.meta_dirty = true;
            st.mark_dirty(ino.0);
            st.flush_node(ino.0)
        })();
        reply_empty(reply, r);
    }

    pub(crate) fn do_access(
        &self,
        _req: &Who,
        ino: INodeNo,
        _mask: AccessFlags,
        reply: impl AnsEmpty,
    ) {
        self.shared.requests.count(Op::Access);
        // Permission checks are the kernel's (default_permissions).
        reply_empty(reply, self.attr(ino.0).map(|_| ()));
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn do_create(
        &self,
        req: &Who,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: impl AnsCreate,
    ) {
        self.shared.requests.count(Op::Create);
        let new = NewNode {
            kind: Kind::File,
            mode,
            umask,
            rdev: 0,
            symlink: b"",
        };
        let r = self.make(req, parent.0, name, new).and_then(|a| {
            let (fh, fl) = self.open_file(a.ino.0, flags)?;
            Ok((a, fh, fl))
        });
        match r {
            Ok((a, fh, fl)) => reply.created(
                &self.shared.opts.entry_ttl,
                &a,
                Generation(0),
                FileHandle(fh),
                fl,
            ),
            Err(e) => reply.error(ferr(e)),
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn do_fallocate(
        &self,
        req: &Who,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: impl AnsEmpty,
    ) {
        self.shared.requests.count(Op::Fallocate);
        if self.shared.virt(ino.0).is_some() {
            return reply.error(FErrno::from_i32(libc::EROFS));
        }
        let r = (|| {
            let mut st = self.shared.lock();
            // Like ext4 (file_modified); the kernel's own attempt is dropped under
            // FUSE_HANDLE_KILLPRIV_V2 and no flag tells us, so the rule is applied here.
            if self.killpriv() && st.node(ino.0)?.privileged() && !Creds::of(req).fsetid {
                st.node_mut(ino.0)?.kill_priv(false);
                st.mark_dirty(ino.0);
            }
            st.fallocate(ino.0, offset, length, mode)
        })();
        reply_empty(reply, r);
    }

    pub(crate) fn do_lseek(
        &self,
        _req: &Who,
        ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: impl AnsLseek,
    ) {
        self.shared.requests.count(Op::Lseek);
        if let Some(Handle::Virtual { data }) = self.shared.handles().get(&fh.0) {
            // A view's file is all data: its handle holds the bytes it shows.
            let (len, off) = (data.len() as i64, offset);
            return match whence {
                _ if off < 0 || off >= len => reply.error(FErrno::from_i32(libc::ENXIO)),
                libc::SEEK_DATA => reply.offset(off),
                _ => reply.offset(len),
            };
        }
        match self.shared.lock().seek_data_hole(ino.0, offset, whence) {
            Ok(at) => reply.offset(at),
            Err(e) => reply.error(ferr(e)),
        }
    }
}

impl Filesystem for BasaltFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let killpriv = negotiate(&self.shared.opts, config);
        self.shared.killpriv.store(killpriv, Ordering::Relaxed);
        let ring = ask_io_uring(&self.shared.opts, config);
        self.shared.ring_granted.store(ring, Ordering::Relaxed);
        Ok(())
    }

    fn destroy(&mut self) {
        if let Err(e) = self.shared.flush_and_sync() {
            eprintln!("basalt-fusefs: flush at unmount failed: errno {}", e.0);
        } else if let Err(e) = self.shared.save_tree_snapshot() {
            eprintln!(
                "basalt-fusefs: no tree snapshot written at unmount ({e}); the next mount \
                 reads the tree from the engine"
            );
        }
        self.shared.done.mark();
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.do_lookup(&Who::from(req), parent, name, reply);
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.shared.requests.count(Op::Forget);
        let mut st = self.shared.lock();
        if let Some(n) = st.nodes.get_mut(&ino.0) {
            n.lookups = n.lookups.saturating_sub(nlookup);
        }
        st.maybe_forget(ino.0);
    }

    fn getattr(&self, req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.do_getattr(&Who::from(req), ino, _fh, reply);
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let ch = AttrChanges::new(mode, uid, gid, size, atime, mtime);
        self.do_setattr(&Who::from(req), ino, ch, reply);
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        self.do_readlink(&Who::from(req), ino, reply);
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.do_mknod(&Who::from(req), parent, name, mode, umask, rdev, reply);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        self.do_mkdir(&Who::from(req), parent, name, mode, umask, reply);
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.do_unlink(&Who::from(req), parent, name, reply);
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.do_rmdir(&Who::from(req), parent, name, reply);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        self.do_symlink(&Who::from(req), parent, link_name, target, reply);
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.do_rename(
            &Who::from(req),
            parent,
            name,
            newparent,
            newname,
            flags,
            reply,
        );
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.do_link(&Who::from(req), ino, newparent, newname, reply);
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.do_open(&Who::from(req), ino, flags, reply);
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.do_read(
            &Who::from(req),
            ino,
            fh,
            offset,
            size,
            _flags,
            _lock_owner,
            reply,
        );
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.do_write(
            &Who::from(req),
            ino,
            _fh,
            offset,
            data,
            write_flags,
            _flags,
            _lock_owner,
            reply,
        );
    }

    fn flush(
        &self,
        req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        self.do_flush(&Who::from(req), _ino, _fh, _lock_owner, reply);
    }

    fn release(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.do_release(
            &Who::from(req),
            _ino,
            fh,
            _flags,
            _lock_owner,
            _flush,
            reply,
        );
    }

    fn fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.do_fsync(&Who::from(req), ino, _fh, _datasync, reply);
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.do_opendir(&Who::from(req), ino, _flags, reply);
    }

    fn readdir(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        self.do_readdir(&Who::from(req), _ino, fh, offset, reply);
    }

    fn readdirplus(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        self.do_readdirplus(&Who::from(req), _ino, fh, offset, reply);
    }

    fn releasedir(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.do_releasedir(&Who::from(req), _ino, fh, _flags, reply);
    }

    fn fsyncdir(
        &self,
        req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.do_fsyncdir(&Who::from(req), _ino, _fh, _datasync, reply);
    }

    fn statfs(&self, req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.do_statfs(&Who::from(req), _ino, reply);
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        self.do_setxattr(&Who::from(req), ino, name, value, flags, _position, reply);
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.do_getxattr(&Who::from(req), ino, name, size, reply);
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.do_listxattr(&Who::from(req), ino, size, reply);
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.do_removexattr(&Who::from(req), ino, name, reply);
    }

    fn access(&self, req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        self.do_access(&Who::from(req), ino, _mask, reply);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.do_create(&Who::from(req), parent, name, mode, umask, flags, reply);
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.do_fallocate(&Who::from(req), ino, _fh, offset, length, mode, reply);
    }

    fn lseek(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        self.do_lseek(&Who::from(req), ino, fh, offset, whence, reply);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creds_come_from_proc_status() {
        let status = "Name:\tsh\nUid:\t65534\t65534\t65534\t65534\nGroups:\t10 27 \n\
                      CapInh:\t0000000000000000\nCapEff:\t0000000000000010\n";
        let c = Creds::parse(status).unwrap();
        assert!(c.fsetid, "bit 4 is CAP_FSETID");
        assert_eq!(c.groups, vec![10, 27]);
        let c = Creds::parse("Groups:\t\nCapEff:\t000001ffffffffef\n").unwrap();
        assert!(!c.fsetid && c.groups.is_empty());
        assert!(Creds::parse("Name:\tx\n").is_none());
        let me = std::fs::read_to_string("/proc/self/status").unwrap();
        assert!(Creds::parse(&me).is_some());
    }
}

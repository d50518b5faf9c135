//! Mounting, unmounting and the background flusher.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use basalt_engine::Db;
use fuser::{Config, Filesystem, INodeNo, MountOption, SessionACL, SessionUnmounter};

use crate::external::{External, Forget};
use crate::fuse::{BasaltFs, Done, FsOptions, HealthFn, Shared};
use crate::layout::Kind;
use crate::state::{Node, State, FIRST_INO, ROOT_INO};
use crate::FsError;

/// Threads serving queued engine reads by default. Each takes every read queued at
/// once into one `multi_get`, so the queue depth comes from batching, not threads.
pub const DEFAULT_READ_THREADS: usize = 2;

/// Kernel readahead of a mount by default, in KiB: sequential reads go out as 1 MiB
/// READ requests, four at a time, instead of 128 KiB ones two at a time.
pub const DEFAULT_READAHEAD_KB: u32 = 4096;

/// How to mount (the appliance fills this from its command line).
#[derive(Clone, Default)]
pub struct MountConfig {
    pub mountpoint: PathBuf,
    /// FUSE worker threads; 0 = one per core (at least two).
    pub threads: usize,
    /// Let other users than the mounting one use the mount (needs root or
    /// `user_allow_other` in /etc/fuse.conf).
    pub allow_other: bool,
    /// Extra `-o` options: `ro`, `noatime`, `nosuid`, `nodev`, `noexec`, `dirsync`,
    /// `sync`, `fsname=`, `subtype=`, `writeback_cache`, `no_writeback_cache`,
    /// `no_readdirplus`, `no_dir_cache`, `attr_timeout=SECS`, `entry_timeout=SECS`,
    /// `flush_interval_ms=MS`, `max_write=BYTES`, `read_threads=N` (1..=256),
    /// `readahead_kb=N` (0 = the kernel's default, else 4..=65536).
    pub options: Vec<String>,
    /// Chunk size of large files; 0 = [`crate::DEFAULT_CHUNK_SIZE`].
    pub chunk_size: usize,
    /// Feeds `/.basalt/health.json`.
    pub health: Option<Arc<dyn Fn() -> serde_json::Value + Send + Sync>>,
}

impl std::fmt::Debug for MountConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MountConfig")
            .field("mountpoint", &self.mountpoint)
            .field("threads", &self.threads)
            .field("allow_other", &self.allow_other)
            .field("options", &self.options)
            .field("chunk_size", &self.chunk_size)
            .field("health", &self.health.is_some())
            .finish()
    }
}

/// A live mount; serves on background threads until unmounted.
pub struct MountHandle {
    mountpoint: PathBuf,
    /// `None` for the null filesystem ([`mount_null`]).
    shared: Option<Arc<Shared>>,
    done: Arc<Done>,
    unmounter: Option<SessionUnmounter>,
    session: Option<JoinHandle<std::io::Result<()>>>,
    flusher: Option<JoinHandle<()>>,
    /// Unregisters the engine write observer when the handle goes.
    _observing: Option<Observing>,
    /// The engine's mark as mounted in this process.
    _mounted: Option<crate::fids::Mounted>,
    /// The io_uring queues (`-o io_uring`, null filesystem only).
    ring: Option<crate::ring::Ring>,
}

/// An engine write observer registered for as long as this lives.
struct Observing {
    db: Db,
    id: u64,
}

impl Drop for Observing {
    fn drop(&mut self) {
        self.db.stop_observing(self.id);
    }
}

fn parse_options(cfg: &MountConfig) -> Result<(FsOptions, Vec<MountOption>), FsError> {
    let mut o = FsOptions {
        attr_ttl: Duration::from_secs(30),
        entry_ttl: Duration::from_secs(30),
        writeback_cache: true,
        readdirplus: true,
        dir_cache: true,
        max_write: 1 << 20,
        flush_interval: Duration::from_millis(1000),
        read_threads: DEFAULT_READ_THREADS,
        workers: worker_threads(cfg.threads),
        readahead_kb: DEFAULT_READAHEAD_KB,
        io_uring: None,
        io_uring_threads: DEFAULT_RING_THREADS,
    };
    let mut m = vec![
        MountOption::FSName("basalt".into()),
        MountOption::Subtype("basalt".into()),
        MountOption::DefaultPermissions,
    ];
    let secs = |v: &str, opt: &str| -> Result<Duration, FsError> {
        v.parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s >= 0.0 && *s < 1e6)
            .map(Duration::from_secs_f64)
            .ok_or_else(|| FsError::InvalidOption(opt.to_string()))
    };
    for opt in cfg.options.iter().flat_map(|s| s.split(',')) {
        let opt = opt.trim();
        let (k, v) = opt.split_once('=').unwrap_or((opt, ""));
        match k {
            "" | "rw" | "default_permissions" | "allow_other" => {}
            "ro" => m.push(MountOption::RO),
            "noatime" => m.push(MountOption::NoAtime),
            "nosuid" => m.push(MountOption::NoSuid),
            "nodev" => m.push(MountOption::NoDev),
            "noexec" => m.push(MountOption::NoExec),
            "dirsync" => m.push(MountOption::DirSync),
            "sync" => m.push(MountOption::Sync),
            "fsname" if !v.is_empty() => m[0] = MountOption::FSName(v.into()),
            "subtype" if !v.is_empty() => m[1] = MountOption::Subtype(v.into()),
            "writeback_cache" => o.writeback_cache = true,
            "no_writeback_cache" => o.writeback_cache = false,
            "no_readdirplus" => o.readdirplus = false,
            "no_dir_cache" => o.dir_cache = false,
            "attr_timeout" => o.attr_ttl = secs(v, opt)?,
            "entry_timeout" => o.entry_ttl = secs(v, opt)?,
            "flush_interval_ms" => {
                o.flush_interval = v
                    .parse::<u64>()
                    .ok()
                    .filter(|&x| x > 0)
                    .map(Duration::from_millis)
                    .ok_or_else(|| FsError::InvalidOption(opt.to_string()))?
            }
            "read_threads" => {
                o.read_threads = v
                    .parse::<usize>()
                    .ok()
                    .filter(|&x| (1..=256).contains(&x))
                    .ok_or_else(|| FsError::InvalidOption(opt.to_string()))?
            }
            "readahead_kb" => {
                o.readahead_kb = v
                    .parse::<u32>()
                    .ok()
                    .filter(|&x| x == 0 || (4..=65536).contains(&x))
                    .ok_or_else(|| FsError::InvalidOption(opt.to_string()))?
            }
            "io_uring" => {
                o.io_uring = Some(
                    v.parse()
                        .map_err(|_| FsError::InvalidOption(opt.to_string()))?,
                )
            }
            "io_uring_threads" => {
                o.io_uring_threads = v
                    .parse::<usize>()
                    .ok()
                    .filter(|&x| (1..=64).contains(&x))
                    .ok_or_else(|| FsError::InvalidOption(opt.to_string()))?
            }
            "max_write" => {
                o.max_write = v
                    .parse::<u32>()
                    .ok()
                    .filter(|&x| (4096..=(16 << 20)).contains(&x))
                    .ok_or_else(|| FsError::InvalidOption(opt.to_string()))?
            }
            _ => return Err(FsError::InvalidOption(opt.to_string())),
        }
    }
    Ok((o, m))
}

/// The mount root as last stored (`layout::ROOT_AUX`), or a fresh 0755 root-owned
/// directory. A stored record that does not decode as a directory is reported and
/// left in place; the root then starts fresh.
fn root_node(db: &Db, now: SystemTime) -> Result<Node, FsError> {
    let fresh = Node::new(ROOT_INO, 0, 0, Kind::Dir, 0o755, now);
    let stored = db
        .read_aux(crate::layout::ROOT_AUX)
        .map_err(|e| FsError::engine("reading the mount root's attributes", e))?;
    let Some(bytes) = stored else {
        return Ok(fresh);
    };
    match crate::layout::InodeRecord::decode(&bytes) {
        Some(r) if r.kind == Kind::Dir => Ok(Node::from_record(ROOT_INO, 0, 0, &r)),
        _ => {
            eprintln!(
                "basalt-fusefs: {}: {}.aux is no directory record ({} bytes); the mount root \
                 starts as a fresh 0755 directory",
                db.path().display(),
                crate::layout::ROOT_AUX,
                bytes.len()
            );
            Ok(fresh)
        }
    }
}

/// Builds the in-memory state: the root and every collection.
fn build_state(db: Db, chunk_size: u64, mount_id: u64) -> Result<State, FsError> {
    let now = SystemTime::now();
    let mut st = State {
        nodes: Default::default(),
        colls: HashMap::new(),
        coll_by_name: HashMap::new(),
        next_ino: FIRST_INO,
        next_coll: 1,
        dirty_nodes: HashSet::new(),
        chunk_size,
        chunk_io: Default::default(),
        fids: crate::fids::Fids::of(&db),
        catalog_seen: db.catalog_changes(),
        db,
        mount_id,
        listings_changed: HashSet::new(),
        tree_loaded: Default::default(),
    };
    let mut root = root_node(&st.db, now)?;
    root.nlink = 2;
    root.persisted = true;
    st.nodes.insert(ROOT_INO, Box::new(root));
    let names: BTreeMap<String, ()> = st
        .db
        .list_collections()
        .into_iter()
        .map(|n| (n, ()))
        .collect();
    let mut snapshot = match crate::tree_snapshot::usable(&st.db) {
        Ok(s) => {
            st.tree_loaded.snapshot = s.is_some();
            s
        }
        Err(why) => {
            eprintln!(
                "basalt-fusefs: tree snapshot not used: {why}; reading the tree from the engine"
            );
            st.tree_loaded.skipped = Some(why);
            None
        }
    };
    for name in names.keys() {
        if name == crate::views::DIR_NAME {
            eprintln!("basalt-fusefs: collection {name:?} is hidden by the /.basalt view");
            continue;
        }
        let saved = snapshot.as_mut().and_then(|s| s.colls.remove(name));
        let root = match saved {
            Some((_, records)) => st
                .db
                .collection(name)
                .and_then(|c| crate::load::build_collection(&mut st, &c, records)),
            None => crate::load::load_collection(&mut st, name),
        }
        .map_err(|e| FsError::engine(format!("loading collection {name}"), e))?;
        crate::load::link_child(&mut st, ROOT_INO, name.into(), root);
    }
    // Records fixed while loading (link counts) go out now.
    st.flush_all().map_err(|e| {
        FsError::engine(
            "loading",
            basalt_engine::Error::Io {
                path: st.db.path().to_path_buf(),
                source: std::io::Error::from_raw_os_error(e.0),
            },
        )
    })?;
    Ok(st)
}

/// Mounts `db` at `cfg.mountpoint`; returns once the mount is live.
pub fn mount(db: Db, cfg: MountConfig) -> Result<MountHandle, FsError> {
    let (opts, mopts) = parse_options(&cfg)?;
    let chunk_size = match cfg.chunk_size {
        0 => crate::DEFAULT_CHUNK_SIZE,
        n if (4096..=(8 << 20)).contains(&n) => n,
        n => {
            return Err(FsError::InvalidOption(format!(
                "chunk_size={n} (must be between 4 KiB and 8 MiB)"
            )))
        }
    } as u64;
    let mounted = crate::fids::Fids::of(&db)
        .claim_mount()
        .ok_or_else(|| FsError::AlreadyMounted(db.path().to_path_buf()))?;
    // Observing from before the load on: a document written meanwhile is taken in
    // again, which changes nothing (see `crate::external`).
    let external = Arc::new(External::default());
    let observing = Observing {
        id: db.observe_writes(external.observer()),
        db: db.clone(),
    };
    let state = build_state(db, chunk_size, external.id)?;
    return_freed_memory();
    let (flush_interval, readahead_kb, workers) =
        (opts.flush_interval, opts.readahead_kb, opts.workers);
    let (pinning, max_write, ring_threads) = (opts.io_uring, opts.max_write, opts.io_uring_threads);
    let health: Option<HealthFn> = cfg.health.clone();
    let (forget_tx, forget_rx) = std::sync::mpsc::channel();
    let shared = Arc::new(Shared::new(state, opts, health, external, forget_tx));
    let fs = BasaltFs {
        shared: shared.clone(),
    };
    let done = shared.done.clone();
    let (unmounter, session, notifier, fd) = start_session(fs, &cfg, mopts, workers, done.clone())?;
    let mut handle = MountHandle {
        mountpoint: cfg.mountpoint,
        shared: Some(shared.clone()),
        done,
        unmounter: Some(unmounter),
        session: Some(session),
        flusher: None,
        _observing: Some(observing),
        _mounted: Some(mounted),
        ring: None,
    };
    if let Some(pinning) = pinning {
        let granted = shared.ring_granted.load(Ordering::Relaxed);
        let server = Arc::new(BasaltFs {
            shared: shared.clone(),
        });
        handle.start_ring(&fd, granted, pinning, (ring_threads, 1), max_write, server)?;
    }
    // After the ring: with io_uring granted, requests wait until its queues are up.
    set_readahead(&handle.mountpoint, readahead_kb);
    spawn_forgetter(notifier, forget_rx);
    let fl_shared = shared.clone();
    let flusher = std::thread::Builder::new()
        .name("basalt-flush".into())
        .spawn(move || {
            while !fl_shared.done.wait_timeout(flush_interval) {
                let _ = fl_shared.lock().flush_all();
            }
        })
        .ok();
    handle.flusher = flusher;
    Ok(handle)
}

/// Tells the kernel what to forget after documents written through the engine API
/// changed the tree. On a thread of its own: a notification waits for the locks of
/// the directory concerned, which a FUSE request in that directory may hold while it
/// waits for this filesystem. Ends when the mount's state is dropped.
fn spawn_forgetter(notifier: fuser::Notifier, rx: std::sync::mpsc::Receiver<Forget>) {
    let run = move || {
        for f in rx {
            // ENOENT: the kernel had nothing cached. Nothing else is worth a retry.
            let _ = match &f {
                Forget::Entry { parent, name } => notifier.inval_entry(INodeNo(*parent), name),
                Forget::Deleted {
                    parent,
                    child,
                    name,
                } => notifier.delete(INodeNo(*parent), INodeNo(*child), name),
                Forget::Inode(ino) => notifier.inval_inode(INodeNo(*ino), 0, 0),
            };
        }
    };
    if let Err(e) = std::thread::Builder::new()
        .name("basalt-forget".into())
        .spawn(run)
    {
        eprintln!(
            "basalt-fusefs: no thread to tell the kernel of engine-API writes ({e}); \
             cached names and attributes of such files stay until their timeouts"
        );
    }
}

/// Mounts the null filesystem ([`crate::nullfs`]: an in-memory tree, no engine) at
/// `cfg.mountpoint` with the options, INIT flags and session setup of [`mount`], to
/// measure what FUSE itself costs. `chunk_size` and `health` are ignored.
pub fn mount_null(cfg: MountConfig) -> Result<MountHandle, FsError> {
    let (opts, mut mopts) = parse_options(&cfg)?;
    mopts[0] = MountOption::FSName("basalt-null".into());
    let (readahead_kb, workers) = (opts.readahead_kb, opts.workers);
    let (pinning, max_write) = (opts.io_uring, opts.max_write);
    let fs = crate::nullfs::NullFs::new(opts);
    let (core, done) = (fs.core.clone(), fs.done.clone());
    let (unmounter, session, _, fd) = start_session(fs, &cfg, mopts, workers, done.clone())?;
    let mut handle = MountHandle {
        mountpoint: cfg.mountpoint,
        shared: None,
        done,
        unmounter: Some(unmounter),
        session: Some(session),
        flusher: None,
        _observing: None,
        _mounted: None,
        ring: None,
    };
    if let Some(pinning) = pinning {
        let granted = core.ring_granted.load(Ordering::Relaxed);
        // Its handlers never block: one thread per queue takes all its requests.
        handle.start_ring(&fd, granted, pinning, (1, 16), max_write, core)?;
    }
    // After the ring: with io_uring granted, requests wait until its queues are up.
    set_readahead(&handle.mountpoint, readahead_kb);
    Ok(handle)
}

/// Threads per io_uring queue of the Basalt mount (`-o io_uring_threads`).
pub const DEFAULT_RING_THREADS: usize = 8;

type SessionThread = JoinHandle<std::io::Result<()>>;

/// FUSE worker threads for `MountConfig::threads`: for 0 one per core, but at least
/// two, so that one keeps taking the kernel's requests while the other serves a read.
fn worker_threads(configured: usize) -> usize {
    match configured {
        0 => std::thread::available_parallelism().map_or(2, |n| n.get().max(2)),
        n => n,
    }
}

/// Mounts `fs` and serves it on `threads` workers (`FsOptions::workers`), each
/// with its own cloned `/dev/fuse` fd; `done` is marked when the session ends. Also
/// returns the session's notifier and a copy of its `/dev/fuse` fd (for io_uring).
/// INIT is done on return; the caller sets the readahead ([`set_readahead`]).
fn start_session<F: Filesystem>(
    fs: F,
    cfg: &MountConfig,
    mut mopts: Vec<MountOption>,
    threads: usize,
    done: Arc<Done>,
) -> Result<(SessionUnmounter, SessionThread, fuser::Notifier, OwnedFd), FsError> {
    let mut config = Config::default();
    mopts.dedup();
    config.mount_options = mopts;
    config.acl = if cfg.allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    config.n_threads = Some(threads);
    config.clone_fd = threads > 1;
    let mountpoint = &cfg.mountpoint;
    let mut session = fuser::Session::new(fs, mountpoint, &config).map_err(|e| FsError::Mount {
        mountpoint: mountpoint.clone(),
        source: e,
    })?;
    let unmounter = session.unmount_callable();
    let notifier = session.notifier();
    let mount_err = |e: std::io::Error| FsError::Mount {
        mountpoint: mountpoint.clone(),
        source: e,
    };
    let fd = session.as_fd().try_clone_to_owned().map_err(mount_err)?;
    let thread = std::thread::Builder::new()
        .name("basalt-fuse".into())
        .spawn(move || {
            let r = session.run();
            done.mark();
            r
        })
        .map_err(|e| FsError::Mount {
            mountpoint: mountpoint.clone(),
            source: e,
        })?;
    Ok((unmounter, thread, notifier, fd))
}

/// Where the kernel keeps the readahead of the filesystem mounted at `mountpoint`:
/// `/sys/class/bdi/MAJOR:MINOR/read_ahead_kb` of its device number.
pub fn readahead_file(mountpoint: &Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(mountpoint)?.dev();
    Ok(PathBuf::from(format!(
        "/sys/class/bdi/{}:{}/read_ahead_kb",
        libc::major(dev),
        libc::minor(dev)
    )))
}

/// Sets the mount's kernel readahead to `kb` KiB (0: leave it). A FUSE mount starts at
/// 128 KiB whatever INIT asks (the kernel offers its current value as the maximum), so
/// a sequential reader would wait for one 128 KiB round trip after another. Needs root
/// (sysfs); without it a warning says what is lost and the mount works as before.
/// Runs once the session serves requests: the `stat` that finds the device number
/// waits for INIT, which would otherwise lower the value again.
fn set_readahead(mountpoint: &Path, kb: u32) {
    if kb == 0 {
        return;
    }
    let res =
        readahead_file(mountpoint).and_then(|f| std::fs::write(&f, format!("{kb}\n")).map(|()| f));
    if let Err(e) = res {
        eprintln!(
            "basalt-fusefs: cannot set the readahead of {} to {kb} KiB ({e}); sequential \
             reads stay at the kernel's 128 KiB per request",
            mountpoint.display()
        );
    }
}

/// Unmounts, trying again for up to a second while the kernel answers EBUSY: a file
/// closed just before may still be held for a moment by a child another thread forked
/// (its copy of the descriptor lives until it execs). `fuser`'s unmounter works once,
/// so the retries unmount the path themselves (`umount2`, or `fusermount3 -u` without
/// root), never lazily: a mount really in use is still refused.
fn unmount_retrying_busy(u: &mut SessionUnmounter, mountpoint: &Path) -> std::io::Result<()> {
    let busy = |e: &std::io::Error| e.raw_os_error() == Some(libc::EBUSY);
    let mut res = u.unmount();
    for _ in 0..20 {
        match &res {
            Err(e) if busy(e) => {
                std::thread::sleep(Duration::from_millis(50));
                res = unmount_path(mountpoint);
            }
            _ => break,
        }
    }
    res
}

/// `umount2(mountpoint, flags)`.
fn umount2(mountpoint: &Path, flags: i32) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(mountpoint.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::other("path contains NUL"))?;
    // SAFETY: `c` is a valid NUL-terminated path.
    match unsafe { libc::umount2(c.as_ptr(), flags) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// `fusermount3 -u [-z] mountpoint` (for a mount root may not detach otherwise).
fn fusermount_u(mountpoint: &Path, lazy: bool) -> std::io::Result<std::process::Output> {
    let mut cmd = std::process::Command::new("fusermount3");
    cmd.arg("-u");
    if lazy {
        cmd.arg("-z");
    }
    cmd.arg(mountpoint).output()
}

/// `umount2(mountpoint, 0)`, or `fusermount3 -u` where that is not permitted.
fn unmount_path(mountpoint: &Path) -> std::io::Result<()> {
    match umount2(mountpoint, 0) {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {}
        r => return r,
    }
    let out = fusermount_u(mountpoint, false)?;
    match out.status.success() {
        true => Ok(()),
        // fusermount3 says why on stderr; a busy mount is what is retried.
        false if String::from_utf8_lossy(&out.stderr).contains("busy") => {
            Err(std::io::Error::from_raw_os_error(libc::EBUSY))
        }
        false => Err(std::io::Error::other(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        )),
    }
}

impl MountHandle {
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Flushes dirty data, syncs the engine and unmounts.
    pub fn unmount(mut self) -> Result<(), FsError> {
        let flushed = self.flush_and_sync();
        let mut res = Ok(());
        if let Some(mut u) = self.unmounter.take() {
            if let Err(e) = unmount_retrying_busy(&mut u, &self.mountpoint) {
                res = Err(FsError::Unmount {
                    mountpoint: self.mountpoint.clone(),
                    detail: e.to_string(),
                });
            }
        }
        if detach_if_stale(&self.mountpoint) {
            res = Ok(());
        }
        // A refused unmount (EBUSY: files open on it) leaves the session serving:
        // not waited for, here or at drop. It ends with the process, and the mount
        // is then stale (`force_unmount` clears it).
        if let Some(t) = self.session.take().filter(|_| res.is_ok()) {
            let _ = t.join();
        }
        self.stop_ring();
        self.done.mark();
        if let Some(t) = self.flusher.take() {
            let _ = t.join();
        }
        res?;
        flushed.map_err(|e| FsError::Unmount {
            mountpoint: self.mountpoint.clone(),
            detail: format!(
                "final flush failed: {}",
                std::io::Error::from_raw_os_error(e.0)
            ),
        })
    }

    /// True once the session has ended (unmounted from outside, or daemon stopped).
    pub fn is_unmounted(&self) -> bool {
        self.done.is_set()
    }

    /// Blocks until the filesystem is unmounted from outside (`fusermount3 -u`).
    pub fn wait(&self) {
        self.done.wait()
    }

    /// Starts the io_uring queues of this mount (`-o io_uring`), whose INIT `granted`
    /// FUSE over io_uring or not, with `(threads, entries)` per queue and thread,
    /// placed by `pinning`. Refused with what to do when the kernel did not grant it.
    fn start_ring(
        &mut self,
        fd: &OwnedFd,
        granted: bool,
        pinning: crate::ring::Pinning,
        (threads, depth): (usize, usize),
        max_write: u32,
        server: Arc<dyn crate::ring::Serve>,
    ) -> Result<(), FsError> {
        let refused = |detail: String| FsError::Mount {
            mountpoint: self.mountpoint.clone(),
            source: std::io::Error::new(std::io::ErrorKind::Unsupported, detail),
        };
        if !granted {
            return Err(refused(match crate::ring::kernel_enabled() {
                None => "this kernel has no FUSE over io_uring (Linux 6.14+)".into(),
                Some(false) => "FUSE over io_uring is disabled: \
                                echo Y > /sys/module/fuse/parameters/enable_uring"
                    .into(),
                Some(true) => "the kernel did not grant FUSE over io_uring at INIT".into(),
            }));
        }
        let cfg = crate::ring::RingConfig {
            pinning,
            threads,
            depth,
            // The largest request or reply: max_write, and reads of up to 1 MiB.
            payload: (max_write as usize).max(1 << 20),
        };
        // Found now: once a queue fails, a look at the mount could wait for ever.
        let conn = crate::connection::of_mount(&self.mountpoint);
        let once = std::sync::Once::new();
        let on_failure = Arc::new(move |e: &str| {
            eprintln!("basalt-fusefs: {e}");
            // Once: after the abort, the other queues end too.
            once.call_once(|| {
                eprintln!(
                    "basalt-fusefs: aborting the FUSE connection so that no request waits \
                     for an answer that cannot come"
                );
                if let Err(why) = conn.clone().and_then(crate::connection::abort) {
                    eprintln!("basalt-fusefs: cannot abort the FUSE connection: {why}");
                }
            });
        });
        let ring = crate::ring::Ring::start(fd, cfg, server, on_failure)
            .map_err(|e| refused(format!("starting the io_uring queues: {e}")))?;
        self.ring = Some(ring);
        Ok(())
    }

    /// Waits for the io_uring queue threads (the kernel ends them at unmount) and
    /// reports what they served and any error they stopped with.
    fn stop_ring(&mut self) {
        let Some(ring) = self.ring.take() else {
            return;
        };
        eprintln!(
            "basalt-fusefs: {} requests served over io_uring",
            ring.served()
        );
        if let Some(e) = ring.error() {
            eprintln!("basalt-fusefs: io_uring queue stopped: {e}");
        }
        if !ring.join(Duration::from_secs(5)) {
            eprintln!("basalt-fusefs: io_uring queue threads still running 5 s after unmount");
        }
    }

    fn flush_and_sync(&self) -> Result<(), crate::state::Errno> {
        self.shared.as_ref().map_or(Ok(()), |s| s.flush_and_sync())
    }
}

impl Drop for MountHandle {
    fn drop(&mut self) {
        if self.unmounter.is_some() || self.session.is_some() {
            let _ = self.flush_and_sync();
            let mut unmounted = self
                .unmounter
                .take()
                .is_none_or(|mut u| u.unmount().is_ok());
            unmounted |= detach_if_stale(&self.mountpoint);
            // As in `unmount`: a refused unmount leaves the session serving; joining
            // it would hang this drop.
            if let Some(t) = self.session.take().filter(|_| unmounted) {
                let _ = t.join();
            }
            self.stop_ring();
            self.done.mark();
            if let Some(t) = self.flusher.take() {
                let _ = t.join();
            }
        }
    }
}

/// Turns transparent huge pages off for this process and its children
/// (`PR_SET_THP_DISABLE`), as the daemons do first thing. Their allocator (mimalloc)
/// asks for huge pages for its arenas and gives memory back in 64 KiB pieces, so the
/// kernel zeroed whole 2 MiB pages again and again: 8% of the daemon's samples in
/// `clear_page_erms` while creating 100,000 files; with this call creation ran 9%
/// faster (medians of three interleaved rounds) on 10% less daemon CPU and 15% less
/// peak RSS (ARCHITECTURE.md, "Measurements behind the defaults").
pub fn disable_transparent_huge_pages() -> std::io::Result<()> {
    // SAFETY: PR_SET_THP_DISABLE takes integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Gives the memory the tree's build freed back to the kernel at once (mimalloc's
/// `mi_collect`): the records a mount reads are freed once the tree is built, mostly
/// by loader threads that have ended, and mimalloc returns freed pages only after a
/// delay, at a later allocation or free of the heap that holds them: an idle mount
/// often kept them. 300,000 small files, mounted from the tree snapshot, RSS 3 s
/// after mounting: 305-356 MB without the call (two rounds in four near 356), 216 MB
/// with it. Does nothing for memory of another allocator.
pub fn return_freed_memory() {
    // `libmimalloc-sys` declares `mi_collect` only under its `extended` feature, which
    // needs a crate this build does not have; the symbol is in the library it links.
    extern "C" {
        fn mi_collect(force: bool);
    }
    // SAFETY: `mi_collect` takes a flag, may be called from any thread at any time,
    // and only frees what mimalloc holds unused.
    unsafe { mi_collect(true) };
}

/// Detaches the mount at `mountpoint` if it is stale ([`is_stale_mount`]); true if it
/// was and is gone now. An aborted connection (a failed io_uring queue, `basalt umount
/// --abort`) must not outlive its handle as a stale mount, and `fuser`'s unmounter
/// cannot be trusted with it: once the aborted session has ended it holds no mount
/// and reports success without unmounting, while the session's own unmount at its
/// end can fail (a test saw the mount stay for 30 s, about one run in twenty).
fn detach_if_stale(mountpoint: &Path) -> bool {
    is_stale_mount(mountpoint) && force_unmount(mountpoint).is_ok()
}

/// True when `mountpoint` is a FUSE mount whose daemon is gone: `stat` or `statfs` fails
/// with ENOTCONN. `stat` alone is not enough: the kernel answers it from the root's
/// cached attributes (30 s here) without asking the dead daemon; `statfs` always asks.
pub fn is_stale_mount(mountpoint: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    if matches!(std::fs::metadata(mountpoint), Err(e) if e.raw_os_error() == Some(libc::ENOTCONN)) {
        return true;
    }
    let Ok(c) = std::ffi::CString::new(mountpoint.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid C string and `buf` a properly sized out-parameter.
    let mut buf: libc::statfs = unsafe { std::mem::zeroed() };
    let failed = unsafe { libc::statfs(c.as_ptr(), &mut buf) } != 0;
    failed && std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOTCONN)
}

/// Clears the mount of a killed daemon: a lazy unmount, with `fusermount3 -u -z`
/// when not root.
pub fn force_unmount(mountpoint: &Path) -> Result<(), FsError> {
    let first = match umount2(mountpoint, libc::MNT_DETACH) {
        Ok(()) => return Ok(()),
        Err(e) => e,
    };
    match fusermount_u(mountpoint, true) {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(FsError::Unmount {
            mountpoint: mountpoint.into(),
            detail: format!(
                "umount2: {first}; fusermount3: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ),
        }),
        Err(e) => Err(FsError::Unmount {
            mountpoint: mountpoint.into(),
            detail: format!("umount2: {first}; fusermount3: {e}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Storage;
    use crate::noise;
    use std::ffi::OsStr;

    fn parse(opts: &str) -> Result<FsOptions, FsError> {
        let cfg = MountConfig {
            options: vec![opts.to_string()],
            ..Default::default()
        };
        parse_options(&cfg).map(|(o, _)| o)
    }

    #[test]
    fn transparent_huge_pages_are_off_for_the_process_after_the_call() {
        disable_transparent_huge_pages().unwrap();
        // SAFETY: PR_GET_THP_DISABLE takes integer arguments only.
        let got = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
        assert_eq!(got, 1, "PR_GET_THP_DISABLE after the call");
    }

    #[test]
    fn options_set_what_they_name_and_defaults_hold_otherwise() {
        let d = parse("").unwrap();
        assert_eq!(
            (d.read_threads, d.max_write, d.readahead_kb),
            (DEFAULT_READ_THREADS, 1 << 20, DEFAULT_READAHEAD_KB)
        );
        assert!(d.writeback_cache && d.readdirplus && d.dir_cache);
        assert!(d.workers >= 2, "default workers: {}", d.workers);
        assert_eq!(worker_threads(1), 1, "an explicit count is kept");
        let o = parse(
            "read_threads=8,max_write=65536,no_writeback_cache,attr_timeout=2.5,readahead_kb=512",
        )
        .unwrap();
        assert_eq!(
            (o.read_threads, o.max_write, o.readahead_kb),
            (8, 65536, 512)
        );
        assert_eq!(parse("readahead_kb=0").unwrap().readahead_kb, 0);
        assert!(!o.writeback_cache);
        assert!(!parse("no_dir_cache").unwrap().dir_cache);
        use crate::ring::Pinning;
        assert_eq!(
            (d.io_uring, d.io_uring_threads),
            (None, DEFAULT_RING_THREADS)
        );
        assert_eq!(parse("io_uring").unwrap().io_uring, Some(Pinning::Same));
        let r = parse("io_uring=other,io_uring_threads=3").unwrap();
        assert_eq!((r.io_uring, r.io_uring_threads), (Some(Pinning::Other), 3));
        assert_eq!(
            parse("io_uring=none").unwrap().io_uring,
            Some(Pinning::Unpinned)
        );
        assert_eq!(o.attr_ttl, Duration::from_millis(2500));
    }

    /// Mounting sizes every document from the engine's index: it reads no file's data,
    /// only the documents of a manifest's length (to tell manifests from small files).
    #[test]
    fn building_the_tree_reads_no_file_data() {
        let dir = tempfile::tempdir().unwrap();
        let opts = basalt_engine::Options {
            durability: basalt_engine::Durability::NoSync,
            compression: basalt_engine::Compression::None,
            memory_budget: 64 << 20,
            ..Default::default()
        };
        let small = 400u64;
        let small_len = 16 << 10;
        let large_len = 300 << 10;
        {
            let db = Db::open(dir.path(), opts.clone()).unwrap();
            let c = db.create_collection("c").unwrap();
            for i in 0..small {
                c.put(format!("small/f{i}").as_bytes(), &noise(i, small_len))
                    .unwrap();
            }
            // As long as a manifest, but not one.
            c.put(b"odd", &noise(7, crate::layout::MANIFEST_LEN))
                .unwrap();
            for i in 0..3u64 {
                let data = noise(100 + i, large_len);
                crate::write_document(&db, "c", &format!("large/f{i}"), &mut &data[..]).unwrap();
            }
            db.close().unwrap();
        }
        let db = Db::open(dir.path(), opts).unwrap();
        let before = db.stats().device_bytes_read;
        let st = build_state(db, crate::DEFAULT_CHUNK_SIZE as u64, 0).unwrap();
        let read = st.db.stats().device_bytes_read - before;
        let data = small * small_len as u64 + 3 * large_len as u64;
        println!("building the tree read {read} bytes of {data} bytes of file data");
        assert!(read < data / 20, "read {read} bytes for {data} of data");
        let child = |ino: u64, name: &str| st.nodes[&ino].children[OsStr::new(name)];
        let root = st.colls[&st.coll_by_name["c"]].root;
        let (smalls, larges) = (child(root, "small"), child(root, "large"));
        for i in 0..small {
            let n = &st.nodes[&child(smalls, &format!("f{i}"))];
            assert_eq!((n.size, n.storage), (small_len as u64, Storage::Inline));
        }
        for i in 0..3 {
            let n = &st.nodes[&child(larges, &format!("f{i}"))];
            assert_eq!((n.size, n.storage), (large_len as u64, Storage::Chunked));
        }
        let odd = &st.nodes[&child(root, "odd")];
        assert_eq!(
            (odd.size, odd.storage),
            (crate::layout::MANIFEST_LEN as u64, Storage::Inline)
        );
        // Files carry none of the parts only some inodes use (crate::lazy).
        let files = st
            .nodes
            .values()
            .filter(|n| n.kind == crate::layout::Kind::File);
        let with_parts = files
            .filter(|n| {
                n.chunks.is_allocated()
                    || n.children.is_allocated()
                    || n.xattrs.is_allocated()
                    || n.symlink.is_allocated()
            })
            .count();
        assert_eq!(
            with_parts, 0,
            "loaded files with allocated rarely-used parts"
        );
    }

    /// The inode map is sized for the inodes a mount builds, not for its records: a
    /// file has an inode record and a document, and counting both doubled the map.
    #[test]
    fn the_inode_map_is_sized_for_the_files_not_their_records() {
        let dir = tempfile::tempdir().unwrap();
        let files = 1000;
        {
            let (mut st, root) = state_with_collection(dir.path());
            for i in 0..files {
                let name = format!("f{i}");
                let ino = st
                    .create(caller(), root, OsStr::new(&name), new_file())
                    .unwrap();
                st.write(ino, 0, b"x").unwrap();
            }
            st.flush_all().unwrap();
        }
        let db = Db::open(dir.path(), basalt_engine::Options::default()).unwrap();
        let st = build_state(db, crate::DEFAULT_CHUNK_SIZE as u64, 0).unwrap();
        let (len, cap) = (st.nodes.len(), st.nodes.capacity());
        println!("{len} inodes in a map with room for {cap}");
        assert!(len > files, "every file is there");
        assert!(cap < 2 * len, "room for {cap} inodes, {len} built");
    }

    /// The state of a new engine in `dir` with an empty collection `c`, and its root.
    fn state_with_collection(dir: &Path) -> (State, u64) {
        let db = Db::open(dir, basalt_engine::Options::default()).unwrap();
        db.create_collection("c").unwrap();
        let st = build_state(db, crate::DEFAULT_CHUNK_SIZE as u64, 0).unwrap();
        let root = st.colls[&st.coll_by_name["c"]].root;
        (st, root)
    }

    fn caller() -> crate::fs::Caller {
        crate::fs::Caller { uid: 0, gid: 0 }
    }

    fn new_file() -> crate::fs::NewNode<'static> {
        crate::fs::NewNode {
            kind: crate::layout::Kind::File,
            mode: 0o644,
            umask: 0,
            rdev: 0,
            symlink: b"",
        }
    }

    /// A file's chunk state (dirty chunks, kept tail) lives only while it has some: a
    /// written file gives it back at its flush, and at its last writer's close when
    /// the flush kept a chunk for that writer.
    #[test]
    fn a_written_file_gives_its_chunk_state_back_once_flushed() {
        let dir = tempfile::tempdir().unwrap();
        let (mut st, root) = state_with_collection(dir.path());
        let ino = st
            .create(caller(), root, OsStr::new("f"), new_file())
            .unwrap();
        assert!(!st.nodes[&ino].chunks.is_allocated(), "a new file has none");
        st.write(ino, 0, &noise(1, 10_000)).unwrap();
        assert!(
            st.nodes[&ino].chunks.is_allocated(),
            "dirty chunks are kept in it"
        );
        st.flush_node(ino).unwrap();
        assert!(
            !st.nodes[&ino].chunks.is_allocated(),
            "given back by the flush"
        );
        // With a writer open, the flush keeps the stored chunk; the close drops it.
        st.node_mut(ino).unwrap().writers = 1;
        st.write(ino, 10_000, &noise(2, 100)).unwrap();
        st.flush_node(ino).unwrap();
        assert!(st.nodes[&ino].chunks.tail.is_some(), "kept for the writer");
        let n = st.node_mut(ino).unwrap();
        n.writers = 0;
        n.drop_tail();
        assert!(
            !st.nodes[&ino].chunks.is_allocated(),
            "given back at the close"
        );
        assert_eq!(st.load_chunk(ino, 0).unwrap().len(), 10_100);
    }

    #[test]
    fn out_of_range_or_unknown_options_are_refused_by_name() {
        for bad in [
            "read_threads=0",
            "read_threads=257",
            "read_threads=x",
            "max_write=100",
            "readahead_kb=2",
            "readahead_kb=65537",
            "readahead_kb=-1",
            "io_uring=sometimes",
            "io_uring_threads=0",
            "io_uring_threads=65",
            "nosuchopt",
        ] {
            match parse(bad) {
                Err(FsError::InvalidOption(o)) => assert_eq!(o, bad),
                other => panic!("{bad}: expected InvalidOption, got {:?}", other.map(|_| ())),
            }
        }
    }
}

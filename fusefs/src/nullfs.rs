//! The null filesystem: an in-memory tree with no engine behind it, served through
//! the same session, INIT flags, mount options and reply choices (TTLs, open flags,
//! declined FLUSH, `ENODATA` for xattrs) as the Basalt mount, so that the kernel
//! sends it the same requests. Run against it, a benchmark measures what FUSE itself
//! costs: the ceiling of any FUSE filesystem on the machine (`basalt-fusefs-dev
//! nullfs`, ARCHITECTURE.md). Not a conforming filesystem: no rename, links,
//! symlinks, special files or xattrs; set-ID bits are cleared only on write.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, TimeOrNow, WriteFlags,
};

use crate::fuse::{
    ask_io_uring, fopen_flags, negotiate, to_time, xattr_reply, AttrChanges, Done, FsOptions,
    BLKSIZE,
};
use crate::requests::{Op, Requests};
use crate::ring;
use crate::state::killed_perm;

const ROOT: u64 = 1;
/// Files larger than this are refused (EFBIG): the data lives in memory.
const MAX_SIZE: u64 = 1 << 30;

struct Inode {
    attr: FileAttr,
    data: Vec<u8>,
    children: BTreeMap<OsString, u64>,
    parent: u64,
    lookups: u64,
}

impl Inode {
    /// Makes the file `len` bytes long (zeros past the old end).
    fn set_len(&mut self, len: u64) {
        self.data.resize(len as usize, 0);
        self.attr.size = len;
        self.attr.blocks = len.div_ceil(512);
    }
}

struct Tree {
    nodes: HashMap<u64, Inode>,
    next_ino: u64,
    /// Directory listings taken at opendir, by handle.
    listings: HashMap<u64, Vec<(u64, FileType, OsString)>>,
    next_fh: u64,
}

impl Tree {
    fn node(&mut self, ino: u64) -> Result<&mut Inode, Errno> {
        self.nodes.get_mut(&ino).ok_or(Errno::ENOENT)
    }

    fn child(&mut self, parent: u64, name: &OsStr) -> Result<u64, Errno> {
        let p = self.node(parent)?;
        if p.attr.kind != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        p.children.get(name).copied().ok_or(Errno::ENOENT)
    }

    /// Drops an inode nothing refers to any more.
    fn maybe_drop(&mut self, ino: u64) {
        if ino != ROOT
            && matches!(self.nodes.get(&ino), Some(n) if n.attr.nlink == 0 && n.lookups == 0)
        {
            self.nodes.remove(&ino);
        }
    }

    fn touch_dir(&mut self, ino: u64, nlink_delta: i32) {
        if let Some(d) = self.nodes.get_mut(&ino) {
            let now = SystemTime::now();
            d.attr.mtime = now;
            d.attr.ctime = now;
            d.attr.nlink = d.attr.nlink.saturating_add_signed(nlink_delta);
        }
    }
}

/// The tree and the answers to each request, shared by the `/dev/fuse` front end
/// ([`NullFs`]) and the io_uring one ([`ring::Serve`]).
pub struct NullCore {
    opts: FsOptions,
    tree: Mutex<Tree>,
    killpriv: AtomicBool,
    /// INIT granted FUSE over io_uring (asked for with `-o io_uring`).
    pub ring_granted: AtomicBool,
    requests: Requests,
}

/// See the module documentation. The `fuser` session's filesystem.
pub struct NullFs {
    pub core: Arc<NullCore>,
    pub done: Arc<Done>,
}

fn new_attr(ino: u64, kind: FileType, perm: u16, (uid, gid): (u32, u32)) -> FileAttr {
    let now = SystemTime::now();
    FileAttr {
        ino: INodeNo(ino),
        size: 0,
        blocks: 0,
        atime: now,
        mtime: now,
        ctime: now,
        crtime: now,
        kind,
        perm,
        nlink: if kind == FileType::Directory { 2 } else { 1 },
        uid,
        gid,
        rdev: 0,
        blksize: BLKSIZE,
        flags: 0,
    }
}

/// Replies with `$ok` (which may use the value bound by `$v`) or with the error.
macro_rules! answer {
    ($reply:ident, $r:expr, |$v:pat_param| $ok:expr) => {
        match $r {
            Ok($v) => $ok,
            Err(e) => $reply.error(e),
        }
    };
}

impl NullFs {
    pub fn new(opts: FsOptions) -> NullFs {
        NullFs {
            core: Arc::new(NullCore::new(opts)),
            done: Arc::default(),
        }
    }
}

impl NullCore {
    fn new(opts: FsOptions) -> NullCore {
        let root = Inode {
            attr: new_attr(ROOT, FileType::Directory, 0o755, (0, 0)),
            data: Vec::new(),
            children: BTreeMap::new(),
            parent: ROOT,
            lookups: 0,
        };
        NullCore {
            opts,
            tree: Mutex::new(Tree {
                nodes: HashMap::from([(ROOT, root)]),
                next_ino: 16,
                listings: HashMap::new(),
                next_fh: 1,
            }),
            killpriv: AtomicBool::new(false),
            ring_granted: AtomicBool::new(false),
            requests: Requests::default(),
        }
    }

    fn tree(&self) -> MutexGuard<'_, Tree> {
        self.tree.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn make(
        &self,
        (uid, gid): (u32, u32),
        parent: u64,
        name: &OsStr,
        kind: FileType,
        perm: u32,
    ) -> Result<FileAttr, Errno> {
        if name.len() > 255 {
            return Err(Errno::ENAMETOOLONG);
        }
        let mut t = self.tree();
        match t.child(parent, name) {
            Ok(_) => return Err(Errno::EEXIST),
            Err(e) if e.code() != libc::ENOENT => return Err(e),
            Err(_) => {}
        }
        let ino = t.next_ino;
        t.next_ino += 1;
        let attr = new_attr(ino, kind, (perm & 0o7777) as u16, (uid, gid));
        let node = Inode {
            attr,
            data: Vec::new(),
            children: BTreeMap::new(),
            parent,
            lookups: 1,
        };
        t.nodes.insert(ino, node);
        t.node(parent)?.children.insert(name.to_os_string(), ino);
        t.touch_dir(parent, (kind == FileType::Directory) as i32);
        Ok(attr)
    }

    fn remove(&self, parent: u64, name: &OsStr, dir: bool) -> Result<(), Errno> {
        let mut t = self.tree();
        let ino = t.child(parent, name)?;
        let n = t.node(ino)?;
        match (dir, n.attr.kind == FileType::Directory) {
            (true, false) => return Err(Errno::ENOTDIR),
            (false, true) => return Err(Errno::EISDIR),
            (true, true) if !n.children.is_empty() => return Err(Errno::ENOTEMPTY),
            _ => {}
        }
        n.attr.nlink = 0;
        n.attr.ctime = SystemTime::now();
        t.node(parent)?.children.remove(name);
        t.touch_dir(parent, -(dir as i32));
        t.maybe_drop(ino);
        Ok(())
    }

    /// Entries of a directory, `.` and `..` first.
    fn listing(&self, ino: u64) -> Result<Vec<(u64, FileType, OsString)>, Errno> {
        let mut t = self.tree();
        let d = t.node(ino)?;
        if d.attr.kind != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        let mut out = vec![
            (ino, FileType::Directory, ".".into()),
            (d.parent, FileType::Directory, "..".into()),
        ];
        let children: Vec<(OsString, u64)> =
            d.children.iter().map(|(k, &v)| (k.clone(), v)).collect();
        for (name, c) in children {
            out.push((c, t.node(c)?.attr.kind, name));
        }
        Ok(out)
    }

    fn lookup(&self, parent: u64, name: &OsStr) -> Result<FileAttr, Errno> {
        self.requests.count(Op::Lookup);
        let mut t = self.tree();
        let ino = t.child(parent, name)?;
        let n = t.node(ino)?;
        n.lookups += 1;
        Ok(n.attr)
    }

    fn forget(&self, ino: u64, nlookup: u64) {
        self.requests.count(Op::Forget);
        let mut t = self.tree();
        if let Some(n) = t.nodes.get_mut(&ino) {
            n.lookups = n.lookups.saturating_sub(nlookup);
        }
        t.maybe_drop(ino);
    }

    fn getattr(&self, ino: u64) -> Result<FileAttr, Errno> {
        self.requests.count(Op::Getattr);
        self.tree().node(ino).map(|n| n.attr)
    }

    fn setattr(&self, ino: u64, ch: AttrChanges) -> Result<FileAttr, Errno> {
        self.requests.count(Op::Setattr);
        let mut t = self.tree();
        let n = t.node(ino)?;
        if let Some(s) = ch.size {
            if n.attr.kind != FileType::RegularFile {
                return Err(Errno::EISDIR);
            }
            if s > MAX_SIZE {
                return Err(Errno::EFBIG);
            }
            n.set_len(s);
            n.attr.mtime = SystemTime::now();
        }
        if let Some(m) = ch.mode {
            n.attr.perm = (m & 0o7777) as u16;
        }
        n.attr.uid = ch.uid.unwrap_or(n.attr.uid);
        n.attr.gid = ch.gid.unwrap_or(n.attr.gid);
        if let Some(a) = ch.atime {
            n.attr.atime = to_time(a);
        }
        if let Some(m) = ch.mtime {
            n.attr.mtime = to_time(m);
        }
        n.attr.ctime = SystemTime::now();
        Ok(n.attr)
    }

    fn mkdir(
        &self,
        who: (u32, u32),
        parent: u64,
        name: &OsStr,
        mode: u32,
    ) -> Result<FileAttr, Errno> {
        self.requests.count(Op::Mkdir);
        self.make(who, parent, name, FileType::Directory, mode)
    }

    fn unlink(&self, parent: u64, name: &OsStr, dir: bool) -> Result<(), Errno> {
        self.requests
            .count(if dir { Op::Rmdir } else { Op::Unlink });
        self.remove(parent, name, dir)
    }

    fn open(&self, ino: u64, flags: i32) -> Result<FopenFlags, Errno> {
        self.requests.count(Op::Open);
        let t = &mut self.tree();
        let n = t.node(ino)?;
        if n.attr.kind == FileType::Directory && flags & libc::O_ACCMODE != libc::O_RDONLY {
            return Err(Errno::EISDIR);
        }
        Ok(fopen_flags(flags))
    }

    /// Hands `size` bytes from `offset` (fewer at the end) to `out`.
    fn read<T>(
        &self,
        ino: u64,
        offset: u64,
        size: u32,
        out: impl FnOnce(&[u8]) -> T,
    ) -> Result<T, Errno> {
        self.requests.count(Op::Read);
        let mut t = self.tree();
        let n = t.node(ino)?;
        let a = (offset as usize).min(n.data.len());
        let z = a.saturating_add(size as usize).min(n.data.len());
        Ok(out(&n.data[a..z]))
    }

    fn write(&self, ino: u64, offset: u64, data: &[u8], kill_suidgid: bool) -> Result<u32, Errno> {
        self.requests.count(Op::Write);
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|&e| e <= MAX_SIZE)
            .ok_or(Errno::EFBIG)?;
        let mut t = self.tree();
        let n = t.node(ino)?;
        if n.attr.size < end {
            n.set_len(end);
        }
        n.data[offset as usize..end as usize].copy_from_slice(data);
        let now = SystemTime::now();
        n.attr.mtime = now;
        n.attr.ctime = now;
        if self.killpriv.load(Ordering::Relaxed) && kill_suidgid {
            n.attr.perm = killed_perm(n.attr.perm, false);
        }
        Ok(data.len() as u32)
    }

    fn opendir(&self, ino: u64) -> Result<u64, Errno> {
        self.requests.count(Op::Opendir);
        let entries = self.listing(ino)?;
        let mut t = self.tree();
        let fh = t.next_fh;
        t.next_fh += 1;
        t.listings.insert(fh, entries);
        Ok(fh)
    }

    /// Calls `add` with each entry of the listing `fh` from `offset` on (and the
    /// entry's attributes) until it returns true (the reply is full). An entry
    /// returned with attributes (READDIRPLUS) counts as a lookup, `.` and `..` aside.
    fn entries(
        &self,
        fh: u64,
        offset: u64,
        plus: bool,
        mut add: impl FnMut(u64, &OsStr, FileType, &FileAttr) -> bool,
    ) -> Result<(), Errno> {
        self.requests
            .count(if plus { Op::Readdirplus } else { Op::Readdir });
        let mut t = self.tree();
        let entries = t.listings.get(&fh).cloned().ok_or(Errno::EBADF)?;
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            let Some(n) = t.nodes.get_mut(ino) else {
                continue;
            };
            if add((i + 1) as u64, name, *kind, &n.attr) {
                break;
            }
            if plus && name != "." && name != ".." {
                n.lookups += 1;
            }
        }
        Ok(())
    }

    fn releasedir(&self, fh: u64) {
        self.requests.count(Op::Releasedir);
        self.tree().listings.remove(&fh);
    }

    /// Blocks, free blocks, available blocks, files, free files, block size, name
    /// length, fragment size.
    fn statfs(&self) -> (u64, u64, u64, u64, u64, u32, u32, u32) {
        self.requests.count(Op::Statfs);
        let files = self.tree().nodes.len() as u64;
        (
            1 << 28,
            1 << 28,
            1 << 28,
            files + (1 << 20),
            1 << 20,
            4096,
            255,
            4096,
        )
    }

    fn access(&self, ino: u64) -> Result<(), Errno> {
        self.requests.count(Op::Access);
        self.tree().node(ino).map(|_| ())
    }

    fn create(
        &self,
        who: (u32, u32),
        parent: u64,
        name: &OsStr,
        mode: u32,
        flags: i32,
    ) -> Result<(FileAttr, FopenFlags), Errno> {
        self.requests.count(Op::Create);
        if mode & libc::S_IFMT != libc::S_IFREG && mode & libc::S_IFMT != 0 {
            return Err(Errno::EPERM);
        }
        let a = self.make(who, parent, name, FileType::RegularFile, mode)?;
        Ok((a, fopen_flags(flags)))
    }
}

impl Filesystem for NullFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let c = &self.core;
        c.killpriv
            .store(negotiate(&c.opts, config), Ordering::Relaxed);
        c.ring_granted
            .store(ask_io_uring(&c.opts, config), Ordering::Relaxed);
        Ok(())
    }

    fn destroy(&mut self) {
        eprintln!(
            "basalt-fusefs nullfs: requests {}",
            self.core.requests.to_json()
        );
        self.done.mark();
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let ttl = self.core.opts.entry_ttl;
        answer!(reply, self.core.lookup(parent.0, name), |a| reply.entry(
            &ttl,
            &a,
            Generation(0)
        ));
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.core.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let ttl = self.core.opts.attr_ttl;
        answer!(reply, self.core.getattr(ino.0), |a| reply.attr(&ttl, &a));
    }

    fn setattr(
        &self,
        _req: &Request,
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
        let r = self.core.setattr(ino.0, ch);
        let ttl = self.core.opts.attr_ttl;
        answer!(reply, r, |a| reply.attr(&ttl, &a));
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
        let r = self
            .core
            .mkdir((req.uid(), req.gid()), parent.0, name, mode & !umask);
        let ttl = self.core.opts.entry_ttl;
        answer!(reply, r, |a| reply.entry(&ttl, &a, Generation(0)));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        answer!(reply, self.core.unlink(parent.0, name, false), |()| reply
            .ok());
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        answer!(reply, self.core.unlink(parent.0, name, true), |()| reply
            .ok());
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        answer!(reply, self.core.open(ino.0, flags.0), |fl| reply
            .opened(FileHandle(0), fl));
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let mut reply = Some(reply);
        let r = self.core.read(ino.0, offset, size, |d| {
            reply.take().expect("one reply").data(d)
        });
        if let (Err(e), Some(reply)) = (r, reply) {
            reply.error(e);
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let kill = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        answer!(reply, self.core.write(ino.0, offset, data, kill), |w| reply
            .written(w));
    }

    /// Declined like the Basalt mount's (see there), so `close` costs the same.
    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        self.core.requests.count(Op::Flush);
        reply.error(Errno::ENOSYS);
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.core.requests.count(Op::Release);
        reply.ok();
    }

    fn fsync(&self, _req: &Request, _: INodeNo, _: FileHandle, _: bool, reply: ReplyEmpty) {
        self.core.requests.count(Op::Fsync);
        reply.ok();
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        answer!(reply, self.core.opendir(ino.0), |fh| reply
            .opened(FileHandle(fh), self.core.opts.dir_open_flags()));
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let r = self
            .core
            .entries(fh.0, offset, false, |off, name, kind, a| {
                reply.add(a.ino, off, kind, name)
            });
        answer!(reply, r, |()| reply.ok());
    }

    fn readdirplus(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let ttl = self.core.opts.entry_ttl;
        let r = self.core.entries(fh.0, offset, true, |off, name, _, a| {
            reply.add(a.ino, off, name, &ttl, a, Generation(0))
        });
        answer!(reply, r, |()| reply.ok());
    }

    fn releasedir(
        &self,
        _req: &Request,
        _: INodeNo,
        fh: FileHandle,
        _: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.core.releasedir(fh.0);
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, _: INodeNo, _: FileHandle, _: bool, reply: ReplyEmpty) {
        self.core.requests.count(Op::Fsyncdir);
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let (b, bf, ba, f, ff, bs, nl, fr) = self.core.statfs();
        reply.statfs(b, bf, ba, f, ff, bs, nl, fr);
    }

    fn getxattr(&self, _req: &Request, _: INodeNo, _: &OsStr, _: u32, reply: ReplyXattr) {
        // ENODATA like the Basalt mount: ENOSYS would make the kernel stop asking.
        self.core.requests.count(Op::Getxattr);
        reply.error(Errno::ENODATA);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.core.requests.count(Op::Listxattr);
        xattr_reply(reply, size, Vec::new());
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        answer!(reply, self.core.access(ino.0), |_| reply.ok());
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
        let who = (req.uid(), req.gid());
        let r = self.core.create(who, parent.0, name, mode & !umask, flags);
        let ttl = self.core.opts.entry_ttl;
        answer!(reply, r, |(a, fl)| reply.created(
            &ttl,
            &a,
            Generation(0),
            FileHandle(0),
            fl
        ));
    }
}

/// The same answers over io_uring (`-o io_uring`).
impl ring::Serve for NullCore {
    fn serve(&self, req: &ring::Request<'_>, reply: &mut ring::Reply<'_>) {
        use ring::Op as R;
        let (entry_ttl, attr_ttl) = (self.opts.entry_ttl, self.opts.attr_ttl);
        let who = (req.uid, req.gid);
        let ino = req.nodeid;
        let r: Result<(), Errno> = (|| {
            match req.op {
                R::Lookup { name } => reply.entry(&self.lookup(ino, name)?, entry_ttl, 0),
                R::Getattr { .. } => reply.attr(&self.getattr(ino)?, attr_ttl),
                R::Setattr { changes, .. } => {
                    let a = self.setattr(ino, changes)?;
                    reply.attr(&a, attr_ttl)
                }
                R::Mkdir { name, mode, umask } => {
                    reply.entry(&self.mkdir(who, ino, name, mode & !umask)?, entry_ttl, 0)
                }
                R::Unlink { name } => self.unlink(ino, name, false)?,
                R::Rmdir { name } => self.unlink(ino, name, true)?,
                R::Open { flags } => reply.opened(0, self.open(ino, flags)?.bits()),
                R::Read { offset, size, .. } => {
                    self.read(ino, offset, size, |d| reply.bytes(d))?;
                }
                R::Write {
                    offset,
                    data,
                    write_flags,
                    ..
                } => {
                    let kill = write_flags & ring::abi::WRITE_KILL_SUIDGID != 0;
                    reply.written(self.write(ino, offset, data, kill)?)
                }
                R::Statfs => {
                    let (b, bf, ba, f, ff, bs, nl, fr) = self.statfs();
                    reply.statfs(b, bf, ba, f, ff, bs, nl, fr)
                }
                R::Release { .. } => self.requests.count(Op::Release),
                R::Fsync { .. } => self.requests.count(Op::Fsync),
                R::Fsyncdir { .. } => self.requests.count(Op::Fsyncdir),
                R::Flush { .. } => {
                    self.requests.count(Op::Flush);
                    return Err(Errno::ENOSYS);
                }
                R::Getxattr { .. } => {
                    self.requests.count(Op::Getxattr);
                    return Err(Errno::ENODATA);
                }
                R::Listxattr { size } => {
                    self.requests.count(Op::Listxattr);
                    reply.xattr(size, &[])
                }
                R::Opendir { .. } => {
                    reply.opened(self.opendir(ino)?, self.opts.dir_open_flags().bits())
                }
                R::Readdir { fh, offset, size } => {
                    self.entries(fh, offset, false, |off, name, kind, a| {
                        reply.dirent(a.ino.0, off, kind, name, size as usize)
                    })?
                }
                R::Readdirplus { fh, offset, size } => {
                    self.entries(fh, offset, true, |off, name, _, a| {
                        reply.direntplus(a, (entry_ttl, 0), off, name, size as usize)
                    })?
                }
                R::Releasedir { fh, .. } => self.releasedir(fh),
                R::Access { .. } => self.access(ino)?,
                R::Create {
                    name,
                    mode,
                    umask,
                    flags,
                } => {
                    let (a, fl) = self.create(who, ino, name, mode & !umask, flags)?;
                    reply.created(&a, entry_ttl, 0, 0, fl.bits())
                }
                // As `fuser` does for what the `/dev/fuse` front end leaves out (rename,
                // links, symlinks, special files, xattrs, fallocate).
                R::Other(op) => {
                    eprintln!("basalt-fusefs nullfs: opcode {op} answered ENOSYS");
                    return Err(Errno::ENOSYS);
                }
                _ => {
                    eprintln!("basalt-fusefs nullfs: {} answered ENOSYS", req.op.name());
                    return Err(Errno::ENOSYS);
                }
            }
            Ok(())
        })();
        if let Err(e) = r {
            reply.error(e.code());
        }
    }
}

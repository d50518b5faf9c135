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
    fopen_flags, negotiate, reply_listing, to_time, xattr_reply, Done, FsOptions, BLKSIZE,
};
use crate::requests::{Op, Requests};
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

/// See the module documentation.
pub struct NullFs {
    opts: FsOptions,
    tree: Mutex<Tree>,
    killpriv: AtomicBool,
    requests: Requests,
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
        let root = Inode {
            attr: new_attr(ROOT, FileType::Directory, 0o755, (0, 0)),
            data: Vec::new(),
            children: BTreeMap::new(),
            parent: ROOT,
            lookups: 0,
        };
        NullFs {
            opts,
            tree: Mutex::new(Tree {
                nodes: HashMap::from([(ROOT, root)]),
                next_ino: 16,
                listings: HashMap::new(),
                next_fh: 1,
            }),
            killpriv: AtomicBool::new(false),
            requests: Requests::default(),
            done: Arc::default(),
        }
    }

    fn tree(&self) -> MutexGuard<'_, Tree> {
        self.tree.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn make(
        &self,
        req: &Request,
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
        let attr = new_attr(ino, kind, (perm & 0o7777) as u16, (req.uid(), req.gid()));
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
}

impl Filesystem for NullFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let killpriv = negotiate(&self.opts, config);
        self.killpriv.store(killpriv, Ordering::Relaxed);
        Ok(())
    }

    fn destroy(&mut self) {
        eprintln!("basalt-fusefs nullfs: requests {}", self.requests.to_json());
        self.done.mark();
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.requests.count(Op::Lookup);
        let r = (|| {
            let mut t = self.tree();
            let ino = t.child(parent.0, name)?;
            let n = t.node(ino)?;
            n.lookups += 1;
            Ok(n.attr)
        })();
        let ttl = self.opts.entry_ttl;
        answer!(reply, r, |a| reply.entry(&ttl, &a, Generation(0)));
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.requests.count(Op::Forget);
        let mut t = self.tree();
        if let Some(n) = t.nodes.get_mut(&ino.0) {
            n.lookups = n.lookups.saturating_sub(nlookup);
        }
        t.maybe_drop(ino.0);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.requests.count(Op::Getattr);
        let r = self.tree().node(ino.0).map(|n| n.attr);
        let ttl = self.opts.attr_ttl;
        answer!(reply, r, |a| reply.attr(&ttl, &a));
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
        self.requests.count(Op::Setattr);
        let r = (|| {
            let mut t = self.tree();
            let n = t.node(ino.0)?;
            if let Some(s) = size {
                if n.attr.kind != FileType::RegularFile {
                    return Err(Errno::EISDIR);
                }
                if s > MAX_SIZE {
                    return Err(Errno::EFBIG);
                }
                n.set_len(s);
                n.attr.mtime = SystemTime::now();
            }
            if let Some(m) = mode {
                n.attr.perm = (m & 0o7777) as u16;
            }
            n.attr.uid = uid.unwrap_or(n.attr.uid);
            n.attr.gid = gid.unwrap_or(n.attr.gid);
            if let Some(a) = atime {
                n.attr.atime = to_time(a);
            }
            if let Some(m) = mtime {
                n.attr.mtime = to_time(m);
            }
            n.attr.ctime = SystemTime::now();
            Ok(n.attr)
        })();
        let ttl = self.opts.attr_ttl;
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
        self.requests.count(Op::Mkdir);
        let r = self.make(req, parent.0, name, FileType::Directory, mode & !umask);
        let ttl = self.opts.entry_ttl;
        answer!(reply, r, |a| reply.entry(&ttl, &a, Generation(0)));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.requests.count(Op::Unlink);
        answer!(reply, self.remove(parent.0, name, false), |()| reply.ok());
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.requests.count(Op::Rmdir);
        answer!(reply, self.remove(parent.0, name, true), |()| reply.ok());
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.requests.count(Op::Open);
        let r = self.tree().node(ino.0).and_then(|n| {
            if n.attr.kind == FileType::Directory && flags.0 & libc::O_ACCMODE != libc::O_RDONLY {
                return Err(Errno::EISDIR);
            }
            Ok(fopen_flags(flags.0))
        });
        answer!(reply, r, |fl| reply.opened(FileHandle(0), fl));
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
        self.requests.count(Op::Read);
        let mut t = self.tree();
        match t.node(ino.0) {
            Ok(n) => {
                let a = (offset as usize).min(n.data.len());
                let z = a.saturating_add(size as usize).min(n.data.len());
                reply.data(&n.data[a..z]);
            }
            Err(e) => reply.error(e),
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
        self.requests.count(Op::Write);
        let r = (|| {
            let end = offset
                .checked_add(data.len() as u64)
                .filter(|&e| e <= MAX_SIZE)
                .ok_or(Errno::EFBIG)?;
            let mut t = self.tree();
            let n = t.node(ino.0)?;
            if n.attr.size < end {
                n.set_len(end);
            }
            n.data[offset as usize..end as usize].copy_from_slice(data);
            let now = SystemTime::now();
            n.attr.mtime = now;
            n.attr.ctime = now;
            if self.killpriv.load(Ordering::Relaxed)
                && write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID)
            {
                n.attr.perm = killed_perm(n.attr.perm, false);
            }
            Ok(data.len() as u32)
        })();
        answer!(reply, r, |w| reply.written(w));
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
        self.requests.count(Op::Flush);
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
        self.requests.count(Op::Release);
        reply.ok();
    }

    fn fsync(&self, _req: &Request, _: INodeNo, _: FileHandle, _: bool, reply: ReplyEmpty) {
        self.requests.count(Op::Fsync);
        reply.ok();
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.requests.count(Op::Opendir);
        let r = self.listing(ino.0).map(|entries| {
            let mut t = self.tree();
            let fh = t.next_fh;
            t.next_fh += 1;
            t.listings.insert(fh, entries);
            fh
        });
        answer!(reply, r, |fh| reply
            .opened(FileHandle(fh), FopenFlags::empty()));
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        self.requests.count(Op::Readdir);
        let t = self.tree();
        let Some(entries) = t.listings.get(&fh.0) else {
            return reply.error(Errno::EBADF);
        };
        reply_listing(entries, offset, reply);
    }

    fn readdirplus(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        self.requests.count(Op::Readdirplus);
        let mut t = self.tree();
        let Some(entries) = t.listings.get(&fh.0).cloned() else {
            return reply.error(Errno::EBADF);
        };
        let ttl = self.opts.entry_ttl;
        for (i, (ino, _, name)) in entries.iter().enumerate().skip(offset as usize) {
            let Some(n) = t.nodes.get_mut(ino) else {
                continue;
            };
            if reply.add(
                INodeNo(*ino),
                (i + 1) as u64,
                name,
                &ttl,
                &n.attr,
                Generation(0),
            ) {
                break;
            }
            if name != "." && name != ".." {
                n.lookups += 1;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _: INodeNo,
        fh: FileHandle,
        _: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.requests.count(Op::Releasedir);
        self.tree().listings.remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, _: INodeNo, _: FileHandle, _: bool, reply: ReplyEmpty) {
        self.requests.count(Op::Fsyncdir);
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.requests.count(Op::Statfs);
        let files = self.tree().nodes.len() as u64;
        reply.statfs(
            1 << 28,
            1 << 28,
            1 << 28,
            files + (1 << 20),
            1 << 20,
            4096,
            255,
            4096,
        );
    }

    fn getxattr(&self, _req: &Request, _: INodeNo, _: &OsStr, _: u32, reply: ReplyXattr) {
        // ENODATA like the Basalt mount: ENOSYS would make the kernel stop asking.
        self.requests.count(Op::Getxattr);
        reply.error(Errno::ENODATA);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.requests.count(Op::Listxattr);
        xattr_reply(reply, size, Vec::new());
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        self.requests.count(Op::Access);
        answer!(reply, self.tree().node(ino.0).map(|_| ()), |_| reply.ok());
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
        self.requests.count(Op::Create);
        if mode & libc::S_IFMT != libc::S_IFREG && mode & libc::S_IFMT != 0 {
            return reply.error(Errno::EPERM);
        }
        let r = self.make(req, parent.0, name, FileType::RegularFile, mode & !umask);
        let ttl = self.opts.entry_ttl;
        answer!(reply, r, |a| reply.created(
            &ttl,
            &a,
            Generation(0),
            FileHandle(0),
            fopen_flags(flags)
        ));
    }
}

//! The replies a request handler gives, as traits, so that one handler answers both
//! through `fuser`'s reply types (requests read from `/dev/fuse`) and into an io_uring
//! entry (`crate::ring`). Method names and arguments are `fuser`'s, so a handler's
//! body reads the same whichever it answers; `Who` is the caller, from either.

use std::ffi::OsStr;
use std::time::Duration;

use fuser::{
    Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen,
    ReplyStatfs, ReplyWrite, ReplyXattr, Request,
};

use basalt_engine::Db;
use std::sync::mpsc::{sync_channel, SyncSender};

use crate::fs::ReadPlan;
use crate::read_pool::ReadPool;
use crate::ring;

/// Who made a request.
#[derive(Debug, Clone, Copy)]
pub struct Who {
    uid: u32,
    gid: u32,
    pid: u32,
}

impl Who {
    pub fn uid(&self) -> u32 {
        self.uid
    }
    pub fn gid(&self) -> u32 {
        self.gid
    }
    pub fn pid(&self) -> u32 {
        self.pid
    }
}

impl From<&Request> for Who {
    fn from(r: &Request) -> Who {
        Who {
            uid: r.uid(),
            gid: r.gid(),
            pid: r.pid(),
        }
    }
}

impl From<&ring::Request<'_>> for Who {
    fn from(r: &ring::Request<'_>) -> Who {
        Who {
            uid: r.uid,
            gid: r.gid,
            pid: r.pid,
        }
    }
}

/// Every reply can be an error.
pub trait AnsError: Sized {
    fn error(self, e: Errno);
}

pub trait AnsEntry: AnsError {
    fn entry(self, ttl: &Duration, attr: &FileAttr, generation: Generation);
}

pub trait AnsAttr: AnsError {
    fn attr(self, ttl: &Duration, attr: &FileAttr);
}

pub trait AnsEmpty: AnsError {
    fn ok(self);
}

pub trait AnsLseek: AnsError {
    fn offset(self, offset: i64);
}

pub trait AnsOpen: AnsError {
    fn opened(self, fh: FileHandle, flags: FopenFlags);
}

pub trait AnsCreate: AnsError {
    fn created(
        self,
        ttl: &Duration,
        attr: &FileAttr,
        generation: Generation,
        fh: FileHandle,
        flags: FopenFlags,
    );
}

pub trait AnsWrite: AnsError {
    fn written(self, size: u32);
}

pub trait AnsData: AnsError {
    fn data(self, data: &[u8]);
}

/// A READ's reply: besides answering with bytes, it decides where the device read
/// behind it runs.
pub trait AnsRead: AnsData {
    /// Reads `plan` (which needs the device) and answers: on the read pool, or on
    /// this thread.
    fn read_device(self, plan: ReadPlan, db: &Db, pool: &ReadPool<(ReadPlan, Pooled)>);
}

/// A read's reply as the read pool holds it.
pub enum Pooled {
    /// A `/dev/fuse` reply, sent from the pool's thread.
    Fuser(ReplyData),
    /// An io_uring queue thread waiting for the bytes: an entry is answered on the
    /// thread that owns its ring.
    Waiting(SyncSender<Result<Vec<u8>, Errno>>),
}

impl AnsError for Pooled {
    fn error(self, e: Errno) {
        match self {
            Pooled::Fuser(r) => r.error(e),
            // The waiter is gone only if its thread died; nobody is left to answer.
            Pooled::Waiting(tx) => drop(tx.send(Err(e))),
        }
    }
}

impl AnsData for Pooled {
    fn data(self, data: &[u8]) {
        match self {
            Pooled::Fuser(r) => r.data(data),
            Pooled::Waiting(tx) => drop(tx.send(Ok(data.to_vec()))),
        }
    }
}

pub trait AnsXattr: AnsError {
    fn size(self, size: u32);
    fn data(self, data: &[u8]);
}

pub trait AnsStatfs: AnsError {
    #[allow(clippy::too_many_arguments)]
    fn statfs(
        self,
        blocks: u64,
        bfree: u64,
        bavail: u64,
        files: u64,
        ffree: u64,
        bsize: u32,
        namelen: u32,
        frsize: u32,
    );
}

pub trait AnsDir: AnsError {
    /// Adds an entry; true when the reply is full (the entry was not added).
    fn add(&mut self, ino: INodeNo, offset: u64, kind: FileType, name: &OsStr) -> bool;
    fn ok(self);
}

pub trait AnsDirPlus: AnsError {
    /// Adds an entry with its attributes; true when the reply is full.
    fn add(
        &mut self,
        ino: INodeNo,
        offset: u64,
        name: &OsStr,
        ttl: &Duration,
        attr: &FileAttr,
        generation: Generation,
    ) -> bool;
    fn ok(self);
}

// ---- fuser's replies: forwarded as they are.

macro_rules! fuser_error {
    ($($t:ty),*) => {$(
        impl AnsError for $t {
            fn error(self, e: Errno) {
                <$t>::error(self, e)
            }
        }
    )*};
}
fuser_error!(
    ReplyEntry,
    ReplyAttr,
    ReplyEmpty,
    ReplyLseek,
    ReplyOpen,
    ReplyCreate,
    ReplyWrite,
    ReplyData,
    ReplyXattr,
    ReplyStatfs,
    ReplyDirectory,
    ReplyDirectoryPlus
);

impl AnsEntry for ReplyEntry {
    fn entry(self, ttl: &Duration, attr: &FileAttr, generation: Generation) {
        ReplyEntry::entry(self, ttl, attr, generation)
    }
}

impl AnsAttr for ReplyAttr {
    fn attr(self, ttl: &Duration, attr: &FileAttr) {
        ReplyAttr::attr(self, ttl, attr)
    }
}

impl AnsEmpty for ReplyEmpty {
    fn ok(self) {
        ReplyEmpty::ok(self)
    }
}

impl AnsLseek for ReplyLseek {
    fn offset(self, offset: i64) {
        ReplyLseek::offset(self, offset)
    }
}

impl AnsOpen for ReplyOpen {
    fn opened(self, fh: FileHandle, flags: FopenFlags) {
        ReplyOpen::opened(self, fh, flags)
    }
}

impl AnsCreate for ReplyCreate {
    fn created(
        self,
        ttl: &Duration,
        attr: &FileAttr,
        generation: Generation,
        fh: FileHandle,
        flags: FopenFlags,
    ) {
        ReplyCreate::created(self, ttl, attr, generation, fh, flags)
    }
}

impl AnsWrite for ReplyWrite {
    fn written(self, size: u32) {
        ReplyWrite::written(self, size)
    }
}

impl AnsData for ReplyData {
    fn data(self, data: &[u8]) {
        ReplyData::data(self, data)
    }
}

impl AnsRead for ReplyData {
    fn read_device(self, plan: ReadPlan, _: &Db, pool: &ReadPool<(ReadPlan, Pooled)>) {
        pool.run((plan, Pooled::Fuser(self)))
    }
}

impl AnsXattr for ReplyXattr {
    fn size(self, size: u32) {
        ReplyXattr::size(self, size)
    }
    fn data(self, data: &[u8]) {
        ReplyXattr::data(self, data)
    }
}

impl AnsStatfs for ReplyStatfs {
    fn statfs(
        self,
        blocks: u64,
        bfree: u64,
        bavail: u64,
        files: u64,
        ffree: u64,
        bsize: u32,
        namelen: u32,
        frsize: u32,
    ) {
        ReplyStatfs::statfs(
            self, blocks, bfree, bavail, files, ffree, bsize, namelen, frsize,
        )
    }
}

impl AnsDir for ReplyDirectory {
    fn add(&mut self, ino: INodeNo, offset: u64, kind: FileType, name: &OsStr) -> bool {
        ReplyDirectory::add(self, ino, offset, kind, name)
    }
    fn ok(self) {
        ReplyDirectory::ok(self)
    }
}

impl AnsDirPlus for ReplyDirectoryPlus {
    fn add(
        &mut self,
        ino: INodeNo,
        offset: u64,
        name: &OsStr,
        ttl: &Duration,
        attr: &FileAttr,
        generation: Generation,
    ) -> bool {
        ReplyDirectoryPlus::add(self, ino, offset, name, ttl, attr, generation)
    }
    fn ok(self) {
        ReplyDirectoryPlus::ok(self)
    }
}

// ---- io_uring: encoded into the entry's payload buffer.

type Ring<'r, 'b> = &'r mut ring::Reply<'b>;

impl AnsError for Ring<'_, '_> {
    fn error(self, e: Errno) {
        ring::Reply::error(self, e.code())
    }
}

impl AnsEntry for Ring<'_, '_> {
    fn entry(self, ttl: &Duration, attr: &FileAttr, generation: Generation) {
        ring::Reply::entry(self, attr, *ttl, generation.0)
    }
}

impl AnsAttr for Ring<'_, '_> {
    fn attr(self, ttl: &Duration, attr: &FileAttr) {
        ring::Reply::attr(self, attr, *ttl)
    }
}

impl AnsEmpty for Ring<'_, '_> {
    fn ok(self) {}
}

impl AnsLseek for Ring<'_, '_> {
    fn offset(self, offset: i64) {
        ring::Reply::offset(self, offset)
    }
}

impl AnsOpen for Ring<'_, '_> {
    fn opened(self, fh: FileHandle, flags: FopenFlags) {
        ring::Reply::opened(self, fh.0, flags.bits())
    }
}

impl AnsCreate for Ring<'_, '_> {
    fn created(
        self,
        ttl: &Duration,
        attr: &FileAttr,
        generation: Generation,
        fh: FileHandle,
        flags: FopenFlags,
    ) {
        ring::Reply::created(self, attr, *ttl, generation.0, fh.0, flags.bits())
    }
}

impl AnsWrite for Ring<'_, '_> {
    fn written(self, size: u32) {
        ring::Reply::written(self, size)
    }
}

impl AnsData for Ring<'_, '_> {
    fn data(self, data: &[u8]) {
        if !ring::Reply::bytes(self, data) {
            ring::Reply::error(self, libc::EIO);
        }
    }
}

/// An io_uring READ. Alone on its queue, its device read runs on the queue's thread
/// (a hand-off would only add wake-ups); with other requests in progress there
/// (`deep`), it goes to the read pool, whose threads may run on another CPU and batch
/// it with other reads, while the queue's thread waits to answer its entry.
pub struct RingRead<'r, 'b> {
    pub reply: Ring<'r, 'b>,
    pub deep: bool,
}

impl AnsError for RingRead<'_, '_> {
    fn error(self, e: Errno) {
        AnsError::error(self.reply, e)
    }
}

impl AnsData for RingRead<'_, '_> {
    fn data(self, data: &[u8]) {
        AnsData::data(self.reply, data)
    }
}

impl AnsRead for RingRead<'_, '_> {
    fn read_device(self, plan: ReadPlan, db: &Db, pool: &ReadPool<(ReadPlan, Pooled)>) {
        if !self.deep {
            return ReadPlan::execute_each(vec![(plan, self.reply)], db, crate::fuse::reply_read);
        }
        let (tx, rx) = sync_channel(1);
        pool.run((plan, Pooled::Waiting(tx)));
        match rx.recv() {
            Ok(Ok(data)) => AnsData::data(self.reply, &data),
            Ok(Err(e)) => AnsError::error(self.reply, e),
            // The pool dropped the read without answering (it is shutting down).
            Err(_) => AnsError::error(self.reply, Errno::EIO),
        }
    }
}

impl AnsXattr for Ring<'_, '_> {
    fn size(self, size: u32) {
        ring::Reply::xattr_size(self, size)
    }
    fn data(self, data: &[u8]) {
        if !ring::Reply::bytes(self, data) {
            ring::Reply::error(self, libc::ERANGE);
        }
    }
}

impl AnsStatfs for Ring<'_, '_> {
    fn statfs(
        self,
        blocks: u64,
        bfree: u64,
        bavail: u64,
        files: u64,
        ffree: u64,
        bsize: u32,
        namelen: u32,
        frsize: u32,
    ) {
        ring::Reply::statfs(
            self, blocks, bfree, bavail, files, ffree, bsize, namelen, frsize,
        )
    }
}

/// A READDIR or READDIRPLUS reply over io_uring, holding the size the kernel asked.
pub struct RingDir<'r, 'b> {
    reply: Ring<'r, 'b>,
    max: usize,
}

impl<'r, 'b> RingDir<'r, 'b> {
    /// A listing reply of at most `size` bytes (the READDIR's size).
    pub fn new(reply: Ring<'r, 'b>, size: u32) -> Self {
        RingDir {
            reply,
            max: size as usize,
        }
    }
}

impl AnsError for RingDir<'_, '_> {
    fn error(self, e: Errno) {
        ring::Reply::error(self.reply, e.code())
    }
}

impl AnsDir for RingDir<'_, '_> {
    fn add(&mut self, ino: INodeNo, offset: u64, kind: FileType, name: &OsStr) -> bool {
        self.reply.dirent(ino.0, offset, kind, name, self.max)
    }
    fn ok(self) {}
}

impl AnsDirPlus for RingDir<'_, '_> {
    fn add(
        &mut self,
        _ino: INodeNo,
        offset: u64,
        name: &OsStr,
        ttl: &Duration,
        attr: &FileAttr,
        generation: Generation,
    ) -> bool {
        self.reply
            .direntplus(attr, (*ttl, generation.0), offset, name, self.max)
    }
    fn ok(self) {}
}

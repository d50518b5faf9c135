//! The replies a request handler gives, as traits, so that one handler answers both
//! through `fuser`'s reply types (requests read from `/dev/fuse`) and into an io_uring
//! entry (`crate::ring`). Method names and arguments are `fuser`'s, so a handler's
//! body reads the same whichever it answers; `Who` is the caller, from either.

use std::ffi::OsStr;
use std::time::Duration;

use fuser::{
    Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request,
};

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
    /// The `fuser` reply, which the read pool can answer from its threads; an
    /// io_uring reply must be answered on its queue's thread, so it comes back.
    fn pooled(self) -> Result<ReplyData, Self>;
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
    fn pooled(self) -> Result<ReplyData, Self> {
        Ok(self)
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
    fn pooled(self) -> Result<ReplyData, Self> {
        Err(self)
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

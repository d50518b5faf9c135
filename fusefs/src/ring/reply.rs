//! Encoding one reply into a ring entry's payload buffer: the reply's arguments,
//! without the header (the transport writes that, with the error and length).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{FileAttr, FileType};
use zerocopy::{Immutable, IntoBytes};

use super::abi;

/// The reply being built for one request.
pub struct Reply<'a> {
    buf: &'a mut [u8],
    len: usize,
    error: i32,
}

/// Seconds and nanoseconds since the epoch (before it: negative seconds, as the
/// kernel reads them).
fn split_time(t: SystemTime) -> (u64, u32) {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs(), d.subsec_nanos()),
        Err(e) => {
            let d = e.duration();
            let (mut s, mut n) = (-(d.as_secs() as i64), d.subsec_nanos());
            if n > 0 {
                s -= 1;
                n = 1_000_000_000 - n;
            }
            (s as u64, n)
        }
    }
}

/// The `S_IF*` bits of a file type.
fn type_bits(kind: FileType) -> u32 {
    match kind {
        FileType::RegularFile => libc::S_IFREG,
        FileType::Directory => libc::S_IFDIR,
        FileType::Symlink => libc::S_IFLNK,
        FileType::NamedPipe => libc::S_IFIFO,
        FileType::CharDevice => libc::S_IFCHR,
        FileType::BlockDevice => libc::S_IFBLK,
        FileType::Socket => libc::S_IFSOCK,
    }
}

/// A file's attributes as the kernel reads them.
pub fn attr(a: &FileAttr) -> abi::Attr {
    let (atime, atimensec) = split_time(a.atime);
    let (mtime, mtimensec) = split_time(a.mtime);
    let (ctime, ctimensec) = split_time(a.ctime);
    abi::Attr {
        ino: a.ino.0,
        size: a.size,
        blocks: a.blocks,
        atime,
        mtime,
        ctime,
        atimensec,
        mtimensec,
        ctimensec,
        mode: type_bits(a.kind) | u32::from(a.perm),
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: a.blksize,
        flags: 0,
    }
}

fn entry_out(a: &FileAttr, ttl: Duration, generation: u64) -> abi::EntryOut {
    abi::EntryOut {
        nodeid: a.ino.0,
        generation,
        entry_valid: ttl.as_secs(),
        attr_valid: ttl.as_secs(),
        entry_valid_nsec: ttl.subsec_nanos(),
        attr_valid_nsec: ttl.subsec_nanos(),
        attr: attr(a),
    }
}

impl<'a> Reply<'a> {
    /// A reply written into `buf` (the entry's payload buffer).
    pub fn new(buf: &'a mut [u8]) -> Reply<'a> {
        Reply {
            buf,
            len: 0,
            error: 0,
        }
    }

    /// Answers with `errno` (and no arguments).
    pub fn error(&mut self, errno: i32) {
        self.error = errno;
        self.len = 0;
    }

    /// Appends `b`; false (and nothing appended) if it does not fit.
    pub fn bytes(&mut self, b: &[u8]) -> bool {
        let Some(dst) = self.buf.get_mut(self.len..self.len + b.len()) else {
            return false;
        };
        dst.copy_from_slice(b);
        self.len += b.len();
        true
    }

    fn put<T: IntoBytes + Immutable>(&mut self, v: &T) -> bool {
        self.bytes(v.as_bytes())
    }

    pub fn entry(&mut self, a: &FileAttr, ttl: Duration, generation: u64) {
        self.put(&entry_out(a, ttl, generation));
    }

    pub fn attr(&mut self, a: &FileAttr, ttl: Duration) {
        self.put(&abi::AttrOut {
            attr_valid: ttl.as_secs(),
            attr_valid_nsec: ttl.subsec_nanos(),
            dummy: 0,
            attr: attr(a),
        });
    }

    pub fn opened(&mut self, fh: u64, open_flags: u32) {
        self.put(&abi::OpenOut {
            fh,
            open_flags,
            backing_id: 0,
        });
    }

    pub fn created(
        &mut self,
        a: &FileAttr,
        ttl: Duration,
        generation: u64,
        fh: u64,
        open_flags: u32,
    ) {
        self.entry(a, ttl, generation);
        self.opened(fh, open_flags);
    }

    pub fn offset(&mut self, offset: i64) {
        self.put(&abi::LseekOut {
            offset: offset as u64,
        });
    }

    pub fn written(&mut self, size: u32) {
        self.put(&abi::WriteOut { size, padding: 0 });
    }

    /// Blocks, free blocks, available blocks, files, free files, block size, name
    /// length, fragment size (as `fuser`'s `ReplyStatfs::statfs`).
    #[allow(clippy::too_many_arguments)]
    pub fn statfs(
        &mut self,
        blocks: u64,
        bfree: u64,
        bavail: u64,
        files: u64,
        ffree: u64,
        bsize: u32,
        namelen: u32,
        frsize: u32,
    ) {
        self.put(&abi::StatfsOut {
            blocks,
            bfree,
            bavail,
            files,
            ffree,
            bsize,
            namelen,
            frsize,
            padding: 0,
            spare: [0; 6],
        });
    }

    /// The length of an extended attribute's value or of a list of names, for a
    /// caller that asked with size 0.
    pub fn xattr_size(&mut self, size: u32) {
        self.put(&abi::GetxattrOut { size, padding: 0 });
    }

    /// An extended attribute's value or a list of names: its length when the caller
    /// asked with size 0, ERANGE when `size` is too small, else the bytes.
    pub fn xattr(&mut self, size: u32, data: &[u8]) {
        if size == 0 {
            self.xattr_size(data.len() as u32);
        } else if (size as usize) < data.len() {
            self.error(libc::ERANGE);
        } else {
            self.bytes(data);
        }
    }

    /// Appends a directory entry (the next one is at `off`) unless the reply would
    /// pass `max` bytes; true when it did not fit.
    pub fn dirent(&mut self, ino: u64, off: u64, kind: FileType, name: &OsStr, max: usize) -> bool {
        self.dirent_after(None, ino, off, kind, name, max)
    }

    /// A READDIRPLUS entry: the entry's lookup reply, then the directory entry.
    pub fn direntplus(
        &mut self,
        a: &FileAttr,
        (ttl, generation): (Duration, u64),
        off: u64,
        name: &OsStr,
        max: usize,
    ) -> bool {
        let e = entry_out(a, ttl, generation);
        self.dirent_after(Some(e), a.ino.0, off, a.kind, name, max)
    }

    fn dirent_after(
        &mut self,
        plus: Option<abi::EntryOut>,
        ino: u64,
        off: u64,
        kind: FileType,
        name: &OsStr,
        max: usize,
    ) -> bool {
        let name = name.as_bytes();
        let fixed = plus.map_or(0, |_| std::mem::size_of::<abi::EntryOut>())
            + std::mem::size_of::<abi::Dirent>();
        let len = (fixed + name.len()).next_multiple_of(8);
        if self.len + len > max.min(self.buf.len()) {
            return true;
        }
        if let Some(e) = plus {
            self.put(&e);
        }
        self.put(&abi::Dirent {
            ino,
            off,
            namelen: name.len() as u32,
            kind: type_bits(kind) >> 12,
        });
        self.bytes(name);
        let pad = len - fixed - name.len();
        self.bytes(&[0u8; 8][..pad]);
        false
    }

    /// The errno (0 for success) and the length of the reply's arguments.
    pub fn finish(&self) -> (i32, usize) {
        (self.error, self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fuser::INodeNo;

    #[test]
    fn times_before_the_epoch_have_negative_seconds() {
        assert_eq!(split_time(UNIX_EPOCH + Duration::new(5, 7)), (5, 7));
        let before = UNIX_EPOCH - Duration::new(1, 250_000_000);
        assert_eq!(split_time(before), ((-2i64) as u64, 750_000_000));
    }

    #[test]
    fn directory_entries_are_padded_and_stop_at_the_size_asked() {
        let mut buf = vec![0u8; 4096];
        let mut r = Reply::new(&mut buf);
        assert!(!r.dirent(5, 1, FileType::RegularFile, OsStr::new("abc"), 64));
        assert_eq!(r.finish(), (0, 32), "24 bytes + 3 of name, padded to 32");
        assert!(!r.dirent(6, 2, FileType::Directory, OsStr::new("d"), 64));
        assert!(
            r.dirent(7, 3, FileType::Directory, OsStr::new("e"), 64),
            "full"
        );
        assert_eq!(r.finish(), (0, 64));
        assert_eq!(&buf[16..24], &[3, 0, 0, 0, 8, 0, 0, 0], "namelen 3, DT_REG");
        assert_eq!(&buf[24..32], b"abc\0\0\0\0\0");

        let a = FileAttr {
            ino: INodeNo(9),
            size: 1,
            blocks: 1,
            atime: UNIX_EPOCH,
            mtime: UNIX_EPOCH,
            ctime: UNIX_EPOCH,
            crtime: UNIX_EPOCH,
            kind: FileType::Directory,
            perm: 0o755,
            nlink: 2,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        };
        let mut buf = vec![0u8; 4096];
        let mut r = Reply::new(&mut buf);
        r.direntplus(&a, (Duration::from_secs(30), 0), 1, OsStr::new("x"), 4096);
        assert_eq!(r.finish(), (0, 128 + 32));
        assert_eq!(attr(&a).mode, libc::S_IFDIR | 0o755);
    }

    #[test]
    fn xattr_replies_follow_the_size_protocol() {
        let mut buf = vec![0u8; 64];
        let mut r = Reply::new(&mut buf);
        r.xattr(0, b"12345");
        assert_eq!(r.finish(), (0, 8));
        let mut r = Reply::new(&mut buf);
        r.xattr(3, b"12345");
        assert_eq!(r.finish(), (libc::ERANGE, 0));
        let mut r = Reply::new(&mut buf);
        r.xattr(16, b"12345");
        assert_eq!(r.finish(), (0, 5));
    }
}

//! The Basalt mount over io_uring (`-o io_uring`): each request taken from the ring
//! goes to the same handler (`BasaltFs::do_*`) as its `/dev/fuse` twin, which answers
//! into the ring entry through `crate::answer`. An entry is answered on its queue's
//! thread: a read alone on its queue is done there, one among others goes to the read
//! pool while the thread waits for its bytes (`answer::RingRead`).

use std::path::Path;

use fuser::{AccessFlags, FileHandle, INodeNo, LockOwner, OpenFlags, RenameFlags, WriteFlags};

use crate::answer::{RingDir, RingRead, Who};
use crate::fuse::BasaltFs;
use crate::ring::{self, Op};

impl ring::Serve for BasaltFs {
    fn serve(&self, req: &ring::Request<'_>, reply: &mut ring::Reply<'_>) {
        // Spinning for a device read's completion is worth it only while nothing
        // else on this CPU's queue waits for the CPU (as with the read pool).
        basalt_engine::poll_reads_on_this_thread(req.in_progress == 1);
        let who = Who::from(req);
        let w = &who;
        let ino = INodeNo(req.nodeid);
        let fh = FileHandle;
        let owner = |o: Option<u64>| o.map(LockOwner);
        match req.op {
            Op::Lookup { name } => self.do_lookup(w, ino, name, reply),
            Op::Getattr { fh: h } => self.do_getattr(w, ino, h.map(fh), reply),
            Op::Setattr { changes, .. } => self.do_setattr(w, ino, changes, reply),
            Op::Readlink => self.do_readlink(w, ino, reply),
            Op::Symlink { name, target } => self.do_symlink(w, ino, name, Path::new(target), reply),
            Op::Mknod {
                name,
                mode,
                rdev,
                umask,
            } => self.do_mknod(w, ino, name, mode, umask, rdev, reply),
            Op::Mkdir { name, mode, umask } => self.do_mkdir(w, ino, name, mode, umask, reply),
            Op::Unlink { name } => self.do_unlink(w, ino, name, reply),
            Op::Rmdir { name } => self.do_rmdir(w, ino, name, reply),
            Op::Rename {
                newdir,
                name,
                newname,
                flags,
            } => self.do_rename(
                w,
                ino,
                name,
                INodeNo(newdir),
                newname,
                RenameFlags::from_bits_retain(flags),
                reply,
            ),
            Op::Link { oldnodeid, newname } => {
                self.do_link(w, INodeNo(oldnodeid), ino, newname, reply)
            }
            Op::Open { flags } => self.do_open(w, ino, OpenFlags(flags), reply),
            Op::Read {
                fh: h,
                offset,
                size,
                flags,
                lock_owner,
            } => self.do_read(
                w,
                ino,
                fh(h),
                offset,
                size,
                OpenFlags(flags),
                owner(lock_owner),
                RingRead {
                    reply,
                    deep: req.in_progress > 1,
                },
            ),
            Op::Write {
                fh: h,
                offset,
                data,
                write_flags,
                flags,
                lock_owner,
            } => self.do_write(
                w,
                ino,
                fh(h),
                offset,
                data,
                WriteFlags::from_bits_retain(write_flags),
                OpenFlags(flags),
                owner(lock_owner),
                reply,
            ),
            Op::Statfs => self.do_statfs(w, ino, reply),
            Op::Release {
                fh: h,
                flags,
                flush,
                lock_owner,
            } => self.do_release(
                w,
                ino,
                fh(h),
                OpenFlags(flags),
                owner(lock_owner),
                flush,
                reply,
            ),
            Op::Fsync { fh: h, datasync } => self.do_fsync(w, ino, fh(h), datasync, reply),
            Op::Setxattr { name, value, flags } => {
                self.do_setxattr(w, ino, name, value, flags, 0, reply)
            }
            Op::Getxattr { name, size } => self.do_getxattr(w, ino, name, size, reply),
            Op::Listxattr { size } => self.do_listxattr(w, ino, size, reply),
            Op::Removexattr { name } => self.do_removexattr(w, ino, name, reply),
            Op::Flush { fh: h, lock_owner } => {
                self.do_flush(w, ino, fh(h), LockOwner(lock_owner), reply)
            }
            Op::Opendir { flags } => self.do_opendir(w, ino, OpenFlags(flags), reply),
            Op::Readdir {
                fh: h,
                offset,
                size,
            } => self.do_readdir(w, ino, fh(h), offset, RingDir::new(reply, size)),
            Op::Readdirplus {
                fh: h,
                offset,
                size,
            } => self.do_readdirplus(w, ino, fh(h), offset, RingDir::new(reply, size)),
            Op::Releasedir { fh: h, flags } => {
                self.do_releasedir(w, ino, fh(h), OpenFlags(flags), reply)
            }
            Op::Fsyncdir { fh: h, datasync } => self.do_fsyncdir(w, ino, fh(h), datasync, reply),
            Op::Access { mask } => {
                let mask = AccessFlags::from_bits_retain(mask as i32);
                self.do_access(w, ino, mask, reply)
            }
            Op::Create {
                name,
                mode,
                umask,
                flags,
            } => self.do_create(w, ino, name, mode, umask, flags, reply),
            Op::Fallocate {
                fh: h,
                offset,
                length,
                mode,
            } => self.do_fallocate(w, ino, fh(h), offset, length, mode, reply),
            Op::Lseek {
                fh: h,
                offset,
                whence,
            } => self.do_lseek(w, ino, fh(h), offset, whence, reply),
            // As `fuser` answers what `BasaltFs` does not implement (FUSE_STATX,
            // locks, ioctl...).
            Op::Other(_) => reply.error(libc::ENOSYS),
        }
    }
}

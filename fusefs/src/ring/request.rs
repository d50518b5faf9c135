//! Decoding one request from a ring entry: the header, the opcode's request header
//! (the kernel's first argument, in `op_in`) and the rest of the arguments (names,
//! write data) in the payload buffer.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use zerocopy::FromBytes;

use fuser::TimeOrNow;

use super::abi::{self, fattr, opcode, InHeader, RingHeaders};
use crate::fuse::AttrChanges;
use crate::layout;

/// What a SETATTR asks to change (`None`: a time out of range).
fn changes(s: &abi::SetattrIn) -> Option<AttrChanges> {
    let has = |bit: u32| s.valid & bit != 0;
    let time = |set: u32, now: u32, secs: u64, nsecs: u32| -> Option<Option<TimeOrNow>> {
        Some(match (has(set), has(now)) {
            (false, _) => None,
            (true, true) => Some(TimeOrNow::Now),
            (true, false) => Some(TimeOrNow::SpecificTime(layout::time_of(
                secs as i64,
                nsecs,
            )?)),
        })
    };
    Some(AttrChanges {
        mode: has(fattr::MODE).then_some(s.mode),
        uid: has(fattr::UID).then_some(s.uid),
        gid: has(fattr::GID).then_some(s.gid),
        size: has(fattr::SIZE).then_some(s.size),
        atime: time(fattr::ATIME, fattr::ATIME_NOW, s.atime, s.atimensec)?,
        mtime: time(fattr::MTIME, fattr::MTIME_NOW, s.mtime, s.mtimensec)?,
    })
}

/// One request taken from the ring.
#[derive(Debug)]
pub struct Request<'a> {
    /// Requests in progress on this request's queue, itself included (set by the
    /// transport): 1 means the queue's CPU has nothing else to do meanwhile.
    pub in_progress: usize,
    pub unique: u64,
    pub nodeid: u64,
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
    pub op: Op<'a>,
}

/// What a request asks, for the opcodes the transport serves.
#[derive(Debug)]
pub enum Op<'a> {
    Lookup {
        name: &'a OsStr,
    },
    Getattr {
        fh: Option<u64>,
    },
    Setattr {
        changes: AttrChanges,
        fh: Option<u64>,
    },
    Readlink,
    Symlink {
        name: &'a OsStr,
        target: &'a OsStr,
    },
    Mknod {
        name: &'a OsStr,
        mode: u32,
        rdev: u32,
        umask: u32,
    },
    Mkdir {
        name: &'a OsStr,
        mode: u32,
        umask: u32,
    },
    Unlink {
        name: &'a OsStr,
    },
    Rmdir {
        name: &'a OsStr,
    },
    /// RENAME (flags 0) and RENAME2.
    Rename {
        newdir: u64,
        name: &'a OsStr,
        newname: &'a OsStr,
        flags: u32,
    },
    /// A new name in the request's directory for inode `oldnodeid`.
    Link {
        oldnodeid: u64,
        newname: &'a OsStr,
    },
    Open {
        flags: i32,
    },
    Read {
        fh: u64,
        offset: u64,
        size: u32,
        flags: i32,
        lock_owner: Option<u64>,
    },
    Write {
        fh: u64,
        offset: u64,
        data: &'a [u8],
        write_flags: u32,
        flags: i32,
        lock_owner: Option<u64>,
    },
    Statfs,
    Release {
        fh: u64,
        flags: i32,
        flush: bool,
        lock_owner: Option<u64>,
    },
    Fsync {
        fh: u64,
        datasync: bool,
    },
    Setxattr {
        name: &'a OsStr,
        value: &'a [u8],
        flags: i32,
    },
    Getxattr {
        name: &'a OsStr,
        size: u32,
    },
    Listxattr {
        size: u32,
    },
    Removexattr {
        name: &'a OsStr,
    },
    Flush {
        fh: u64,
        lock_owner: u64,
    },
    Opendir {
        flags: i32,
    },
    Readdir {
        fh: u64,
        offset: u64,
        size: u32,
    },
    Readdirplus {
        fh: u64,
        offset: u64,
        size: u32,
    },
    Releasedir {
        fh: u64,
        flags: i32,
    },
    Fsyncdir {
        fh: u64,
        datasync: bool,
    },
    Access {
        mask: u32,
    },
    Create {
        name: &'a OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
    },
    Fallocate {
        fh: u64,
        offset: u64,
        length: u64,
        mode: i32,
    },
    Lseek {
        fh: u64,
        offset: i64,
        whence: i32,
    },
    /// An opcode this transport does not decode (answered ENOSYS).
    Other(u32),
}

impl Op<'_> {
    /// The operation's name, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Lookup { .. } => "LOOKUP",
            Op::Getattr { .. } => "GETATTR",
            Op::Setattr { .. } => "SETATTR",
            Op::Readlink => "READLINK",
            Op::Symlink { .. } => "SYMLINK",
            Op::Mknod { .. } => "MKNOD",
            Op::Mkdir { .. } => "MKDIR",
            Op::Unlink { .. } => "UNLINK",
            Op::Rmdir { .. } => "RMDIR",
            Op::Rename { .. } => "RENAME",
            Op::Link { .. } => "LINK",
            Op::Open { .. } => "OPEN",
            Op::Read { .. } => "READ",
            Op::Write { .. } => "WRITE",
            Op::Statfs => "STATFS",
            Op::Release { .. } => "RELEASE",
            Op::Fsync { .. } => "FSYNC",
            Op::Setxattr { .. } => "SETXATTR",
            Op::Getxattr { .. } => "GETXATTR",
            Op::Listxattr { .. } => "LISTXATTR",
            Op::Removexattr { .. } => "REMOVEXATTR",
            Op::Flush { .. } => "FLUSH",
            Op::Opendir { .. } => "OPENDIR",
            Op::Readdir { .. } => "READDIR",
            Op::Readdirplus { .. } => "READDIRPLUS",
            Op::Releasedir { .. } => "RELEASEDIR",
            Op::Fsyncdir { .. } => "FSYNCDIR",
            Op::Access { .. } => "ACCESS",
            Op::Create { .. } => "CREATE",
            Op::Fallocate { .. } => "FALLOCATE",
            Op::Lseek { .. } => "LSEEK",
            Op::Other(_) => "an unknown opcode",
        }
    }
}

/// A request the kernel should never send: too short for its opcode, or a name
/// without its terminating NUL.
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed {
    pub opcode: u32,
    pub unique: u64,
}

/// The NUL-terminated name at the start of `b`.
fn name(b: &[u8]) -> Option<&OsStr> {
    Some(name_and_rest(b)?.0)
}

/// The NUL-terminated name at the start of `b`, and what follows its NUL.
fn name_and_rest(b: &[u8]) -> Option<(&OsStr, &[u8])> {
    let end = b.iter().position(|&c| c == 0)?;
    Some((OsStr::from_bytes(&b[..end]), &b[end + 1..]))
}

/// Two NUL-terminated names, one after the other.
fn two_names(b: &[u8]) -> Option<(&OsStr, &OsStr)> {
    let (a, rest) = name_and_rest(b)?;
    Some((a, name(rest)?))
}

/// Decodes the request in `headers` (header, opcode header) and `payload` (the
/// `payload_sz` bytes the kernel wrote there).
pub fn decode<'a>(headers: &'a RingHeaders, payload: &'a [u8]) -> Result<Request<'a>, Malformed> {
    let (h, _) = InHeader::read_from_prefix(&headers.in_out).map_err(|_| Malformed {
        opcode: 0,
        unique: 0,
    })?;
    let bad = Malformed {
        opcode: h.opcode,
        unique: h.unique,
    };
    let op_in: &[u8] = &headers.op_in;
    // Names follow the opcode header in the payload; a kernel that sent a name as
    // the first argument would have put it in `op_in` (none does since the ring
    // exists, but an empty payload never holds a name).
    let payload_name = || name(if payload.is_empty() { op_in } else { payload });
    macro_rules! arg {
        ($t:ty) => {
            <$t>::read_from_prefix(op_in).map(|(v, _)| v).ok()
        };
    }
    let owner = |flags: u32, bit: u32, owner: u64| (flags & bit != 0).then_some(owner);
    let op = (|| {
        Some(match h.opcode {
            opcode::LOOKUP => Op::Lookup {
                name: payload_name()?,
            },
            opcode::GETATTR => {
                let a = arg!(abi::GetattrIn)?;
                Op::Getattr {
                    fh: (a.getattr_flags & abi::GETATTR_FH != 0).then_some(a.fh),
                }
            }
            opcode::SETATTR => {
                let a = arg!(abi::SetattrIn)?;
                Op::Setattr {
                    changes: changes(&a)?,
                    fh: (a.valid & fattr::FH != 0).then_some(a.fh),
                }
            }
            opcode::READLINK => Op::Readlink,
            opcode::SYMLINK => {
                let (name, target) = two_names(payload)?;
                Op::Symlink { name, target }
            }
            opcode::MKNOD => {
                let a = arg!(abi::MknodIn)?;
                Op::Mknod {
                    name: name(payload)?,
                    mode: a.mode,
                    rdev: a.rdev,
                    umask: a.umask,
                }
            }
            opcode::MKDIR => {
                let a = arg!(abi::MkdirIn)?;
                Op::Mkdir {
                    name: name(payload)?,
                    mode: a.mode,
                    umask: a.umask,
                }
            }
            opcode::UNLINK => Op::Unlink {
                name: payload_name()?,
            },
            opcode::RMDIR => Op::Rmdir {
                name: payload_name()?,
            },
            opcode::RENAME | opcode::RENAME2 => {
                let a = arg!(abi::Rename2In)?;
                let (name, newname) = two_names(payload)?;
                Op::Rename {
                    newdir: a.newdir,
                    name,
                    newname,
                    // RENAME's header is `newdir` alone: what follows is not its.
                    flags: if h.opcode == opcode::RENAME2 {
                        a.flags
                    } else {
                        0
                    },
                }
            }
            opcode::LINK => Op::Link {
                oldnodeid: arg!(abi::LinkIn)?.oldnodeid,
                newname: name(payload)?,
            },
            opcode::OPEN => Op::Open {
                flags: arg!(abi::OpenIn)?.flags as i32,
            },
            opcode::OPENDIR => Op::Opendir {
                flags: arg!(abi::OpenIn)?.flags as i32,
            },
            opcode::READ | opcode::READDIR | opcode::READDIRPLUS => {
                let a = arg!(abi::ReadIn)?;
                let (fh, offset, size) = (a.fh, a.offset, a.size);
                match h.opcode {
                    opcode::READ => Op::Read {
                        fh,
                        offset,
                        size,
                        flags: a.flags as i32,
                        lock_owner: owner(a.read_flags, abi::READ_LOCKOWNER, a.lock_owner),
                    },
                    opcode::READDIR => Op::Readdir { fh, offset, size },
                    _ => Op::Readdirplus { fh, offset, size },
                }
            }
            opcode::WRITE => {
                let a = arg!(abi::WriteIn)?;
                Op::Write {
                    fh: a.fh,
                    offset: a.offset,
                    data: payload.get(..a.size as usize)?,
                    write_flags: a.write_flags,
                    flags: a.flags as i32,
                    lock_owner: owner(a.write_flags, abi::WRITE_LOCKOWNER, a.lock_owner),
                }
            }
            opcode::STATFS => Op::Statfs,
            opcode::RELEASE => {
                let a = arg!(abi::ReleaseIn)?;
                Op::Release {
                    fh: a.fh,
                    flags: a.flags as i32,
                    flush: a.release_flags & abi::RELEASE_FLUSH != 0,
                    lock_owner: Some(a.lock_owner).filter(|&o| o != 0),
                }
            }
            opcode::RELEASEDIR => {
                let a = arg!(abi::ReleaseIn)?;
                Op::Releasedir {
                    fh: a.fh,
                    flags: a.flags as i32,
                }
            }
            opcode::FSYNC | opcode::FSYNCDIR => {
                let a = arg!(abi::FsyncIn)?;
                let (fh, datasync) = (a.fh, a.fsync_flags & abi::FSYNC_FDATASYNC != 0);
                if h.opcode == opcode::FSYNC {
                    Op::Fsync { fh, datasync }
                } else {
                    Op::Fsyncdir { fh, datasync }
                }
            }
            opcode::SETXATTR => {
                let a = arg!(abi::SetxattrIn)?;
                let (name, rest) = name_and_rest(payload)?;
                Op::Setxattr {
                    name,
                    value: rest.get(..a.size as usize)?,
                    flags: a.flags as i32,
                }
            }
            opcode::GETXATTR => Op::Getxattr {
                size: arg!(abi::GetxattrIn)?.size,
                name: name(payload)?,
            },
            opcode::LISTXATTR => Op::Listxattr {
                size: arg!(abi::GetxattrIn)?.size,
            },
            opcode::REMOVEXATTR => Op::Removexattr {
                name: payload_name()?,
            },
            opcode::FLUSH => {
                let a = arg!(abi::FlushIn)?;
                Op::Flush {
                    fh: a.fh,
                    lock_owner: a.lock_owner,
                }
            }
            opcode::ACCESS => Op::Access {
                mask: arg!(abi::AccessIn)?.mask,
            },
            opcode::CREATE => {
                let a = arg!(abi::CreateIn)?;
                Op::Create {
                    name: name(payload)?,
                    mode: a.mode,
                    umask: a.umask,
                    flags: a.flags as i32,
                }
            }
            opcode::FALLOCATE => {
                let a = arg!(abi::FallocateIn)?;
                Op::Fallocate {
                    fh: a.fh,
                    offset: a.offset,
                    length: a.length,
                    mode: a.mode as i32,
                }
            }
            opcode::LSEEK => {
                let a = arg!(abi::LseekIn)?;
                Op::Lseek {
                    fh: a.fh,
                    offset: a.offset as i64,
                    whence: a.whence as i32,
                }
            }
            other => Op::Other(other),
        })
    })()
    .ok_or(bad)?;
    Ok(Request {
        in_progress: 1,
        unique: h.unique,
        nodeid: h.nodeid,
        uid: h.uid,
        gid: h.gid,
        pid: h.pid,
        op,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::{FromZeros, IntoBytes};

    fn headers(opcode: u32, op_in: &[u8]) -> RingHeaders {
        let mut h = RingHeaders::new_zeroed();
        let ih = InHeader {
            len: 0,
            opcode,
            unique: 7,
            nodeid: 42,
            uid: 1000,
            gid: 100,
            pid: 9,
            total_extlen: 0,
            padding: 0,
        };
        h.in_out[..40].copy_from_slice(ih.as_bytes());
        h.op_in[..op_in.len()].copy_from_slice(op_in);
        h
    }

    #[test]
    fn decodes_names_headers_and_write_data() {
        let h = headers(opcode::LOOKUP, &[]);
        let r = decode(&h, b"file.txt\0").unwrap();
        assert_eq!(
            (r.unique, r.nodeid, r.uid, r.gid, r.pid),
            (7, 42, 1000, 100, 9)
        );
        assert!(matches!(r.op, Op::Lookup { name } if name == "file.txt"));

        let c = abi::CreateIn {
            flags: libc::O_WRONLY as u32,
            mode: 0o100644,
            umask: 0o022,
            open_flags: 0,
        };
        let h = headers(opcode::CREATE, c.as_bytes());
        let r = decode(&h, b"new\0").unwrap();
        assert!(
            matches!(r.op, Op::Create { name, mode: 0o100644, umask: 0o022, flags }
            if name == "new" && flags == libc::O_WRONLY)
        );

        let w = abi::WriteIn {
            fh: 3,
            offset: 4096,
            size: 5,
            write_flags: abi::WRITE_KILL_SUIDGID,
            lock_owner: 0,
            flags: 0,
            padding: 0,
        };
        let h = headers(opcode::WRITE, w.as_bytes());
        let r = decode(&h, b"hello and more").unwrap();
        assert!(
            matches!(r.op, Op::Write { fh: 3, offset: 4096, data: b"hello", write_flags, lock_owner: None, .. }
            if write_flags == abi::WRITE_KILL_SUIDGID)
        );

        let rn = abi::Rename2In {
            newdir: 9,
            flags: libc::RENAME_EXCHANGE,
            padding: 0,
        };
        let h = headers(opcode::RENAME2, rn.as_bytes());
        let r = decode(&h, b"a\0b\0").unwrap();
        assert!(
            matches!(r.op, Op::Rename { newdir: 9, name, newname, flags }
            if name == "a" && newname == "b" && flags == libc::RENAME_EXCHANGE)
        );
        // RENAME's header is newdir alone: the bytes after it in op_in are not flags.
        let h = headers(opcode::RENAME, rn.as_bytes());
        assert!(matches!(
            decode(&h, b"a\0b\0").unwrap().op,
            Op::Rename { flags: 0, .. }
        ));

        let x = abi::SetxattrIn { size: 3, flags: 1 };
        let h = headers(opcode::SETXATTR, x.as_bytes());
        let r = decode(&h, b"user.k\0v\0zmore").unwrap();
        assert!(
            matches!(r.op, Op::Setxattr { name, value: b"v\0z", flags: 1 } if name == "user.k")
        );
        let h = headers(opcode::SYMLINK, &[]);
        let r = decode(&h, b"link\0/target/path\0").unwrap();
        assert!(
            matches!(r.op, Op::Symlink { name, target } if name == "link" && target == "/target/path")
        );

        let l = abi::LseekIn {
            fh: 5,
            offset: 1 << 40,
            whence: libc::SEEK_HOLE as u32,
            padding: 0,
        };
        let h = headers(opcode::LSEEK, l.as_bytes());
        let r = decode(&h, &[]).unwrap();
        assert!(matches!(
            r.op,
            Op::Lseek {
                fh: 5,
                offset: 1_099_511_627_776,
                whence: libc::SEEK_HOLE
            }
        ));
    }

    #[test]
    fn setattr_times_now_and_before_the_epoch() {
        let a = abi::SetattrIn {
            valid: fattr::MODE | fattr::ATIME | fattr::ATIME_NOW | fattr::MTIME | fattr::FH,
            padding: 0,
            fh: 5,
            size: 0,
            lock_owner: 0,
            atime: 0,
            mtime: (-2i64) as u64,
            ctime: 0,
            atimensec: 0,
            mtimensec: 750_000_000,
            ctimensec: 0,
            mode: 0o640,
            unused4: 0,
            uid: 0,
            gid: 0,
            unused5: 0,
        };
        let h = headers(opcode::SETATTR, a.as_bytes());
        let Op::Setattr { changes, fh } = decode(&h, b"").unwrap().op else {
            panic!("not a setattr");
        };
        assert_eq!(fh, Some(5));
        assert_eq!(
            (changes.mode, changes.uid, changes.size),
            (Some(0o640), None, None)
        );
        assert!(matches!(changes.atime, Some(TimeOrNow::Now)));
        let want = std::time::UNIX_EPOCH - std::time::Duration::from_millis(1250);
        assert!(matches!(changes.mtime, Some(TimeOrNow::SpecificTime(t)) if t == want));
    }

    #[test]
    fn malformed_requests_are_refused_not_guessed() {
        // A name without its NUL, write data shorter than announced.
        let h = headers(opcode::UNLINK, &[]);
        assert_eq!(
            decode(&h, b"no-nul").unwrap_err(),
            Malformed {
                opcode: opcode::UNLINK,
                unique: 7
            }
        );
        let w = abi::WriteIn {
            fh: 0,
            offset: 0,
            size: 100,
            write_flags: 0,
            lock_owner: 0,
            flags: 0,
            padding: 0,
        };
        let h = headers(opcode::WRITE, w.as_bytes());
        assert!(decode(&h, b"short").is_err());
        // Unknown opcodes are passed on, to be answered ENOSYS.
        let h = headers(4000, &[]);
        assert!(matches!(decode(&h, b"").unwrap().op, Op::Other(4000)));
    }

    #[test]
    fn a_setattr_time_out_of_range_is_refused() {
        let mut a = abi::SetattrIn::new_zeroed();
        a.valid = fattr::MTIME;
        a.mtime = i64::MAX as u64;
        a.mtimensec = 1_000_000_000;
        let h = headers(opcode::SETATTR, a.as_bytes());
        assert!(decode(&h, b"").is_err());
        a.mtimensec = 999_999_999;
        let h = headers(opcode::SETATTR, a.as_bytes());
        assert!(decode(&h, b"").is_ok());
    }

    proptest::proptest! {
        /// Whatever bytes a ring entry holds, decoding gives a request or a refusal
        /// naming it, never a panic, and write data never reaches past the payload.
        #[test]
        fn any_bytes_decode_to_a_request_or_a_refusal(
            opcode in proptest::prop_oneof![0u32..64, proptest::prelude::any::<u32>()],
            op_in in proptest::collection::vec(proptest::prelude::any::<u8>(), abi::RING_OP_IN),
            payload in proptest::collection::vec(
                proptest::prop_oneof![3 => proptest::prelude::any::<u8>(), 1 => proptest::strategy::Just(0u8)],
                0..300,
            ),
        ) {
            let h = headers(opcode, &op_in);
            match decode(&h, &payload) {
                Ok(r) => {
                    proptest::prop_assert_eq!(r.unique, 7);
                    if let Op::Write { data, .. } = r.op {
                        proptest::prop_assert!(data.len() <= payload.len());
                    }
                }
                Err(m) => proptest::prop_assert_eq!(m, Malformed { opcode, unique: 7 }),
            }
        }
    }
}

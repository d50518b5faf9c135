//! Decoding one request from a ring entry: the header, the opcode's request header
//! (the kernel's first argument, in `op_in`) and the rest of the arguments (names,
//! write data) in the payload buffer.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use zerocopy::FromBytes;

use super::abi::{self, opcode, InHeader, RingHeaders};

/// One request taken from the ring.
#[derive(Debug)]
pub struct Request<'a> {
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
    Getattr,
    Setattr(abi::SetattrIn),
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
    Open {
        flags: i32,
    },
    Read {
        fh: u64,
        offset: u64,
        size: u32,
    },
    Write {
        fh: u64,
        offset: u64,
        data: &'a [u8],
        write_flags: u32,
    },
    Statfs,
    Release {
        fh: u64,
    },
    Fsync {
        fh: u64,
    },
    Getxattr {
        name: &'a OsStr,
        size: u32,
    },
    Listxattr {
        size: u32,
    },
    Flush {
        fh: u64,
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
    },
    Fsyncdir {
        fh: u64,
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
    /// An opcode this transport does not decode (answered ENOSYS).
    Other(u32),
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
    let end = b.iter().position(|&c| c == 0)?;
    Some(OsStr::from_bytes(&b[..end]))
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
    let op = (|| {
        Some(match h.opcode {
            opcode::LOOKUP => Op::Lookup {
                name: payload_name()?,
            },
            opcode::GETATTR => Op::Getattr,
            opcode::SETATTR => Op::Setattr(arg!(abi::SetattrIn)?),
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
                    opcode::READ => Op::Read { fh, offset, size },
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
                }
            }
            opcode::STATFS => Op::Statfs,
            opcode::RELEASE => Op::Release {
                fh: arg!(abi::ReleaseIn)?.fh,
            },
            opcode::RELEASEDIR => Op::Releasedir {
                fh: arg!(abi::ReleaseIn)?.fh,
            },
            opcode::FSYNC => Op::Fsync {
                fh: arg!(abi::FsyncIn)?.fh,
            },
            opcode::FSYNCDIR => Op::Fsyncdir {
                fh: arg!(abi::FsyncIn)?.fh,
            },
            opcode::GETXATTR => Op::Getxattr {
                size: arg!(abi::GetxattrIn)?.size,
                name: name(payload)?,
            },
            opcode::LISTXATTR => Op::Listxattr {
                size: arg!(abi::GetxattrIn)?.size,
            },
            opcode::FLUSH => Op::Flush {
                fh: arg!(abi::ReleaseIn)?.fh,
            },
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
            other => Op::Other(other),
        })
    })()
    .ok_or(bad)?;
    Ok(Request {
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
            matches!(r.op, Op::Write { fh: 3, offset: 4096, data: b"hello", write_flags }
            if write_flags == abi::WRITE_KILL_SUIDGID)
        );
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
}

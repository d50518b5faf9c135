//! How the filesystem maps onto engine keys (see `ARCHITECTURE.md`).
//!
//! Inside a collection, a user document key never starts with a NUL byte (paths
//! cannot contain NUL). Filesystem metadata lives under four NUL-prefixed ranges:
//!
//! * `\0C` fid(be64) idx(be64) — chunk `idx` of a chunked file;
//! * `\0P` fid(be64) idx(be64) page(be32) — a newer copy of one [`PATCH_PAGE`] of
//!   chunk `idx` (a small write committed without rewriting the chunk);
//! * `\0I` fid(be64)           — inode record (attributes, xattrs, symlink target);
//! * `\0N` path                — name record: the path is a link to inode `fid`.
//!
//! A regular file's document at key `path` holds its whole content when the file is
//! stored inline, or a [`Manifest`] when it is chunked.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Prefix of chunk records.
pub const CHUNK_PREFIX: &[u8] = b"\0C";
/// Prefix of page patches of chunks.
pub const PATCH_PREFIX: &[u8] = b"\0P";
/// Bytes of chunk a patch replaces (the last page of a chunk's data may be shorter).
pub const PATCH_PAGE: u64 = 4096;
/// Prefix of inode records.
pub const INODE_PREFIX: &[u8] = b"\0I";
/// Prefix of name records.
pub const NAME_PREFIX: &[u8] = b"\0N";
/// The mount root's attributes (mode, owner, times, xattrs: an inode record) live
/// outside every collection, in the engine's auxiliary file of this name
/// (`Db::write_aux`).
pub const ROOT_AUX: &str = "fusefs-root";

/// `prefix` followed by `parts` (big-endian numbers).
fn key(prefix: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut k = Vec::with_capacity(prefix.len() + parts.iter().map(|p| p.len()).sum::<usize>());
    k.extend_from_slice(prefix);
    for p in parts {
        k.extend_from_slice(p);
    }
    k
}

/// Key of chunk `idx` of file `fid`.
pub fn chunk_key(fid: u64, idx: u64) -> Vec<u8> {
    key(CHUNK_PREFIX, &[&fid.to_be_bytes(), &idx.to_be_bytes()])
}

/// Prefix of every chunk key of file `fid`.
pub fn chunk_key_prefix(fid: u64) -> Vec<u8> {
    key(CHUNK_PREFIX, &[&fid.to_be_bytes()])
}

/// Chunk index encoded in a chunk key, if it is one of `fid`'s.
pub fn chunk_index(key: &[u8], fid: u64) -> Option<u64> {
    let p = chunk_key_prefix(fid);
    let rest = key.strip_prefix(p.as_slice())?;
    Some(u64::from_be_bytes(rest.try_into().ok()?))
}

/// Key of the patch of page `page` of chunk `idx` of file `fid`.
pub fn patch_key(fid: u64, idx: u64, page: u32) -> Vec<u8> {
    let (f, i, p) = (fid.to_be_bytes(), idx.to_be_bytes(), page.to_be_bytes());
    key(PATCH_PREFIX, &[&f, &i, &p])
}

/// Prefix of every patch key of chunk `idx` of file `fid`.
pub fn patch_chunk_prefix(fid: u64, idx: u64) -> Vec<u8> {
    key(PATCH_PREFIX, &[&fid.to_be_bytes(), &idx.to_be_bytes()])
}

/// Prefix of every patch key of file `fid`.
pub fn patch_key_prefix(fid: u64) -> Vec<u8> {
    key(PATCH_PREFIX, &[&fid.to_be_bytes()])
}

/// (fid, chunk index, page) of a patch key.
pub fn patch_location(key: &[u8]) -> Option<(u64, u64, u32)> {
    let rest: &[u8; 20] = key.strip_prefix(PATCH_PREFIX)?.try_into().ok()?;
    let fid = u64::from_be_bytes(rest[..8].try_into().ok()?);
    let idx = u64::from_be_bytes(rest[8..16].try_into().ok()?);
    Some((fid, idx, u32::from_be_bytes(rest[16..].try_into().ok()?)))
}

/// Key of the inode record of `fid`.
pub fn inode_key(fid: u64) -> Vec<u8> {
    key(INODE_PREFIX, &[&fid.to_be_bytes()])
}

/// The fid of an inode key.
pub fn inode_key_fid(key: &[u8]) -> Option<u64> {
    let rest = key.strip_prefix(INODE_PREFIX)?;
    Some(u64::from_be_bytes(rest.try_into().ok()?))
}

/// Key of the name record of `path` (relative to the collection, no leading `/`).
pub fn name_key(path: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(2 + path.len());
    k.extend_from_slice(NAME_PREFIX);
    k.extend_from_slice(path);
    k
}

/// True for keys that are filesystem metadata rather than user documents.
pub fn is_internal_key(key: &[u8]) -> bool {
    key.first() == Some(&0)
}

/// Kind of an inode as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    Fifo,
    CharDev,
    BlockDev,
    Socket,
}

impl Kind {
    fn code(self) -> u8 {
        match self {
            Kind::File => 1,
            Kind::Dir => 2,
            Kind::Symlink => 3,
            Kind::Fifo => 4,
            Kind::CharDev => 5,
            Kind::BlockDev => 6,
            Kind::Socket => 7,
        }
    }
    fn from_code(c: u8) -> Option<Kind> {
        Some(match c {
            1 => Kind::File,
            2 => Kind::Dir,
            3 => Kind::Symlink,
            4 => Kind::Fifo,
            5 => Kind::CharDev,
            6 => Kind::BlockDev,
            7 => Kind::Socket,
            _ => return None,
        })
    }
}

/// Where a regular file's bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Storage {
    /// The document at the file's path is the content.
    Inline,
    /// Content in chunk records; the document at each path is a manifest.
    Chunked,
}

/// A persisted inode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InodeRecord {
    pub kind: Kind,
    /// Permission bits including setuid/setgid/sticky (`0o7777`).
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub rdev: u32,
    pub size: u64,
    pub atime: SystemTime,
    pub mtime: SystemTime,
    pub ctime: SystemTime,
    pub crtime: SystemTime,
    pub storage: Storage,
    pub chunk_size: u32,
    pub symlink: Vec<u8>,
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

const RECORD_VERSION: u8 = 1;

fn put_time(out: &mut Vec<u8>, t: SystemTime) {
    let (secs, nanos) = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, d.subsec_nanos()),
        Err(e) => {
            let d = e.duration();
            if d.subsec_nanos() == 0 {
                (-(d.as_secs() as i64), 0)
            } else {
                (-(d.as_secs() as i64) - 1, 1_000_000_000 - d.subsec_nanos())
            }
        }
    };
    out.extend_from_slice(&secs.to_be_bytes());
    out.extend_from_slice(&nanos.to_be_bytes());
}

/// The time `secs` seconds (negative before the epoch) plus `nanos` nanoseconds after
/// the epoch, as records and the kernel give it; `None` for nanoseconds of a second or
/// more or a time `SystemTime` cannot hold.
pub(crate) fn time_of(secs: i64, nanos: u32) -> Option<SystemTime> {
    if nanos >= 1_000_000_000 {
        return None;
    }
    let whole = if secs >= 0 {
        UNIX_EPOCH.checked_add(Duration::from_secs(secs as u64))?
    } else {
        UNIX_EPOCH.checked_sub(Duration::from_secs(secs.unsigned_abs()))?
    };
    whole.checked_add(Duration::from_nanos(nanos.into()))
}

/// Appends `b` with its length (be32) first.
pub(crate) fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_be_bytes());
    out.extend_from_slice(b);
}

/// A bounds-checked reader over a byte slice.
pub(crate) struct Cursor<'a>(pub(crate) &'a [u8]);

impl<'a> Cursor<'a> {
    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    pub(crate) fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    pub(crate) fn u16(&mut self) -> Option<u16> {
        Some(u16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }
    pub(crate) fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
    pub(crate) fn u64(&mut self) -> Option<u64> {
        Some(u64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }
    pub(crate) fn time(&mut self) -> Option<SystemTime> {
        let secs = self.u64()? as i64;
        time_of(secs, self.u32()?)
    }
    pub(crate) fn bytes(&mut self) -> Option<Vec<u8>> {
        let n = self.u32()? as usize;
        Some(self.take(n)?.to_vec())
    }
}

impl InodeRecord {
    /// Binary encoding (version byte first).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(96 + self.symlink.len());
        out.push(RECORD_VERSION);
        out.push(self.kind.code());
        out.extend_from_slice(&self.perm.to_be_bytes());
        for v in [self.uid, self.gid, self.nlink, self.rdev] {
            out.extend_from_slice(&v.to_be_bytes());
        }
        out.extend_from_slice(&self.size.to_be_bytes());
        for t in [self.atime, self.mtime, self.ctime, self.crtime] {
            put_time(&mut out, t);
        }
        out.push(match self.storage {
            Storage::Inline => 0,
            Storage::Chunked => 1,
        });
        out.extend_from_slice(&self.chunk_size.to_be_bytes());
        put_bytes(&mut out, &self.symlink);
        out.extend_from_slice(&(self.xattrs.len() as u32).to_be_bytes());
        for (k, v) in &self.xattrs {
            put_bytes(&mut out, k);
            put_bytes(&mut out, v);
        }
        out
    }

    /// Decodes a record; `None` for anything malformed (never panics).
    pub fn decode(b: &[u8]) -> Option<InodeRecord> {
        let mut c = Cursor(b);
        if c.u8()? != RECORD_VERSION {
            return None;
        }
        let kind = Kind::from_code(c.u8()?)?;
        let perm = c.u16()? & 0o7777;
        let (uid, gid, nlink, rdev) = (c.u32()?, c.u32()?, c.u32()?, c.u32()?);
        let size = c.u64()?;
        let (atime, mtime, ctime, crtime) = (c.time()?, c.time()?, c.time()?, c.time()?);
        let storage = match c.u8()? {
            0 => Storage::Inline,
            1 => Storage::Chunked,
            _ => return None,
        };
        let chunk_size = c.u32()?;
        let symlink = c.bytes()?;
        let n = c.u32()? as usize;
        let mut xattrs = Vec::with_capacity(n.min(1024));
        for _ in 0..n {
            let k = c.bytes()?;
            let v = c.bytes()?;
            xattrs.push((k, v));
        }
        if !c.0.is_empty() || (storage == Storage::Chunked && chunk_size == 0) {
            return None;
        }
        Some(InodeRecord {
            kind,
            perm,
            uid,
            gid,
            nlink,
            rdev,
            size,
            atime,
            mtime,
            ctime,
            crtime,
            storage,
            chunk_size,
            symlink,
            xattrs,
        })
    }
}

/// The document stored at a chunked file's path: names the inode whose chunks hold
/// the content.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Manifest {
    pub fid: u64,
    pub chunk_size: u32,
}

const MANIFEST_MAGIC: &[u8; 16] = b"BASALT-MANIFEST\x01";
/// Encoded size of a manifest.
pub const MANIFEST_LEN: usize = 16 + 8 + 4 + 8;

fn fnv1a(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in b {
        h ^= x as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl Manifest {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(MANIFEST_LEN);
        out.extend_from_slice(MANIFEST_MAGIC);
        out.extend_from_slice(&self.fid.to_be_bytes());
        out.extend_from_slice(&self.chunk_size.to_be_bytes());
        let h = fnv1a(&out);
        out.extend_from_slice(&h.to_be_bytes());
        out
    }

    /// Parses a document as a manifest; `None` when it is plain content.
    pub fn decode(b: &[u8]) -> Option<Manifest> {
        if b.len() != MANIFEST_LEN || !b.starts_with(MANIFEST_MAGIC) {
            return None;
        }
        let h = u64::from_be_bytes(b[28..36].try_into().ok()?);
        if fnv1a(&b[..28]) != h {
            return None;
        }
        let fid = u64::from_be_bytes(b[16..24].try_into().ok()?);
        let chunk_size = u32::from_be_bytes(b[24..28].try_into().ok()?);
        (chunk_size > 0).then_some(Manifest { fid, chunk_size })
    }
}

/// Splits a document key into path components; `None` when the key cannot be shown
/// as a path (empty component, `.`/`..`, over-long name, internal key).
pub fn split_path(key: &[u8]) -> Option<Vec<&[u8]>> {
    if key.is_empty() || is_internal_key(key) {
        return None;
    }
    let parts: Vec<&[u8]> = key.split(|&b| b == b'/').collect();
    for p in &parts {
        if p.is_empty() || *p == b"." || *p == b".." || p.len() > 255 || p.contains(&0) {
            return None;
        }
    }
    Some(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> InodeRecord {
        InodeRecord {
            kind: Kind::File,
            perm: 0o4755,
            uid: 1000,
            gid: 65534,
            nlink: 2,
            rdev: 7,
            size: 1 << 40,
            atime: UNIX_EPOCH + Duration::new(1_700_000_000, 5),
            mtime: UNIX_EPOCH - Duration::new(10, 300),
            ctime: UNIX_EPOCH,
            crtime: UNIX_EPOCH + Duration::from_secs(1),
            storage: Storage::Chunked,
            chunk_size: 65536,
            symlink: b"target".to_vec(),
            xattrs: vec![(b"user.a".to_vec(), b"1".to_vec())],
        }
    }

    #[test]
    fn inode_record_roundtrip() {
        let r = sample();
        assert_eq!(InodeRecord::decode(&r.encode()), Some(r));
    }

    #[test]
    fn inode_record_rejects_garbage_and_truncation() {
        let enc = sample().encode();
        for n in 0..enc.len() {
            assert_eq!(InodeRecord::decode(&enc[..n]), None, "prefix {n}");
        }
        let mut bad = enc.clone();
        bad[1] = 99;
        assert_eq!(InodeRecord::decode(&bad), None);
        assert_eq!(InodeRecord::decode(&[0xff; 200]), None);
    }

    #[test]
    fn manifest_roundtrip_and_plain_content() {
        let m = Manifest {
            fid: 42,
            chunk_size: 1 << 20,
        };
        assert_eq!(Manifest::decode(&m.encode()), Some(m));
        let mut tampered = m.encode();
        tampered[20] ^= 1;
        assert_eq!(Manifest::decode(&tampered), None);
        assert_eq!(Manifest::decode(b"hello"), None);
    }

    #[test]
    fn keys_and_paths() {
        assert_eq!(chunk_index(&chunk_key(5, 9), 5), Some(9));
        assert_eq!(chunk_index(&chunk_key(5, 9), 6), None);
        assert_eq!(inode_key_fid(&inode_key(77)), Some(77));
        let p = patch_key(5, 9, 15);
        assert_eq!(patch_location(&p), Some((5, 9, 15)));
        assert!(p.starts_with(&patch_key_prefix(5)) && is_internal_key(&p));
        assert!(
            p.starts_with(&patch_chunk_prefix(5, 9)) && !p.starts_with(&patch_chunk_prefix(5, 1))
        );
        assert_eq!(chunk_index(&p, 5), None, "a patch is not a chunk");
        assert_eq!(patch_location(&chunk_key(5, 9)), None);
        assert!(
            patch_key(5, 9, 15) < patch_key(5, 10, 0)
                && patch_key(5, u64::MAX, 9) < patch_key(6, 0, 0)
        );
        assert!(is_internal_key(&name_key(b"a")));
        assert_eq!(split_path(b"a/b/c").map(|v| v.len()), Some(3));
        for bad in [&b""[..], b"/a", b"a//b", b"a/", b"./a", b"a/../b", b"\0x"] {
            assert_eq!(split_path(bad), None, "{bad:?}");
        }
    }
}

//! Namespace and data operations on the in-memory state (no FUSE types here).

use basalt_engine::AlignedBuf;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, SystemTime};

use crate::layout::{self, Kind, Manifest, Storage};
use crate::lazy::Lazy;
use crate::load::{inherit_from, link_child, unlink_child};
use crate::state::{engine_err, Batch, Chunk, Errno, Node, State, MAX_FILE_SIZE, ROOT_INO};

/// Who asks (from the FUSE request).
#[derive(Clone, Copy, Debug)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
}

fn e(code: i32) -> Errno {
    Errno(code)
}

/// What to create.
pub struct NewNode<'a> {
    pub kind: Kind,
    pub mode: u32,
    pub umask: u32,
    pub rdev: u32,
    pub symlink: &'a [u8],
}

impl State {
    /// Checks a directory entry name.
    pub(crate) fn check_name(name: &OsStr) -> Result<(), Errno> {
        let b = name.as_bytes();
        if b.len() > 255 {
            return Err(e(libc::ENAMETOOLONG));
        }
        if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') || b.contains(&0) {
            return Err(e(libc::EINVAL));
        }
        Ok(())
    }

    pub(crate) fn dir(&self, ino: u64) -> Result<&Node, Errno> {
        let n = self.node(ino)?;
        if !n.is_dir() {
            return Err(e(libc::ENOTDIR));
        }
        Ok(n)
    }

    /// Writes the records of unpersisted ancestors of `dir` (directories implied by
    /// document paths) so that the directory survives when its last entry goes.
    pub(crate) fn persist_dir_chain(&self, b: &mut Batch, dir: u64) -> Result<(), Errno> {
        let mut cur = dir;
        for _ in 0..4096 {
            let n = self.node(cur)?;
            if n.persisted || cur == ROOT_INO {
                return Ok(());
            }
            self.put_inode(b, cur, true)?;
            match n.links.iter().next() {
                Some((p, _)) => cur = *p,
                None => return Ok(()),
            }
        }
        Ok(())
    }

    pub(crate) fn mark_chain_persisted(&mut self, dir: u64) {
        let mut cur = dir;
        for _ in 0..4096 {
            let Some(n) = self.nodes.get_mut(&cur) else {
                return;
            };
            if n.persisted || cur == ROOT_INO {
                return;
            }
            n.persisted = true;
            match n.links.iter().next() {
                Some((p, _)) => cur = *p,
                None => return,
            }
        }
    }

    pub(crate) fn touch_dir(&mut self, ino: u64, now: SystemTime) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.mtime = now;
            n.ctime = now;
        }
    }

    /// Creates a file, directory, symlink or special file in a collection directory.
    pub fn create(
        &mut self,
        who: Caller,
        parent: u64,
        name: &OsStr,
        new: NewNode<'_>,
    ) -> Result<u64, Errno> {
        Self::check_name(name)?;
        let p = self.dir(parent)?;
        if p.children.contains_key(name) {
            return Err(e(libc::EEXIST));
        }
        let coll = p.coll;
        let default_acl = new.kind != Kind::Symlink && p.xattrs.contains_key(crate::acl::DEFAULT);
        let path = self.child_path(parent, name)?;
        let now = SystemTime::now();
        let ino = self.alloc_ino();
        let fid = self.alloc_fid(coll);
        // A default ACL replaces the umask (`inherit_from` below).
        let umask = if default_acl { 0 } else { new.umask };
        let perm = (new.mode & !umask & 0o7777) as u16;
        let mut n = Node::new(ino, coll, fid, new.kind, perm, now);
        n.uid = who.uid;
        n.gid = who.gid;
        inherit_from(self, parent, &mut n);
        n.rdev = new.rdev;
        n.chunk_size = self.chunk_size;
        n.no_chunks = new.kind == Kind::File;
        if new.kind == Kind::Symlink {
            n.symlink = Lazy::of(new.symlink.to_vec());
            n.size = new.symlink.len() as u64;
        }
        if new.kind == Kind::Dir {
            n.nlink = 2;
        }
        self.nodes.insert(ino, Box::new(n));
        link_child(self, parent, name.to_os_string(), ino);
        let old_parent_times = {
            let p = self.node(parent)?;
            (p.mtime, p.ctime)
        };
        self.touch_dir(parent, now);
        let coll_name = self.coll_name(coll)?.to_string();
        let mut b = Batch::default();
        let built = (|| {
            self.put_inode(&mut b, ino, true)?;
            if new.kind == Kind::File {
                b.put(&coll_name, path.clone(), Vec::new());
            }
            self.persist_dir_chain(&mut b, parent)?;
            self.put_inode(&mut b, parent, false)
        })();
        let res = built.and_then(|_| {
            b.commit(self)
                .map_err(|err| engine_err(&coll_name, &path, &err))
        });
        if let Err(err) = res {
            unlink_child(self, parent, name);
            self.nodes.remove(&ino);
            if let Some(p) = self.nodes.get_mut(&parent) {
                (p.mtime, p.ctime) = old_parent_times;
            }
            return Err(err);
        }
        self.mark_chain_persisted(parent);
        let n = self.node_mut(ino)?;
        n.persisted = true;
        n.has_doc = new.kind == Kind::File;
        Ok(ino)
    }

    /// Removes entry `name` of `parent` (unlink or rmdir, also the target of a
    /// rename), adding the engine changes to `b`. Memory is updated at once.
    pub(crate) fn remove_entry(
        &mut self,
        parent: u64,
        name: &OsStr,
        want_dir: Option<bool>,
        b: &mut Batch,
    ) -> Result<u64, Errno> {
        let ino = *self
            .dir(parent)?
            .children
            .get(name)
            .ok_or(e(libc::ENOENT))?;
        let n = self.node(ino)?;
        match (want_dir, n.is_dir()) {
            (Some(true), false) => return Err(e(libc::ENOTDIR)),
            (Some(false), true) => return Err(e(libc::EISDIR)),
            _ => {}
        }
        if n.is_dir() && !n.children.is_empty() {
            return Err(e(libc::ENOTEMPTY));
        }
        let last_link = n.links.len() == 1;
        if n.kind == Kind::File && last_link && n.open > 0 && n.storage == Storage::Inline {
            // Unlinked while open: the content must outlive its path.
            self.make_chunked(ino)?;
            self.flush_node(ino)?;
        }
        let n = self.node(ino)?;
        let coll = self.coll_name(n.coll)?.to_string();
        let path = self.child_path(parent, name)?;
        let kind = n.kind;
        b.delete(&coll, layout::name_key(&path));
        if kind == Kind::File {
            b.delete(&coll, path.clone());
        }
        unlink_child(self, parent, name);
        let now = SystemTime::now();
        self.touch_dir(parent, now);
        self.persist_dir_chain(b, parent)?;
        self.put_inode(b, parent, false)?;
        let n = self.node_mut(ino)?;
        n.ctime = now;
        let (nlink, open) = (n.nlink, n.open);
        if nlink == 0 && open == 0 {
            self.purge_inode(ino, b)?;
            let n = self.node_mut(ino)?;
            n.drop_dirty();
            n.meta_dirty = false;
            self.dirty_nodes.remove(&ino);
        } else {
            self.put_inode(b, ino, false)?;
        }
        Ok(ino)
    }

    pub fn unlink(&mut self, parent: u64, name: &OsStr, dir: bool) -> Result<(), Errno> {
        let mut b = Batch::default();
        let coll = self.coll_name(self.node(parent)?.coll)?.to_string();
        let ino = self.remove_entry(parent, name, Some(dir), &mut b)?;
        b.commit(self)
            .map_err(|err| engine_err(&coll, name.as_bytes(), &err))?;
        self.mark_chain_persisted(parent);
        self.maybe_forget(ino);
        Ok(())
    }

    /// Adds a hard link `newparent/newname` to `ino`.
    pub fn link(&mut self, ino: u64, newparent: u64, newname: &OsStr) -> Result<(), Errno> {
        Self::check_name(newname)?;
        let n = self.node(ino)?;
        if n.is_dir() {
            return Err(e(libc::EPERM));
        }
        let p = self.dir(newparent)?;
        if p.coll != n.coll || newparent == ROOT_INO {
            return Err(e(libc::EXDEV));
        }
        if p.children.contains_key(newname) {
            return Err(e(libc::EEXIST));
        }
        if n.nlink == 0 {
            return Err(e(libc::ENOENT));
        }
        if n.nlink >= 65000 {
            return Err(e(libc::EMLINK));
        }
        let kind = n.kind;
        if kind == Kind::File {
            self.make_chunked(ino)?;
        }
        self.flush_node(ino)?;
        let path = self.child_path(newparent, newname)?;
        let n = self.node(ino)?;
        let coll = self.coll_name(n.coll)?.to_string();
        let mut b = Batch::default();
        b.put(&coll, layout::name_key(&path), n.fid.to_be_bytes().to_vec());
        if kind == Kind::File {
            let m = Manifest {
                fid: n.fid,
                chunk_size: n.chunk_size as u32,
            };
            b.put(&coll, path.clone(), m.encode());
        }
        link_child(self, newparent, newname.to_os_string(), ino);
        let now = SystemTime::now();
        self.node_mut(ino)?.ctime = now;
        self.touch_dir(newparent, now);
        self.put_inode(&mut b, ino, false)?;
        self.persist_dir_chain(&mut b, newparent)?;
        self.put_inode(&mut b, newparent, false)?;
        if let Err(err) = b.commit(self) {
            unlink_child(self, newparent, newname);
            return Err(engine_err(&coll, &path, &err));
        }
        self.mark_chain_persisted(newparent);
        Ok(())
    }

    /// Writes `data` at `offset` into the file's dirty chunks.
    pub fn write(&mut self, ino: u64, offset: u64, data: &[u8]) -> Result<(), Errno> {
        let n = self.node(ino)?;
        if n.kind != Kind::File {
            return Err(e(libc::EINVAL));
        }
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|&x| x <= MAX_FILE_SIZE)
            .ok_or(e(libc::EFBIG))?;
        if data.is_empty() {
            return Ok(());
        }
        if n.storage == Storage::Inline && end > n.chunk_size {
            self.make_chunked(ino)?;
        }
        let n = self.node(ino)?;
        let cs = match n.storage {
            Storage::Inline => u64::MAX,
            Storage::Chunked => n.chunk_size,
        };
        let size = n.size;
        let mut pos = offset;
        while pos < end {
            let (idx, start, chunk_end) = if cs == u64::MAX {
                (0, 0, u64::MAX)
            } else {
                (pos / cs, (pos / cs) * cs, (pos / cs) * cs + cs)
            };
            let wend = end.min(chunk_end);
            let off = (pos - start) as usize;
            let src = &data[(pos - offset) as usize..(wend - offset) as usize];
            // Whole pages (the last may end at the end of the file) with no gap after
            // the chunk's bytes: the chunk's stored bytes need not be read for it.
            let pages_only = |len: usize| {
                let page = layout::PATCH_PAGE as usize;
                let end = (wend - start) as usize;
                crate::state::patchable(cs)
                    && off.is_multiple_of(page)
                    && (end.is_multiple_of(page) || wend >= size)
                    && off <= len
            };
            match self.node(ino)?.chunks.dirty.get(&idx) {
                Some(c) if c.unread && !pages_only(c.data.len()) => self.fill_chunk(ino, idx)?,
                Some(_) => {}
                None => {
                    let covers = off == 0 && (wend >= chunk_end || wend >= size);
                    let visible = size.saturating_sub(start).min(cs) as usize;
                    let chunk = if covers {
                        Chunk::whole(Vec::new())
                    } else if cs != u64::MAX && pages_only(visible) {
                        // The stored bytes are read only if something needs them.
                        Chunk {
                            data: vec![0; visible],
                            pages: Some(0),
                            unread: true,
                        }
                    } else {
                        // Read back: only the pages this and later writes change need
                        // writing (as patches) when the chunk is stored.
                        Chunk {
                            data: self.load_chunk(ino, idx)?,
                            pages: (cs != u64::MAX).then_some(0),
                            unread: false,
                        }
                    };
                    let n = self.node_mut(ino)?;
                    n.chunks.dirty_bytes += chunk.data.len();
                    n.chunks.dirty.insert(idx, chunk);
                }
            }
            let n = self.node_mut(ino)?;
            let c = n.chunks.dirty.get_mut(&idx).ok_or(e(libc::EIO))?;
            let before = c.data.len();
            c.touch(before.min(off), off + src.len());
            // Zero only a gap before the write; bytes past the end are appended.
            if before < off {
                c.data.resize(off, 0);
            }
            let overlap = c.data.len().min(off + src.len()) - off;
            c.data[off..off + overlap].copy_from_slice(&src[..overlap]);
            c.data.extend_from_slice(&src[overlap..]);
            n.chunks.dirty_bytes += c.data.len() - before;
            pos = wend;
        }
        let now = SystemTime::now();
        let n = self.node_mut(ino)?;
        n.size = n.size.max(end);
        n.mtime = now;
        n.ctime = now;
        n.meta_dirty = true;
        let flush_now = n.chunks.dirty_bytes >= crate::state::FILE_DIRTY_LIMIT;
        self.mark_dirty(ino);
        if flush_now {
            self.flush_node(ino)?;
        }
        Ok(())
    }

    /// Sets a file's size (truncate/ftruncate/extend).
    pub fn truncate(&mut self, ino: u64, new: u64) -> Result<(), Errno> {
        if new > MAX_FILE_SIZE {
            return Err(e(libc::EFBIG));
        }
        let n = self.node(ino)?;
        match n.kind {
            Kind::File => {}
            Kind::Dir => return Err(e(libc::EISDIR)),
            _ => return Err(e(libc::EINVAL)),
        }
        if n.storage == Storage::Inline && new > n.chunk_size {
            self.make_chunked(ino)?;
        }
        let n = self.node(ino)?;
        let (cs, old, storage) = (n.chunk_size, n.size, n.storage);
        let back_to_inline =
            storage == Storage::Chunked && new <= cs && n.links.len() == 1 && n.nlink == 1;
        if storage == Storage::Inline || back_to_inline {
            let mut data = if new > 0 {
                self.load_chunk(ino, 0)?
            } else {
                Vec::new()
            };
            data.truncate(new as usize);
            let n = self.node_mut(ino)?;
            if back_to_inline {
                n.chunks.tail = None;
                n.storage = Storage::Inline;
                n.chunks.delete_chunks_from = Some(0);
                n.chunks.dirty.clear();
            }
            n.docs_dirty = true;
            n.chunks.dirty_bytes = data.len();
            n.chunks.dirty.insert(0, Chunk::whole(data));
        } else if new < old {
            let from = new.div_ceil(cs);
            let partial = (!new.is_multiple_of(cs)).then_some(new / cs);
            let tail = match partial {
                Some(idx) => Some((idx, self.load_chunk(ino, idx)?)),
                None => None,
            };
            let n = self.node_mut(ino)?;
            n.chunks.dirty.retain(|&idx, _| idx * cs < new);
            if let Some((idx, mut data)) = tail {
                data.truncate((new - idx * cs) as usize);
                n.chunks.dirty.insert(idx, Chunk::whole(data));
            }
            n.chunks.dirty_bytes = n.chunks.dirty.values().map(|c| c.data.len()).sum();
            n.chunks.delete_chunks_from =
                Some(n.chunks.delete_chunks_from.map_or(from, |f| f.min(from)));
        }
        let now = SystemTime::now();
        let n = self.node_mut(ino)?;
        n.size = new;
        n.mtime = now;
        n.ctime = now;
        n.meta_dirty = true;
        self.mark_dirty(ino);
        Ok(())
    }

    /// Plans a read: bytes already in memory, or engine keys to fetch outside the lock.
    pub fn plan_read(&mut self, ino: u64, offset: u64, len: u32) -> Result<ReadPlan, Errno> {
        let n = self.node(ino)?;
        if n.kind != Kind::File {
            return Err(e(libc::EISDIR));
        }
        let size = n.size;
        let coll = self.coll_name(n.coll)?.to_string();
        let end = offset.saturating_add(len as u64).min(size);
        let mut parts = Vec::new();
        if offset < end {
            let cs = match n.storage {
                Storage::Inline => u64::MAX,
                Storage::Chunked => n.chunk_size,
            };
            let mut pos = offset;
            while pos < end {
                let (idx, start) = if cs == u64::MAX {
                    (0, 0)
                } else {
                    (pos / cs, (pos / cs) * cs)
                };
                let cend = if cs == u64::MAX {
                    end
                } else {
                    (start + cs).min(end)
                };
                let (a, z) = ((pos - start) as usize, (cend - start) as usize);
                self.fill_chunk(ino, idx)?;
                let n = self.node(ino)?;
                let src = match n.chunks.dirty.get(&idx) {
                    Some(c) => {
                        let mut b = Vec::with_capacity(z - a);
                        extend_padded(&mut b, &c.data, a, z);
                        ReadSource::Bytes(b)
                    }
                    None => match self.chunk_location(ino, idx)? {
                        Some(key) if n.storage == Storage::Chunked => {
                            let patches = n.chunks.patches.get(&idx).copied().unwrap_or(0);
                            push_stored(&mut parts, key, (n.fid, idx), patches, a, z);
                            pos = cend;
                            continue;
                        }
                        Some(key) => ReadSource::Key { key, a, z },
                        None => ReadSource::Bytes(vec![0; z - a]),
                    },
                };
                parts.push(src);
                pos = cend;
            }
        }
        // relatime: update atime when older than mtime/ctime or a day old.
        let now = SystemTime::now();
        let n = self.node_mut(ino)?;
        if n.atime <= n.mtime
            || n.atime <= n.ctime
            || now.duration_since(n.atime).unwrap_or_default() > Duration::from_secs(86400)
        {
            n.atime = now;
            n.meta_dirty = true;
            self.mark_dirty(ino);
        }
        Ok(ReadPlan { coll, parts })
    }

    /// Preallocates (mode 0: extends the size; KEEP_SIZE: nothing to reserve) or
    /// punches a hole (PUNCH_HOLE|KEEP_SIZE: zeros the range).
    pub fn fallocate(&mut self, ino: u64, offset: u64, len: u64, mode: i32) -> Result<(), Errno> {
        let end = offset
            .checked_add(len)
            .filter(|&x| x <= MAX_FILE_SIZE)
            .ok_or(e(libc::EFBIG))?;
        let size = self.node(ino)?.size;
        const KEEP: i32 = libc::FALLOC_FL_KEEP_SIZE;
        const PUNCH: i32 = libc::FALLOC_FL_PUNCH_HOLE;
        if mode == 0 {
            if end > size {
                self.truncate(ino, end)?;
            }
            Ok(())
        } else if mode == KEEP {
            Ok(())
        } else if mode == PUNCH | KEEP {
            let zend = end.min(size);
            let mut pos = offset;
            while pos < zend {
                let n = (zend - pos).min(1 << 20);
                self.write(ino, pos, &vec![0u8; n as usize])?;
                pos += n;
            }
            Ok(())
        } else {
            Err(e(libc::EOPNOTSUPP))
        }
    }
}

/// Adds the pieces of bytes `a..z` of stored chunk `idx` of file `fid` to a read: the
/// pages in `patches` from their patch records, runs of the others from the chunk.
fn push_stored(
    parts: &mut Vec<ReadSource>,
    chunk: Vec<u8>,
    (fid, idx): (u64, u64),
    patches: u64,
    a: usize,
    z: usize,
) {
    if patches & crate::state::page_mask(a as u64, z as u64) == 0 {
        parts.push(ReadSource::Key { key: chunk, a, z });
        return;
    }
    let page = layout::PATCH_PAGE as usize;
    let mut pos = a;
    while pos < z {
        let p = pos / page;
        let end = ((p + 1) * page).min(z);
        if (p as u64) < crate::state::MAX_PATCHED_PAGES && patches & (1 << p) != 0 {
            let key = layout::patch_key(fid, idx, p as u32);
            let (pa, pz) = (pos - p * page, end - p * page);
            parts.push(ReadSource::Key { key, a: pa, z: pz });
        } else {
            match parts.last_mut() {
                Some(ReadSource::Key { key, z: last, .. }) if *key == chunk && *last == pos => {
                    *last = end;
                }
                _ => parts.push(ReadSource::Key {
                    key: chunk.clone(),
                    a: pos,
                    z: end,
                }),
            }
        }
        pos = end;
    }
}

/// Appends bytes `a..z` of `d` to `out`, zeros where `d` is shorter (a hole).
fn extend_padded(out: &mut Vec<u8>, d: &[u8], a: usize, z: usize) {
    let have = d.get(a..z.min(d.len())).unwrap_or(&[]);
    out.extend_from_slice(have);
    out.resize(out.len() + (z - a - have.len()), 0);
}

/// Where each piece of a read comes from.
pub enum ReadSource {
    Bytes(Vec<u8>),
    /// Bytes `a..z` of the engine value at `key` (zeros past its end: a hole).
    Key {
        key: Vec<u8>,
        a: usize,
        z: usize,
    },
}

/// Read buffers this thread has replied from, for its next reads: the kernel's
/// readahead sends up to eight 1 MiB reads at once (two 4 MiB windows), which a pool
/// thread takes as one batch, each read assembled in a buffer of its own.
const KEPT_READ_BUFFERS: usize = 8;

thread_local! {
    static READ_BUFFERS: std::cell::RefCell<Vec<AlignedBuf>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// A page-aligned buffer of `len` bytes for a read's result: the engine reads the
/// whole pages of a chunk from the device straight into it, where they fall on page
/// boundaries (a read at a page-aligned offset), instead of copying them in. One this
/// thread gave back that is big enough is reused with its old bytes in place (no
/// zeroing, no fresh pages: the read overwrites what it uses); it keeps its capacity,
/// so a short read taking a 1 MiB buffer does not make the next long read allocate
/// again.
fn read_buffer(len: usize) -> AlignedBuf {
    let kept = READ_BUFFERS.with(|p| {
        let mut p = p.borrow_mut();
        let i = p.iter().rposition(|b| b.capacity() >= len)?;
        Some(p.swap_remove(i))
    });
    match kept {
        Some(mut b) => {
            b.set_len(len);
            b
        }
        None => AlignedBuf::zeroed(len),
    }
}

/// Gives a read's buffer back once its reply is sent (kept if this thread keeps fewer
/// than [`KEPT_READ_BUFFERS`] and it is at most 2 MiB).
fn recycle_read_buffer(b: AlignedBuf) {
    if b.capacity() <= 2 << 20 {
        READ_BUFFERS.with(|p| {
            let mut p = p.borrow_mut();
            if p.len() < KEPT_READ_BUFFERS {
                p.push(b);
            }
        });
    }
}

impl ReadSource {
    /// Bytes this piece adds to the read.
    fn len(&self) -> usize {
        match self {
            ReadSource::Bytes(b) => b.len(),
            ReadSource::Key { a, z, .. } => z - a,
        }
    }
}

/// A read planned under the lock and completed outside it.
pub struct ReadPlan {
    pub coll: String,
    pub parts: Vec<ReadSource>,
}

impl ReadPlan {
    /// Bytes the read returns.
    pub fn len(&self) -> usize {
        self.parts.iter().map(ReadSource::len).sum()
    }

    /// Whether every piece is already in memory (no engine read needed).
    pub fn in_memory(&self) -> bool {
        self.parts.iter().all(|p| matches!(p, ReadSource::Bytes(_)))
    }

    /// Executes many reads with one engine `multi_get_ranges_to` per collection (one
    /// io_uring submission for all their pieces; a piece of a large chunk reads only
    /// the pages that hold it) and hands each read's bytes to `done` with its tag as
    /// soon as all its pieces are in: a 1 MiB read of sixteen chunks is answered when
    /// its own sixteen have landed, not when the batch's other reads have. Each read is
    /// assembled in one buffer of its final size, the engine writing every piece in
    /// place.
    pub fn execute_each<T>(
        jobs: Vec<(ReadPlan, T)>,
        db: &basalt_engine::Db,
        done: impl FnMut(T, Result<&[u8], Errno>),
    ) {
        let mut reads = Assembly {
            lens: Vec::with_capacity(jobs.len()),
            outs: Vec::with_capacity(jobs.len()),
            tags: Vec::with_capacity(jobs.len()),
            left: vec![0; jobs.len()],
            done,
        };
        let mut pieces: Vec<Piece> = Vec::new();
        // Per collection: the engine pieces, as indices into `pieces`.
        let mut by_coll: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (n, (p, tag)) in jobs.into_iter().enumerate() {
            let len = p.len();
            let mut out = read_buffer(len);
            let mut at = 0;
            let ids = by_coll.entry(p.coll).or_default();
            for part in p.parts {
                let plen = part.len();
                match part {
                    ReadSource::Bytes(b) => out[at..at + plen].copy_from_slice(&b),
                    ReadSource::Key { key, a, z } => {
                        ids.push(pieces.len());
                        pieces.push(Piece {
                            read: n,
                            at,
                            key,
                            range: a..z,
                        });
                        reads.left[n] += 1;
                    }
                }
                at += plen;
            }
            reads.lens.push(len);
            reads.outs.push(out);
            reads.tags.push(Some(tag));
        }
        for n in 0..reads.tags.len() {
            if reads.left[n] == 0 {
                reads.answer(n, Ok(()));
            }
        }
        for (coll, ids) in by_coll {
            if ids.is_empty() {
                continue; // reads from memory only, answered above
            }
            let reqs: Vec<basalt_engine::RangeRequest<'_>> = (ids.iter())
                .map(|&i| (&pieces[i].key[..], pieces[i].range.clone()))
                .collect();
            let mut sink = CollSink {
                ids: &ids,
                pieces: &pieces,
                reads: &mut reads,
            };
            let got = db.multi_get_ranges_to(&coll, &reqs, &mut sink);
            if let Err(err) = got {
                // Reads answered before the error keep their answer; the rest fail.
                let errno = engine_err(&coll, reqs[0].0, &err);
                for &i in &ids {
                    reads.answer(pieces[i].read, Err(errno));
                }
            }
        }
        for out in reads.outs {
            recycle_read_buffer(out);
        }
    }
}

/// One engine piece of a read: bytes `range` of the value at `key`, placed at `at` of
/// the read's buffer.
struct Piece {
    read: usize,
    at: usize,
    key: Vec<u8>,
    range: std::ops::Range<usize>,
}

/// The reads of one [`ReadPlan::execute_each`]: each read's buffer and length, its
/// tag until it is answered, and how many of its pieces are still being read.
struct Assembly<T, F: FnMut(T, Result<&[u8], Errno>)> {
    lens: Vec<usize>,
    outs: Vec<AlignedBuf>,
    tags: Vec<Option<T>>,
    left: Vec<usize>,
    done: F,
}

impl<T, F: FnMut(T, Result<&[u8], Errno>)> Assembly<T, F> {
    /// Answers read `n` (once: later calls do nothing).
    fn answer(&mut self, n: usize, r: Result<(), Errno>) {
        if let Some(t) = self.tags[n].take() {
            (self.done)(t, r.map(|()| &self.outs[n][..self.lens[n]]));
        }
    }
}

/// The engine's view of one collection's pieces: piece `i` of the engine call is
/// `pieces[ids[i]]`.
struct CollSink<'a, T, F: FnMut(T, Result<&[u8], Errno>)> {
    ids: &'a [usize],
    pieces: &'a [Piece],
    reads: &'a mut Assembly<T, F>,
}

// SAFETY: piece `i`'s buffer is its place in its read's buffer (`reads.outs`), which
// is neither moved nor resized nor read while the engine call runs: a read is answered
// (its buffer read) only once all its pieces are done.
unsafe impl<T, F: FnMut(T, Result<&[u8], Errno>)> basalt_engine::PartSink for CollSink<'_, T, F> {
    fn buf(&mut self, i: usize) -> &mut [u8] {
        let p = &self.pieces[self.ids[i]];
        let len = p.range.len();
        &mut self.reads.outs[p.read][p.at..p.at + len]
    }

    fn done(&mut self, i: usize, len: Option<usize>) {
        // A missing key or a piece past the value's end reads as zeros (a hole). Every
        // byte of the read is written: a reused buffer holds an earlier read's bytes.
        let got = len.unwrap_or(0);
        self.buf(i)[got..].fill(0);
        let n = self.pieces[self.ids[i]].read;
        self.reads.left[n] -= 1;
        if self.reads.left[n] == 0 {
            self.reads.answer(n, Ok(()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_buffer_given_back_serves_shorter_and_then_longer_reads_without_regrowing() {
        let mut big = read_buffer(1 << 20);
        assert_eq!(big.len(), 1 << 20);
        big[(1 << 20) - 1] = 7;
        let ptr = big.as_ptr();
        recycle_read_buffer(big);
        let small = read_buffer(4096);
        assert!(small.len() >= 4096);
        assert_eq!(small.as_ptr(), ptr, "the kept buffer is reused");
        recycle_read_buffer(small);
        let again = read_buffer(1 << 20);
        assert_eq!(again.as_ptr(), ptr);
        assert_eq!(
            again[(1 << 20) - 1],
            7,
            "the short read did not shrink it: the long read finds its bytes, not zeros"
        );
    }

    #[test]
    fn a_thread_keeps_a_bounded_number_of_read_buffers() {
        recycle_read_buffer(AlignedBuf::zeroed((2 << 20) + 1));
        assert_eq!(
            READ_BUFFERS.with(|p| p.borrow().len()),
            0,
            "over 2 MiB: freed"
        );
        let bufs: Vec<AlignedBuf> = (0..KEPT_READ_BUFFERS + 3)
            .map(|_| read_buffer(64))
            .collect();
        for b in bufs {
            recycle_read_buffer(b);
        }
        assert_eq!(READ_BUFFERS.with(|p| p.borrow().len()), KEPT_READ_BUFFERS);
    }
}

#[cfg(test)]
mod execute_tests {
    use super::*;
    use crate::noise;
    use basalt_engine::{Db, Options};

    fn key_part(key: &str, a: usize, z: usize) -> ReadSource {
        ReadSource::Key {
            key: key.as_bytes().to_vec(),
            a,
            z,
        }
    }

    fn plan(parts: Vec<ReadSource>) -> ReadPlan {
        ReadPlan {
            coll: "c".into(),
            parts,
        }
    }

    /// A data directory with collection `c` holding two 64 KiB values, `a` and `b`,
    /// opened again with `opts`.
    fn two_values(opts: Options) -> (tempfile::TempDir, Db) {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = Db::open(dir.path(), Options::default()).unwrap();
            let c = db.create_collection("c").unwrap();
            c.put(b"a", &noise(1, 65_536)).unwrap();
            c.put(b"b", &noise(2, 65_536)).unwrap();
            db.flush().unwrap();
        }
        let db = Db::open(dir.path(), opts).unwrap();
        (dir, db)
    }

    #[test]
    fn each_read_is_answered_once_with_its_pieces_in_order_and_holes_as_zeros() {
        let (_dir, db) = two_values(Options::default());
        // Dirty buffers on this thread: every byte of a reused one must be overwritten.
        for _ in 0..KEPT_READ_BUFFERS {
            let mut dirty = AlignedBuf::zeroed(200_000);
            dirty.fill(0xee);
            recycle_read_buffer(dirty);
        }
        let jobs = vec![
            (
                plan(vec![
                    key_part("a", 4096, 8192),
                    ReadSource::Bytes(vec![9; 10]),
                    key_part("b", 0, 65_536),
                ]),
                0,
            ),
            (plan(vec![ReadSource::Bytes(vec![1, 2, 3])]), 1),
            // A missing key and a piece past a value's end: holes.
            (
                plan(vec![key_part("zz", 0, 100), key_part("a", 65_000, 66_000)]),
                2,
            ),
        ];
        let mut got: Vec<(usize, Vec<u8>)> = Vec::new();
        ReadPlan::execute_each(jobs, &db, |tag, r| got.push((tag, r.unwrap().to_vec())));
        got.sort_by_key(|g| g.0);
        let mut want0 = noise(1, 65_536)[4096..8192].to_vec();
        want0.extend([9; 10]);
        want0.extend(noise(2, 65_536));
        let mut want2 = vec![0u8; 100];
        want2.extend(&noise(1, 65_536)[65_000..]);
        want2.resize(100 + 1000, 0);
        assert_eq!(got.len(), 3, "each read answered once");
        assert!(got[0].1 == want0, "read 0: two engine pieces around bytes");
        assert_eq!(got[1].1, [1, 2, 3], "read 1: bytes only");
        assert!(got[2].1 == want2, "read 2: holes read as zeros");
    }

    #[test]
    fn a_read_of_several_pieces_is_answered_when_its_own_land_not_after_the_batch() {
        let (_dir, db) = two_values(Options {
            warm_index_cache: false,
            ..Options::default()
        });
        // b's block head is cached, a's is not: the engine reads a's pieces with its
        // head first, then b's piece in a second round trip.
        db.collection("c").unwrap().get_range(b"b", 0..10).unwrap();
        let reads = || db.stats().device_reads;
        let before = reads();
        let jobs = vec![
            (
                plan(vec![
                    key_part("a", 8192, 12_288),
                    key_part("a", 12_288, 16_384),
                ]),
                "a",
            ),
            (plan(vec![key_part("b", 32_768, 36_864)]), "b"),
        ];
        let mut when = Vec::new();
        ReadPlan::execute_each(jobs, &db, |tag, r| {
            assert!(r.is_ok());
            when.push((tag, reads() - before));
        });
        let total = reads() - before;
        assert_eq!(when[0].0, "a", "{when:?}");
        assert!(
            when[0].1 < total,
            "the two-piece read waited for the other read's device read: {when:?}, {total} reads"
        );
    }
}

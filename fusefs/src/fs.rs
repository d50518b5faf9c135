//! Namespace and data operations on the in-memory state (no FUSE types here).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, SystemTime};

use crate::layout::{self, Kind, Manifest, Storage};
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
            n.symlink = new.symlink.to_vec();
            n.size = new.symlink.len() as u64;
        }
        if new.kind == Kind::Dir {
            n.nlink = 2;
        }
        self.nodes.insert(ino, n);
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
            n.dirty.clear();
            n.dirty_bytes = 0;
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
            match self.node(ino)?.dirty.get(&idx) {
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
                    n.dirty_bytes += chunk.data.len();
                    n.dirty.insert(idx, chunk);
                }
            }
            let n = self.node_mut(ino)?;
            let c = n.dirty.get_mut(&idx).ok_or(e(libc::EIO))?;
            let before = c.data.len();
            c.touch(before.min(off), off + src.len());
            // Zero only a gap before the write; bytes past the end are appended.
            if before < off {
                c.data.resize(off, 0);
            }
            let overlap = c.data.len().min(off + src.len()) - off;
            c.data[off..off + overlap].copy_from_slice(&src[..overlap]);
            c.data.extend_from_slice(&src[overlap..]);
            n.dirty_bytes += c.data.len() - before;
            pos = wend;
        }
        let now = SystemTime::now();
        let n = self.node_mut(ino)?;
        n.size = n.size.max(end);
        n.mtime = now;
        n.ctime = now;
        n.meta_dirty = true;
        let flush_now = n.dirty_bytes >= crate::state::FILE_DIRTY_LIMIT;
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
                n.storage = Storage::Inline;
                n.delete_chunks_from = Some(0);
                n.dirty.clear();
            }
            n.docs_dirty = true;
            n.dirty_bytes = data.len();
            n.dirty.insert(0, Chunk::whole(data));
        } else if new < old {
            let from = new.div_ceil(cs);
            let partial = (!new.is_multiple_of(cs)).then_some(new / cs);
            let tail = match partial {
                Some(idx) => Some((idx, self.load_chunk(ino, idx)?)),
                None => None,
            };
            let n = self.node_mut(ino)?;
            n.dirty.retain(|&idx, _| idx * cs < new);
            if let Some((idx, mut data)) = tail {
                data.truncate((new - idx * cs) as usize);
                n.dirty.insert(idx, Chunk::whole(data));
            }
            n.dirty_bytes = n.dirty.values().map(|c| c.data.len()).sum();
            n.delete_chunks_from = Some(n.delete_chunks_from.map_or(from, |f| f.min(from)));
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
                let src = match n.dirty.get(&idx) {
                    Some(c) => {
                        let mut b = Vec::with_capacity(z - a);
                        extend_padded(&mut b, &c.data, a, z);
                        ReadSource::Bytes(b)
                    }
                    None => match self.chunk_location(ino, idx)? {
                        Some(key) if n.storage == Storage::Chunked => {
                            let patches = n.patches.get(&idx).copied().unwrap_or(0);
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

/// Read buffers this thread has replied from, for its next reads.
const KEPT_READ_BUFFERS: usize = 2;

thread_local! {
    static READ_BUFFERS: std::cell::RefCell<Vec<Vec<u8>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// A buffer of `len` bytes for a read's result. One this thread gave back is reused
/// with its old bytes in place (no zeroing, no fresh pages): the read overwrites all.
fn read_buffer(len: usize) -> Vec<u8> {
    let mut b = READ_BUFFERS
        .with(|p| p.borrow_mut().pop())
        .unwrap_or_default();
    if b.len() >= len {
        b.truncate(len);
    } else {
        b.resize(len, 0);
    }
    b
}

/// Gives a read's buffer back once its reply is sent (kept if this thread keeps fewer
/// than [`KEPT_READ_BUFFERS`] and it is at most 2 MiB).
pub fn recycle_read_buffer(b: Vec<u8>) {
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

    /// Executes many reads with one engine `multi_get_ranges_each` per collection (one
    /// io_uring submission for all their pieces; a piece of a large chunk reads only
    /// the pages that hold it) and hands each read's bytes to `done` with its tag as
    /// soon as they are complete: a read that is one engine piece as its pages land
    /// (its reply need not wait for the batch's slower reads), any other once the
    /// batch's reads are done. Each read is assembled in one buffer of its final size,
    /// the engine writing every piece in place.
    pub fn execute_each<T>(
        jobs: Vec<(ReadPlan, T)>,
        db: &basalt_engine::Db,
        mut done: impl FnMut(T, Result<&[u8], Errno>),
    ) {
        let (plans, tags): (Vec<ReadPlan>, Vec<T>) = jobs.into_iter().unzip();
        let mut tags: Vec<Option<T>> = tags.into_iter().map(Some).collect();
        let single: Vec<bool> = plans
            .iter()
            .map(|p| matches!(p.parts.as_slice(), [ReadSource::Key { .. }]))
            .collect();
        let mut outs: Vec<Vec<u8>> = plans.iter().map(|p| read_buffer(p.len())).collect();
        // Per collection: the engine pieces, the parts of `outs` they go to, and the
        // read each belongs to.
        type Pieces<'a> = (
            Vec<basalt_engine::RangeRequest<'a>>,
            Vec<&'a mut [u8]>,
            Vec<usize>,
        );
        let mut by_coll: BTreeMap<&str, Pieces> = BTreeMap::new();
        for (n, (p, out)) in plans.iter().zip(outs.iter_mut()).enumerate() {
            let mut rest = &mut out[..];
            for part in &p.parts {
                let (here, tail) = std::mem::take(&mut rest).split_at_mut(part.len());
                rest = tail;
                match part {
                    ReadSource::Bytes(b) => here.copy_from_slice(b),
                    ReadSource::Key { key, a, z } => {
                        let (reqs, bufs, owner) = by_coll.entry(&p.coll).or_default();
                        reqs.push((key, *a..*z));
                        bufs.push(here);
                        owner.push(n);
                    }
                }
            }
        }
        // A missing key or a piece past the value's end reads as zeros (a hole). Every
        // byte of every buffer is written: a reused buffer holds an earlier read's bytes.
        let mut failed: Vec<Option<Errno>> = vec![None; plans.len()];
        for (coll, (reqs, mut bufs, owner)) in by_coll {
            let got = db.multi_get_ranges_each(coll, &reqs, &mut bufs, |i, len, buf| {
                buf[len.unwrap_or(0)..].fill(0);
                if single[owner[i]] {
                    if let Some(t) = tags[owner[i]].take() {
                        done(t, Ok(buf));
                    }
                }
            });
            if let Err(err) = got {
                let errno = engine_err(coll, reqs[0].0, &err);
                for &n in &owner {
                    failed[n] = Some(errno);
                }
            }
        }
        for (n, out) in outs.into_iter().enumerate() {
            if let Some(t) = tags[n].take() {
                match failed[n] {
                    Some(errno) => done(t, Err(errno)),
                    None => done(t, Ok(&out)),
                }
            }
            recycle_read_buffer(out);
        }
    }
}

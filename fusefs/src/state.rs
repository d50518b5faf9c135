//! The in-memory inode table and how its changes are written to the engine.
//!
//! The whole namespace (inodes and directory entries) is kept in memory while
//! mounted and is authoritative; every change is written through to the engine in
//! one atomic batch per operation. File data is cached only while dirty.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use basalt_engine::{BatchOp, Db, WriteBatch};

use crate::layout::{self, InodeRecord, Kind, Manifest, Storage};
use crate::lazy::{Empty, Lazy};

/// Kernel inode number of the mount root.
pub const ROOT_INO: u64 = 1;
/// First inode number handed out to real inodes (below are the virtual `/.basalt` files).
pub const FIRST_INO: u64 = 16;
/// Largest file size accepted (writes or truncates beyond fail with EFBIG).
pub const MAX_FILE_SIZE: u64 = 1 << 50;
/// Dirty bytes of one file after which its data is written to the engine at once.
pub const FILE_DIRTY_LIMIT: usize = 8 << 20;

/// One cached chunk of a regular file (for inline files, chunk 0 is the content).
#[derive(Debug, Default)]
pub struct Chunk {
    pub data: Vec<u8>,
    /// Pages ([`layout::PATCH_PAGE`]) changed since the chunk was read from the engine
    /// (bit p = page p), which a flush may write as patches; `None`: the chunk is
    /// written whole.
    pub pages: Option<u64>,
    /// The chunk's stored bytes were never read: only the bytes of `pages` are valid
    /// (whole-page writes need no read-back). [`State::load_chunk`] fills in the rest.
    pub unread: bool,
}

impl Chunk {
    /// A chunk that is written whole at the next flush.
    pub fn whole(data: Vec<u8>) -> Chunk {
        Chunk {
            data,
            pages: None,
            unread: false,
        }
    }

    /// Records that bytes `a..z` of the chunk changed.
    pub fn touch(&mut self, a: usize, z: usize) {
        if let Some(p) = &mut self.pages {
            *p |= page_mask(a as u64, z as u64);
        }
    }
}

/// Pages per chunk up to which small writes are committed as patches (one bit each).
pub const MAX_PATCHED_PAGES: u64 = 64;

/// Whether chunks of `chunk_size` bytes take patches (at most [`MAX_PATCHED_PAGES`]).
pub fn patchable(chunk_size: u64) -> bool {
    chunk_size.div_ceil(layout::PATCH_PAGE) <= MAX_PATCHED_PAGES
}

/// Bits of the pages holding bytes `a..z` of a chunk (pages past the 64th ignored).
pub fn page_mask(a: u64, z: u64) -> u64 {
    let (first, last) = (a / layout::PATCH_PAGE, z.div_ceil(layout::PATCH_PAGE));
    (first..last.min(MAX_PATCHED_PAGES)).fold(0, |m, p| m | 1 << p)
}

/// Lays patch `bytes` over page `p` of chunk bytes `data` (growing it if they reach
/// past its end).
fn put_page(data: &mut Vec<u8>, p: u32, bytes: &[u8]) {
    let a = (p as u64 * layout::PATCH_PAGE) as usize;
    if data.len() < a + bytes.len() {
        data.resize(a + bytes.len(), 0);
    }
    data[a..a + bytes.len()].copy_from_slice(bytes);
}

/// The pages set in a patch bitmap.
pub fn pages_of(mask: u64) -> impl Iterator<Item = u32> {
    (0..64u32).filter(move |p| mask & (1 << p) != 0)
}

/// The names of an inode, `(parent ino, name)`, in order: a sorted vector holding
/// exactly its entries. Nearly every inode has one, where a `BTreeSet` allocated a
/// whole B-tree leaf (about 370 bytes) for it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Links(Vec<(u64, OsString)>);

impl Links {
    /// Adds a name; false if it was there.
    pub fn insert(&mut self, link: (u64, OsString)) -> bool {
        match self.0.binary_search(&link) {
            Ok(_) => false,
            Err(at) => {
                self.0.reserve_exact(1);
                self.0.insert(at, link);
                true
            }
        }
    }

    /// Removes a name; false if it was not there.
    pub fn remove(&mut self, link: &(u64, OsString)) -> bool {
        match self.0.binary_search(link) {
            Ok(at) => {
                self.0.remove(at);
                if self.0.is_empty() {
                    self.0 = Vec::new(); // gives the allocation back
                }
                true
            }
            Err(_) => false,
        }
    }

    pub fn iter(&self) -> std::slice::Iter<'_, (u64, OsString)> {
        self.0.iter()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The tree's inodes by number. Boxed: the map keeps 16-byte slots, about twice as
/// many as inodes, where inline nodes made every spare slot cost a whole `Node`
/// (300,000 files: 165 MB resident after mounting against 216 MB inline). The pointer
/// chase cost nothing measurable: daemon CPU per create, stat and delete within 5%.
pub type NodeMap = foldhash::HashMap<u64, Box<Node>>;

/// An inode in memory.
#[derive(Debug)]
pub struct Node {
    pub ino: u64,
    /// In-memory id of the collection; 0 for the mount root.
    pub coll: u32,
    /// Persistent id inside the collection (chunk and inode record keys).
    pub fid: u64,
    pub kind: Kind,
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
    pub chunk_size: u64,
    /// A symlink's target (allocated for symlinks only).
    pub symlink: Lazy<Vec<u8>>,
    pub xattrs: Lazy<BTreeMap<Vec<u8>, Vec<u8>>>,
    /// Names linking to this inode: (parent ino, name). Directories have exactly one.
    pub links: Links,
    /// Directory entries (directories only).
    pub children: Lazy<BTreeMap<OsString, u64>>,
    /// Number of subdirectories (for the directory's link count).
    pub subdirs: u32,
    /// Kernel lookup count.
    pub lookups: u64,
    /// Open file handles.
    pub open: u32,
    /// Open file handles that can write (the kernel may hold dirty pages and a size
    /// this daemon has not seen while one is open).
    pub writers: u32,
    /// Inode and name records exist in the engine.
    pub persisted: bool,
    /// Attributes changed since the inode record was last written.
    pub meta_dirty: bool,
    /// A regular file's chunks beyond the stored ones: dirty, patched, kept, stale.
    pub chunks: Lazy<ChunkState>,
    /// The documents at the file's paths must be rewritten (storage form changed).
    pub docs_dirty: bool,
    /// An inline file's document exists in the engine.
    pub has_doc: bool,
    /// No chunk record can exist under this fid: the file was created by this mount
    /// with a fid above every stored inode record (chunks never outlive their inode
    /// record) and has not been chunked since. Unlinking it then skips the scan for
    /// chunks.
    pub no_chunks: bool,
}

/// What a regular file holds of its chunks beyond the stored records (allocated in
/// [`Node::chunks`] only for a file that has any of it: one being written, truncated,
/// or with patch records).
#[derive(Debug, Default)]
pub struct ChunkState {
    /// Dirty chunks by index.
    pub dirty: BTreeMap<u64, Chunk>,
    /// Pages of stored chunks that have a newer patch record, by chunk index (bit p =
    /// page p). Loaded at mount; reads take those pages from the patches.
    pub patches: BTreeMap<u64, u64>,
    pub dirty_bytes: usize,
    /// Stored chunks at or beyond this index are stale and must be deleted.
    pub delete_chunks_from: Option<u64>,
    /// `(index, bytes)`: the stored bytes of chunk `index` (what `stored_chunk` would
    /// read; an inline file's content is chunk 0), kept after a flush wrote them whole
    /// while a handle could write: an inline file's content, a chunked file's short
    /// last chunk or a chunk rewritten after its patches filled up. A growing file (a
    /// database's write-ahead log) then changes its last chunk without reading it
    /// back. Dropped when the storage form changes or the last writer closes.
    pub tail: Option<(u64, Vec<u8>)>,
}

impl Empty for ChunkState {
    fn empty() -> &'static Self {
        static EMPTY: ChunkState = ChunkState {
            dirty: BTreeMap::new(),
            patches: BTreeMap::new(),
            dirty_bytes: 0,
            delete_chunks_from: None,
            tail: None,
        };
        &EMPTY
    }
    fn is_vacant(&self) -> bool {
        self.dirty.is_empty()
            && self.patches.is_empty()
            && self.dirty_bytes == 0
            && self.delete_chunks_from.is_none()
            && self.tail.is_none()
    }
}

/// Mode bits `perm` after a write, truncate or chown took its privileges: without
/// set-user-ID, and without set-group-ID when group execute is set (or when
/// `sgid_anyway`; set-group-ID without group execute marks mandatory locking).
pub fn killed_perm(perm: u16, sgid_anyway: bool) -> u16 {
    const SUID: u16 = libc::S_ISUID as u16;
    const SGID: u16 = libc::S_ISGID as u16;
    const XGRP: u16 = libc::S_IXGRP as u16;
    let mut out = perm & !SUID;
    if perm & XGRP != 0 || sgid_anyway {
        out &= !SGID;
    }
    out
}

impl Node {
    pub fn new(ino: u64, coll: u32, fid: u64, kind: Kind, perm: u16, now: SystemTime) -> Node {
        Node {
            ino,
            coll,
            fid,
            kind,
            perm,
            uid: 0,
            gid: 0,
            nlink: 1,
            rdev: 0,
            size: 0,
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            storage: Storage::Inline,
            chunk_size: crate::document::DEFAULT_CHUNK_SIZE as u64,
            symlink: Lazy::default(),
            xattrs: Lazy::default(),
            links: Links::default(),
            children: Lazy::default(),
            subdirs: 0,
            lookups: 0,
            open: 0,
            writers: 0,
            persisted: false,
            meta_dirty: false,
            chunks: Lazy::default(),
            docs_dirty: false,
            has_doc: false,
            no_chunks: false,
        }
    }

    /// The file of a document written through the engine API without metadata: mode
    /// 0644, owned by root, inline, its length the document's (its directory's default
    /// ACL and set-group-ID bit apply on top, `load::inherit_from`).
    pub fn for_document(ino: u64, coll: u32, fid: u64, len: u64, now: SystemTime) -> Node {
        let mut n = Node::new(ino, coll, fid, Kind::File, 0o644, now);
        n.size = len;
        n.has_doc = true;
        n
    }

    pub fn from_record(ino: u64, coll: u32, fid: u64, r: &InodeRecord) -> Node {
        let mut n = Node::new(ino, coll, fid, r.kind, r.perm, r.mtime);
        n.uid = r.uid;
        n.gid = r.gid;
        n.nlink = r.nlink;
        n.rdev = r.rdev;
        n.size = r.size;
        n.atime = r.atime;
        n.ctime = r.ctime;
        n.crtime = r.crtime;
        n.storage = r.storage;
        if r.chunk_size > 0 {
            n.chunk_size = r.chunk_size as u64;
        }
        n.symlink = Lazy::of(r.symlink.clone());
        n.xattrs = Lazy::of(r.xattrs.iter().cloned().collect());
        n.persisted = true;
        n
    }

    pub fn record(&self) -> InodeRecord {
        InodeRecord {
            kind: self.kind,
            perm: self.perm,
            uid: self.uid,
            gid: self.gid,
            nlink: self.nlink,
            rdev: self.rdev,
            size: self.size,
            atime: self.atime,
            mtime: self.mtime,
            ctime: self.ctime,
            crtime: self.crtime,
            storage: self.storage,
            chunk_size: self.chunk_size as u32,
            symlink: self.symlink.to_vec(),
            xattrs: self
                .xattrs
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        }
    }

    /// What the kernel's VFS does to a file on write, truncate and chown, done here
    /// because the mount hands it to the filesystem (`FUSE_HANDLE_KILLPRIV_V2`): clears
    /// set-user-ID, set-group-ID when group execute is set (or when `sgid_anyway`), and
    /// the `security.capability` attribute. Sets ctime and marks the record dirty when
    /// something changed; returns whether it did.
    pub fn kill_priv(&mut self, sgid_anyway: bool) -> bool {
        let perm = killed_perm(self.perm, sgid_anyway);
        let cap = (self.xattrs.existing())
            .is_some_and(|x| x.remove(&b"security.capability"[..]).is_some());
        if perm == self.perm && !cap {
            return false;
        }
        self.perm = perm;
        self.ctime = SystemTime::now();
        self.meta_dirty = true;
        true
    }

    /// Has set-user-ID, set-group-ID or a `security.capability` attribute.
    pub fn privileged(&self) -> bool {
        self.perm & (libc::S_ISUID | libc::S_ISGID) as u16 != 0
            || self.xattrs.contains_key(&b"security.capability"[..])
    }

    pub fn is_dir(&self) -> bool {
        self.kind == Kind::Dir
    }

    /// The pages of dirty chunk `idx` (`c`) a flush writes as patches, or `None` to
    /// write it whole: it is new or rewritten (`pages` unknown), its stored chunk is
    /// being deleted by a truncate, its chunk size is not [`patchable`], or its
    /// patches (stored plus new) would hold more than half of its bytes within the
    /// file.
    pub fn patch_pages(&self, idx: u64, c: &Chunk) -> Option<u64> {
        let (cs, start) = (self.chunk_size, idx * self.chunk_size);
        let len = (c.data.len() as u64)
            .min(self.size.saturating_sub(start))
            .min(cs);
        let pages = c.pages? & page_mask(0, len);
        let had = self.chunks.patches.get(&idx).copied().unwrap_or(0);
        let stale = self.chunks.delete_chunks_from.is_some_and(|f| idx >= f);
        let small = u64::from((had | pages).count_ones()) * layout::PATCH_PAGE * 2 <= len;
        (pages != 0 && !stale && patchable(cs) && small).then_some(pages)
    }

    /// Forgets the unflushed chunks (of an inode whose records are gone).
    pub fn drop_dirty(&mut self) {
        if let Some(c) = self.chunks.existing() {
            c.dirty.clear();
            c.dirty_bytes = 0;
        }
        self.chunks.shrink();
    }

    /// Drops the kept copy of a stored chunk ([`ChunkState::tail`]).
    pub fn drop_tail(&mut self) {
        if let Some(c) = self.chunks.existing() {
            c.tail = None;
        }
        self.chunks.shrink();
    }

    pub fn has_dirty_data(&self) -> bool {
        !self.chunks.dirty.is_empty() || self.chunks.delete_chunks_from.is_some() || self.docs_dirty
    }

    /// The one name of a singly-linked inode.
    pub fn only_link(&self) -> Option<&(u64, OsString)> {
        if self.links.len() == 1 {
            self.links.iter().next()
        } else {
            None
        }
    }
}

/// A mounted collection.
#[derive(Debug)]
pub struct Coll {
    pub name: String,
    pub root: u64,
    /// The engine's id of the collection (kept by a rename).
    pub engine_id: basalt_engine::CollId,
}

/// Puts and deletes for one engine batch, deduplicated by key (last wins).
#[derive(Default)]
pub struct Batch {
    ops: BTreeMap<(String, Vec<u8>), Option<Vec<u8>>>,
}

impl Batch {
    pub fn put(&mut self, coll: &str, key: Vec<u8>, value: Vec<u8>) {
        self.ops.insert((coll.to_string(), key), Some(value));
    }
    pub fn delete(&mut self, coll: &str, key: Vec<u8>) {
        self.ops.insert((coll.to_string(), key), None);
    }
    /// Drops the put or delete of `key`, if any.
    pub fn forget(&mut self, coll: &str, key: &[u8]) {
        self.ops.remove(&(coll.to_string(), key.to_vec()));
    }
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
    /// Writes the batch as one engine batch, a write of `st`'s mount (see
    /// [`crate::external::own`]).
    pub fn commit(self, st: &State) -> Result<(), basalt_engine::Error> {
        if self.ops.is_empty() {
            return Ok(());
        }
        crate::external::own(st.mount_id, || st.db.write(&self.into_write_batch())).map(|_| ())
    }
    /// The engine batch, values moved into it (no copy).
    pub fn into_write_batch(self) -> WriteBatch {
        let mut b = WriteBatch::new();
        for ((c, k), v) in self.ops {
            match v {
                Some(v) => b.put_owned(&c, k, v),
                None => b.delete(&c, &k),
            };
        }
        b
    }
}

/// An engine failure already logged, carrying the errno to reply with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Errno(pub i32);

/// Logs an engine error naming the document and returns its errno.
pub fn engine_err(coll: &str, path: &[u8], e: &basalt_engine::Error) -> Errno {
    eprintln!(
        "basalt-fusefs: engine error on {coll}/{}: {e}",
        String::from_utf8_lossy(path)
    );
    Errno(e.errno())
}

/// The whole filesystem state behind one lock.
pub struct State {
    pub db: Db,
    /// Inodes by number (foldhash: inode numbers need no DoS-resistant hashing).
    pub nodes: NodeMap,
    pub colls: HashMap<u32, Coll>,
    pub coll_by_name: HashMap<String, u32>,
    pub next_ino: u64,
    pub next_coll: u32,
    pub dirty_nodes: HashSet<u64>,
    pub chunk_size: u64,
    pub chunk_io: ChunkIo,
    /// Inode ids, shared with `write_document` and other mounts of the engine.
    pub fids: Arc<crate::fids::Fids>,
    /// The mount's id, marking its own commits (`crate::external::own`).
    pub mount_id: u64,
    /// The engine's `catalog_changes` the collections were last brought in line with.
    pub catalog_seen: u64,
    /// Directories whose entries changed through the engine API since their last
    /// OPENDIR: the next one tells the kernel to drop its cached listing.
    pub listings_changed: HashSet<u64>,
    /// Where the mount took its tree from.
    pub tree_loaded: crate::tree_snapshot::LoadedFrom,
}

/// What the mount did with stored chunks, for `/.basalt/stats.json`.
#[derive(Debug, Default)]
pub struct ChunkIo {
    /// Stored chunks read back to change part of them (a partial write, a truncate,
    /// an unread chunk filled in).
    pub read_back: AtomicU64,
    /// Chunks of chunked files written whole.
    pub written_whole: AtomicU64,
    /// Pages written as patches.
    pub patch_pages: AtomicU64,
    /// Read-backs not needed: the chunk was the file's last, kept since its flush
    /// ([`Node::tail`]).
    pub tail_kept: AtomicU64,
}

impl ChunkIo {
    fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    /// The counters, with the patches the files hold now, as JSON.
    pub fn to_json(&self, nodes: &NodeMap) -> serde_json::Value {
        let patched = nodes.values().flat_map(|n| n.chunks.patches.values());
        let (chunks, pages) = patched.fold((0u64, 0u64), |(c, p), m| {
            (c + 1, p + u64::from(m.count_ones()))
        });
        serde_json::json!({
            "read_back": self.read_back.load(Ordering::Relaxed),
            "written_whole": self.written_whole.load(Ordering::Relaxed),
            "read_back_avoided": self.tail_kept.load(Ordering::Relaxed),
            "patch_pages_written": self.patch_pages.load(Ordering::Relaxed),
            "patched_chunks": chunks,
            "patched_pages": pages,
        })
    }
}

/// How a flush changes a file's [`Node::tail`]: the chunk it keeps is updated with the
/// flush's writes to it, or replaced by a short last chunk written whole. Nothing is
/// kept without a handle that can write (memory stays bounded by the open writers) or
/// once the chunk is deleted as stale.
struct TailUpdate {
    kept: Option<(u64, Vec<u8>)>,
    /// Whole chunks are kept only while the file is open for writing.
    keep_new: bool,
    size: u64,
    chunk_size: u64,
}

impl TailUpdate {
    /// Takes `n`'s tail for the flush (a refused flush leaves none: safe, the next
    /// change of that chunk reads it back). Only a file with writers has one (the last
    /// writer's release drops it).
    fn new(n: &mut Node) -> TailUpdate {
        let stale_from = n.chunks.delete_chunks_from;
        let kept = (n.chunks.existing().and_then(|c| c.tail.take()))
            .filter(|(idx, _)| stale_from.is_none_or(|f| *idx < f));
        TailUpdate {
            kept,
            keep_new: n.kind == Kind::File && n.writers > 0,
            size: n.size,
            chunk_size: n.chunk_size,
        }
    }

    /// Chunk `idx` (at byte `start`) is written whole as `data`; `patched` if it was
    /// changed in part (not replaced by writes covering it).
    fn written(&mut self, idx: u64, start: u64, data: &[u8], patched: bool) {
        let short_last =
            (data.len() as u64) < self.chunk_size && start + self.chunk_size >= self.size;
        if self.keep_new && (short_last || patched) {
            self.kept = Some((idx, data.to_vec()));
        } else if self.kept.as_ref().is_some_and(|(i, _)| *i == idx) {
            self.kept = None;
        }
    }

    /// An inline file's content is written as `data`.
    fn written_inline(&mut self, data: &[u8]) {
        self.kept = self.keep_new.then(|| (0, data.to_vec()));
    }

    /// Pages `pages` of chunk `idx` are written as patches, each its page of `data`,
    /// as `stored_chunk` lays a patch over its chunk.
    fn patched(&mut self, idx: u64, pages: u64, data: &[u8]) {
        let Some((_, bytes)) = self.kept.as_mut().filter(|(i, _)| *i == idx) else {
            return;
        };
        for p in pages_of(pages) {
            let a = (p as u64 * layout::PATCH_PAGE) as usize;
            let z = (a + layout::PATCH_PAGE as usize).min(data.len());
            put_page(bytes, p, &data[a..z]);
        }
    }
}

impl State {
    pub fn node(&self, ino: u64) -> Result<&Node, Errno> {
        self.nodes
            .get(&ino)
            .map(|n| &**n)
            .ok_or(Errno(libc::ENOENT))
    }

    pub fn node_mut(&mut self, ino: u64) -> Result<&mut Node, Errno> {
        self.nodes
            .get_mut(&ino)
            .map(|n| &mut **n)
            .ok_or(Errno(libc::ENOENT))
    }

    pub fn coll_name(&self, id: u32) -> Result<&str, Errno> {
        self.colls
            .get(&id)
            .map(|c| c.name.as_str())
            .ok_or(Errno(libc::ENOENT))
    }

    /// Whether collection `coll` holds any document in the engine. Its directory can
    /// look empty while it does: documents whose keys are no paths (binary keys such
    /// as the health history's in `.monitoring`) are not shown, nor are documents
    /// written through the engine API whose paths a directory or special file holds
    /// (or not taken in yet). Dropping such a collection for an `rmdir` would delete
    /// data the user never saw.
    pub fn holds_documents(&self, coll: &str) -> Result<bool, Errno> {
        let first = self
            .db
            .collection(coll)
            .and_then(|c| crate::document::documents(&c))
            .and_then(|scan| scan.keys().next().transpose());
        match first {
            Ok(k) => Ok(k.is_some()),
            Err(e) => Err(engine_err(coll, b"", &e)),
        }
    }

    pub fn alloc_ino(&mut self) -> u64 {
        let i = self.next_ino;
        self.next_ino += 1;
        i
    }

    /// A new inode id in mounted collection `coll` (0 when it is not mounted).
    pub fn alloc_fid(&mut self, coll: u32) -> u64 {
        match self.colls.get(&coll) {
            Some(c) => self.fids.take(c.engine_id, 1),
            None => 0,
        }
    }

    /// Path of a directory inside its collection (empty for the collection root).
    pub fn dir_path(&self, ino: u64) -> Result<Vec<u8>, Errno> {
        let mut parts: Vec<&OsStr> = Vec::new();
        let mut cur = ino;
        for _ in 0..4096 {
            let n = self.node(cur)?;
            let coll_root = self.colls.get(&n.coll).map(|c| c.root);
            if coll_root == Some(cur) {
                let mut out = Vec::new();
                for (i, p) in parts.iter().rev().enumerate() {
                    if i > 0 {
                        out.push(b'/');
                    }
                    out.extend_from_slice(p.as_bytes());
                }
                return Ok(out);
            }
            let (parent, name) = n.links.iter().next().ok_or(Errno(libc::ENOENT))?;
            parts.push(name);
            cur = *parent;
        }
        Err(Errno(libc::ELOOP))
    }

    /// Path of entry `name` in directory `parent`.
    pub fn child_path(&self, parent: u64, name: &OsStr) -> Result<Vec<u8>, Errno> {
        let mut p = self.dir_path(parent)?;
        if !p.is_empty() {
            p.push(b'/');
        }
        p.extend_from_slice(name.as_bytes());
        if p.len() + layout::NAME_PREFIX.len() > basalt_engine::MAX_KEY_LEN {
            return Err(Errno(libc::ENAMETOOLONG));
        }
        Ok(p)
    }

    /// Every path of an inode.
    pub fn paths(&self, ino: u64) -> Result<Vec<Vec<u8>>, Errno> {
        let n = self.node(ino)?;
        if self.colls.get(&n.coll).map(|c| c.root) == Some(ino) {
            return Ok(Vec::new());
        }
        n.links
            .iter()
            .map(|(p, name)| self.child_path(*p, name))
            .collect()
    }

    pub fn mark_dirty(&mut self, ino: u64) {
        self.dirty_nodes.insert(ino);
    }

    /// Adds the records describing `ino` (inode record; name records and documents
    /// when asked) to `batch`.
    pub fn put_inode(&self, b: &mut Batch, ino: u64, names: bool) -> Result<(), Errno> {
        let n = self.node(ino)?;
        let coll = self.coll_name(n.coll)?;
        b.put(coll, layout::inode_key(n.fid), n.record().encode());
        if names {
            if self.colls.get(&n.coll).map(|c| c.root) == Some(ino) {
                b.put(coll, layout::name_key(b""), n.fid.to_be_bytes().to_vec());
            }
            for path in self.paths(ino)? {
                b.put(coll, layout::name_key(&path), n.fid.to_be_bytes().to_vec());
            }
        }
        Ok(())
    }

    /// The current bytes of one chunk (or of an inline file): dirty ones from memory
    /// (with the stored bytes under the pages an unread chunk did not write), others
    /// from the engine.
    pub fn load_chunk(&self, ino: u64, idx: u64) -> Result<Vec<u8>, Errno> {
        let n = self.node(ino)?;
        match n.chunks.dirty.get(&idx) {
            Some(c) if c.unread => {
                let all = page_mask(0, c.data.len() as u64);
                if c.pages.unwrap_or(0) & all == all {
                    return Ok(c.data.clone()); // every page written: nothing to read
                }
                let mut data = self.stored_chunk(ino, idx)?;
                data.resize(c.data.len(), 0);
                for p in pages_of(c.pages.unwrap_or(0)) {
                    let a = (p as u64 * layout::PATCH_PAGE) as usize;
                    let z = (a + layout::PATCH_PAGE as usize).min(data.len());
                    data[a..z].copy_from_slice(&c.data[a..z]);
                }
                Ok(data)
            }
            Some(c) => Ok(c.data.clone()),
            None => self.stored_chunk(ino, idx),
        }
    }

    /// Makes an unread dirty chunk whole in memory (reads its stored bytes).
    pub fn fill_chunk(&mut self, ino: u64, idx: u64) -> Result<(), Errno> {
        if !self
            .node(ino)?
            .chunks
            .dirty
            .get(&idx)
            .is_some_and(|c| c.unread)
        {
            return Ok(());
        }
        let data = self.load_chunk(ino, idx)?;
        if let Some(c) = self.node_mut(ino)?.chunks.dirty.get_mut(&idx) {
            c.data = data;
            c.unread = false;
        }
        Ok(())
    }

    /// One chunk as stored (chunk record with its patches; inline document), ignoring
    /// dirty bytes.
    fn stored_chunk(&self, ino: u64, idx: u64) -> Result<Vec<u8>, Errno> {
        let n = self.node(ino)?;
        let key = self.chunk_location(ino, idx)?;
        let coll = self.coll_name(n.coll)?;
        let Some(k) = key else {
            return Ok(Vec::new());
        };
        if let Some((_, bytes)) = n.chunks.tail.as_ref().filter(|(i, _)| *i == idx) {
            ChunkIo::add(&self.chunk_io.tail_kept, 1);
            return Ok(bytes.clone());
        }
        ChunkIo::add(&self.chunk_io.read_back, 1);
        let mut data = match self.db.get(coll, &k) {
            Ok(v) => v.unwrap_or_default(),
            Err(e) => return Err(engine_err(coll, &k, &e)),
        };
        let mask = n.chunks.patches.get(&idx).copied().unwrap_or(0);
        if n.storage == Storage::Chunked && mask != 0 {
            let keys: Vec<Vec<u8>> = pages_of(mask)
                .map(|p| layout::patch_key(n.fid, idx, p))
                .collect();
            let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
            let got = self
                .db
                .multi_get(coll, &refs)
                .map_err(|e| engine_err(coll, &keys[0], &e))?;
            for (p, v) in pages_of(mask).zip(got) {
                put_page(&mut data, p, &v.unwrap_or_default());
            }
        }
        Ok(data)
    }

    /// Engine key holding chunk `idx` as stored (None: a hole or stale).
    pub fn chunk_location(&self, ino: u64, idx: u64) -> Result<Option<Vec<u8>>, Errno> {
        let n = self.node(ino)?;
        if idx * n.chunk_size >= n.size {
            return Ok(None);
        }
        match n.storage {
            Storage::Inline => {
                if idx > 0 || !n.has_doc {
                    return Ok(None);
                }
                let (p, name) = n.only_link().ok_or(Errno(libc::EIO))?;
                Ok(Some(self.child_path(*p, name)?))
            }
            Storage::Chunked => {
                if n.chunks.delete_chunks_from.is_some_and(|f| idx >= f) {
                    return Ok(None);
                }
                Ok(Some(layout::chunk_key(n.fid, idx)))
            }
        }
    }

    /// Switches a file to chunked storage (more than one link, unlinked while open,
    /// or larger than a chunk). Its content moves with the next flush.
    pub fn make_chunked(&mut self, ino: u64) -> Result<(), Errno> {
        let n = self.node(ino)?;
        if n.kind != Kind::File || n.storage == Storage::Chunked {
            return Ok(());
        }
        let data = if n.size > 0 {
            self.load_chunk(ino, 0)?
        } else {
            Vec::new()
        };
        let n = self.node_mut(ino)?;
        n.storage = Storage::Chunked;
        n.chunks.tail = None;
        n.no_chunks = false;
        n.docs_dirty = true;
        n.chunks.delete_chunks_from = Some(0);
        if !data.is_empty() || n.size > 0 {
            let len = data.len();
            n.chunks.dirty.insert(0, Chunk::whole(data));
            n.chunks.dirty_bytes += len;
        }
        n.meta_dirty = true;
        self.mark_dirty(ino);
        Ok(())
    }

    /// Writes a file's dirty data and attributes in one batch. The dirty chunks move
    /// into the batch without a copy; if the engine refuses it they stay dirty.
    pub fn flush_node(&mut self, ino: u64) -> Result<(), Errno> {
        let Some(n) = self.nodes.get(&ino) else {
            self.dirty_nodes.remove(&ino);
            return Ok(());
        };
        if !n.has_dirty_data() && !n.meta_dirty {
            self.dirty_nodes.remove(&ino);
            return Ok(());
        }
        if ino == ROOT_INO {
            // The mount root belongs to no collection: its record is a file of its own.
            let rec = n.record().encode();
            self.db
                .write_aux(layout::ROOT_AUX, &rec)
                .map_err(|e| engine_err("", b"", &e))?;
            self.node_mut(ino)?.meta_dirty = false;
            self.dirty_nodes.remove(&ino);
            return Ok(());
        }
        // Unread chunks that will be written whole need their stored bytes first.
        let fill: Vec<u64> = (n.chunks.dirty.iter())
            .filter(|&(&idx, c)| {
                c.unread && idx * n.chunk_size < n.size && n.patch_pages(idx, c).is_none()
            })
            .map(|(&idx, _)| idx)
            .collect();
        for idx in fill {
            self.fill_chunk(ino, idx)?;
        }
        let n = self.node(ino)?;
        let coll = self.coll_name(n.coll)?.to_string();
        let linked = !n.links.is_empty() || self.colls.get(&n.coll).map(|c| c.root) == Some(ino);
        let needs_record = linked || n.open > 0;
        // Everything that can fail comes first, while the chunks are still in the node.
        let mut b = Batch::default();
        if n.kind == Kind::File {
            if let Some(from) = n.chunks.delete_chunks_from {
                for k in self.stored_chunk_keys(&coll, n.fid, from)? {
                    b.delete(&coll, k);
                }
            }
        }
        let inline_path = match (n.kind, n.storage) {
            (Kind::File, Storage::Inline)
                if linked && (n.docs_dirty || !n.chunks.dirty.is_empty()) =>
            {
                let (p, name) = n.only_link().ok_or(Errno(libc::EIO))?;
                let path = self.child_path(*p, name)?;
                let base = match n.chunks.dirty.contains_key(&0) {
                    true => None,
                    false => Some(self.load_chunk(ino, 0)?),
                };
                Some((path, base))
            }
            _ => None,
        };
        let manifest_paths = match (n.kind, n.storage) {
            (Kind::File, Storage::Chunked) if n.docs_dirty => self.paths(ino)?,
            _ => Vec::new(),
        };
        if needs_record {
            self.put_inode(&mut b, ino, !n.persisted && linked)?;
        }
        let n = self.node_mut(ino)?;
        let (size, cs, fid) = (n.size, n.chunk_size, n.fid);
        let stale_from = n.chunks.delete_chunks_from;
        let mut dirty = (n.chunks.existing())
            .map(|c| std::mem::take(&mut c.dirty))
            .unwrap_or_default();
        // Patch bitmaps as they will be once the batch is written (0: no patches left).
        let mut patched: Vec<(u64, u64)> = Vec::new();
        let (mut whole, mut pages_written) = (0u64, 0u64);
        // The stored bytes of the chunk [`Node::tail`] keeps, as this batch leaves them.
        let mut tail = TailUpdate::new(n);
        if let Some((path, base)) = inline_path {
            let mut data = match base {
                Some(d) => d,
                None => dirty.remove(&0).map(|c| c.data).unwrap_or_default(),
            };
            data.resize(size as usize, 0);
            tail.written_inline(&data);
            b.put(&coll, path, data);
        } else if n.kind == Kind::File && n.storage == Storage::Chunked {
            for (idx, mut c) in std::mem::take(&mut dirty) {
                let start = idx * cs;
                if start >= size {
                    continue;
                }
                let had = n.chunks.patches.get(&idx).copied().unwrap_or(0);
                let patch = n.patch_pages(idx, &c);
                c.data.truncate((size - start).min(cs) as usize);
                match patch {
                    Some(pages) => {
                        let len = c.data.len() as u64;
                        for p in pages_of(pages) {
                            let a = p as u64 * layout::PATCH_PAGE;
                            let z = (a + layout::PATCH_PAGE).min(len);
                            let page = c.data[a as usize..z as usize].to_vec();
                            b.put(&coll, layout::patch_key(fid, idx, p), page);
                        }
                        patched.push((idx, had | pages));
                        pages_written += u64::from(pages.count_ones());
                        tail.patched(idx, pages, &c.data);
                        // Kept (not moved into the batch): restored if it is refused.
                        dirty.insert(idx, c);
                    }
                    None => {
                        debug_assert!(!c.unread, "filled before the flush");
                        for p in pages_of(had) {
                            b.delete(&coll, layout::patch_key(fid, idx, p));
                        }
                        if had != 0 {
                            patched.push((idx, 0));
                        }
                        tail.written(idx, start, &c.data, c.pages.is_some());
                        b.put(&coll, layout::chunk_key(fid, idx), c.data);
                        whole += 1;
                    }
                }
            }
            let m = Manifest {
                fid,
                chunk_size: cs as u32,
            }
            .encode();
            for path in manifest_paths {
                b.put(&coll, path, m.clone());
            }
        }
        let wb = b.into_write_batch();
        if let Err(err) = crate::external::own(self.mount_id, || self.db.write(&wb)) {
            let path = self.paths(ino).ok().and_then(|p| p.into_iter().next());
            let errno = engine_err(&coll, &path.unwrap_or_default(), &err);
            self.keep_unwritten(ino, wb, dirty);
            return Err(errno);
        }
        ChunkIo::add(&self.chunk_io.written_whole, whole);
        ChunkIo::add(&self.chunk_io.patch_pages, pages_written);
        let n = self.node_mut(ino)?;
        if let Some(kept) = tail.kept {
            n.chunks.tail = Some(kept); // `TailUpdate::new` took the old one
        }
        if let Some(from) = stale_from {
            n.chunks.patches.split_off(&from);
        }
        for (idx, mask) in patched {
            match mask {
                0 => n.chunks.patches.remove(&idx),
                m => n.chunks.patches.insert(idx, m),
            };
        }
        if let Some(c) = n.chunks.existing() {
            c.dirty_bytes = 0;
            c.delete_chunks_from = None;
        }
        n.chunks.shrink();
        n.docs_dirty = false;
        n.meta_dirty = false;
        if needs_record && linked {
            n.persisted = true;
        }
        if n.kind == Kind::File {
            n.has_doc = n.storage == Storage::Inline && linked;
        }
        self.dirty_nodes.remove(&ino);
        Ok(())
    }

    /// `lseek(SEEK_DATA)` / `lseek(SEEK_HOLE)` from `off`: a chunk that is stored,
    /// patched or dirty is data up to the file's size, a missing chunk a hole, an
    /// inline file all data, and the end of the file a hole. While a handle that can
    /// write is open the kernel may hold dirty pages and a larger size than this
    /// daemon knows (writeback cache), so then every offset is data and the first
    /// hole is at the known size (or `off` past it): a sparse-aware copy still reads
    /// everything. ENXIO for SEEK_DATA at or past the end, as ext4.
    pub fn seek_data_hole(&self, ino: u64, off: i64, whence: i32) -> Result<i64, Errno> {
        let n = self.node(ino)?;
        if n.kind != Kind::File || !matches!(whence, libc::SEEK_DATA | libc::SEEK_HOLE) {
            return Err(Errno(libc::EINVAL));
        }
        let off = u64::try_from(off).map_err(|_| Errno(libc::ENXIO))?;
        let data = whence == libc::SEEK_DATA;
        if n.writers > 0 {
            return Ok(if data { off } else { off.max(n.size) } as i64);
        }
        if off >= n.size {
            return Err(Errno(libc::ENXIO));
        }
        if n.storage == Storage::Inline {
            return Ok(if data { off } else { n.size } as i64);
        }
        // Chunks holding data from `off`'s on: stored (not truncated away), patched
        // or dirty, and starting before the end. Stored ones are read from the index
        // only as far as the answer needs.
        let (cs, first) = (n.chunk_size, off / n.chunk_size);
        let last = (n.size - 1) / cs;
        let coll = self.coll_name(n.coll)?;
        let stale = n.chunks.delete_chunks_from.unwrap_or(u64::MAX);
        let in_memory: BTreeSet<u64> = (n.chunks.patches.keys().copied())
            .filter(|&i| i < stale)
            .chain(n.chunks.dirty.keys().copied())
            .collect();
        let err = |e: basalt_engine::Error| engine_err(coll, &layout::chunk_key(n.fid, first), &e);
        let db_coll = self.db.collection(coll).map_err(err)?;
        let mut stored = crate::document::chunk_indices(&db_coll, n.fid, first)
            .map_err(err)?
            .filter(|i| i.as_ref().map_or(true, |&i| i < stale))
            .peekable();
        let at = if data {
            let next_stored = stored.next().transpose().map_err(err)?;
            let next_memory = in_memory.range(first..).next().copied();
            match next_stored.into_iter().chain(next_memory).min() {
                Some(i) if i == first => off,
                Some(i) if i <= last => i * cs,
                _ => return Err(Errno(libc::ENXIO)),
            }
        } else {
            let mut c = first;
            loop {
                if in_memory.contains(&c) {
                    c += 1;
                    continue;
                }
                match stored.next_if(|i| i.as_ref().map_or(true, |&i| i <= c)) {
                    Some(Err(e)) => return Err(err(e)),
                    Some(Ok(i)) if i == c => c += 1,
                    Some(Ok(_)) => {} // below c: already counted
                    None => break,
                }
            }
            (c.saturating_mul(cs)).clamp(off, n.size)
        };
        Ok(at as i64)
    }

    /// Keys of the stored chunks and patches of file `fid` from chunk `from` on.
    fn stored_chunk_keys(&self, coll: &str, fid: u64, from: u64) -> Result<Vec<Vec<u8>>, Errno> {
        let lo = layout::chunk_key(fid, from);
        self.db
            .collection(coll)
            .and_then(|c| crate::document::data_keys(&c, fid, from))
            .map_err(|e| engine_err(coll, &lo, &e))
    }

    /// After a refused flush: puts the file's data from the batch back into its dirty
    /// chunks (with those the batch did not need), so a later flush can retry.
    fn keep_unwritten(&mut self, ino: u64, wb: WriteBatch, mut dirty: BTreeMap<u64, Chunk>) {
        let Ok(n) = self.node(ino) else { return };
        let (fid, inline) = (n.fid, n.storage == Storage::Inline);
        for op in wb.into_ops() {
            if let BatchOp::Put { key, value, .. } = op {
                let idx = match inline {
                    true if !key.starts_with(b"\0") => Some(0),
                    true => None,
                    false => layout::chunk_index(&key, fid),
                };
                if let Some(idx) = idx {
                    dirty.entry(idx).or_insert(Chunk::whole(value));
                }
            }
        }
        if let Ok(n) = self.node_mut(ino) {
            n.chunks.dirty_bytes = dirty.values().map(|c| c.data.len()).sum();
            n.chunks.dirty = dirty;
        }
    }

    /// Flushes every node whose only change is to its attributes (mode, owner,
    /// times: `setattr` leaves them dirty), so that a sync makes every such change
    /// acknowledged before it durable, as it does every name.
    pub fn flush_attributes(&mut self) -> Result<(), Errno> {
        let inos: Vec<u64> = (self.dirty_nodes.iter().copied())
            .filter(|i| (self.nodes.get(i)).is_some_and(|n| n.meta_dirty && !n.has_dirty_data()))
            .collect();
        self.flush_each(inos)
    }

    /// Flushes every dirty inode; returns the first error.
    pub fn flush_all(&mut self) -> Result<(), Errno> {
        let inos: Vec<u64> = self.dirty_nodes.iter().copied().collect();
        self.flush_each(inos)
    }

    /// Flushes each of `inos`, going on past a failure; returns the first error.
    fn flush_each(&mut self, inos: Vec<u64>) -> Result<(), Errno> {
        let mut first = Ok(());
        for ino in inos {
            if let Err(e) = self.flush_node(ino) {
                first = first.and(Err(e));
            }
        }
        first
    }

    /// Deletes every record of an inode that no name refers to and no handle holds.
    pub fn purge_inode(&mut self, ino: u64, b: &mut Batch) -> Result<(), Errno> {
        self.node_mut(ino)?.drop_tail();
        let n = self.node(ino)?;
        let coll = self.coll_name(n.coll)?.to_string();
        b.delete(&coll, layout::inode_key(n.fid));
        if n.kind == Kind::File && !n.no_chunks {
            for k in self.stored_chunk_keys(&coll, n.fid, 0)? {
                b.delete(&coll, k);
            }
        }
        Ok(())
    }

    /// Drops an inode from memory once nothing refers to it.
    pub fn maybe_forget(&mut self, ino: u64) {
        if let Some(n) = self.nodes.get(&ino) {
            if n.nlink == 0 && n.lookups == 0 && n.open == 0 && n.links.is_empty() {
                self.nodes.remove(&ino);
                self.dirty_nodes.remove(&ino);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_keep_each_name_once_in_order_and_free_their_room_when_empty() {
        let name = |s: &str| OsString::from(s);
        let mut l = Links::default();
        assert!(l.insert((5, name("b"))));
        assert!(l.insert((2, name("z"))));
        assert!(l.insert((5, name("a"))));
        assert!(!l.insert((5, name("b"))), "a name already there");
        let all: Vec<_> = l.iter().cloned().collect();
        assert_eq!(all, [(2, name("z")), (5, name("a")), (5, name("b"))]);
        assert!(l.remove(&(5, name("a"))));
        assert!(!l.remove(&(5, name("a"))), "a name no longer there");
        assert_eq!(l.len(), 2);
        assert!(l.remove(&(2, name("z"))) && l.remove(&(5, name("b"))));
        assert!(l.is_empty());
        assert_eq!(
            l.0.capacity(),
            0,
            "an inode without names holds no allocation"
        );
        l.insert((1, name("x")));
        assert_eq!(l.0.capacity(), 1, "one name, room for one");
    }

    fn file(perm: u16) -> Node {
        Node::new(2, 1, 1, Kind::File, perm, SystemTime::UNIX_EPOCH)
    }

    /// Every inode is in memory: the parts only some inodes use (directory entries,
    /// extended attributes, symlink target, pending chunks) stay behind pointers.
    #[test]
    fn a_node_keeps_its_rarely_used_parts_behind_pointers() {
        let size = std::mem::size_of::<Node>();
        println!("Node: {size} bytes (352 before crate::lazy)");
        assert!(size <= 216, "Node grew to {size} bytes");
    }

    #[test]
    fn kill_priv_clears_setuid_and_group_executable_setgid_and_capabilities() {
        let mut n = file(0o6755);
        n.xattrs
            .insert(b"security.capability".to_vec(), vec![1; 20]);
        n.xattrs.insert(b"user.keep".to_vec(), b"v".to_vec());
        assert!(n.kill_priv(false));
        assert_eq!(n.perm, 0o755);
        assert!(n.meta_dirty && n.ctime > SystemTime::UNIX_EPOCH);
        assert_eq!(n.xattrs.len(), 1, "only security.capability goes");
        // Nothing left to clear: no change, ctime kept.
        let before = n.ctime;
        n.meta_dirty = false;
        assert!(!n.kill_priv(false));
        assert!(!n.meta_dirty && n.ctime == before);
    }

    #[test]
    fn kill_priv_keeps_setgid_without_group_execute_unless_told() {
        let mut n = file(0o6744);
        assert!(n.kill_priv(false));
        assert_eq!(n.perm, 0o2744, "setgid without g+x marks mandatory locking");
        assert!(n.kill_priv(true));
        assert_eq!(n.perm, 0o744);
    }
}

//! Builds the in-memory tree of a collection from its engine records at mount time.
//!
//! Sources, in order of authority: user documents (a document is a file whatever the
//! metadata says), name records, inode records. Documents written through the engine
//! API without metadata get default attributes; metadata whose document was deleted
//! through the engine API is dropped; inodes left with no name (unlinked while open
//! when the daemon died) are purged.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::ops::Bound;
use std::os::unix::ffi::OsStrExt;
use std::time::SystemTime;

use basalt_engine::{Collection, Direction};

use crate::layout::{self, InodeRecord, Kind, Manifest, Storage};
use crate::state::{Batch, Coll, Node, State};

/// Documents read together when telling manifests from small files at mount.
const MANIFEST_READ_BATCH: usize = 256;

/// Records of one collection read at mount: inode records by fid with the largest fid,
/// name records by path, documents with their length and manifest, and the keys of
/// chunk patches. Read from the engine, or from the tree snapshot of a clean unmount
/// (`crate::tree_snapshot`), which holds the same.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Records {
    pub recs: InodeRecords,
    pub max_fid: u64,
    pub names: BTreeMap<Vec<u8>, u64>,
    pub docs: Docs,
    pub patches: Vec<Vec<u8>>,
}

/// Inode records by fid. Boxed, so that building the tree can free each as it takes it
/// (the map's slots stay: 16 bytes each instead of a 160-byte record inline; 300,000
/// records took 84 MB of slots inline).
pub(crate) type InodeRecords = foldhash::HashMap<u64, Box<InodeRecord>>;

/// Documents by key: length, and the manifest when the document is one.
pub(crate) type Docs = BTreeMap<Vec<u8>, (u64, Option<Manifest>)>;

/// Reads the three kinds of records of collection `c`: inode and name records in one
/// pass that reads each block holding any of them once ([`ScanIter::gather`]: they lie
/// scattered through the log among small files' contents, and key-order scans of the
/// two kinds read most blocks twice), documents' lengths from the index meanwhile.
///
/// [`ScanIter::gather`]: basalt_engine::ScanIter::gather
pub(crate) fn read_records(c: &Collection, name: &str) -> Result<Records, basalt_engine::Error> {
    std::thread::scope(|s| {
        let docs = s.spawn(|| read_docs(c));
        let meta = read_metadata(c, name);
        let patches = read_patch_keys(c);
        let docs = docs
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        let (recs, max_fid, names) = meta?;
        Ok(Records {
            recs,
            max_fid,
            names,
            docs: docs?,
            patches: patches?,
        })
    })
}

/// The keys of chunk patches (a keys-only scan).
fn read_patch_keys(c: &Collection) -> Result<Vec<Vec<u8>>, basalt_engine::Error> {
    c.scan_prefix(layout::PATCH_PREFIX, Direction::Forward)?
        .keys()
        .map(|k| k.map(|k| k.to_vec()))
        .collect()
}

/// Inode records by fid with the largest fid seen (malformed records included), and
/// name records (path -> fid).
type Metadata = (InodeRecords, u64, BTreeMap<Vec<u8>, u64>);

/// Inode and name records, read together.
fn read_metadata(c: &Collection, name: &str) -> Result<Metadata, basalt_engine::Error> {
    debug_assert!(layout::INODE_PREFIX < layout::NAME_PREFIX);
    let past_names =
        basalt_engine::prefix_successor(layout::NAME_PREFIX).expect("a prefix without 0xff");
    let records = c
        .scan(
            Bound::Included(layout::INODE_PREFIX),
            Bound::Excluded(&past_names),
            Direction::Forward,
        )?
        .gather()?;
    let mut recs = InodeRecords::default();
    let mut max_fid = 0u64;
    let mut names = BTreeMap::new();
    for (k, v) in records {
        if let Some(path) = k.strip_prefix(layout::NAME_PREFIX) {
            if let Ok(b) = <[u8; 8]>::try_from(v.as_slice()) {
                names.insert(path.to_vec(), u64::from_be_bytes(b));
            }
            continue;
        }
        let Some(fid) = layout::inode_key_fid(&k) else {
            continue;
        };
        max_fid = max_fid.max(fid);
        match InodeRecord::decode(&v) {
            Some(r) => {
                recs.insert(fid, Box::new(r));
            }
            None => eprintln!("basalt-fusefs: {name}: ignoring malformed inode record {fid}"),
        }
    }
    Ok((recs, max_fid, names))
}

/// Documents: length, and the manifest when the document is one. Lengths come from the
/// index, so mounting reads no file's data; only documents of a manifest's length are
/// read, to tell manifests from small files.
fn read_docs(c: &Collection) -> Result<Docs, basalt_engine::Error> {
    let mut docs = Docs::new();
    let mut maybe_manifests = Vec::new();
    for item in crate::document::documents(c)?.keys_with_lens() {
        let (k, len) = item?;
        if len == layout::MANIFEST_LEN as u64 {
            maybe_manifests.push(k.clone());
        }
        docs.insert(k, (len, None));
    }
    for keys in maybe_manifests.chunks(MANIFEST_READ_BATCH) {
        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        for (k, v) in keys.iter().zip(c.multi_get(&refs)?) {
            if let (Some(doc), Some(v)) = (docs.get_mut(k), v) {
                doc.1 = Manifest::decode(&v);
            }
        }
    }
    Ok(docs)
}

/// Documents whose keys have no file path form (an empty component, `.` or `..`, a
/// component over 255 bytes, a NUL byte: e.g. the binary keys of the health history),
/// counted so that a collection of many logs one line, not one per document.
#[derive(Default)]
struct Pathless {
    count: u64,
    first: Option<Vec<u8>>,
}

impl Pathless {
    fn add(&mut self, key: &[u8]) {
        self.count += 1;
        self.first.get_or_insert_with(|| key.to_vec());
    }

    fn report(&self, collection: &str) {
        if let Some(first) = &self.first {
            eprintln!(
                "basalt-fusefs: {collection}: {} document(s) have keys that are no file \
                 paths (first: {:?}); not shown as files (the engine API reads them)",
                self.count,
                String::from_utf8_lossy(first)
            );
        }
    }
}

/// Loads collection `name` into the state from its engine records; returns its root
/// directory inode.
pub fn load_collection(st: &mut State, name: &str) -> Result<u64, basalt_engine::Error> {
    let c = st.db.collection(name)?;
    let records = read_records(&c, name)?;
    build_collection(st, &c, records)
}

/// Builds collection `c` in the state from its records (see [`load_collection`]);
/// records that describe nothing (names of deleted documents, orphan inodes, unusable
/// patches) are deleted.
pub(crate) fn build_collection(
    st: &mut State,
    c: &Collection,
    records: Records,
) -> Result<u64, basalt_engine::Error> {
    let name = c.name();
    let now = SystemTime::now();
    let Records {
        mut recs,
        max_fid,
        names,
        mut docs,
        patches,
    } = records;
    // Each record is taken out of `recs` (and freed) when its inode is built, and each
    // name as it is linked, so that records and tree are not all in memory at once.
    // Room for every inode at once: each growth of the map rehashes every slot (with
    // nodes inline, 63k entries mounted about 5% sooner). A file has both an inode
    // record and a document, so their sum would count it twice and double the map
    // (1M slots for 300k files); each alone counts every file either way (the engine
    // API writes documents only).
    st.nodes.reserve(recs.len().max(docs.len()));

    let coll_id = st.next_coll;
    st.next_coll += 1;
    let root_ino = st.alloc_ino();
    let root_fid = names.get(&b""[..]).copied();
    let root_rec = root_fid.filter(|f| recs.get(f).is_some_and(|r| r.kind == Kind::Dir));
    let mut root = match root_rec.and_then(|f| recs.remove(&f).map(|r| (f, r))) {
        Some((fid, r)) => Node::from_record(root_ino, coll_id, fid, &r),
        None => {
            let mut n = Node::new(root_ino, coll_id, 0, Kind::Dir, 0o755, now);
            n.fid = u64::MAX; // assigned below once max_fid is known
            n
        }
    };
    root.nlink = 2;
    st.nodes.insert(root_ino, Box::new(root));
    st.colls.insert(
        coll_id,
        Coll {
            name: name.to_string(),
            root: root_ino,
            engine_id: c.id(),
        },
    );
    st.fids.reserve_below(c.id(), max_fid + 1);
    st.coll_by_name.insert(name.to_string(), coll_id);
    if st.nodes[&root_ino].fid == u64::MAX {
        let fid = st.alloc_fid(coll_id);
        if let Some(n) = st.nodes.get_mut(&root_ino) {
            n.fid = fid;
        }
    }

    // Inodes built from records, by fid, with what of the record is still needed
    // once it is freed.
    let mut built: foldhash::HashMap<u64, Built> = Default::default();
    let root_node = &st.nodes[&root_ino];
    built.insert(
        root_node.fid,
        Built {
            ino: root_ino,
            kind: Kind::Dir,
            storage: Storage::Inline,
            nlink: root_node.nlink,
        },
    );
    let mut cleanup = Batch::default();

    // Named inodes first (sorted: parents before children).
    for (path, fid) in names {
        if path.is_empty() {
            continue;
        }
        let Some(parts) = layout::split_path(&path) else {
            cleanup.delete(name, layout::name_key(&path));
            continue;
        };
        // The record, or what is left of it once an earlier name built its inode.
        let (kind, rec_storage, rec_nlink, rec_size) = match (recs.get(&fid), built.get(&fid)) {
            (Some(r), _) => (r.kind, r.storage, r.nlink, r.size),
            (None, Some(b)) => (b.kind, b.storage, b.nlink, 0),
            (None, None) => {
                cleanup.delete(name, layout::name_key(&path));
                continue;
            }
        };
        let mut size = rec_size;
        let mut storage = rec_storage;
        if kind == Kind::File {
            match docs.remove(&path) {
                None => {
                    // Document deleted through the engine API: the file is gone.
                    cleanup.delete(name, layout::name_key(&path));
                    continue;
                }
                Some((len, m)) => match (rec_storage, m) {
                    (Storage::Chunked, Some(m)) if m.fid == fid => {}
                    (Storage::Inline, None) => size = len,
                    _ => {
                        // The document was replaced through the engine API.
                        cleanup.delete(name, layout::name_key(&path));
                        docs.insert(path, (len, m));
                        continue;
                    }
                },
            }
            if storage == Storage::Inline && rec_nlink > 1 {
                storage = Storage::Chunked;
            }
        }
        let Some(parent) = ensure_dirs(st, coll_id, root_ino, &parts[..parts.len() - 1], now)
        else {
            continue;
        };
        let leaf = OsStr::from_bytes(parts[parts.len() - 1]).to_os_string();
        if st.nodes[&parent].children.contains_key(&leaf) {
            continue;
        }
        let ino = match built.get(&fid) {
            Some(b) if kind != Kind::Dir => b.ino,
            Some(_) => continue,
            None => {
                let Some(rec) = recs.remove(&fid) else {
                    continue;
                };
                let ino = build_node(st, &mut built, coll_id, fid, rec);
                let n = st.nodes.get_mut(&ino).expect("just built");
                n.size = size;
                n.storage = storage;
                n.nlink = if kind == Kind::Dir { 2 } else { 0 };
                n.has_doc = kind == Kind::File && storage == Storage::Inline;
                ino
            }
        };
        link_child(st, parent, leaf, ino);
    }

    // Documents without name records: files written through the engine API.
    let mut pathless = Pathless::default();
    for (path, (len, m)) in docs {
        let Some(parts) = layout::split_path(&path) else {
            pathless.add(&path);
            continue;
        };
        let Some(parent) = ensure_dirs(st, coll_id, root_ino, &parts[..parts.len() - 1], now)
        else {
            continue;
        };
        let leaf = OsStr::from_bytes(parts[parts.len() - 1]).to_os_string();
        if st.nodes[&parent].children.contains_key(&leaf) {
            eprintln!(
                "basalt-fusefs: {name}: document {:?} conflicts with a directory; not shown",
                String::from_utf8_lossy(&path)
            );
            continue;
        }
        let linked = m.and_then(|m| built.get(&m.fid).map(|b| (m, b.ino)));
        let rec = m.and_then(|m| {
            let file = recs.get(&m.fid).is_some_and(|r| r.kind == Kind::File);
            file.then(|| recs.remove(&m.fid)).flatten()
        });
        let ino = match (m, linked, rec) {
            (_, Some((_, ino)), _) => ino,
            (Some(m), None, Some(rec)) => {
                let ino = build_node(st, &mut built, coll_id, m.fid, rec);
                let n = st.nodes.get_mut(&ino).expect("just built");
                n.nlink = 0;
                n.persisted = false;
                ino
            }
            _ => {
                let ino = st.alloc_ino();
                let fid = st.alloc_fid(coll_id);
                let mut n = Node::for_document(ino, coll_id, fid, len, now);
                inherit_from(st, parent, &mut n);
                st.nodes.insert(ino, Box::new(n));
                ino
            }
        };
        link_child(st, parent, leaf, ino);
        // A name added here is not in the engine yet: persist it with the next flush.
        if let Some(n) = st.nodes.get_mut(&ino) {
            if n.persisted && n.nlink as usize != n.links.len() {
                n.meta_dirty = true;
            }
        }
    }

    pathless.report(name);

    // Link counts follow the names found; fix records that disagree.
    for b in built.values() {
        let Some(n) = st.nodes.get_mut(&b.ino) else {
            continue;
        };
        if n.kind != Kind::Dir {
            let links = n.links.len() as u32;
            if b.nlink != links && n.persisted {
                n.nlink = links;
                n.meta_dirty = true;
            }
            n.nlink = links;
            if n.meta_dirty {
                st.dirty_nodes.insert(b.ino);
            }
        }
    }
    // Patches of chunks: which pages of which stored chunks are newer. One that no
    // loaded chunked file can use (its inode is an orphan, or the file is inline
    // now) is deleted.
    for k in patches {
        let node = layout::patch_location(&k).and_then(|(fid, idx, page)| {
            let n = st.nodes.get_mut(&built.get(&fid)?.ino)?;
            let pages = n.chunk_size.div_ceil(layout::PATCH_PAGE);
            let usable = n.kind == Kind::File
                && n.storage == Storage::Chunked
                && crate::state::patchable(n.chunk_size);
            (usable && u64::from(page) < pages).then_some((n, idx, page))
        });
        match node {
            Some((n, idx, page)) => *n.chunks.patches.entry(idx).or_default() |= 1 << page,
            None => cleanup.delete(name, k),
        }
    }
    // Inodes no name refers to (the records not taken): unlinked while open when the
    // daemon stopped.
    for (fid, r) in &recs {
        if Some(*fid) != root_fid {
            cleanup.delete(name, layout::inode_key(*fid));
            if r.kind == Kind::File {
                for k in crate::document::data_keys(c, *fid, 0)? {
                    cleanup.delete(name, k);
                }
            }
        }
    }
    if !cleanup.is_empty() {
        cleanup.commit(st)?;
    }
    Ok(root_ino)
}

/// What building the tree keeps of an inode record once its inode is built (the
/// record itself is freed): for more names of the same inode and the link count check.
struct Built {
    ino: u64,
    kind: Kind,
    storage: Storage,
    nlink: u32,
}

/// Builds the inode of record `rec` (consumed) with a new inode number, and notes it
/// in `built`.
fn build_node(
    st: &mut State,
    built: &mut foldhash::HashMap<u64, Built>,
    coll: u32,
    fid: u64,
    rec: Box<InodeRecord>,
) -> u64 {
    let ino = st.alloc_ino();
    let n = Node::from_record(ino, coll, fid, &rec);
    built.insert(
        fid,
        Built {
            ino,
            kind: rec.kind,
            storage: rec.storage,
            nlink: rec.nlink,
        },
    );
    st.nodes.insert(ino, Box::new(n));
    ino
}

/// Makes sure the directories of `parts` exist under `root`; returns the last one.
fn ensure_dirs(
    st: &mut State,
    coll: u32,
    root: u64,
    parts: &[&[u8]],
    now: SystemTime,
) -> Option<u64> {
    ensure_dirs_noting(st, coll, root, parts, now).map(|(dir, _)| dir)
}

/// [`ensure_dirs`], also returning where the first directory it created went (its
/// parent and name), if it created one.
pub(crate) fn ensure_dirs_noting(
    st: &mut State,
    coll: u32,
    root: u64,
    parts: &[&[u8]],
    now: SystemTime,
) -> Option<(u64, Option<(u64, OsString)>)> {
    let mut first_new = None;
    let mut cur = root;
    for p in parts {
        let name = OsStr::from_bytes(p);
        match st.nodes[&cur].children.get(name) {
            Some(&ino) => {
                if !st.nodes[&ino].is_dir() {
                    return None;
                }
                cur = ino;
            }
            None => {
                let ino = st.alloc_ino();
                let fid = st.alloc_fid(coll);
                let mut n = Node::new(ino, coll, fid, Kind::Dir, 0o755, now);
                n.nlink = 2;
                inherit_from(st, cur, &mut n);
                st.nodes.insert(ino, Box::new(n));
                link_child(st, cur, name.to_os_string(), ino);
                first_new.get_or_insert_with(|| (cur, name.to_os_string()));
                cur = ino;
            }
        }
    }
    Some((cur, first_new))
}

/// What new node `n` takes from directory `parent`, whether created through the mount
/// or made for what the engine API wrote (a document without metadata, or a directory
/// its path implies, as if root had created it there): the group of a set-group-ID
/// directory (and, for a directory, the bit), and, but for a symlink, the directory's
/// default ACL as its ACLs, within its permission bits.
pub(crate) fn inherit_from(st: &State, parent: u64, n: &mut Node) {
    let Some(p) = st.nodes.get(&parent) else {
        return;
    };
    if p.perm & libc::S_ISGID as u16 != 0 {
        n.gid = p.gid;
        if n.is_dir() {
            n.perm |= libc::S_ISGID as u16;
        }
    }
    let default = p.xattrs.get(crate::acl::DEFAULT);
    if let Some(default) = default.filter(|_| n.kind != Kind::Symlink) {
        let bits = crate::acl::inherit(default, n.perm & 0o777, n);
        n.perm = (n.perm & !0o777) | bits;
    }
}

/// Adds entry `name` -> `ino` to directory `parent` and updates link counts.
pub fn link_child(st: &mut State, parent: u64, name: OsString, ino: u64) {
    let is_dir = st.nodes.get(&ino).is_some_and(|n| n.is_dir());
    if let Some(n) = st.nodes.get_mut(&ino) {
        n.links.insert((parent, name.clone()));
        n.nlink = if is_dir {
            2 + n.subdirs
        } else {
            n.links.len() as u32
        };
    }
    if let Some(p) = st.nodes.get_mut(&parent) {
        p.children.insert(name, ino);
        if is_dir {
            p.subdirs += 1;
            p.nlink = 2 + p.subdirs;
        }
    }
}

/// Removes entry `name` from directory `parent` and updates link counts.
pub fn unlink_child(st: &mut State, parent: u64, name: &OsStr) -> Option<u64> {
    let ino = st.nodes.get_mut(&parent)?.children.remove(name)?;
    let is_dir = st.nodes.get(&ino).is_some_and(|n| n.is_dir());
    if let Some(n) = st.nodes.get_mut(&ino) {
        n.links.remove(&(parent, name.to_os_string()));
        if is_dir {
            n.nlink = 0;
        } else {
            n.nlink = n.links.len() as u32;
        }
    }
    if is_dir {
        if let Some(p) = st.nodes.get_mut(&parent) {
            p.subdirs = p.subdirs.saturating_sub(1);
            p.nlink = 2 + p.subdirs;
        }
    }
    Some(ino)
}

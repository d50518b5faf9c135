//! Documents written through the engine API while mounted, by code in the same process
//! (the engine is locked to one process): an engine write observer queues their keys,
//! the tree takes them in the next time the state lock is taken (by any request, or
//! by the flusher within its interval), and the kernel is told to forget what it
//! cached of the names and files concerned.
//!
//! The tree follows the engine's current document, not the queued write, so the order
//! in which writes are taken in does not matter and taking one in twice changes
//! nothing. A new document is a new file (0644, root, directories implied by its path,
//! as at mount in `load`; a directory's default ACL and set-group-ID bit apply as to
//! what root creates there). A replaced document is a new file too, which takes the name
//! from the old inode as a rename over it would: under the writeback cache the kernel
//! keeps a cached file's size itself and would not take a new one from this
//! filesystem, so the new content needs a new inode number. A file with unflushed
//! writes keeps them instead: its flush rewrites the document, as if the engine write
//! had come first. A deleted document is an unlinked file (an open one lives until
//! closed). A document whose path a directory, symlink or special file holds is not
//! shown.

use std::cell::Cell;
use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use basalt_engine::{CollId, WriteObserver, Written};

use crate::layout::{self, Kind, Manifest, Storage};
use crate::load::{ensure_dirs_noting, inherit_from, link_child};
use crate::state::{Batch, Errno, Node, State};

thread_local! {
    /// The mount (its [`External::id`]) whose write this thread commits, 0 for none.
    static MOUNT_WRITE: Cell<u64> = const { Cell::new(0) };
}

/// Ids of mounts in this process (0 is none).
static NEXT_MOUNT: AtomicU64 = AtomicU64::new(1);

/// Runs `f`, a write of mount `mount`'s own, so that its observer ignores it (and
/// another mount of the engine in this process takes it in).
pub fn own<T>(mount: u64, f: impl FnOnce() -> T) -> T {
    let was = MOUNT_WRITE.with(|c| c.replace(mount));
    let r = f();
    MOUNT_WRITE.with(|c| c.set(was));
    r
}

/// Keys written from outside one mount, not taken in yet: (engine collection id,
/// document key). By id, since the collection may be renamed before they are.
pub type Keys = BTreeSet<(CollId, Vec<u8>)>;

/// The keys written from outside one mount and not taken in yet.
pub struct External {
    /// The mount's id, as its commits are marked with [`own`].
    pub id: u64,
    pending: Mutex<Keys>,
    any: AtomicBool,
}

impl Default for External {
    fn default() -> Self {
        External {
            id: NEXT_MOUNT.fetch_add(1, Ordering::Relaxed),
            pending: Mutex::default(),
            any: AtomicBool::default(),
        }
    }
}

impl External {
    /// The engine write observer that fills this queue.
    pub fn observer(self: &Arc<Self>) -> WriteObserver {
        let me = self.clone();
        Arc::new(move |ws: &[Written<'_>]| me.heard(ws))
    }

    fn heard(&self, ws: &[Written<'_>]) {
        if MOUNT_WRITE.with(Cell::get) == self.id {
            return;
        }
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        for w in ws.iter().filter(|w| !layout::is_internal_key(w.key)) {
            p.insert((w.collection_id, w.key.to_vec()));
        }
        if !p.is_empty() {
            self.any.store(true, Ordering::SeqCst);
        }
    }

    /// Whether keys are queued.
    pub fn pending(&self) -> bool {
        self.any.load(Ordering::SeqCst)
    }

    /// The queued keys, if any (one atomic load when there are none).
    pub fn take(&self) -> Option<Keys> {
        if !self.any.load(Ordering::SeqCst) {
            return None;
        }
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        self.any.store(false, Ordering::SeqCst);
        Some(std::mem::take(&mut *p))
    }
}

/// What the kernel must forget after the tree changed under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Forget {
    /// A name appeared in a directory (a cached negative entry would hide it).
    Entry { parent: u64, name: OsString },
    /// A name went away from a directory.
    Deleted {
        parent: u64,
        child: u64,
        name: OsString,
    },
    /// An inode's attributes and cached pages.
    Inode(u64),
}

/// A document as the engine has it now: its length, and the manifest when it is one.
type Stored = Option<(u64, Option<Manifest>)>;

impl State {
    /// Takes in documents written through the engine API (see the module docs);
    /// returns what the kernel must forget. Failures are logged and skip the key.
    pub fn take_in(&mut self, keys: Keys) -> Vec<Forget> {
        let mut out = Vec::new();
        // A collection the mount does not have was dropped (its documents are gone
        // with it) or is loaded whole by `take_in_catalog`.
        let mounted: std::collections::HashMap<CollId, (u32, String)> = self
            .colls
            .iter()
            .map(|(&cid, c)| (c.engine_id, (cid, c.name.clone())))
            .collect();
        for (engine_id, key) in keys {
            let Some((cid, coll)) = mounted.get(&engine_id) else {
                continue;
            };
            if let Err(Errno(e)) = self.take_in_one(*cid, coll, &key, &mut out) {
                eprintln!(
                    "basalt-fusefs: cannot show {coll}/{} written through the engine API: {}",
                    String::from_utf8_lossy(&key),
                    std::io::Error::from_raw_os_error(e)
                );
            }
        }
        out
    }

    fn take_in_one(
        &mut self,
        cid: u32,
        coll: &str,
        key: &[u8],
        out: &mut Vec<Forget>,
    ) -> Result<(), Errno> {
        let Some(parts) = layout::split_path(key) else {
            return Ok(()); // no path form: never shown (see `load`)
        };
        let root = self.colls[&cid].root;
        let (dirs, leaf) = parts.split_at(parts.len() - 1);
        let leaf = OsStr::from_bytes(leaf[0]).to_os_string();
        // The node at the path now, with its directory.
        let at = self
            .find_dir(root, dirs)
            .and_then(|p| Some((p, *self.nodes[&p].children.get(&leaf)?)));
        match (self.stored_document(coll, key)?, at) {
            (None, Some((parent, ino))) if self.node(ino)?.kind == Kind::File => {
                self.remove_external(parent, &leaf, ino, None, out)
            }
            (None, _) => Ok(()),
            (Some((len, m)), None) => self.add_external(cid, root, dirs, leaf, len, m, out),
            (Some((len, m)), Some((parent, ino))) => {
                let n = self.node(ino)?;
                if n.kind != Kind::File {
                    eprintln!(
                        "basalt-fusefs: {coll}: document {:?} conflicts with a {:?}; not shown",
                        String::from_utf8_lossy(key),
                        n.kind
                    );
                    return Ok(());
                }
                if n.has_dirty_data() {
                    // Unflushed writes win: the flush rewrites the document. What it
                    // reads back of the stored document is the engine's new one.
                    let n = self.node_mut(ino)?;
                    n.docs_dirty = true;
                    n.drop_tail();
                    self.mark_dirty(ino);
                    return Ok(());
                }
                if n.storage == Storage::Chunked && m.is_some_and(|m| m.fid == n.fid) {
                    return Ok(()); // the file's own manifest
                }
                // A new file takes the name; the old inode loses it.
                self.remove_external(parent, &leaf, ino, Some((coll, key)), out)?;
                self.add_external(cid, root, dirs, leaf, len, m, out)
            }
        }
    }

    /// The directory at `dirs` below `root`, if every part exists and is a directory.
    fn find_dir(&self, root: u64, dirs: &[&[u8]]) -> Option<u64> {
        let mut cur = root;
        for d in dirs {
            cur = *self.nodes.get(&cur)?.children.get(OsStr::from_bytes(d))?;
            if !self.nodes.get(&cur)?.is_dir() {
                return None;
            }
        }
        Some(cur)
    }

    fn stored_document(&self, coll: &str, key: &[u8]) -> Result<Stored, Errno> {
        let err = |e: basalt_engine::Error| crate::state::engine_err(coll, key, &e);
        let c = self.db.collection(coll).map_err(err)?;
        let found = c
            .scan(
                std::ops::Bound::Included(key),
                std::ops::Bound::Included(key),
                basalt_engine::Direction::Forward,
            )
            .map_err(err)?
            .keys_with_lens()
            .next()
            .transpose()
            .map_err(err)?;
        let Some((_, len)) = found else {
            return Ok(None);
        };
        let manifest = if len == layout::MANIFEST_LEN as u64 {
            c.get(key).map_err(err)?.and_then(|v| Manifest::decode(&v))
        } else {
            None
        };
        Ok(Some((len, manifest)))
    }

    /// Removes name `leaf` of `parent` (inode `ino`) as an unlink would; with `keep`,
    /// the document at that key stays (a new file has taken the name).
    fn remove_external(
        &mut self,
        parent: u64,
        leaf: &OsStr,
        ino: u64,
        keep: Option<(&str, &[u8])>,
        out: &mut Vec<Forget>,
    ) -> Result<(), Errno> {
        let mut b = Batch::default();
        self.remove_entry(parent, leaf, Some(false), &mut b)?;
        if let Some((coll, key)) = keep {
            b.forget(coll, key);
        }
        let coll = self.coll_name(self.node(parent)?.coll)?.to_string();
        b.commit(self)
            .map_err(|e| crate::state::engine_err(&coll, b"", &e))?;
        self.maybe_forget(ino);
        out.push(Forget::Deleted {
            parent,
            child: ino,
            name: leaf.to_os_string(),
        });
        out.push(Forget::Inode(ino));
        // The kernel may list the name from its cached listing without a dentry for
        // it, which the deletion alone would not reset.
        out.push(Forget::Inode(parent));
        Ok(())
    }

    /// Adds the file of a document at `dirs/leaf`, with the directories its path implies.
    #[allow(clippy::too_many_arguments)]
    fn add_external(
        &mut self,
        cid: u32,
        root: u64,
        dirs: &[&[u8]],
        leaf: OsString,
        len: u64,
        m: Option<Manifest>,
        out: &mut Vec<Forget>,
    ) -> Result<(), Errno> {
        let now = SystemTime::now();
        let Some((parent, first_new)) = ensure_dirs_noting(self, cid, root, dirs, now) else {
            return Ok(()); // a file is in the way: not shown, as at mount
        };
        // The first directory created is the name that appears to the kernel.
        if let Some((dir, name)) = first_new {
            out.push(Forget::Entry { parent: dir, name });
            out.push(Forget::Inode(dir));
        }
        let ino = self.alloc_ino();
        let stored = m.and_then(|m| Some((m.fid, self.take_stored_inode(cid, m.fid)?)));
        let node = match stored {
            // Written with `write_document` (a manifest, its inode record and chunks).
            Some((fid, rec)) => Node::from_record(ino, cid, fid, &rec),
            None => {
                let fid = self.alloc_fid(cid);
                let mut n = Node::for_document(ino, cid, fid, len, now);
                inherit_from(self, parent, &mut n);
                n
            }
        };
        self.nodes.insert(ino, Box::new(node));
        link_child(self, parent, leaf.clone(), ino);
        out.push(Forget::Entry { parent, name: leaf });
        out.push(Forget::Inode(parent));
        Ok(())
    }

    /// The stored inode record of regular file `fid` in collection `cid`, unless a
    /// node of the tree has that id. `write_document` takes ids from the allocator the
    /// mount uses, so a new document's id is no node's; an id a node holds is a
    /// manifest not written by either, and the document gets a file of its own.
    fn take_stored_inode(&mut self, cid: u32, fid: u64) -> Option<layout::InodeRecord> {
        if self.nodes.values().any(|n| n.coll == cid && n.fid == fid) {
            return None;
        }
        let c = self.colls.get(&cid)?;
        let v = self.db.get(&c.name, &layout::inode_key(fid)).ok()??;
        let rec = layout::InodeRecord::decode(&v).filter(|r| r.kind == Kind::File)?;
        self.fids.reserve_below(c.engine_id, fid + 1);
        Some(rec)
    }
}

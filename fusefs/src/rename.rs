//! Renames inside a collection, each one engine batch: a plain rename (replacing the
//! target, or refusing to with `RENAME_NOREPLACE`) and `RENAME_EXCHANGE`, which swaps
//! two entries. The name record and the document of every inode under a moved entry
//! go to their new paths, since documents are keyed by path.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::time::SystemTime;

use crate::layout::{self, Kind, Manifest, Storage};
use crate::load::{link_child, unlink_child};
use crate::state::{engine_err, Batch, Errno, State, ROOT_INO};

fn e(code: i32) -> Errno {
    Errno(code)
}

/// Records of moved entries: the keys at their old paths and the records at the new.
#[derive(Default)]
struct Moves {
    deletes: Vec<Vec<u8>>,
    puts: Vec<(Vec<u8>, Vec<u8>)>,
    inodes: Vec<u64>,
}

impl Moves {
    /// All deletes before all puts: of two entries swapping paths, each one's new
    /// records land where the other's old ones are deleted.
    fn into_batch(self, coll: &str, b: &mut Batch) -> Vec<u64> {
        for k in self.deletes {
            b.delete(coll, k);
        }
        for (k, v) in self.puts {
            b.put(coll, k, v);
        }
        self.inodes
    }
}

impl State {
    /// The entry `name` of directory `parent`.
    fn entry_of(&self, parent: u64, name: &OsStr) -> Result<u64, Errno> {
        self.dir(parent)?
            .children
            .get(name)
            .copied()
            .ok_or(e(libc::ENOENT))
    }

    /// Whether `ino` is directory `dir` or lies inside it.
    fn within(&self, mut ino: u64, dir: u64) -> Result<bool, Errno> {
        for _ in 0..4096 {
            if ino == dir {
                return Ok(true);
            }
            let Some((p, _)) = self.node(ino)?.links.iter().next() else {
                return Ok(false);
            };
            ino = *p;
        }
        Ok(false)
    }

    /// Adds to `out` the records of `top` and everything under it, moving from path
    /// `from` to path `to`.
    fn moves(
        &self,
        coll: &str,
        top: u64,
        from: &[u8],
        to: &[u8],
        out: &mut Moves,
    ) -> Result<(), Errno> {
        let handle = self
            .db
            .collection(coll)
            .map_err(|err| engine_err(coll, from, &err))?;
        let mut stack = vec![(top, from.to_vec())];
        while let Some((ino, old)) = stack.pop() {
            let n = self.node(ino)?;
            for (cname, &c) in n.children.iter() {
                let mut cp = old.clone();
                cp.push(b'/');
                cp.extend_from_slice(cname.as_bytes());
                stack.push((c, cp));
            }
            let mut new = to.to_vec();
            new.extend_from_slice(&old[from.len()..]);
            if new.len() + 2 > basalt_engine::MAX_KEY_LEN {
                return Err(e(libc::ENAMETOOLONG));
            }
            out.deletes.push(layout::name_key(&old));
            out.puts
                .push((layout::name_key(&new), n.fid.to_be_bytes().to_vec()));
            if n.kind == Kind::File {
                let doc = match n.storage {
                    Storage::Chunked => Manifest {
                        fid: n.fid,
                        chunk_size: n.chunk_size as u32,
                    }
                    .encode(),
                    Storage::Inline if n.has_doc => handle
                        .get(&old)
                        .map_err(|err| engine_err(coll, &old, &err))?
                        .unwrap_or_default(),
                    Storage::Inline => Vec::new(),
                };
                out.deletes.push(old);
                out.puts.push((new, doc));
            }
            out.inodes.push(ino);
        }
        Ok(())
    }

    /// Stores a move already made in memory: times, the records of the moved inodes
    /// and of both directories, in batch `b`. On failure `undo` puts the tree back
    /// and the error names `path`.
    #[allow(clippy::too_many_arguments)]
    fn commit_move(
        &mut self,
        mut b: Batch,
        coll: &str,
        path: &[u8],
        moved: &[u64],
        tops: &[u64],
        dirs: [u64; 2],
        undo: impl FnOnce(&mut State),
    ) -> Result<(), Errno> {
        let now = SystemTime::now();
        for &t in tops {
            self.node_mut(t)?.ctime = now;
        }
        for d in dirs {
            self.touch_dir(d, now);
        }
        for &ino in moved {
            self.put_inode(&mut b, ino, false)?;
        }
        for d in dirs {
            self.persist_dir_chain(&mut b, d)?;
            self.put_inode(&mut b, d, false)?;
        }
        if let Err(err) = b.commit(self) {
            // The engine has not changed.
            undo(self);
            return Err(engine_err(coll, path, &err));
        }
        for ino in moved {
            if let Some(n) = self.nodes.get_mut(ino) {
                n.persisted = true;
                if n.kind == Kind::File && n.storage == Storage::Inline {
                    n.has_doc = true;
                }
            }
        }
        for d in dirs {
            self.mark_chain_persisted(d);
        }
        Ok(())
    }

    /// Renames an entry inside one collection (atomic: one engine batch).
    pub fn rename(
        &mut self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        noreplace: bool,
    ) -> Result<(), Errno> {
        Self::check_name(newname)?;
        let src = self.entry_of(parent, name)?;
        let np = self.dir(newparent)?;
        let sn = self.node(src)?;
        if np.coll != sn.coll || newparent == ROOT_INO {
            return Err(e(libc::EXDEV));
        }
        let coll_id = sn.coll;
        let src_dir = sn.is_dir();
        let target = np.children.get(newname).copied();
        // The new parent must not be inside the moved directory.
        if src_dir && self.within(newparent, src)? {
            return Err(e(libc::EINVAL));
        }
        if let Some(dst) = target {
            if dst == src {
                return Ok(());
            }
            if noreplace {
                return Err(e(libc::EEXIST));
            }
            let d = self.node(dst)?;
            match (src_dir, d.is_dir()) {
                (true, false) => return Err(e(libc::ENOTDIR)),
                (false, true) => return Err(e(libc::EISDIR)),
                (true, true) if !d.children.is_empty() => return Err(e(libc::ENOTEMPTY)),
                _ => {}
            }
        }
        // Documents move with their current content.
        self.flush_all()?;
        let coll = self.coll_name(coll_id)?.to_string();
        let old_base = self.child_path(parent, name)?;
        let new_base = self.child_path(newparent, newname)?;
        let mut b = Batch::default();
        if target.is_some() {
            self.remove_entry(newparent, newname, None, &mut b)?;
        }
        let mut m = Moves::default();
        self.moves(&coll, src, &old_base, &new_base, &mut m)?;
        let moved = m.into_batch(&coll, &mut b);
        unlink_child(self, parent, name);
        link_child(self, newparent, newname.to_os_string(), src);
        let undo = |st: &mut State| {
            unlink_child(st, newparent, newname);
            link_child(st, parent, name.to_os_string(), src);
        };
        let dirs = [parent, newparent];
        self.commit_move(b, &coll, &old_base, &moved, &[src], dirs, undo)
    }

    /// Swaps entries `name` of `parent` and `newname` of `newparent`, of any kinds
    /// (`RENAME_EXCHANGE`; atomic: one engine batch).
    pub fn exchange(
        &mut self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
    ) -> Result<(), Errno> {
        let a = self.entry_of(parent, name)?;
        let b_ino = self.entry_of(newparent, newname)?;
        if a == b_ino {
            return Ok(());
        }
        let (na, nb) = (self.node(a)?, self.node(b_ino)?);
        if na.coll != nb.coll || parent == ROOT_INO || newparent == ROOT_INO {
            return Err(e(libc::EXDEV));
        }
        let coll_id = na.coll;
        // Neither directory may end up inside itself.
        if (na.is_dir() && self.within(newparent, a)?)
            || (nb.is_dir() && self.within(parent, b_ino)?)
        {
            return Err(e(libc::EINVAL));
        }
        self.flush_all()?;
        let coll = self.coll_name(coll_id)?.to_string();
        let path_a = self.child_path(parent, name)?;
        let path_b = self.child_path(newparent, newname)?;
        let mut m = Moves::default();
        self.moves(&coll, a, &path_a, &path_b, &mut m)?;
        self.moves(&coll, b_ino, &path_b, &path_a, &mut m)?;
        let mut b = Batch::default();
        let moved = m.into_batch(&coll, &mut b);
        let swap = |st: &mut State, (x, y): (u64, u64)| {
            unlink_child(st, parent, name);
            unlink_child(st, newparent, newname);
            link_child(st, parent, name.to_os_string(), x);
            link_child(st, newparent, newname.to_os_string(), y);
        };
        swap(self, (b_ino, a));
        let undo = move |st: &mut State| swap(st, (a, b_ino));
        let dirs = [parent, newparent];
        self.commit_move(b, &coll, &path_a, &moved, &[a, b_ino], dirs, undo)
    }
}

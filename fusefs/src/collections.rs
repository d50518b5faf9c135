//! Collections created, dropped or renamed through the engine API while mounted (by
//! code in the mount's process): the engine counts its catalog changes
//! (`Db::catalog_changes`), and the first state lock after a change brings the root
//! directory in line with the catalog, matching collections by their engine id (which
//! a rename keeps). A new collection is loaded whole, a renamed one keeps its tree
//! under the new name, and a dropped one leaves the tree with everything in it: its
//! documents are gone for the engine's readers at once, so its files are too (requests
//! on them fail with ENOENT, unflushed writes are dropped with the collection).

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};

use basalt_engine::CollId;

use crate::external::Forget;
use crate::load::{link_child, load_collection, unlink_child};
use crate::state::{State, ROOT_INO};

impl State {
    /// Gives mounted collection `cid` the name `name` (after its old name was taken
    /// out of `coll_by_name`; moving its root's entry is the caller's).
    pub(crate) fn name_collection(&mut self, cid: u32, name: &str) {
        if let Some(c) = self.colls.get_mut(&cid) {
            c.name = name.to_string();
        }
        self.coll_by_name.insert(name.to_string(), cid);
    }

    /// Follows the engine's catalog if it changed since last seen (see the module
    /// docs); returns what the kernel must forget.
    pub fn take_in_catalog(&mut self) -> Vec<Forget> {
        let changes = self.db.catalog_changes();
        if changes == self.catalog_seen {
            return Vec::new();
        }
        // Seen before listing: a change made while listing is followed next time.
        self.catalog_seen = changes;
        let listed: HashMap<CollId, String> = self
            .db
            .list_collections()
            .into_iter()
            .filter(|n| n != crate::views::DIR_NAME)
            .filter_map(|n| Some((self.db.collection(&n).ok()?.id(), n)))
            .collect();
        let mut out = Vec::new();
        let mounted: Vec<(u32, String, u64, CollId)> = self
            .colls
            .iter()
            .map(|(&cid, c)| (cid, c.name.clone(), c.root, c.engine_id))
            .collect();
        // Names go first, then come back renamed: collections may swap names.
        let mut renamed = Vec::new();
        for (cid, name, root, engine_id) in mounted {
            let now = listed.get(&engine_id);
            if now == Some(&name) {
                continue;
            }
            unlink_child(self, ROOT_INO, OsStr::new(&name));
            self.coll_by_name.remove(&name);
            out.push(Forget::Deleted {
                parent: ROOT_INO,
                child: root,
                name: name.into(),
            });
            match now {
                Some(to) => renamed.push((cid, to.clone(), root)),
                None => self.drop_collection_tree(cid),
            }
        }
        for (cid, to, root) in renamed {
            self.name_collection(cid, &to);
            link_child(self, ROOT_INO, OsString::from(&to), root);
            out.push(Forget::Entry {
                parent: ROOT_INO,
                name: to.into(),
            });
        }
        let mut new: Vec<String> = listed
            .into_values()
            .filter(|n| !self.coll_by_name.contains_key(n))
            .collect();
        new.sort();
        for name in new {
            match load_collection(self, &name) {
                Ok(root) => {
                    link_child(self, ROOT_INO, OsString::from(&name), root);
                    out.push(Forget::Entry {
                        parent: ROOT_INO,
                        name: name.into(),
                    });
                }
                Err(e) => eprintln!("basalt-fusefs: cannot load collection {name}: {e}"),
            }
        }
        if !out.is_empty() {
            out.push(Forget::Inode(ROOT_INO));
        }
        out
    }

    /// Forgets collection `cid` and every node in it.
    fn drop_collection_tree(&mut self, cid: u32) {
        self.colls.remove(&cid);
        self.nodes.retain(|_, n| n.coll != cid);
        let nodes = &self.nodes;
        self.dirty_nodes.retain(|ino| nodes.contains_key(ino));
    }
}

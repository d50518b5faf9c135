//! Inode ids (fids) of an engine's collections, handed out by one allocator per
//! engine in this process. A mount hands out ids in memory and stores them later (a
//! created file's record goes out with the next flush; an implied directory's at its
//! first change), so reading the highest stored id is not enough to pick a new one
//! while the engine is mounted: the mounts of an engine and [`crate::write_document`]
//! all take ids here, and an id is never handed out twice.
//!
//! The allocator lives while something holds it (a mount for its lifetime, a
//! `write_document` for its call); the next holder starts again from the stored ids.
//! It also marks the engine as mounted: a second mount of one engine in one process is
//! refused, since each would keep its own file metadata for the same documents.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use basalt_engine::{CollId, Db};

/// Allocators alive in this process, by data directory (an engine's directory is
/// locked to one open engine).
static LIVE: Mutex<Vec<(PathBuf, Weak<Fids>)>> = Mutex::new(Vec::new());

/// The inode id allocator of one engine.
#[derive(Debug, Default)]
pub struct Fids {
    /// Next id per collection (by engine collection id, which a rename keeps).
    next: Mutex<HashMap<CollId, u64>>,
    /// A mount of the engine holds a [`Mounted`].
    mounted: AtomicBool,
}

/// The engine's mark as mounted, cleared when this drops.
#[derive(Debug)]
pub struct Mounted(Arc<Fids>);

impl Drop for Mounted {
    fn drop(&mut self) {
        self.0.mounted.store(false, Ordering::SeqCst);
    }
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Fids {
    /// The allocator of `db`'s engine, shared with every other holder in this process.
    pub fn of(db: &Db) -> Arc<Fids> {
        let mut live = locked(&LIVE);
        live.retain(|(_, w)| w.strong_count() > 0);
        if let Some(f) = live
            .iter()
            .find(|(p, _)| p == db.path())
            .and_then(|(_, w)| w.upgrade())
        {
            return f;
        }
        let f = Arc::new(Fids::default());
        live.push((db.path().to_path_buf(), Arc::downgrade(&f)));
        f
    }

    /// Marks the engine as mounted; `None` when it already is.
    pub fn claim_mount(self: &Arc<Self>) -> Option<Mounted> {
        let was = self.mounted.swap(true, Ordering::SeqCst);
        (!was).then(|| Mounted(self.clone()))
    }

    /// A new id in collection `coll`, at least `floor` (one past the highest id the
    /// caller knows to be stored).
    pub fn take(&self, coll: CollId, floor: u64) -> u64 {
        let mut next = locked(&self.next);
        let n = next.entry(coll).or_insert(floor);
        let id = (*n).max(floor);
        *n = id + 1;
        id
    }

    /// The lowest id not yet handed out or reserved in collection `coll` (0: none).
    pub fn next_free(&self, coll: CollId) -> u64 {
        locked(&self.next).get(&coll).copied().unwrap_or(0)
    }

    /// Ids below `floor` are taken in collection `coll` (stored ones seen at load).
    pub fn reserve_below(&self, coll: CollId, floor: u64) {
        let mut next = locked(&self.next);
        let n = next.entry(coll).or_insert(floor);
        *n = (*n).max(floor);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db(dir: &tempfile::TempDir) -> Db {
        Db::open(dir.path(), basalt_engine::Options::default()).unwrap()
    }

    #[test]
    fn ids_are_never_handed_out_twice_and_respect_every_floor() {
        let f = Fids::default();
        assert_eq!(f.take(1, 5), 5);
        assert_eq!(f.take(1, 1), 6, "a lower floor does not go back");
        assert_eq!(f.take(1, 10), 10, "a higher floor skips ahead");
        f.reserve_below(1, 8);
        assert_eq!(
            f.take(1, 1),
            11,
            "reserving below the next id changes nothing"
        );
        f.reserve_below(1, 20);
        assert_eq!(f.take(1, 1), 20);
        assert_eq!(f.take(2, 1), 1, "collections count apart");
    }

    #[test]
    fn one_engine_has_one_allocator_while_held_and_a_fresh_one_after() {
        let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (a, b) = (db(&d1), db(&d2));
        let fa = Fids::of(&a);
        assert!(Arc::ptr_eq(&fa, &Fids::of(&a.clone())));
        assert!(!Arc::ptr_eq(&fa, &Fids::of(&b)));
        assert_eq!(fa.take(1, 1), 1);
        assert_eq!(Fids::of(&a).take(1, 1), 2, "held: the same counter");
        drop(fa);
        assert_eq!(
            Fids::of(&a).take(1, 1),
            1,
            "released: starts from the floor"
        );
    }

    #[test]
    fn an_engine_is_mounted_once_at_a_time() {
        let d = tempfile::tempdir().unwrap();
        let a = db(&d);
        let first = Fids::of(&a).claim_mount().expect("not mounted yet");
        assert!(Fids::of(&a).claim_mount().is_none(), "mounted twice");
        drop(first);
        assert!(Fids::of(&a).claim_mount().is_some(), "not released");
    }
}

//! Write observers: code in the same process told about every committed user write
//! (a mounted filesystem learns of documents written through the engine API).

use parking_lot::RwLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// One committed write, as told to an observer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Written<'a> {
    /// The collection's name when written.
    pub collection: &'a str,
    /// The collection's id, which a later rename keeps.
    pub collection_id: crate::record::CollId,
    pub key: &'a [u8],
    /// A delete (tombstone) rather than a put.
    pub deleted: bool,
}

/// Called with the writes of each committed batch (or single put/delete), on the
/// writer's thread, after the writes are visible to reads and before the write call
/// returns. It must be quick and must not write to the engine.
pub type WriteObserver = Arc<dyn Fn(&[Written<'_>]) + Send + Sync>;

/// The registered observers.
#[derive(Default)]
pub(crate) struct Observers {
    list: RwLock<Vec<(u64, WriteObserver)>>,
    /// Any observer registered: the write path skips building the list otherwise.
    any: AtomicBool,
    next_id: AtomicU64,
    /// User writes between the start of their commit and the end of their telling.
    untold: AtomicU64,
}

/// A user write being committed and told: counted in [`Observers::untold`] until
/// dropped (after the telling, or when the commit fails).
pub(crate) struct Telling<'a>(&'a AtomicU64);

impl Drop for Telling<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Observers {
    pub fn add(&self, f: WriteObserver) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut l = self.list.write();
        l.push((id, f));
        self.any.store(true, Ordering::SeqCst);
        id
    }

    pub fn remove(&self, id: u64) {
        let mut l = self.list.write();
        l.retain(|(i, _)| *i != id);
        self.any.store(!l.is_empty(), Ordering::SeqCst);
    }

    /// Marks a user write as begun; hold the guard until its observers were told.
    pub fn begin(&self) -> Telling<'_> {
        self.untold.fetch_add(1, Ordering::SeqCst);
        Telling(&self.untold)
    }

    /// Whether no user write is between its commit's start and its telling's end.
    pub fn all_told(&self) -> bool {
        self.untold.load(Ordering::SeqCst) == 0
    }

    /// Whether any observer is registered (one atomic load).
    pub fn active(&self) -> bool {
        self.any.load(Ordering::SeqCst)
    }

    /// Tells every observer about the writes `build` lists (built only when one is
    /// registered).
    pub fn tell<'a>(&self, build: impl FnOnce() -> Vec<Written<'a>>) {
        if !self.any.load(Ordering::SeqCst) {
            return;
        }
        let writes = build();
        for (_, f) in self.list.read().iter() {
            f(&writes);
        }
    }
}

//! Parts of an inode that most inodes never use (directory entries, extended
//! attributes, a symlink's target, a file's pending chunks), kept behind one pointer
//! that is null until the part is first changed: every inode lives in memory, and a
//! plain small file should not pay for a directory's map or a writer's state.
//!
//! A [`Lazy`] reads as its part (an empty one while unallocated, shared and
//! read-only) and allocates on the first mutable use. Paths that only clear or reset a
//! part use [`Lazy::existing`], which never allocates.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::ops::{Deref, DerefMut};

/// A value with a shared empty instance that an unallocated [`Lazy`] reads as.
pub trait Empty: Default + 'static {
    /// The shared empty value.
    fn empty() -> &'static Self;
    /// Holds nothing (equals [`Empty::empty`]): its allocation can be given back.
    fn is_vacant(&self) -> bool;
}

/// `T` allocated on first mutable use; reads as [`Empty::empty`] until then.
#[derive(Default)]
pub struct Lazy<T: Empty>(Option<Box<T>>);

impl<T: Empty> Lazy<T> {
    /// Holds `v`, allocated only when it is not vacant.
    pub fn of(v: T) -> Self {
        Lazy((!v.is_vacant()).then(|| Box::new(v)))
    }

    /// The part, if allocated, without allocating it.
    pub fn existing(&mut self) -> Option<&mut T> {
        self.0.as_deref_mut()
    }

    /// Gives the allocation back if the part holds nothing.
    pub fn shrink(&mut self) {
        if self.0.as_ref().is_some_and(|v| v.is_vacant()) {
            self.0 = None;
        }
    }

    /// Whether the part is allocated.
    #[cfg(test)]
    pub fn is_allocated(&self) -> bool {
        self.0.is_some()
    }
}

impl<T: Empty> Deref for Lazy<T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.0.as_deref().unwrap_or_else(|| T::empty())
    }
}

impl<T: Empty> DerefMut for Lazy<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.0.get_or_insert_with(Box::default)
    }
}

impl<T: Empty + std::fmt::Debug> std::fmt::Debug for Lazy<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

impl Empty for Vec<u8> {
    fn empty() -> &'static Self {
        static EMPTY: Vec<u8> = Vec::new();
        &EMPTY
    }
    fn is_vacant(&self) -> bool {
        self.is_empty()
    }
}

impl Empty for BTreeMap<Vec<u8>, Vec<u8>> {
    fn empty() -> &'static Self {
        static EMPTY: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        &EMPTY
    }
    fn is_vacant(&self) -> bool {
        self.is_empty()
    }
}

impl Empty for BTreeMap<OsString, u64> {
    fn empty() -> &'static Self {
        static EMPTY: BTreeMap<OsString, u64> = BTreeMap::new();
        &EMPTY
    }
    fn is_vacant(&self) -> bool {
        self.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_as_empty_allocates_on_first_change_and_gives_back_when_emptied() {
        let mut m: Lazy<BTreeMap<OsString, u64>> = Lazy::default();
        assert!(m.is_empty() && m.get(&OsString::from("a")).is_none());
        assert!(!m.is_allocated(), "reading does not allocate");
        assert!(m.existing().is_none(), "existing does not allocate");
        m.insert("a".into(), 1);
        assert!(m.is_allocated());
        assert_eq!(m.get(&OsString::from("a")), Some(&1));
        m.shrink();
        assert!(m.is_allocated(), "a part holding something stays");
        m.remove(&OsString::from("a"));
        m.shrink();
        assert!(!m.is_allocated(), "an emptied part is given back");
        assert!(!Lazy::of(Vec::new()).is_allocated());
        assert_eq!(&**Lazy::of(b"target".to_vec()), b"target");
    }
}

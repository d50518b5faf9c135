//! A sharded CLOCK cache with a byte budget. Hits only set a reference bit
//! inside one shard's lock (short critical section; no list reordering).

use foldhash::fast::FixedState;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const SHARDS: usize = 16;
/// Seeds shard choice apart from the in-shard map's hash, so each shard's map still
/// spreads its keys over all buckets.
const SHARD_SEED: u64 = 0x9e37_79b9_7f4a_7c15;

struct Slot<K, V> {
    key: K,
    val: Arc<V>,
    charge: usize,
    referenced: bool,
}

struct Shard<K, V> {
    map: HashMap<K, usize, FixedState>,
    slots: Vec<Option<Slot<K, V>>>,
    free: Vec<usize>,
    hand: usize,
    used: usize,
}

/// Byte-bounded cache of immutable values.
pub struct ClockCache<K, V> {
    shards: Vec<Mutex<Shard<K, V>>>,
    cap_per_shard: std::sync::atomic::AtomicUsize,
    pub hits: AtomicU64,
    pub misses: AtomicU64,
}

impl<K: Hash + Eq + Clone, V> ClockCache<K, V> {
    /// A cache holding at most `capacity` bytes (as charged by `insert`).
    pub fn new(capacity: usize) -> Self {
        ClockCache {
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        map: HashMap::with_hasher(FixedState::default()),
                        slots: Vec::new(),
                        free: Vec::new(),
                        hand: 0,
                        used: 0,
                    })
                })
                .collect(),
            cap_per_shard: std::sync::atomic::AtomicUsize::new((capacity / SHARDS).max(1)),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    fn shard(&self, k: &K) -> &Mutex<Shard<K, V>> {
        let hv = FixedState::with_seed(SHARD_SEED).hash_one(k);
        &self.shards[(hv as usize) % SHARDS]
    }

    /// Looks up `k`, counting a hit or a miss.
    pub fn get(&self, k: &K) -> Option<Arc<V>> {
        let mut s = self.shard(k).lock();
        let r = match s.map.get(k).copied() {
            Some(i) => {
                let slot = s.slots[i].as_mut().expect("mapped slot is occupied");
                slot.referenced = true;
                Some(slot.val.clone())
            }
            None => None,
        };
        drop(s);
        if r.is_some() {
            self.hits.fetch_add(1, Ordering::Relaxed);
        } else {
            self.misses.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    /// Inserts `v` charged at `charge` bytes, evicting unreferenced entries as needed.
    /// Values larger than a shard's budget are not cached.
    pub fn insert(&self, k: K, v: Arc<V>, charge: usize) {
        let cap = self.cap_per_shard.load(Ordering::Relaxed);
        if charge > cap {
            return;
        }
        let mut guard = self.shard(&k).lock();
        let s = &mut *guard;
        if let Some(&i) = s.map.get(&k) {
            let slot = s.slots[i].as_mut().expect("mapped slot is occupied");
            s.used = s.used - slot.charge + charge;
            slot.val = v;
            slot.charge = charge;
            return;
        }
        while s.used + charge > cap && !s.map.is_empty() {
            let n = s.slots.len();
            let i = s.hand % n;
            s.hand = (i + 1) % n;
            if let Some(slot) = s.slots[i].as_mut() {
                if slot.referenced {
                    slot.referenced = false;
                } else {
                    let slot = s.slots[i].take().expect("checked");
                    s.used -= slot.charge;
                    s.map.remove(&slot.key);
                    s.free.push(i);
                }
            }
        }
        let slot = Slot {
            key: k.clone(),
            val: v,
            charge,
            referenced: false,
        };
        let i = match s.free.pop() {
            Some(i) => {
                s.slots[i] = Some(slot);
                i
            }
            None => {
                s.slots.push(Some(slot));
                s.slots.len() - 1
            }
        };
        s.map.insert(k, i);
        s.used += charge;
    }

    /// Drops every entry matching `pred` (e.g. blocks of a deleted file).
    pub fn retain(&self, mut keep: impl FnMut(&K) -> bool) {
        for sh in &self.shards {
            let mut guard = sh.lock();
            let s = &mut *guard;
            for i in 0..s.slots.len() {
                let drop_it = s.slots[i].as_ref().is_some_and(|slot| !keep(&slot.key));
                if drop_it {
                    let slot = s.slots[i].take().expect("checked");
                    s.used -= slot.charge;
                    s.map.remove(&slot.key);
                    s.free.push(i);
                }
            }
        }
    }

    /// Bytes currently charged.
    pub fn used(&self) -> usize {
        self.shards.iter().map(|s| s.lock().used).sum()
    }

    /// Budget in bytes.
    pub fn capacity(&self) -> usize {
        self.cap_per_shard.load(Ordering::Relaxed) * SHARDS
    }

    /// Changes the budget; a smaller one evicts at once.
    pub fn set_capacity(&self, capacity: usize) {
        let cap = (capacity / SHARDS).max(1);
        self.cap_per_shard.store(cap, Ordering::Relaxed);
        for sh in &self.shards {
            let mut guard = sh.lock();
            let s = &mut *guard;
            while s.used > cap && !s.map.is_empty() {
                let n = s.slots.len();
                let i = s.hand % n;
                s.hand = (i + 1) % n;
                if let Some(slot) = s.slots[i].take() {
                    s.used -= slot.charge;
                    s.map.remove(&slot.key);
                    s.free.push(i);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_stays_within_budget_and_keeps_referenced_entries() {
        let c: ClockCache<u64, Vec<u8>> = ClockCache::new(16 * 1000);
        for i in 0..10_000u64 {
            c.insert(i, Arc::new(vec![0; 100]), 100);
            assert!(c.used() <= c.capacity());
        }
        c.insert(1 << 40, Arc::new(vec![]), 100);
        assert!(c.get(&(1 << 40)).is_some());
        assert_eq!(c.hits.load(Ordering::Relaxed), 1);
        assert!(c.get(&0).is_none(), "oldest entry must have been evicted");
        c.retain(|k| *k != 1 << 40);
        assert!(c.get(&(1 << 40)).is_none());
    }
}

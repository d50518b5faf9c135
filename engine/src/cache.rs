//! A sharded CLOCK cache with a byte budget. A hit takes its shard's lock shared and
//! only sets an atomic reference bit (no list reordering), so concurrent hits do not
//! wait for each other; inserts and evictions take the shard exclusively. Hit and
//! miss counts are kept per shard, so readers on different shards share no counter.

use foldhash::fast::FixedState;
use parking_lot::RwLock;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

const SHARDS: usize = 16;
/// Seeds shard choice apart from the in-shard map's hash, so each shard's map still
/// spreads its keys over all buckets.
const SHARD_SEED: u64 = 0x9e37_79b9_7f4a_7c15;

struct Slot<K, V> {
    key: K,
    val: Arc<V>,
    charge: usize,
    referenced: AtomicBool,
}

struct Shard<K, V> {
    map: HashMap<K, usize, FixedState>,
    slots: Vec<Option<Slot<K, V>>>,
    free: Vec<usize>,
    hand: usize,
    used: usize,
}

impl<K: Hash + Eq + Clone, V> Shard<K, V> {
    /// Adds an entry for `k` (not yet in the shard) in a free slot or a new one.
    fn place(&mut self, k: K, val: Arc<V>, charge: usize) {
        let slot = Slot {
            key: k.clone(),
            val,
            charge,
            referenced: AtomicBool::new(false),
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(slot);
                i
            }
            None => {
                self.slots.push(Some(slot));
                self.slots.len() - 1
            }
        };
        self.map.insert(k, i);
        self.used += charge;
    }
}

/// A shard and its counters, on cache lines of their own.
#[repr(align(128))]
struct ShardCell<K, V> {
    shard: RwLock<Shard<K, V>>,
    hits: AtomicU64,
    misses: AtomicU64,
}

/// Byte-bounded cache of immutable values.
pub struct ClockCache<K, V> {
    shards: Vec<ShardCell<K, V>>,
    cap_per_shard: std::sync::atomic::AtomicUsize,
    doorkeeper: Option<Doorkeeper>,
    /// Values [`ClockCache::offer`]ed but not admitted (first miss in the window).
    pub declined: AtomicU64,
}

/// An admission filter in the manner of TinyLFU's doorkeeper: it remembers the hashes
/// of the last misses (one per slot, newest wins) and admits a key on its second
/// miss while still remembered. When reads are spread uniformly over data many
/// times larger than the cache, a block is rarely read twice while cached, and
/// caching every one only costs an insert, an eviction and a free per read; a
/// block read again soon is admitted at its second miss.
struct Doorkeeper {
    slots: Box<[AtomicU64]>,
}

impl Doorkeeper {
    fn new(slots: usize) -> Self {
        Doorkeeper {
            slots: (0..slots.next_power_of_two())
                .map(|_| AtomicU64::new(0))
                .collect(),
        }
    }

    /// Records a miss of `hash`; true if this hash missed before and is still held.
    fn second_miss(&self, hash: u64) -> bool {
        let tag = hash | 1; // never 0, the empty slot
        let i = (hash >> 1) as usize & (self.slots.len() - 1);
        self.slots[i].swap(tag, Ordering::Relaxed) == tag
    }

    fn bytes(&self) -> usize {
        self.slots.len() * std::mem::size_of::<AtomicU64>()
    }
}

impl<K: Hash + Eq + Clone, V> ClockCache<K, V> {
    /// A cache holding at most `capacity` bytes (as charged by `insert`).
    pub fn new(capacity: usize) -> Self {
        ClockCache {
            shards: (0..SHARDS)
                .map(|_| ShardCell {
                    shard: RwLock::new(Shard {
                        map: HashMap::with_hasher(FixedState::default()),
                        slots: Vec::new(),
                        free: Vec::new(),
                        hand: 0,
                        used: 0,
                    }),
                    hits: AtomicU64::new(0),
                    misses: AtomicU64::new(0),
                })
                .collect(),
            cap_per_shard: std::sync::atomic::AtomicUsize::new((capacity / SHARDS).max(1)),
            doorkeeper: None,
            declined: AtomicU64::new(0),
        }
    }

    /// A cache whose [`ClockCache::offer`] admits a key only on its second miss among
    /// the last `window` misses (rounded up to a power of two).
    pub fn with_doorkeeper(capacity: usize, window: usize) -> Self {
        ClockCache {
            doorkeeper: Some(Doorkeeper::new(window.max(1))),
            ..Self::new(capacity)
        }
    }

    /// Bytes of the admission filter (fixed at creation).
    pub fn filter_bytes(&self) -> usize {
        self.doorkeeper.as_ref().map_or(0, Doorkeeper::bytes)
    }

    /// Inserts a value just read after a miss, if the admission filter (when there
    /// is one) admits it; see [`ClockCache::with_doorkeeper`].
    pub fn offer(&self, k: K, v: Arc<V>, charge: usize) {
        let hv = Self::hash(&k);
        if let Some(d) = &self.doorkeeper {
            if !d.second_miss(hv) {
                self.declined.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        self.insert_hashed(k, hv, v, charge);
    }

    /// The key's hash, which picks its shard (and its doorkeeper slot).
    fn hash(k: &K) -> u64 {
        FixedState::with_seed(SHARD_SEED).hash_one(k)
    }

    fn cell(&self, hv: u64) -> &ShardCell<K, V> {
        &self.shards[(hv as usize) % SHARDS]
    }

    fn shard(&self, hv: u64) -> &RwLock<Shard<K, V>> {
        &self.cell(hv).shard
    }

    /// Looks up `k`, counting a hit or a miss.
    pub fn get(&self, k: &K) -> Option<Arc<V>> {
        let cell = self.cell(Self::hash(k));
        let s = cell.shard.read();
        let r = s.map.get(k).map(|&i| {
            let slot = s.slots[i].as_ref().expect("mapped slot is occupied");
            // A plain load first: a hot entry's bit is set already, and a store would
            // pull its line away from the other cores reading it.
            if !slot.referenced.load(Ordering::Relaxed) {
                slot.referenced.store(true, Ordering::Relaxed);
            }
            slot.val.clone()
        });
        drop(s);
        let counter = if r.is_some() {
            &cell.hits
        } else {
            &cell.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        r
    }

    /// Lookups that found their key.
    pub fn hits(&self) -> u64 {
        self.shards
            .iter()
            .map(|c| c.hits.load(Ordering::Relaxed))
            .sum()
    }

    /// Lookups that did not.
    pub fn misses(&self) -> u64 {
        self.shards
            .iter()
            .map(|c| c.misses.load(Ordering::Relaxed))
            .sum()
    }

    /// Inserts `v` charged at `charge` bytes, evicting unreferenced entries as needed.
    /// Values larger than a shard's budget are not cached.
    pub fn insert(&self, k: K, v: Arc<V>, charge: usize) {
        let hv = Self::hash(&k);
        self.insert_hashed(k, hv, v, charge);
    }

    /// Inserts `v` only if `k`'s shard has room for it without evicting anything;
    /// returns false when it has not. For filling a cache ahead of use (warming), so
    /// that a warm-up never pushes out what reads brought in. A key already cached
    /// is left as it is (true).
    pub fn insert_if_room(&self, k: K, v: Arc<V>, charge: usize) -> bool {
        let cap = self.cap_per_shard.load(Ordering::Relaxed);
        let mut s = self.shard(Self::hash(&k)).write();
        if s.map.contains_key(&k) {
            return true;
        }
        if s.used + charge > cap {
            return false;
        }
        s.place(k, v, charge);
        true
    }

    fn insert_hashed(&self, k: K, hv: u64, v: Arc<V>, charge: usize) {
        let cap = self.cap_per_shard.load(Ordering::Relaxed);
        if charge > cap {
            return;
        }
        let mut guard = self.shard(hv).write();
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
                if *slot.referenced.get_mut() {
                    *slot.referenced.get_mut() = false;
                } else {
                    let slot = s.slots[i].take().expect("checked");
                    s.used -= slot.charge;
                    s.map.remove(&slot.key);
                    s.free.push(i);
                }
            }
        }
        s.place(k, v, charge);
    }

    /// Drops every entry matching `pred` (e.g. blocks of a deleted file).
    pub fn retain(&self, mut keep: impl FnMut(&K) -> bool) {
        for sh in &self.shards {
            let mut guard = sh.shard.write();
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
        self.shards.iter().map(|s| s.shard.read().used).sum()
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
            let mut guard = sh.shard.write();
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
        assert_eq!((c.hits(), c.misses()), (1, 0));
        assert!(c.get(&0).is_none(), "oldest entry must have been evicted");
        c.retain(|k| *k != 1 << 40);
        assert!(c.get(&(1 << 40)).is_none());
    }

    #[test]
    fn concurrent_hits_and_evicting_inserts_keep_values_budget_and_counts() {
        let c: Arc<ClockCache<u64, u64>> = Arc::new(ClockCache::new(16 * 64 * 100));
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let c = c.clone();
                std::thread::spawn(move || {
                    let mut gets = 0u64;
                    for i in 0..20_000u64 {
                        let k = if i % 3 == 0 { t << 32 | i } else { i % 97 };
                        if let Some(v) = c.get(&k) {
                            assert_eq!(*v, k, "a hit returned another key's value");
                        } else {
                            c.insert(k, Arc::new(k), 100);
                        }
                        gets += 1;
                        assert!(c.used() <= c.capacity());
                    }
                    gets
                })
            })
            .collect();
        let gets: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(c.hits() + c.misses(), gets);
        assert!(
            c.hits() > gets / 2,
            "hot keys must mostly hit: {}",
            c.hits()
        );
    }

    #[test]
    fn insert_if_room_fills_up_to_the_budget_and_never_evicts() {
        let c: ClockCache<u64, Vec<u8>> = ClockCache::new(16 * 1000);
        c.insert(u64::MAX, Arc::new(vec![7]), 100);
        let mut refused = 0;
        for i in 0..1000u64 {
            if !c.insert_if_room(i, Arc::new(vec![]), 100) {
                refused += 1;
            }
            assert!(c.used() <= c.capacity());
        }
        assert!(refused > 0, "a full cache must refuse");
        assert!(c.used() > c.capacity() - 16 * 100, "room was left unused");
        assert_eq!(
            c.get(&u64::MAX).map(|v| v[0]),
            Some(7),
            "an entry cached before the warm-up was evicted"
        );
        assert!(c.insert_if_room(u64::MAX, Arc::new(vec![8]), 100));
        assert_eq!(
            c.get(&u64::MAX).map(|v| v[0]),
            Some(7),
            "a cached entry was replaced"
        );
    }

    #[test]
    fn the_doorkeeper_admits_a_key_at_its_second_miss_only() {
        let c: ClockCache<u64, Vec<u8>> = ClockCache::with_doorkeeper(1 << 20, 1024);
        assert_eq!(c.filter_bytes(), 1024 * 8);
        c.offer(1, Arc::new(vec![1]), 100);
        assert!(c.get(&1).is_none(), "first miss must not be admitted");
        c.offer(1, Arc::new(vec![1]), 100);
        assert!(c.get(&1).is_some(), "second miss must be admitted");
        assert_eq!(c.declined.load(Ordering::Relaxed), 1);
        // A key whose first miss was pushed out of the window starts over.
        c.offer(2, Arc::new(vec![2]), 100);
        for k in 1000..100_000u64 {
            c.offer(k, Arc::new(vec![]), 1);
        }
        c.offer(2, Arc::new(vec![2]), 100);
        assert!(
            c.get(&2).is_none(),
            "a miss long forgotten is a first miss again"
        );
        // Plain inserts (and caches without a doorkeeper) are not filtered.
        c.insert(3, Arc::new(vec![3]), 100);
        assert!(c.get(&3).is_some());
        let plain: ClockCache<u64, Vec<u8>> = ClockCache::new(1 << 20);
        plain.offer(4, Arc::new(vec![4]), 100);
        assert!(plain.get(&4).is_some());
        assert_eq!(plain.filter_bytes(), 0);
    }
}

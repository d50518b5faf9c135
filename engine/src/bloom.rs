//! Bloom filter over (collection, key), about 10 bits per key (~1% false positives).
//! Blocked, as RocksDB's FastLocalBloom: all probes of a key fall in one 512-bit
//! (cache-line) block, so a lookup costs one cache miss per run, not one per probe.

use crate::codec::Reader;
use crate::record::CollId;
use std::sync::atomic::{AtomicU64, Ordering};

/// Hash of a (collection, key) pair used by bloom filters.
pub fn key_hash(coll: CollId, key: &[u8]) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3Default::new();
    h.update(&coll.to_be_bytes());
    h.update(key);
    h.digest()
}

/// An immutable bloom filter.
pub struct Bloom {
    bits: Vec<u64>,
    nbits: u64,
    k: u8,
}

impl Bloom {
    /// An empty filter sized for `keys` keys (more keys still work, with more false
    /// positives), so a run writer fills it as entries arrive instead of keeping
    /// every key's hash until the end.
    pub fn with_capacity(keys: usize, bits_per_key: usize) -> Bloom {
        let (nbits, k) = geometry(keys, bits_per_key);
        Bloom {
            bits: vec![0u64; (nbits / 64) as usize],
            nbits,
            k,
        }
    }

    /// Adds a key hash.
    pub fn insert(&mut self, h: u64) {
        for pos in probes(h, self.k, self.nbits) {
            self.bits[(pos / 64) as usize] |= 1 << (pos % 64);
        }
    }

    /// Builds a filter over the given key hashes.
    #[cfg(test)]
    pub fn build(hashes: &[u64], bits_per_key: usize) -> Bloom {
        let mut b = Bloom::with_capacity(hashes.len(), bits_per_key);
        for &h in hashes {
            b.insert(h);
        }
        b
    }

    /// False means definitely absent.
    pub fn may_contain(&self, h: u64) -> bool {
        probes(h, self.k, self.nbits)
            .all(|pos| self.bits[(pos / 64) as usize] & (1 << (pos % 64)) != 0)
    }

    /// Memory used.
    pub fn bytes(&self) -> usize {
        self.bits.len() * 8
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.nbits.to_le_bytes());
        out.push(self.k);
        for w in &self.bits {
            out.extend_from_slice(&w.to_le_bytes());
        }
    }

    pub fn decode(b: &[u8]) -> Option<Bloom> {
        let mut r = Reader::new(b);
        let nbits = r.u64()?;
        let k = r.u8()?;
        if nbits == 0
            || nbits % LINE_BITS != 0
            || k == 0
            || k > 30
            || nbits / 8 > r.remaining() as u64
        {
            return None;
        }
        let bits = (0..nbits / 64)
            .map(|_| r.u64())
            .collect::<Option<Vec<_>>>()?;
        Some(Bloom { bits, nbits, k })
    }
}

/// Builds a filter from a stream of key hashes, setting each hash's bits only after
/// [`INSERT_AHEAD`] more have arrived, its cache line prefetched meanwhile. A merge's
/// filter (millions of keys, megabytes of bits) is far larger than the CPU caches and
/// the hashes are random, so setting bits at once cost one memory stall per key:
/// ~20% of a merge thread's time in an overwrite.
pub struct BloomBuilder {
    bloom: Bloom,
    pending: [u64; INSERT_AHEAD],
    added: usize,
}

/// Hashes a [`BloomBuilder`] holds while their lines are fetched.
const INSERT_AHEAD: usize = 16;

impl BloomBuilder {
    /// A builder sized as [`Bloom::with_capacity`].
    pub fn with_capacity(keys: usize, bits_per_key: usize) -> BloomBuilder {
        BloomBuilder {
            bloom: Bloom::with_capacity(keys, bits_per_key),
            pending: [0; INSERT_AHEAD],
            added: 0,
        }
    }

    /// Adds a key hash.
    pub fn insert(&mut self, h: u64) {
        let slot = self.added % INSERT_AHEAD;
        if self.added >= INSERT_AHEAD {
            self.bloom.insert(self.pending[slot]);
        }
        self.pending[slot] = h;
        self.added += 1;
        self.bloom.prefetch(h);
    }

    /// The filter holding every hash added so far.
    pub fn bloom(&mut self) -> &Bloom {
        for i in self.added.saturating_sub(INSERT_AHEAD)..self.added {
            self.bloom.insert(self.pending[i % INSERT_AHEAD]);
        }
        self.added = 0;
        &self.bloom
    }
}

impl Bloom {
    /// Asks the CPU to fetch the cache line holding `h`'s bits.
    pub fn prefetch(&self, h: u64) {
        prefetch_line(self.bits.as_ptr().cast(), h, self.nbits);
    }
}

/// Asks the CPU to fetch the cache line holding `h`'s bits of a filter of `nbits`
/// bits whose first byte is at `bits`.
fn prefetch_line(bits: *const u8, h: u64, nbits: u64) {
    let byte = (line_of(h, nbits) * LINE_BITS / 8) as usize;
    crate::prefetch::prefetch(bits.wrapping_add(byte));
}

/// A filter that threads add to while others read it (a memtable's): the layout of
/// [`Bloom`] in atomic words. Its user sets a key's bits before readers may look for
/// the key.
pub struct SharedBloom {
    bits: Box<[AtomicU64]>,
    nbits: u64,
    k: u8,
}

impl SharedBloom {
    /// An empty filter sized as [`Bloom::with_capacity`].
    pub fn with_capacity(keys: usize, bits_per_key: usize) -> SharedBloom {
        let (nbits, k) = geometry(keys, bits_per_key);
        SharedBloom {
            bits: (0..nbits / 64).map(|_| AtomicU64::new(0)).collect(),
            nbits,
            k,
        }
    }

    /// Asks the CPU to fetch the cache line holding `h`'s bits (to hide the miss of
    /// an `insert` that follows later).
    pub fn prefetch(&self, h: u64) {
        prefetch_line(self.bits.as_ptr().cast(), h, self.nbits);
    }

    /// Adds a key hash.
    pub fn insert(&self, h: u64) {
        for pos in probes(h, self.k, self.nbits) {
            let (word, bit) = (&self.bits[(pos / 64) as usize], 1 << (pos % 64));
            // A plain load first: most bits of a filling filter's line are set
            // already, and a locked `or` costs more than a load.
            if word.load(Ordering::Relaxed) & bit == 0 {
                word.fetch_or(bit, Ordering::Relaxed);
            }
        }
    }

    /// False means absent from everything inserted before.
    pub fn may_contain(&self, h: u64) -> bool {
        probes(h, self.k, self.nbits).all(|pos| {
            self.bits[(pos / 64) as usize].load(Ordering::Relaxed) & (1 << (pos % 64)) != 0
        })
    }

    /// Memory used.
    pub fn bytes(&self) -> usize {
        self.bits.len() * 8
    }
}

/// Size in bits (whole cache lines) and probes per key of a filter for `keys` keys.
fn geometry(keys: usize, bits_per_key: usize) -> (u64, u8) {
    let nbits = ((keys * bits_per_key).max(1) as u64).next_multiple_of(LINE_BITS);
    let k = ((bits_per_key as f64) * 0.69).round().clamp(1.0, 30.0) as u8;
    (nbits, k)
}

/// Bits in one block: a 64-byte cache line.
const LINE_BITS: u64 = 512;

/// The block (cache line) holding a key's bits.
fn line_of(h: u64, nbits: u64) -> u64 {
    ((h >> 32) * (nbits / LINE_BITS)) >> 32
}

/// Bit positions of a key: the high half of the hash picks the block (multiply-shift,
/// no division), the low half steps through it by an odd stride.
fn probes(h: u64, k: u8, nbits: u64) -> impl Iterator<Item = u64> {
    let base = line_of(h, nbits) * LINE_BITS;
    let start = h as u32;
    let delta = start.rotate_right(17) | 1;
    (0..k as u32)
        .map(move |i| base + (start.wrapping_add(i.wrapping_mul(delta)) as u64 % LINE_BITS))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn no_false_negatives_and_few_false_positives() {
        let hs: Vec<u64> = (0..10_000u32)
            .map(|i| key_hash(1, &i.to_be_bytes()))
            .collect();
        let b = Bloom::build(&hs, 10);
        assert!(hs.iter().all(|&h| b.may_contain(h)));
        let fp = (10_000..110_000u32)
            .filter(|i| b.may_contain(key_hash(1, &i.to_be_bytes())))
            .count();
        assert!(fp < 2_500, "false positive rate {fp}/100000 above 2.5%");
        let mut enc = Vec::new();
        b.encode(&mut enc);
        let d = Bloom::decode(&enc).unwrap();
        assert!(hs.iter().all(|&h| d.may_contain(h)));
    }

    #[test]
    fn a_shared_filter_answers_as_the_plain_one_with_the_same_keys() {
        let hs: Vec<u64> = (0..10_000u32)
            .map(|i| key_hash(3, &i.to_be_bytes()))
            .collect();
        let plain = Bloom::build(&hs, 10);
        let shared = SharedBloom::with_capacity(hs.len(), 10);
        std::thread::scope(|s| {
            for part in hs.chunks(2_500) {
                let shared = &shared;
                s.spawn(move || part.iter().for_each(|&h| shared.insert(h)));
            }
        });
        assert_eq!(shared.bytes(), plain.bytes());
        for i in 0..120_000u32 {
            let h = key_hash(3, &i.to_be_bytes());
            assert_eq!(shared.may_contain(h), plain.may_contain(h), "key {i}");
        }
    }

    #[test]
    fn a_filter_sized_for_fewer_keys_still_has_no_false_negatives() {
        let mut b = Bloom::with_capacity(100, 10);
        assert_eq!(
            b.bytes(),
            128,
            "1,000 bits rounded up to two cache lines: sized for 100 keys"
        );
        let hs: Vec<u64> = (0..5_000u32)
            .map(|i| key_hash(2, &i.to_be_bytes()))
            .collect();
        for &h in &hs {
            b.insert(h);
        }
        assert!(hs.iter().all(|&h| b.may_contain(h)));
    }

    #[test]
    fn all_probes_of_a_key_fall_in_one_cache_line() {
        let nbits = 512 * 1000;
        for i in 0..10_000u32 {
            let lines: Vec<u64> = probes(key_hash(2, &i.to_le_bytes()), 7, nbits)
                .map(|p| p / 512)
                .collect();
            assert!(
                lines.iter().all(|&l| l == lines[0] && l < 1000),
                "{lines:?}"
            );
        }
    }

    proptest! {
        /// The builder sets its last hashes' bits late; whatever the count (below,
        /// at and above the prefetch window), its filter is bit for bit the direct one.
        #[test]
        fn a_builder_makes_the_same_filter_as_inserting_at_once(
            hashes in proptest::collection::vec(any::<u64>(), 0..70),
            split in 0usize..70,
        ) {
            let direct = Bloom::build(&hashes, 10);
            let mut b = BloomBuilder::with_capacity(hashes.len(), 10);
            let split = split.min(hashes.len());
            for &h in &hashes[..split] {
                b.insert(h);
            }
            // Reading the filter midway sets the pending bits; adding goes on after.
            prop_assert!(hashes[..split].iter().all(|&h| b.bloom().may_contain(h)));
            for &h in &hashes[split..] {
                b.insert(h);
            }
            let built = b.bloom();
            prop_assert_eq!(&built.bits, &direct.bits);
            prop_assert_eq!((built.nbits, built.k), (direct.nbits, direct.k));
        }

        #[test]
        fn bloom_decoder_survives_arbitrary_bytes(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Some(bl) = Bloom::decode(&b) { let _ = bl.may_contain(42); }
        }
    }
}

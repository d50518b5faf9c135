//! Bloom filter over (collection, key), about 10 bits per key (~1% false positives).

use crate::codec::Reader;
use crate::record::CollId;

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
    /// Builds a filter over the given key hashes.
    pub fn build(hashes: &[u64], bits_per_key: usize) -> Bloom {
        let nbits = ((hashes.len() * bits_per_key).max(64) as u64).next_multiple_of(64);
        let k = ((bits_per_key as f64) * 0.69).round().clamp(1.0, 30.0) as u8;
        let mut bits = vec![0u64; (nbits / 64) as usize];
        for &h in hashes {
            for pos in probes(h, k, nbits) {
                bits[(pos / 64) as usize] |= 1 << (pos % 64);
            }
        }
        Bloom { bits, nbits, k }
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
        if nbits == 0 || nbits % 64 != 0 || k == 0 || k > 30 || nbits / 8 > r.remaining() as u64 {
            return None;
        }
        let bits = (0..nbits / 64)
            .map(|_| r.u64())
            .collect::<Option<Vec<_>>>()?;
        Some(Bloom { bits, nbits, k })
    }
}

fn probes(h: u64, k: u8, nbits: u64) -> impl Iterator<Item = u64> {
    let delta = h.rotate_left(21) | 1;
    (0..k as u64).map(move |i| h.wrapping_add(i.wrapping_mul(delta)) % nbits)
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

    proptest! {
        #[test]
        fn bloom_decoder_survives_arbitrary_bytes(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Some(bl) = Bloom::decode(&b) { let _ = bl.may_contain(42); }
        }
    }
}

//! Keys, values and the random stream, laid out as db_bench lays them out.

/// db_bench's key layout: the key number as 8 big-endian bytes, padded with `'0'` to
/// `key_size` (keys shorter than 8 bytes keep the low-order bytes).
pub fn make_key(n: u64, key_size: usize, buf: &mut Vec<u8>) {
    buf.clear();
    let be = n.to_be_bytes();
    if key_size < 8 {
        buf.extend_from_slice(&be[8 - key_size..]);
    } else {
        buf.extend_from_slice(&be);
        buf.resize(key_size, b'0');
    }
}

/// Inverse of [`make_key`] for keys of at least 8 bytes.
pub fn key_number(key: &[u8]) -> Option<u64> {
    let b: [u8; 8] = key.get(..8)?.try_into().ok()?;
    Some(u64::from_be_bytes(b))
}

/// SplitMix64: small, fast, and good enough to pick keys.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

/// Spreads key numbers over the key space (odd, so that multiplying by it modulo a
/// power of two loses none).
const SCATTER: u128 = 0x9E37_79B9_7F4A_7C15;

/// A key number in `0..num` drawn as db_bench's `--read_random_exp_range=range` draws
/// it: `num × e^-r` with `r` uniform in `[0, range)`, so the smaller numbers are read
/// far more often (with `range` 10, about half the reads go to the hottest 1% of the
/// numbers), then multiplied by a large odd constant modulo `num` so that the hot keys
/// lie scattered over the key space rather than side by side. `range` must be above 0.
pub fn exp_skewed(rng: &mut Rng, num: u64, range: f64) -> u64 {
    let unit = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    let n = ((-unit * range).exp() * num as f64) as u64;
    ((n as u128 * SCATTER) % num.max(1) as u128) as u64
}

/// A random permutation of `0..n` (for `filluniquerandom`).
pub fn permutation(n: u64, seed: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..n).collect();
    let mut rng = Rng::new(seed);
    for i in (1..v.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        v.swap(i, j);
    }
    v
}

/// Values that compress to about `compression_ratio` of their size, like db_bench's
/// RandomGenerator: a 1 MiB pool of pieces whose first `ratio × len` bytes are random
/// printable characters and the rest repeats them; values are consecutive slices of it.
pub struct ValueGen {
    pool: Vec<u8>,
    pos: usize,
}

impl ValueGen {
    pub fn new(value_size: usize, compression_ratio: f64, seed: u64) -> Self {
        let mut rng = Rng::new(seed.wrapping_add(301));
        let piece = 100usize;
        let target = (1 << 20).max(value_size * 2);
        let mut pool = Vec::with_capacity(target + piece);
        while pool.len() < target {
            let random_len = ((piece as f64 * compression_ratio) as usize).max(1);
            let start = pool.len();
            for _ in 0..random_len {
                pool.push(b' ' + rng.below(95) as u8);
            }
            while pool.len() < start + piece {
                let b = pool[start + (pool.len() - start) % random_len];
                pool.push(b);
            }
        }
        ValueGen { pool, pos: 0 }
    }

    pub fn next(&mut self, len: usize) -> &[u8] {
        if self.pos + len > self.pool.len() {
            self.pos = 0;
        }
        let s = &self.pool[self.pos..self.pos + len];
        self.pos += len;
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Share of `draws` that went to the `top` most drawn numbers.
    fn top_share(counts: &std::collections::HashMap<u64, u64>, top: usize, draws: u64) -> f64 {
        let mut c: Vec<u64> = counts.values().copied().collect();
        c.sort_unstable_by(|a, b| b.cmp(a));
        c.iter().take(top).sum::<u64>() as f64 / draws as f64
    }

    #[test]
    fn exp_skewed_draws_stay_in_range_and_favour_few_scattered_keys() {
        let (num, draws) = (100_000u64, 200_000u64);
        let mut rng = Rng::new(3);
        let mut counts = std::collections::HashMap::new();
        for _ in 0..draws {
            let k = exp_skewed(&mut rng, num, 10.0);
            assert!(k < num);
            *counts.entry(k).or_insert(0u64) += 1;
        }
        // e^-r × num for r in [0, 10): P(n <= num/100) = 1 - ln(100)/10 = 0.54.
        let share = top_share(&counts, (num / 100) as usize, draws);
        assert!((0.45..0.65).contains(&share), "top 1% got {share}");
        let mut uniform = std::collections::HashMap::new();
        for _ in 0..draws {
            *uniform.entry(rng.below(num)).or_insert(0u64) += 1;
        }
        let u = top_share(&uniform, (num / 100) as usize, draws);
        assert!(u < 0.05, "uniform top 1% got {u}");
        // The hottest numbers are not neighbours.
        let mut hot: Vec<u64> = counts
            .iter()
            .filter(|(_, &c)| c > 200)
            .map(|(&k, _)| k)
            .collect();
        hot.sort_unstable();
        assert!(
            hot.len() >= 10,
            "{} keys read more than 200 times",
            hot.len()
        );
        assert!(
            hot.windows(2).all(|w| w[1] - w[0] > 1),
            "adjacent hot keys: {hot:?}"
        );
        // A smaller range skews less.
        let mut mild = std::collections::HashMap::new();
        for _ in 0..draws {
            *mild.entry(exp_skewed(&mut rng, num, 2.0)).or_insert(0u64) += 1;
        }
        let m = top_share(&mild, (num / 100) as usize, draws);
        assert!(
            u < m && m < share,
            "uniform {u} < range 2 {m} < range 10 {share}"
        );
    }

    #[test]
    fn keys_are_big_endian_and_padded() {
        let mut k = Vec::new();
        make_key(258, 16, &mut k);
        assert_eq!(&k[..8], &[0, 0, 0, 0, 0, 0, 1, 2]);
        assert_eq!(&k[8..], b"00000000");
        assert_eq!(key_number(&k), Some(258));
        make_key(258, 4, &mut k);
        assert_eq!(k, vec![0, 0, 1, 2]);
        let mut a = Vec::new();
        make_key(1000, 16, &mut a);
        make_key(999, 16, &mut k);
        assert!(k < a, "numeric order must be byte order");
    }

    #[test]
    fn permutation_is_a_permutation() {
        let mut p = permutation(1000, 7);
        assert_ne!(p, (0..1000).collect::<Vec<_>>());
        p.sort();
        assert_eq!(p, (0..1000).collect::<Vec<_>>());
    }

    #[test]
    fn values_have_the_requested_size() {
        let mut g = ValueGen::new(100, 0.5, 1);
        for _ in 0..50_000 {
            assert_eq!(g.next(100).len(), 100);
        }
    }
}

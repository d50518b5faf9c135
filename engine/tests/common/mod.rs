//! Helpers shared by the engine's integration tests.

use basalt_engine::{Compression, Durability, IoBackend, Options};

/// Small segments and budget, lz4, no sync: the read-path tests' engine on `io_backend`.
#[allow(dead_code)] // not every test file reads
pub fn read_test_options(io_backend: IoBackend) -> Options {
    Options {
        io_backend,
        segment_size: 1 << 20,
        block_size: 4096,
        memory_budget: 8 << 20,
        durability: Durability::NoSync,
        compression: Compression::Lz4,
        ..Options::default()
    }
}

/// A tiny deterministic xorshift generator (reproducible key and batch streams).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// `n` incompressible bytes, the same for the same `seed`.
#[allow(dead_code)] // not every test file needs them
pub fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut r = Rng(seed * 2 + 1);
    (0..n).map(|_| r.next() as u8).collect()
}

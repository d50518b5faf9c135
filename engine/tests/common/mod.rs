//! Helpers shared by the engine's integration tests.

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

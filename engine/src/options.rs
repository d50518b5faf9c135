//! Tuning knobs of an engine instance.

use serde::{Deserialize, Serialize};

/// Per-block compression of log segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// Store blocks as they are.
    None,
    /// LZ4 (default): fast, modest ratio.
    Lz4,
    /// Zstandard at the given level (1..=22).
    Zstd(i32),
}

impl Compression {
    /// Parses `none`, `lz4`, `zstd` or `zstd:LEVEL`.
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "none" | "no" => Some(Self::None),
            "lz4" => Some(Self::Lz4),
            "zstd" => Some(Self::Zstd(3)),
            other => other
                .strip_prefix("zstd:")
                .and_then(|l| l.parse().ok())
                .map(Self::Zstd),
        }
    }
}

/// How log blocks are read from the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IoBackend {
    /// io_uring with one ring per thread; `multi_get` and scans submit whole batches
    /// (default; falls back to `Psync` with a warning where the kernel refuses rings).
    IoUring,
    /// `pread`, one blocking read at a time.
    Psync,
}

impl IoBackend {
    /// Parses `io_uring` or `psync`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "io_uring" | "iouring" | "uring" => Some(Self::IoUring),
            "psync" | "pread" => Some(Self::Psync),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::IoUring => "io_uring",
            Self::Psync => "psync",
        }
    }
}

/// When an acknowledged write is durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Durability {
    /// Every write returns after `fdatasync` (shared by concurrent writers: group commit).
    SyncEveryWrite,
    /// A background thread syncs every N milliseconds.
    SyncEveryMs(u64),
    /// Durable only after [`crate::Db::sync`] / [`crate::Db::flush`] or close.
    NoSync,
}

/// Options for [`crate::Db::open`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Options {
    /// Size at which the tail log segment is sealed and a new one started.
    pub segment_size: u64,
    /// Target uncompressed size of a log block.
    pub block_size: usize,
    /// Block compression.
    pub compression: Compression,
    /// Durability of acknowledged writes.
    pub durability: Durability,
    /// GC's target fill (Magma's `PctUsed`): segments are collected so that live data
    /// fills about this percentage of the log. Space-amp ≈ 100/target, GC write-amp ≈
    /// 100/(100-target). Range 10..=95. The default, 65, keeps a sustained overwrite's
    /// directory under 2x the user data once the garbage index merges have not found
    /// yet is added (see the engine's README).
    pub target_fill_pct: u8,
    /// Upper bound on memory the engine keeps: write cache (memtable), block and index caches.
    pub memory_budget: u64,
    /// Use O_DIRECT for segment and index files (falls back to buffered IO where refused).
    pub direct_io: bool,
    /// Read backend for log blocks.
    pub io_backend: IoBackend,
    /// How long a thread waiting for an io_uring read polls its completion queue
    /// before it sleeps, in microseconds (0: always sleep). Polling trades CPU for
    /// latency: a QD1 read skips the wake-up; one thread per two cores polls at a time.
    pub read_poll_micros: u64,
    /// Put each block the log writer seals into the block cache (RocksDB's
    /// `prepopulate_block_cache`). Helps a workload that reads what it has just
    /// written; costs a copy per block, and written blocks then evict read-hot ones.
    pub cache_writes: bool,
    /// At open, load index blocks into the index cache in large sequential reads (as
    /// far as it has room), in the background, so that the first point reads do not
    /// each wait for an index read (RocksDB's `prefetch_index_and_filter_in_cache`);
    /// likewise each merge's output while reads run, so lookups after a merge do not.
    #[serde(default = "yes")]
    pub warm_index_cache: bool,
    /// Retired segment files kept for reuse by new segments (RocksDB's
    /// `recycle_log_file_num`). A synced write into a reused file overwrites blocks
    /// already allocated and written, so `fdatasync` commits no file-system metadata;
    /// each kept file costs up to `segment_size` of disk. 0: delete retired segments.
    #[serde(default = "default_recycle")]
    pub recycle_segments: usize,
    /// Flush the write cache once no write has come for this many milliseconds, if it
    /// holds a delete or began in an earlier log segment than the tail, so that GC can
    /// reclaim what was deleted or overwritten without waiting for more writes (and a
    /// restart replays less log). 0: only when full.
    #[serde(default = "default_idle_flush_ms")]
    pub idle_flush_ms: u64,
    /// Run garbage collection in a background thread.
    pub background_gc: bool,
    /// Create the data directory when missing.
    pub create_if_missing: bool,
}

fn yes() -> bool {
    true
}

fn default_idle_flush_ms() -> u64 {
    DEFAULT_IDLE_FLUSH_MS
}

/// Default [`Options::idle_flush_ms`].
pub const DEFAULT_IDLE_FLUSH_MS: u64 = 2000;

fn default_recycle() -> usize {
    DEFAULT_RECYCLE_SEGMENTS
}

/// Default [`Options::recycle_segments`]: enough that a new segment nearly always finds
/// a file, as GC retires at least one segment per segment written once it runs.
pub const DEFAULT_RECYCLE_SEGMENTS: usize = 2;

/// Default read polling budget: longer than an NVMe 4 KiB read (about 80 µs), so a
/// point read rarely sleeps, short enough that a slow read wastes little CPU.
pub const DEFAULT_READ_POLL_MICROS: u64 = 200;
/// Longest read polling budget accepted.
pub const MAX_READ_POLL_MICROS: u64 = 10_000;

impl Default for Options {
    fn default() -> Self {
        Options {
            segment_size: 64 << 20,
            block_size: 16 << 10,
            compression: Compression::Lz4,
            durability: Durability::SyncEveryWrite,
            target_fill_pct: 65,
            memory_budget: 256 << 20,
            direct_io: true,
            io_backend: IoBackend::IoUring,
            read_poll_micros: DEFAULT_READ_POLL_MICROS,
            cache_writes: false,
            warm_index_cache: true,
            recycle_segments: DEFAULT_RECYCLE_SEGMENTS,
            idle_flush_ms: DEFAULT_IDLE_FLUSH_MS,
            background_gc: true,
            create_if_missing: true,
        }
    }
}

impl Options {
    /// Checks ranges; returns a clear error for nonsense values.
    pub fn validate(&self) -> crate::Result<()> {
        let bad = |m: String| Err(crate::Error::InvalidArgument(m));
        if self.segment_size < (64 << 10) || self.segment_size > (1 << 32) - (1 << 20) {
            return bad(format!(
                "segment_size {} must be between 64 KiB and 4095 MiB",
                self.segment_size
            ));
        }
        if self.block_size < 512 || self.block_size > (1 << 20) {
            return bad(format!(
                "block_size {} must be between 512 B and 1 MiB",
                self.block_size
            ));
        }
        if !(10..=95).contains(&self.target_fill_pct) {
            return bad(format!(
                "target_fill_pct {} must be between 10 and 95",
                self.target_fill_pct
            ));
        }
        if self.memory_budget < (8 << 20) {
            return bad(format!(
                "memory_budget {} must be at least 8 MiB",
                self.memory_budget
            ));
        }
        if self.read_poll_micros > MAX_READ_POLL_MICROS {
            return bad(format!(
                "read_poll_micros {} must be at most {MAX_READ_POLL_MICROS} (10 ms)",
                self.read_poll_micros
            ));
        }
        if let Compression::Zstd(l) = self.compression {
            if !(1..=22).contains(&l) {
                return bad(format!("zstd level {l} must be between 1 and 22"));
            }
        }
        Ok(())
    }

    /// Options for the crate's unit tests: a `budget`-byte memory budget, no syncing,
    /// no background GC and no compression, so a test drives flushes and GC itself.
    #[cfg(test)]
    pub(crate) fn for_unit_test(budget: u64) -> Options {
        Options {
            memory_budget: budget,
            durability: Durability::NoSync,
            background_gc: false,
            compression: Compression::None,
            ..Options::default()
        }
    }

    /// Bytes of the memory budget given to the write cache (memtables): a quarter of
    /// it, but half of a small budget (up to 8 MiB), and at most 256 MiB. A quarter of
    /// db_bench's default 8 MiB made 680 KiB memtables, ~100 flushes a second and a
    /// flush stall of half the time in fillrandom; what the write cache does not hold
    /// is lent to the caches, so reads lose little.
    pub(crate) fn write_cache_bytes(&self) -> u64 {
        (self.memory_budget / 4)
            .max((self.memory_budget / 2).min(8 << 20))
            .min(256 << 20)
    }

    /// Bytes left for the block and index caches once `write_reserved` bytes of the
    /// write cache and `pinned` bytes (bloom filters, run block indexes, garbage map)
    /// are taken out; at least 1 MiB.
    pub(crate) fn cache_bytes(&self, pinned: u64, write_reserved: u64) -> u64 {
        self.memory_budget
            .saturating_sub(write_reserved + pinned)
            .max(1 << 20)
    }
}

#[cfg(test)]
mod tests {
    use super::Options;

    #[test]
    fn the_write_cache_is_half_of_a_small_budget_and_a_quarter_of_a_large_one() {
        let wc = |mib: u64| {
            let o = Options {
                memory_budget: mib << 20,
                ..Options::default()
            };
            o.write_cache_bytes() >> 20
        };
        assert_eq!(wc(8), 4, "db_bench's default --cache_size");
        assert_eq!(wc(16), 8);
        assert_eq!(wc(24), 8);
        assert_eq!(wc(64), 16);
        assert_eq!(wc(1024), 256);
        assert_eq!(wc(4096), 256);
    }
}

//! The engine trait the benchmark drives. It is deliberately small so that the Basalt adapter
//! (`Db` + one `Collection`) and test engines map onto it one method to one call.

use std::path::PathBuf;
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EngineError(pub String);

impl EngineError {
    pub fn new(msg: impl Into<String>) -> Self {
        EngineError(msg.into())
    }
}

impl From<std::io::Error> for EngineError {
    fn from(e: std::io::Error) -> Self {
        EngineError(e.to_string())
    }
}

/// Key-value pairs returned by a scan, in scan order.
pub type KvPairs = Vec<(Vec<u8>, Vec<u8>)>;

/// Scan direction for [`KvEngine::scan_from`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Forward,
    Backward,
}

/// One operation of an atomic write batch.
#[derive(Debug, Clone, Copy)]
pub enum BatchOp<'a> {
    Put(&'a [u8], &'a [u8]),
    Delete(&'a [u8]),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Snappy,
    Lz4,
    Zstd,
    Zlib,
}

/// From `--sync` / `--disable_wal`: `--sync=1` → every write is durable before it returns;
/// `--disable_wal=1` → no durability until flush; otherwise the engine's periodic sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    SyncEveryWrite,
    Periodic,
    NoSync,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoBackend {
    IoUring,
    Psync,
}

/// What the benchmark asks of the engine when it opens it; built from the db_bench flags.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    pub path: PathBuf,
    /// Remove whatever is in `path` first (db_bench's fresh DB for fill steps).
    pub fresh: bool,
    pub compression: Compression,
    pub durability: Durability,
    /// GC's PctUsed target (`--target_fill`), `None` = engine default.
    pub target_fill_pct: Option<f64>,
    /// The engine's whole memory budget in bytes (`--cache_size` / `--memory_budget`).
    pub memory_budget: u64,
    pub direct_reads: bool,
    pub direct_writes: bool,
    pub io_backend: Option<IoBackend>,
    /// Microseconds an io_uring read polls before sleeping, `None` = engine default.
    pub read_poll_micros: Option<u64>,
    /// Warm the index cache at open (`--warm_index_cache`, Basalt only).
    pub warm_index_cache: bool,
    /// Log block size in bytes (`--block_size`), `None` = engine default.
    pub block_size: Option<usize>,
    /// Put blocks into the block cache as they are written (`--prepopulate_block_cache`).
    pub cache_writes: bool,
    /// Retired log files kept for reuse (`--recycle_log_file_num`), `None` = engine
    /// default.
    pub recycle_segments: Option<usize>,
}

/// Counters the report needs from the engine. Fields an engine cannot provide are `None`.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct EngineStats {
    pub user_bytes_written: Option<u64>,
    pub device_bytes_written: Option<u64>,
    pub live_bytes: Option<u64>,
    pub disk_bytes: Option<u64>,
    pub write_stall_micros: Option<u64>,
    /// Time since the engine was opened (denominator of the stall percentage).
    pub uptime_micros: Option<u64>,
    /// The engine's own full statistics, printed by the `stats` step.
    pub raw: serde_json::Value,
}

/// A key-value engine under test. All methods may be called from many threads at once.
pub trait KvEngine: Send + Sync {
    /// Short label used in reports: `basalt`, `memtest`, ...
    fn name(&self) -> &str;
    /// Human-readable version string, printed in the output header.
    fn version(&self) -> String;
    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), EngineError>;
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError>;
    fn delete(&self, key: &[u8]) -> Result<(), EngineError>;
    fn write_batch(&self, ops: &[BatchOp<'_>]) -> Result<(), EngineError>;
    fn multi_get(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>, EngineError>;
    /// Up to `limit` entries starting at the first key `>= start` (forward) or `<= start`
    /// (backward), in scan order.
    fn scan_from(&self, start: &[u8], limit: usize, dir: Direction)
        -> Result<KvPairs, EngineError>;
    fn flush(&self) -> Result<(), EngineError>;
    /// Block until background space reclamation (GC / compaction) has caught up.
    fn wait_for_gc(&self) -> Result<(), EngineError>;
    fn stats(&self) -> EngineStats;
    /// Make everything durable; called once when the benchmark run ends.
    fn close(&self) -> Result<(), EngineError>;
}

/// Opens engines; `basalt bench` gets one from the appliance, tests use the in-memory one.
pub trait EngineFactory: Send + Sync {
    fn open(&self, opts: &EngineOptions) -> Result<Arc<dyn KvEngine>, EngineError>;
}

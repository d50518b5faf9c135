//! gflags-style parsing of the db_bench flags `basalt bench` supports.
//!
//! Accepted forms, as gflags does: `--name=value`, `-name=value`, `--name value` (non-bool),
//! `--name` (bool true) and `--noname` (bool false). Dashes inside names equal underscores.
//! A flag that is not in [`FLAG_TABLE`] is an error naming it.

use crate::engine::{Compression, Durability, EngineOptions, IoBackend};
use crate::error::BenchError;
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Bool,
    Value,
}

/// Every flag the parser accepts (name, kind). db_bench names first, then Basalt-only ones.
const FLAG_TABLE: &[(&str, Kind)] = &[
    ("db", Kind::Value),
    ("benchmarks", Kind::Value),
    ("num", Kind::Value),
    ("reads", Kind::Value),
    ("writes", Kind::Value),
    ("duration", Kind::Value),
    ("threads", Kind::Value),
    ("key_size", Kind::Value),
    ("value_size", Kind::Value),
    ("compression_type", Kind::Value),
    ("compression_ratio", Kind::Value),
    ("use_direct_reads", Kind::Bool),
    ("use_direct_io_for_flush_and_compaction", Kind::Bool),
    ("sync", Kind::Bool),
    ("disable_wal", Kind::Bool),
    ("cache_size", Kind::Value),
    ("block_size", Kind::Value),
    ("prepopulate_block_cache", Kind::Value),
    ("recycle_log_file_num", Kind::Value),
    ("benchmark_write_rate_limit", Kind::Value),
    ("seed", Kind::Value),
    ("histogram", Kind::Bool),
    ("report_interval_seconds", Kind::Value),
    ("report_file", Kind::Value),
    ("use_existing_db", Kind::Bool),
    ("batch_size", Kind::Value),
    ("seek_nexts", Kind::Value),
    ("reverse_iterator", Kind::Bool),
    ("read_random_exp_range", Kind::Value),
    // Basalt-only
    ("target_fill", Kind::Value),
    ("io_backend", Kind::Value),
    ("read_poll_micros", Kind::Value),
    ("warm_index_cache", Kind::Value),
    ("memory_budget", Kind::Value),
    ("arrival_rate", Kind::Value),
    ("response_time_sla_us", Kind::Value),
    ("progress_interval_seconds", Kind::Value),
];

/// Parsed flags with db_bench 7.8's defaults.
#[derive(Debug, Clone)]
pub struct Flags {
    pub db: PathBuf,
    pub benchmarks: Vec<String>,
    pub num: u64,
    /// `--reads`; negative means `num`.
    pub reads: i64,
    /// `--writes`; negative means `num`.
    pub writes: i64,
    pub duration_secs: u64,
    pub threads: usize,
    pub key_size: usize,
    pub value_size: usize,
    pub compression: Compression,
    pub compression_name: String,
    pub compression_ratio: f64,
    pub use_direct_reads: bool,
    pub use_direct_io_for_flush_and_compaction: bool,
    pub sync: bool,
    pub disable_wal: bool,
    /// For Basalt the whole memory budget (bytes).
    pub cache_size: u64,
    /// `--block_size`: log block size for Basalt (RocksDB's data block size); `None`
    /// = the engine's default.
    pub block_size: Option<usize>,
    /// `--prepopulate_block_cache`: 1 puts blocks into the block cache as they are
    /// written (Basalt: every sealed log block), 0 (default) does not.
    pub prepopulate_block_cache: bool,
    /// `--recycle_log_file_num`: retired log segment files kept for reuse (RocksDB: WAL
    /// files); `None` = engine default.
    pub recycle_log_file_num: Option<usize>,
    /// Bytes per second for all writers together; 0 = unlimited.
    pub benchmark_write_rate_limit: u64,
    pub seed: u64,
    pub histogram: bool,
    pub report_interval_seconds: u64,
    pub report_file: PathBuf,
    pub use_existing_db: bool,
    pub batch_size: usize,
    pub seek_nexts: usize,
    pub reverse_iterator: bool,
    /// `--read_random_exp_range`: 0 reads keys uniformly; larger values skew the
    /// reads of readrandom, multireadrandom and readwhilewriting towards fewer keys
    /// (see [`crate::keys::exp_skewed`]).
    pub read_random_exp_range: f64,
    pub target_fill: Option<f64>,
    pub io_backend: Option<IoBackend>,
    /// Microseconds an io_uring read polls before sleeping (`None`: engine default).
    pub read_poll_micros: Option<u64>,
    /// `--warm_index_cache` (Basalt-only, default 1): 0 starts with a cold index cache.
    pub warm_index_cache: bool,
    /// Open-loop offered rate, operations per second for all threads together; 0 = closed loop.
    pub arrival_rate: f64,
    pub response_time_sla_us: u64,
    /// Period of the plain progress line when stderr is not a terminal; 0 = none.
    pub progress_interval_seconds: u64,
}

impl Default for Flags {
    fn default() -> Self {
        Flags {
            db: PathBuf::from("/tmp/basalt-bench-db"),
            benchmarks: vec!["fillseq".into(), "readrandom".into()],
            num: 1_000_000,
            reads: -1,
            writes: -1,
            duration_secs: 0,
            threads: 1,
            key_size: 16,
            value_size: 100,
            compression: Compression::Snappy,
            compression_name: "snappy".into(),
            compression_ratio: 0.5,
            use_direct_reads: false,
            use_direct_io_for_flush_and_compaction: false,
            sync: false,
            disable_wal: false,
            cache_size: 8 << 20,
            block_size: None,
            prepopulate_block_cache: false,
            recycle_log_file_num: None,
            benchmark_write_rate_limit: 0,
            seed: 0,
            histogram: false,
            report_interval_seconds: 0,
            report_file: PathBuf::from("report.csv"),
            use_existing_db: false,
            batch_size: 1,
            seek_nexts: 0,
            reverse_iterator: false,
            read_random_exp_range: 0.0,
            target_fill: None,
            io_backend: None,
            read_poll_micros: None,
            warm_index_cache: true,
            arrival_rate: 0.0,
            response_time_sla_us: 1000,
            progress_interval_seconds: 10,
        }
    }
}

fn parse_bool(flag: &str, v: &str) -> Result<bool, BenchError> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "true" | "t" | "yes" | "y" => Ok(true),
        "0" | "false" | "f" | "no" | "n" => Ok(false),
        _ => Err(bad(flag, v, "expected true/false/1/0")),
    }
}

/// An integer switch as db_bench takes it (`--flag=0|1`, no `true`/`false`).
fn zero_or_one(flag: &str, v: &str) -> Result<bool, BenchError> {
    match v {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(bad(flag, v, "expected 0 or 1")),
    }
}

fn bad(flag: &str, v: &str, reason: &str) -> BenchError {
    BenchError::BadFlagValue {
        flag: flag.to_string(),
        value: v.to_string(),
        reason: reason.to_string(),
    }
}

fn num<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, BenchError> {
    v.trim()
        .parse::<T>()
        .map_err(|_| bad(flag, v, "expected a number"))
}

fn lookup(name: &str) -> Option<Kind> {
    FLAG_TABLE.iter().find(|(n, _)| *n == name).map(|(_, k)| *k)
}

impl Flags {
    /// Parse db_bench-style arguments (without the program name).
    pub fn parse<S: AsRef<str>>(args: &[S]) -> Result<Flags, BenchError> {
        let mut f = Flags::default();
        let mut i = 0;
        while i < args.len() {
            let arg = args[i].as_ref();
            i += 1;
            let body = if let Some(b) = arg.strip_prefix("--") {
                b
            } else if let Some(b) = arg.strip_prefix('-') {
                b
            } else {
                return Err(BenchError::Positional(arg.to_string()));
            };
            if body.is_empty() {
                return Err(BenchError::Positional(arg.to_string()));
            }
            let (raw_name, inline_value) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (body, None),
            };
            let name = raw_name.replace('-', "_");
            let (name, kind, negated) = match lookup(&name) {
                Some(k) => (name, k, false),
                None => match name
                    .strip_prefix("no")
                    .and_then(|n| lookup(n).map(|k| (n, k)))
                {
                    Some((n, Kind::Bool)) if inline_value.is_none() => {
                        (n.to_string(), Kind::Bool, true)
                    }
                    _ => return Err(BenchError::UnknownFlag(format!("--{raw_name}"))),
                },
            };
            let value = match (kind, inline_value) {
                (_, Some(v)) => v,
                (Kind::Bool, None) => if negated { "false" } else { "true" }.to_string(),
                (Kind::Value, None) => {
                    if i < args.len() && !args[i].as_ref().starts_with('-') {
                        i += 1;
                        args[i - 1].as_ref().to_string()
                    } else {
                        return Err(BenchError::MissingValue(name));
                    }
                }
            };
            f.set(&name, &value)?;
        }
        f.validate()?;
        Ok(f)
    }

    fn set(&mut self, name: &str, v: &str) -> Result<(), BenchError> {
        match name {
            "db" => self.db = PathBuf::from(v),
            "benchmarks" => {
                self.benchmarks = v
                    .split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect()
            }
            "num" => self.num = num(name, v)?,
            "reads" => self.reads = num(name, v)?,
            "writes" => self.writes = num(name, v)?,
            "duration" => self.duration_secs = num(name, v)?,
            "threads" => self.threads = num(name, v)?,
            "key_size" => self.key_size = num(name, v)?,
            "value_size" => self.value_size = num(name, v)?,
            "compression_type" => {
                self.compression = match v.to_ascii_lowercase().as_str() {
                    "none" | "no" => Compression::None,
                    "snappy" => Compression::Snappy,
                    "lz4" | "lz4hc" => Compression::Lz4,
                    "zstd" => Compression::Zstd,
                    "zlib" => Compression::Zlib,
                    _ => {
                        return Err(bad(
                            name,
                            v,
                            "expected none, snappy, lz4, lz4hc, zstd or zlib",
                        ))
                    }
                };
                self.compression_name = v.to_ascii_lowercase();
            }
            "compression_ratio" => self.compression_ratio = num(name, v)?,
            "use_direct_reads" => self.use_direct_reads = parse_bool(name, v)?,
            "use_direct_io_for_flush_and_compaction" => {
                self.use_direct_io_for_flush_and_compaction = parse_bool(name, v)?
            }
            "sync" => self.sync = parse_bool(name, v)?,
            "disable_wal" => self.disable_wal = parse_bool(name, v)?,
            "cache_size" | "memory_budget" => self.cache_size = num(name, v)?,
            "block_size" => self.block_size = Some(num(name, v)?),
            "prepopulate_block_cache" => self.prepopulate_block_cache = zero_or_one(name, v)?,
            "recycle_log_file_num" => self.recycle_log_file_num = Some(num(name, v)?),
            "benchmark_write_rate_limit" => self.benchmark_write_rate_limit = num(name, v)?,
            "seed" => self.seed = num(name, v)?,
            "histogram" => self.histogram = parse_bool(name, v)?,
            "report_interval_seconds" => self.report_interval_seconds = num(name, v)?,
            "report_file" => self.report_file = PathBuf::from(v),
            "use_existing_db" => self.use_existing_db = parse_bool(name, v)?,
            "batch_size" => self.batch_size = num(name, v)?,
            "seek_nexts" => self.seek_nexts = num(name, v)?,
            "reverse_iterator" => self.reverse_iterator = parse_bool(name, v)?,
            "read_random_exp_range" => {
                let r: f64 = num(name, v)?;
                if !(r.is_finite() && r >= 0.0) {
                    return Err(bad(name, v, "a number of 0 or more"));
                }
                self.read_random_exp_range = r
            }
            "target_fill" => {
                let p: f64 = num(name, v)?;
                if !(1.0..=99.0).contains(&p) {
                    return Err(bad(name, v, "a percentage between 1 and 99"));
                }
                self.target_fill = Some(p)
            }
            "io_backend" => {
                self.io_backend = Some(match v {
                    "io_uring" => IoBackend::IoUring,
                    "psync" => IoBackend::Psync,
                    _ => return Err(bad(name, v, "expected io_uring or psync")),
                })
            }
            "read_poll_micros" => self.read_poll_micros = Some(num(name, v)?),
            "warm_index_cache" => self.warm_index_cache = zero_or_one(name, v)?,
            "arrival_rate" => self.arrival_rate = num(name, v)?,
            "response_time_sla_us" => self.response_time_sla_us = num(name, v)?,
            "progress_interval_seconds" => self.progress_interval_seconds = num(name, v)?,
            other => return Err(BenchError::UnknownFlag(format!("--{other}"))),
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), BenchError> {
        if self.threads == 0 {
            return Err(bad("threads", "0", "at least 1 thread"));
        }
        if self.key_size == 0 {
            return Err(bad("key_size", "0", "keys need at least 1 byte"));
        }
        if self.batch_size == 0 {
            return Err(bad("batch_size", "0", "at least 1"));
        }
        if !(self.compression_ratio > 0.0 && self.compression_ratio <= 1.0) {
            return Err(bad(
                "compression_ratio",
                &self.compression_ratio.to_string(),
                "must be in (0, 1]",
            ));
        }
        if self.arrival_rate < 0.0 || !self.arrival_rate.is_finite() {
            return Err(bad(
                "arrival_rate",
                &self.arrival_rate.to_string(),
                "must be >= 0",
            ));
        }
        for b in &self.benchmarks {
            crate::steps::StepKind::from_name(b, self)?;
        }
        Ok(())
    }

    pub fn reads(&self) -> u64 {
        if self.reads < 0 {
            self.num
        } else {
            self.reads as u64
        }
    }

    pub fn writes(&self) -> u64 {
        if self.writes < 0 {
            self.num
        } else {
            self.writes as u64
        }
    }

    pub fn durability(&self) -> Durability {
        if self.sync {
            Durability::SyncEveryWrite
        } else if self.disable_wal {
            Durability::NoSync
        } else {
            Durability::Periodic
        }
    }

    pub fn engine_options(&self, fresh: bool) -> EngineOptions {
        EngineOptions {
            path: self.db.clone(),
            fresh,
            compression: self.compression,
            durability: self.durability(),
            target_fill_pct: self.target_fill,
            memory_budget: self.cache_size,
            direct_reads: self.use_direct_reads,
            direct_writes: self.use_direct_io_for_flush_and_compaction,
            io_backend: self.io_backend,
            read_poll_micros: self.read_poll_micros,
            warm_index_cache: self.warm_index_cache,
            block_size: self.block_size,
            cache_writes: self.prepopulate_block_cache,
            recycle_segments: self.recycle_log_file_num,
        }
    }

    /// Names of all accepted flags (for help text and docs).
    pub fn known_flags() -> impl Iterator<Item = &'static str> {
        FLAG_TABLE.iter().map(|(n, _)| *n)
    }
}

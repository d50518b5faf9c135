//! Basalt bench: a db_bench-compatible benchmark driver (`basalt bench`), an open-loop load
//! mode, and `basalt bench compare`, which runs a suite against Basalt, RocksDB's `db_bench`
//! and `fio` as separate processes and writes a report (TSV, Markdown, HTML with SVG charts).
//!
//! Entry points for the `basalt` binary: [`run_bench`] and [`run_compare`].

pub mod basalt_adapter;
pub mod compare;
pub mod db_bench;
pub mod engine;
pub mod error;
pub mod fio;
pub mod flags;
pub mod histogram;
pub mod keys;
pub mod machine;
pub mod mem_engine;
pub mod output;
pub mod proc_stats;
pub mod progress;
pub mod report;
pub mod runner;
pub mod steps;

pub use compare::{run_compare, CompareArgs, Suite};
pub use engine::{
    BatchOp, Compression, Direction, Durability, EngineError, EngineFactory, EngineOptions,
    EngineStats, IoBackend, KvEngine,
};
pub use error::BenchError;
pub use flags::Flags;
pub use runner::{run_bench, run_benchmarks, StepReport};

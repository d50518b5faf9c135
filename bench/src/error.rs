//! The one error type of the crate: every message names what was wrong (flag, tool, file).

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("unknown flag '{0}': not a db_bench flag supported by basalt bench (see bench/README.md for the list)")]
    UnknownFlag(String),
    #[error("invalid value '{value}' for flag --{flag}: {reason}")]
    BadFlagValue {
        flag: String,
        value: String,
        reason: String,
    },
    #[error("flag --{0} needs a value (use --{0}=VALUE)")]
    MissingValue(String),
    #[error("unexpected argument '{0}': db_bench flags look like --name=value")]
    Positional(String),
    #[error("unknown benchmark '{0}' in --benchmarks")]
    UnknownBenchmark(String),
    #[error("engine error: {0}")]
    Engine(#[from] crate::engine::EngineError),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("malformed output from {tool}: {detail}")]
    MalformedOutput { tool: String, detail: String },
    #[error("{tool} failed: {detail}")]
    ToolFailed { tool: String, detail: String },
    #[error("unknown suite '{0}' (known: quick, standard)")]
    UnknownSuite(String),
    #[error("chart rendering failed for {path}: {detail}")]
    Chart { path: PathBuf, detail: String },
}

impl BenchError {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        BenchError::Io {
            context: context.into(),
            source,
        }
    }
    pub fn malformed(tool: impl Into<String>, detail: impl Into<String>) -> Self {
        BenchError::MalformedOutput {
            tool: tool.into(),
            detail: detail.into(),
        }
    }
}

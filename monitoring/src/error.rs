//! Error type shared by every part of the crate.

use std::path::PathBuf;

/// Everything that can go wrong while collecting, evaluating, storing or serving health data.
#[derive(Debug, thiserror::Error)]
pub enum MonitoringError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Input that is not the JSON we expect (truncated, empty, wrong shape).
    #[error("{what}: {message}")]
    Parse { what: String, message: String },
    /// An external tool (smartctl, nvme) is missing, was denied, or reported an error.
    #[error("{tool} on {device}: {message}")]
    Tool {
        tool: String,
        device: String,
        message: String,
    },
    /// The configuration file is invalid.
    #[error("config {path}: {message}")]
    Config { path: PathBuf, message: String },
    /// Writing output failed.
    #[error("output: {0}")]
    Output(#[from] std::io::Error),
}

impl MonitoringError {
    /// Shorthand for a [`MonitoringError::Io`].
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        MonitoringError::Io {
            path: path.into(),
            source,
        }
    }

    /// Shorthand for a [`MonitoringError::Parse`].
    pub fn parse(what: impl Into<String>, message: impl std::fmt::Display) -> Self {
        MonitoringError::Parse {
            what: what.into(),
            message: message.to_string(),
        }
    }
}

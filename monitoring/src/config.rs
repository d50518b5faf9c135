//! `monitoring.toml`: rule thresholds, alerts, rated TBW, history retention and sampling.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::alerts::AlertConfig;
use crate::error::MonitoringError;
use crate::history::Retention;
use crate::rules::RuleConfig;

/// The whole monitoring configuration; every section and key is optional.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct MonitoringConfig {
    pub rules: RuleConfig,
    pub alerts: AlertConfig,
    pub history: HistoryConfig,
    /// Rated endurance in terabytes (10^12 bytes), keyed by exact model name or serial number;
    /// overrides the built-in table.
    pub tbw: BTreeMap<String, f64>,
}

/// Sampling and storage of history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HistoryConfig {
    /// Where the file-backed store keeps its JSON-lines files.
    pub dir: PathBuf,
    pub interval_secs: u64,
    #[serde(flatten)]
    pub retention: Retention,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig {
            dir: PathBuf::from("/var/lib/basalt/monitoring"),
            interval_secs: 60,
            retention: Retention::default(),
        }
    }
}

impl MonitoringConfig {
    /// Parses TOML text.
    pub fn from_toml(text: &str, path: &Path) -> Result<Self, MonitoringError> {
        toml::from_str(text).map_err(|e| MonitoringError::Config {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
    }

    /// Reads and parses a TOML file.
    pub fn load(path: &Path) -> Result<Self, MonitoringError> {
        let text = std::fs::read_to_string(path).map_err(|e| MonitoringError::io(path, e))?;
        Self::from_toml(&text, path)
    }

    /// Rated TBW in bytes for a device: config (by serial, then model), then built-in table.
    pub fn rated_tbw_bytes(&self, model: Option<&str>, serial: Option<&str>) -> Option<f64> {
        let from_cfg = serial
            .and_then(|s| self.tbw.get(s))
            .or_else(|| model.and_then(|m| self.tbw.get(m)));
        from_cfg
            .copied()
            .or_else(|| model.and_then(crate::tbw::builtin_tbw_tb))
            .map(|tb| tb * 1e12)
    }
}

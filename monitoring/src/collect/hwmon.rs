//! CPU and other temperatures from `/sys/class/hwmon` (k10temp, coretemp, nvme, …).

use std::fs;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::MonitoringError;

/// One temperature sensor reading.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SensorReading {
    /// hwmon chip name (`k10temp`, `coretemp`, `nvme`, …).
    pub chip: String,
    /// Sensor label (`Tctl`, `Package id 0`, `Composite`), or `tempN` when unlabelled.
    pub sensor: String,
    pub temperature_c: f64,
    pub max_c: Option<f64>,
    pub crit_c: Option<f64>,
}

/// Chips that measure the CPU package or cores.
pub fn is_cpu_chip(chip: &str) -> bool {
    matches!(
        chip,
        "k10temp" | "coretemp" | "zenpower" | "cpu_thermal" | "via_cputemp" | "k8temp"
    )
}

fn read_milli(path: &Path) -> Option<f64> {
    let s = fs::read_to_string(path).ok()?;
    let v: i64 = s.trim().parse().ok()?;
    Some(v as f64 / 1000.0)
}

/// Reads every `tempN_input` under `root` (normally `/sys/class/hwmon`). Unreadable sensors are
/// skipped; a missing root gives an empty list (machines without hwmon, containers).
pub fn read_hwmon(root: &Path) -> Vec<SensorReading> {
    let Ok(entries) = fs::read_dir(root) else {
        tracing::debug!(root = %root.display(), "no hwmon directory");
        return Vec::new();
    };
    let mut dirs: Vec<_> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
    dirs.sort();
    let mut out = Vec::new();
    for dir in dirs {
        let chip = fs::read_to_string(dir.join("name"))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| {
                dir.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            });
        let Ok(files) = fs::read_dir(&dir) else {
            continue;
        };
        let mut indices: Vec<u32> = files
            .filter_map(|f| f.ok())
            .filter_map(|f| {
                let name = f.file_name().to_string_lossy().into_owned();
                name.strip_prefix("temp")?
                    .strip_suffix("_input")?
                    .parse()
                    .ok()
            })
            .collect();
        indices.sort_unstable();
        for i in indices {
            let Some(t) = read_milli(&dir.join(format!("temp{i}_input"))) else {
                continue;
            };
            let sensor = fs::read_to_string(dir.join(format!("temp{i}_label")))
                .map(|s| s.trim().to_string())
                .ok()
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| format!("temp{i}"));
            out.push(SensorReading {
                chip: chip.clone(),
                sensor,
                temperature_c: t,
                max_c: read_milli(&dir.join(format!("temp{i}_max"))),
                crit_c: read_milli(&dir.join(format!("temp{i}_crit"))),
            });
        }
    }
    out
}

/// Parses a recorded hwmon snapshot: `{"sensors": [SensorReading…]}` or a bare list.
pub fn parse_recording(text: &str, what: &str) -> Result<Vec<SensorReading>, MonitoringError> {
    if text.trim().is_empty() {
        return Err(MonitoringError::parse(what, "empty input"));
    }
    let v: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| MonitoringError::parse(what, format!("invalid JSON: {e}")))?;
    let list = v.get("sensors").cloned().unwrap_or(v);
    serde_json::from_value(list)
        .map_err(|e| MonitoringError::parse(what, format!("not a hwmon recording: {e}")))
}

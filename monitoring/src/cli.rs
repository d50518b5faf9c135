//! `basalt health`: one collection pass, rules, then a table or JSON; exit code 0/1/2.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;

use crate::collect::{collect_all, hwmon::is_cpu_chip, CollectOptions};
use crate::config::MonitoringConfig;
use crate::error::MonitoringError;
use crate::record::{device_key, HealthRecord, HealthReport, Status};
use crate::rules::RuleConfig;
use crate::sampler::evaluate;

/// Arguments of `basalt health`.
#[derive(Debug, Clone, clap::Args)]
pub struct HealthArgs {
    /// Print `{"devices": [...]}` JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Read a recorded JSON file (smartctl -x, nvme smart-log/id-ctrl, hwmon) instead of running
    /// the tools; repeatable.
    #[arg(long = "from-json", value_name = "FILE")]
    pub from_json: Vec<PathBuf>,
    /// Query only this device (default: all devices smartctl finds); repeatable.
    #[arg(long = "device", value_name = "DEV")]
    pub devices: Vec<String>,
    /// Monitoring config (TOML) with rule thresholds.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// A previous `basalt health --json` output, for the "grew since last sample" rules.
    #[arg(long, value_name = "FILE")]
    pub previous: Option<PathBuf>,
    /// smartctl executable.
    #[arg(long, value_name = "PATH", default_value = "smartctl")]
    pub smartctl: String,
    /// nvme-cli executable.
    #[arg(long, value_name = "PATH", default_value = "nvme")]
    pub nvme: String,
    /// hwmon sysfs directory.
    #[arg(long, value_name = "DIR", default_value = "/sys/class/hwmon")]
    pub hwmon_root: PathBuf,
    /// Per-tool timeout in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    pub timeout: u64,
}

impl Default for HealthArgs {
    fn default() -> Self {
        HealthArgs {
            json: false,
            from_json: Vec::new(),
            devices: Vec::new(),
            config: None,
            previous: None,
            smartctl: "smartctl".into(),
            nvme: "nvme".into(),
            hwmon_root: PathBuf::from("/sys/class/hwmon"),
            timeout: 30,
        }
    }
}

impl HealthArgs {
    /// Collector options for these arguments.
    pub fn collect_options(&self) -> CollectOptions {
        CollectOptions {
            devices: self.devices.clone(),
            from_json: self.from_json.clone(),
            smartctl: self.smartctl.clone(),
            nvme: self.nvme.clone(),
            hwmon_root: self.hwmon_root.clone(),
            timeout: Duration::from_secs(self.timeout.max(1)),
        }
    }
}

fn load_previous(path: &PathBuf) -> Result<HashMap<String, HealthRecord>, MonitoringError> {
    let text = std::fs::read_to_string(path).map_err(|e| MonitoringError::io(path, e))?;
    let report: HealthReport = serde_json::from_str(&text).map_err(|e| {
        MonitoringError::parse(
            path.display().to_string(),
            format!("not a health report: {e}"),
        )
    })?;
    Ok(report
        .devices
        .into_iter()
        .map(|r| (device_key(&r.device).to_string(), r))
        .collect())
}

/// Runs `basalt health`, writing the table or JSON to `out`; returns the exit code
/// (0 all ok, 1 some warn, 2 some crit).
pub fn run_health(args: &HealthArgs, out: &mut dyn Write) -> Result<i32, MonitoringError> {
    let config = match &args.config {
        Some(p) => MonitoringConfig::load(p)?,
        None => MonitoringConfig::default(),
    };
    let previous = match &args.previous {
        Some(p) => load_previous(p)?,
        None => HashMap::new(),
    };
    let collection = collect_all(&args.collect_options());
    let report = HealthReport {
        devices: evaluate(&collection, &previous, &config.rules),
    };
    if args.json {
        let mut doc = json!({ "devices": report.devices });
        if !collection.sensors.is_empty() {
            doc["sensors"] = json!(collection.sensors);
        }
        if !collection.errors.is_empty() {
            doc["errors"] = json!(collection.errors);
        }
        serde_json::to_writer_pretty(&mut *out, &doc)
            .map_err(|e| MonitoringError::Output(e.into()))?;
        writeln!(out)?;
    } else {
        write_table(out, &report.devices, &config.rules)?;
        let cpu: Vec<_> = collection.sensors.iter().collect();
        if !cpu.is_empty() {
            writeln!(out)?;
            writeln!(out, "{:<12} {:<16} {:>8}", "CHIP", "SENSOR", "TEMP")?;
            for s in cpu {
                let tag = if is_cpu_chip(&s.chip) { " (cpu)" } else { "" };
                writeln!(
                    out,
                    "{:<12} {:<16} {:>6.1}°C{tag}",
                    s.chip, s.sensor, s.temperature_c
                )?;
            }
        }
        for e in &collection.errors {
            writeln!(out, "error: {e}")?;
        }
    }
    Ok(report.worst().exit_code())
}

/// Formats bytes with a decimal unit (`33.2 TB`).
pub fn human_bytes(b: u128) -> String {
    const UNITS: [&str; 6] = ["B", "kB", "MB", "GB", "TB", "PB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1000.0 && i + 1 < UNITS.len() {
        v /= 1000.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[i])
    }
}

fn opt<T: std::fmt::Display>(v: Option<T>, suffix: &str) -> String {
    v.map(|v| format!("{v}{suffix}"))
        .unwrap_or_else(|| "-".into())
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// Writes the terminal table of `basalt health`.
pub fn write_table(
    out: &mut dyn Write,
    records: &[HealthRecord],
    rules: &RuleConfig,
) -> std::io::Result<()> {
    if records.is_empty() {
        return writeln!(out, "no devices found");
    }
    writeln!(
        out,
        "{:<14} {:<5} {:<28} {:>5} {:>9} {:>5} {:>6} {:>9} {:>8} {:<6} REASONS",
        "DEVICE",
        "PROTO",
        "MODEL",
        "TEMP",
        "WARN/CRIT",
        "USED",
        "SPARE",
        "WRITTEN",
        "POWER-ON",
        "STATUS"
    )?;
    for r in records {
        let (w, c) = rules.temperature_thresholds(r);
        let proto = match r.protocol {
            Some(crate::record::Protocol::Nvme) => "nvme",
            Some(crate::record::Protocol::Ata) => "ata",
            None => "-",
        };
        let status = match r.status {
            Status::Ok => "OK",
            Status::Warn => "WARN",
            Status::Crit => "CRIT",
        };
        writeln!(
            out,
            "{:<14} {:<5} {:<28} {:>5} {:>9} {:>5} {:>6} {:>9} {:>8} {:<6} {}",
            truncate(&r.device, 14),
            proto,
            truncate(r.model.as_deref().unwrap_or("-"), 28),
            opt(r.temperature_c, "°C"),
            format!("{w}/{c}"),
            opt(r.percentage_used, "%"),
            opt(r.available_spare_pct, "%"),
            r.host_bytes_written
                .map(human_bytes)
                .unwrap_or_else(|| "-".into()),
            opt(r.power_on_hours, " h"),
            status,
            if r.reasons.is_empty() {
                "-".to_string()
            } else {
                r.reasons.join("; ")
            }
        )?;
    }
    Ok(())
}

//! Prometheus text exposition (format 0.0.4) of a snapshot, following smartctl_exporter and
//! node_exporter naming: base units, `_total` for counters, `_ratio` for 0–1 fractions.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde_json::Value;

use crate::collect::hwmon::is_cpu_chip;
use crate::record::HealthRecord;
use crate::sampler::Snapshot;

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn fmt_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        }
    } else {
        format!("{v}")
    }
}

/// Collects samples per metric family so each family's HELP/TYPE is printed once.
#[derive(Default)]
struct Families {
    order: Vec<String>,
    seen: std::collections::HashSet<String>,
    families: BTreeMap<String, (String, &'static str, Vec<String>)>,
}

impl Families {
    fn add(&mut self, name: &str, help: &str, kind: &'static str, labels: &[(&str, &str)], v: f64) {
        if !self.families.contains_key(name) {
            self.order.push(name.to_string());
            self.families
                .insert(name.to_string(), (help.to_string(), kind, Vec::new()));
        }
        let lbl = if labels.is_empty() {
            String::new()
        } else {
            let parts: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                .collect();
            format!("{{{}}}", parts.join(","))
        };
        // A series may appear once (engine stats keys can collide after sanitising).
        if !self.seen.insert(format!("{name}{lbl}")) {
            return;
        }
        if let Some(f) = self.families.get_mut(name) {
            f.2.push(format!("{name}{lbl} {}", fmt_value(v)));
        }
    }

    fn render(self) -> String {
        let mut out = String::new();
        for name in &self.order {
            let (help, kind, lines) = &self.families[name];
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for l in lines {
                let _ = writeln!(out, "{l}");
            }
        }
        out
    }
}

fn device_metrics(f: &mut Families, r: &HealthRecord) {
    let model = r.model.as_deref().unwrap_or("");
    let serial = r.serial.as_deref().unwrap_or("");
    let l: [(&str, &str); 3] = [("device", &r.device), ("model", model), ("serial", serial)];
    f.add(
        "basalt_ssd_info",
        "Device identity; always 1.",
        "gauge",
        &[
            ("device", &r.device),
            ("model", model),
            ("serial", serial),
            ("firmware", r.firmware.as_deref().unwrap_or("")),
            (
                "protocol",
                match r.protocol {
                    Some(crate::record::Protocol::Nvme) => "nvme",
                    Some(crate::record::Protocol::Ata) => "ata",
                    None => "",
                },
            ),
        ],
        1.0,
    );
    f.add(
        "basalt_ssd_status",
        "Health status from the rules: 0 ok, 1 warn, 2 crit.",
        "gauge",
        &l,
        r.status.exit_code() as f64,
    );
    let mut opt = |name: &str, help: &str, kind: &'static str, v: Option<f64>| {
        if let Some(v) = v {
            f.add(name, help, kind, &l, v);
        }
    };
    opt(
        "basalt_ssd_capacity_bytes",
        "User capacity in bytes.",
        "gauge",
        r.capacity_bytes.map(|v| v as f64),
    );
    opt(
        "basalt_ssd_temperature_celsius",
        "Current composite temperature.",
        "gauge",
        r.temperature_c.map(|v| v as f64),
    );
    opt(
        "basalt_ssd_temperature_warning_celsius",
        "Drive-reported warning temperature (WCTEMP).",
        "gauge",
        r.temperature_warning_c.map(|v| v as f64),
    );
    opt(
        "basalt_ssd_temperature_critical_celsius",
        "Drive-reported critical temperature (CCTEMP).",
        "gauge",
        r.temperature_critical_c.map(|v| v as f64),
    );
    opt(
        "basalt_ssd_percentage_used_ratio",
        "Vendor estimate of endurance used (1 = rated life reached).",
        "gauge",
        r.percentage_used.map(|v| v as f64 / 100.0),
    );
    opt(
        "basalt_ssd_available_spare_ratio",
        "Available spare capacity.",
        "gauge",
        r.available_spare_pct.map(|v| v as f64 / 100.0),
    );
    opt(
        "basalt_ssd_available_spare_threshold_ratio",
        "Available spare threshold.",
        "gauge",
        r.available_spare_threshold_pct.map(|v| v as f64 / 100.0),
    );
    opt(
        "basalt_ssd_critical_warning",
        "NVMe critical warning bit field (0 = none).",
        "gauge",
        r.critical_warning.map(|v| v as f64),
    );
    opt(
        "basalt_ssd_smart_passed",
        "SMART overall-health self-assessment (1 passed, 0 failed).",
        "gauge",
        r.smart_passed.map(|v| if v { 1.0 } else { 0.0 }),
    );
    opt(
        "basalt_ssd_media_errors_total",
        "Unrecovered media and data integrity errors.",
        "counter",
        r.media_errors.map(|v| v as f64),
    );
    opt(
        "basalt_ssd_error_log_entries_total",
        "Error information log entries.",
        "counter",
        r.error_log_entries.map(|v| v as f64),
    );
    opt(
        "basalt_ssd_bytes_written_total",
        "Bytes written by the host.",
        "counter",
        r.host_bytes_written.map(|v| v as f64),
    );
    opt(
        "basalt_ssd_bytes_read_total",
        "Bytes read by the host.",
        "counter",
        r.host_bytes_read.map(|v| v as f64),
    );
    opt(
        "basalt_ssd_power_on_seconds_total",
        "Power-on time.",
        "counter",
        r.power_on_hours.map(|v| v as f64 * 3600.0),
    );
    opt(
        "basalt_ssd_power_cycles_total",
        "Power cycles.",
        "counter",
        r.power_cycles.map(|v| v as f64),
    );
    opt(
        "basalt_ssd_unsafe_shutdowns_total",
        "Unsafe shutdowns.",
        "counter",
        r.unsafe_shutdowns.map(|v| v as f64),
    );
    opt(
        "basalt_ssd_warning_temperature_seconds_total",
        "Time above the warning composite temperature.",
        "counter",
        r.warning_temp_minutes.map(|v| v as f64 * 60.0),
    );
    opt(
        "basalt_ssd_critical_temperature_seconds_total",
        "Time above the critical composite temperature.",
        "counter",
        r.critical_temp_minutes.map(|v| v as f64 * 60.0),
    );
}

/// Turns a JSON key path into a metric-name fragment (`[a-z0-9_]`).
fn sanitize(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    while out.contains("__") {
        out = out.replace("__", "_");
    }
    out.trim_matches('_').to_string()
}

fn engine_metrics(f: &mut Families, prefix: &str, v: &Value) {
    match v {
        Value::Number(n) => {
            if let Some(x) = n.as_f64() {
                let name = format!("basalt_engine_{}", sanitize(prefix));
                if name.len() > "basalt_engine_".len() {
                    f.add(
                        &name,
                        &format!("Engine statistic `{prefix}`."),
                        "gauge",
                        &[],
                        x,
                    );
                }
            }
        }
        Value::Bool(b) => engine_metrics(f, prefix, &Value::from(u8::from(*b))),
        Value::Object(map) => {
            for (k, v) in map {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}_{k}")
                };
                engine_metrics(f, &p, v);
            }
        }
        _ => {}
    }
}

/// Renders the snapshot (and engine stats, whose JSON numbers become `basalt_engine_*` gauges).
pub fn render(snapshot: &Snapshot, engine_stats: Option<&Value>) -> String {
    let mut f = Families::default();
    for r in &snapshot.devices {
        device_metrics(&mut f, r);
    }
    for p in &snapshot.projections {
        if let Some(d) = p.end_of_life_date.and_then(|d| d.and_hms_opt(0, 0, 0)) {
            let r = snapshot.devices.iter().find(|r| r.device == p.device);
            let model = r.and_then(|r| r.model.as_deref()).unwrap_or("");
            let serial = r.and_then(|r| r.serial.as_deref()).unwrap_or("");
            f.add(
                "basalt_ssd_end_of_life_timestamp_seconds",
                "Projected date the device reaches 100% used or its rated TBW, whichever is first.",
                "gauge",
                &[("device", &p.device), ("model", model), ("serial", serial)],
                d.and_utc().timestamp() as f64,
            );
        }
        if let Some(b) = p.bytes_written_per_day {
            f.add(
                "basalt_ssd_bytes_written_per_day",
                "Host bytes written per day (trend or lifetime average).",
                "gauge",
                &[("device", &p.device)],
                b,
            );
        }
    }
    for s in &snapshot.sensors {
        if is_cpu_chip(&s.chip) {
            f.add(
                "basalt_cpu_temperature_celsius",
                "CPU temperature from hwmon.",
                "gauge",
                &[("chip", &s.chip), ("sensor", &s.sensor)],
                s.temperature_c,
            );
        } else {
            f.add(
                "basalt_hwmon_temperature_celsius",
                "Other hwmon temperature sensors.",
                "gauge",
                &[("chip", &s.chip), ("sensor", &s.sensor)],
                s.temperature_c,
            );
        }
    }
    if let Some(stats) = engine_stats {
        engine_metrics(&mut f, "", stats);
    }
    f.add(
        "basalt_monitoring_last_sample_timestamp_seconds",
        "When the last sample was taken.",
        "gauge",
        &[],
        snapshot.taken_at as f64,
    );
    f.add(
        "basalt_monitoring_collect_errors",
        "Devices or discovery steps that could not be read in the last sample.",
        "gauge",
        &[],
        snapshot.errors.len() as f64,
    );
    f.render()
}

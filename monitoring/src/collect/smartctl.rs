//! `smartctl --json=c -x DEV` (smartmontools ≥ 7.3) and `smartctl --scan-open --json`.

use std::time::Duration;

use serde_json::Value;

use super::ata_vendor::{attr, derive_wear, detect_vendor};
use super::command::run_tool;
use crate::error::MonitoringError;
use crate::num::{field_i64, field_str, field_u128, field_u32, field_u64};
use crate::record::{HealthRecord, Protocol, NVME_DATA_UNIT_BYTES};

/// smartctl exit-status bits 0 and 1: command line not parsed / device could not be opened.
const FATAL_EXIT_BITS: i64 = 0b11;

/// A device found by `smartctl --scan-open --json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScannedDevice {
    pub name: String,
    /// smartctl `-d` type (`nvme`, `sat`, `scsi`…), if reported.
    pub dev_type: Option<String>,
    pub protocol: Option<String>,
    /// Set when `--scan-open` could not open the device.
    pub open_error: Option<String>,
}

fn parse_json(text: &str, what: &str) -> Result<Value, MonitoringError> {
    if text.trim().is_empty() {
        return Err(MonitoringError::parse(what, "empty input"));
    }
    let v: Value = serde_json::from_str(text)
        .map_err(|e| MonitoringError::parse(what, format!("invalid JSON: {e}")))?;
    if !v.is_object() {
        return Err(MonitoringError::parse(what, "expected a JSON object"));
    }
    Ok(v)
}

/// smartctl's own error messages, joined.
fn messages(doc: &Value) -> Option<String> {
    let msgs: Vec<&str> = doc
        .pointer("/smartctl/messages")?
        .as_array()?
        .iter()
        .filter_map(|m| m.get("string").and_then(Value::as_str))
        .collect();
    (!msgs.is_empty()).then(|| msgs.join("; "))
}

/// Parses the output of `smartctl --scan-open --json`.
pub fn parse_scan(text: &str) -> Result<Vec<ScannedDevice>, MonitoringError> {
    let doc = parse_json(text, "smartctl --scan-open")?;
    let Some(devices) = doc.get("devices") else {
        if doc.get("smartctl").is_some() {
            return Ok(Vec::new());
        }
        return Err(MonitoringError::parse(
            "smartctl --scan-open",
            "not smartctl JSON (no `smartctl` or `devices` key)",
        ));
    };
    let arr = devices
        .as_array()
        .ok_or_else(|| MonitoringError::parse("smartctl --scan-open", "`devices` is not a list"))?;
    Ok(arr
        .iter()
        .filter_map(|d| {
            Some(ScannedDevice {
                name: field_str(d, "name")?,
                dev_type: field_str(d, "type"),
                protocol: field_str(d, "protocol"),
                open_error: field_str(d, "open_error"),
            })
        })
        .collect())
}

/// Parses `smartctl --json -x` output into a health record (rules not yet applied).
///
/// `source` names the device or file for error messages and is the device name when the JSON
/// has none. A smartctl run that could not open the device (exit bits 0–1) is an error carrying
/// smartctl's own message (e.g. "Permission denied").
pub fn parse_smartctl(text: &str, source: &str) -> Result<HealthRecord, MonitoringError> {
    let doc = parse_json(text, source)?;
    let Some(meta) = doc.get("smartctl") else {
        return Err(MonitoringError::parse(
            source,
            "not smartctl JSON (no `smartctl` key)",
        ));
    };
    let exit = field_i64(meta, "exit_status").unwrap_or(0);
    // The device is named in `device.name`; failed runs only have it as the last argv word.
    let device = doc
        .pointer("/device/name")
        .and_then(Value::as_str)
        .or_else(|| {
            let argv = meta.get("argv")?.as_array()?;
            let last = argv.last()?.as_str()?;
            (argv.len() > 1 && !last.starts_with('-')).then_some(last)
        })
        .unwrap_or(source)
        .to_string();
    if exit & FATAL_EXIT_BITS != 0 {
        return Err(MonitoringError::Tool {
            tool: "smartctl".into(),
            device,
            message: messages(&doc).unwrap_or_else(|| format!("exit status {exit}")),
        });
    }
    let mut r = HealthRecord::new(device);
    let dev_type = doc
        .pointer("/device/type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_ascii_lowercase();
    let protocol = doc
        .pointer("/device/protocol")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_ascii_lowercase();
    r.protocol = if protocol == "nvme" || dev_type.starts_with("nvme") {
        Some(Protocol::Nvme)
    } else if protocol == "ata" || dev_type == "ata" || dev_type.starts_with("sat") {
        Some(Protocol::Ata)
    } else {
        None
    };
    r.model = field_str(&doc, "model_name").or_else(|| field_str(&doc, "scsi_model_name"));
    r.serial = field_str(&doc, "serial_number");
    r.firmware = field_str(&doc, "firmware_version");
    r.capacity_bytes = field_u64(&doc, "nvme_total_capacity")
        .filter(|c| *c > 0)
        .or_else(|| doc.get("user_capacity").and_then(|c| field_u64(c, "bytes")));
    r.temperature_c = doc.get("temperature").and_then(|t| field_i64(t, "current"));
    r.power_on_hours = doc.get("power_on_time").and_then(|p| field_u64(p, "hours"));
    r.power_cycles = field_u64(&doc, "power_cycle_count");
    r.smart_passed = doc.pointer("/smart_status/passed").and_then(Value::as_bool);

    match r.protocol {
        Some(Protocol::Nvme) => fill_nvme(&doc, &mut r),
        Some(Protocol::Ata) => fill_ata(&doc, &mut r),
        None => {}
    }
    if r.temperature_c == Some(0) && !warmed_up(&doc) {
        r.temperature_c = None;
    }
    Ok(r)
}

/// Whether the drive ever recorded a temperature above 0 °C (`power_cycle_max`,
/// `lifetime_max`). A sensor that reads 0 now and never read more is not reporting (the
/// Crucial m4 fixture: current, attribute 194 and every maximum 0), not a drive at 0 °C.
fn warmed_up(doc: &Value) -> bool {
    doc.get("temperature").is_some_and(|t| {
        ["power_cycle_max", "lifetime_max"]
            .iter()
            .any(|k| field_i64(t, k).is_some_and(|v| v > 0))
    })
}

fn fill_nvme(doc: &Value, r: &mut HealthRecord) {
    let Some(log) = doc.get("nvme_smart_health_information_log") else {
        return;
    };
    r.critical_warning = field_u32(log, "critical_warning");
    if r.temperature_c.is_none() {
        r.temperature_c = field_i64(log, "temperature");
    }
    r.available_spare_pct = field_u32(log, "available_spare");
    r.available_spare_threshold_pct = field_u32(log, "available_spare_threshold");
    r.percentage_used = field_u32(log, "percentage_used");
    r.media_errors = field_u64(log, "media_errors");
    r.error_log_entries = field_u64(log, "num_err_log_entries");
    r.host_bytes_written =
        field_u128(log, "data_units_written").and_then(|u| u.checked_mul(NVME_DATA_UNIT_BYTES));
    r.host_bytes_read =
        field_u128(log, "data_units_read").and_then(|u| u.checked_mul(NVME_DATA_UNIT_BYTES));
    r.power_on_hours = r
        .power_on_hours
        .or_else(|| field_u64(log, "power_on_hours"));
    r.power_cycles = r.power_cycles.or_else(|| field_u64(log, "power_cycles"));
    r.unsafe_shutdowns = field_u64(log, "unsafe_shutdowns");
    r.warning_temp_minutes = field_u64(log, "warning_temp_time");
    r.critical_temp_minutes = field_u64(log, "critical_comp_time");
}

fn fill_ata(doc: &Value, r: &mut HealthRecord) {
    let family = field_str(doc, "model_family");
    let vendor = detect_vendor(family.as_deref(), r.model.as_deref());
    let lbs = field_u128(doc, "logical_block_size").unwrap_or(512);
    let wear = derive_wear(doc, vendor, lbs);
    r.percentage_used = wear.percentage_used;
    r.host_bytes_written = wear.host_bytes_written;
    r.host_bytes_read = wear.host_bytes_read;
    if let Some(t) = doc.get("temperature") {
        r.temperature_warning_c = field_i64(t, "op_limit_max").filter(|v| *v > 0);
        r.temperature_critical_c = field_i64(t, "limit_max").filter(|v| *v > 0);
    }
    if r.temperature_c.is_none() {
        // Attribute 194's raw string starts with the current temperature ("30 (Min/Max 24/40)").
        r.temperature_c = doc
            .pointer("/ata_smart_attributes/table")
            .and_then(Value::as_array)
            .and_then(|t| {
                t.iter()
                    .find(|a| a.get("id").and_then(Value::as_u64) == Some(194))
            })
            .and_then(|a| a.pointer("/raw/string"))
            .and_then(crate::num::value_i64);
    }
    r.media_errors = attr(doc, 187).and_then(|a| a.raw).map(|v| v as u64);
    r.unsafe_shutdowns = attr(doc, 192)
        .or_else(|| {
            matches!(
                vendor,
                super::ata_vendor::AtaVendor::CrucialMicron | super::ata_vendor::AtaVendor::Intel
            )
            .then(|| attr(doc, 174))
            .flatten()
        })
        .and_then(|a| a.raw)
        .and_then(|v| u64::try_from(v).ok());
    r.error_log_entries = doc
        .pointer("/ata_smart_error_log/extended/count")
        .or_else(|| doc.pointer("/ata_smart_error_log/summary/count"))
        .and_then(crate::num::value_u128)
        .and_then(|v| u64::try_from(v).ok());
}

/// Runs `smartctl --json=c -x [-d TYPE] DEV` and parses it.
pub fn collect(
    smartctl: &str,
    device: &str,
    dev_type: Option<&str>,
    timeout: Duration,
) -> Result<HealthRecord, MonitoringError> {
    let mut args = vec!["--json=c", "-x"];
    if let Some(t) = dev_type {
        args.push("-d");
        args.push(t);
    }
    args.push(device);
    let out = run_tool(smartctl, &args, device, timeout)?;
    if out.stdout.trim().is_empty() {
        return Err(MonitoringError::Tool {
            tool: "smartctl".into(),
            device: device.into(),
            message: format!("no output (exit {:?}): {}", out.status, out.stderr.trim()),
        });
    }
    parse_smartctl(&out.stdout, device)
}

/// Runs `smartctl --scan-open --json` and parses it.
pub fn scan(smartctl: &str, timeout: Duration) -> Result<Vec<ScannedDevice>, MonitoringError> {
    let out = run_tool(smartctl, &["--scan-open", "--json=c"], "(scan)", timeout)?;
    parse_scan(&out.stdout)
}

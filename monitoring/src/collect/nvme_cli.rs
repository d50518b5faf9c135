//! `nvme smart-log DEV -o json` and `nvme id-ctrl DEV -o json` (nvme-cli 2.x).
//!
//! nvme-cli reports temperatures in Kelvin, prints 128-bit counters as strings in some versions,
//! and prints `critical_warning` either as an integer or as an object of bits (with or without a
//! `value` member) depending on version. All of these are accepted.

use std::time::Duration;

use serde_json::Value;

use super::command::run_tool;
use crate::error::MonitoringError;
use crate::num::{field_str, field_u128, field_u32, field_u64, value_u128};
use crate::record::{HealthRecord, Protocol, NVME_DATA_UNIT_BYTES};

/// Bits of the NVMe critical warning byte, in the object form's member names.
const WARNING_BITS: [(&str, &[&str]); 6] = [
    ("available_spare", &["available_spare", "spare"]),
    ("temp_threshold", &["temp_threshold", "temperature"]),
    ("reliability_degraded", &["reliability_degraded"]),
    ("ro", &["ro", "read_only", "media_read_only"]),
    (
        "vmbu_failed",
        &["vmbu_failed", "volatile_memory_backup_failed"],
    ),
    ("pmr_ro", &["pmr_ro", "persistent_memory_region_unreliable"]),
];

fn parse_object(text: &str, what: &str) -> Result<Value, MonitoringError> {
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

fn first_u128(obj: &Value, keys: &[&str]) -> Option<u128> {
    keys.iter().find_map(|k| field_u128(obj, k))
}

fn first_u32(obj: &Value, keys: &[&str]) -> Option<u32> {
    keys.iter().find_map(|k| field_u32(obj, k))
}

/// Critical warning from an integer, a numeric string, or an object of bits.
pub fn critical_warning(v: &Value) -> Option<u32> {
    if let Value::Object(map) = v {
        if let Some(val) = map.get("value").and_then(value_u128) {
            return u32::try_from(val).ok();
        }
        let mut bits = 0u32;
        let mut seen = false;
        for (i, (_, names)) in WARNING_BITS.iter().enumerate() {
            if let Some(b) = names.iter().find_map(|n| map.get(*n)) {
                seen = true;
                let set = match b {
                    Value::Bool(b) => *b,
                    other => value_u128(other).unwrap_or(0) != 0,
                };
                if set {
                    bits |= 1 << i;
                }
            }
        }
        return seen.then_some(bits);
    }
    value_u128(v).and_then(|x| u32::try_from(x).ok())
}

/// Converts an nvme-cli temperature to °C: numbers are Kelvin, strings may carry a unit.
fn temperature_c(v: &Value) -> Option<i64> {
    if let Value::String(s) = v {
        let s = s.trim();
        let num: i64 = s
            .split(|c: char| !c.is_ascii_digit() && c != '-')
            .find(|t| !t.is_empty())?
            .parse()
            .ok()?;
        let celsius = s.ends_with('C') || s.ends_with("°C") || s.contains("Celsius");
        return Some(if celsius { num } else { num - 273 });
    }
    let k = value_u128(v)?;
    (k > 0).then(|| k as i64 - 273)
}

/// Parses `nvme smart-log -o json` for `device`.
pub fn parse_smart_log(text: &str, device: &str) -> Result<HealthRecord, MonitoringError> {
    let log = parse_object(text, device)?;
    if log.get("data_units_written").is_none() && log.get("critical_warning").is_none() {
        return Err(MonitoringError::parse(
            device,
            "not nvme smart-log JSON (no `critical_warning` or `data_units_written`)",
        ));
    }
    let mut r = HealthRecord::new(device);
    r.protocol = Some(Protocol::Nvme);
    r.critical_warning = log.get("critical_warning").and_then(critical_warning);
    r.temperature_c = log.get("temperature").and_then(temperature_c);
    r.available_spare_pct = first_u32(&log, &["avail_spare", "available_spare"]);
    r.available_spare_threshold_pct =
        first_u32(&log, &["spare_thresh", "available_spare_threshold"]);
    r.percentage_used = first_u32(&log, &["percent_used", "percentage_used"]);
    r.host_bytes_written =
        first_u128(&log, &["data_units_written"]).and_then(|u| u.checked_mul(NVME_DATA_UNIT_BYTES));
    r.host_bytes_read =
        first_u128(&log, &["data_units_read"]).and_then(|u| u.checked_mul(NVME_DATA_UNIT_BYTES));
    r.power_on_hours = field_u64(&log, "power_on_hours");
    r.power_cycles = field_u64(&log, "power_cycles");
    r.unsafe_shutdowns = field_u64(&log, "unsafe_shutdowns");
    r.media_errors = field_u64(&log, "media_errors");
    r.error_log_entries = field_u64(&log, "num_err_log_entries");
    r.warning_temp_minutes = field_u64(&log, "warning_temp_time");
    r.critical_temp_minutes = field_u64(&log, "critical_comp_time");
    Ok(r)
}

/// Parses `nvme id-ctrl -o json` for `device` (identity and WCTEMP/CCTEMP thresholds).
pub fn parse_id_ctrl(text: &str, device: &str) -> Result<HealthRecord, MonitoringError> {
    let id = parse_object(text, device)?;
    if id.get("mn").is_none() && id.get("wctemp").is_none() {
        return Err(MonitoringError::parse(
            device,
            "not nvme id-ctrl JSON (no `mn` or `wctemp`)",
        ));
    }
    let mut r = HealthRecord::new(device);
    r.protocol = Some(Protocol::Nvme);
    r.model = field_str(&id, "mn");
    r.serial = field_str(&id, "sn");
    r.firmware = field_str(&id, "fr");
    r.capacity_bytes = field_u64(&id, "tnvmcap").filter(|c| *c > 0);
    // 0 means "not reported" for both thresholds.
    r.temperature_warning_c = id.get("wctemp").and_then(temperature_c);
    r.temperature_critical_c = id.get("cctemp").and_then(temperature_c);
    Ok(r)
}

/// Runs `nvme smart-log DEV -o json`.
pub fn collect_smart_log(
    nvme: &str,
    device: &str,
    timeout: Duration,
) -> Result<HealthRecord, MonitoringError> {
    let out = run_tool(nvme, &["smart-log", device, "-o", "json"], device, timeout)?;
    if out.status != Some(0) {
        return Err(tool_failure(device, &out.stderr, out.status));
    }
    parse_smart_log(&out.stdout, device)
}

/// Runs `nvme id-ctrl DEV -o json`.
pub fn collect_id_ctrl(
    nvme: &str,
    device: &str,
    timeout: Duration,
) -> Result<HealthRecord, MonitoringError> {
    let out = run_tool(nvme, &["id-ctrl", device, "-o", "json"], device, timeout)?;
    if out.status != Some(0) {
        return Err(tool_failure(device, &out.stderr, out.status));
    }
    parse_id_ctrl(&out.stdout, device)
}

fn tool_failure(device: &str, stderr: &str, status: Option<i32>) -> MonitoringError {
    let first = stderr.lines().next().unwrap_or("").trim();
    MonitoringError::Tool {
        tool: "nvme".into(),
        device: device.into(),
        message: if first.is_empty() {
            format!("exit status {status:?}")
        } else {
            first.to_string()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn critical_warning_accepts_int_string_and_object_forms() {
        assert_eq!(critical_warning(&json!(4)), Some(4));
        assert_eq!(critical_warning(&json!("16")), Some(16));
        assert_eq!(
            critical_warning(&json!({"value": 2, "temp_threshold": 1})),
            Some(2)
        );
        assert_eq!(
            critical_warning(
                &json!({"available_spare": 0, "temp_threshold": 1, "reliability_degraded": 0, "ro": 1, "vmbu_failed": 0})
            ),
            Some(0b1010)
        );
        assert_eq!(critical_warning(&json!({"unrelated": 1})), None);
        assert_eq!(critical_warning(&json!(null)), None);
    }

    #[test]
    fn temperatures_convert_from_kelvin_and_respect_units() {
        assert_eq!(temperature_c(&json!(308)), Some(35));
        assert_eq!(temperature_c(&json!("308")), Some(35));
        assert_eq!(temperature_c(&json!("35 C")), Some(35));
        assert_eq!(temperature_c(&json!(0)), None);
        assert_eq!(temperature_c(&json!([1])), None);
    }
}

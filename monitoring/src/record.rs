//! The normalised per-device health record (`basalt health --json`, metrics, dashboard).

use serde::{Deserialize, Serialize};

/// Bytes in one NVMe "data unit" (1000 × 512-byte blocks).
pub const NVME_DATA_UNIT_BYTES: u128 = 512_000;

/// Transport/command set of a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Nvme,
    Ata,
}

/// Overall health verdict; ordered so that `max` gives the worst.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    #[default]
    Ok,
    Warn,
    Crit,
}

impl Status {
    /// Process exit code for `basalt health`: 0 ok, 1 warn, 2 crit.
    pub fn exit_code(self) -> i32 {
        match self {
            Status::Ok => 0,
            Status::Warn => 1,
            Status::Crit => 2,
        }
    }

    /// Lower-case name as used in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Crit => "crit",
        }
    }
}

/// One device's health, normalised across smartctl (NVMe and ATA) and nvme-cli.
/// Every value is `None` (JSON `null`) when the source did not report it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct HealthRecord {
    pub device: String,
    pub protocol: Option<Protocol>,
    pub model: Option<String>,
    pub serial: Option<String>,
    pub firmware: Option<String>,
    pub capacity_bytes: Option<u64>,
    pub temperature_c: Option<i64>,
    pub temperature_warning_c: Option<i64>,
    pub temperature_critical_c: Option<i64>,
    pub percentage_used: Option<u32>,
    pub available_spare_pct: Option<u32>,
    pub available_spare_threshold_pct: Option<u32>,
    pub critical_warning: Option<u32>,
    pub media_errors: Option<u64>,
    pub error_log_entries: Option<u64>,
    pub host_bytes_written: Option<u128>,
    pub host_bytes_read: Option<u128>,
    pub power_on_hours: Option<u64>,
    pub power_cycles: Option<u64>,
    pub unsafe_shutdowns: Option<u64>,
    pub warning_temp_minutes: Option<u64>,
    pub critical_temp_minutes: Option<u64>,
    pub smart_passed: Option<bool>,
    pub status: Status,
    pub reasons: Vec<String>,
}

impl HealthRecord {
    /// An empty record for `device` (all values unknown).
    pub fn new(device: impl Into<String>) -> Self {
        HealthRecord {
            device: device.into(),
            ..Default::default()
        }
    }

    /// True when the record carries no health value at all (only identity, or nothing).
    pub fn has_no_health_data(&self) -> bool {
        self.temperature_c.is_none()
            && self.percentage_used.is_none()
            && self.smart_passed.is_none()
            && self.critical_warning.is_none()
            && self.media_errors.is_none()
            && self.available_spare_pct.is_none()
    }

    /// Fills every `None` field of `self` from `other` (used to merge smartctl with nvme id-ctrl).
    pub fn fill_missing_from(&mut self, other: &HealthRecord) {
        macro_rules! fill {
            ($($f:ident),*) => { $( if self.$f.is_none() { self.$f = other.$f.clone(); } )* };
        }
        fill!(
            protocol,
            model,
            serial,
            firmware,
            capacity_bytes,
            temperature_c,
            temperature_warning_c,
            temperature_critical_c,
            percentage_used,
            available_spare_pct,
            available_spare_threshold_pct,
            critical_warning,
            media_errors,
            error_log_entries,
            host_bytes_written,
            host_bytes_read,
            power_on_hours,
            power_cycles,
            unsafe_shutdowns,
            warning_temp_minutes,
            critical_temp_minutes,
            smart_passed
        );
    }
}

/// The `basalt health --json` document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct HealthReport {
    pub devices: Vec<HealthRecord>,
}

impl HealthReport {
    /// Worst status over all devices (ok when there are none).
    pub fn worst(&self) -> Status {
        self.devices
            .iter()
            .map(|d| d.status)
            .max()
            .unwrap_or(Status::Ok)
    }
}

/// Normalises a device path for matching recordings (`/dev/nvme0` and `nvme0` are the same).
pub fn device_key(device: &str) -> &str {
    device.strip_prefix("/dev/").unwrap_or(device)
}

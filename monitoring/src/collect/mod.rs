//! Collectors: run smartctl / nvme-cli / read hwmon live, or replay recorded JSON files.

pub mod ata_vendor;
pub mod command;
pub mod hwmon;
pub mod nvme_cli;
pub mod smartctl;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::error::MonitoringError;
use crate::record::{device_key, HealthRecord, Protocol};
pub use hwmon::SensorReading;

/// Where and how to collect.
#[derive(Debug, Clone)]
pub struct CollectOptions {
    /// Devices to query; empty = discover with `smartctl --scan-open`.
    pub devices: Vec<String>,
    /// Recorded JSON files to replay instead of running tools (smartctl, nvme smart-log,
    /// nvme id-ctrl, `smartctl --scan-open`, hwmon recordings; the kind is detected from content).
    pub from_json: Vec<PathBuf>,
    pub smartctl: String,
    pub nvme: String,
    pub hwmon_root: PathBuf,
    pub timeout: Duration,
}

impl Default for CollectOptions {
    fn default() -> Self {
        CollectOptions {
            devices: Vec::new(),
            from_json: Vec::new(),
            smartctl: "smartctl".into(),
            nvme: "nvme".into(),
            hwmon_root: PathBuf::from("/sys/class/hwmon"),
            timeout: Duration::from_secs(30),
        }
    }
}

/// A device's record plus the collection error, if it could not be (fully) read.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceReading {
    pub record: HealthRecord,
    pub error: Option<String>,
}

/// Everything one collection pass produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Collection {
    pub devices: Vec<DeviceReading>,
    pub sensors: Vec<SensorReading>,
    /// Problems not tied to one device (e.g. discovery failed).
    pub errors: Vec<String>,
}

/// Kind of a recorded JSON file, detected from its content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordingKind {
    Smartctl,
    SmartctlScan,
    NvmeSmartLog,
    NvmeIdCtrl,
    NvmeBundle,
    Hwmon,
}

/// Detects which tool produced `doc`.
pub fn detect_kind(doc: &Value) -> Option<RecordingKind> {
    if let Some(meta) = doc.get("smartctl") {
        let scan_arg = meta.get("argv").and_then(Value::as_array).is_some_and(|a| {
            a.iter()
                .any(|x| matches!(x.as_str(), Some("--scan-open" | "--scan")))
        });
        return Some(if doc.get("devices").is_some() || scan_arg {
            RecordingKind::SmartctlScan
        } else {
            RecordingKind::Smartctl
        });
    }
    if doc.get("sensors").is_some()
        || doc
            .as_array()
            .is_some_and(|a| a.first().is_some_and(|s| s.get("chip").is_some()))
    {
        return Some(RecordingKind::Hwmon);
    }
    if doc.get("smart_log").is_some() || doc.get("id_ctrl").is_some() {
        return Some(RecordingKind::NvmeBundle);
    }
    if doc.get("mn").is_some() || doc.get("wctemp").is_some() {
        return Some(RecordingKind::NvmeIdCtrl);
    }
    if doc.get("data_units_written").is_some() || doc.get("critical_warning").is_some() {
        return Some(RecordingKind::NvmeSmartLog);
    }
    None
}

/// Device name for an nvme-cli recording without one: the file name up to the first dot,
/// so `nvme0.smart-log.json` and `nvme0.id-ctrl.json` both describe `/dev/nvme0`.
fn device_from_file_name(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name.split('.').next().unwrap_or(&name);
    format!("/dev/{stem}")
}

#[derive(Default)]
struct Merge {
    order: Vec<String>,
    primary: BTreeMap<String, HealthRecord>,
    extra: BTreeMap<String, Vec<HealthRecord>>,
    errors: BTreeMap<String, (String, String)>,
}

impl Merge {
    fn touch(&mut self, key: &str) {
        if !self.order.iter().any(|k| k == key) {
            self.order.push(key.to_string());
        }
    }
    /// A smartctl recording. Two recordings of the same device name (e.g. `/dev/sda` from two
    /// hosts) are different devices: the later ones are named `DEVICE#2`, `DEVICE#3`, ….
    fn primary(&mut self, mut r: HealthRecord) {
        let mut key = device_key(&r.device).to_string();
        if self.primary.contains_key(&key) {
            let base = r.device.clone();
            let n = (2..)
                .find(|n| !self.primary.contains_key(&format!("{key}#{n}")))
                .unwrap_or(2);
            r.device = format!("{base}#{n}");
            key = format!("{key}#{n}");
        }
        self.touch(&key);
        self.primary.insert(key, r);
    }
    fn extra(&mut self, r: HealthRecord) {
        let key = device_key(&r.device).to_string();
        self.touch(&key);
        self.extra.entry(key).or_default().push(r);
    }
    fn error(&mut self, device: &str, msg: String) {
        let key = device_key(device).to_string();
        self.touch(&key);
        self.errors.entry(key).or_insert((device.to_string(), msg));
    }
    fn finish(mut self) -> Vec<DeviceReading> {
        let mut out = Vec::new();
        for key in self.order {
            let extras = self.extra.remove(&key).unwrap_or_default();
            let error = self.errors.remove(&key);
            let mut record = match self.primary.remove(&key) {
                Some(r) => r,
                None => match (extras.first(), &error) {
                    (Some(first), _) => HealthRecord::new(first.device.clone()),
                    (None, Some((device, _))) => HealthRecord::new(device.clone()),
                    (None, None) => HealthRecord::new(format!("/dev/{key}")),
                },
            };
            for e in &extras {
                record.fill_missing_from(e);
            }
            let error = error.map(|(_, msg)| msg);
            if error.is_some() && !extras.is_empty() && !record.has_no_health_data() {
                // Another source filled in; keep the error visible in logs only.
                tracing::warn!(device = %record.device, error = ?error, "partial collection");
                out.push(DeviceReading {
                    record,
                    error: None,
                });
            } else {
                out.push(DeviceReading { record, error });
            }
        }
        out
    }
}

/// Replays recorded JSON files.
pub fn collect_recordings(files: &[PathBuf]) -> Collection {
    let mut merge = Merge::default();
    let mut sensors = Vec::new();
    let mut errors = Vec::new();
    for path in files {
        let shown = path.display().to_string();
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) => {
                merge.error(&shown, MonitoringError::io(path, e).to_string());
                continue;
            }
        };
        match replay_one(path, &text) {
            Ok(Replayed::Records(main, extras)) => {
                if let Some(m) = main {
                    merge.primary(*m);
                }
                for e in extras {
                    merge.extra(e);
                }
            }
            Ok(Replayed::Sensors(s)) => sensors.extend(s),
            Ok(Replayed::Scan(devs)) => {
                for d in devs {
                    if let Some(err) = d.open_error {
                        errors.push(format!("{}: {err}", d.name));
                    }
                }
            }
            Err(ReplayError { device, message }) => {
                merge.error(device.as_deref().unwrap_or(&shown), message)
            }
        }
    }
    Collection {
        devices: merge.finish(),
        sensors,
        errors,
    }
}

enum Replayed {
    Records(Option<Box<HealthRecord>>, Vec<HealthRecord>),
    Sensors(Vec<SensorReading>),
    Scan(Vec<smartctl::ScannedDevice>),
}

struct ReplayError {
    device: Option<String>,
    message: String,
}

fn replay_one(path: &Path, text: &str) -> Result<Replayed, ReplayError> {
    let shown = path.display().to_string();
    let plain = |e: MonitoringError| ReplayError {
        device: None,
        message: e.to_string(),
    };
    if text.trim().is_empty() {
        return Err(plain(MonitoringError::parse(&shown, "empty file")));
    }
    let doc: Value = serde_json::from_str(text).map_err(|e| {
        plain(MonitoringError::parse(
            &shown,
            format!("invalid JSON (truncated?): {e}"),
        ))
    })?;
    let kind = detect_kind(&doc).ok_or_else(|| {
        plain(MonitoringError::parse(
            &shown,
            "unrecognised recording (not smartctl, nvme-cli or hwmon JSON)",
        ))
    })?;
    match kind {
        RecordingKind::Smartctl => smartctl::parse_smartctl(text, &shown)
            .map(|r| Replayed::Records(Some(Box::new(r)), Vec::new()))
            .map_err(|e| ReplayError {
                device: match &e {
                    MonitoringError::Tool { device, .. } => Some(device.clone()),
                    _ => None,
                },
                message: e.to_string(),
            }),
        RecordingKind::SmartctlScan => smartctl::parse_scan(text)
            .map(Replayed::Scan)
            .map_err(plain),
        RecordingKind::Hwmon => hwmon::parse_recording(text, &shown)
            .map(Replayed::Sensors)
            .map_err(plain),
        RecordingKind::NvmeSmartLog => {
            let dev = device_from_file_name(path);
            nvme_cli::parse_smart_log(text, &dev)
                .map(|r| Replayed::Records(None, vec![r]))
                .map_err(plain)
        }
        RecordingKind::NvmeIdCtrl => {
            let dev = device_from_file_name(path);
            nvme_cli::parse_id_ctrl(text, &dev)
                .map(|r| Replayed::Records(None, vec![r]))
                .map_err(plain)
        }
        RecordingKind::NvmeBundle => {
            let dev = doc
                .get("device")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| device_from_file_name(path));
            let mut out = Vec::new();
            if let Some(log) = doc.get("smart_log") {
                out.push(nvme_cli::parse_smart_log(&log.to_string(), &dev).map_err(plain)?);
            }
            if let Some(id) = doc.get("id_ctrl") {
                out.push(nvme_cli::parse_id_ctrl(&id.to_string(), &dev).map_err(plain)?);
            }
            Ok(Replayed::Records(None, out))
        }
    }
}

/// Devices to query when smartctl cannot scan: NVMe controllers and SCSI/SATA disks from sysfs.
fn devices_from_sysfs() -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/sys/class/nvme") {
        for e in rd.flatten() {
            out.push((format!("/dev/{}", e.file_name().to_string_lossy()), None));
        }
    }
    if let Ok(rd) = std::fs::read_dir("/sys/block") {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.starts_with("sd") {
                out.push((format!("/dev/{n}"), None));
            }
        }
    }
    out.sort();
    out
}

/// Queries one device live: smartctl first, nvme-cli as fallback and for WCTEMP/CCTEMP.
pub fn collect_device(
    opts: &CollectOptions,
    device: &str,
    dev_type: Option<&str>,
) -> DeviceReading {
    let looks_nvme = device_key(device).starts_with("nvme") || dev_type == Some("nvme");
    let mut error = None;
    let mut record = match smartctl::collect(&opts.smartctl, device, dev_type, opts.timeout) {
        Ok(r) => Some(r),
        Err(e) => {
            error = Some(e.to_string());
            None
        }
    };
    if record.is_none() && looks_nvme {
        match nvme_cli::collect_smart_log(&opts.nvme, device, opts.timeout) {
            Ok(r) => {
                tracing::info!(device, "smartctl failed ({error:?}); using nvme smart-log");
                error = None;
                record = Some(r);
            }
            Err(e) => {
                error = Some(format!("{}; {e}", error.unwrap_or_default()));
            }
        }
    }
    let mut record = record.unwrap_or_else(|| HealthRecord::new(device));
    if record.protocol == Some(Protocol::Nvme) || (looks_nvme && error.is_none()) {
        match nvme_cli::collect_id_ctrl(&opts.nvme, device, opts.timeout) {
            Ok(id) => record.fill_missing_from(&id),
            Err(e) => tracing::debug!(device, "no WCTEMP/CCTEMP: {e}"),
        }
    }
    DeviceReading { record, error }
}

/// Collects every device (given or discovered) and every hwmon sensor, or replays recordings.
pub fn collect_all(opts: &CollectOptions) -> Collection {
    if !opts.from_json.is_empty() {
        let mut c = collect_recordings(&opts.from_json);
        if !opts.devices.is_empty() {
            c.devices.retain(|d| {
                opts.devices
                    .iter()
                    .any(|want| device_key(want) == device_key(&d.record.device))
            });
        }
        return c;
    }
    let mut errors = Vec::new();
    let targets: Vec<(String, Option<String>)> = if opts.devices.is_empty() {
        match smartctl::scan(&opts.smartctl, opts.timeout) {
            Ok(list) => list.into_iter().map(|d| (d.name, d.dev_type)).collect(),
            Err(e) => {
                errors.push(format!("device discovery: {e}"));
                devices_from_sysfs()
            }
        }
    } else {
        opts.devices.iter().map(|d| (d.clone(), None)).collect()
    };
    let devices = targets
        .iter()
        .map(|(d, t)| collect_device(opts, d, t.as_deref()))
        .collect();
    Collection {
        devices,
        sensors: hwmon::read_hwmon(&opts.hwmon_root),
        errors,
    }
}

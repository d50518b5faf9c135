//! nvme-cli 2.x recordings (synthetic, see testdata/README.md), hwmon sysfs trees and the
//! `smartctl --scan-open` recording.

use std::path::PathBuf;

use basalt_monitoring::collect::hwmon::{read_hwmon, SensorReading};
use basalt_monitoring::collect::smartctl::parse_scan;
use basalt_monitoring::collect::{collect_recordings, detect_kind, RecordingKind};
use basalt_monitoring::record::{HealthRecord, Status};
use basalt_monitoring::rules::RuleConfig;

fn testdata(p: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(p)
}

fn evaluated(files: &[&str]) -> Vec<HealthRecord> {
    let paths: Vec<PathBuf> = files.iter().map(|f| testdata(f)).collect();
    let c = collect_recordings(&paths);
    let rules = RuleConfig::default();
    c.devices
        .into_iter()
        .map(|d| {
            let mut r = d.record;
            rules.apply(&mut r, None, d.error.as_deref());
            r
        })
        .collect()
}

#[test]
fn smart_log_and_id_ctrl_of_the_same_device_merge_with_kelvin_thresholds() {
    let recs = evaluated(&[
        "nvme-cli/nvme3.smart-log.json",
        "nvme-cli/nvme3.id-ctrl.json",
    ]);
    assert_eq!(recs.len(), 1);
    let r = &recs[0];
    assert_eq!(r.device, "/dev/nvme3");
    assert_eq!(r.model.as_deref(), Some("Samsung SSD 980 PRO 1TB"));
    assert_eq!(r.serial.as_deref(), Some("S5GXNX0T000001A"));
    assert_eq!(r.firmware.as_deref(), Some("5B2QGXA7"));
    assert_eq!(r.capacity_bytes, Some(1_000_204_886_016));
    assert_eq!(r.temperature_c, Some(45)); // 318 K
    assert_eq!(r.temperature_warning_c, Some(82)); // 355 K
    assert_eq!(r.temperature_critical_c, Some(85)); // 358 K
    assert_eq!(r.percentage_used, Some(7));
    assert_eq!(r.available_spare_pct, Some(100));
    assert_eq!(r.available_spare_threshold_pct, Some(10));
    assert_eq!(r.host_bytes_written, Some(50_567_901_184_000)); // "98765432" units
    assert_eq!(r.host_bytes_read, Some(23_456_789u128 * 512_000));
    assert_eq!(r.error_log_entries, Some(12));
    assert_eq!(r.critical_warning, Some(0));
    assert_eq!(r.status, Status::Ok);
    assert!(r.reasons.is_empty(), "{:?}", r.reasons);
}

#[test]
fn object_critical_warning_and_drive_wctemp_make_a_hot_drive_crit() {
    let recs = evaluated(&[
        "nvme-cli/nvme5.smart-log.json",
        "nvme-cli/nvme5.id-ctrl.json",
    ]);
    let r = &recs[0];
    assert_eq!(r.device, "/dev/nvme5");
    assert_eq!(r.model.as_deref(), Some("WD_BLACK SN850X 2000GB"));
    assert_eq!(r.capacity_bytes, Some(2_000_398_934_016)); // tnvmcap as a string
    assert_eq!(r.critical_warning, Some(2));
    assert_eq!(r.temperature_c, Some(76));
    assert_eq!(r.temperature_warning_c, Some(70));
    assert_eq!(r.temperature_critical_c, Some(84));
    assert_eq!(r.warning_temp_minutes, Some(188));
    assert_eq!(r.critical_temp_minutes, Some(4));
    assert_eq!(r.status, Status::Crit);
    assert_eq!(
        r.reasons,
        vec![
            "critical_warning 2 (temperature threshold)".to_string(),
            "temperature 76°C >= warning 70°C".to_string()
        ]
    );
}

#[test]
fn bundle_with_all_numbers_as_strings_parses_and_warns_on_wear() {
    let recs = evaluated(&["nvme-cli/nvme7.bundle.json"]);
    let r = &recs[0];
    assert_eq!(r.device, "/dev/nvme7");
    assert_eq!(r.model.as_deref(), Some("INTEL SSDPE2KX010T8"));
    assert_eq!(r.temperature_c, Some(38));
    assert_eq!(r.percentage_used, Some(86));
    assert_eq!(r.available_spare_pct, Some(97));
    assert_eq!(r.critical_warning, Some(0));
    assert_eq!(r.host_bytes_written, Some(1_200_987_597_312_000));
    assert_eq!(r.power_on_hours, Some(38010));
    assert_eq!(r.status, Status::Warn);
    assert_eq!(r.reasons, vec!["percentage_used 86%".to_string()]);
}

#[test]
fn recording_kinds_are_detected_from_content() {
    for (file, kind) in [
        ("nvme-cli/nvme3.smart-log.json", RecordingKind::NvmeSmartLog),
        ("nvme-cli/nvme3.id-ctrl.json", RecordingKind::NvmeIdCtrl),
        ("nvme-cli/nvme7.bundle.json", RecordingKind::NvmeBundle),
        ("hwmon/hwmon.json", RecordingKind::Hwmon),
        ("smartctl/scan_open.json", RecordingKind::SmartctlScan),
        ("smartctl/scan_open_empty.json", RecordingKind::SmartctlScan),
        ("smartctl/permission_denied.json", RecordingKind::Smartctl),
    ] {
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(testdata(file)).unwrap()).unwrap();
        assert_eq!(detect_kind(&doc), Some(kind), "{file}");
    }
}

#[test]
fn scan_open_lists_devices_with_types_and_open_errors() {
    let devs =
        parse_scan(&std::fs::read_to_string(testdata("smartctl/scan_open.json")).unwrap()).unwrap();
    let names: Vec<_> = devs.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["/dev/nvme0", "/dev/sda", "/dev/sdb"]);
    assert_eq!(devs[1].dev_type.as_deref(), Some("sat"));
    assert_eq!(devs[2].open_error.as_deref(), Some("Permission denied"));
    let empty =
        parse_scan(&std::fs::read_to_string(testdata("smartctl/scan_open_empty.json")).unwrap())
            .unwrap();
    assert!(empty.is_empty());
}

#[test]
fn hwmon_recording_replays_cpu_and_nvme_sensors() {
    let c = collect_recordings(&[testdata("hwmon/hwmon.json")]);
    assert!(c.devices.is_empty());
    assert_eq!(c.sensors.len(), 5);
    assert_eq!(
        c.sensors[0],
        SensorReading {
            chip: "k10temp".into(),
            sensor: "Tctl".into(),
            temperature_c: 61.25,
            max_c: None,
            crit_c: None
        }
    );
}

#[test]
fn hwmon_sysfs_tree_is_read_with_labels_and_millidegrees() {
    let dir = tempfile::tempdir().unwrap();
    let k10 = dir.path().join("hwmon0");
    std::fs::create_dir(&k10).unwrap();
    std::fs::write(k10.join("name"), "k10temp\n").unwrap();
    std::fs::write(k10.join("temp1_input"), "61250\n").unwrap();
    std::fs::write(k10.join("temp1_label"), "Tctl\n").unwrap();
    std::fs::write(k10.join("temp3_input"), "55500\n").unwrap();
    std::fs::write(k10.join("temp3_label"), "Tccd1\n").unwrap();
    let nv = dir.path().join("hwmon1");
    std::fs::create_dir(&nv).unwrap();
    std::fs::write(nv.join("name"), "nvme\n").unwrap();
    std::fs::write(nv.join("temp1_input"), "44850\n").unwrap();
    std::fs::write(nv.join("temp1_crit"), "84850\n").unwrap();
    std::fs::write(nv.join("temp2_input"), "garbage\n").unwrap(); // skipped, no panic
    let got = read_hwmon(dir.path());
    let summary: Vec<(String, String, f64, Option<f64>)> = got
        .iter()
        .map(|s| (s.chip.clone(), s.sensor.clone(), s.temperature_c, s.crit_c))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("k10temp".into(), "Tctl".into(), 61.25, None),
            ("k10temp".into(), "Tccd1".into(), 55.5, None),
            ("nvme".into(), "temp1".into(), 44.85, Some(84.85)),
        ]
    );
    assert!(read_hwmon(&dir.path().join("missing")).is_empty());
}

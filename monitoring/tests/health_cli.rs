//! `basalt health`: JSON field names, table, exit codes, config and previous-sample rules.

use std::path::PathBuf;

use basalt_monitoring::cli::{run_health, HealthArgs};
use serde_json::Value;

fn shared(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/smart")
        .join(name)
}

fn testdata(p: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(p)
}

fn run(args: &HealthArgs) -> (i32, String) {
    let mut out = Vec::new();
    let code = run_health(args, &mut out).expect("run_health");
    (code, String::from_utf8(out).unwrap())
}

const FIELDS: [&str; 25] = [
    "device",
    "protocol",
    "model",
    "serial",
    "firmware",
    "capacity_bytes",
    "temperature_c",
    "temperature_warning_c",
    "temperature_critical_c",
    "percentage_used",
    "available_spare_pct",
    "available_spare_threshold_pct",
    "critical_warning",
    "media_errors",
    "error_log_entries",
    "host_bytes_written",
    "host_bytes_read",
    "power_on_hours",
    "power_cycles",
    "unsafe_shutdowns",
    "warning_temp_minutes",
    "critical_temp_minutes",
    "smart_passed",
    "status",
    "reasons",
];

#[test]
fn json_output_has_exactly_the_documented_fields_and_exit_2_on_crit() {
    let args = HealthArgs {
        json: true,
        from_json: vec![
            shared("scrutiny__samsung_970_evo_500gb_media_errors.json"),
            shared("scrutiny__kioxia_kcd61lul3t84_info_only.json"),
        ],
        ..Default::default()
    };
    let (code, out) = run(&args);
    assert_eq!(code, 2);
    let doc: Value = serde_json::from_str(&out).unwrap();
    let devices = doc["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2);
    for d in devices {
        let mut keys: Vec<&str> = d.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        let mut want = FIELDS.to_vec();
        want.sort_unstable();
        assert_eq!(keys, want);
    }
    assert_eq!(devices[0]["protocol"], "nvme");
    assert_eq!(devices[0]["status"], "crit");
    assert_eq!(devices[0]["host_bytes_written"], 33_588_269_056_000u64);
    assert_eq!(devices[0]["reasons"][0], "media_errors 7");
    // Unknown values are null, not zero.
    assert!(devices[1]["temperature_c"].is_null());
    assert!(devices[1]["percentage_used"].is_null());
    assert_eq!(devices[1]["status"], "warn");
}

#[test]
fn healthy_devices_exit_0_and_the_table_is_readable() {
    let args = HealthArgs {
        from_json: vec![
            shared("smartctl_exporter__crucial_p2_ct250p2ssd8.json"),
            shared("scrutiny__samsung_860_evo_500gb.json"),
            testdata("hwmon/hwmon.json"),
        ],
        ..Default::default()
    };
    let (code, out) = run(&args);
    assert_eq!(code, 0, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("DEVICE") && lines[0].contains("STATUS"),
        "{out}"
    );
    assert!(
        lines[1].contains("/dev/nvme0") && lines[1].contains("CT250P2SSD8"),
        "{out}"
    );
    assert!(
        lines[1].contains("26°C") && lines[1].contains("513.5 GB") && lines[1].contains("OK"),
        "{out}"
    );
    assert!(
        lines[2].contains("Samsung SSD 860 EVO 500GB") && lines[2].contains("19%"),
        "{out}"
    );
    assert!(
        out.contains("k10temp") && out.contains("61.2°C (cpu)"),
        "{out}"
    );
}

#[test]
fn warn_exits_1_and_device_filter_selects_devices() {
    let args = HealthArgs {
        json: true,
        from_json: vec![
            testdata("nvme-cli/nvme7.bundle.json"),
            testdata("nvme-cli/nvme5.smart-log.json"),
        ],
        devices: vec!["nvme7".into()],
        ..Default::default()
    };
    let (code, out) = run(&args);
    assert_eq!(code, 1, "{out}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["devices"].as_array().unwrap().len(), 1);
    assert_eq!(doc["devices"][0]["device"], "/dev/nvme7");
}

#[test]
fn config_file_thresholds_change_the_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("monitoring.toml");
    std::fs::write(&cfg, "[rules]\npercentage_used_warn = 50\n").unwrap();
    let mut args = HealthArgs {
        from_json: vec![shared(
            "smartctl_exporter__intel_p4510_ssdpe2kx010t8_pct_used_73.json",
        )],
        ..Default::default()
    };
    assert_eq!(run(&args).0, 0);
    args.config = Some(cfg.clone());
    let (code, out) = run(&args);
    assert_eq!(code, 1);
    assert!(out.contains("percentage_used 73%"), "{out}");

    std::fs::write(&cfg, "[rules]\nno_such_rule = 1\n").unwrap();
    let err = run_health(&args, &mut Vec::new()).unwrap_err().to_string();
    assert!(
        err.contains("monitoring.toml") && err.contains("no_such_rule"),
        "{err}"
    );
}

#[test]
fn growth_since_previous_sample_warns() {
    let dir = tempfile::tempdir().unwrap();
    let prev = dir.path().join("prev.json");
    let fixture = shared("telegraf__sabrent_rocket_4.0_1tb_smartctl74.json");
    let mut args = HealthArgs {
        json: true,
        from_json: vec![fixture],
        ..Default::default()
    };
    let (code, out) = run(&args);
    assert_eq!(code, 0);
    // The previous sample had fewer error-log entries and no warning-temperature minutes.
    let mut doc: Value = serde_json::from_str(&out).unwrap();
    doc["devices"][0]["error_log_entries"] = 4870.into();
    std::fs::write(&prev, doc.to_string()).unwrap();
    args.previous = Some(prev);
    let (code, out) = run(&args);
    assert_eq!(code, 1);
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        doc["devices"][0]["reasons"][0],
        "error_log_entries grew 4870 -> 4871"
    );
}

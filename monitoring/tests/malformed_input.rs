//! Bad input gives a clear error or a partial record with nulls, never a panic.

use std::path::PathBuf;

use basalt_monitoring::collect::nvme_cli::{parse_id_ctrl, parse_smart_log};
use basalt_monitoring::collect::smartctl::{parse_scan, parse_smartctl};
use basalt_monitoring::collect::{collect_device, collect_recordings, CollectOptions};
use basalt_monitoring::record::Status;
use basalt_monitoring::rules::RuleConfig;
use basalt_monitoring::MonitoringError;
use proptest::prelude::*;

fn testdata(p: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(p)
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/fixtures/smart")
            .join(name),
    )
    .unwrap()
}

#[test]
fn truncated_json_is_a_clear_parse_error() {
    let text = fixture("scrutiny__samsung_970_evo_500gb_media_errors.json");
    let err = parse_smartctl(&text[..text.len() / 2], "/dev/nvme0").unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, MonitoringError::Parse { .. }), "{msg}");
    assert!(
        msg.contains("/dev/nvme0") && msg.contains("invalid JSON"),
        "{msg}"
    );
    assert!(msg.contains("EOF"), "{msg}");
}

#[test]
fn empty_input_is_a_clear_error_for_every_parser() {
    for err in [
        parse_smartctl("", "x").unwrap_err(),
        parse_smartctl("  \n", "x").unwrap_err(),
        parse_scan("").unwrap_err(),
        parse_smart_log("", "x").unwrap_err(),
        parse_id_ctrl("", "x").unwrap_err(),
    ] {
        assert!(err.to_string().contains("empty input"), "{err}");
    }
}

#[test]
fn smartctl_permission_denied_reports_smartctls_message() {
    let text = std::fs::read_to_string(testdata("smartctl/permission_denied.json")).unwrap();
    let err = parse_smartctl(&text, "recording").unwrap_err();
    assert_eq!(
        err.to_string(),
        "smartctl on /tmp/fakedev: Smartctl open device: /tmp/fakedev failed: Permission denied"
    );
}

#[test]
fn smartctl_unknown_device_type_and_missing_device_are_errors() {
    let text = std::fs::read_to_string(testdata("smartctl/unknown_device_type.json")).unwrap();
    let msg = parse_smartctl(&text, "/dev/sda").unwrap_err().to_string();
    assert!(msg.contains("Unknown device type 'foo'"), "{msg}");
    let text = std::fs::read_to_string(testdata("smartctl/no_such_device.json")).unwrap();
    let msg = parse_smartctl(&text, "/dev/nvme9").unwrap_err().to_string();
    assert!(msg.contains("No such device"), "{msg}");
}

#[test]
fn unsupported_device_protocol_gives_a_partial_record_with_nulls() {
    let text = r#"{"json_format_version":[1,0],"smartctl":{"version":[7,3],"exit_status":0},
        "device":{"name":"/dev/sdb","info_name":"/dev/sdb","type":"scsi","protocol":"SCSI"},
        "scsi_model_name":"USB Flash","temperature":{"current":31},"smart_status":{"passed":true}}"#;
    let r = parse_smartctl(text, "/dev/sdb").unwrap();
    assert_eq!(r.protocol, None);
    assert_eq!(r.model.as_deref(), Some("USB Flash"));
    assert_eq!(r.temperature_c, Some(31));
    assert_eq!(r.percentage_used, None);
    assert_eq!(r.host_bytes_written, None);
}

#[test]
fn string_valued_numbers_and_128_bit_strings_parse_exactly() {
    let text = r#"{"smartctl":{"exit_status":0},"device":{"name":"/dev/nvme0","type":"nvme","protocol":"NVMe"},
        "model_name":"M","nvme_smart_health_information_log":{"critical_warning":"0","temperature":"41",
        "available_spare":"100","available_spare_threshold":"10","percentage_used":"12",
        "data_units_written":3.402823669209385e38,"data_units_written_s":"340282366920938463463374607431768",
        "data_units_read":"18446744073709551616","media_errors":"0","num_err_log_entries":"5"}}"#;
    let r = parse_smartctl(text, "x").unwrap();
    assert_eq!(r.temperature_c, Some(41));
    assert_eq!(r.percentage_used, Some(12));
    assert_eq!(r.error_log_entries, Some(5));
    // 2^64 data units read, exactly, × 512,000.
    assert_eq!(
        r.host_bytes_read,
        Some(18_446_744_073_709_551_616u128 * 512_000)
    );
    assert_eq!(
        r.host_bytes_written,
        Some(340_282_366_920_938_463_463_374_607_431_768u128 * 512_000)
    );
}

#[test]
fn wrong_types_in_known_fields_become_nulls() {
    let text = r#"{"smartctl":{"exit_status":0},"device":{"name":"/dev/nvme0","type":"nvme","protocol":"NVMe"},
        "model_name":42,"temperature":{"current":"hot"},
        "nvme_smart_health_information_log":{"percentage_used":[1],"media_errors":{"x":1},"temperature":null}}"#;
    let r = parse_smartctl(text, "x").unwrap();
    assert_eq!(r.model, None);
    assert_eq!(r.temperature_c, None);
    assert_eq!(r.percentage_used, None);
    assert_eq!(r.media_errors, None);
}

#[test]
fn json_that_is_not_from_smartctl_is_rejected_clearly() {
    let msg = parse_smartctl("[1,2,3]", "f.json").unwrap_err().to_string();
    assert!(msg.contains("expected a JSON object"), "{msg}");
    let msg = parse_smartctl(r#"{"foo":1}"#, "f.json")
        .unwrap_err()
        .to_string();
    assert!(msg.contains("not smartctl JSON"), "{msg}");
    let msg = parse_smart_log(r#"{"foo":1}"#, "nvme0")
        .unwrap_err()
        .to_string();
    assert!(msg.contains("not nvme smart-log JSON"), "{msg}");
}

#[test]
fn bad_recordings_become_unreadable_records_next_to_good_ones() {
    let dir = tempfile::tempdir().unwrap();
    let truncated = dir.path().join("truncated.json");
    let text = fixture("smartctl_exporter__crucial_p2_ct250p2ssd8.json");
    std::fs::write(&truncated, &text[..300]).unwrap();
    let empty = dir.path().join("empty.json");
    std::fs::write(&empty, "").unwrap();
    let unknown = dir.path().join("unknown.json");
    std::fs::write(&unknown, r#"{"hello":"world"}"#).unwrap();
    let files = vec![
        truncated.clone(),
        empty,
        unknown,
        dir.path().join("missing.json"),
        testdata("smartctl/permission_denied.json"),
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/fixtures/smart/scrutiny__corsair_force_mp510.json"),
    ];
    let c = collect_recordings(&files);
    assert_eq!(c.devices.len(), 6);
    let rules = RuleConfig::default();
    let mut got = Vec::new();
    for d in &c.devices {
        let mut r = d.record.clone();
        rules.apply(&mut r, None, d.error.as_deref());
        got.push((r.device.clone(), r.status, r.reasons.join(" | ")));
    }
    assert!(
        got[0].2.starts_with("unreadable: ") && got[0].2.contains("invalid JSON"),
        "{got:?}"
    );
    assert!(got[1].2.contains("empty file"), "{got:?}");
    assert!(got[2].2.contains("unrecognised recording"), "{got:?}");
    assert!(got[3].2.contains("missing.json"), "{got:?}");
    assert_eq!(got[4].0, "/tmp/fakedev");
    assert!(got[4].2.contains("Permission denied"), "{got:?}");
    for g in &got[..5] {
        assert_eq!(g.1, Status::Warn, "{g:?}");
    }
    assert_eq!(
        got[5],
        ("/dev/nvme0".to_string(), Status::Ok, String::new())
    );
    // Unreadable records carry nulls, not guesses.
    assert_eq!(c.devices[0].record.temperature_c, None);
    assert_eq!(c.devices[0].record.model, None);
}

#[test]
fn missing_tools_give_a_clear_message_per_device() {
    let opts = CollectOptions {
        smartctl: "/nonexistent/smartctl".into(),
        nvme: "/nonexistent/nvme".into(),
        ..Default::default()
    };
    let d = collect_device(&opts, "/dev/nvme0", None);
    let err = d.error.expect("an error");
    assert!(
        err.contains("`/nonexistent/smartctl` is not installed")
            && err.contains("`/nonexistent/nvme` is not installed"),
        "{err}"
    );
    assert_eq!(d.record.device, "/dev/nvme0");
    let d = collect_device(&opts, "/dev/sda", None);
    assert!(d.error.unwrap().contains("smartctl` is not installed"));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn any_prefix_of_a_fixture_never_panics(cut in 0usize..40_000, pick in 0usize..4) {
        let names = [
            "scrutiny__samsung_860_evo_500gb.json",
            "smartctl_exporter__samsung_pm1725a_mzwll3t2hajq_critical_warning_16.json",
            "smartctl_exporter__intel_s3520_sata_ssdsc2bb016t7_realloc_1.json",
            "telegraf__sabrent_rocket_4.0_1tb_smartctl74.json",
        ];
        let text = fixture(names[pick]);
        let mut end = cut.min(text.len());
        while !text.is_char_boundary(end) { end -= 1; }
        let _ = parse_smartctl(&text[..end], "x");
        let _ = parse_smart_log(&text[..end], "x");
        let _ = parse_id_ctrl(&text[..end], "x");
        let _ = parse_scan(&text[..end]);
    }

    #[test]
    fn arbitrary_json_values_never_panic(s in "\\{(\"[a-z_]{1,12}\":(-?[0-9]{1,25}|\"[0-9a-z ]{0,8}\"|null|true|\\[\\]|\\{\\}),?){0,8}\\}") {
        let _ = parse_smartctl(&s, "x");
        let _ = parse_smart_log(&s, "x");
        let _ = parse_id_ctrl(&s, "x");
    }
}

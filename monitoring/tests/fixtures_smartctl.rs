//! Every shared smartctl fixture parses, and the values a person reads off each JSON file
//! (written out by hand below, not computed by the code under test) come out of the record.

use std::path::PathBuf;

use basalt_monitoring::collect::smartctl::parse_smartctl;
use basalt_monitoring::record::{Protocol, Status};
use basalt_monitoring::rules::RuleConfig;

fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/smart")
}

struct Expect {
    file: &'static str,
    device: &'static str,
    protocol: Protocol,
    model: &'static str,
    temperature_c: Option<i64>,
    percentage_used: Option<u32>,
    host_bytes_written: Option<u128>,
    power_on_hours: Option<u64>,
    status: Status,
    reasons: &'static [&'static str],
}

use Protocol::{Ata, Nvme};
use Status::{Crit, Ok, Warn};

#[rustfmt::skip]
const EXPECTED: &[Expect] = &[
    // NVMe: bytes written = data_units_written × 512,000.
    Expect { file: "scrutiny__samsung_970_evo_500gb_media_errors.json", device: "/dev/nvme0", protocol: Nvme, model: "Samsung SSD 970 EVO 500GB", temperature_c: Some(35), percentage_used: Some(3), host_bytes_written: Some(33_588_269_056_000), power_on_hours: Some(12798), status: Crit, reasons: &["media_errors 7"] },
    Expect { file: "scrutiny__intel_ssdpeknw010t8_660p.json", device: "/dev/testfoobarpass", protocol: Nvme, model: "INTEL SSDPEKNW010T8", temperature_c: Some(36), percentage_used: Some(0), host_bytes_written: Some(3_979_996_672_000), power_on_hours: Some(2401), status: Ok, reasons: &[] },
    Expect { file: "scrutiny__corsair_force_mp510.json", device: "/dev/nvme0", protocol: Nvme, model: "Force MP510", temperature_c: Some(38), percentage_used: Some(1), host_bytes_written: Some(8_239_678_464_000), power_on_hours: Some(6487), status: Ok, reasons: &[] },
    Expect { file: "scrutiny__kioxia_kcd61lul3t84_info_only.json", device: "/dev/nvme4", protocol: Nvme, model: "KCD61LUL3T84", temperature_c: None, percentage_used: None, host_bytes_written: None, power_on_hours: None, status: Warn, reasons: &["no health data reported"] },
    Expect { file: "smartctl_exporter__samsung_970_evo_plus_250gb.json", device: "/dev/nvme0", protocol: Nvme, model: "Samsung SSD 970 EVO Plus 250GB", temperature_c: Some(35), percentage_used: Some(0), host_bytes_written: Some(1_008_363_008_000), power_on_hours: Some(3149), status: Ok, reasons: &[] },
    Expect { file: "smartctl_exporter__samsung_pm9a1_mzvl21t0hclr_980pro_oem_1tb_a.json", device: "/dev/nvme0", protocol: Nvme, model: "SAMSUNG MZVL21T0HCLR-00B00", temperature_c: Some(29), percentage_used: Some(16), host_bytes_written: Some(58_195_344_896_000), power_on_hours: Some(10423), status: Ok, reasons: &[] },
    Expect { file: "smartctl_exporter__samsung_pm9a1_mzvl21t0hclr_980pro_oem_1tb_b.json", device: "/dev/nvme1", protocol: Nvme, model: "SAMSUNG MZVL21T0HCLR-00B00", temperature_c: Some(30), percentage_used: Some(16), host_bytes_written: Some(60_486_484_480_000), power_on_hours: Some(10407), status: Ok, reasons: &[] },
    Expect { file: "smartctl_exporter__crucial_p2_ct250p2ssd8.json", device: "/dev/nvme0", protocol: Nvme, model: "CT250P2SSD8", temperature_c: Some(26), percentage_used: Some(0), host_bytes_written: Some(513_484_800_000), power_on_hours: Some(10147), status: Ok, reasons: &[] },
    Expect { file: "smartctl_exporter__intel_p4510_ssdpe2kx010t8_pct_used_73.json", device: "/dev/nvme1", protocol: Nvme, model: "INTEL SSDPE2KX010T8", temperature_c: Some(36), percentage_used: Some(73), host_bytes_written: Some(2_644_897_429_504_000), power_on_hours: Some(8843), status: Ok, reasons: &[] },
    Expect { file: "smartctl_exporter__intel_p4500_ssdpe2kx020t7_pct_used_75.json", device: "/dev/nvme6", protocol: Nvme, model: "INTEL SSDPE2KX020T7", temperature_c: Some(19), percentage_used: Some(75), host_bytes_written: Some(2_567_435_299_328_000), power_on_hours: Some(49441), status: Ok, reasons: &[] },
    Expect { file: "smartctl_exporter__intel_p3700_ssdpedmd800g4_spare_93_pct_used_51.json", device: "/dev/nvme0", protocol: Nvme, model: "INTEL SSDPEDMD800G4", temperature_c: Some(30), percentage_used: Some(51), host_bytes_written: Some(7_708_206_927_872_000), power_on_hours: Some(54704), status: Ok, reasons: &[] },
    Expect { file: "smartctl_exporter__samsung_pm1725a_mzwll3t2hajq_critical_warning_16.json", device: "/dev/nvme0", protocol: Nvme, model: "SAMSUNG MZWLL3T2HAJQ-00005", temperature_c: Some(40), percentage_used: Some(0), host_bytes_written: Some(75_549_056_000_000), power_on_hours: Some(18376), status: Crit, reasons: &["critical_warning 16 (volatile memory backup failed)", "SMART overall-health failed"] },
    Expect { file: "smartctl_exporter__kioxia_toshiba_xg6_kxg60znv512g.json", device: "/dev/nvme2", protocol: Nvme, model: "KXG60ZNV512G TOSHIBA", temperature_c: Some(35), percentage_used: Some(4), host_bytes_written: Some(2_856_207_360_000), power_on_hours: Some(12728), status: Ok, reasons: &[] },
    Expect { file: "smartctl_exporter__micron_mtfdhax1t6mce_pct_used_69.json", device: "/dev/nvme0", protocol: Nvme, model: "MTFDHAX1T6MCE-1AN1ZABYY", temperature_c: Some(32), percentage_used: Some(69), host_bytes_written: Some(1_118_286_054_400_000), power_on_hours: Some(29891), status: Ok, reasons: &[] },
    Expect { file: "telegraf__sabrent_rocket_4.0_1tb_smartctl74.json", device: "/dev/nvme0", protocol: Nvme, model: "Sabrent Rocket 4.0 1TB", temperature_c: Some(48), percentage_used: Some(4), host_bytes_written: Some(39_153_603_584_000), power_on_hours: Some(8733), status: Ok, reasons: &[] },
    // SATA: % used from Device Statistics page 7 when present, else the vendor attribute.
    // Crucial m4: devstat p7 = 3 (attr 202 raw says 2); no attr 246, so devstat p1 13843916035 sectors × 512. Its sensor reads 0 °C and
    // never read more (every maximum 0): no temperature, not 0 °C.
    Expect { file: "scrutiny-starosdev__crucial_m4_mtfddak128mam_attr202.json", device: "/dev/sdd", protocol: Ata, model: "MTFDDAK128MAM-1J1", temperature_c: None, percentage_used: Some(3), host_bytes_written: Some(7_088_085_009_920), power_on_hours: Some(4179), status: Ok, reasons: &[] },
    // Samsung: 100 − normalised 177; 241 raw LBAs × 512.
    Expect { file: "scrutiny__samsung_840_series_failed.json", device: "/dev/sda", protocol: Ata, model: "Samsung SSD 840 Series", temperature_c: Some(33), percentage_used: Some(2), host_bytes_written: Some(5_599_141_122_560), power_on_hours: Some(19497), status: Ok, reasons: &[] },
    Expect { file: "scrutiny__samsung_850_pro_128gb_anonymized.json", device: "/dev/sda", protocol: Ata, model: "X SSD 850 PRO 128GB", temperature_c: Some(32), percentage_used: Some(1), host_bytes_written: Some(536_153_557_504), power_on_hours: Some(846), status: Ok, reasons: &[] },
    Expect { file: "scrutiny__samsung_860_evo_500gb.json", device: "/dev/sda", protocol: Ata, model: "Samsung SSD 860 EVO 500GB", temperature_c: Some(36), percentage_used: Some(19), host_bytes_written: Some(33_166_218_315_776), power_on_hours: Some(14551), status: Ok, reasons: &[] },
    Expect { file: "smartctl_exporter__samsung_pm893_sata_mz7l3240hchq.json", device: "/dev/sda", protocol: Ata, model: "SAMSUNG MZ7L3240HCHQ-00A07", temperature_c: Some(30), percentage_used: Some(2), host_bytes_written: Some(334_113_921_024), power_on_hours: Some(10106), status: Ok, reasons: &[] },
    Expect { file: "smartctl_exporter__samsung_pm893_sata_mz7l3480hchq_not_in_drivedb.json", device: "/dev/sda", protocol: Ata, model: "SAMSUNG MZ7L3480HCHQ-00A07", temperature_c: Some(29), percentage_used: Some(2), host_bytes_written: Some(668_100_901_376), power_on_hours: Some(10786), status: Ok, reasons: &[] },
    Expect { file: "smartctl_exporter__samsung_sm843t_sata_mz7wd240hafv_wear_1661.json", device: "/dev/sda", protocol: Ata, model: "SAMSUNG MZ7WD240HAFV-00003", temperature_c: Some(27), percentage_used: Some(9), host_bytes_written: Some(110_825_747_394_560), power_on_hours: Some(84619), status: Ok, reasons: &[] },
    // Kingston/Phison: 100 − raw 231; 241 raw GiB.
    Expect { file: "smartctl_exporter__kingston_a400_sata_sa400m8120g.json", device: "/dev/sda", protocol: Ata, model: "KINGSTON SA400M8120G", temperature_c: Some(38), percentage_used: Some(2), host_bytes_written: Some(427_349_245_952), power_on_hours: Some(4994), status: Ok, reasons: &[] },
    Expect { file: "smartctl_exporter__kingston_kc400_sata_skc400s371t_life_74.json", device: "/dev/sda", protocol: Ata, model: "KINGSTON SKC400S371T", temperature_c: Some(31), percentage_used: Some(26), host_bytes_written: Some(420_628_695_875_584), power_on_hours: Some(54450), status: Ok, reasons: &[] },
    // Micron: raw 202 = % used; 246 raw LBAs × 512.
    Expect { file: "smartctl_exporter__micron_5300_sata_mtfddak960tds_attr202.json", device: "/dev/sdi", protocol: Ata, model: "Micron_5300_MTFDDAK960TDS", temperature_c: Some(23), percentage_used: Some(1), host_bytes_written: Some(78_636_487_507_968), power_on_hours: Some(26409), status: Ok, reasons: &[] },
    // Intel: 100 − normalised 233; 241 raw × 32 MiB.
    Expect { file: "smartctl_exporter__intel_s3520_sata_ssdsc2bb016t7_realloc_1.json", device: "/dev/sdc", protocol: Ata, model: "INTEL SSDSC2BB016T7", temperature_c: Some(26), percentage_used: Some(3), host_bytes_written: Some(93_037_816_446_976), power_on_hours: Some(43494), status: Ok, reasons: &[] },
];

#[test]
fn every_shared_fixture_has_hand_written_expectations() {
    let mut files: Vec<String> = std::fs::read_dir(fixtures_dir())
        .expect("shared fixtures directory next to the repo")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .collect();
    files.sort();
    assert_eq!(files.len(), EXPECTED.len(), "fixtures: {files:?}");
    for f in &files {
        assert!(
            EXPECTED.iter().any(|e| e.file == f),
            "no expectations written for {f}"
        );
    }
}

#[test]
fn each_fixture_yields_the_values_read_off_the_json() {
    let rules = RuleConfig::default();
    for e in EXPECTED {
        let text = std::fs::read_to_string(fixtures_dir().join(e.file)).unwrap();
        let mut r = parse_smartctl(&text, e.file).unwrap_or_else(|err| panic!("{}: {err}", e.file));
        rules.apply(&mut r, None, None);
        assert_eq!(r.device, e.device, "{} device", e.file);
        assert_eq!(r.protocol, Some(e.protocol), "{} protocol", e.file);
        assert_eq!(r.model.as_deref(), Some(e.model), "{} model", e.file);
        assert_eq!(r.temperature_c, e.temperature_c, "{} temperature", e.file);
        assert_eq!(
            r.percentage_used, e.percentage_used,
            "{} percentage_used",
            e.file
        );
        assert_eq!(
            r.host_bytes_written, e.host_bytes_written,
            "{} bytes written",
            e.file
        );
        assert_eq!(
            r.power_on_hours, e.power_on_hours,
            "{} power_on_hours",
            e.file
        );
        assert_eq!(r.status, e.status, "{} status ({:?})", e.file, r.reasons);
        assert_eq!(r.reasons, e.reasons, "{} reasons", e.file);
    }
}

#[test]
fn nvme_fixture_fields_beyond_wear_are_normalised() {
    let text = std::fs::read_to_string(
        fixtures_dir().join("scrutiny__samsung_970_evo_500gb_media_errors.json"),
    )
    .unwrap();
    let r = parse_smartctl(&text, "x").unwrap();
    assert_eq!(r.serial.as_deref(), Some("S466NX0M776250H"));
    assert_eq!(r.firmware.as_deref(), Some("2B2QEXE7"));
    assert_eq!(r.capacity_bytes, Some(500_107_862_016));
    assert_eq!(r.available_spare_pct, Some(99));
    assert_eq!(r.available_spare_threshold_pct, Some(10));
    assert_eq!(r.critical_warning, Some(0));
    assert_eq!(r.media_errors, Some(7));
    assert_eq!(r.error_log_entries, Some(62));
    assert_eq!(r.host_bytes_read, Some(17_176_794u128 * 512_000));
    assert_eq!(r.power_cycles, Some(25));
    assert_eq!(r.unsafe_shutdowns, Some(10));
    assert_eq!(r.warning_temp_minutes, Some(0));
    assert_eq!(r.critical_temp_minutes, Some(0));
    assert_eq!(r.smart_passed, Some(true));
    // smartctl does not report WCTEMP/CCTEMP for NVMe; they stay unknown.
    assert_eq!(r.temperature_warning_c, None);
}

#[test]
fn ata_fixture_reports_sct_temperature_limits_and_error_log() {
    let text = std::fs::read_to_string(
        fixtures_dir().join("scrutiny-starosdev__crucial_m4_mtfddak128mam_attr202.json"),
    )
    .unwrap();
    let r = parse_smartctl(&text, "x").unwrap();
    assert_eq!(r.temperature_warning_c, Some(70));
    assert_eq!(r.temperature_critical_c, Some(75));
    assert_eq!(r.error_log_entries, Some(0));
    assert_eq!(r.unsafe_shutdowns, Some(1)); // attr 174 Unexpect_Power_Loss_Ct
    assert_eq!(r.capacity_bytes, Some(128_035_676_160));
    assert_eq!(r.critical_warning, None);
}

#[test]
fn a_sensor_that_reads_zero_is_unreported_unless_it_once_read_more() {
    let text = std::fs::read_to_string(
        fixtures_dir().join("scrutiny-starosdev__crucial_m4_mtfddak128mam_attr202.json"),
    )
    .unwrap();
    assert_eq!(parse_smartctl(&text, "x").unwrap().temperature_c, None);
    let mut doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    doc["temperature"]["lifetime_max"] = 41.into();
    let r = parse_smartctl(&doc.to_string(), "x").unwrap();
    assert_eq!(
        r.temperature_c,
        Some(0),
        "a drive that read 41 °C before reads 0 °C now"
    );
}

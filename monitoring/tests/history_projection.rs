//! History storage, retention/downsampling and end-of-life projection on synthetic series.

use std::io::Write;

use basalt_monitoring::history::{
    plan_prune, rollup_hourly, FileStore, MemoryStore, Resolution, Retention, Sample, SampleStore,
};
use basalt_monitoring::projection::{project, slope_per_day, RateSource};
use basalt_monitoring::record::HealthRecord;
use chrono::NaiveDate;

const DAY: i64 = 86_400;
/// 2025-01-01T00:00:00Z
const T0: i64 = 1_735_689_600;

fn date(y: i32, m: u32, d: u32) -> NaiveDate {
    NaiveDate::from_ymd_opt(y, m, d).unwrap()
}

#[test]
fn file_store_appends_durably_and_reopens_with_range_queries() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = FileStore::open(dir.path()).unwrap();
        store
            .append(&[
                Sample::raw(T0, "/dev/nvme0", "temperature_c", 40.0),
                Sample::raw(T0, "/dev/nvme1", "temperature_c", 50.0),
                Sample::raw(T0 + 60, "/dev/nvme0", "temperature_c", 41.0),
                Sample::raw(T0 + 60, "/dev/nvme0", "percentage_used", 3.0),
            ])
            .unwrap();
    }
    let store = FileStore::open(dir.path()).unwrap();
    let got: Vec<(i64, f64)> = store
        .range("/dev/nvme0", "temperature_c", T0, T0 + 61)
        .unwrap()
        .iter()
        .map(|s| (s.ts, s.value))
        .collect();
    assert_eq!(got, vec![(T0, 40.0), (T0 + 60, 41.0)]);
    // `to` is exclusive.
    assert_eq!(
        store
            .range("/dev/nvme0", "temperature_c", T0, T0 + 60)
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn torn_last_line_is_ignored_and_later_appends_still_work() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = FileStore::open(dir.path()).unwrap();
        store.append(&[Sample::raw(T0, "d", "m", 1.0)]).unwrap();
    }
    let path = dir.path().join("samples.jsonl");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    f.write_all(br#"{"ts":1735689660,"device":"d","met"#)
        .unwrap();
    drop(f);
    let store = FileStore::open(dir.path()).unwrap();
    store
        .append(&[Sample::raw(T0 + 120, "d", "m", 3.0)])
        .unwrap();
    drop(store);
    let store = FileStore::open(dir.path()).unwrap();
    let vals: Vec<f64> = store
        .range("d", "m", 0, i64::MAX)
        .unwrap()
        .iter()
        .map(|s| s.value)
        .collect();
    assert_eq!(vals, vec![1.0, 3.0]);
}

#[test]
fn hourly_rollup_is_the_mean_per_device_metric_and_hour() {
    let raw = vec![
        Sample::raw(T0, "d", "t", 40.0),
        Sample::raw(T0 + 1800, "d", "t", 50.0),
        Sample::raw(T0 + 3600, "d", "t", 60.0),
        Sample::raw(T0 + 10, "e", "t", 7.0),
    ];
    let r = rollup_hourly(&raw);
    let got: Vec<(&str, i64, f64, Resolution)> = r
        .iter()
        .map(|s| (s.device.as_str(), s.ts, s.value, s.resolution))
        .collect();
    assert_eq!(
        got,
        vec![
            ("d", T0, 45.0, Resolution::Hourly),
            ("d", T0 + 3600, 60.0, Resolution::Hourly),
            ("e", T0, 7.0, Resolution::Hourly),
        ]
    );
}

#[test]
fn prune_keeps_raw_for_n_days_hourly_for_m_days() {
    let retention = Retention {
        raw_days: 2,
        hourly_days: 10,
    };
    // One sample per minute for 3 days, value = day index; plus an ancient hourly rollup.
    let mut samples: Vec<Sample> = (0..3 * 24 * 60)
        .map(|i| Sample::raw(T0 + i * 60, "d", "t", (i / (24 * 60)) as f64))
        .collect();
    samples.push(Sample {
        resolution: Resolution::Hourly,
        ..Sample::raw(T0 - 20 * DAY, "d", "t", 99.0)
    });
    let now = T0 + 3 * DAY;
    let plan = plan_prune(samples, now, &retention);
    // Day 0 (older than 2 days) becomes 24 hourly means of 0.0; days 1–2 stay raw.
    assert_eq!(plan.stats.raw_removed, 24 * 60);
    assert_eq!(plan.stats.hourly_added, 24);
    assert_eq!(plan.stats.hourly_removed, 1);
    let hourly: Vec<&Sample> = plan
        .keep
        .iter()
        .filter(|s| s.resolution == Resolution::Hourly)
        .collect();
    assert_eq!(hourly.len(), 24);
    assert!(hourly.iter().all(|s| s.value == 0.0 && s.ts < T0 + DAY));
    assert_eq!(
        plan.keep
            .iter()
            .filter(|s| s.resolution == Resolution::Raw)
            .count(),
        2 * 24 * 60
    );

    // The same through the file store, surviving a reopen.
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    let samples: Vec<Sample> = (0..3 * 24 * 60)
        .map(|i| Sample::raw(T0 + i * 60, "d", "t", (i / (24 * 60)) as f64))
        .collect();
    store.append(&samples).unwrap();
    let stats = store.prune(now, &retention).unwrap();
    assert_eq!((stats.raw_removed, stats.hourly_added), (24 * 60, 24));
    drop(store);
    let store = FileStore::open(dir.path()).unwrap();
    let day0 = store.range("d", "t", T0, T0 + DAY).unwrap();
    assert_eq!(day0.len(), 24);
    assert!(day0.iter().all(|s| s.resolution == Resolution::Hourly));
    assert_eq!(
        store.range("d", "t", T0 + DAY, now).unwrap().len(),
        2 * 24 * 60
    );
    // Hourly rollups expire after hourly_days.
    store.prune(T0 + 11 * DAY, &retention).unwrap();
    assert!(store.range("d", "t", T0, T0 + DAY).unwrap().is_empty());
}

fn record(pct: u32, written: u128, poh: u64) -> HealthRecord {
    HealthRecord {
        percentage_used: Some(pct),
        host_bytes_written: Some(written),
        power_on_hours: Some(poh),
        ..HealthRecord::new("/dev/nvme0")
    }
}

#[test]
fn one_percent_per_30_days_projects_the_right_wear_out_date() {
    // Exactly linear: 10% at T0, +1% every 30 days, sampled daily for 90 days.
    let used: Vec<(i64, f64)> = (0..=90)
        .map(|d| (T0 + d * DAY, 10.0 + d as f64 / 30.0))
        .collect();
    let now = T0 + 90 * DAY; // 2025-04-01, 13% used
    let p = project(&record(13, 0, 1), &used, &[], None, now);
    assert_eq!(p.percentage_used_rate_source, Some(RateSource::Trend));
    assert!((p.percentage_used_per_day.unwrap() - 1.0 / 30.0).abs() < 1e-9);
    // 87 points left × 30 days = 2610 days after 2025-04-01 = 2032-05-24.
    assert_eq!(p.wear_out_date, Some(date(2032, 5, 24)));
    assert_eq!(p.end_of_life_date, p.wear_out_date);
    assert_eq!(p.end_of_life_basis, Some("percentage_used"));
}

#[test]
fn integer_steps_of_percentage_used_still_give_a_close_date() {
    // The drive reports whole percents: floor(10 + days/30).
    let used: Vec<(i64, f64)> = (0..=180)
        .map(|d| (T0 + d * DAY, (10 + d / 30) as f64))
        .collect();
    let now = T0 + 180 * DAY;
    let p = project(&record(16, 0, 1), &used, &[], None, now);
    let expected = date(2025, 6, 30) + chrono::Days::new(84 * 30);
    let got = p.wear_out_date.unwrap();
    assert!(
        (got - expected).num_days().abs() <= 90,
        "{got} vs {expected}"
    );
}

#[test]
fn tbw_date_wins_when_it_comes_first() {
    // 100 GB/day trend, 500 TB written of a 600 TBW rating → 1000 days; wear 10% → far later.
    let written: Vec<(i64, f64)> = (0..=10)
        .map(|d| (T0 + d * DAY, 500e12 - 1e12 + d as f64 * 100e9))
        .collect();
    let used: Vec<(i64, f64)> = (0..=10).map(|d| (T0 + d * DAY, 10.0)).collect();
    let now = T0 + 10 * DAY;
    let p = project(
        &record(10, 500_000_000_000_000, 24 * 1000),
        &used,
        &written,
        Some(600e12),
        now,
    );
    assert!((p.bytes_written_per_day.unwrap() - 100e9).abs() < 1.0);
    assert_eq!(p.bytes_written_rate_source, Some(RateSource::Trend));
    assert_eq!(
        p.tbw_date,
        Some(date(2025, 1, 11) + chrono::Days::new(1000))
    );
    assert_eq!(p.end_of_life_basis, Some("tbw"));
    assert_eq!(p.end_of_life_date, p.tbw_date);
    // Flat wear over 10 days falls back to the lifetime average: 10% over 1000 power-on days.
    assert_eq!(
        p.percentage_used_rate_source,
        Some(RateSource::LifetimeAverage)
    );
    assert_eq!(
        p.wear_out_date,
        Some(date(2025, 1, 11) + chrono::Days::new(9000))
    );
}

#[test]
fn without_history_the_lifetime_average_is_used_and_no_wear_means_no_date() {
    let now = T0;
    let p = project(&record(20, 0, 24 * 400), &[], &[], None, now);
    assert_eq!(
        p.percentage_used_rate_source,
        Some(RateSource::LifetimeAverage)
    );
    assert_eq!(
        p.wear_out_date,
        Some(date(2025, 1, 1) + chrono::Days::new(1600))
    );
    let p = project(&record(0, 0, 24 * 400), &[], &[], None, now);
    assert_eq!(p.wear_out_date, None);
    assert_eq!(p.end_of_life_date, None);
    let p = project(&record(100, 0, 24 * 400), &[], &[], None, now);
    assert_eq!(p.wear_out_date, Some(date(2025, 1, 1)));
    assert_eq!(slope_per_day(&[(T0, 1.0)]), None);
}

#[test]
fn memory_store_behaves_like_the_file_store() {
    let s = MemoryStore::default();
    s.append(&[
        Sample::raw(T0 + 60, "d", "m", 2.0),
        Sample::raw(T0, "d", "m", 1.0),
    ])
    .unwrap();
    let v: Vec<f64> = s
        .range("d", "m", T0, T0 + 61)
        .unwrap()
        .iter()
        .map(|x| x.value)
        .collect();
    assert_eq!(v, vec![1.0, 2.0]);
}

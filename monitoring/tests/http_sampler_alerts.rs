//! The HTTP router (dashboard, /metrics, /api/*), the sampler (rules with the previous sample,
//! history, projections) and alert delivery.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use basalt_monitoring::alerts::{deliver, AlertConfig, AlertTracker};
use basalt_monitoring::collect::CollectOptions;
use basalt_monitoring::config::MonitoringConfig;
use basalt_monitoring::history::{MemoryStore, SampleStore};
use basalt_monitoring::record::{HealthRecord, Status};
use basalt_monitoring::{router, MonitoringState, Sampler};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;

const NOW: i64 = 1_750_000_000;

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

fn sampled_state(files: Vec<PathBuf>, with_engine: bool) -> MonitoringState {
    let mut state = MonitoringState::new(Arc::new(MemoryStore::default()));
    if with_engine {
        state = state.with_engine_stats(Arc::new(|| {
            json!({"keys": 1234, "gc": {"runs": 7, "bytes-reclaimed": 4096}, "name": "ignored", "ok": true})
        }));
    }
    let opts = CollectOptions {
        from_json: files,
        ..Default::default()
    };
    let mut s = Sampler::new(opts, MonitoringConfig::default(), state.clone());
    s.sample_once(NOW).unwrap();
    state
}

async fn get(state: &MonitoringState, uri: &str) -> (StatusCode, String, String) {
    let resp = router(state.clone())
        .oneshot(Request::get(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let ctype = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, ctype, String::from_utf8(body.to_vec()).unwrap())
}

/// Minimal exposition-format check: HELP/TYPE before samples, valid names, no duplicate series.
fn check_exposition(text: &str) -> Vec<(String, f64)> {
    let mut typed = std::collections::HashSet::new();
    let mut series = std::collections::HashSet::new();
    let mut out = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut it = rest.split(' ');
            let name = it.next().unwrap();
            assert!(matches!(it.next(), Some("gauge" | "counter")), "{line}");
            assert!(typed.insert(name.to_string()), "family typed twice: {name}");
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let (key, value) = line.rsplit_once(' ').expect(line);
        let name = key.split('{').next().unwrap();
        assert!(
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && name.starts_with("basalt_"),
            "bad name in {line}"
        );
        assert!(typed.contains(name), "sample before TYPE: {line}");
        assert!(series.insert(key.to_string()), "duplicate series {key}");
        out.push((key.to_string(), value.parse::<f64>().expect(line)));
    }
    out
}

#[tokio::test]
async fn metrics_follow_exporter_conventions_and_carry_fixture_values() {
    let state = sampled_state(
        vec![
            shared("scrutiny__samsung_970_evo_500gb_media_errors.json"),
            testdata("hwmon/hwmon.json"),
        ],
        true,
    );
    let (status, ctype, body) = get(&state, "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    assert!(ctype.starts_with("text/plain; version=0.0.4"), "{ctype}");
    let samples = check_exposition(&body);
    let value = |k: &str| {
        samples
            .iter()
            .find(|(key, _)| key == k)
            .unwrap_or_else(|| panic!("missing {k} in\n{body}"))
            .1
    };
    let l = r#"{device="/dev/nvme0",model="Samsung SSD 970 EVO 500GB",serial="S466NX0M776250H"}"#;
    assert_eq!(value(&format!("basalt_ssd_temperature_celsius{l}")), 35.0);
    assert_eq!(value(&format!("basalt_ssd_percentage_used_ratio{l}")), 0.03);
    assert_eq!(
        value(&format!("basalt_ssd_bytes_written_total{l}")),
        33_588_269_056_000.0
    );
    assert_eq!(value(&format!("basalt_ssd_media_errors_total{l}")), 7.0);
    assert_eq!(value(&format!("basalt_ssd_status{l}")), 2.0);
    assert_eq!(
        value(&format!("basalt_ssd_power_on_seconds_total{l}")),
        12_798.0 * 3600.0
    );
    assert_eq!(
        value(r#"basalt_cpu_temperature_celsius{chip="k10temp",sensor="Tctl"}"#),
        61.25
    );
    assert_eq!(
        value(r#"basalt_hwmon_temperature_celsius{chip="nvme",sensor="Composite"}"#),
        44.85
    );
    assert_eq!(value("basalt_engine_keys"), 1234.0);
    assert_eq!(value("basalt_engine_gc_runs"), 7.0);
    assert_eq!(value("basalt_engine_gc_bytes_reclaimed"), 4096.0);
    assert_eq!(value("basalt_engine_ok"), 1.0);
    assert_eq!(
        value("basalt_monitoring_last_sample_timestamp_seconds"),
        NOW as f64
    );
    assert!(!body.contains("basalt_engine_name"));
}

#[tokio::test]
async fn label_values_are_escaped() {
    let state = MonitoringState::new(Arc::new(MemoryStore::default()));
    let mut snap = basalt_monitoring::Snapshot::default();
    snap.devices.push(HealthRecord {
        model: Some("Odd \"model\"\\\nname".into()),
        temperature_c: Some(30),
        ..HealthRecord::new("/dev/x")
    });
    state.publish(snap);
    let (_, _, body) = get(&state, "/metrics").await;
    assert!(body.contains(r#"model="Odd \"model\"\\\nname""#), "{body}");
    check_exposition(&body);
}

#[tokio::test]
async fn api_health_history_and_stats() {
    let state = sampled_state(
        vec![shared(
            "smartctl_exporter__intel_p4510_ssdpe2kx010t8_pct_used_73.json",
        )],
        false,
    );
    let (status, _, body) = get(&state, "/api/health").await;
    assert_eq!(status, StatusCode::OK);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["devices"][0]["device"], "/dev/nvme1");
    assert_eq!(v["devices"][0]["percentage_used"], 73);
    // 73% in 8843 power-on hours (368.46 days), no history yet: lifetime average.
    let p = &v["projections"][0];
    assert_eq!(p["percentage_used_rate_source"], "lifetime_average");
    assert!((p["percentage_used_per_day"].as_f64().unwrap() - 73.0 / (8843.0 / 24.0)).abs() < 1e-9);
    assert!(p["end_of_life_date"].is_string());

    let (status, _, body) = get(&state, "/api/history?device=nvme1&range=1h").await;
    assert_eq!(status, StatusCode::OK);
    let h: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(h["device"], "/dev/nvme1");
    assert_eq!(h["series"]["temperature_c"], json!([[NOW, 36.0]]));
    assert_eq!(h["series"]["percentage_used"], json!([[NOW, 73.0]]));

    let (status, _, body) = get(&state, "/api/history?device=nvme1&range=2y").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("unknown range"));
    let (status, _, _) = get(&state, "/api/stats").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let with = sampled_state(vec![], true);
    let (status, _, body) = get(&with, "/api/stats").await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("\"keys\":1234"));
}

#[tokio::test]
async fn dashboard_is_served_from_the_binary_without_external_urls() {
    let state = MonitoringState::new(Arc::new(MemoryStore::default()));
    let (status, ctype, html) = get(&state, "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(ctype.starts_with("text/html"));
    assert!(html.contains("/assets/app.js") && html.contains("chart-temperature"));
    for asset in ["/assets/app.js", "/assets/style.css"] {
        let (status, _, body) = get(&state, asset).await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.len() > 1000, "{asset}");
        for line in body.lines().chain(html.lines()) {
            let ext = line.contains("https://")
                || (line.contains("http://") && !line.contains("http://www.w3.org/2000/svg"));
            assert!(!ext, "external URL in {asset}: {line}");
        }
    }
}

#[test]
fn sampler_applies_growth_rules_records_history_and_alerts_on_changes() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("nvme3.smart-log.json");
    let original = std::fs::read_to_string(testdata("nvme-cli/nvme3.smart-log.json")).unwrap();
    std::fs::write(&log, &original).unwrap();
    let alerts_out = dir.path().join("alerts.txt");
    let mut config = MonitoringConfig::default();
    config.alerts.command = Some(format!(
        "echo \"$BASALT_DEVICE $BASALT_FROM $BASALT_TO\" >> '{}'",
        alerts_out.display()
    ));
    let store = Arc::new(MemoryStore::default());
    let state = MonitoringState::new(store.clone());
    let opts = CollectOptions {
        from_json: vec![log.clone()],
        ..Default::default()
    };
    let mut sampler = Sampler::new(opts, config, state.clone());

    let s1 = sampler.sample_once(NOW).unwrap();
    assert_eq!(s1.devices[0].status, Status::Ok);
    // Error log grows from 12 to 13 between samples → warn, then back to ok when it stops.
    std::fs::write(
        &log,
        original.replace("\"num_err_log_entries\": 12", "\"num_err_log_entries\": 13"),
    )
    .unwrap();
    let s2 = sampler.sample_once(NOW + 60).unwrap();
    assert_eq!(s2.devices[0].status, Status::Warn);
    assert_eq!(
        s2.devices[0].reasons,
        vec!["error_log_entries grew 12 -> 13".to_string()]
    );
    let s3 = sampler.sample_once(NOW + 120).unwrap();
    assert_eq!(s3.devices[0].status, Status::Ok);
    assert_eq!(state.snapshot().taken_at, NOW + 120);

    let temps = store
        .range("/dev/nvme3", "temperature_c", 0, i64::MAX)
        .unwrap();
    assert_eq!(
        temps.iter().map(|s| s.ts).collect::<Vec<_>>(),
        vec![NOW, NOW + 60, NOW + 120]
    );
    assert!(temps.iter().all(|s| s.value == 45.0));
    assert_eq!(
        std::fs::read_to_string(&alerts_out).unwrap(),
        "/dev/nvme3 ok warn\n/dev/nvme3 warn ok\n"
    );
}

#[test]
fn alert_tracker_reports_each_transition_once() {
    let mut t = AlertTracker::default();
    let rec = |s: Status| HealthRecord {
        status: s,
        ..HealthRecord::new("/dev/nvme0")
    };
    assert!(t.observe(&[rec(Status::Ok)], 1).is_empty());
    let tr = t.observe(&[rec(Status::Warn)], 2);
    assert_eq!((tr[0].from, tr[0].to), (Status::Ok, Status::Warn));
    assert!(t.observe(&[rec(Status::Warn)], 3).is_empty());
    let tr = t.observe(&[rec(Status::Crit)], 4);
    assert_eq!(
        (tr[0].from, tr[0].to, tr[0].at),
        (Status::Warn, Status::Crit, 4)
    );
    let tr = t.observe(&[rec(Status::Ok)], 5);
    assert_eq!((tr[0].from, tr[0].to), (Status::Crit, Status::Ok));
    // A device first seen failing raises one alert.
    let mut t = AlertTracker::default();
    assert_eq!(t.observe(&[rec(Status::Crit)], 1).len(), 1);
}

#[test]
fn webhook_receives_the_transition_as_json_and_failures_are_reported() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut sock, _) = listener.accept().unwrap();
        sock.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = sock.read(&mut chunk).unwrap();
            buf.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&buf).to_string();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let len: usize = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length: ")
                            .map(|v| v.trim().parse().unwrap())
                    })
                    .unwrap_or(0);
                if body.len() >= len {
                    sock.write_all(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
                        .unwrap();
                    return text;
                }
            }
            if n == 0 {
                return text;
            }
        }
    });
    let mut t = AlertTracker::default();
    let r = HealthRecord {
        status: Status::Crit,
        reasons: vec!["media_errors 7".into()],
        ..HealthRecord::new("/dev/nvme0")
    };
    let tr = t.observe(&[r], 10).remove(0);
    let cfg = AlertConfig {
        webhook_url: Some(format!("http://{addr}/hook")),
        ..Default::default()
    };
    assert_eq!(deliver(&cfg, &tr), Vec::<String>::new());
    let req = server.join().unwrap();
    assert!(req.starts_with("POST /hook HTTP/1.1"), "{req}");
    let body: Value = serde_json::from_str(req.split_once("\r\n\r\n").unwrap().1).unwrap();
    assert_eq!(body["device"], "/dev/nvme0");
    assert_eq!(body["from"], "ok");
    assert_eq!(body["to"], "crit");
    assert_eq!(body["reasons"][0], "media_errors 7");

    // Nothing listens on the freed port any more: a clear error, no panic.
    let cfg = AlertConfig {
        webhook_url: Some(format!("http://{addr}/hook")),
        command: Some("exit 3".into()),
        timeout_secs: 2,
    };
    let errs = deliver(&cfg, &tr);
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert!(errs[0].starts_with("webhook http://"), "{errs:?}");
    assert!(errs[1].contains("exit status: 3"), "{errs:?}");
}

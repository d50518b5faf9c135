//! Serves the monitoring router with replayed recordings and a synthetic 30-day history, for the
//! browser test and for trying the dashboard without disks:
//!
//! ```text
//! cargo run -p basalt-monitoring --example serve_fixtures -- \
//!     --listen 127.0.0.1:0 --fixtures ../shared/fixtures/smart --fixtures monitoring/testdata/nvme-cli
//! ```
//!
//! Prints `listening on http://ADDR` once the socket is bound. The synthetic history is derived
//! from each recording's current values (a daily temperature wave and wear/writes growing at the
//! recording's lifetime-average rate) so charts and projections have something to show.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use basalt_monitoring::collect::{collect_recordings, CollectOptions};
use basalt_monitoring::config::MonitoringConfig;
use basalt_monitoring::history::{MemoryStore, Resolution, Sample, SampleStore};
use basalt_monitoring::sampler::{hwmon_device, hwmon_metric, spawn_sampler, Sampler};
use basalt_monitoring::MonitoringState;

struct Args {
    listen: String,
    fixtures: Vec<PathBuf>,
    engine_stats: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        listen: "127.0.0.1:0".into(),
        fixtures: Vec::new(),
        engine_stats: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--listen" => a.listen = val()?,
            "--fixtures" => a.fixtures.push(PathBuf::from(val()?)),
            "--engine-stats" => a.engine_stats = Some(PathBuf::from(val()?)),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(a)
}

/// Every `*.json` under the given files/directories, sorted.
fn json_files(paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            if let Ok(rd) = std::fs::read_dir(p) {
                let mut v: Vec<PathBuf> = rd
                    .flatten()
                    .map(|e| e.path())
                    .filter(|f| f.extension().is_some_and(|x| x == "json"))
                    .collect();
                v.sort();
                out.extend(v);
            }
        } else {
            out.push(p.clone());
        }
    }
    out
}

/// Deterministic noise in [-1, 1].
fn noise(seed: u64) -> f64 {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 29;
    (x % 2001) as f64 / 1000.0 - 1.0
}

fn synthetic_history(files: &[PathBuf], now: i64) -> Vec<Sample> {
    let c = collect_recordings(files);
    let mut out = Vec::new();
    // Raw every 5 minutes for 2 days, hourly rollups for the 30 days before.
    let mut times: Vec<(i64, Resolution)> = (1..=30 * 24)
        .map(|h| (now - h * 3600, Resolution::Hourly))
        .filter(|(t, _)| *t < now - 2 * 86_400)
        .collect();
    times.extend((1..=2 * 24 * 12).map(|i| (now - i * 300, Resolution::Raw)));
    times.sort_by_key(|t| t.0);
    let wave = |t: i64| ((t % 86_400) as f64 / 86_400.0 * std::f64::consts::TAU).sin();
    for (di, d) in c.devices.iter().enumerate() {
        let r = &d.record;
        let days = r.power_on_hours.filter(|h| *h > 0).map(|h| h as f64 / 24.0);
        for (ti, (t, res)) in times.iter().enumerate() {
            let ago = (now - t) as f64 / 86_400.0;
            let mut push = |metric: &str, v: f64| {
                out.push(Sample {
                    resolution: *res,
                    ..Sample::raw(*t, &r.device, metric, v)
                })
            };
            if let Some(temp) = r.temperature_c.filter(|t| *t > 0) {
                let seed = (di as u64) << 32 | ti as u64;
                push(
                    "temperature_c",
                    (temp as f64 + 3.0 * wave(*t) + noise(seed)).round(),
                );
            }
            if let (Some(u), Some(days)) = (r.percentage_used, days) {
                push(
                    "percentage_used",
                    (u as f64 - u as f64 / days * ago).max(0.0).floor(),
                );
            }
            if let (Some(w), Some(days)) = (r.host_bytes_written, days) {
                let w = w as f64;
                push("host_bytes_written", (w - w / days * ago).max(0.0));
            }
            if let Some(s) = r.available_spare_pct {
                push("available_spare_pct", s as f64);
            }
        }
    }
    for (si, s) in c.sensors.iter().enumerate() {
        for (ti, (t, res)) in times.iter().enumerate() {
            out.push(Sample {
                resolution: *res,
                ..Sample::raw(
                    *t,
                    &hwmon_device(&s.chip),
                    &hwmon_metric(&s.sensor),
                    s.temperature_c + 6.0 * wave(*t) + 2.0 * noise((si as u64) << 32 | ti as u64),
                )
            });
        }
    }
    out
}

#[tokio::main]
async fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("serve_fixtures: {e}");
            std::process::exit(2);
        }
    };
    let files = json_files(&args.fixtures);
    if files.is_empty() {
        eprintln!("serve_fixtures: no *.json found in --fixtures");
        std::process::exit(2);
    }
    let now = chrono::Utc::now().timestamp();
    let store = Arc::new(MemoryStore::default());
    if let Err(e) = store.append(&synthetic_history(&files, now - 60)) {
        eprintln!("serve_fixtures: {e}");
        std::process::exit(1);
    }
    let mut state = MonitoringState::new(store);
    if let Some(p) = &args.engine_stats {
        match std::fs::read_to_string(p).map(|t| serde_json::from_str::<serde_json::Value>(&t)) {
            Ok(Ok(v)) => state = state.with_engine_stats(Arc::new(move || v.clone())),
            other => {
                eprintln!("serve_fixtures: cannot read {}: {other:?}", p.display());
                std::process::exit(2);
            }
        }
    }
    let options = CollectOptions {
        from_json: files,
        ..Default::default()
    };
    let mut sampler = Sampler::new(options, MonitoringConfig::default(), state.clone());
    if let Err(e) = sampler.sample_once(now) {
        eprintln!("serve_fixtures: first sample: {e}");
    }
    let _sampling = spawn_sampler(Duration::from_secs(60), sampler);
    let listener = match tokio::net::TcpListener::bind(&args.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("serve_fixtures: bind {}: {e}", args.listen);
            std::process::exit(1);
        }
    };
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    println!("listening on http://{addr}");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    if let Err(e) = axum::serve(listener, basalt_monitoring::router(state)).await {
        eprintln!("serve_fixtures: {e}");
        std::process::exit(1);
    }
}

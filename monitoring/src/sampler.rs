//! Periodic sampling for `basalt serve`: collect → rules → history → projections → alerts.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::alerts::{deliver, AlertTracker};
use crate::collect::{collect_all, CollectOptions, Collection, SensorReading};
use crate::config::MonitoringConfig;
use crate::error::MonitoringError;
use crate::history::{Sample, SampleStore};
use crate::http::MonitoringState;
use crate::projection::{project, Projection};
use crate::record::{device_key, HealthRecord};
use crate::rules::RuleConfig;

/// Metrics stored in history for every device (names used by `/api/history`).
pub const DEVICE_METRICS: [&str; 5] = [
    "temperature_c",
    "percentage_used",
    "host_bytes_written",
    "available_spare_pct",
    "media_errors",
];

/// History device name of an hwmon chip.
pub fn hwmon_device(chip: &str) -> String {
    format!("hwmon/{chip}")
}

/// History metric name of an hwmon sensor.
pub fn hwmon_metric(sensor: &str) -> String {
    format!("temperature_c/{sensor}")
}

/// The latest evaluated state of the host.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Snapshot {
    /// Unix seconds.
    pub taken_at: i64,
    pub devices: Vec<HealthRecord>,
    pub sensors: Vec<SensorReading>,
    pub projections: Vec<Projection>,
    pub errors: Vec<String>,
}

/// Applies the rules to every device of a collection; `previous` maps device key to the last
/// evaluated record (for the growth rules).
pub fn evaluate(
    collection: &Collection,
    previous: &HashMap<String, HealthRecord>,
    rules: &RuleConfig,
) -> Vec<HealthRecord> {
    collection
        .devices
        .iter()
        .map(|d| {
            let mut r = d.record.clone();
            let prev = previous.get(device_key(&r.device));
            rules.apply(&mut r, prev, d.error.as_deref());
            r
        })
        .collect()
}

/// One value per stored metric of a record.
pub fn samples_of(r: &HealthRecord, ts: i64) -> Vec<Sample> {
    let values = [
        r.temperature_c.map(|v| v as f64),
        r.percentage_used.map(f64::from),
        r.host_bytes_written.map(|v| v as f64),
        r.available_spare_pct.map(f64::from),
        r.media_errors.map(|v| v as f64),
    ];
    DEVICE_METRICS
        .iter()
        .zip(values)
        .filter_map(|(m, v)| v.map(|v| Sample::raw(ts, &r.device, m, v)))
        .collect()
}

fn points(
    store: &dyn SampleStore,
    device: &str,
    metric: &str,
    from: i64,
    to: i64,
) -> Vec<(i64, f64)> {
    match store.range(device, metric, from, to) {
        Ok(v) => v.into_iter().map(|s| (s.ts, s.value)).collect(),
        Err(e) => {
            tracing::warn!(device, metric, "history read failed: {e}");
            Vec::new()
        }
    }
}

/// Projections for `records` from the history in `store`.
pub fn projections(
    store: &dyn SampleStore,
    records: &[HealthRecord],
    config: &MonitoringConfig,
    now: i64,
) -> Vec<Projection> {
    records
        .iter()
        .map(|r| {
            let used = points(
                store,
                &r.device,
                "percentage_used",
                now - 180 * 86_400,
                now + 1,
            );
            let written = points(
                store,
                &r.device,
                "host_bytes_written",
                now - 30 * 86_400,
                now + 1,
            );
            let tbw = config.rated_tbw_bytes(r.model.as_deref(), r.serial.as_deref());
            project(r, &used, &written, tbw, now)
        })
        .collect()
}

/// Collects, evaluates, records and alerts, one pass at a time.
pub struct Sampler {
    options: CollectOptions,
    config: MonitoringConfig,
    store: Arc<dyn SampleStore>,
    state: MonitoringState,
    previous: HashMap<String, HealthRecord>,
    tracker: AlertTracker,
    last_prune: i64,
}

impl Sampler {
    /// A sampler that publishes into `state` and records into `state.store`.
    pub fn new(options: CollectOptions, config: MonitoringConfig, state: MonitoringState) -> Self {
        Sampler {
            options,
            config,
            store: state.store.clone(),
            state,
            previous: HashMap::new(),
            tracker: AlertTracker::default(),
            last_prune: i64::MIN,
        }
    }

    /// One sampling pass at unix time `now` (blocking: runs the tools). The snapshot is also
    /// published to the HTTP state.
    pub fn sample_once(&mut self, now: i64) -> Result<Snapshot, MonitoringError> {
        let collection = collect_all(&self.options);
        let records = evaluate(&collection, &self.previous, &self.config.rules);
        let mut samples: Vec<Sample> = records.iter().flat_map(|r| samples_of(r, now)).collect();
        samples.extend(collection.sensors.iter().map(|s| {
            Sample::raw(
                now,
                &hwmon_device(&s.chip),
                &hwmon_metric(&s.sensor),
                s.temperature_c,
            )
        }));
        let stored = self.store.append(&samples);
        for t in self.tracker.observe(&records, now) {
            deliver(&self.config.alerts, &t);
        }
        self.previous = records
            .iter()
            .map(|r| (device_key(&r.device).to_string(), r.clone()))
            .collect();
        if now.saturating_sub(self.last_prune) >= 3600 {
            match self.store.prune(now, &self.config.history.retention) {
                Ok(stats) => tracing::debug!(?stats, "history pruned"),
                Err(e) => tracing::warn!("history prune failed: {e}"),
            }
            self.last_prune = now;
        }
        let mut errors = collection.errors.clone();
        if let Err(e) = &stored {
            errors.push(format!("history: {e}"));
        }
        let snapshot = Snapshot {
            taken_at: now,
            projections: projections(self.store.as_ref(), &records, &self.config, now),
            devices: records,
            sensors: collection.sensors,
            errors,
        };
        self.state.publish(snapshot.clone());
        stored.map(|_| snapshot)
    }
}

/// Runs `sampler` every `interval` on the tokio runtime (tools run on the blocking pool).
pub fn spawn_sampler(interval: Duration, sampler: Sampler) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut sampler = Some(sampler);
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            let Some(mut s) = sampler.take() else { break };
            let joined = tokio::task::spawn_blocking(move || {
                let now = chrono::Utc::now().timestamp();
                if let Err(e) = s.sample_once(now) {
                    tracing::warn!("sample failed: {e}");
                }
                s
            })
            .await;
            match joined {
                Ok(s) => sampler = Some(s),
                Err(e) => {
                    tracing::error!("sampler task failed: {e}");
                    break;
                }
            }
        }
    })
}

//! Durable sample history behind a small trait, with retention and hourly downsampling.
//!
//! A sample is one value of one metric of one device at one time. Raw samples are kept for
//! `raw_days`; older ones are rolled up into hourly means kept for `hourly_days`. The rollup
//! logic ([`rollup_hourly`], [`plan_prune`]) is pure so any [`SampleStore`] can reuse it.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::error::MonitoringError;

/// Resolution of a stored sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Resolution {
    #[default]
    Raw,
    Hourly,
}

/// One stored value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Unix time, seconds (for hourly rollups: the start of the hour).
    pub ts: i64,
    pub device: String,
    pub metric: String,
    pub value: f64,
    #[serde(default, skip_serializing_if = "is_raw")]
    pub resolution: Resolution,
}

fn is_raw(r: &Resolution) -> bool {
    *r == Resolution::Raw
}

impl Sample {
    /// A raw sample.
    pub fn raw(ts: i64, device: &str, metric: &str, value: f64) -> Self {
        Sample {
            ts,
            device: device.to_string(),
            metric: metric.to_string(),
            value,
            resolution: Resolution::Raw,
        }
    }
}

/// How long samples are kept.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Retention {
    /// Raw samples are kept this many days, then rolled up hourly.
    pub raw_days: u32,
    /// Hourly rollups are kept this many days.
    pub hourly_days: u32,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            raw_days: 7,
            hourly_days: 400,
        }
    }
}

/// Storage of history. An engine-backed implementation needs only these three operations.
pub trait SampleStore: Send + Sync {
    /// Appends samples durably (they survive a crash once this returns Ok).
    fn append(&self, samples: &[Sample]) -> Result<(), MonitoringError>;
    /// Samples of `device`/`metric` with `from <= ts < to`, oldest first, raw and hourly mixed
    /// (hourly only where raw has been pruned).
    fn range(
        &self,
        device: &str,
        metric: &str,
        from: i64,
        to: i64,
    ) -> Result<Vec<Sample>, MonitoringError>;
    /// Applies `retention` at time `now`: rolls raw samples older than `raw_days` into hourly
    /// means and drops hourly rollups older than `hourly_days`.
    fn prune(&self, now: i64, retention: &Retention) -> Result<PruneStats, MonitoringError>;
}

/// What a prune did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct PruneStats {
    pub raw_removed: usize,
    pub hourly_added: usize,
    pub hourly_removed: usize,
}

/// Mean per (device, metric, hour) of raw samples.
pub fn rollup_hourly(raw: &[Sample]) -> Vec<Sample> {
    let mut acc: BTreeMap<(String, String, i64), (f64, u32)> = BTreeMap::new();
    for s in raw.iter().filter(|s| s.resolution == Resolution::Raw) {
        let hour = s.ts.div_euclid(3600) * 3600;
        let e = acc
            .entry((s.device.clone(), s.metric.clone(), hour))
            .or_insert((0.0, 0));
        e.0 += s.value;
        e.1 += 1;
    }
    acc.into_iter()
        .map(|((device, metric, ts), (sum, n))| Sample {
            ts,
            device,
            metric,
            value: sum / n as f64,
            resolution: Resolution::Hourly,
        })
        .collect()
}

/// The result of applying retention to a set of samples.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PrunePlan {
    pub keep: Vec<Sample>,
    pub stats: PruneStats,
}

/// Pure retention: which samples remain (raw younger than `raw_days`, existing and new hourly
/// rollups younger than `hourly_days`). Raw samples are only rolled up for whole hours that are
/// entirely older than the raw cutoff.
pub fn plan_prune(samples: Vec<Sample>, now: i64, retention: &Retention) -> PrunePlan {
    let raw_cutoff = (now - retention.raw_days as i64 * 86_400).div_euclid(3600) * 3600;
    let hourly_cutoff = now - retention.hourly_days as i64 * 86_400;
    let (old_raw, mut keep): (Vec<Sample>, Vec<Sample>) = samples
        .into_iter()
        .partition(|s| s.resolution == Resolution::Raw && s.ts < raw_cutoff);
    let mut stats = PruneStats {
        raw_removed: old_raw.len(),
        ..Default::default()
    };
    let rolled = rollup_hourly(&old_raw);
    stats.hourly_added = rolled.len();
    keep.extend(rolled);
    let before = keep.len();
    keep.retain(|s| s.resolution == Resolution::Raw || s.ts >= hourly_cutoff);
    stats.hourly_removed = before - keep.len();
    keep.sort_by_key(|s| s.ts);
    PrunePlan { keep, stats }
}

/// Averages `points` into at most `max_points` equal time buckets (for charts).
pub fn downsample_for_chart(
    points: &[Sample],
    from: i64,
    to: i64,
    max_points: usize,
) -> Vec<(i64, f64)> {
    if points.len() <= max_points || max_points == 0 || to <= from {
        return points.iter().map(|s| (s.ts, s.value)).collect();
    }
    let width = ((to - from) as f64 / max_points as f64).max(1.0);
    let mut buckets: BTreeMap<i64, (f64, f64, u32)> = BTreeMap::new();
    for s in points {
        let b = ((s.ts - from) as f64 / width).floor() as i64;
        let e = buckets.entry(b).or_insert((0.0, 0.0, 0));
        e.0 += s.ts as f64;
        e.1 += s.value;
        e.2 += 1;
    }
    buckets
        .into_values()
        .map(|(ts, v, n)| ((ts / n as f64).round() as i64, v / n as f64))
        .collect()
}

/// File-backed store: `samples.jsonl` (one JSON sample per line, appended and fsynced).
/// A torn last line (crash mid-write) is ignored on open and dropped at the next prune.
/// Pruning rewrites the file atomically (write to a temporary file, fsync, rename).
pub struct FileStore {
    path: PathBuf,
    inner: Mutex<Inner>,
}

struct Inner {
    samples: Vec<Sample>,
    file: File,
}

impl FileStore {
    /// Opens (creating if needed) the store in `dir`.
    pub fn open(dir: &Path) -> Result<Self, MonitoringError> {
        std::fs::create_dir_all(dir).map_err(|e| MonitoringError::io(dir, e))?;
        let path = dir.join("samples.jsonl");
        let mut samples = Vec::new();
        let mut needs_newline = false;
        if let Ok(f) = File::open(&path) {
            let mut reader = BufReader::new(f);
            let mut line = String::new();
            let mut lineno = 0;
            loop {
                line.clear();
                let n = reader
                    .read_line(&mut line)
                    .map_err(|e| MonitoringError::io(&path, e))?;
                if n == 0 {
                    break;
                }
                lineno += 1;
                needs_newline = !line.ends_with('\n');
                let t = line.trim();
                if t.is_empty() {
                    continue;
                }
                match serde_json::from_str::<Sample>(t) {
                    Ok(s) => samples.push(s),
                    Err(e) => tracing::warn!(
                        path = %path.display(),
                        lineno,
                        "skipping unreadable history line (torn write?): {e}"
                    ),
                }
            }
        }
        samples.sort_by_key(|s| s.ts);
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| MonitoringError::io(&path, e))?;
        if needs_newline {
            // Terminate a torn last line so new samples start on a fresh line.
            file.write_all(b"\n")
                .map_err(|e| MonitoringError::io(&path, e))?;
        }
        Ok(FileStore {
            path,
            inner: Mutex::new(Inner { samples, file }),
        })
    }

    /// Path of the JSON-lines file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn encode(samples: &[Sample]) -> String {
    let mut buf = String::new();
    for s in samples {
        if let Ok(line) = serde_json::to_string(s) {
            buf.push_str(&line);
            buf.push('\n');
        }
    }
    buf
}

impl SampleStore for FileStore {
    fn append(&self, samples: &[Sample]) -> Result<(), MonitoringError> {
        if samples.is_empty() {
            return Ok(());
        }
        let mut inner = self.lock();
        let buf = encode(samples);
        inner
            .file
            .write_all(buf.as_bytes())
            .and_then(|_| inner.file.sync_data())
            .map_err(|e| MonitoringError::io(&self.path, e))?;
        let sorted = inner.samples.last().map(|l| l.ts) <= samples.first().map(|f| f.ts);
        inner.samples.extend_from_slice(samples);
        if !sorted || samples.windows(2).any(|w| w[0].ts > w[1].ts) {
            inner.samples.sort_by_key(|s| s.ts);
        }
        Ok(())
    }

    fn range(
        &self,
        device: &str,
        metric: &str,
        from: i64,
        to: i64,
    ) -> Result<Vec<Sample>, MonitoringError> {
        let inner = self.lock();
        let start = inner.samples.partition_point(|s| s.ts < from);
        Ok(inner.samples[start..]
            .iter()
            .take_while(|s| s.ts < to)
            .filter(|s| s.device == device && s.metric == metric)
            .cloned()
            .collect())
    }

    fn prune(&self, now: i64, retention: &Retention) -> Result<PruneStats, MonitoringError> {
        let mut inner = self.lock();
        let plan = plan_prune(std::mem::take(&mut inner.samples), now, retention);
        let tmp = self.path.with_extension("jsonl.tmp");
        let write = || -> std::io::Result<File> {
            let mut f = File::create(&tmp)?;
            f.write_all(encode(&plan.keep).as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, &self.path)?;
            if let Some(dir) = self.path.parent() {
                if let Ok(d) = File::open(dir) {
                    let _ = d.sync_all();
                }
            }
            OpenOptions::new().append(true).open(&self.path)
        };
        match write() {
            Ok(file) => {
                inner.file = file;
                inner.samples = plan.keep;
                Ok(plan.stats)
            }
            Err(e) => {
                inner.samples = plan.keep;
                Err(MonitoringError::io(&self.path, e))
            }
        }
    }
}

/// In-memory store (tests, `--from-json` replays without a data directory).
#[derive(Default)]
pub struct MemoryStore {
    samples: Mutex<Vec<Sample>>,
}

impl SampleStore for MemoryStore {
    fn append(&self, samples: &[Sample]) -> Result<(), MonitoringError> {
        let mut v = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        v.extend_from_slice(samples);
        v.sort_by_key(|s| s.ts);
        Ok(())
    }

    fn range(
        &self,
        device: &str,
        metric: &str,
        from: i64,
        to: i64,
    ) -> Result<Vec<Sample>, MonitoringError> {
        let v = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        Ok(v.iter()
            .filter(|s| s.device == device && s.metric == metric && s.ts >= from && s.ts < to)
            .cloned()
            .collect())
    }

    fn prune(&self, now: i64, retention: &Retention) -> Result<PruneStats, MonitoringError> {
        let mut v = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        let plan = plan_prune(std::mem::take(&mut *v), now, retention);
        *v = plan.keep;
        Ok(plan.stats)
    }
}

//! The comparison report: `summary.tsv`, `report.md`, `report.html` (+ `charts/*.svg`).

pub mod charts;
pub mod html;
pub mod markdown;

use crate::compare::SuiteSpec;
use crate::error::BenchError;
use crate::machine::MachineInfo;
use crate::proc_stats::{DiskStats, ProcIo};
use std::path::{Path, PathBuf};

/// One engine × step. `None` = does not apply (an empty TSV cell).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    pub engine: String,
    pub step: String,
    pub ops_sec: Option<f64>,
    pub mb_sec: Option<f64>,
    pub p50: Option<f64>,
    pub p99: Option<f64>,
    pub p999: Option<f64>,
    pub p9999: Option<f64>,
    pub write_amp: Option<f64>,
    pub space_amp: Option<f64>,
    pub dev_write_bytes_per_op: Option<f64>,
    pub dev_read_bytes_per_op: Option<f64>,
    pub cpu_us_per_op: Option<f64>,
    pub rss_bytes: Option<u64>,
    pub disk_bytes: Option<u64>,
    pub stall_pct: Option<f64>,
    /// Ops/s per 1-second interval.
    pub intervals: Vec<(u64, f64)>,
    pub diskstats: Option<DiskStats>,
    pub proc_io: Option<ProcIo>,
    pub wall_seconds: f64,
    pub ops: u64,
    pub found: Option<(u64, u64)>,
    pub result_line: String,
}

/// Everything one engine did in a suite.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EngineRun {
    /// `basalt`, `rocksdb`, `fio` — or the test engine's own name (e.g. `memtest`).
    pub label: String,
    pub version: String,
    pub commands: Vec<String>,
    pub rows: Vec<Row>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    pub suite: String,
    pub spec: SuiteSpec,
    pub date: String,
    pub machine: MachineInfo,
    pub data_dir: PathBuf,
    pub engines: Vec<EngineRun>,
    pub bench_version: String,
}

/// The header of `summary.tsv`, exactly as issue #4 names the columns.
pub const TSV_COLUMNS: [&str; 16] = [
    "engine",
    "step",
    "ops_sec",
    "mb_sec",
    "p50",
    "p99",
    "p99.9",
    "p99.99",
    "write_amp",
    "space_amp",
    "dev_write_bytes_per_op",
    "dev_read_bytes_per_op",
    "cpu_us_per_op",
    "rss_bytes",
    "disk_bytes",
    "stall_pct",
];

fn cell(v: Option<f64>, decimals: usize) -> String {
    v.filter(|x| x.is_finite())
        .map(|x| format!("{x:.decimals$}"))
        .unwrap_or_default()
}

impl Row {
    /// The TSV cells in [`TSV_COLUMNS`] order.
    pub fn tsv_cells(&self) -> Vec<String> {
        vec![
            self.engine.clone(),
            self.step.clone(),
            cell(self.ops_sec, 1),
            cell(self.mb_sec, 2),
            cell(self.p50, 2),
            cell(self.p99, 2),
            cell(self.p999, 2),
            cell(self.p9999, 2),
            cell(self.write_amp, 3),
            cell(self.space_amp, 3),
            cell(self.dev_write_bytes_per_op, 1),
            cell(self.dev_read_bytes_per_op, 1),
            cell(self.cpu_us_per_op, 3),
            self.rss_bytes.map(|x| x.to_string()).unwrap_or_default(),
            self.disk_bytes.map(|x| x.to_string()).unwrap_or_default(),
            cell(self.stall_pct, 2),
        ]
    }
}

pub fn summary_tsv(report: &Report) -> String {
    let mut s = TSV_COLUMNS.join("\t");
    s.push('\n');
    for e in &report.engines {
        for r in &e.rows {
            s.push_str(&r.tsv_cells().join("\t"));
            s.push('\n');
        }
    }
    s
}

fn opt(v: Option<f64>, d: usize) -> String {
    v.filter(|x| x.is_finite())
        .map(|x| format!("{x:.d$}"))
        .unwrap_or_else(|| "-".into())
}

/// The one-line summary per engine and step (format documented in bench/README.md):
/// `ENGINE STEP: OPS ops/s MB MB/s lat us p50 A p99 B p99.9 C p99.99 D; w-amp W s-amp S; dev B/op write X read Y; cpu C us/op; rss R MiB; disk D MiB; stall P%`
pub fn one_line_summary(r: &Row) -> String {
    let mib = |b: Option<u64>| {
        b.map(|x| format!("{:.1}", x as f64 / 1048576.0))
            .unwrap_or_else(|| "-".into())
    };
    format!(
        "{} {}: {} ops/s {} MB/s lat us p50 {} p99 {} p99.9 {} p99.99 {}; w-amp {} s-amp {}; dev B/op write {} read {}; cpu {} us/op; rss {} MiB; disk {} MiB; stall {}%",
        r.engine,
        r.step,
        opt(r.ops_sec, 0),
        opt(r.mb_sec, 1),
        opt(r.p50, 2),
        opt(r.p99, 2),
        opt(r.p999, 2),
        opt(r.p9999, 2),
        opt(r.write_amp, 2),
        opt(r.space_amp, 2),
        opt(r.dev_write_bytes_per_op, 0),
        opt(r.dev_read_bytes_per_op, 0),
        opt(r.cpu_us_per_op, 2),
        mib(r.rss_bytes),
        mib(r.disk_bytes),
        opt(r.stall_pct, 1),
    )
}

/// `num=20000, key_size=16, ...` from the suite's sizes.
pub fn spec_text(spec: &SuiteSpec) -> String {
    match serde_json::to_value(spec) {
        Ok(serde_json::Value::Object(m)) => m
            .iter()
            .map(|(k, v)| {
                format!(
                    "{k}={}",
                    v.as_str()
                        .map(String::from)
                        .unwrap_or_else(|| v.to_string())
                )
            })
            .collect::<Vec<_>>()
            .join(", "),
        _ => String::new(),
    }
}

/// Lines naming versions, flags, machine and date (shared by Markdown and HTML).
pub fn header_facts(report: &Report) -> Vec<(String, String)> {
    let m = &report.machine;
    let mut v = vec![
        ("Date".to_string(), report.date.clone()),
        (
            "Suite".to_string(),
            format!("{}: {}", report.suite, spec_text(&report.spec)),
        ),
        ("basalt-bench".to_string(), report.bench_version.clone()),
    ];
    for e in &report.engines {
        v.push((format!("Engine {}", e.label), e.version.clone()));
    }
    v.push((
        "Machine".to_string(),
        format!(
            "{} — {} cores ({}), {:.1} GiB RAM, {}",
            m.hostname,
            m.cores,
            m.cpu_model,
            m.ram_bytes as f64 / (1u64 << 30) as f64,
            m.kernel
        ),
    ));
    v.push((
        "Storage".to_string(),
        format!(
            "{} on /dev/{} ({}), file system {} mounted at {}",
            report.data_dir.display(),
            m.device.clone().unwrap_or_else(|| "?".into()),
            m.device_model,
            m.fs_type,
            m.mount_point
        ),
    ));
    v
}

/// Names of engines that are test doubles, so reports can say so plainly.
pub fn test_engine_note(report: &Report) -> Option<String> {
    report
        .engines
        .iter()
        .find(|e| e.label != "basalt" && e.label != "rocksdb" && e.label != "fio")
        .map(|e| {
            format!(
                "The Basalt side of this report is NOT Basalt: it is '{}' ({}). Its numbers say nothing about Basalt.",
                e.label, e.version
            )
        })
}

pub fn write_report(report: &Report, dir: &Path) -> Result<(), BenchError> {
    let w = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).map_err(|e| BenchError::io(format!("write {}", p.display()), e))
    };
    w("summary.tsv", &summary_tsv(report))?;
    w(
        "report.json",
        &serde_json::to_string_pretty(report)
            .map_err(|e| BenchError::malformed("report", e.to_string()))?,
    )?;
    let charts = charts::render_all(report)?;
    let cdir = dir.join("charts");
    std::fs::create_dir_all(&cdir)
        .map_err(|e| BenchError::io(format!("create {}", cdir.display()), e))?;
    for c in &charts {
        w(&format!("charts/{}.svg", c.file_stem), &c.svg)?;
    }
    w("report.md", &markdown::render(report, &charts))?;
    w("report.html", &html::render(report, &charts))?;
    Ok(())
}

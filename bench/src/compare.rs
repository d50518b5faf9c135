//! `basalt bench compare`: run a named suite against the Basalt-side command and RocksDB's
//! db_bench (each step in its own process, measured from outside), plus fio baselines on the
//! same file system, then write the report.

use crate::db_bench::{db_bench_version, engine_identity};
use crate::error::BenchError;
use crate::fio;
use crate::machine::MachineInfo;
use crate::output::{parse_output, parse_report_csv};
use crate::proc_stats::{disk_usage, read_diskstats, run_measured};
use crate::progress::progress_text;
use crate::report::{self, EngineRun, Report, Row};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Suite {
    Quick,
    Standard,
}

impl Suite {
    pub fn from_name(s: &str) -> Result<Suite, BenchError> {
        match s {
            "quick" => Ok(Suite::Quick),
            "standard" => Ok(Suite::Standard),
            other => Err(BenchError::UnknownSuite(other.to_string())),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Suite::Quick => "quick",
            Suite::Standard => "standard",
        }
    }
}

/// Sizes of a suite. `standard` is sized for a small server (2 cores, one SSD).
#[derive(Debug, Clone, serde::Serialize)]
pub struct SuiteSpec {
    pub num: u64,
    pub key_size: usize,
    pub value_size: usize,
    pub read_seconds: u64,
    pub write_seconds: u64,
    pub cache_size: u64,
    /// Data block size both engines get (`--block_size`): db_bench's default, which
    /// Basalt's 16 KiB default would otherwise be compared against.
    pub block_size: usize,
    pub compression: String,
    pub seek_nexts: usize,
    pub batch_size: usize,
    /// Bytes/s of the background writer in the *whilewriting steps.
    pub bg_write_rate: u64,
    pub fio_size: String,
    pub fio_seconds: u64,
}

impl SuiteSpec {
    pub fn for_suite(s: Suite) -> SuiteSpec {
        match s {
            Suite::Quick => SuiteSpec {
                num: 20_000,
                key_size: 16,
                value_size: 100,
                read_seconds: 1,
                write_seconds: 1,
                cache_size: 16 << 20,
                block_size: 4096,
                compression: "none".into(),
                seek_nexts: 10,
                batch_size: 8,
                bg_write_rate: 1 << 20,
                fio_size: "32M".into(),
                fio_seconds: 1,
            },
            Suite::Standard => SuiteSpec {
                num: 4_000_000,
                key_size: 20,
                value_size: 400,
                read_seconds: 60,
                write_seconds: 60,
                cache_size: 1 << 30,
                block_size: 4096,
                compression: "lz4".into(),
                seek_nexts: 10,
                batch_size: 8,
                bg_write_rate: 2 << 20,
                fio_size: "4G".into(),
                fio_seconds: 30,
            },
        }
    }
}

/// One step of a suite: the benchmark name each side runs and the flags both get.
#[derive(Debug, Clone)]
pub struct SuiteStep {
    pub name: &'static str,
    pub basalt_benchmark: &'static str,
    pub rocksdb_benchmark: &'static str,
    pub flags: Vec<String>,
    pub writes_user_data: bool,
}

/// `--read_random_exp_range` of the `readhot` step: about half the reads go to the
/// hottest 1% of the keys, so the caches, not the device, decide the step.
pub const HOT_READ_RANGE: f64 = 10.0;

/// benchmark_compare.sh's order: load, read-only steps, a few overwrites, wait for the
/// compaction/GC debt, then the read-while-writing steps and a full overwrite.
pub fn suite_steps(spec: &SuiteSpec) -> Vec<SuiteStep> {
    let rd = format!("--duration={}", spec.read_seconds);
    let wd = format!("--duration={}", spec.write_seconds);
    let bg = format!("--benchmark_write_rate_limit={}", spec.bg_write_rate);
    let seek = format!("--seek_nexts={}", spec.seek_nexts);
    let step = |name, b, r, flags: Vec<String>, w| SuiteStep {
        name,
        basalt_benchmark: b,
        rocksdb_benchmark: r,
        flags,
        writes_user_data: w,
    };
    vec![
        step("fillseq", "fillseq", "fillseq", vec![], true),
        step(
            "readrandom",
            "readrandom",
            "readrandom",
            vec![rd.clone()],
            false,
        ),
        step(
            "readhot",
            "readrandom",
            "readrandom",
            vec![
                rd.clone(),
                format!("--read_random_exp_range={HOT_READ_RANGE}"),
            ],
            false,
        ),
        step(
            "fwdrange",
            "fwdrange",
            "seekrandom",
            vec![rd.clone(), seek.clone()],
            false,
        ),
        step(
            "multireadrandom",
            "multireadrandom",
            "multireadrandom",
            vec![rd.clone(), format!("--batch_size={}", spec.batch_size)],
            false,
        ),
        step(
            "overwritesome",
            "overwrite",
            "overwrite",
            vec![format!("--writes={}", (spec.num / 10).max(1))],
            true,
        ),
        step(
            "waitforcompaction",
            "waitforcompaction",
            "waitforcompaction",
            vec![],
            false,
        ),
        step(
            "readwhilewriting",
            "readwhilewriting",
            "readwhilewriting",
            vec![rd.clone(), bg.clone()],
            false,
        ),
        step(
            "fwdrangewhilewriting",
            "fwdrangewhilewriting",
            "seekrandomwhilewriting",
            vec![rd, bg, seek],
            false,
        ),
        step("overwrite", "overwrite", "overwrite", vec![wd], true),
    ]
}

/// Arguments of `basalt bench compare`.
#[derive(Debug, Clone)]
pub struct CompareArgs {
    pub suite: Suite,
    pub out: PathBuf,
    /// Where the databases and the fio file go (the file system under test).
    pub db_dir: PathBuf,
    /// Command speaking the db_bench-compatible CLI for the Basalt side (e.g. `basalt bench`).
    pub basalt_cmd: Vec<String>,
    pub db_bench: String,
    pub fio: String,
    /// Override the suite's key count / step seconds.
    pub num: Option<u64>,
    pub seconds: Option<u64>,
}

const COMPARE_USAGE: &str = "usage: compare --suite quick|standard --out DIR [--db-dir DIR] [--basalt-cmd 'CMD ARGS'] [--db-bench PATH] [--fio PATH] [--num N] [--seconds S]";

impl CompareArgs {
    pub fn new(suite: Suite, out: PathBuf, basalt_cmd: Vec<String>) -> CompareArgs {
        CompareArgs {
            suite,
            db_dir: out.join("data"),
            out,
            basalt_cmd,
            db_bench: "db_bench".into(),
            fio: "fio".into(),
            num: None,
            seconds: None,
        }
    }

    /// Parse `--name VALUE` / `--name=VALUE` arguments. `--basalt-cmd` is split on spaces.
    pub fn parse<S: AsRef<str>>(args: &[S]) -> Result<CompareArgs, BenchError> {
        let mut suite = None;
        let mut out = None;
        let mut a = CompareArgs::new(Suite::Quick, PathBuf::new(), vec![]);
        let mut db_dir = None;
        let mut i = 0;
        while i < args.len() {
            let arg = args[i].as_ref();
            i += 1;
            let (name, inline) = match arg.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (arg, None),
            };
            if !name.starts_with("--") {
                return Err(BenchError::Positional(format!("{arg} ({COMPARE_USAGE})")));
            }
            let value = match inline {
                Some(v) => v,
                None if i < args.len() => {
                    i += 1;
                    args[i - 1].as_ref().to_string()
                }
                None => {
                    return Err(BenchError::MissingValue(
                        name.trim_start_matches('-').to_string(),
                    ))
                }
            };
            let n = |v: &str| {
                v.parse::<u64>().map_err(|_| BenchError::BadFlagValue {
                    flag: name.trim_start_matches('-').into(),
                    value: v.into(),
                    reason: "expected a number".into(),
                })
            };
            match name {
                "--suite" => suite = Some(Suite::from_name(&value)?),
                "--out" => out = Some(PathBuf::from(value)),
                "--db-dir" => db_dir = Some(PathBuf::from(value)),
                "--basalt-cmd" => {
                    a.basalt_cmd = value.split_whitespace().map(String::from).collect()
                }
                "--db-bench" => a.db_bench = value,
                "--fio" => a.fio = value,
                "--num" => a.num = Some(n(&value)?),
                "--seconds" => a.seconds = Some(n(&value)?),
                _ => return Err(BenchError::UnknownFlag(format!("{name} ({COMPARE_USAGE})"))),
            }
        }
        a.suite =
            suite.ok_or_else(|| BenchError::MissingValue(format!("suite ({COMPARE_USAGE})")))?;
        a.out = out.ok_or_else(|| BenchError::MissingValue(format!("out ({COMPARE_USAGE})")))?;
        a.db_dir = db_dir.unwrap_or_else(|| a.out.join("data"));
        Ok(a)
    }

    pub fn spec(&self) -> SuiteSpec {
        let mut s = SuiteSpec::for_suite(self.suite);
        if let Some(n) = self.num {
            s.num = n;
        }
        if let Some(sec) = self.seconds {
            s.read_seconds = sec;
            s.write_seconds = sec;
            s.fio_seconds = sec;
        }
        s
    }
}

/// Flags only RocksDB's side gets: bloom filters (Basalt's index has its own) and index and
/// filter blocks inside the block cache, so that `--cache_size` bounds the index memory of
/// both engines (Basalt's budget includes its index), partitioned into 4 KiB blocks behind
/// a pinned top level with a high-priority pool: the layout RocksDB recommends for cached
/// index/filter blocks. Whole per-file index blocks thrash a small sharded cache (readrandom
/// 3x slower at a 60 MiB cache, `engine/scripts/bench-read-path.sh`).
pub const ROCKSDB_ONLY_FLAGS: &[&str] = &[
    "--bloom_bits=10",
    "--cache_index_and_filter_blocks=1",
    "--partition_index_and_filters=1",
    "--metadata_block_size=4096",
    "--pin_top_level_index_and_filter=1",
    "--cache_high_pri_pool_ratio=0.5",
];

fn common_flags(
    spec: &SuiteSpec,
    db: &Path,
    report_file: &Path,
    benchmarks: &str,
    fresh: bool,
) -> Vec<String> {
    vec![
        format!("--db={}", db.display()),
        format!("--benchmarks={benchmarks},stats"),
        format!("--num={}", spec.num),
        format!("--key_size={}", spec.key_size),
        format!("--value_size={}", spec.value_size),
        format!("--compression_type={}", spec.compression),
        "--compression_ratio=0.5".into(),
        format!("--cache_size={}", spec.cache_size),
        format!("--block_size={}", spec.block_size),
        "--threads=1".into(),
        "--seed=1".into(),
        "--histogram=1".into(),
        "--report_interval_seconds=1".into(),
        format!("--report_file={}", report_file.display()),
        format!("--use_existing_db={}", if fresh { 0 } else { 1 }),
    ]
}

struct Live<'a> {
    tty: bool,
    last_plain: Duration,
    out: &'a mut dyn Write,
}

impl Live<'_> {
    fn tick(&mut self, label: &str, elapsed: Duration, report_file: &Path, expected: Option<u64>) {
        let qps = std::fs::read_to_string(report_file)
            .ok()
            .and_then(|t| {
                t.lines()
                    .last()
                    .and_then(|l| l.split(',').nth(1)?.parse::<f64>().ok())
            })
            .unwrap_or(0.0);
        let e = elapsed.as_secs_f64();
        let text = progress_text(label, e, qps, expected.map(|x| x as f64 - e));
        if self.tty {
            eprint!("\r\x1b[2K{text}");
        } else if elapsed >= self.last_plain + Duration::from_secs(10) {
            self.last_plain = elapsed;
            let _ = writeln!(self.out, "progress {text}");
        }
    }
}

/// One side of the comparison: how to start it and where its files go.
struct Side<'a> {
    label_hint: &'a str,
    base_cmd: &'a [String],
    is_rocksdb: bool,
    db: &'a Path,
    raw: &'a Path,
}

/// Runs one engine through every step of the suite.
fn run_engine(
    side: &Side<'_>,
    spec: &SuiteSpec,
    steps: &[SuiteStep],
    device: Option<&str>,
    out: &mut dyn Write,
) -> Result<EngineRun, BenchError> {
    let (engine_label_hint, base_cmd, is_rocksdb, db, raw) = (
        side.label_hint,
        side.base_cmd,
        side.is_rocksdb,
        side.db,
        side.raw,
    );
    std::fs::create_dir_all(raw)
        .map_err(|e| BenchError::io(format!("create {}", raw.display()), e))?;
    if db.exists() {
        std::fs::remove_dir_all(db)
            .map_err(|e| BenchError::io(format!("remove {}", db.display()), e))?;
    }
    std::fs::create_dir_all(db)
        .map_err(|e| BenchError::io(format!("create {}", db.display()), e))?;
    let live_bytes = spec.num * (spec.key_size + spec.value_size) as u64;
    let mut run = EngineRun {
        label: engine_label_hint.to_string(),
        version: String::new(),
        commands: Vec::new(),
        rows: Vec::new(),
    };
    let tty = std::io::stderr().is_terminal();
    for (i, st) in steps.iter().enumerate() {
        let bench = if is_rocksdb {
            st.rocksdb_benchmark
        } else {
            st.basalt_benchmark
        };
        let report_file = raw.join(format!("{}.csv", st.name));
        let _ = std::fs::remove_file(&report_file);
        let mut argv = base_cmd.to_vec();
        argv.extend(common_flags(spec, db, &report_file, bench, i == 0));
        argv.extend(st.flags.iter().cloned());
        if is_rocksdb {
            argv.extend(ROCKSDB_ONLY_FLAGS.iter().map(|f| f.to_string()));
        }
        let stdout = raw.join(format!("{}.stdout", st.name));
        let stderr = raw.join(format!("{}.stderr", st.name));
        let before = device.and_then(read_diskstats);
        let expected = st.flags.iter().find_map(|f| {
            f.strip_prefix("--duration=")
                .and_then(|v| v.parse::<u64>().ok())
        });
        let label = format!("{engine_label_hint} {}", st.name);
        let mut live = Live {
            tty,
            last_plain: Duration::ZERO,
            out: &mut *out,
        };
        let m = run_measured(&argv, &stdout, &stderr, |el| {
            live.tick(&label, el, &report_file, expected)
        })?;
        if tty {
            eprint!("\r\x1b[2K");
        }
        // Push dirty pages to the device so /proc/diskstats counts this step's writes.
        unsafe { libc::sync() };
        let after = device.and_then(read_diskstats);
        let text = std::fs::read_to_string(&stdout)
            .map_err(|e| BenchError::io(format!("read {}", stdout.display()), e))?;
        if m.exit_code != Some(0) {
            let err = std::fs::read_to_string(&stderr).unwrap_or_default();
            let tail: Vec<&str> = err.lines().rev().take(5).collect();
            return Err(BenchError::ToolFailed {
                tool: argv[0].clone(),
                detail: format!(
                    "step {} exited with {:?}; command: {}; stderr: {}",
                    st.name,
                    m.exit_code,
                    argv.join(" "),
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                ),
            });
        }
        if !is_rocksdb && run.version.is_empty() {
            if let Some((name, ver)) = engine_identity(&text) {
                run.label = name;
                run.version = ver;
            }
        }
        let parsed = parse_output(&text)?;
        let result = parsed.results.first();
        if result.is_none() && st.basalt_benchmark != "waitforcompaction" {
            return Err(BenchError::malformed(
                argv[0].clone(),
                format!(
                    "step {} printed no db_bench result line (see {})",
                    st.name,
                    stdout.display()
                ),
            ));
        }
        let intervals = match std::fs::read_to_string(&report_file) {
            Ok(t) => parse_report_csv(&t)?,
            Err(_) => Vec::new(),
        };
        let disk = disk_usage(db);
        let ops = result.map(|r| r.ops).unwrap_or(0);
        let per_op = |x: u64| (ops > 0).then(|| x as f64 / ops as f64);
        let io = m.io.unwrap_or_default();
        let dstat = match (before, after) {
            (Some(b), Some(a)) => Some(a.delta(&b)),
            _ => None,
        };
        let user_bytes = ops * (spec.key_size + spec.value_size) as u64;
        let row = Row {
            engine: run.label.clone(),
            step: st.name.to_string(),
            ops_sec: result.map(|r| r.ops_per_sec),
            mb_sec: result.and_then(|r| r.mb_per_sec),
            p50: result.and_then(|r| r.percentiles).map(|p| p[0]),
            p99: result.and_then(|r| r.percentiles).map(|p| p[2]),
            p999: result.and_then(|r| r.percentiles).map(|p| p[3]),
            p9999: result.and_then(|r| r.percentiles).map(|p| p[4]),
            write_amp: (st.writes_user_data && user_bytes > 0 && m.io.is_some())
                .then(|| io.write_bytes as f64 / user_bytes as f64),
            space_amp: (live_bytes > 0).then(|| disk as f64 / live_bytes as f64),
            dev_write_bytes_per_op: m.io.and_then(|io| per_op(io.write_bytes)),
            dev_read_bytes_per_op: m.io.and_then(|io| per_op(io.read_bytes)),
            cpu_us_per_op: per_op(1).map(|x| x * (m.user_seconds + m.sys_seconds) * 1e6),
            rss_bytes: Some(m.max_rss_bytes),
            disk_bytes: Some(disk),
            stall_pct: parsed.stall_pct,
            intervals,
            diskstats: dstat,
            proc_io: m.io,
            wall_seconds: m.wall_seconds,
            ops,
            found: result.and_then(|r| r.found),
            result_line: text
                .lines()
                .find(|l| crate::output::result_line_re().is_match(l))
                .unwrap_or("")
                .to_string(),
        };
        let _ = writeln!(out, "{}", report::one_line_summary(&row));
        run.commands.push(argv.join(" "));
        run.rows.push(row);
    }
    Ok(run)
}

fn fio_rows(
    args: &CompareArgs,
    spec: &SuiteSpec,
    raw: &Path,
    out: &mut dyn Write,
) -> Result<(Vec<Row>, String, Vec<String>), BenchError> {
    std::fs::create_dir_all(raw)
        .map_err(|e| BenchError::io(format!("create {}", raw.display()), e))?;
    let dir = args.db_dir.join("fio");
    std::fs::create_dir_all(&dir)
        .map_err(|e| BenchError::io(format!("create {}", dir.display()), e))?;
    let file = dir.join("fio.testfile");
    let mut rows = Vec::new();
    let mut version = String::new();
    let mut cmds = Vec::new();
    for job in fio::baseline_jobs() {
        let (r, m, argv) = fio::run_job(
            &args.fio,
            &job,
            &file,
            &spec.fio_size,
            spec.fio_seconds,
            raw,
        )?;
        version = r.version.clone();
        let ops = r.total_ios;
        let per_op = |x: u64| (ops > 0).then(|| x as f64 / ops as f64);
        let row = Row {
            engine: "fio".into(),
            step: job.name.to_string(),
            ops_sec: Some(r.iops),
            mb_sec: Some(r.bw_bytes / 1048576.0),
            p50: Some(r.clat_us[0]),
            p99: Some(r.clat_us[1]),
            p999: Some(r.clat_us[2]),
            p9999: Some(r.clat_us[3]),
            write_amp: None,
            space_amp: None,
            dev_write_bytes_per_op: m.io.and_then(|io| per_op(io.write_bytes)),
            dev_read_bytes_per_op: m.io.and_then(|io| per_op(io.read_bytes)),
            cpu_us_per_op: per_op(1).map(|x| x * (m.user_seconds + m.sys_seconds) * 1e6),
            rss_bytes: Some(m.max_rss_bytes),
            disk_bytes: Some(disk_usage(&dir)),
            stall_pct: None,
            intervals: vec![],
            diskstats: None,
            proc_io: m.io,
            wall_seconds: m.wall_seconds,
            ops,
            found: None,
            result_line: String::new(),
        };
        let _ = writeln!(out, "{}", report::one_line_summary(&row));
        cmds.push(argv.join(" "));
        rows.push(row);
    }
    let _ = std::fs::remove_file(&file);
    Ok((rows, version, cmds))
}

/// Entry point of `basalt bench compare`. Progress and one-line summaries go to `out`.
pub fn run_compare(args: &CompareArgs, out: &mut dyn Write) -> Result<Report, BenchError> {
    if args.basalt_cmd.is_empty() {
        return Err(BenchError::MissingValue(format!(
            "basalt-cmd ({COMPARE_USAGE})"
        )));
    }
    let spec = args.spec();
    let steps = suite_steps(&spec);
    for d in [&args.out, &args.db_dir] {
        std::fs::create_dir_all(d)
            .map_err(|e| BenchError::io(format!("create {}", d.display()), e))?;
    }
    let machine = MachineInfo::collect(&args.db_dir);
    let device = machine.device.clone();
    let rocksdb_version = db_bench_version(&args.db_bench)?;
    let started = crate::machine::utc_now_string();
    let _ = writeln!(
        out,
        "compare: suite {} on {} ({} {}), results in {}",
        args.suite.name(),
        args.db_dir.display(),
        machine.fs_type,
        machine.device_model,
        args.out.display()
    );
    let raw = args.out.join("raw");

    let (bdb, braw) = (args.db_dir.join("basalt-side"), raw.join("basalt-side"));
    let basalt_side = Side {
        label_hint: "basalt-side",
        base_cmd: &args.basalt_cmd,
        is_rocksdb: false,
        db: &bdb,
        raw: &braw,
    };
    let basalt = run_engine(&basalt_side, &spec, &steps, device.as_deref(), out)?;
    let (rdb, rraw) = (args.db_dir.join("rocksdb"), raw.join("rocksdb"));
    let rocks_side = Side {
        label_hint: "rocksdb",
        base_cmd: std::slice::from_ref(&args.db_bench),
        is_rocksdb: true,
        db: &rdb,
        raw: &rraw,
    };
    let mut rocks = run_engine(&rocks_side, &spec, &steps, device.as_deref(), out)?;
    rocks.version = format!("RocksDB db_bench {rocksdb_version}");
    let (fio_rows, fio_version, fio_cmds) = fio_rows(args, &spec, &raw.join("fio"), out)?;
    let fio_run = EngineRun {
        label: "fio".into(),
        version: fio_version,
        commands: fio_cmds,
        rows: fio_rows,
    };
    let report = Report {
        suite: args.suite.name().to_string(),
        spec,
        date: started,
        machine,
        data_dir: args.db_dir.clone(),
        engines: vec![basalt, rocks, fio_run],
        bench_version: env!("CARGO_PKG_VERSION").to_string(),
    };
    report::write_report(&report, &args.out)?;
    let _ = writeln!(
        out,
        "compare: wrote {}/summary.tsv, report.md, report.html",
        args.out.display()
    );
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_args_parse_and_reject() {
        let a = CompareArgs::parse(&[
            "--suite",
            "quick",
            "--out=/tmp/x",
            "--basalt-cmd",
            "basalt bench",
            "--num=5",
        ])
        .unwrap();
        assert_eq!(a.suite, Suite::Quick);
        assert_eq!(a.basalt_cmd, vec!["basalt", "bench"]);
        assert_eq!(a.db_dir, PathBuf::from("/tmp/x/data"));
        assert_eq!(a.spec().num, 5);
        assert!(CompareArgs::parse(&["--suite", "huge", "--out", "x"])
            .unwrap_err()
            .to_string()
            .contains("huge"));
        assert!(CompareArgs::parse(&["--suite", "quick"]).is_err());
        assert!(
            CompareArgs::parse(&["--suite", "quick", "--out", "x", "--frob", "1"])
                .unwrap_err()
                .to_string()
                .contains("--frob")
        );
    }

    #[test]
    fn both_engines_get_db_bench_default_block_size() {
        for suite in [Suite::Quick, Suite::Standard] {
            let spec = SuiteSpec::for_suite(suite);
            let f = common_flags(
                &spec,
                Path::new("db"),
                Path::new("r.csv"),
                "readrandom",
                true,
            );
            assert!(f.contains(&"--block_size=4096".to_string()), "{f:?}");
        }
    }

    #[test]
    fn standard_suite_follows_benchmark_compare_order() {
        let s = suite_steps(&SuiteSpec::for_suite(Suite::Standard));
        let names: Vec<_> = s.iter().map(|x| x.name).collect();
        assert_eq!(
            names,
            [
                "fillseq",
                "readrandom",
                "readhot",
                "fwdrange",
                "multireadrandom",
                "overwritesome",
                "waitforcompaction",
                "readwhilewriting",
                "fwdrangewhilewriting",
                "overwrite"
            ]
        );
        assert_eq!(s[2].rocksdb_benchmark, "readrandom");
        assert!(s[2]
            .flags
            .contains(&"--read_random_exp_range=10".to_string()));
        assert_eq!(s[3].rocksdb_benchmark, "seekrandom");
        assert_eq!(s[8].rocksdb_benchmark, "seekrandomwhilewriting");
    }
}

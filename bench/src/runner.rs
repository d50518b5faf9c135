//! `basalt bench`: parse db_bench flags, run the benchmarks in order, print db_bench's lines.

use crate::engine::{EngineFactory, KvEngine};
use crate::error::BenchError;
use crate::flags::Flags;
use crate::histogram::LatencyHistogram;
use crate::output::format_result_line;
use crate::progress::{Monitor, MonitorConfig};
use crate::steps::{run_measured_step, OpenLoopStats, StepKind};
use std::io::Write;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// What one benchmark step did (also what its printed lines say).
#[derive(Debug, Clone)]
pub struct StepReport {
    pub name: String,
    pub kind: StepKind,
    pub ops: u64,
    pub seconds: f64,
    pub micros_per_op: f64,
    pub ops_per_sec: f64,
    pub bytes: u64,
    pub found: u64,
    pub attempted: u64,
    pub hist: LatencyHistogram,
    /// Operations completed in each 1-second interval.
    pub intervals: Vec<(u64, f64)>,
    pub open_loop: Option<OpenLoopStats>,
    pub background_writes: u64,
    /// The result line as printed (empty for steps without one).
    pub line: String,
}

/// Entry point of `basalt bench ARGS...`: db_bench flags in, db_bench lines out.
pub fn run_bench(
    args: &[String],
    engine_factory: &dyn EngineFactory,
    out: &mut dyn Write,
) -> Result<(), BenchError> {
    let flags = Flags::parse(args)?;
    run_benchmarks(&flags, engine_factory, out).map(|_| ())
}

fn w(out: &mut dyn Write, s: &str) -> Result<(), BenchError> {
    writeln!(out, "{s}").map_err(|e| BenchError::io("writing benchmark output", e))
}

/// Run every step of `flags.benchmarks` in order on one engine; returns their reports.
pub fn run_benchmarks(
    flags: &Flags,
    factory: &dyn EngineFactory,
    out: &mut dyn Write,
) -> Result<Vec<StepReport>, BenchError> {
    let mut flags = flags.clone();
    let kinds = flags
        .benchmarks
        .iter()
        .map(|b| StepKind::from_name(b, &flags).map(|k| (b.clone(), k)))
        .collect::<Result<Vec<_>, _>>()?;
    if flags.seed == 0 {
        let s = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(1);
        w(out, &format!("Set seed to {s} because --seed was 0"))?;
        flags.seed = s;
    }
    let mut engine: Arc<dyn KvEngine> =
        factory.open(&flags.engine_options(!flags.use_existing_db))?;
    print_header(&flags, engine.as_ref(), out)?;
    let mut used = false;
    let mut reports = Vec::new();
    for (i, (name, kind)) in kinds.iter().enumerate() {
        if kind.wants_fresh_db() && !flags.use_existing_db && used {
            engine.close()?;
            drop(engine);
            engine = factory.open(&flags.engine_options(true))?;
        }
        used = true;
        let seed = flags.seed.wrapping_add(i as u64 * 1_000_003);
        match kind {
            StepKind::Flush => engine.flush()?,
            StepKind::WaitForCompaction => {
                w(
                    out,
                    &format!("waitforcompaction({}): started", flags.db.display()),
                )?;
                let t = Instant::now();
                engine.wait_for_gc()?;
                w(
                    out,
                    &format!(
                        "waitforcompaction({}): finished after {:.3} seconds",
                        flags.db.display(),
                        t.elapsed().as_secs_f64()
                    ),
                )?;
            }
            StepKind::Stats => print_stats(engine.as_ref(), out)?,
            _ => {
                w(out, &format!("DB path: [{}]", flags.db.display()))?;
                let r = run_one(name, *kind, &flags, engine.clone(), seed)?;
                w(out, &r.line)?;
                if let Some(ol) = &r.open_loop {
                    w(
                        out,
                        &format!(
                            "Open-loop: offered {:.0} ops/sec achieved {:.0} ops/sec; {:.3}% of {} responses within {} us",
                            ol.offered_ops_sec,
                            ol.achieved_ops_sec,
                            100.0 * ol.within_sla_fraction(),
                            ol.responses,
                            ol.sla_us
                        ),
                    )?;
                }
                if flags.histogram {
                    r.hist
                        .print_db_bench(out, kind.op_word())
                        .map_err(|e| BenchError::io("writing histogram", e))?;
                }
                out.flush()
                    .map_err(|e| BenchError::io("writing benchmark output", e))?;
                reports.push(r);
            }
        }
    }
    engine.close()?;
    Ok(reports)
}

fn run_one(
    name: &str,
    kind: StepKind,
    flags: &Flags,
    engine: Arc<dyn KvEngine>,
    seed: u64,
) -> Result<StepReport, BenchError> {
    let done = Arc::new(AtomicU64::new(0));
    let (calls, per_call) = kind.total_ops(flags);
    let monitor = Monitor::start(MonitorConfig {
        step: name.to_string(),
        done: done.clone(),
        expected_ops: (flags.duration_secs == 0).then_some(calls * per_call),
        duration_secs: (flags.duration_secs > 0).then_some(flags.duration_secs),
        report_file: Some(flags.report_file.clone()),
        report_interval_secs: flags.report_interval_seconds,
        progress_interval_secs: flags.progress_interval_seconds,
    })
    .map_err(|e| {
        BenchError::io(
            format!("creating report file {}", flags.report_file.display()),
            e,
        )
    })?;
    let outcome = run_measured_step(kind, flags, engine, seed, done);
    let intervals = monitor.finish();
    let o = outcome?;
    let t = &o.tally;
    let ops = t.ops;
    let secs = o.wall_seconds;
    let micros_per_op = if ops > 0 {
        t.thread_seconds * 1e6 / ops as f64
    } else {
        0.0
    };
    let ops_per_sec = if secs > 0.0 { ops as f64 / secs } else { 0.0 };
    let mb = (t.bytes > 0).then(|| t.bytes as f64 / 1048576.0 / secs.max(1e-9));
    let message = match kind {
        StepKind::ReadRandom
        | StepKind::MultiReadRandom
        | StepKind::Seek { .. }
        | StepKind::ReadWhileWriting
        | StepKind::SeekWhileWriting { .. } => format!("({} of {} found)\n", t.found, t.attempted),
        StepKind::UpdateRandom => format!("( updates:{} found:{})", t.updates, t.found),
        _ => String::new(),
    };
    let line = format_result_line(name, micros_per_op, ops_per_sec, secs, ops, mb, &message);
    Ok(StepReport {
        name: name.to_string(),
        kind,
        ops,
        seconds: secs,
        micros_per_op,
        ops_per_sec,
        bytes: t.bytes,
        found: t.found,
        attempted: t.attempted,
        hist: t.hist.clone(),
        intervals,
        open_loop: o.open_loop,
        background_writes: o.background_writes,
        line,
    })
}

fn print_header(
    flags: &Flags,
    engine: &dyn KvEngine,
    out: &mut dyn Write,
) -> Result<(), BenchError> {
    let m = crate::machine::MachineInfo::collect(&flags.db);
    w(
        out,
        &format!("Engine:     {} ({})", engine.name(), engine.version()),
    )?;
    w(
        out,
        &format!("Date:       {}", crate::machine::utc_now_string()),
    )?;
    w(out, &format!("CPU:        {} * {}", m.cores, m.cpu_model))?;
    w(out, &format!("Keys:       {} bytes each", flags.key_size))?;
    w(
        out,
        &format!(
            "Values:     {} bytes each ({} bytes after compression)",
            flags.value_size,
            (flags.value_size as f64 * flags.compression_ratio) as u64
        ),
    )?;
    w(out, &format!("Entries:    {}", flags.num))?;
    w(out, &format!("Compression: {}", flags.compression_name))?;
    w(out, &format!("Memory budget: {} bytes", flags.cache_size))?;
    w(out, "------------------------------------------------")
}

fn print_stats(engine: &dyn KvEngine, out: &mut dyn Write) -> Result<(), BenchError> {
    let s = engine.stats();
    w(out, &format!("Engine stats: {}", s.raw))?;
    let uptime = s.uptime_micros.unwrap_or(0);
    if let Some(stall) = s.write_stall_micros {
        let secs = stall as f64 / 1e6;
        let pct = if uptime > 0 {
            100.0 * stall as f64 / uptime as f64
        } else {
            0.0
        };
        w(
            out,
            &format!(
                "Cumulative stall: {:02}:{:02}:{:06.3} H:M:S, {:.1} percent",
                (secs / 3600.0) as u64,
                ((secs % 3600.0) / 60.0) as u64,
                secs % 60.0,
                pct
            ),
        )?;
    }
    Ok(())
}

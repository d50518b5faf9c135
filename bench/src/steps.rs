//! The benchmark steps (`--benchmarks` names) and how each one drives the engine.
//!
//! Every measured step is `total` operations indexed `0..total`. Closed loop: thread `t`
//! runs the slice `[t·total/T, (t+1)·total/T)` back to back. Open loop (`--arrival_rate`):
//! all threads take the next index from a shared counter, operation `i` is due at
//! `start + i/rate`, and its latency is measured from that due time, so a stall delays (and
//! is charged to) every request scheduled behind it. With `--duration` the index range is
//! unbounded and time ends the step.

use crate::engine::{Direction, KvEngine};
use crate::error::BenchError;
use crate::flags::Flags;
use crate::histogram::LatencyHistogram;
use crate::keys::{exp_skewed, make_key, permutation, Rng, ValueGen};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    FillSeq,
    FillRandom,
    FillUniqueRandom,
    Overwrite,
    UpdateRandom,
    ReadRandom,
    MultiReadRandom,
    /// `seekrandom` (direction from `--reverse_iterator`), `fwdrange`, `revrange`.
    Seek {
        reverse: bool,
    },
    ReadWhileWriting,
    /// `seekrandomwhilewriting`, `fwdrangewhilewriting`, `revrangewhilewriting`.
    SeekWhileWriting {
        reverse: bool,
    },
    DeleteRandom,
    DeleteSeq,
    Flush,
    WaitForCompaction,
    Stats,
}

impl StepKind {
    pub fn from_name(name: &str, flags: &Flags) -> Result<StepKind, BenchError> {
        Ok(match name {
            "fillseq" => StepKind::FillSeq,
            "fillrandom" => StepKind::FillRandom,
            "filluniquerandom" => StepKind::FillUniqueRandom,
            "overwrite" => StepKind::Overwrite,
            "updaterandom" => StepKind::UpdateRandom,
            "readrandom" => StepKind::ReadRandom,
            "multireadrandom" => StepKind::MultiReadRandom,
            "seekrandom" => StepKind::Seek {
                reverse: flags.reverse_iterator,
            },
            "fwdrange" => StepKind::Seek { reverse: false },
            "revrange" => StepKind::Seek { reverse: true },
            "readwhilewriting" => StepKind::ReadWhileWriting,
            "seekrandomwhilewriting" => StepKind::SeekWhileWriting {
                reverse: flags.reverse_iterator,
            },
            "fwdrangewhilewriting" => StepKind::SeekWhileWriting { reverse: false },
            "revrangewhilewriting" => StepKind::SeekWhileWriting { reverse: true },
            "deleterandom" => StepKind::DeleteRandom,
            "deleteseq" => StepKind::DeleteSeq,
            "flush" => StepKind::Flush,
            "waitforcompaction" => StepKind::WaitForCompaction,
            "stats" => StepKind::Stats,
            other => return Err(BenchError::UnknownBenchmark(other.to_string())),
        })
    }

    /// db_bench starts these from an empty database unless `--use_existing_db`.
    pub fn wants_fresh_db(self) -> bool {
        matches!(
            self,
            StepKind::FillSeq | StepKind::FillRandom | StepKind::FillUniqueRandom
        )
    }

    /// Steps that measure operations (and print a result line).
    pub fn is_measured(self) -> bool {
        !matches!(
            self,
            StepKind::Flush | StepKind::WaitForCompaction | StepKind::Stats
        )
    }

    pub fn is_write(self) -> bool {
        matches!(
            self,
            StepKind::FillSeq
                | StepKind::FillRandom
                | StepKind::FillUniqueRandom
                | StepKind::Overwrite
                | StepKind::UpdateRandom
                | StepKind::DeleteRandom
                | StepKind::DeleteSeq
        )
    }

    /// Word used in the histogram heading (`Microseconds per write:`).
    pub fn op_word(self) -> &'static str {
        match self {
            StepKind::ReadRandom | StepKind::MultiReadRandom | StepKind::ReadWhileWriting => "read",
            StepKind::Seek { .. } | StepKind::SeekWhileWriting { .. } => "seek",
            StepKind::UpdateRandom => "update",
            StepKind::DeleteRandom | StepKind::DeleteSeq => "delete",
            _ => "write",
        }
    }

    /// Key indices are the op indices themselves (each key once) rather than random.
    fn sequential_keys(self) -> bool {
        matches!(
            self,
            StepKind::FillSeq | StepKind::FillUniqueRandom | StepKind::DeleteSeq
        )
    }

    /// Reads whose keys `--read_random_exp_range` skews, as in db_bench (its readrandom
    /// and multireadrandom; readwhilewriting's readers are readrandom there).
    fn reads_skewable(self) -> bool {
        matches!(
            self,
            StepKind::ReadRandom | StepKind::MultiReadRandom | StepKind::ReadWhileWriting
        )
    }

    /// Operations in the step (engine calls), and keys per call.
    pub fn total_ops(self, flags: &Flags) -> (u64, u64) {
        let t = flags.threads as u64;
        match self {
            StepKind::FillSeq | StepKind::FillUniqueRandom | StepKind::DeleteSeq => (flags.num, 1),
            StepKind::FillRandom | StepKind::Overwrite | StepKind::UpdateRandom => {
                (flags.writes() * t, 1)
            }
            StepKind::DeleteRandom => (flags.num * t, 1),
            StepKind::MultiReadRandom => {
                let b = flags.batch_size as u64;
                (flags.reads().div_ceil(b) * t, b)
            }
            StepKind::ReadRandom
            | StepKind::Seek { .. }
            | StepKind::ReadWhileWriting
            | StepKind::SeekWhileWriting { .. } => (flags.reads() * t, 1),
            StepKind::Flush | StepKind::WaitForCompaction | StepKind::Stats => (0, 0),
        }
    }
}

/// Open-loop outcome: how much of the offered load was served, and how well.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenLoopStats {
    pub offered_ops_sec: f64,
    pub achieved_ops_sec: f64,
    pub responses: u64,
    pub within_sla: u64,
    pub sla_us: u64,
}

impl OpenLoopStats {
    pub fn within_sla_fraction(&self) -> f64 {
        if self.responses == 0 {
            0.0
        } else {
            self.within_sla as f64 / self.responses as f64
        }
    }
}

/// Per-thread tallies, merged into a step's result.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    pub hist: LatencyHistogram,
    /// Operations as db_bench counts them (keys for multireadrandom).
    pub ops: u64,
    pub bytes: u64,
    pub found: u64,
    pub attempted: u64,
    pub updates: u64,
    pub thread_seconds: f64,
    pub within_sla: u64,
    pub responses: u64,
}

impl Tally {
    fn merge(&mut self, o: &Tally) {
        self.hist.merge(&o.hist);
        self.ops += o.ops;
        self.bytes += o.bytes;
        self.found += o.found;
        self.attempted += o.attempted;
        self.updates += o.updates;
        self.thread_seconds += o.thread_seconds;
        self.within_sla += o.within_sla;
        self.responses += o.responses;
    }
}

/// The measured part of a step, before formatting.
#[derive(Debug, Clone)]
pub struct StepOutcome {
    pub tally: Tally,
    pub wall_seconds: f64,
    pub open_loop: Option<OpenLoopStats>,
    /// Writes done by the background writer of `*whilewriting` steps.
    pub background_writes: u64,
}

struct ThreadCtx {
    kind: StepKind,
    engine: Arc<dyn KvEngine>,
    flags: Flags,
    perm: Option<Arc<Vec<u64>>>,
    rng: Rng,
    key: Vec<u8>,
    keys: Vec<Vec<u8>>,
    values: ValueGen,
    write_rate_per_thread: f64,
    written_bytes: u64,
}

/// Paces writers to `--benchmark_write_rate_limit` (bytes per second).
fn pace(start: Instant, bytes: u64, rate: f64) {
    if rate > 0.0 {
        let due = start + Duration::from_secs_f64(bytes as f64 / rate);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
    }
}

impl ThreadCtx {
    fn key_index(&mut self, idx: u64) -> u64 {
        let num = self.flags.num.max(1);
        if self.kind.sequential_keys() {
            match &self.perm {
                Some(p) => p[(idx % num) as usize],
                None => idx,
            }
        } else if self.flags.read_random_exp_range > 0.0 && self.kind.reads_skewable() {
            exp_skewed(&mut self.rng, num, self.flags.read_random_exp_range)
        } else {
            self.rng.below(num)
        }
    }

    /// Execute operation `idx`; adds ops/bytes/found to `t`.
    fn op(&mut self, idx: u64, t: &mut Tally) -> Result<(), BenchError> {
        let ks = self.flags.key_size;
        let vs = self.flags.value_size;
        match self.kind {
            StepKind::FillSeq
            | StepKind::FillRandom
            | StepKind::FillUniqueRandom
            | StepKind::Overwrite => {
                let k = self.key_index(idx);
                make_key(k, ks, &mut self.key);
                let v = self.values.next(vs);
                self.engine.put(&self.key, v)?;
                t.ops += 1;
                t.bytes += (ks + vs) as u64;
                self.written_bytes += (ks + vs) as u64;
            }
            StepKind::UpdateRandom => {
                let k = self.key_index(idx);
                make_key(k, ks, &mut self.key);
                t.attempted += 1;
                if let Some(old) = self.engine.get(&self.key)? {
                    t.found += 1;
                    t.bytes += (ks + old.len()) as u64;
                }
                let v = self.values.next(vs);
                self.engine.put(&self.key, v)?;
                t.updates += 1;
                t.ops += 1;
                t.bytes += (ks + vs) as u64;
                self.written_bytes += (ks + vs) as u64;
            }
            StepKind::DeleteRandom | StepKind::DeleteSeq => {
                let k = self.key_index(idx);
                make_key(k, ks, &mut self.key);
                self.engine.delete(&self.key)?;
                t.ops += 1;
                t.bytes += ks as u64;
                self.written_bytes += ks as u64;
            }
            StepKind::ReadRandom | StepKind::ReadWhileWriting => {
                let k = self.key_index(idx);
                make_key(k, ks, &mut self.key);
                t.attempted += 1;
                t.ops += 1;
                if let Some(v) = self.engine.get(&self.key)? {
                    t.found += 1;
                    t.bytes += (ks + v.len()) as u64;
                }
            }
            StepKind::MultiReadRandom => {
                let b = self.flags.batch_size;
                self.keys.resize(b, Vec::new());
                for i in 0..b {
                    let k = self.key_index(idx);
                    make_key(k, ks, &mut self.keys[i]);
                }
                let refs: Vec<&[u8]> = self.keys.iter().map(|k| k.as_slice()).collect();
                let got = self.engine.multi_get(&refs)?;
                t.ops += b as u64;
                t.attempted += b as u64;
                for v in got.iter().flatten() {
                    t.found += 1;
                    t.bytes += (ks + v.len()) as u64;
                }
            }
            StepKind::Seek { reverse } | StepKind::SeekWhileWriting { reverse } => {
                let k = self.key_index(idx);
                make_key(k, ks, &mut self.key);
                let dir = if reverse {
                    Direction::Backward
                } else {
                    Direction::Forward
                };
                let got = self
                    .engine
                    .scan_from(&self.key, self.flags.seek_nexts + 1, dir)?;
                t.ops += 1;
                t.attempted += 1;
                if !got.is_empty() {
                    t.found += 1;
                }
                t.bytes += got
                    .iter()
                    .map(|(k, v)| (k.len() + v.len()) as u64)
                    .sum::<u64>();
            }
            StepKind::Flush | StepKind::WaitForCompaction | StepKind::Stats => {}
        }
        Ok(())
    }
}

/// Run one measured step on `engine`. `done` counts operations as they complete (for the
/// progress monitor and the 1-second throughput series).
pub fn run_measured_step(
    kind: StepKind,
    flags: &Flags,
    engine: Arc<dyn KvEngine>,
    seed: u64,
    done: Arc<AtomicU64>,
) -> Result<StepOutcome, BenchError> {
    let threads = flags.threads;
    let (total, _keys_per_call) = kind.total_ops(flags);
    let duration = (flags.duration_secs > 0).then(|| Duration::from_secs(flags.duration_secs));
    let perm = (kind == StepKind::FillUniqueRandom).then(|| Arc::new(permutation(flags.num, seed)));
    let open_rate = flags.arrival_rate;
    let next_index = Arc::new(AtomicU64::new(0));
    let barrier = Arc::new(Barrier::new(threads + 1));
    let start_cell: Arc<std::sync::OnceLock<Instant>> = Arc::new(std::sync::OnceLock::new());
    let stop_bg = Arc::new(AtomicBool::new(false));
    let rate_per_thread = if kind.is_write() {
        flags.benchmark_write_rate_limit as f64 / threads as f64
    } else {
        0.0
    };

    let mut handles = Vec::new();
    for tid in 0..threads {
        let mut ctx = ThreadCtx {
            kind,
            engine: engine.clone(),
            flags: flags.clone(),
            perm: perm.clone(),
            rng: Rng::new(seed.wrapping_add(tid as u64 * 7919 + 1)),
            key: Vec::with_capacity(flags.key_size),
            keys: Vec::new(),
            values: ValueGen::new(flags.value_size, flags.compression_ratio, seed + tid as u64),
            write_rate_per_thread: rate_per_thread,
            written_bytes: 0,
        };
        let barrier = barrier.clone();
        let start_cell = start_cell.clone();
        let next_index = next_index.clone();
        let done = done.clone();
        let sla_ns = flags.response_time_sla_us * 1000;
        handles.push(std::thread::spawn(move || -> Result<Tally, BenchError> {
            let mut t = Tally::default();
            barrier.wait();
            let start = *start_cell
                .get()
                .expect("start is set before the barrier opens");
            let (lo, hi) = (
                total * tid as u64 / threads as u64,
                total * (tid as u64 + 1) / threads as u64,
            );
            let mut i = lo;
            loop {
                let (idx, due) = if open_rate > 0.0 {
                    let idx = next_index.fetch_add(1, Ordering::Relaxed);
                    let due = start + Duration::from_secs_f64(idx as f64 / open_rate);
                    match duration {
                        Some(d) if due - start >= d => break,
                        None if idx >= total => break,
                        _ => {}
                    }
                    let now = Instant::now();
                    if due > now {
                        std::thread::sleep(due - now);
                    }
                    (idx, due)
                } else {
                    match duration {
                        Some(d) if start.elapsed() >= d => break,
                        None if i >= hi => break,
                        _ => {}
                    }
                    i += 1;
                    (i - 1, Instant::now())
                };
                let before = t.ops;
                ctx.op(idx, &mut t)?;
                let lat = due.elapsed();
                t.hist.record_ns(lat.as_nanos() as u64);
                if open_rate > 0.0 {
                    t.responses += 1;
                    if (lat.as_nanos() as u64) <= sla_ns {
                        t.within_sla += 1;
                    }
                }
                done.fetch_add(t.ops - before, Ordering::Relaxed);
                pace(start, ctx.written_bytes, ctx.write_rate_per_thread);
            }
            t.thread_seconds = start.elapsed().as_secs_f64();
            Ok(t)
        }));
    }

    // Background writer for *whilewriting steps: random overwrites until the readers finish.
    let bg = if matches!(
        kind,
        StepKind::ReadWhileWriting | StepKind::SeekWhileWriting { .. }
    ) {
        let engine = engine.clone();
        let stop = stop_bg.clone();
        let f = flags.clone();
        let start_cell = start_cell.clone();
        Some(std::thread::spawn(move || -> Result<u64, BenchError> {
            let mut rng = Rng::new(seed ^ 0xB6);
            let mut values = ValueGen::new(f.value_size, f.compression_ratio, seed ^ 0xB7);
            let mut key = Vec::new();
            let mut n = 0u64;
            let start = loop {
                if let Some(s) = start_cell.get() {
                    break *s;
                }
                std::thread::sleep(Duration::from_millis(1));
            };
            let rate = f.benchmark_write_rate_limit as f64;
            while !stop.load(Ordering::Relaxed) {
                make_key(rng.below(f.num.max(1)), f.key_size, &mut key);
                engine.put(&key, values.next(f.value_size))?;
                n += 1;
                pace(start, n * (f.key_size + f.value_size) as u64, rate);
            }
            Ok(n)
        }))
    } else {
        None
    };

    let start = Instant::now();
    start_cell.set(start).expect("set once");
    barrier.wait();
    let mut tally = Tally::default();
    let mut first_err = None;
    for h in handles {
        match h.join() {
            Ok(Ok(t)) => tally.merge(&t),
            Ok(Err(e)) => first_err = first_err.or(Some(e)),
            Err(_) => {
                first_err = first_err.or(Some(BenchError::Engine(crate::engine::EngineError::new(
                    "a benchmark thread panicked",
                ))))
            }
        }
    }
    let wall_seconds = start.elapsed().as_secs_f64();
    stop_bg.store(true, Ordering::Relaxed);
    let background_writes = match bg.map(|h| h.join()) {
        Some(Ok(Ok(n))) => n,
        Some(Ok(Err(e))) => return Err(e),
        Some(Err(_)) => {
            return Err(BenchError::Engine(crate::engine::EngineError::new(
                "the background writer panicked",
            )))
        }
        None => 0,
    };
    if let Some(e) = first_err {
        return Err(e);
    }
    let open_loop = (open_rate > 0.0).then(|| OpenLoopStats {
        offered_ops_sec: open_rate,
        achieved_ops_sec: tally.responses as f64 / wall_seconds.max(1e-9),
        responses: tally.responses,
        within_sla: tally.within_sla,
        sla_us: flags.response_time_sla_us,
    });
    Ok(StepOutcome {
        tally,
        wall_seconds,
        open_loop,
        background_writes,
    })
}

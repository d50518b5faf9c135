//! Per-step monitor thread: samples the shared op counter every second, writes db_bench's
//! `--report_file` CSV (`secs_elapsed,interval_qps`), and shows progress on stderr: a
//! `\r`-refreshed line on a terminal, a plain line every `--progress_interval_seconds` otherwise.

use std::fs::File;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub struct MonitorConfig {
    pub step: String,
    pub done: Arc<AtomicU64>,
    /// Operations expected in total (for the ETA) when the step is count-bounded.
    pub expected_ops: Option<u64>,
    /// Seconds the step lasts when it is time-bounded.
    pub duration_secs: Option<u64>,
    pub report_file: Option<PathBuf>,
    pub report_interval_secs: u64,
    pub progress_interval_secs: u64,
}

pub struct Monitor {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Vec<(u64, f64)>>>,
}

/// Text of the progress line (shared by the terminal and the plain form).
pub fn progress_text(step: &str, elapsed: f64, ops_per_sec: f64, eta_secs: Option<f64>) -> String {
    let eta = match eta_secs {
        Some(e) if e.is_finite() => format!("{:.0}s", e.max(0.0)),
        _ => "?".to_string(),
    };
    format!("{step}: elapsed {elapsed:.0}s, {ops_per_sec:.0} ops/s, ETA {eta}")
}

impl Monitor {
    pub fn start(cfg: MonitorConfig) -> std::io::Result<Monitor> {
        let mut report = match (&cfg.report_file, cfg.report_interval_secs) {
            (Some(p), n) if n > 0 => {
                let mut f = File::create(p)?;
                writeln!(f, "secs_elapsed,interval_qps")?;
                Some(f)
            }
            _ => None,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let handle = std::thread::spawn(move || {
            let tty = std::io::stderr().is_terminal();
            let start = Instant::now();
            let mut samples = Vec::new();
            let mut last_done = 0u64;
            let mut last_report_done = 0u64;
            let mut sec = 0u64;
            let mut last_plain = 0u64;
            let mut shown = false;
            while !stop2.load(Ordering::Relaxed) {
                let next = start + Duration::from_secs(sec + 1);
                while Instant::now() < next {
                    if stop2.load(Ordering::Relaxed) {
                        break;
                    }
                    std::thread::sleep(
                        Duration::from_millis(20).min(next - Instant::now().min(next)),
                    );
                }
                if stop2.load(Ordering::Relaxed) {
                    break;
                }
                sec += 1;
                let done = cfg.done.load(Ordering::Relaxed);
                let qps = (done - last_done) as f64;
                last_done = done;
                samples.push((sec, qps));
                if let Some(f) = report.as_mut() {
                    if sec.is_multiple_of(cfg.report_interval_secs) {
                        let q = (done - last_report_done) as f64 / cfg.report_interval_secs as f64;
                        last_report_done = done;
                        let _ = writeln!(f, "{sec},{}", q as u64);
                        let _ = f.flush();
                    }
                }
                let elapsed = start.elapsed().as_secs_f64();
                let rate = done as f64 / elapsed.max(1e-9);
                let eta = match (cfg.duration_secs, cfg.expected_ops) {
                    (Some(d), _) => Some(d as f64 - elapsed),
                    (None, Some(n)) if rate > 0.0 => Some((n.saturating_sub(done)) as f64 / rate),
                    _ => None,
                };
                let text = progress_text(&cfg.step, elapsed, qps, eta);
                if tty {
                    eprint!("\r\x1b[2K{text}");
                    shown = true;
                } else if cfg.progress_interval_secs > 0
                    && sec - last_plain >= cfg.progress_interval_secs
                {
                    last_plain = sec;
                    eprintln!("progress {text}");
                }
            }
            if tty && shown {
                eprint!("\r\x1b[2K");
            }
            samples
        });
        Ok(Monitor {
            stop,
            handle: Some(handle),
        })
    }

    /// Stop the monitor; returns ops per 1-second interval.
    pub fn finish(mut self) -> Vec<(u64, f64)> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .take()
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_text_has_step_rate_and_eta() {
        let t = progress_text("readrandom", 12.4, 1000.0, Some(47.6));
        assert_eq!(t, "readrandom: elapsed 12s, 1000 ops/s, ETA 48s");
        assert!(progress_text("x", 1.0, 1.0, None).ends_with("ETA ?"));
    }
}

//! Latency histogram (HdrHistogram, nanosecond resolution) printed the way db_bench prints
//! its `--histogram=1` block, all values in microseconds.

use hdrhistogram::Histogram;
use std::io::{self, Write};

#[derive(Clone)]
pub struct LatencyHistogram {
    h: Histogram<u64>,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for LatencyHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LatencyHistogram(count={})", self.count())
    }
}

/// db_bench's bucket upper limits in microseconds: 1, 2, then ×1.5 kept to two significant
/// digits (3, 4, 6, 10, 15, 22, 34, 51, 76, 110, ...).
pub fn db_bench_bucket_limits(max_us: u64) -> Vec<u64> {
    let mut limits = vec![1u64];
    let mut v = 2.0f64;
    loop {
        let mut t = v as u64;
        let mut scale = 1u64;
        while t >= 100 {
            t /= 10;
            scale *= 10;
        }
        let limit = t * scale;
        limits.push(limit);
        if limit >= max_us {
            break;
        }
        v *= 1.5;
    }
    limits
}

impl LatencyHistogram {
    pub fn new() -> Self {
        LatencyHistogram {
            h: Histogram::new(3).expect("3 significant figures is valid"),
        }
    }

    pub fn record_ns(&mut self, ns: u64) {
        // `record` grows the auto-resizing histogram; `saturating_record` would clamp.
        if self.h.record(ns.max(1)).is_err() {
            self.h.saturating_record(ns.max(1));
        }
    }

    pub fn merge(&mut self, other: &LatencyHistogram) {
        self.h
            .add(&other.h)
            .expect("auto-resizing histograms always merge");
    }

    pub fn count(&self) -> u64 {
        self.h.len()
    }

    /// Percentile (0..=100) in microseconds.
    pub fn percentile_us(&self, p: f64) -> f64 {
        if self.count() == 0 {
            return 0.0;
        }
        self.h.value_at_percentile(p) as f64 / 1000.0
    }

    pub fn mean_us(&self) -> f64 {
        self.h.mean() / 1000.0
    }

    pub fn stddev_us(&self) -> f64 {
        self.h.stdev() / 1000.0
    }

    pub fn min_us(&self) -> f64 {
        self.h.min() as f64 / 1000.0
    }

    pub fn max_us(&self) -> f64 {
        self.h.max() as f64 / 1000.0
    }

    /// Number of samples at or above `ns` nanoseconds.
    pub fn count_at_least_ns(&self, ns: u64) -> u64 {
        if ns > self.h.max() {
            return 0;
        }
        self.h.count_between(ns, self.h.max())
    }

    /// Number of samples at or below `ns` nanoseconds.
    pub fn count_at_most_ns(&self, ns: u64) -> u64 {
        if self.count() == 0 {
            return 0;
        }
        self.h.count_between(0, ns)
    }

    /// The `Percentiles:` line exactly as db_bench formats it.
    pub fn percentiles_line(&self) -> String {
        format!(
            "Percentiles: P50: {:.2} P75: {:.2} P99: {:.2} P99.9: {:.2} P99.99: {:.2}",
            self.percentile_us(50.0),
            self.percentile_us(75.0),
            self.percentile_us(99.0),
            self.percentile_us(99.9),
            self.percentile_us(99.99)
        )
    }

    /// db_bench's whole histogram block; `what` is e.g. `write` or `read`.
    pub fn print_db_bench(&self, out: &mut dyn Write, what: &str) -> io::Result<()> {
        writeln!(out, "Microseconds per {what}:")?;
        writeln!(
            out,
            "Count: {} Average: {:.4}  StdDev: {:.2}",
            self.count(),
            self.mean_us(),
            self.stddev_us()
        )?;
        writeln!(
            out,
            "Min: {}  Median: {:.4}  Max: {}",
            self.min_us().round() as u64,
            self.percentile_us(50.0),
            self.max_us().round() as u64
        )?;
        writeln!(out, "{}", self.percentiles_line())?;
        writeln!(
            out,
            "------------------------------------------------------"
        )?;
        let total = self.count();
        if total == 0 {
            return writeln!(out);
        }
        let max_us = self.max_us().ceil() as u64;
        let limits = db_bench_bucket_limits(max_us.max(1));
        let mut cumulative = 0u64;
        let mut low = 0u64;
        for (i, &high) in limits.iter().enumerate() {
            // Samples are in ns; bucket (low, high] in µs.
            let lo_ns = if i == 0 { 0 } else { low * 1000 + 1 };
            let hi_ns = high * 1000 + 999;
            let n = if lo_ns > self.h.max() {
                0
            } else {
                self.h
                    .count_between(lo_ns, hi_ns.min(self.h.max().max(lo_ns)))
            };
            let n = n.min(total - cumulative);
            if n > 0 {
                cumulative += n;
                let pct = 100.0 * n as f64 / total as f64;
                let cum_pct = 100.0 * cumulative as f64 / total as f64;
                let marks = (20.0 * n as f64 / total as f64).round() as usize;
                writeln!(
                    out,
                    "{} {:>7}, {:>7} ] {:>8} {:>7.3}% {:>7.3}% {}",
                    if i == 0 { '[' } else { '(' },
                    low,
                    high,
                    n,
                    pct,
                    cum_pct,
                    "#".repeat(marks)
                )?;
            }
            low = high;
        }
        writeln!(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_limits_match_db_bench_sequence() {
        let l = db_bench_bucket_limits(14000);
        assert_eq!(
            l,
            vec![
                1, 2, 3, 4, 6, 10, 15, 22, 34, 51, 76, 110, 170, 250, 380, 580, 870, 1300, 1900,
                2900, 4400, 6600, 9900, 14000
            ]
        );
    }

    #[test]
    fn percentiles_are_in_microseconds() {
        let mut h = LatencyHistogram::new();
        for i in 1..=1000u64 {
            h.record_ns(i * 1000);
        }
        assert!(
            (h.percentile_us(50.0) - 500.0).abs() < 2.0,
            "{}",
            h.percentile_us(50.0)
        );
        assert!(
            (h.percentile_us(99.0) - 990.0).abs() < 2.0,
            "{}",
            h.percentile_us(99.0)
        );
        assert_eq!(h.count_at_least_ns(991_000), 10);
        let mut out = Vec::new();
        h.print_db_bench(&mut out, "read").unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(s.contains("Count: 1000 Average: 500.5"));
        let rows: u64 = s
            .lines()
            .filter(|l| l.starts_with('[') || l.starts_with('('))
            .map(|l| l.split_whitespace().nth(4).unwrap().parse::<u64>().unwrap())
            .sum();
        assert_eq!(rows, 1000, "bucket rows must add up to the count:\n{s}");
    }
}

//! db_bench's result-line format: writing it, and parsing it back (from Basalt's output and
//! from real db_bench output) with one set of regular expressions.

use crate::error::BenchError;
use regex::Regex;
use std::sync::OnceLock;

/// `fillseq      :       3.934 micros/op 254148 ops/sec 0.039 seconds 10000 operations;   28.1 MB/s (found)`
pub const RESULT_LINE_RE: &str = r"^(\S+)\s*:\s+([0-9.]+) micros/op (\d+) ops/sec ([0-9.]+) seconds (\d+) operations;\s*(?:([0-9.]+) MB/s)?\s*(.*)$";
/// `Percentiles: P50: 1.45 P75: 1.82 P99: 15.20 P99.9: 44.20 P99.99: 2900.00`
pub const PERCENTILES_RE: &str = r"^Percentiles: P50: ([0-9.]+) P75: ([0-9.]+) P99: ([0-9.]+) P99\.9: ([0-9.]+) P99\.99: ([0-9.]+)\s*$";
/// `(1463999 of 1463999 found)` in the result line of read steps.
pub const FOUND_RE: &str = r"\((\d+) of (\d+) found\)";
/// `Cumulative stall: 00:00:0.000 H:M:S, 0.0 percent`
pub const STALL_RE: &str = r"^Cumulative stall: (\d+):(\d+):([0-9.]+) H:M:S, ([0-9.]+) percent";
/// `Open-loop: offered 2000 ops/sec achieved 1999 ops/sec; 97.500% of 4000 responses within 1000 us`
pub const OPEN_LOOP_RE: &str = r"^Open-loop: offered ([0-9.]+) ops/sec achieved ([0-9.]+) ops/sec; ([0-9.]+)% of (\d+) responses within (\d+) us";

fn re(cell: &'static OnceLock<Regex>, pat: &str) -> &'static Regex {
    cell.get_or_init(|| Regex::new(pat).expect("static regex is valid"))
}

pub fn result_line_re() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    re(&R, RESULT_LINE_RE)
}
pub fn percentiles_re() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    re(&R, PERCENTILES_RE)
}
fn found_re() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    re(&R, FOUND_RE)
}
fn stall_re() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    re(&R, STALL_RE)
}
fn open_loop_re() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    re(&R, OPEN_LOOP_RE)
}

/// Format a result line exactly as db_bench 7.8 does (`%-12s : %11.3f micros/op %ld ops/sec
/// %.3f seconds %lu operations;` then ` %6.1f MB/s` when bytes were moved, then the message).
pub fn format_result_line(
    name: &str,
    micros_per_op: f64,
    ops_per_sec: f64,
    seconds: f64,
    ops: u64,
    mb_per_sec: Option<f64>,
    message: &str,
) -> String {
    let mut extra = String::new();
    if let Some(mb) = mb_per_sec {
        extra.push_str(&format!("{mb:6.1} MB/s"));
    }
    if !message.is_empty() {
        if !extra.is_empty() {
            extra.push(' ');
        }
        extra.push_str(message);
    }
    format!(
        "{:<12} : {:>11.3} micros/op {} ops/sec {:.3} seconds {} operations;{}{}",
        name,
        micros_per_op,
        ops_per_sec as i64,
        seconds,
        ops,
        if extra.is_empty() { "" } else { " " },
        extra
    )
}

/// One benchmark's numbers as found in db_bench-format output.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ParsedResult {
    pub name: String,
    pub micros_per_op: f64,
    pub ops_per_sec: f64,
    pub seconds: f64,
    pub ops: u64,
    pub mb_per_sec: Option<f64>,
    pub found: Option<(u64, u64)>,
    /// P50, P75, P99, P99.9, P99.99 in microseconds, when `--histogram=1`.
    pub percentiles: Option<[f64; 5]>,
    pub open_loop: Option<ParsedOpenLoop>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ParsedOpenLoop {
    pub offered: f64,
    pub achieved: f64,
    pub within_sla_pct: f64,
    pub responses: u64,
    pub sla_us: u64,
}

/// Everything the compare harness reads from one process's stdout.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ParsedOutput {
    pub results: Vec<ParsedResult>,
    /// Percentage of time writes were stalled, from the `stats` step (last one wins).
    pub stall_pct: Option<f64>,
}

fn f(s: &str, what: &str, line: &str) -> Result<f64, BenchError> {
    s.parse::<f64>().map_err(|_| {
        BenchError::malformed(
            "db_bench-format output",
            format!("bad {what} in line: {line}"),
        )
    })
}

/// Parse db_bench-format output. A `Percentiles:` line belongs to the result line before it.
pub fn parse_output(text: &str) -> Result<ParsedOutput, BenchError> {
    let mut out = ParsedOutput::default();
    for raw in text.lines() {
        // db_bench writes "... finished N ops" progress with \r; keep only the last segment.
        let line = raw.rsplit('\r').next().unwrap_or(raw).trim_end();
        if let Some(c) = result_line_re().captures(line) {
            let ops = c[5].parse::<u64>().map_err(|_| {
                BenchError::malformed("db_bench-format output", format!("bad op count: {line}"))
            })?;
            let found = found_re().captures(&c[7]).map(|m| {
                (
                    m[1].parse::<u64>().unwrap_or(0),
                    m[2].parse::<u64>().unwrap_or(0),
                )
            });
            out.results.push(ParsedResult {
                name: c[1].to_string(),
                micros_per_op: f(&c[2], "micros/op", line)?,
                ops_per_sec: f(&c[3], "ops/sec", line)?,
                seconds: f(&c[4], "seconds", line)?,
                ops,
                mb_per_sec: match c.get(6) {
                    Some(m) => Some(f(m.as_str(), "MB/s", line)?),
                    None => None,
                },
                found,
                percentiles: None,
                open_loop: None,
            });
        } else if let Some(c) = percentiles_re().captures(line) {
            let mut p = [0.0; 5];
            for (i, v) in p.iter_mut().enumerate() {
                *v = f(&c[i + 1], "percentile", line)?;
            }
            if let Some(last) = out.results.last_mut() {
                if last.percentiles.is_none() {
                    last.percentiles = Some(p);
                }
            }
        } else if let Some(c) = stall_re().captures(line) {
            out.stall_pct = Some(f(&c[4], "stall percent", line)?);
        } else if let Some(c) = open_loop_re().captures(line) {
            let ol = ParsedOpenLoop {
                offered: f(&c[1], "offered rate", line)?,
                achieved: f(&c[2], "achieved rate", line)?,
                within_sla_pct: f(&c[3], "SLA fraction", line)?,
                responses: c[4].parse().unwrap_or(0),
                sla_us: c[5].parse().unwrap_or(0),
            };
            if let Some(last) = out.results.last_mut() {
                last.open_loop = Some(ol);
            }
        }
    }
    Ok(out)
}

/// Parse a `--report_file` CSV (`secs_elapsed,interval_qps`) into (second, ops/s) pairs.
pub fn parse_report_csv(text: &str) -> Result<Vec<(u64, f64)>, BenchError> {
    let mut rows = Vec::new();
    let mut lines = text.lines();
    match lines.next() {
        Some(h) if h.trim() == "secs_elapsed,interval_qps" => {}
        Some(h) => {
            return Err(BenchError::malformed(
                "report file",
                format!("expected header 'secs_elapsed,interval_qps', got '{h}'"),
            ))
        }
        None => return Ok(rows),
    }
    for l in lines {
        if l.trim().is_empty() {
            continue;
        }
        let (a, b) = l
            .split_once(',')
            .ok_or_else(|| BenchError::malformed("report file", format!("bad row '{l}'")))?;
        let s = a
            .trim()
            .parse::<u64>()
            .map_err(|_| BenchError::malformed("report file", format!("bad seconds in '{l}'")))?;
        let q = b
            .trim()
            .parse::<f64>()
            .map_err(|_| BenchError::malformed("report file", format!("bad qps in '{l}'")))?;
        rows.push((s, q));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_db_bench() {
        let l = format_result_line("fillseq", 3.934, 254148.7, 0.039, 10000, Some(28.1), "");
        assert_eq!(
            l,
            "fillseq      :       3.934 micros/op 254148 ops/sec 0.039 seconds 10000 operations;   28.1 MB/s"
        );
        let l = format_result_line("multireadrandom", 1.0, 2.0, 3.0, 4, None, "(1 of 4 found)");
        assert_eq!(
            l,
            "multireadrandom :       1.000 micros/op 2 ops/sec 3.000 seconds 4 operations; (1 of 4 found)"
        );
    }

    #[test]
    fn report_csv_rejects_garbage() {
        assert!(parse_report_csv("what,ever\n1,2\n").is_err());
        assert!(parse_report_csv("secs_elapsed,interval_qps\n1,x\n").is_err());
        assert_eq!(
            parse_report_csv("secs_elapsed,interval_qps\n1,20\n2,30.5\n").unwrap(),
            vec![(1, 20.0), (2, 30.5)]
        );
    }
}

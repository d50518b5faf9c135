//! fio baselines on the same file system as the databases: 4 KiB random reads at queue
//! depth 1 and 32, 1 MiB sequential write and read. fio runs with `--output-format=json`.

use crate::error::BenchError;
use crate::proc_stats::{run_measured, ChildMeasurement};
use std::path::Path;

#[derive(Debug, Clone)]
pub struct FioJob {
    /// Step name in the report, e.g. `randread-4k-qd1`.
    pub name: &'static str,
    pub rw: &'static str,
    pub bs: &'static str,
    pub iodepth: u32,
    pub ioengine: &'static str,
}

/// The four baselines, in the order they run (the write lays the file out first).
pub fn baseline_jobs() -> Vec<FioJob> {
    vec![
        FioJob {
            name: "write-1m",
            rw: "write",
            bs: "1M",
            iodepth: 8,
            ioengine: "libaio",
        },
        FioJob {
            name: "read-1m",
            rw: "read",
            bs: "1M",
            iodepth: 8,
            ioengine: "libaio",
        },
        FioJob {
            name: "randread-4k-qd1",
            rw: "randread",
            bs: "4k",
            iodepth: 1,
            ioengine: "psync",
        },
        FioJob {
            name: "randread-4k-qd32",
            rw: "randread",
            bs: "4k",
            iodepth: 32,
            ioengine: "libaio",
        },
    ]
}

/// One direction's numbers from fio's JSON.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FioResult {
    pub iops: f64,
    pub bw_bytes: f64,
    /// Completion-latency P50, P99, P99.9, P99.99 in microseconds.
    pub clat_us: [f64; 4],
    pub total_ios: u64,
    pub runtime_ms: u64,
    pub version: String,
}

/// Parse fio's `--output-format=json` output for the read or write side of job 0.
/// fio may print warnings before the JSON; anything before the first `{` is skipped.
pub fn parse_fio_json(text: &str, rw: &str) -> Result<FioResult, BenchError> {
    let start = text
        .find('{')
        .ok_or_else(|| BenchError::malformed("fio", "no JSON object in output"))?;
    let v: serde_json::Value = serde_json::from_str(&text[start..])
        .map_err(|e| BenchError::malformed("fio", format!("invalid JSON: {e}")))?;
    let version = v
        .get("fio version")
        .and_then(|x| x.as_str())
        .unwrap_or("fio (unknown version)")
        .to_string();
    let job = v
        .get("jobs")
        .and_then(|j| j.get(0))
        .ok_or_else(|| BenchError::malformed("fio", "no jobs[0] in JSON"))?;
    if let Some(err) = job.get("error").and_then(|e| e.as_i64()) {
        if err != 0 {
            return Err(BenchError::ToolFailed {
                tool: "fio".into(),
                detail: format!("job reported error {err}"),
            });
        }
    }
    let side = if rw.contains("write") {
        "write"
    } else {
        "read"
    };
    let s = job
        .get(side)
        .ok_or_else(|| BenchError::malformed("fio", format!("no '{side}' section in jobs[0]")))?;
    let num = |k: &str| -> Result<f64, BenchError> {
        s.get(k).and_then(|x| x.as_f64()).ok_or_else(|| {
            BenchError::malformed("fio", format!("missing number jobs[0].{side}.{k}"))
        })
    };
    let pct = s
        .get("clat_ns")
        .and_then(|c| c.get("percentile"))
        .and_then(|p| p.as_object())
        .ok_or_else(|| {
            BenchError::malformed("fio", format!("missing jobs[0].{side}.clat_ns.percentile"))
        })?;
    let mut clat = [0.0; 4];
    for (i, key) in ["50.000000", "99.000000", "99.900000", "99.990000"]
        .iter()
        .enumerate()
    {
        clat[i] = pct.get(*key).and_then(|x| x.as_f64()).ok_or_else(|| {
            BenchError::malformed("fio", format!("missing clat percentile {key}"))
        })? / 1000.0;
    }
    Ok(FioResult {
        iops: num("iops")?,
        bw_bytes: num("bw_bytes")?,
        clat_us: clat,
        total_ios: num("total_ios")? as u64,
        runtime_ms: num("runtime")? as u64,
        version,
    })
}

/// The fio command line for `job` on `file`.
pub fn fio_argv(
    fio: &str,
    job: &FioJob,
    file: &Path,
    size: &str,
    runtime_s: u64,
    json_out: &Path,
) -> Vec<String> {
    vec![
        fio.to_string(),
        format!("--name={}", job.name),
        format!("--filename={}", file.display()),
        format!("--size={size}"),
        format!("--rw={}", job.rw),
        format!("--bs={}", job.bs),
        format!("--iodepth={}", job.iodepth),
        format!("--ioengine={}", job.ioengine),
        "--direct=1".into(),
        "--thread".into(),
        "--group_reporting".into(),
        format!("--runtime={runtime_s}"),
        "--time_based".into(),
        "--randrepeat=0".into(),
        "--output-format=json".into(),
        format!("--output={}", json_out.display()),
    ]
}

/// Run one job, measured like the engines. Returns the parsed JSON and the measurement.
pub fn run_job(
    fio: &str,
    job: &FioJob,
    file: &Path,
    size: &str,
    runtime_s: u64,
    raw_dir: &Path,
) -> Result<(FioResult, ChildMeasurement, Vec<String>), BenchError> {
    let json = raw_dir.join(format!("{}.json", job.name));
    let argv = fio_argv(fio, job, file, size, runtime_s, &json);
    let m = run_measured(
        &argv,
        &raw_dir.join(format!("{}.stdout", job.name)),
        &raw_dir.join(format!("{}.stderr", job.name)),
        |_| {},
    )?;
    if m.exit_code != Some(0) {
        let err = std::fs::read_to_string(raw_dir.join(format!("{}.stderr", job.name)))
            .unwrap_or_default();
        return Err(BenchError::ToolFailed {
            tool: "fio".into(),
            detail: format!("{} exited with {:?}: {}", job.name, m.exit_code, err.trim()),
        });
    }
    let text = std::fs::read_to_string(&json)
        .map_err(|e| BenchError::io(format!("reading {}", json.display()), e))?;
    Ok((parse_fio_json(&text, job.rw)?, m, argv))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"note: both iodepth >= 1 and synchronous I/O engine are selected
{"fio version":"fio-3.33","jobs":[{"jobname":"x","error":0,
 "read":{"iops":1000.5,"bw_bytes":4098048,"total_ios":2001,"runtime":2000,
  "clat_ns":{"percentile":{"50.000000":90000,"99.000000":150000,"99.900000":400000,"99.990000":900000}}},
 "write":{"iops":0,"bw_bytes":0,"total_ios":0,"runtime":0,"clat_ns":{"percentile":{}}}}]}"#;

    #[test]
    fn parses_fio_json_after_warnings() {
        let r = parse_fio_json(SAMPLE, "randread").unwrap();
        assert_eq!(r.iops, 1000.5);
        assert_eq!(r.clat_us, [90.0, 150.0, 400.0, 900.0]);
        assert_eq!(r.version, "fio-3.33");
    }

    #[test]
    fn malformed_fio_output_is_a_clear_error() {
        let e = parse_fio_json("fio: pid=1, err=22/file:filesetup.c", "read").unwrap_err();
        assert!(
            e.to_string().contains("fio") && e.to_string().contains("no JSON"),
            "{e}"
        );
        let e = parse_fio_json("{\"jobs\": [", "read").unwrap_err();
        assert!(e.to_string().contains("invalid JSON"), "{e}");
        let e = parse_fio_json(SAMPLE, "write").unwrap_err();
        assert!(e.to_string().contains("percentile"), "{e}");
    }
}

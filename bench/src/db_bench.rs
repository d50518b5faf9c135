//! Talking to db_bench-compatible programs: RocksDB's `db_bench` (Debian `rocksdb-tools`) and
//! Basalt's own CLI. Versions and engine identity come from what the programs print.

use crate::error::BenchError;
use std::process::Command;

/// `db_bench --version` → `db_bench version 7.8.3`.
pub fn db_bench_version(db_bench: &str) -> Result<String, BenchError> {
    let out = Command::new(db_bench)
        .arg("--version")
        .output()
        .map_err(|e| {
            BenchError::io(
                format!("running {db_bench} --version (install Debian package rocksdb-tools)"),
                e,
            )
        })?;
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    parse_db_bench_version(&text)
}

pub fn parse_db_bench_version(text: &str) -> Result<String, BenchError> {
    text.lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("db_bench version ")
                .map(|v| v.trim().to_string())
        })
        .ok_or_else(|| {
            BenchError::malformed(
                "db_bench --version",
                format!("no 'db_bench version' in '{}'", text.trim()),
            )
        })
}

/// The engine a db_bench-format output came from: `Engine:     memtest (memtest 0.1.0 ...)`
/// printed by `basalt bench`, or `RocksDB:    version 7.8.3` printed by db_bench.
/// Returns (short name, version string).
pub fn engine_identity(output: &str) -> Option<(String, String)> {
    for l in output.lines() {
        if let Some(rest) = l.strip_prefix("Engine:") {
            let rest = rest.trim();
            let (name, ver) = match rest.split_once(' ') {
                // One pair of parentheses wraps the version, which may hold its own.
                Some((n, v)) => {
                    let v = v.trim();
                    (
                        n,
                        v.strip_prefix('(')
                            .and_then(|v| v.strip_suffix(')'))
                            .unwrap_or(v),
                    )
                }
                None => (rest, ""),
            };
            return Some((name.to_string(), ver.to_string()));
        }
        if let Some(rest) = l.strip_prefix("RocksDB:") {
            return Some(("rocksdb".into(), format!("RocksDB {}", rest.trim())));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_identity() {
        assert_eq!(
            parse_db_bench_version("db_bench version 7.8.3\n").unwrap(),
            "7.8.3"
        );
        assert!(parse_db_bench_version("segfault").is_err());
        let (n, v) =
            engine_identity("Set seed\nEngine:     memtest (memtest 0.1.0 (x))\n").unwrap();
        assert_eq!(n, "memtest");
        assert_eq!(v, "memtest 0.1.0 (x)", "only the wrapping parentheses go");
        assert_eq!(
            engine_identity("RocksDB:    version 7.8.3").unwrap().0,
            "rocksdb"
        );
        assert!(engine_identity("nothing").is_none());
    }
}

//! `basalt check --data DIR [--json]`: offline verification; exit 1 on any problem.

use crate::cli::CheckArgs;
use crate::store;
use anyhow::{bail, Result};
use std::io::Write;

pub fn run(args: &CheckArgs, out: &mut dyn Write) -> Result<i32> {
    let dir = &args.data.data;
    if !dir.is_dir() {
        bail!("data directory {} does not exist", dir.display());
    }
    store::ensure_unlocked(dir)?;
    let rep = basalt_engine::check(dir).map_err(store::explain)?;
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&rep)?)?;
    } else {
        writeln!(
            out,
            "checked {}: {} segments, {} blocks, {} index runs, {} index blocks, {} documents",
            dir.display(),
            rep.segments,
            rep.blocks,
            rep.index_runs,
            rep.index_blocks,
            rep.documents
        )?;
        for p in &rep.problems {
            writeln!(out, "PROBLEM: {p}")?;
        }
        if rep.is_ok() {
            writeln!(out, "OK: no problems found")?;
        } else {
            writeln!(out, "FAILED: {} problem(s)", rep.problems.len())?;
        }
    }
    Ok(if rep.is_ok() { 0 } else { 1 })
}

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
    let (tree, tree_problem) = tree_snapshot(dir);
    let ok = rep.is_ok() && tree_problem.is_none();
    if args.json {
        let mut v = serde_json::to_value(&rep)?;
        v["tree_snapshot"] = serde_json::json!({"state": tree, "problem": tree_problem});
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
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
        writeln!(out, "tree snapshot (fusefs-tree.aux): {tree}")?;
        for p in rep.problems.iter().chain(&tree_problem) {
            writeln!(out, "PROBLEM: {p}")?;
        }
        if ok {
            writeln!(out, "OK: no problems found")?;
        } else {
            let n = rep.problems.len() + usize::from(tree_problem.is_some());
            writeln!(out, "FAILED: {n} problem(s)")?;
        }
    }
    Ok(if ok { 0 } else { 1 })
}

/// The filesystem's tree snapshot in `dir` against the engine's records: what state it
/// is in, and a problem if a mount would use it and it differs from the engine (that
/// mount would show another tree than the engine holds). A stale or damaged snapshot is
/// no problem: a mount reads the engine instead.
fn tree_snapshot(dir: &std::path::Path) -> (String, Option<String>) {
    use basalt_fusefs::TreeSnapshotVerdict as V;
    let opts = basalt_engine::Options {
        direct_io: false,
        background_gc: false,
        create_if_missing: false,
        ..Default::default()
    };
    let db = match basalt_engine::Db::open_read_only(dir, opts) {
        Ok(db) => db,
        Err(e) => return (format!("not checked (engine not opened: {e})"), None),
    };
    match basalt_fusefs::verify_tree_snapshot(&db) {
        Ok(V::Absent) => ("none".into(), None),
        Ok(V::Unused(why)) => (format!("not used by the next mount: {why}"), None),
        Ok(V::Current(seqno)) => (
            format!("current at seqno {seqno}, matches the engine"),
            None,
        ),
        Err(diff) => (
            "differs from the engine".into(),
            Some(format!("tree snapshot differs from the engine: {diff}")),
        ),
    }
}

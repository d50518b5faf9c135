//! `basalt gc --data DIR [--config FILE] [--target-fill PCT]`: garbage collection now.

use crate::cli::GcArgs;
use crate::store;
use anyhow::Result;
use std::io::Write;

pub fn run(args: &GcArgs, out: &mut dyn Write) -> Result<i32> {
    let mut opts = store::configured_offline_options(&args.engine, &args.data.data)?;
    if let Some(t) = args.target_fill {
        opts.target_fill_pct = t;
    }
    let db = store::open(&args.data.data, opts)?;
    db.flush()?;
    let before = db.stats();
    let collected = db.gc_now()?;
    db.flush()?;
    let after = db.stats();
    writeln!(
        out,
        "gc at target fill {}%: collected {collected} segment(s); moved {} bytes, reclaimed {} bytes; disk {} -> {} bytes (space-amp {} -> {})",
        after.target_fill_pct,
        after.gc_bytes_moved - before.gc_bytes_moved,
        after.gc_bytes_reclaimed - before.gc_bytes_reclaimed,
        before.disk_bytes,
        after.disk_bytes,
        super::stats::space_amp(before.space_amp),
        super::stats::space_amp(after.space_amp)
    )?;
    db.close()?;
    Ok(0)
}

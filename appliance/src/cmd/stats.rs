//! `basalt stats --data DIR [--config FILE] [--json]`

use crate::cli::StatsArgs;
use crate::store;
use anyhow::Result;
use std::io::Write;

/// A store's space-amp, or why there is none.
pub(crate) fn space_amp(amp: Option<f64>) -> String {
    match amp {
        Some(a) => format!("{a:.2}"),
        None => format!(
            "n/a (under {} of live data)",
            mib(basalt_engine::SPACE_AMP_MIN_LIVE)
        ),
    }
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
}

pub fn run(args: &StatsArgs, out: &mut dyn Write) -> Result<i32> {
    let db = store::open(
        &args.data.data,
        store::configured_offline_options(&args.engine, &args.data.data)?,
    )?;
    let s = db.stats();
    if args.json {
        writeln!(out, "{}", s.to_json())?;
        return Ok(0);
    }
    let sealed = s.segments.iter().filter(|x| x.sealed).count();
    writeln!(out, "data directory   {}", db.path().display())?;
    writeln!(
        out,
        "collections      {} ({})",
        s.collections,
        db.list_collections().join(", ")
    )?;
    writeln!(out, "last seqno       {}", s.last_seqno)?;
    writeln!(out, "io               {:?} ({})", s.io_mode, s.io_backend)?;
    // Settings, not properties of the data: blocks keep the compression they were
    // written with, and `basalt up` uses its config's.
    writeln!(
        out,
        "offline settings compression {} for new writes, GC target fill {}%",
        s.compression, s.target_fill_pct
    )?;
    writeln!(out, "live data        {}", mib(s.live_bytes))?;
    writeln!(
        out,
        "disk             {} (log {}, index {}); space-amp {}",
        mib(s.disk_bytes),
        mib(s.log_disk_bytes),
        mib(s.index_disk_bytes),
        space_amp(s.space_amp)
    )?;
    writeln!(
        out,
        "segments         {} ({} sealed)",
        s.segments.len(),
        sealed
    )?;
    writeln!(
        out,
        "index            {} runs, {} entries, {} not merged into the oldest run \
         (versions they supersede still count as live); merge debt {:.2} \
         (writers slow down above {:.2})",
        s.index_runs,
        s.index_entries,
        s.index_entries_unmerged,
        s.index_merge_debt,
        basalt_engine::MERGE_DEBT_THROTTLE
    )?;
    writeln!(
        out,
        "written          user {}, device {}; write-amp {:.2}",
        mib(s.user_bytes_written),
        mib(s.device_bytes_written),
        s.write_amp
    )?;
    writeln!(
        out,
        "gc               {} runs, {} moved, {} reclaimed, {} read",
        s.gc_runs,
        mib(s.gc_bytes_moved),
        mib(s.gc_bytes_reclaimed),
        mib(s.gc_bytes_read)
    )?;
    writeln!(
        out,
        "memory           {} of {}",
        mib(s.memory_bytes),
        mib(s.memory_budget)
    )?;
    Ok(0)
}

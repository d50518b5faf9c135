//! Opening a data directory for a command, with errors a user can act on.

use crate::cli::EngineConfigArg;
use anyhow::{anyhow, bail, Result};
use basalt_engine::{Db, Error, Options};
use std::os::fd::AsRawFd;
use std::path::Path;

/// Options of the offline commands: defaults, no background GC, never creating the directory.
pub fn offline_options() -> Options {
    offline(Options::default())
}

/// [`offline_options`] with the settings of `--config`'s [engine] section, if given.
pub fn configured_offline_options(arg: &EngineConfigArg) -> Result<Options> {
    Ok(match &arg.config {
        Some(p) => offline(crate::config::Config::load(p)?.engine.options()),
        None => offline_options(),
    })
}

/// `base` for an offline command: no background GC, never creating the directory.
fn offline(base: Options) -> Options {
    Options {
        background_gc: false,
        create_if_missing: false,
        ..base
    }
}

/// Explains an engine error; a lock names the holder and what to do.
pub fn explain(e: Error) -> anyhow::Error {
    match e {
        Error::Locked { path, holder } => anyhow!(
            "data directory {} is in use by {holder} (a running `basalt up`, `basalt serve` or \
             `basalt mount`); stop it first, or use its HTTP API (/api/stats) while it runs",
            path.display()
        ),
        other => anyhow!(other),
    }
}

/// Opens `dir` with `opts`; a missing directory is an error unless `opts` creates it.
pub fn open(dir: &Path, opts: Options) -> Result<Db> {
    if !opts.create_if_missing && !dir.is_dir() {
        bail!(
            "data directory {} does not exist (basalt up creates one)",
            dir.display()
        );
    }
    Db::open(dir, opts).map_err(explain)
}

/// Fails when another process holds the data directory's lock (for read-only tools that
/// do not take the lock themselves, such as `check`).
pub fn ensure_unlocked(dir: &Path) -> Result<()> {
    let path = dir.join("LOCK");
    let Ok(f) = std::fs::File::open(&path) else {
        return Ok(());
    };
    // SAFETY: flock on a descriptor we own; released right away.
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r != 0 {
        let holder = std::fs::read_to_string(&path).unwrap_or_default();
        let holder = match holder.trim() {
            "" => "another process".to_string(),
            pid => format!("pid {pid}"),
        };
        return Err(explain(Error::Locked {
            path: dir.to_path_buf(),
            holder,
        }));
    }
    // SAFETY: as above.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_UN) };
    Ok(())
}

/// The pid recorded in the data directory's lock file, if any.
pub fn lock_holder(dir: &Path) -> Option<i32> {
    std::fs::read_to_string(dir.join("LOCK"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

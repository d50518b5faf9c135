//! Opening a data directory for a command, with errors a user can act on.

use crate::cli::EngineConfigArg;
use crate::config::{Config, SERVICE_CONFIG};
use anyhow::{anyhow, bail, Result};
use basalt_engine::{Db, Error, Options};
use std::os::fd::AsRawFd;
use std::path::Path;

/// Options of the offline commands: defaults, no background GC, never creating the directory.
pub fn offline_options() -> Options {
    offline(Options::default())
}

/// [`offline_options`] with the [engine] settings that apply to the data directory
/// `data`: those of `--config` if given; else those of the service's config
/// ([`SERVICE_CONFIG`]) when its `data_dir` is `data`, so that `basalt gc` collects at
/// the fill the service uses and `basalt load` compresses as it does; else defaults.
pub fn configured_offline_options(arg: &EngineConfigArg, data: &Path) -> Result<Options> {
    engine_options_for(arg, data, Path::new(SERVICE_CONFIG))
}

/// [`configured_offline_options`] with the service's config at `service_config`.
fn engine_options_for(
    arg: &EngineConfigArg,
    data: &Path,
    service_config: &Path,
) -> Result<Options> {
    if let Some(p) = &arg.config {
        return Ok(offline(Config::load(p)?.engine.options()));
    }
    if !service_config.exists() {
        return Ok(offline_options());
    }
    match Config::load(service_config) {
        Ok(c) if same_dir(&c.data_dir, data) => {
            eprintln!(
                "basalt: using the [engine] settings of {} (its data_dir is {}); --config FILE picks another",
                service_config.display(),
                data.display()
            );
            Ok(offline(c.engine.options()))
        }
        Ok(_) => Ok(offline_options()),
        Err(e) => {
            eprintln!("basalt: warning: engine defaults, not the service's config: {e}");
            Ok(offline_options())
        }
    }
}

/// Whether two paths name the same existing directory.
fn same_dir(a: &Path, b: &Path) -> bool {
    matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
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

#[cfg(test)]
mod tests {
    use super::*;
    use basalt_engine::Compression;

    /// A service config in `dir` naming `data` as its data directory, with zstd and a
    /// GC target fill of 80%.
    fn service_config(dir: &Path, data: &Path) -> std::path::PathBuf {
        let p = dir.join("basalt.toml");
        std::fs::write(
            &p,
            format!(
                "data_dir = {:?}\n[engine]\ncompression = \"zstd\"\ntarget_fill_pct = 80\n",
                data.to_str().unwrap()
            ),
        )
        .unwrap();
        p
    }

    fn no_flag() -> EngineConfigArg {
        EngineConfigArg { config: None }
    }

    #[test]
    fn offline_commands_take_the_service_config_only_for_its_own_data_directory() {
        let d = tempfile::tempdir().unwrap();
        let (data, other) = (d.path().join("data"), d.path().join("other"));
        std::fs::create_dir_all(&data).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        let cfg = service_config(d.path(), &data);
        let defaults = offline_options();

        // The service's directory, also named another way: its settings.
        let via_dots = d.path().join("other/../data");
        for dir in [&data, &via_dots] {
            let o = engine_options_for(&no_flag(), dir, &cfg).unwrap();
            assert_eq!(
                (o.compression, o.target_fill_pct),
                (Compression::Zstd(3), 80)
            );
            assert!(!o.background_gc && !o.create_if_missing);
        }
        // Another directory, or no service config: engine defaults.
        let o = engine_options_for(&no_flag(), &other, &cfg).unwrap();
        assert_eq!(
            (o.compression, o.target_fill_pct),
            (defaults.compression, defaults.target_fill_pct)
        );
        let o = engine_options_for(&no_flag(), &data, &d.path().join("absent.toml")).unwrap();
        assert_eq!(o.compression, defaults.compression);
        // An explicit --config wins, whatever directory.
        let flag = EngineConfigArg {
            config: Some(cfg.clone()),
        };
        let o = engine_options_for(&flag, &other, Path::new("/nonexistent")).unwrap();
        assert_eq!(o.target_fill_pct, 80);
        // A broken service config is passed over (with a warning); a broken --config fails.
        std::fs::write(&cfg, "data_dir = 3\n").unwrap();
        let o = engine_options_for(&no_flag(), &data, &cfg).unwrap();
        assert_eq!(o.target_fill_pct, defaults.target_fill_pct);
        let e = engine_options_for(&flag, &data, &cfg).unwrap_err();
        assert!(e.to_string().contains("basalt.toml"), "{e}");
    }
}

//! The long-running job shared by `basalt up`, `basalt serve` and `basalt mount`: open the
//! engine, clean a stale mount, mount, serve HTTP, sample health; then wait for Ctrl-C,
//! SIGTERM or an external unmount (and reload on SIGHUP), and stop cleanly: HTTP down,
//! unmount, flush and sync the engine.

use crate::config::{Config, HealthSection};
use crate::http::{self, SharedToken};
use crate::logging::LogHandle;
use crate::{mountfs, mounts, notify, store};
use anyhow::{Context, Result};
use basalt_engine::Options;
use basalt_monitoring::collect::CollectOptions;
use basalt_monitoring::config::MonitoringConfig;
use basalt_monitoring::engine_store::{EngineStore, DEFAULT_COLLECTION as ENGINE_HISTORY};
use basalt_monitoring::history::{FileStore, MemoryStore, SampleStore};
use basalt_monitoring::{spawn_sampler, MonitoringState, Sampler};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tokio::signal::unix::{signal, SignalKind};

/// How to mount.
#[derive(Debug, Clone)]
pub struct MountPlan {
    pub path: PathBuf,
    /// Create the mountpoint when missing (`up`, `serve`); `mount` requires it.
    pub create: bool,
    pub threads: usize,
    pub allow_other: bool,
    pub options: Vec<String>,
    pub chunk_size: usize,
}

/// Who is running, which decides what is printed and whether systemd is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// `basalt up`: prints what it did and where to look.
    Up,
    /// `basalt serve`: sd_notify, SIGHUP re-reads this config file.
    Serve { config: PathBuf },
    /// `basalt mount`: quiet; prints one line when mounted.
    Mount,
}

/// Everything the service does.
pub struct Plan {
    pub mode: Mode,
    pub data_dir: PathBuf,
    pub engine: Options,
    pub mount: Option<MountPlan>,
    /// Address and token of the HTTP server.
    pub http: Option<(SocketAddr, Option<String>)>,
    pub health: Option<HealthSection>,
    /// Extra recordings to replay (`--smart-from-json`).
    pub smart_extra: Vec<PathBuf>,
    pub log: LogHandle,
    /// Point stdout and stderr at /dev/null once ready (the child of a background mount,
    /// whose parent stops reading).
    pub detach_output: bool,
}

fn collect_options(h: &HealthSection, extra: &[PathBuf]) -> CollectOptions {
    let mut from_json = h.smart_replay.clone();
    from_json.extend(extra.iter().cloned());
    CollectOptions {
        devices: h.devices.clone(),
        from_json,
        smartctl: h.smartctl.clone(),
        nvme: h.nvme.clone(),
        hwmon_root: h.hwmon_root.clone(),
        timeout: Duration::from_secs(30),
    }
}

fn start_sampler(
    h: &HealthSection,
    extra: &[PathBuf],
    state: &MonitoringState,
) -> Result<tokio::task::JoinHandle<()>> {
    let config = match &h.rules_config {
        Some(p) => MonitoringConfig::load(p)?,
        None => MonitoringConfig::default(),
    };
    let sampler = Sampler::new(collect_options(h, extra), config, state.clone());
    Ok(spawn_sampler(
        Duration::from_secs(h.interval_secs.0),
        sampler,
    ))
}

/// Where sampled history goes: the engine's own `.monitoring` collection by default (same
/// durability and checksums as the data), a JSON-lines directory when `history_dir` is
/// set, memory only when health sampling is off.
fn history_store(
    h: Option<&HealthSection>,
    db: &basalt_engine::Db,
) -> Result<Arc<dyn SampleStore>> {
    Ok(match h {
        Some(h) => match &h.history_dir {
            Some(dir) => Arc::new(
                FileStore::open(dir).with_context(|| format!("history in {}", dir.display()))?,
            ),
            None => Arc::new(
                EngineStore::open(db.clone(), ENGINE_HISTORY)
                    .context("history in the engine collection .monitoring")?,
            ),
        },
        None => Arc::new(MemoryStore::default()),
    })
}

/// Prepares the mountpoint: creates it when allowed, cleans a stale mount left by a killed
/// process, refuses one that is live.
pub fn prepare_mountpoint(p: &MountPlan) -> Result<PathBuf> {
    let path = mounts::absolute(&p.path);
    if mountfs::is_stale(&path) {
        mountfs::force_unmount(&path)
            .with_context(|| format!("cleaning the stale mount at {}", path.display()))?;
        tracing::warn!(mountpoint = %path.display(), "cleaned a stale mount left by a process that died");
        eprintln!(
            "basalt: cleaned a stale mount at {} left by a process that died",
            path.display()
        );
    } else if let Some(m) = mounts::mount_at(&path) {
        anyhow::bail!(
            "{} is already mounted ({} from {}); unmount it first (basalt umount {})",
            path.display(),
            m.fstype,
            m.source,
            path.display()
        );
    }
    if !path.exists() {
        if p.create {
            std::fs::create_dir_all(&path)
                .with_context(|| format!("creating mountpoint {}", path.display()))?;
        } else {
            anyhow::bail!(
                "mountpoint {} does not exist (create the directory first)",
                path.display()
            );
        }
    } else if !path.is_dir() {
        anyhow::bail!("mountpoint {} is not a directory", path.display());
    }
    Ok(path)
}

/// Runs the plan until told to stop; `out` receives the human-readable report.
pub fn run(plan: Plan, out: &mut dyn Write) -> Result<()> {
    let started = Instant::now();
    if let Some((listen, tok)) = &plan.http {
        http::check_exposure(listen, tok)?;
    }
    let data_existed = plan.data_dir.is_dir();
    // The engine first: a directory in use fails here, naming the holder.
    let db = store::open(&plan.data_dir, plan.engine.clone())?;
    let mountpoint = match &plan.mount {
        Some(m) => Some(prepare_mountpoint(m)?),
        None => None,
    };
    let data_dir = plan
        .data_dir
        .canonicalize()
        .unwrap_or(plan.data_dir.clone());

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("basalt-rt")
        .build()?;
    // Catch the stop signals before the HTTP server and the mount start: one that comes
    // during start-up, or the instant the banner appears, is acted on once serving (a
    // clean unmount and sync) instead of meeting the default action (death, a stale mount).
    let (mut term, mut int, mut hup) = {
        let _g = rt.enter();
        (
            signal(SignalKind::terminate())?,
            signal(SignalKind::interrupt())?,
            signal(SignalKind::hangup())?,
        )
    };
    let token: SharedToken = Arc::new(RwLock::new(None));
    let stats_db = db.clone();
    let state = MonitoringState::new(history_store(plan.health.as_ref(), &db)?).with_engine_stats(
        Arc::new(move || serde_json::to_value(stats_db.stats()).unwrap_or_default()),
    );

    // HTTP first: a taken port fails before anything is mounted.
    let (shutdown_tx, shutdown_rx) = tokio::sync::oneshot::channel::<()>();
    let mut server = None;
    let mut listen_addr = None;
    if let Some((listen, tok)) = &plan.http {
        *token.write().unwrap() = tok.clone();
        let listener = rt.block_on(http::bind(*listen))?;
        listen_addr = Some(listener.local_addr()?);
        let app = http::app(state.clone(), Some(db.clone()), token.clone());
        server = Some(rt.spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = shutdown_rx.await;
                })
                .await
        }));
    }
    let mut sampler = match &plan.health {
        Some(h) if h.enabled => {
            let _g = rt.enter();
            Some(start_sampler(h, &plan.smart_extra, &state)?)
        }
        _ => None,
    };

    let mounted = match (&plan.mount, &mountpoint) {
        (Some(m), Some(path)) => {
            let health_state = state.clone();
            let health =
                Arc::new(move || serde_json::to_value(health_state.snapshot()).unwrap_or_default());
            Some(mountfs::mount(db.clone(), path, m, &data_dir, health)?)
        }
        _ => None,
    };

    // Tell the user and systemd.
    let base = listen_addr.map(|a| format!("http://{a}"));
    match &plan.mode {
        Mode::Up => {
            writeln!(
                out,
                "basalt up: data      {} ({})",
                data_dir.display(),
                if data_existed { "opened" } else { "created" }
            )?;
            if let Some(p) = &mountpoint {
                writeln!(out, "           files     {} (mounted)", p.display())?;
            }
            if let Some(b) = &base {
                writeln!(out, "           dashboard {b}/")?;
                writeln!(out, "           metrics   {b}/metrics")?;
                writeln!(out, "           stats     {b}/api/stats")?;
            }
            writeln!(out, "Press Ctrl-C to stop (unmounts and syncs).")?;
        }
        Mode::Mount => {
            if let Some(p) = &mountpoint {
                writeln!(out, "mounted {} at {}", data_dir.display(), p.display())?;
            }
        }
        Mode::Serve { .. } => {}
    }
    let status = format!(
        "serving {}{}{}",
        data_dir.display(),
        mountpoint
            .as_ref()
            .map(|p| format!(" at {}", p.display()))
            .unwrap_or_default(),
        base.as_ref()
            .map(|b| format!(", http {b}"))
            .unwrap_or_default()
    );
    if let Mode::Serve { .. } = plan.mode {
        writeln!(out, "basalt serve: {status}")?;
    }
    out.flush()?;
    tracing::info!("{status}");
    notify::ready(&status);
    if plan.detach_output {
        detach_output();
    }

    // Wait.
    let reason = rt.block_on(async {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = term.recv() => return anyhow::Ok("SIGTERM"),
                _ = int.recv() => return Ok("SIGINT"),
                _ = hup.recv() => {
                    if let Mode::Serve { config } = &plan.mode {
                        reload(config, &plan, &token, &state, &mut sampler);
                    } else {
                        tracing::info!("SIGHUP ignored: only `basalt serve` reloads a config");
                    }
                }
                _ = tick.tick() => {
                    if let Some(p) = &mountpoint {
                        if mounted.is_some() && mounts::mount_at(p).is_none() {
                            return Ok("the filesystem was unmounted");
                        }
                    }
                }
            }
        }
    })?;

    // Stop.
    tracing::info!("stopping ({reason})");
    notify::stopping();
    let _ = shutdown_tx.send(());
    if let Some(s) = sampler.take() {
        s.abort();
    }
    if let Some(server) = server {
        match rt.block_on(async { tokio::time::timeout(Duration::from_secs(10), server).await }) {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => tracing::warn!("http server: {e}"),
            Ok(Err(e)) => tracing::warn!("http server task: {e}"),
            Err(_) => tracing::warn!("http server did not stop within 10 s"),
        }
    }
    if let Some(m) = mounted {
        mountfs::unmount(m)?;
    }
    db.flush().context("flushing the engine")?;
    db.close().context("syncing the engine")?;
    rt.shutdown_timeout(Duration::from_secs(5));
    if !matches!(plan.mode, Mode::Serve { .. }) {
        match &mountpoint {
            Some(p) => writeln!(
                out,
                "basalt: stopped ({reason}) after {}s: unmounted {}, data synced in {}",
                started.elapsed().as_secs(),
                p.display(),
                data_dir.display()
            )?,
            None => writeln!(
                out,
                "basalt: stopped ({reason}): data synced in {}",
                data_dir.display()
            )?,
        }
    }
    tracing::info!("stopped cleanly");
    Ok(())
}

/// Replaces stdout and stderr with /dev/null.
fn detach_output() {
    use std::os::fd::AsRawFd;
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        // SAFETY: dup2 onto the standard descriptors; `null` stays open until both are done.
        unsafe {
            libc::dup2(null.as_raw_fd(), 1);
            libc::dup2(null.as_raw_fd(), 2);
        }
    }
}

/// SIGHUP in `serve`: re-read the config; apply log level, token and health settings;
/// name the settings that need a restart. A bad file changes nothing.
fn reload(
    path: &Path,
    plan: &Plan,
    token: &SharedToken,
    state: &MonitoringState,
    sampler: &mut Option<tokio::task::JoinHandle<()>>,
) {
    notify::reloading();
    let result = (|| -> Result<Vec<&'static str>> {
        let cfg = Config::load(path)?;
        let new_token = cfg.http.resolve_token()?;
        let mut restart = Vec::new();
        if let Some((listen, _)) = &plan.http {
            http::check_exposure(listen, &new_token)?;
            if cfg.http.listen != *listen {
                restart.push("http.listen");
            }
        }
        if cfg.data_dir != plan.data_dir {
            restart.push("data_dir");
        }
        if serde_json::to_value(cfg.engine.options()).ok()
            != serde_json::to_value(&plan.engine).ok()
        {
            restart.push("engine");
        }
        if plan.mount.as_ref().map(|m| &m.path) != cfg.mount.enabled.then_some(&cfg.mount.path) {
            restart.push("mount");
        }
        let new_health = cfg.health.enabled.then_some(&cfg.health);
        let new_sampler = match new_health {
            Some(h) => Some(start_sampler(h, &plan.smart_extra, state)?),
            None => None,
        };
        if let Some(old) = std::mem::replace(sampler, new_sampler) {
            old.abort();
        }
        *token.write().unwrap() = new_token;
        plan.log.set(&cfg.log_level.0);
        Ok(restart)
    })();
    match result {
        Ok(restart) => {
            if restart.is_empty() {
                tracing::info!("reloaded {}", path.display());
            } else {
                tracing::warn!(
                    "reloaded {}; changes to {} take effect after a restart",
                    path.display(),
                    restart.join(", ")
                );
            }
            notify::ready("reloaded");
        }
        Err(e) => {
            tracing::error!(
                "reload of {} failed, keeping the running settings: {e:#}",
                path.display()
            );
            notify::ready(&format!("reload failed: {e}"));
        }
    }
}

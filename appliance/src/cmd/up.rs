//! `basalt up` and `basalt serve`: the service in the foreground, from flags (up) or a
//! config file (serve).

use crate::cli::{ServeArgs, UpArgs, DEFAULT_LISTEN};
use crate::config::{self, Config, HealthSection, MountSection};
use crate::logging::LogHandle;
use crate::service::{self, Mode, MountPlan, Plan};
use anyhow::Result;
use std::io::Write;
use std::path::PathBuf;

fn mount_plan(m: &MountSection, path: PathBuf) -> MountPlan {
    MountPlan {
        path,
        create: true,
        threads: m.threads,
        allow_other: m.allow_other,
        options: m.options.clone(),
        chunk_size: m.chunk_size,
    }
}

/// `basalt up`: defaults ./basalt-data, ./mnt, 127.0.0.1:8642; a config file is optional and
/// the flags override it.
pub fn run_up(args: &UpArgs, log: LogHandle, out: &mut dyn Write) -> Result<i32> {
    let cfg = match &args.config {
        Some(p) => Some(Config::load(p)?),
        None => None,
    };
    let data = args
        .data
        .clone()
        .or_else(|| cfg.as_ref().map(|c| c.data_dir.clone()))
        .unwrap_or_else(|| PathBuf::from("basalt-data"));
    let mountpoint = args
        .mountpoint
        .clone()
        .or_else(|| cfg.as_ref().map(|c| c.mount.path.clone()))
        .unwrap_or_else(|| PathBuf::from("mnt"));
    let listen = args
        .listen
        .or_else(|| cfg.as_ref().map(|c| c.http.listen))
        .unwrap_or_else(|| DEFAULT_LISTEN.parse().expect("default address"));
    let token = match &cfg {
        Some(c) => c.http.resolve_token()?,
        None => None,
    };
    let engine = config::service_engine_options(cfg.as_ref());
    let health = cfg
        .as_ref()
        .map(|c| c.health.clone())
        .unwrap_or_else(HealthSection::default);
    let mount = mount_plan(
        &cfg.as_ref().map(|c| c.mount.clone()).unwrap_or_default(),
        mountpoint,
    );
    service::run(
        Plan {
            mode: Mode::Up,
            data_dir: data,
            engine,
            mount: Some(mount),
            http: Some((listen, token)),
            health: Some(health),
            smart_extra: args.smart_from_json.clone(),
            log,
            detach_output: false,
        },
        out,
    )?;
    Ok(0)
}

/// Loads the config of `basalt serve` (before logging starts, so its level applies).
pub fn load_serve_config(args: &ServeArgs) -> Result<Config> {
    Ok(Config::load(&args.config)?)
}

/// `basalt serve --config FILE`: the systemd service.
pub fn run_serve(
    args: &ServeArgs,
    cfg: Config,
    log: LogHandle,
    out: &mut dyn Write,
) -> Result<i32> {
    let token = cfg.http.resolve_token()?;
    let plan = Plan {
        mode: Mode::Serve {
            config: args.config.clone(),
        },
        data_dir: cfg.data_dir.clone(),
        engine: cfg.engine.options(),
        mount: cfg
            .mount
            .enabled
            .then(|| mount_plan(&cfg.mount, cfg.mount.path.clone())),
        http: cfg.http.enabled.then_some((cfg.http.listen, token)),
        health: cfg.health.enabled.then(|| cfg.health.clone()),
        smart_extra: args.smart_from_json.clone(),
        log,
        detach_output: false,
    };
    service::run(plan, out)?;
    Ok(0)
}

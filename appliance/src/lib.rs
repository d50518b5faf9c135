//! The `basalt` binary as a library: command line ([`cli`]), configuration ([`config`]),
//! the long-running service of `up`/`serve`/`mount` ([`service`]) and one module per
//! subcommand ([`cmd`]). See `ARCHITECTURE.md`.

pub mod cli;
pub mod cmd;
pub mod config;
pub mod dump;
pub mod http;
pub mod jsonbytes;
pub mod logging;
pub mod mountfs;
pub use basalt_fusefs::mounts;
pub mod notify;
pub mod service;
pub mod store;

use clap::Parser;
use cli::{Cli, Command};
use std::io::Write;

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Parses the command line, runs the command, returns the exit code: 0 success, 1 failure
/// (or problems found by `check`, warnings of `health`), 2 usage error (or `health` crit).
pub fn main_entry() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let result = run(cli, &mut out);
    let _ = out.flush();
    match result {
        Ok(code) => code,
        Err(e) if is_broken_pipe(&e) => 0,
        Err(e) => {
            tracing::debug!("{e:?}");
            eprintln!("basalt: error: {e:#}");
            1
        }
    }
}

fn run(cli: Cli, out: &mut dyn Write) -> anyhow::Result<i32> {
    if let Command::Serve(a) = &cli.command {
        let cfg = cmd::up::load_serve_config(a)?;
        let log = logging::init(&logging::level_for(cli.verbose, &cfg.log_level.0));
        return cmd::up::run_serve(a, cfg, log, out);
    }
    let log = logging::init(&logging::level_for(cli.verbose, "warn"));
    match &cli.command {
        Command::Up(a) => cmd::up::run_up(a, log, out),
        Command::Mount(a) => cmd::mount::run_mount(a, cli.verbose, log, out),
        Command::Umount(a) => cmd::mount::run_umount(a, out),
        Command::Serve(_) => unreachable!("handled above"),
        Command::Bench(a) => cmd::bench::run(&a.args, out),
        Command::Health(a) => Ok(basalt_monitoring::run_health(a, out)?),
        Command::Stats(a) => cmd::stats::run(a, out),
        Command::Check(a) => cmd::check::run(a, out),
        Command::Gc(a) => cmd::gc::run(a, out),
        Command::Collections(a) => cmd::collections::run(a, out),
        Command::Changes(a) => cmd::changes::run(a, out),
        Command::Dump(a) => cmd::dump::run_dump(a, out),
        Command::Load(a) => cmd::dump::run_load(a, out),
        Command::Completions(a) => cmd::completions::run_completions(a, out),
        Command::Man(a) => cmd::completions::run_man(a, out),
    }
}

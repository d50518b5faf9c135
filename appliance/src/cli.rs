//! The command line: every subcommand and flag of `basalt`, with the help text users see.

use clap::{Args, Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;

/// Default address of the HTTP server (dashboard, /metrics, /api).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8642";

#[derive(Debug, Parser)]
#[command(
    name = "basalt",
    version,
    about = "Basalt: a key-value store for databases on NVMe, mounted as a filesystem",
    long_about = "Basalt: a key-value store for databases on NVMe, mounted as a filesystem.\n\n\
        Start here:  basalt up          (data in ./basalt-data, files at ./mnt, dashboard at http://127.0.0.1:8642)\n\
        Inspect:     basalt stats --data DIR, basalt check --data DIR, basalt health\n\
        Service:     basalt serve --config /etc/basalt/basalt.toml (see basalt.example.toml)",
    propagate_version = true
)]
pub struct Cli {
    /// More log output on stderr: -v info, -vv debug, -vvv trace (BASALT_LOG overrides).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create what is missing, mount, serve the dashboard; stop with Ctrl-C (the `make run` command).
    Up(UpArgs),
    /// Mount a data directory at MOUNTPOINT (in the background unless --foreground).
    Mount(MountArgs),
    /// Unmount a Basalt mount cleanly: the serving process syncs its data and exits.
    #[command(alias = "unmount")]
    Umount(UmountArgs),
    /// Daemon mode for systemd: mount + HTTP + health sampling from a config file.
    Serve(ServeArgs),
    /// Benchmarks with db_bench flags (`basalt bench --help`), or `basalt bench compare ...`.
    #[command(disable_help_flag = true)]
    Bench(BenchArgs),
    /// SSD and CPU health: one sample of every device, as a table or JSON; exit 0 ok, 1 warn, 2 crit.
    Health(basalt_monitoring::HealthArgs),
    /// Engine statistics of a stopped data directory (space, write-amp, segments, caches).
    Stats(StatsArgs),
    /// Verify a stopped data directory offline; exit 1 when any problem is found.
    Check(CheckArgs),
    /// Run garbage collection now until no segment qualifies.
    Gc(GcArgs),
    /// List, create, drop or rename collections.
    Collections(CollectionsArgs),
    /// The change feed of a collection as JSON lines.
    Changes(ChangesArgs),
    /// Export collections to a portable JSON-lines file.
    Dump(DumpArgs),
    /// Import a file written by `basalt dump`.
    Load(LoadArgs),
    /// Print a shell completion script: `basalt completions bash > /etc/bash_completion.d/basalt`.
    Completions(CompletionsArgs),
    /// Write man pages (basalt.1, basalt-SUBCOMMAND.1) into a directory.
    #[command(hide = true)]
    Man(ManArgs),
}

/// The data directory argument shared by the offline commands.
#[derive(Debug, Clone, Args)]
pub struct DataArg {
    /// Basalt data directory (the engine's files).
    #[arg(long, value_name = "DIR", env = "BASALT_DATA")]
    pub data: PathBuf,
}

/// The engine settings of the offline commands that write or report them.
#[derive(Debug, Clone, Args)]
pub struct EngineConfigArg {
    /// Config file whose [engine] section to use (as `basalt up --config` does), so that
    /// what this command writes or collects follows it. Without it, the service's
    /// /etc/basalt/basalt.toml when its data_dir is this directory, else engine defaults.
    #[arg(long, value_name = "FILE", env = "BASALT_CONFIG")]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct UpArgs {
    /// Data directory, created when missing [default: ./basalt-data].
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// Where the files appear, created when missing [default: ./mnt].
    #[arg(long, value_name = "DIR")]
    pub mountpoint: Option<PathBuf>,
    /// HTTP address of the dashboard, /metrics and /api [default: 127.0.0.1:8642].
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Optional config file (TOML, see basalt.example.toml); these flags override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Replay recorded `smartctl --json -x` / nvme-cli files instead of querying devices; repeatable.
    #[arg(long = "smart-from-json", value_name = "FILE")]
    pub smart_from_json: Vec<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct MountArgs {
    /// Data directory, created when missing.
    #[arg(long, value_name = "DIR", env = "BASALT_DATA")]
    pub data: PathBuf,
    /// An existing empty directory where the files appear.
    #[arg(value_name = "MOUNTPOINT")]
    pub mountpoint: PathBuf,
    /// Stay in the foreground (logs on stderr; Ctrl-C unmounts).
    #[arg(short, long)]
    pub foreground: bool,
    /// Mount options, comma-separated and repeatable (e.g. -o allow_other,ro).
    #[arg(short = 'o', value_name = "OPTIONS", value_delimiter = ',')]
    pub options: Vec<String>,
    /// FUSE worker threads (0 = one per core, at least two).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub threads: usize,
    /// Optional config file for engine settings ([engine] section); flags override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Internal: the background child of `basalt mount` (detaches its output once mounted).
    #[arg(long, hide = true)]
    pub daemon_child: bool,
}

#[derive(Debug, Clone, Args)]
pub struct UmountArgs {
    /// The mountpoint to unmount.
    #[arg(value_name = "MOUNTPOINT")]
    pub mountpoint: PathBuf,
    /// Seconds to wait for the serving process to sync and exit.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub timeout: u64,
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Config file (TOML).
    #[arg(long, value_name = "FILE", default_value = crate::config::SERVICE_CONFIG)]
    pub config: PathBuf,
    /// Replay recorded smartctl/nvme-cli JSON files (adds to the config's health.smart_replay).
    #[arg(long = "smart-from-json", value_name = "FILE")]
    pub smart_from_json: Vec<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// db_bench flags (`--benchmarks=fillseq,readrandom --num=1000000 --db=DIR ...`), or
    /// `compare --suite quick|standard --out DIR ...`.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub args: Vec<String>,
}

#[derive(Debug, Clone, Args)]
pub struct StatsArgs {
    #[command(flatten)]
    pub data: DataArg,
    #[command(flatten)]
    pub engine: EngineConfigArg,
    /// Print the full statistics as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub data: DataArg,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct GcArgs {
    #[command(flatten)]
    pub data: DataArg,
    #[command(flatten)]
    pub engine: EngineConfigArg,
    /// Collect until live data fills at least PCT % of the log (10-95; default: the
    /// config's, else the engine's default; the output names it).
    #[arg(long, value_name = "PCT", value_parser = clap::value_parser!(u8).range(10..=95))]
    pub target_fill: Option<u8>,
}

#[derive(Debug, Clone, Args)]
pub struct CollectionsArgs {
    #[command(flatten)]
    pub data: DataArg,
    #[command(subcommand)]
    pub action: Option<CollectionAction>,
}

#[derive(Debug, Clone, Subcommand)]
pub enum CollectionAction {
    /// List collections (the default).
    List,
    /// Create a collection.
    Create { name: String },
    /// Drop a collection and all its documents (space is reclaimed by GC).
    Drop { name: String },
    /// Rename a collection.
    Rename { from: String, to: String },
    /// Swap the names of two collections, atomically (as `mv --exchange` of two
    /// collection directories on the mount).
    Exchange { a: String, b: String },
}

#[derive(Debug, Clone, Args)]
pub struct ChangesArgs {
    /// Data directory of a stopped store; without it (or when it is in use) the running
    /// service at --url is asked.
    #[arg(long, value_name = "DIR", env = "BASALT_DATA")]
    pub data: Option<PathBuf>,
    /// Collection whose changes to print.
    #[arg(long, short = 'c', value_name = "NAME")]
    pub collection: String,
    /// Print changes after this sequence number.
    #[arg(long, value_name = "SEQNO", default_value_t = 0)]
    pub since: u64,
    /// Keep printing new changes as they happen (reads from the running service).
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// URL of the running service (basalt up / serve).
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:8642")]
    pub url: String,
    /// Bearer token for a service not bound to localhost.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "BASALT_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// Poll interval of --follow in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub poll_ms: u64,
}

#[derive(Debug, Clone, Args)]
pub struct DumpArgs {
    #[command(flatten)]
    pub data: DataArg,
    /// Collection to export; repeatable (default: all).
    #[arg(long, short = 'c', value_name = "NAME")]
    pub collection: Vec<String>,
    /// Output file (default, or `-`: stdout).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct LoadArgs {
    #[command(flatten)]
    pub data: DataArg,
    #[command(flatten)]
    pub engine: EngineConfigArg,
    /// Input file written by `basalt dump` (default, or `-`: stdin).
    #[arg(value_name = "FILE")]
    pub input: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct CompletionsArgs {
    /// Shell to generate for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Clone, Args)]
pub struct ManArgs {
    /// Directory to write the pages into (created when missing).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

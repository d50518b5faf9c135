//! `basalt.toml`: the service configuration. Every key is optional and documented in
//! `basalt.example.toml`; unknown keys and bad values are rejected with the line number.

use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Where the service (`basalt serve` under systemd) reads its config.
pub const SERVICE_CONFIG: &str = "/etc/basalt/basalt.toml";

/// A config file that could not be used; the message names file, line and column.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// The whole configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Engine data directory.
    pub data_dir: PathBuf,
    /// Log filter (`error`, `warn`, `info`, `debug`, `trace`, or tracing directives).
    pub log_level: LogLevel,
    pub mount: MountSection,
    pub http: HttpSection,
    pub engine: EngineSection,
    pub health: HealthSection,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data_dir: PathBuf::from("/var/lib/basalt/data"),
            log_level: LogLevel("info".into()),
            mount: MountSection::default(),
            http: HttpSection::default(),
            engine: EngineSection::default(),
            health: HealthSection::default(),
        }
    }
}

/// `[mount]`
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MountSection {
    pub enabled: bool,
    pub path: PathBuf,
    pub threads: usize,
    pub allow_other: bool,
    pub options: Vec<String>,
    pub chunk_size: usize,
}

impl Default for MountSection {
    fn default() -> Self {
        MountSection {
            enabled: true,
            path: PathBuf::from("/mnt/basalt"),
            threads: 0,
            allow_other: false,
            options: Vec::new(),
            chunk_size: 0,
        }
    }
}

/// `[http]`
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpSection {
    pub enabled: bool,
    pub listen: SocketAddr,
    pub token: Option<String>,
    pub token_file: Option<PathBuf>,
}

impl Default for HttpSection {
    fn default() -> Self {
        HttpSection {
            enabled: true,
            listen: crate::cli::DEFAULT_LISTEN.parse().expect("default address"),
            token: None,
            token_file: None,
        }
    }
}

impl HttpSection {
    /// The bearer token: `token`, else the trimmed content of `token_file`.
    pub fn resolve_token(&self) -> Result<Option<String>, ConfigError> {
        if let Some(t) = &self.token {
            return Ok(Some(t.clone()));
        }
        match &self.token_file {
            None => Ok(None),
            Some(p) => {
                let t = std::fs::read_to_string(p)
                    .map_err(|e| ConfigError(format!("http.token_file {}: {e}", p.display())))?;
                let t = t.trim().to_string();
                if t.is_empty() {
                    return Err(ConfigError(format!(
                        "http.token_file {} is empty",
                        p.display()
                    )));
                }
                Ok(Some(t))
            }
        }
    }
}

/// `[engine]`
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineSection {
    pub compression: CompressionSetting,
    pub durability: DurabilitySetting,
    pub sync_interval_ms: Positive,
    pub target_fill_pct: FillPct,
    pub memory_budget_mib: MemoryMib,
    pub segment_size_mib: SegmentMib,
    pub block_size_kib: BlockKib,
    pub direct_io: bool,
    pub io_backend: IoBackendSetting,
    /// Microseconds an io_uring read polls for its completion before sleeping (0: never).
    pub read_poll_micros: u64,
    /// Put blocks just written into the block cache (for workloads that read back
    /// what they just wrote).
    pub cache_writes: bool,
    /// Load index blocks into the index cache in the background at open.
    pub warm_index_cache: bool,
    /// Retired segment files kept for reuse by new segments (0: delete them).
    pub recycle_segments: usize,
    /// Flush the write cache after this long without writes if it holds a delete or
    /// spans segments, so deleted space comes back while idle (0: only when full).
    pub idle_flush_ms: u64,
    pub background_gc: bool,
}

impl Default for EngineSection {
    fn default() -> Self {
        let d = basalt_engine::Options::default();
        EngineSection {
            compression: CompressionSetting(d.compression),
            // A filesystem's contract: fsync, fdatasync, sync and unmount are durable
            // on return, other writes within about a second (the mount's flush interval,
            // then `sync_interval_ms`; ext4 commits every 5 s). Syncing every engine
            // commit made each file creation and deletion wait for the device: creation
            // 6.4-8.0x and deletion 5.7-6.8x slower through the mount on the test VM
            // (`basalt-fusefs-dev files`, 8 threads, 3 rounds).
            durability: DurabilitySetting::Periodic,
            sync_interval_ms: Positive(100),
            target_fill_pct: FillPct(d.target_fill_pct),
            memory_budget_mib: MemoryMib(d.memory_budget >> 20),
            segment_size_mib: SegmentMib(d.segment_size >> 20),
            block_size_kib: BlockKib(d.block_size >> 10),
            direct_io: d.direct_io,
            io_backend: IoBackendSetting(d.io_backend),
            read_poll_micros: d.read_poll_micros,
            cache_writes: d.cache_writes,
            warm_index_cache: d.warm_index_cache,
            recycle_segments: d.recycle_segments,
            idle_flush_ms: d.idle_flush_ms,
            background_gc: d.background_gc,
        }
    }
}

/// Engine options of the service commands (`up`, `mount`, `serve`): the config file's
/// `[engine]` section, or that section's defaults (periodic sync) when there is no file;
/// never the engine library's defaults, which sync every write.
pub fn service_engine_options(cfg: Option<&Config>) -> basalt_engine::Options {
    cfg.map_or_else(
        || EngineSection::default().options(),
        |c| c.engine.options(),
    )
}

impl EngineSection {
    /// Engine options for these settings (always creating a missing directory).
    pub fn options(&self) -> basalt_engine::Options {
        basalt_engine::Options {
            segment_size: self.segment_size_mib.0 << 20,
            block_size: self.block_size_kib.0 << 10,
            compression: self.compression.0,
            durability: match self.durability {
                DurabilitySetting::EveryWrite => basalt_engine::Durability::SyncEveryWrite,
                DurabilitySetting::Periodic => {
                    basalt_engine::Durability::SyncEveryMs(self.sync_interval_ms.0)
                }
                DurabilitySetting::None => basalt_engine::Durability::NoSync,
            },
            target_fill_pct: self.target_fill_pct.0,
            memory_budget: self.memory_budget_mib.0 << 20,
            direct_io: self.direct_io,
            io_backend: self.io_backend.0,
            read_poll_micros: self.read_poll_micros,
            cache_writes: self.cache_writes,
            warm_index_cache: self.warm_index_cache,
            recycle_segments: self.recycle_segments,
            idle_flush_ms: self.idle_flush_ms,
            background_gc: self.background_gc,
            create_if_missing: true,
        }
    }
}

/// `[health]`
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HealthSection {
    pub enabled: bool,
    pub interval_secs: Positive,
    /// History directory; unset keeps history in memory only.
    pub history_dir: Option<PathBuf>,
    pub smart_replay: Vec<PathBuf>,
    pub devices: Vec<String>,
    pub rules_config: Option<PathBuf>,
    pub smartctl: String,
    pub nvme: String,
    pub hwmon_root: PathBuf,
}

impl Default for HealthSection {
    fn default() -> Self {
        HealthSection {
            enabled: true,
            interval_secs: Positive(60),
            history_dir: None,
            smart_replay: Vec::new(),
            devices: Vec::new(),
            rules_config: None,
            smartctl: "smartctl".into(),
            nvme: "nvme".into(),
            hwmon_root: PathBuf::from("/sys/class/hwmon"),
        }
    }
}

/// A tracing filter, checked when the file is read.
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "String")]
pub struct LogLevel(pub String);

impl TryFrom<String> for LogLevel {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        tracing_subscriber::EnvFilter::try_new(&s)
            .map(|_| LogLevel(s.clone()))
            .map_err(|e| format!("invalid log_level {s:?}: {e}"))
    }
}

/// `none`, `lz4`, `zstd` or `zstd:LEVEL`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(try_from = "String")]
pub struct CompressionSetting(pub basalt_engine::Compression);

impl TryFrom<String> for CompressionSetting {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        match basalt_engine::Compression::parse(&s) {
            Some(basalt_engine::Compression::Zstd(l)) if !(1..=22).contains(&l) => {
                Err(format!("zstd level {l} must be between 1 and 22"))
            }
            Some(c) => Ok(CompressionSetting(c)),
            None => Err(format!(
                "unknown compression {s:?} (use none, lz4, zstd or zstd:LEVEL)"
            )),
        }
    }
}

/// `io_uring` or `psync`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(try_from = "String")]
pub struct IoBackendSetting(pub basalt_engine::IoBackend);

impl TryFrom<String> for IoBackendSetting {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        basalt_engine::IoBackend::parse(&s)
            .map(IoBackendSetting)
            .ok_or_else(|| format!("unknown io_backend {s:?} (use io_uring or psync)"))
    }
}

/// When writes are durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DurabilitySetting {
    /// fdatasync before a write returns (group commit).
    EveryWrite,
    /// fdatasync every `sync_interval_ms`.
    Periodic,
    /// Only on flush, unmount and shutdown.
    None,
}

macro_rules! ranged {
    ($(#[$m:meta])* $name:ident, $t:ty, $lo:expr, $hi:expr, $what:literal) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, Deserialize)]
        #[serde(try_from = "i64")]
        pub struct $name(pub $t);
        impl TryFrom<i64> for $name {
            type Error = String;
            fn try_from(v: i64) -> Result<Self, String> {
                if (($lo as i64)..=($hi as i64)).contains(&v) {
                    Ok($name(v as $t))
                } else {
                    Err(format!("{} {v} must be between {} and {}", $what, $lo, $hi))
                }
            }
        }
    };
}

ranged!(
    /// GC target fill, 10..=95 %.
    FillPct, u8, 10, 95, "target_fill_pct"
);
ranged!(
    /// Memory budget, at least 8 MiB.
    MemoryMib, u64, 8, 1u64 << 30, "memory_budget_mib"
);
ranged!(
    /// Log segment size in MiB.
    SegmentMib, u64, 1, 4095, "segment_size_mib"
);
ranged!(
    /// Log block size in KiB.
    BlockKib, usize, 1, 1024, "block_size_kib"
);
ranged!(
    /// A positive integer.
    Positive, u64, 1, u32::MAX, "value"
);

impl Config {
    /// Parses TOML text; errors name `origin`, line and column.
    pub fn parse(text: &str, origin: &Path) -> Result<Config, ConfigError> {
        let cfg: Config = toml::from_str(text).map_err(|e| {
            let at = e
                .span()
                .map(|s| {
                    let before = &text[..s.start.min(text.len())];
                    let line = before.matches('\n').count() + 1;
                    let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
                    format!(":{line}:{col}")
                })
                .unwrap_or_default();
            ConfigError(format!(
                "{}{at}: {}",
                origin.display(),
                e.message().trim_end()
            ))
        })?;
        cfg.engine
            .options()
            .validate()
            .map_err(|e| ConfigError(format!("{}: [engine]: {e}", origin.display())))?;
        Ok(cfg)
    }

    /// Reads and parses a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("cannot read config {}: {e}", path.display())))?;
        Config::parse(&text, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Config, ConfigError> {
        Config::parse(s, Path::new("t.toml"))
    }

    #[test]
    fn example_config_parses_and_matches_defaults_where_commented() {
        let text = include_str!("../basalt.example.toml");
        let c = parse(text).unwrap();
        assert_eq!(c.data_dir, PathBuf::from("/var/lib/basalt/data"));
        assert!(c.mount.enabled);
        assert_eq!(c.http.listen.to_string(), "127.0.0.1:8642");
        assert_eq!(
            c.engine.target_fill_pct.0,
            basalt_engine::Options::default().target_fill_pct
        );
        let d = EngineSection::default();
        assert_eq!(
            (c.engine.durability, c.engine.sync_interval_ms.0),
            (d.durability, d.sync_interval_ms.0)
        );
    }

    #[test]
    fn writes_are_synced_every_100_ms_by_default_and_every_write_on_request() {
        let o = parse("").unwrap().engine.options();
        assert_eq!(o.durability, basalt_engine::Durability::SyncEveryMs(100));
        let o = parse("[engine]\ndurability = \"every-write\"\n")
            .unwrap()
            .engine
            .options();
        assert_eq!(o.durability, basalt_engine::Durability::SyncEveryWrite);
        let o = parse("[engine]\ndurability = \"none\"\n")
            .unwrap()
            .engine
            .options();
        assert_eq!(o.durability, basalt_engine::Durability::NoSync);
    }

    #[test]
    fn service_commands_without_a_config_file_sync_every_100_ms_not_every_write() {
        assert_eq!(
            service_engine_options(None).durability,
            basalt_engine::Durability::SyncEveryMs(100)
        );
        assert_eq!(
            basalt_engine::Options::default().durability,
            basalt_engine::Durability::SyncEveryWrite,
            "the engine library's own default differs: the service must not use it"
        );
        let c = parse("[engine]\ndurability = \"every-write\"\n").unwrap();
        assert_eq!(
            service_engine_options(Some(&c)).durability,
            basalt_engine::Durability::SyncEveryWrite
        );
    }

    #[test]
    fn unknown_key_is_rejected_with_its_line() {
        let e = parse("data_dir = \"/x\"\n[engine]\ncompresion = \"lz4\"\n").unwrap_err();
        assert!(e.0.starts_with("t.toml:3:"), "{e}");
        assert!(e.0.contains("compresion"), "{e}");
    }

    #[test]
    fn bad_values_are_rejected_with_their_line() {
        let e = parse("\n\n[engine]\ntarget_fill_pct = 200\n").unwrap_err();
        assert!(e.0.starts_with("t.toml:4:"), "{e}");
        assert!(e.0.contains("between 10 and 95"), "{e}");
        let e = parse("[engine]\ncompression = \"snappy\"\n").unwrap_err();
        assert!(e.0.starts_with("t.toml:2:"), "{e}");
        let e = parse("[http]\nlisten = \"nowhere\"\n").unwrap_err();
        assert!(e.0.starts_with("t.toml:2:"), "{e}");
        let e = parse("log_level = \"[[\"\n").unwrap_err();
        assert!(e.0.starts_with("t.toml:1:"), "{e}");
        let e = parse("[engine]\ndurability = \"sometimes\"\n").unwrap_err();
        assert!(e.0.starts_with("t.toml:2:"), "{e}");
    }

    #[test]
    fn engine_options_follow_the_file() {
        let c = parse(
            "[engine]\ncompression = \"zstd:5\"\ndurability = \"periodic\"\nsync_interval_ms = 50\nmemory_budget_mib = 64\nio_backend = \"psync\"\nread_poll_micros = 0\ncache_writes = true\nwarm_index_cache = false\n",
        )
        .unwrap();
        let o = c.engine.options();
        assert_eq!(o.compression, basalt_engine::Compression::Zstd(5));
        assert_eq!(o.durability, basalt_engine::Durability::SyncEveryMs(50));
        assert_eq!(o.memory_budget, 64 << 20);
        assert!(o.cache_writes);
        assert!(!o.warm_index_cache);
        assert_eq!(o.io_backend, basalt_engine::IoBackend::Psync);
        assert_eq!(o.read_poll_micros, 0);
        let e = parse("[engine]\nio_backend = \"aio\"\n").unwrap_err();
        assert!(e.0.starts_with("t.toml:2:") && e.0.contains("psync"), "{e}");
        let e = parse("[engine]\nread_poll_micros = 20000\n").unwrap_err();
        assert!(
            e.0.contains("read_poll_micros 20000 must be at most"),
            "{e}"
        );
    }
}

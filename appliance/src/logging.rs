//! Logging: `tracing` to stderr, quiet by default (warnings only), `-v` for more.
//! On a terminal lines are coloured and timed; otherwise (journald, pipes) they are plain and
//! untimed, since the journal stamps them itself. `BASALT_LOG` overrides the filter.

use std::io::IsTerminal;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Registry};

/// Changes the log filter at run time (SIGHUP reload).
#[derive(Clone)]
pub struct LogHandle(reload::Handle<EnvFilter, Registry>);

impl LogHandle {
    /// Replaces the filter unless `BASALT_LOG` pins it.
    pub fn set(&self, filter: &str) {
        if std::env::var_os("BASALT_LOG").is_some() {
            return;
        }
        match EnvFilter::try_new(filter) {
            Ok(f) => {
                if let Err(e) = self.0.reload(f) {
                    tracing::warn!("log filter not changed: {e}");
                }
            }
            Err(e) => tracing::warn!("invalid log filter {filter:?}: {e}"),
        }
    }
}

/// The filter for `-v` repeated `verbose` times, starting from `base`.
pub fn level_for(verbose: u8, base: &str) -> String {
    match verbose {
        0 => base.to_string(),
        1 => "info".into(),
        2 => "debug".into(),
        _ => "trace".into(),
    }
}

/// Installs the global subscriber; returns a handle to change the filter later.
pub fn init(filter: &str) -> LogHandle {
    let filter = std::env::var("BASALT_LOG")
        .ok()
        .and_then(|f| EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("warn")));
    let (layer, handle) = reload::Layer::new(filter);
    let tty = std::io::stderr().is_terminal();
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(tty)
        .with_target(false);
    let registry = tracing_subscriber::registry().with(layer);
    let _ = if tty {
        registry.with(fmt).try_init()
    } else {
        registry.with(fmt.without_time()).try_init()
    };
    LogHandle(handle)
}

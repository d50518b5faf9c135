//! Basalt monitoring: SSD and CPU health for small database servers.
//!
//! Collectors ([`collect`]) run `smartctl`, `nvme` and read hwmon (or replay recorded JSON);
//! [`record`] normalises them into one [`record::HealthRecord`] per device; [`rules`] set
//! ok/warn/crit; [`history`] stores samples with retention and hourly rollups; [`projection`]
//! estimates end of life; [`metrics`] renders Prometheus text; [`http`] serves the dashboard and
//! APIs; [`sampler`] ties it together for `basalt serve`; [`alerts`] reports status changes;
//! [`cli`] implements `basalt health`.

pub mod alerts;
pub mod cli;
pub mod collect;
pub mod config;
pub mod engine_store;
pub mod error;
pub mod history;
pub mod http;
pub mod metrics;
pub mod num;
pub mod projection;
pub mod record;
pub mod rules;
pub mod sampler;
pub mod tbw;

pub use cli::{run_health, HealthArgs};
pub use error::MonitoringError;
pub use http::{router, EngineStatsProvider, MonitoringState};
pub use record::{HealthRecord, HealthReport, Protocol, Status};
pub use sampler::{spawn_sampler, Sampler, Snapshot};

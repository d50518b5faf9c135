//! One module per subcommand; each returns the process exit code.

pub mod bench;
pub mod changes;
pub mod check;
pub mod collections;
pub mod completions;
pub mod dump;
pub mod gc;
pub mod mount;
pub mod stats;
pub mod up;

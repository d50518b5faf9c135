//! Crash points for tests: with `BASALT_FAILPOINT=<name>` in its environment the
//! process aborts (no destructors, no flushing — like `kill -9`) when it reaches the
//! point of that name. The variable is read once; otherwise a point costs one load.

use std::sync::OnceLock;

/// Aborts the process if `BASALT_FAILPOINT` names this point.
pub fn hit(name: &str) {
    static ARMED: OnceLock<Option<String>> = OnceLock::new();
    let armed = ARMED.get_or_init(|| std::env::var("BASALT_FAILPOINT").ok());
    if armed.as_deref() == Some(name) {
        eprintln!("basalt: failpoint {name} reached: aborting");
        std::process::abort();
    }
}

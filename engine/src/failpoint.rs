//! Crash points for tests: with `BASALT_FAILPOINT=<name>` in its environment the
//! process aborts (no destructors, no flushing — like `kill -9`) when it reaches the
//! point of that name. With `BASALT_FAILPOINT_PAUSE=<name>:<ms>` it sleeps that long
//! at the pause point of that name instead, widening a race window so that a crash
//! test's kills land in it. Each variable is read once; otherwise a point costs one
//! load.

use std::sync::OnceLock;
use std::time::Duration;

/// Aborts the process if `BASALT_FAILPOINT` names this point.
pub fn hit(name: &str) {
    static ARMED: OnceLock<Option<String>> = OnceLock::new();
    let armed = ARMED.get_or_init(|| std::env::var("BASALT_FAILPOINT").ok());
    if armed.as_deref() == Some(name) {
        eprintln!("basalt: failpoint {name} reached: aborting");
        std::process::abort();
    }
}

/// Sleeps if `BASALT_FAILPOINT_PAUSE` names this point (`<name>:<milliseconds>`).
pub fn pause(name: &str) {
    static ARMED: OnceLock<Option<(String, Duration)>> = OnceLock::new();
    let armed = ARMED.get_or_init(|| {
        let v = std::env::var("BASALT_FAILPOINT_PAUSE").ok()?;
        let (point, ms) = v.rsplit_once(':')?;
        Some((point.to_string(), Duration::from_millis(ms.parse().ok()?)))
    });
    if let Some((point, d)) = armed {
        if point == name {
            std::thread::sleep(*d);
        }
    }
}

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

/// The errno every log segment write fails with (0: none); see [`fail_log_writes`].
static LOG_WRITE_ERRNO: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Test hook: while `errno` is not 0, every write of the log to its segment files
/// fails with it (as on a full disk with `libc::ENOSPC`), in every database of the
/// process; 0 ends it. For in-process tests of write failures at chosen points.
pub fn fail_log_writes(errno: i32) {
    LOG_WRITE_ERRNO.store(errno, std::sync::atomic::Ordering::SeqCst);
}

/// The injected failure of a log write, if one is set.
pub(crate) fn log_write_failure() -> Option<std::io::Error> {
    match LOG_WRITE_ERRNO.load(std::sync::atomic::Ordering::Relaxed) {
        0 => None,
        e => Some(std::io::Error::from_raw_os_error(e)),
    }
}

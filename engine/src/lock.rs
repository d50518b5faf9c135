//! The data directory lock: `LOCK` held with `flock` for the life of the engine,
//! containing the holder's pid so a second opener can say who holds it.

use crate::error::{Error, Result};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::Path;

/// Holds the lock until dropped.
pub struct DirLock {
    _file: File,
}

/// How long an opener waits when the lock's recorded holder is its own process.
const OWN_PID_WAIT: std::time::Duration = std::time::Duration::from_millis(250);

impl DirLock {
    pub fn acquire(dir: &Path) -> Result<DirLock> {
        let path = dir.join("LOCK");
        let mut f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        let pid = std::process::id().to_string();
        let started = std::time::Instant::now();
        loop {
            // SAFETY: flock on an open descriptor.
            let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if r == 0 {
                break;
            }
            let mut holder = String::new();
            let _ = f.rewind().and_then(|_| f.read_to_string(&mut holder));
            let holder = holder.trim();
            // A lock this process released can stay held a moment longer by a child
            // it forked meanwhile (the descriptor is shared until the child's exec
            // closes it), so a lock recorded as ours is retried briefly.
            if holder == pid && started.elapsed() < OWN_PID_WAIT {
                std::thread::sleep(std::time::Duration::from_millis(5));
                continue;
            }
            let holder = if holder.is_empty() {
                "unknown process".to_string()
            } else {
                format!("pid {holder}")
            };
            return Err(Error::Locked {
                path: dir.to_path_buf(),
                holder,
            });
        }
        f.set_len(0)
            .and_then(|_| f.rewind())
            .and_then(|_| f.write_all(pid.as_bytes()))
            .map_err(|e| Error::io(&path, e))?;
        Ok(DirLock { _file: f })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_this_process_releases_a_moment_later_is_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let first = DirLock::acquire(dir.path()).unwrap();
        // Held: refused (after the short wait), naming this process.
        match DirLock::acquire(dir.path()) {
            Err(Error::Locked { holder, .. }) => {
                assert_eq!(holder, format!("pid {}", std::process::id()))
            }
            other => panic!("expected Locked, got {:?}", other.map(|_| ())),
        }
        // Released 50 ms from now (as by a forked child's exec): acquired.
        let t = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            drop(first);
        });
        DirLock::acquire(dir.path()).unwrap();
        t.join().unwrap();
    }
}

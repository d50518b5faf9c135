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
        // SAFETY: flock on an open descriptor.
        let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if r != 0 {
            let mut holder = String::new();
            let _ = f.read_to_string(&mut holder);
            let holder = holder.trim();
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
        let pid = std::process::id().to_string();
        f.set_len(0)
            .and_then(|_| f.rewind())
            .and_then(|_| f.write_all(pid.as_bytes()))
            .map_err(|e| Error::io(&path, e))?;
        Ok(DirLock { _file: f })
    }
}

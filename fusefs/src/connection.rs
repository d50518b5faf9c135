//! The kernel's FUSE connection behind a mount, found without touching the mount
//! (whose requests may be the ones stuck), and aborted: every request waiting for an
//! answer fails with `ECONNABORTED`, later ones with `ENOTCONN`, and the daemon's
//! session ends, where otherwise the callers would wait for ever.

use std::path::{Path, PathBuf};

use crate::mounts;

/// Where the kernel's FUSE control filesystem (`fusectl`) lists connections.
const CONTROL_DIR: &str = "/sys/fs/fuse/connections";

/// The FUSE connection of the mount at `mountpoint`: its `fusectl` directory name
/// (the device's minor number; FUSE mounts have major 0). Reads `/proc/self/mountinfo`
/// and resolves only the mountpoint's parent, so nothing here waits for the mount.
pub fn of_mount(mountpoint: &Path) -> Result<u32, String> {
    let at = mounts::absolute(mountpoint);
    match mounts::mount_at(&at) {
        Some(m) if m.is_fuse() => Ok(m.device.1),
        Some(m) => Err(format!(
            "{} is {} on device {}:{}, not a FUSE mount",
            at.display(),
            m.fstype,
            m.device.0,
            m.device.1
        )),
        None => Err(format!("nothing is mounted at {}", at.display())),
    }
}

/// Aborts the FUSE connection of the mount at `mountpoint` (see [`of_mount`] and
/// [`abort`]): requests waiting for a daemon that cannot answer fail at once.
pub fn abort_mount(mountpoint: &Path) -> Result<(), String> {
    of_mount(mountpoint).and_then(abort)
}

/// Aborts FUSE connection `conn` through `fusectl`, mounting it first where it is not
/// (systemd does at boot; a bare system may not). Needs root.
pub fn abort(conn: u32) -> Result<(), String> {
    let dir = PathBuf::from(CONTROL_DIR).join(conn.to_string());
    if !dir.exists() {
        let status = std::process::Command::new("mount")
            .args(["-t", "fusectl", "fusectl", CONTROL_DIR])
            .stderr(std::process::Stdio::null())
            .status();
        if !dir.exists() {
            return Err(format!(
                "{} is missing and mounting fusectl there failed ({status:?})",
                dir.display()
            ));
        }
    }
    std::fs::write(dir.join("abort"), b"1").map_err(|e| format!("{}/abort: {e}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_that_is_not_a_fuse_mount_is_refused_with_its_device() {
        let e = of_mount(Path::new("/proc")).unwrap_err();
        assert!(e.contains("proc on device 0:"), "{e}");
        let e = of_mount(Path::new("/definitely/not/here")).unwrap_err();
        assert!(
            e.contains("nothing is mounted at /definitely/not/here"),
            "{e}"
        );
    }
}

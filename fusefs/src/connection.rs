//! The kernel's FUSE connection behind a mount, found without touching the mount
//! (whose requests may be the ones stuck), and aborted: every request waiting for an
//! answer fails with `ECONNABORTED`, later ones with `ENOTCONN`, and the daemon's
//! session ends, where otherwise the callers would wait for ever.

use std::path::{Path, PathBuf};

/// Where the kernel's FUSE control filesystem (`fusectl`) lists connections.
const CONTROL_DIR: &str = "/sys/fs/fuse/connections";

/// The device number `(major, minor)` and file system type of what is mounted at
/// `mountpoint`, from `mountinfo` text (the topmost mount there when several are
/// stacked).
fn mounted_device<'a>(mountinfo: &'a str, mountpoint: &Path) -> Option<(u32, u32, &'a str)> {
    let want = mountpoint.as_os_str().as_encoded_bytes();
    mountinfo
        .lines()
        .rev()
        .find_map(|l| {
            let mut f = l.split(' ');
            let dev = f.nth(2)?;
            let point = f.nth(1)?;
            let fstype = l.split(" - ").nth(1)?.split(' ').next()?;
            (unescape(point) == want).then_some((dev, fstype))
        })
        .and_then(|(dev, fstype)| {
            let (a, b) = dev.split_once(':')?;
            Some((a.parse().ok()?, b.parse().ok()?, fstype))
        })
}

/// A mountinfo path with its octal escapes (`\040` for a space...) undone.
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let code = b
            .get(i + 1..i + 4)
            .filter(|o| b[i] == b'\\' && o.iter().all(|c| (b'0'..=b'7').contains(c)));
        match code.and_then(|o| u8::from_str_radix(std::str::from_utf8(o).ok()?, 8).ok()) {
            Some(c) => {
                out.push(c);
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    out
}

/// The FUSE connection of the mount at `mountpoint`: its `fusectl` directory name
/// (the device's minor number; FUSE mounts have major 0). Reads `/proc/self/mountinfo`
/// and resolves only the mountpoint's parent, so nothing here waits for the mount.
pub fn of_mount(mountpoint: &Path) -> Result<u32, String> {
    let name = mountpoint
        .file_name()
        .ok_or_else(|| format!("{}: not a mount point", mountpoint.display()))?;
    let parent = match mountpoint.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let parent = parent
        .canonicalize()
        .map_err(|e| format!("{}: {e}", parent.display()))?;
    let text = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
    let at = parent.join(name);
    match mounted_device(&text, &at) {
        Some((_, minor, t)) if t == "fuse" || t.starts_with("fuse.") => Ok(minor),
        Some((major, minor, t)) => Err(format!(
            "{} is {t} on device {major}:{minor}, not a FUSE mount",
            at.display()
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

    const INFO: &str = "\
22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
98 22 0:51 / /tmp/a\\040b/mnt rw,nosuid,nodev,relatime shared:50 - fuse.basalt basalt rw
99 22 0:52 / /tmp/mnt rw - fuse.basalt basalt rw
100 99 0:53 / /tmp/mnt rw - fuse.basalt-null basalt-null rw
";

    #[test]
    fn the_device_of_a_mount_point_is_found_in_mountinfo_with_escapes_and_stacking() {
        let dev = |p: &str| mounted_device(INFO, Path::new(p));
        assert_eq!(dev("/tmp/a b/mnt"), Some((0, 51, "fuse.basalt")));
        assert_eq!(dev("/"), Some((254, 1, "ext4")));
        assert_eq!(
            dev("/tmp/mnt"),
            Some((0, 53, "fuse.basalt-null")),
            "the topmost of two"
        );
        assert_eq!(dev("/tmp/a\\040b/mnt"), None, "compared unescaped");
        assert_eq!(dev("/tmp"), None);
    }

    #[test]
    fn octal_escapes_are_undone_and_anything_else_is_kept() {
        assert_eq!(unescape("a\\040b\\011c\\134d"), b"a b\tc\\d");
        assert_eq!(unescape("x\\04"), b"x\\04");
        assert_eq!(unescape("x\\09y"), b"x\\09y");
    }

    #[test]
    fn a_path_that_is_not_a_fuse_mount_is_refused_with_its_device() {
        let e = of_mount(Path::new("/proc")).unwrap_err();
        assert!(e.contains("proc on device 0:"), "{e}");
        let e = of_mount(Path::new("/definitely/not/here")).unwrap_err();
        assert!(e.contains("/definitely/not"), "{e}");
    }
}

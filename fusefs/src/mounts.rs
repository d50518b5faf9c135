//! What is mounted where, from `/proc/self/mountinfo`.

use std::path::{Path, PathBuf};

/// One mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    pub mountpoint: PathBuf,
    /// Device number `(major, minor)`; a FUSE mount's minor names its connection.
    pub device: (u32, u32),
    pub fstype: String,
    pub source: String,
}

impl MountEntry {
    /// A FUSE file system (`fuse`, `fuse.SUBTYPE`).
    pub fn is_fuse(&self) -> bool {
        self.fstype == "fuse" || self.fstype.starts_with("fuse.")
    }
}

fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses mountinfo text.
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let mut f = left.split(' ');
            let (major, minor) = f.nth(2)?.split_once(':')?;
            let mp = f.nth(1)?;
            let mut r = right.split(' ');
            let fstype = r.next()?.to_string();
            let source = unescape(r.next().unwrap_or(""));
            Some(MountEntry {
                mountpoint: PathBuf::from(unescape(mp)),
                device: (major.parse().ok()?, minor.parse().ok()?),
                fstype,
                source,
            })
        })
        .collect()
}

/// The last (topmost) mount at `path`, if any. `path` should be absolute.
pub fn mount_at(path: &Path) -> Option<MountEntry> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    parse_mountinfo(&text)
        .into_iter()
        .rev()
        .find(|m| m.mountpoint == path)
}

/// An absolute form of `path` without resolving the mount itself (a dead FUSE mount
/// cannot be stat'ed, so `canonicalize` of the path fails).
pub fn absolute(path: &Path) -> PathBuf {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    match (abs.parent(), abs.file_name()) {
        (Some(parent), Some(name)) => parent
            .canonicalize()
            .map(|p| p.join(name))
            .unwrap_or(abs.clone()),
        _ => abs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_fuse_and_escaped_entries() {
        let text = "36 35 98:0 / /mnt1 rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n\
                    99 36 0:52 / /srv/my\\040files rw,nosuid,nodev - fuse.basalt basalt:/var/lib/basalt rw,user_id=0\n";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 2);
        assert_eq!(m[1].mountpoint, PathBuf::from("/srv/my files"));
        assert_eq!((m[0].device, m[1].device), ((98, 0), (0, 52)));
        assert!(m[1].is_fuse() && !m[0].is_fuse());
        assert_eq!(m[1].fstype, "fuse.basalt");
        assert_eq!(m[1].source, "basalt:/var/lib/basalt");
    }

    #[test]
    fn root_is_a_mount_and_a_fresh_dir_is_not() {
        assert!(mount_at(Path::new("/")).is_some());
        let d = tempfile::tempdir().unwrap();
        assert!(mount_at(&absolute(d.path())).is_none());
    }
}

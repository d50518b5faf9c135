//! What the machine is (cores, RAM, CPU, kernel, the device and file system under a path)
//! and the date, for report headers.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct MachineInfo {
    pub hostname: String,
    pub cores: usize,
    pub cpu_model: String,
    pub ram_bytes: u64,
    pub kernel: String,
    /// Block device holding the path (e.g. `vda`), as named in /proc/diskstats.
    pub device: Option<String>,
    pub device_model: String,
    pub fs_type: String,
    pub mount_point: String,
}

fn read(p: &str) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

/// `(major, minor)` of the device holding `path` (or its nearest existing ancestor).
pub fn dev_of(path: &Path) -> Option<(u32, u32)> {
    use std::os::unix::fs::MetadataExt;
    let mut p = Some(path);
    while let Some(q) = p {
        if let Ok(md) = std::fs::metadata(q) {
            let d = md.dev();
            return Some((libc::major(d), libc::minor(d)));
        }
        p = q.parent();
    }
    None
}

/// Mount point and file system type of the first mount of device `(major, minor)`.
fn mount_of(dev: (u32, u32)) -> Option<(String, String)> {
    basalt_fusefs::mounts::parse_mountinfo(&read("/proc/self/mountinfo"))
        .into_iter()
        .find(|m| m.device == dev)
        .map(|m| (m.mountpoint.display().to_string(), m.fstype))
}

/// Name of the /proc/diskstats row for `(major, minor)`; falls back to the mount's source.
pub fn diskstats_name(dev: (u32, u32)) -> Option<String> {
    for l in read("/proc/diskstats").lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() > 3 && f[0] == dev.0.to_string() && f[1] == dev.1.to_string() {
            return Some(f[2].to_string());
        }
    }
    None
}

impl MachineInfo {
    pub fn collect(path: &Path) -> MachineInfo {
        let cpuinfo = read("/proc/cpuinfo");
        let cpu_model = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_else(|| "unknown CPU".into());
        let ram_bytes = read("/proc/meminfo")
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .map(|kb| kb * 1024)
            .unwrap_or(0);
        let kernel = {
            let os = read("/proc/sys/kernel/osrelease");
            format!("Linux {}", os.trim())
        };
        let dev = dev_of(path);
        let device = dev.and_then(diskstats_name);
        let (mount_point, fs_type) = dev.and_then(mount_of).unwrap_or_default();
        let device_model = device
            .as_ref()
            .map(|d| {
                let base = format!("/sys/block/{d}/device");
                let model = read(&format!("{base}/model")).trim().to_string();
                let vendor = read(&format!("{base}/vendor")).trim().to_string();
                let rotational = read(&format!("/sys/block/{d}/queue/rotational"))
                    .trim()
                    .to_string();
                let kind = if d.starts_with("vd") {
                    "virtio disk"
                } else {
                    ""
                };
                let mut s = [kind, &vendor, &model]
                    .iter()
                    .filter(|x| !x.is_empty())
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(" ");
                if s.is_empty() {
                    s = "unknown model".into();
                }
                if rotational == "1" {
                    s.push_str(" (rotational)");
                }
                s
            })
            .unwrap_or_else(|| "unknown (no block device)".into());
        MachineInfo {
            hostname: read("/proc/sys/kernel/hostname").trim().to_string(),
            cores: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            cpu_model,
            ram_bytes,
            kernel,
            device,
            device_model,
            fs_type,
            mount_point,
        }
    }
}

/// (year, month, day, hour, minute, second) in UTC for a Unix time.
pub fn civil_utc(secs: i64) -> (i64, u32, u32, u32, u32, u32) {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + if m <= 2 { 1 } else { 0 };
    (
        y,
        m,
        d,
        (rem / 3600) as u32,
        ((rem % 3600) / 60) as u32,
        (rem % 60) as u32,
    )
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// `2026-11-21 08:43:16 UTC`
pub fn utc_now_string() -> String {
    let (y, mo, d, h, mi, s) = civil_utc(now_secs());
    format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02} UTC")
}

/// `2026-11-21` (for result directory names)
pub fn utc_date() -> String {
    let (y, mo, d, ..) = civil_utc(now_secs());
    format!("{y:04}-{mo:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_utc(0), (1970, 1, 1, 0, 0, 0));
        assert_eq!(civil_utc(951_782_400), (2000, 2, 29, 0, 0, 0));
        assert_eq!(civil_utc(1_700_000_000), (2023, 11, 14, 22, 13, 20));
    }

    #[test]
    fn finds_the_device_and_fs_of_a_real_path() {
        let m = MachineInfo::collect(Path::new("/"));
        assert!(m.cores >= 1 && m.ram_bytes > 0);
        assert!(!m.fs_type.is_empty(), "root has a file system type: {m:?}");
        assert!(
            Path::new(&m.mount_point).is_absolute(),
            "root's device is mounted somewhere: {m:?}"
        );
    }
}

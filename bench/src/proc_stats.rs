//! Measuring a child process: `/proc/<pid>/io`, `/proc/diskstats`, rusage from `wait4`
//! (CPU seconds and max RSS of that child alone), and allocated bytes under a directory.

use crate::error::BenchError;
use std::fs::File;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `/proc/<pid>/io` counters (bytes the process made the storage layer read/write).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ProcIo {
    pub rchar: u64,
    pub wchar: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub cancelled_write_bytes: u64,
}

pub fn parse_proc_io(text: &str) -> Result<ProcIo, BenchError> {
    let mut io = ProcIo::default();
    let mut seen = 0;
    for l in text.lines() {
        let Some((k, v)) = l.split_once(':') else {
            continue;
        };
        let v: u64 = v
            .trim()
            .parse()
            .map_err(|_| BenchError::malformed("/proc/<pid>/io", format!("bad line '{l}'")))?;
        match k.trim() {
            "rchar" => io.rchar = v,
            "wchar" => io.wchar = v,
            "read_bytes" => io.read_bytes = v,
            "write_bytes" => io.write_bytes = v,
            "cancelled_write_bytes" => io.cancelled_write_bytes = v,
            _ => continue,
        }
        seen += 1;
    }
    if seen < 4 {
        return Err(BenchError::malformed("/proc/<pid>/io", "missing fields"));
    }
    Ok(io)
}

pub fn read_proc_io(pid: i32) -> Option<ProcIo> {
    let t = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    parse_proc_io(&t).ok()
}

/// One device's /proc/diskstats counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct DiskStats {
    pub reads_completed: u64,
    pub sectors_read: u64,
    pub writes_completed: u64,
    pub sectors_written: u64,
}

impl DiskStats {
    pub fn delta(&self, before: &DiskStats) -> DiskStats {
        DiskStats {
            reads_completed: self.reads_completed.saturating_sub(before.reads_completed),
            sectors_read: self.sectors_read.saturating_sub(before.sectors_read),
            writes_completed: self
                .writes_completed
                .saturating_sub(before.writes_completed),
            sectors_written: self.sectors_written.saturating_sub(before.sectors_written),
        }
    }
    pub fn bytes_read(&self) -> u64 {
        self.sectors_read * 512
    }
    pub fn bytes_written(&self) -> u64 {
        self.sectors_written * 512
    }
}

pub fn parse_diskstats(text: &str, device: &str) -> Result<Option<DiskStats>, BenchError> {
    for l in text.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 10 || f[2] != device {
            continue;
        }
        let n = |i: usize| -> Result<u64, BenchError> {
            f[i].parse()
                .map_err(|_| BenchError::malformed("/proc/diskstats", format!("bad line '{l}'")))
        };
        return Ok(Some(DiskStats {
            reads_completed: n(3)?,
            sectors_read: n(5)?,
            writes_completed: n(7)?,
            sectors_written: n(9)?,
        }));
    }
    Ok(None)
}

pub fn read_diskstats(device: &str) -> Option<DiskStats> {
    let t = std::fs::read_to_string("/proc/diskstats").ok()?;
    parse_diskstats(&t, device).ok().flatten()
}

/// Bytes allocated on disk (st_blocks × 512) by everything under `dir`, like `du -s`.
pub fn disk_usage(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        let Ok(md) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        total += md.blocks() * 512;
        if md.is_dir() {
            if let Ok(rd) = std::fs::read_dir(&p) {
                stack.extend(rd.flatten().map(|e| e.path()));
            }
        }
    }
    total
}

/// What one measured child run cost.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ChildMeasurement {
    pub exit_code: Option<i32>,
    pub wall_seconds: f64,
    pub user_seconds: f64,
    pub sys_seconds: f64,
    pub max_rss_bytes: u64,
    /// Last `/proc/<pid>/io` read (taken after exit, before reaping, when possible).
    pub io: Option<ProcIo>,
    pub io_read_at_exit: bool,
}

/// Run `argv` with stdout/stderr to files; poll `/proc/<pid>/io` while it runs, take a final
/// reading once it has exited (before it is reaped: `waitid(WNOWAIT)`), then reap it with
/// `wait4` for its own rusage. `tick` is called about every 200 ms with the elapsed time.
pub fn run_measured(
    argv: &[String],
    stdout: &Path,
    stderr: &Path,
    mut tick: impl FnMut(Duration),
) -> Result<ChildMeasurement, BenchError> {
    let (prog, rest) = argv.split_first().ok_or_else(|| BenchError::ToolFailed {
        tool: "child".into(),
        detail: "empty command".into(),
    })?;
    let out = File::create(stdout)
        .map_err(|e| BenchError::io(format!("create {}", stdout.display()), e))?;
    let err = File::create(stderr)
        .map_err(|e| BenchError::io(format!("create {}", stderr.display()), e))?;
    let start = Instant::now();
    let child = Command::new(prog)
        .args(rest)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| BenchError::io(format!("starting {prog}"), e))?;
    let pid = child.id() as i32;
    let mut m = ChildMeasurement::default();
    let mut last_tick = Instant::now();
    loop {
        // SAFETY: plain syscalls on our own child's pid with zeroed out-structs.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        if r != 0 {
            return Err(BenchError::io("waitid", std::io::Error::last_os_error()));
        }
        let exited = unsafe { info.si_pid() } == pid;
        if let Some(io) = read_proc_io(pid) {
            m.io = Some(io);
            m.io_read_at_exit = exited;
        }
        if exited {
            break;
        }
        if last_tick.elapsed() >= Duration::from_millis(200) {
            tick(start.elapsed());
            last_tick = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut status = 0;
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    if r != pid {
        return Err(BenchError::io("wait4", std::io::Error::last_os_error()));
    }
    drop(child); // already reaped; std's Child does not wait on drop
    m.wall_seconds = start.elapsed().as_secs_f64();
    m.user_seconds = ru.ru_utime.tv_sec as f64 + ru.ru_utime.tv_usec as f64 / 1e6;
    m.sys_seconds = ru.ru_stime.tv_sec as f64 + ru.ru_stime.tv_usec as f64 / 1e6;
    m.max_rss_bytes = ru.ru_maxrss as u64 * 1024;
    m.exit_code = if libc::WIFEXITED(status) {
        Some(libc::WEXITSTATUS(status))
    } else {
        None
    };
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_io_and_rejects_garbage() {
        let io = parse_proc_io(
            "rchar: 10\nwchar: 20\nsyscr: 1\nsyscw: 2\nread_bytes: 4096\nwrite_bytes: 8192\ncancelled_write_bytes: 0\n",
        )
        .unwrap();
        assert_eq!((io.read_bytes, io.write_bytes), (4096, 8192));
        assert!(parse_proc_io("rchar: x\n").is_err());
        assert!(parse_proc_io("").is_err());
    }

    #[test]
    fn parses_diskstats_row() {
        let t = " 254       0 vda 100 0 800 50 200 0 1600 70 0 0 0 0\n";
        let d = parse_diskstats(t, "vda").unwrap().unwrap();
        assert_eq!(d.bytes_read(), 800 * 512);
        assert_eq!(d.bytes_written(), 1600 * 512);
        assert!(parse_diskstats(t, "sdz").unwrap().is_none());
    }

    #[test]
    fn measures_a_child_that_writes_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("f");
        let cmd = vec![
            "sh".to_string(),
            "-c".to_string(),
            format!("head -c 2097152 /dev/zero > {} && sync", target.display()),
        ];
        let m = run_measured(&cmd, &dir.path().join("o"), &dir.path().join("e"), |_| {}).unwrap();
        assert_eq!(m.exit_code, Some(0));
        assert!(m.max_rss_bytes > 0);
        assert!(disk_usage(dir.path()) >= 2 * 1048576);
    }
}

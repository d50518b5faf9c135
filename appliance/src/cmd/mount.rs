//! `basalt mount` (foreground, or a background child that reports once mounted) and
//! `basalt umount` (asks the serving process to unmount and sync, then waits for it).

use crate::cli::{MountArgs, UmountArgs};
use crate::config::{self, Config};
use crate::logging::LogHandle;
use crate::service::{self, Mode, MountPlan, Plan};
use crate::{mountfs, mounts, store};
use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub fn run_mount(
    args: &MountArgs,
    verbose: u8,
    log: LogHandle,
    out: &mut dyn Write,
) -> Result<i32> {
    let mp = mounts::absolute(&args.mountpoint);
    if !mp.is_dir() && !mountfs::is_stale(&mp) {
        bail!(
            "mountpoint {} does not exist (create the directory first)",
            mp.display()
        );
    }
    if args.foreground || args.daemon_child {
        return foreground(args, log, out);
    }
    // Background: run ourselves in the foreground as a child in its own process group and
    // return once it reports the mount (or its error).
    let exe = std::env::current_exe().context("finding the basalt executable")?;
    let mut cmd = Command::new(exe);
    cmd.arg("mount")
        .arg("--daemon-child")
        .arg("--data")
        .arg(&args.data);
    cmd.arg("--threads").arg(args.threads.to_string());
    if !args.options.is_empty() {
        cmd.arg("-o").arg(args.options.join(","));
    }
    if let Some(c) = &args.config {
        cmd.arg("--config").arg(c);
    }
    for _ in 0..verbose {
        cmd.arg("-v");
    }
    cmd.arg(&mp)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn().context("starting the mount process")?;
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout).lines();
    if let Some(Ok(line)) = lines.next() {
        if line.starts_with("mounted ") {
            writeln!(
                out,
                "{line} (pid {}; basalt umount {} to stop)",
                child.id(),
                mp.display()
            )?;
            return Ok(0);
        }
    }
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    let status = child.wait()?;
    let msg = err
        .trim()
        .strip_prefix("basalt: error: ")
        .unwrap_or(err.trim())
        .to_string();
    bail!("the mount process exited ({status}): {msg}")
}

fn foreground(args: &MountArgs, log: LogHandle, out: &mut dyn Write) -> Result<i32> {
    let cfg = args.config.as_deref().map(Config::load).transpose()?;
    let engine = config::service_engine_options(cfg.as_ref());
    let allow_other = args.options.iter().any(|o| o == "allow_other");
    let plan = Plan {
        mode: Mode::Mount,
        data_dir: args.data.clone(),
        engine,
        mount: Some(MountPlan {
            path: args.mountpoint.clone(),
            create: false,
            threads: args.threads,
            allow_other,
            options: args.options.clone(),
            chunk_size: 0,
        }),
        http: None,
        health: None,
        smart_extra: Vec::new(),
        log,
        detach_output: args.daemon_child,
    };
    service::run(plan, out)?;
    Ok(0)
}

/// Whether `pid` runs (a zombie does not).
fn alive(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit_once(") ").and_then(|(_, r)| r.chars().next());
    // SAFETY: signal 0 only checks that the process exists.
    state.is_some_and(|s| s != 'Z' && s != 'X') && unsafe { libc::kill(pid, 0) == 0 }
}

fn is_basalt(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .is_ok_and(|c| c.trim().starts_with("basalt"))
}

pub fn run_umount(args: &UmountArgs, out: &mut dyn Write) -> Result<i32> {
    let mp = mounts::absolute(&args.mountpoint);
    let Some(entry) = mounts::mount_at(&mp) else {
        bail!("{} is not mounted", mp.display());
    };
    let Some(data) = entry.source.strip_prefix("basalt:") else {
        bail!(
            "{} is not a Basalt mount ({} from {})",
            mp.display(),
            entry.fstype,
            entry.source
        );
    };
    if mountfs::is_stale(&mp) {
        mountfs::force_unmount(&mp)?;
        writeln!(
            out,
            "cleaned the stale mount at {} (its process had died)",
            mp.display()
        )?;
        return Ok(0);
    }
    let holder =
        store::lock_holder(std::path::Path::new(data)).filter(|&p| alive(p) && is_basalt(p));
    let Some(pid) = holder else {
        mountfs::force_unmount(&mp)?;
        writeln!(out, "unmounted {} (no serving process found)", mp.display())?;
        return Ok(0);
    };
    // SAFETY: plain kill(2) of a process we identified as basalt.
    if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
        bail!(
            "cannot signal pid {pid} serving {}: {}",
            mp.display(),
            std::io::Error::last_os_error()
        );
    }
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    while alive(pid) && is_basalt(pid) {
        if Instant::now() > deadline {
            bail!(
                "pid {pid} serving {} did not exit within {} s",
                mp.display(),
                args.timeout
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if mounts::mount_at(&mp).is_some() {
        bail!("pid {pid} exited but {} is still mounted", mp.display());
    }
    writeln!(
        out,
        "unmounted {} (pid {pid} synced {data} and exited)",
        mp.display()
    )?;
    Ok(0)
}

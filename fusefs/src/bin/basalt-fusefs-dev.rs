//! Development mount for tests: `basalt-fusefs-dev mount --data DIR [--threads N]
//! [--chunk-size BYTES] [--durability sync|nosync|MS] [-o OPTS] MOUNTPOINT`.
//! Runs in the foreground until unmounted (fusermount3 -u, SIGTERM or SIGINT).

use std::path::PathBuf;
use std::process::ExitCode;

use basalt_engine::{Db, Durability, Options};
use basalt_fusefs::{mount, MountConfig};

fn usage() -> ExitCode {
    eprintln!(
        "usage: basalt-fusefs-dev mount --data DIR [--threads N] [--chunk-size BYTES] \
         [--durability sync|nosync|MS] [--no-allow-other] [-o OPTS] MOUNTPOINT"
    );
    ExitCode::from(2)
}

static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, std::sync::atomic::Ordering::SeqCst);
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() != Some("mount") {
        return usage();
    }
    let mut data = None;
    let mut cfg = MountConfig {
        allow_other: true,
        ..Default::default()
    };
    let mut durability = Durability::NoSync;
    let mut mountpoint = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--data" => data = args.next().map(PathBuf::from),
            "--threads" => cfg.threads = args.next().and_then(|v| v.parse().ok()).unwrap_or(0),
            "--chunk-size" => {
                cfg.chunk_size = args.next().and_then(|v| v.parse().ok()).unwrap_or(0)
            }
            "--durability" => {
                durability = match args.next().as_deref() {
                    Some("sync") => Durability::SyncEveryWrite,
                    Some("nosync") => Durability::NoSync,
                    Some(ms) => match ms.parse() {
                        Ok(ms) => Durability::SyncEveryMs(ms),
                        Err(_) => return usage(),
                    },
                    None => return usage(),
                }
            }
            "--no-allow-other" => cfg.allow_other = false,
            "-o" => cfg.options.extend(args.next()),
            _ if mountpoint.is_none() && !a.starts_with('-') => mountpoint = Some(PathBuf::from(a)),
            _ => return usage(),
        }
    }
    let (Some(data), Some(mp)) = (data, mountpoint) else {
        return usage();
    };
    cfg.mountpoint = mp;
    let opts = Options {
        durability,
        ..Options::default()
    };
    let db = match Db::open(&data, opts) {
        Ok(db) => db,
        Err(e) => {
            eprintln!("basalt-fusefs-dev: cannot open {}: {e}", data.display());
            return ExitCode::FAILURE;
        }
    };
    let handle = match mount(db, cfg) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("basalt-fusefs-dev: {e}");
            return ExitCode::FAILURE;
        }
    };
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
    }
    println!("mounted {}", handle.mountpoint().display());
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::sync::Arc::new(handle);
    let w2 = waiter.clone();
    std::thread::spawn(move || {
        w2.wait();
        let _ = tx.send(());
    });
    loop {
        if rx
            .recv_timeout(std::time::Duration::from_millis(100))
            .is_ok()
        {
            // Unmounted from outside: destroy() already flushed and synced.
            return ExitCode::SUCCESS;
        }
        if STOP.load(std::sync::atomic::Ordering::SeqCst) {
            break;
        }
    }
    match std::sync::Arc::try_unwrap(waiter) {
        Ok(h) => match h.unmount() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("basalt-fusefs-dev: {e}");
                ExitCode::FAILURE
            }
        },
        Err(_) => ExitCode::SUCCESS,
    }
}

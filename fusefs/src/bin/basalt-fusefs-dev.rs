//! Development mount for tests: `basalt-fusefs-dev mount --data DIR [--threads N]
//! [--chunk-size BYTES] [--durability sync|nosync|MS] [-o OPTS] MOUNTPOINT`.
//! Runs in the foreground until unmounted (fusermount3 -u, SIGTERM or SIGINT).
//!
//! `basalt-fusefs-dev nullfs [--threads N] [--no-allow-other] [-o OPTS] MOUNTPOINT`
//! mounts the null filesystem instead: an in-memory tree with no engine, served with
//! the same session, INIT flags and options as `mount`, to measure the FUSE ceiling
//! (run `files` against both). Prints its FUSE request counts at unmount. With
//! `-o io_uring[=same|other|none]` it is served over FUSE's io_uring transport.
//!
//! `basalt-fusefs-dev files --dir DIR [--count N] [--threads T] [--size BYTES]
//! [--daemon PID]` creates, stats and deletes N files of SIZE bytes with T threads and
//! prints the rate of each phase (`make bench-fusefs`), then the CPU time per file
//! of this process and, with `--daemon`, of the FUSE daemon PID (user + system, from
//! getrusage and /proc/PID/stat): on a busy machine rates vary, CPU per file less.
//!
//! `basalt-fusefs-dev churn --dir DIR --id N --ops M --seed S` runs a random mix of
//! creates, writes, truncates, renames, exchanges (`RENAME_EXCHANGE`) and unlinks of its own files spread over the
//! shared subdirectories `d0`..`d3` of DIR (which must exist), then prints its model
//! of the files it owns: `path<TAB>length<TAB>fnv1a` per line (concurrency tests).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use basalt_engine::{Db, Durability, Options};
use basalt_fusefs::{mount, mount_null, MountConfig};

fn usage() -> ExitCode {
    eprintln!(
        "usage: basalt-fusefs-dev mount --data DIR [--threads N] [--chunk-size BYTES] \
         [--durability sync|nosync|MS] [--read-poll MICROS] [--no-allow-other] [-o OPTS] \
         MOUNTPOINT\n\
         \x20      basalt-fusefs-dev nullfs [--threads N] [--no-allow-other] [-o OPTS] MOUNTPOINT\n\
         \x20      basalt-fusefs-dev files --dir DIR [--count N] [--threads T] [--size BYTES] \
         [--daemon PID]\n\
         \x20      basalt-fusefs-dev churn --dir DIR --id N --ops M --seed S"
    );
    ExitCode::from(2)
}

static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// The `basalt` binary's allocator (see `appliance/src/main.rs`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    if let Err(e) = basalt_fusefs::disable_transparent_huge_pages() {
        eprintln!("basalt-fusefs-dev: cannot turn transparent huge pages off: {e}");
    }
    let mut args = std::env::args().skip(1);
    let null = match args.next().as_deref() {
        Some("mount") => false,
        Some("nullfs") => true,
        Some("churn") => return churn(args),
        Some("files") => return files_bench(args),
        _ => return usage(),
    };
    let mut data = None;
    let mut cfg = MountConfig {
        allow_other: true,
        ..Default::default()
    };
    let mut durability = Durability::NoSync;
    let mut read_poll_micros = Options::default().read_poll_micros;
    let mut mountpoint = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--data" if !null => data = args.next().map(PathBuf::from),
            "--threads" => cfg.threads = args.next().and_then(|v| v.parse().ok()).unwrap_or(0),
            "--chunk-size" if !null => {
                cfg.chunk_size = args.next().and_then(|v| v.parse().ok()).unwrap_or(0)
            }
            "--durability" if !null => {
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
            "--read-poll" if !null => match args.next().and_then(|v| v.parse().ok()) {
                Some(us) => read_poll_micros = us,
                None => return usage(),
            },
            "--no-allow-other" => cfg.allow_other = false,
            "-o" => cfg.options.extend(args.next()),
            _ if mountpoint.is_none() && !a.starts_with('-') => mountpoint = Some(PathBuf::from(a)),
            _ => return usage(),
        }
    }
    let Some(mp) = mountpoint else {
        return usage();
    };
    cfg.mountpoint = mp;
    // Before mounting: the mount point answers before `mount` returns, and a SIGTERM
    // in between would kill the daemon with the mount left behind. Caught here, it
    // makes the loop below unmount as soon as the mount is up.
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
    }
    let mounted = if null {
        mount_null(cfg)
    } else {
        let Some(data) = data else {
            return usage();
        };
        let opts = Options {
            durability,
            read_poll_micros,
            ..Options::default()
        };
        match Db::open(&data, opts) {
            Ok(db) => mount(db, cfg),
            Err(e) => {
                eprintln!("basalt-fusefs-dev: cannot open {}: {e}", data.display());
                return ExitCode::FAILURE;
            }
        }
    };
    let handle = match mounted {
        Ok(h) => h,
        Err(e) => {
            eprintln!("basalt-fusefs-dev: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("mounted {}", handle.mountpoint().display());
    while !STOP.load(std::sync::atomic::Ordering::SeqCst) {
        if handle.is_unmounted() {
            // Unmounted from outside: the session already flushed and synced.
            return ExitCode::SUCCESS;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    match handle.unmount() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("basalt-fusefs-dev: {e}");
            ExitCode::FAILURE
        }
    }
}

/// xorshift64* pseudo-random numbers.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| (self.next() >> 32) as u8).collect()
    }
}

fn fnv1a(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in b {
        h ^= x as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn churn(mut args: impl Iterator<Item = String>) -> ExitCode {
    use std::collections::BTreeMap;
    use std::os::unix::fs::FileExt;
    let (mut dir, mut id, mut ops, mut seed) = (None, 0u64, 1000u64, 1u64);
    while let Some(a) = args.next() {
        let v = args.next();
        match (a.as_str(), v) {
            ("--dir", Some(v)) => dir = Some(PathBuf::from(v)),
            ("--id", Some(v)) => id = v.parse().unwrap_or(0),
            ("--ops", Some(v)) => ops = v.parse().unwrap_or(1000),
            ("--seed", Some(v)) => seed = v.parse().unwrap_or(1),
            _ => return usage(),
        }
    }
    let Some(dir) = dir else {
        return usage();
    };
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (id + 1));
    let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut counter = 0u64;
    let mut fresh = |rng: &mut Rng| {
        counter += 1;
        format!("d{}/w{id}_{counter}", rng.below(4))
    };
    let run = |model: &mut BTreeMap<String, Vec<u8>>,
               rng: &mut Rng,
               fresh: &mut dyn FnMut(&mut Rng) -> String|
     -> std::io::Result<()> {
        for _ in 0..ops {
            let own: Vec<String> = model.keys().cloned().collect();
            let pick = |rng: &mut Rng| own.get(rng.below(own.len() as u64) as usize).cloned();
            match rng.below(10) {
                0..=2 => {
                    let p = fresh(rng);
                    let len = rng.below(200_000) as usize;
                    let data = rng.bytes(len);
                    std::fs::write(dir.join(&p), &data)?;
                    model.insert(p, data);
                }
                3..=4 => {
                    if let Some(p) = pick(rng) {
                        let off = rng.below(300_000) as usize;
                        let n = rng.below(70_000) as usize;
                        let data = rng.bytes(n);
                        let f = std::fs::OpenOptions::new().write(true).open(dir.join(&p))?;
                        f.write_all_at(&data, off as u64)?;
                        let m = model.get_mut(&p).expect("own file");
                        if m.len() < off + data.len() {
                            m.resize(off + data.len(), 0);
                        }
                        m[off..off + data.len()].copy_from_slice(&data);
                    }
                }
                5 => {
                    if let Some(p) = pick(rng) {
                        let len = rng.below(300_000) as usize;
                        let f = std::fs::OpenOptions::new().write(true).open(dir.join(&p))?;
                        f.set_len(len as u64)?;
                        model.get_mut(&p).expect("own file").resize(len, 0);
                    }
                }
                6 => {
                    if let Some(p) = pick(rng) {
                        let q = fresh(rng);
                        std::fs::rename(dir.join(&p), dir.join(&q))?;
                        let d = model.remove(&p).expect("own file");
                        model.insert(q, d);
                    }
                }
                7 => {
                    if let (Some(p), Some(q)) = (pick(rng), pick(rng)) {
                        if p == q {
                            continue;
                        }
                        exchange(&dir.join(&p), &dir.join(&q))?;
                        let a = model.remove(&p).expect("own file");
                        let b = model.insert(q, a).expect("own file");
                        model.insert(p, b);
                    }
                }
                _ => {
                    if let Some(p) = pick(rng) {
                        std::fs::remove_file(dir.join(&p))?;
                        model.remove(&p);
                    }
                }
            }
        }
        Ok(())
    };
    if let Err(e) = run(&mut model, &mut rng, &mut fresh) {
        eprintln!("churn {id}: {e}");
        return ExitCode::FAILURE;
    }
    let lines = model
        .iter()
        .map(|(p, d)| format!("{p}\t{}\t{:016x}", d.len(), fnv1a(d)));
    if lines.into_iter().all(say) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Swaps two paths at once (`renameat2` with `RENAME_EXCHANGE`).
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c =
        |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(std::io::Error::other);
    let (a, b) = (c(a)?, c(b)?);
    // SAFETY: two valid C strings; AT_FDCWD.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Writes `line` to stdout; false (with a note on stderr) when stdout is closed or
/// failing, e.g. a reader such as `head` went away.
fn say(line: String) -> bool {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{line}").and_then(|()| out.flush()) {
        Ok(()) => true,
        Err(e) => {
            eprintln!("basalt-fusefs-dev: stdout: {e}");
            false
        }
    }
}

fn files_bench(mut args: impl Iterator<Item = String>) -> ExitCode {
    let (mut dir, mut count, mut threads, mut size) = (None, 100_000usize, 8usize, 4096usize);
    let mut daemon: Option<u32> = None;
    while let Some(a) = args.next() {
        let v = args.next().unwrap_or_default();
        match (a.as_str(), v.parse::<usize>().ok()) {
            ("--dir", _) if !v.is_empty() => dir = Some(PathBuf::from(v)),
            ("--count", Some(n)) if n > 0 => count = n,
            ("--threads", Some(n)) if n > 0 => threads = n,
            ("--size", Some(n)) => size = n,
            ("--daemon", Some(n)) => daemon = u32::try_from(n).ok(),
            _ => return usage(),
        }
    }
    let Some(dir) = dir else {
        return usage();
    };
    let data = vec![0x5au8; size];
    let per = count.div_ceil(threads);
    for t in 0..threads {
        if let Err(e) = std::fs::create_dir_all(dir.join(format!("t{t}"))) {
            eprintln!("files: {e}");
            return ExitCode::FAILURE;
        }
    }
    let phase = |name: &str, op: &(dyn Fn(&std::path::Path) -> std::io::Result<()> + Sync)| {
        let start = std::time::Instant::now();
        let cpu0 = (self_cpu_us(), daemon.and_then(proc_cpu_us));
        let failed = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            for t in 0..threads {
                let (dir, failed) = (&dir, &failed);
                s.spawn(move || {
                    for i in 0..per {
                        if let Err(e) = op(&dir.join(format!("t{t}/f{i}"))) {
                            eprintln!("files {name}: {e}");
                            failed.store(true, std::sync::atomic::Ordering::SeqCst);
                            return;
                        }
                    }
                });
            }
        });
        let secs = start.elapsed().as_secs_f64();
        let n = (per * threads) as f64;
        let mut cpu = format!("\tclient_cpu_us/file {:.1}", (self_cpu_us() - cpu0.0) / n);
        if let (Some(a), Some(b)) = (cpu0.1, daemon.and_then(proc_cpu_us)) {
            cpu += &format!("\tdaemon_cpu_us/file {:.1}", (b - a) / n);
        }
        say(format!("{name}\t{:.0}\tfiles/s{cpu}", n / secs))
            && !failed.load(std::sync::atomic::Ordering::SeqCst)
    };
    let ok = phase("create", &|p| std::fs::write(p, &data))
        && phase("stat", &|p| std::fs::metadata(p).map(|_| ()))
        && phase("delete", &|p| std::fs::remove_file(p));
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// User + system CPU time of this process, µs.
fn self_cpu_us() -> f64 {
    // SAFETY: `ru` is a valid out pointer.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    us(ru.ru_utime) + us(ru.ru_stime)
}

/// User + system CPU time of process `pid` (all threads), µs, in clock ticks.
fn proc_cpu_us(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command (which may hold spaces) start at field 3 (state).
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(ticks * 1e6 / hz)
}

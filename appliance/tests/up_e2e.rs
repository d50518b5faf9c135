//! `basalt up` end to end: start it in the background on temporary directories, use the
//! files through the mount, fetch the dashboard, /metrics and /api/stats, follow the change
//! feed, refuse a second `up` on the same data, stop it with SIGTERM (clean unmount), find
//! the data after the next `up`, and clean the stale mount a `kill -9` leaves behind.
//! Also `basalt mount` / `basalt umount` and the HTTP token rule. Needs root and /dev/fuse.

mod common;
use common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

fn fuse_available() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("SKIP: needs root to mount FUSE filesystems (CI runs as root)");
        return false;
    }
    if !Path::new("/dev/fuse").exists() {
        eprintln!("SKIP: /dev/fuse is absent (no FUSE in this kernel/container)");
        return false;
    }
    true
}

fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// A running `basalt up`/`serve` with its stdout; stopped with SIGTERM if a test fails.
struct Service {
    child: Option<Child>,
    out: BufReader<ChildStdout>,
    banner: String,
}

impl Service {
    // The child is waited for by `stop`, by `Drop`, or right before the panic below.
    #[allow(clippy::zombie_processes)]
    fn start(args: &[&str], ready_marker: &str) -> Service {
        let mut child = Command::new(BASALT)
            .args(args)
            .env_remove("BASALT_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut banner = String::new();
        loop {
            let mut line = String::new();
            if out.read_line(&mut line).unwrap() == 0 {
                let mut err = String::new();
                child
                    .stderr
                    .take()
                    .unwrap()
                    .read_to_string(&mut err)
                    .unwrap();
                let status = child.wait();
                panic!("basalt {args:?} exited before it was ready: {status:?}\nstdout:\n{banner}\nstderr:\n{err}");
            }
            banner.push_str(&line);
            if line.contains(ready_marker) {
                return Service {
                    child: Some(child),
                    out,
                    banner,
                };
            }
        }
    }

    fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    /// Sends `sig`, waits for the exit; returns (exit code, rest of stdout, stderr).
    fn stop(mut self, sig: i32) -> (Option<i32>, String, String) {
        let mut child = self.child.take().unwrap();
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, sig) };
        let status = child.wait().unwrap();
        let mut rest = String::new();
        self.out.read_to_string(&mut rest).unwrap();
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        (status.code(), rest, err)
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: signalling our own child (a failed test must not leave a mount).
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let _ = c.wait();
        }
    }
}

fn mounted(p: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let p = p.display().to_string();
    info.lines()
        .any(|l| l.split(' ').nth(4) == Some(p.as_str()))
}

/// GET `path` with an optional bearer token; returns (status, body).
fn get(addr: &str, path: &str, token: Option<&str>) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).unwrap();
    let text = String::from_utf8_lossy(&resp).into_owned();
    let status = text[9..12].parse().unwrap();
    let body = text.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
    (status, body.to_string())
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 251) as u8).collect()
}

/// Creates 300 small files in `dir` on a mount and checks, from the mount's
/// `/.basalt/stats.json`, that the engine synced periodically (at most once per 100 ms
/// of the run, plus slack) and not once per commit, as the engine library's default
/// `every-write` would: the service commands' durability without a config file.
fn assert_engine_syncs_periodically(mnt: &Path, dir: &str) {
    let syncs = || {
        let s = std::fs::read_to_string(mnt.join(".basalt/stats.json")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&s).unwrap();
        v["engine"]["syncs"].as_u64().unwrap()
    };
    let files = 300u64;
    std::fs::create_dir_all(mnt.join(dir)).unwrap();
    let before = syncs();
    let t = Instant::now();
    for i in 0..files {
        std::fs::write(mnt.join(format!("{dir}/f{i}")), pattern(4096)).unwrap();
    }
    let (synced, ms) = (syncs() - before, t.elapsed().as_millis() as u64);
    eprintln!("{files} files created in {ms} ms with {synced} engine syncs");
    assert!(
        synced <= ms / 100 + 5 && synced < files,
        "{synced} engine syncs for {files} files in {ms} ms: every commit was synced"
    );
}

fn up_args<'a>(data: &'a str, mnt: &'a str, addr: &'a str) -> Vec<&'a str> {
    vec!["up", "--data", data, "--mountpoint", mnt, "--listen", addr]
}

#[test]
fn up_serves_files_and_http_stops_cleanly_and_keeps_the_data() {
    if !fuse_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("basalt-data");
    let mnt: PathBuf = tmp.path().join("mnt");
    let (ds, ms) = (data.display().to_string(), mnt.display().to_string());
    let addr = free_addr();

    let up = Service::start(&up_args(&ds, &ms, &addr), "Press Ctrl-C");
    assert!(up.banner.contains("(created)"), "{}", up.banner);
    assert!(
        up.banner.contains(&format!("http://{addr}/metrics")),
        "{}",
        up.banner
    );
    assert!(mounted(&mnt), "mounted at {}", mnt.display());

    // Files through the mount: a small document and a chunked large file.
    std::fs::create_dir(mnt.join("docs")).unwrap();
    std::fs::write(mnt.join("docs/a.json"), b"{\"hello\":\"world\"}").unwrap();
    let big = pattern(3 << 20);
    std::fs::write(mnt.join("docs/big.bin"), &big).unwrap();
    assert_eq!(
        std::fs::read(mnt.join("docs/a.json")).unwrap(),
        b"{\"hello\":\"world\"}"
    );
    assert_eq!(std::fs::read(mnt.join("docs/big.bin")).unwrap(), big);
    assert_engine_syncs_periodically(&mnt, "docs/many");

    // HTTP: dashboard, metrics, engine stats.
    let (code, body) = get(&addr, "/", None);
    assert_eq!(code, 200);
    assert!(body.to_lowercase().contains("<html"), "{body}");
    let (code, body) = get(&addr, "/metrics", None);
    assert_eq!(code, 200);
    assert!(body.contains("basalt_engine_last_seqno"), "{body}");
    wait_for("the engine to see the writes", || {
        let (_, body) = get(&addr, "/api/stats", None);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        // The test's collection plus `.monitoring`, where health history is kept.
        v["collections"].as_u64() == Some(2) && v["user_bytes_written"].as_u64().unwrap() > 3 << 20
    });

    // The change feed of the running service, followed.
    let mut follow = Command::new(BASALT)
        .args([
            "changes",
            "-c",
            "docs",
            "--follow",
            "--poll-ms",
            "50",
            "--url",
            &format!("http://{addr}"),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut feed = BufReader::new(follow.stdout.take().unwrap());
    std::fs::write(mnt.join("docs/later.txt"), b"written while following").unwrap();
    let mut seen = Vec::new();
    let mut line = String::new();
    while !seen.iter().any(|k: &String| k == "later.txt") {
        line.clear();
        assert!(feed.read_line(&mut line).unwrap() > 0, "feed ended");
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        if let Some(k) = v["key"].as_str() {
            seen.push(k.to_string());
        }
    }
    assert!(seen.iter().any(|k| k == "a.json"), "{seen:?}");
    follow.kill().unwrap();
    follow.wait().unwrap();

    // A second `up` on the same data is refused, naming the holder.
    let o = basalt(&up_args(
        &ds,
        &tmp.path().join("mnt2").display().to_string(),
        &free_addr(),
    ));
    expect_code(&o, 1);
    assert!(
        stderr(&o).contains(&format!("in use by pid {}", up.pid())),
        "{}",
        stderr(&o)
    );
    assert!(!mounted(&tmp.path().join("mnt2")));

    // SIGTERM: clean unmount and sync.
    let (code, rest, err) = up.stop(libc::SIGTERM);
    assert_eq!(code, Some(0), "stdout {rest}\nstderr {err}");
    assert!(
        rest.contains("stopped (SIGTERM)") && rest.contains("data synced"),
        "{rest}"
    );
    assert!(!mounted(&mnt), "unmounted after SIGTERM");
    expect_code(&basalt(&["check", "--data", &ds]), 0);

    // The next `up` finds everything; then a kill -9 leaves a stale mount that the
    // following `up` cleans.
    let up = Service::start(&up_args(&ds, &ms, &addr), "Press Ctrl-C");
    assert!(up.banner.contains("(opened)"), "{}", up.banner);
    assert_eq!(std::fs::read(mnt.join("docs/big.bin")).unwrap(), big);
    assert_eq!(
        std::fs::read(mnt.join("docs/later.txt")).unwrap(),
        b"written while following"
    );
    // With the default durability (periodic) an fsync is still durable on return.
    let mut f = std::fs::File::create(mnt.join("docs/fsynced.txt")).unwrap();
    f.write_all(b"synced before the kill").unwrap();
    f.sync_all().unwrap();
    let (code, _, _) = up.stop(libc::SIGKILL);
    assert_eq!(code, None, "killed");
    assert!(mounted(&mnt), "a killed daemon leaves its mount behind");
    let up = Service::start(&up_args(&ds, &ms, &addr), "Press Ctrl-C");
    assert!(std::fs::read(mnt.join("docs/a.json")).is_ok());
    assert_eq!(
        std::fs::read(mnt.join("docs/fsynced.txt")).unwrap(),
        b"synced before the kill"
    );
    let (code, _, err) = up.stop(libc::SIGINT);
    assert_eq!(code, Some(0));
    assert!(err.contains("cleaned a stale mount"), "{err}");
    assert!(!mounted(&mnt));
}

#[test]
fn up_stopped_the_moment_it_says_ready_still_unmounts_and_exits_cleanly() {
    if !fuse_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("d").display().to_string();
    let mnt = tmp.path().join("m");
    let ms = mnt.display().to_string();
    // The banner promises that Ctrl-C unmounts and syncs: a signal sent the instant it
    // appears must be caught, never meet the default action (death, a stale mount).
    for (round, sig) in [libc::SIGINT, libc::SIGTERM, libc::SIGINT, libc::SIGTERM]
        .into_iter()
        .enumerate()
    {
        let up = Service::start(&up_args(&data, &ms, &free_addr()), "Press Ctrl-C");
        let (code, rest, err) = up.stop(sig);
        assert_eq!(
            code,
            Some(0),
            "round {round}, signal {sig}\nstdout {rest}\nstderr {err}"
        );
        assert!(rest.contains("data synced"), "round {round}: {rest}");
        assert!(!mounted(&mnt), "round {round}: unmounted");
    }
}

#[test]
fn mount_in_background_and_umount_sync_and_refuse_bad_input() {
    if !fuse_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data").display().to_string();
    let mnt = tmp.path().join("m");
    let ms = mnt.display().to_string();

    // A missing mountpoint, a bad option, an unmounted umount.
    let o = basalt(&["mount", "--data", &data, &ms]);
    expect_code(&o, 1);
    assert!(stderr(&o).contains("does not exist"), "{}", stderr(&o));
    std::fs::create_dir(&mnt).unwrap();
    let o = basalt(&["mount", "--data", &data, &ms, "-o", "frobnicate"]);
    expect_code(&o, 1);
    assert!(stderr(&o).contains("frobnicate"), "{}", stderr(&o));
    assert!(!mounted(&mnt));
    let o = basalt(&["umount", &ms]);
    expect_code(&o, 1);
    assert!(stderr(&o).contains("is not mounted"), "{}", stderr(&o));
    let o = basalt(&["umount", "/"]);
    expect_code(&o, 1);
    assert!(stderr(&o).contains("not a Basalt mount"), "{}", stderr(&o));

    // Background mount returns once mounted; umount makes the process sync and exit.
    let o = basalt(&["mount", "--data", &data, &ms, "-o", "noatime"]);
    expect_code(&o, 0);
    assert!(stdout(&o).starts_with("mounted "), "{}", stdout(&o));
    assert!(mounted(&mnt));
    // The daemon runs without transparent huge pages (PR_SET_THP_DISABLE).
    let out = stdout(&o);
    let pid = out
        .split("(pid ")
        .nth(1)
        .and_then(|s| s.split(';').next())
        .unwrap_or_else(|| panic!("no pid in {out:?}"));
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let thp = status.lines().find(|l| l.starts_with("THP_enabled:"));
    assert!(
        thp.is_none_or(|l| l.split_whitespace().nth(1) == Some("0")),
        "daemon {pid}: {thp:?}"
    );
    std::fs::create_dir(mnt.join("c")).unwrap();
    std::fs::write(mnt.join("c/k"), b"v").unwrap();
    assert_engine_syncs_periodically(&mnt, "c/many");
    let o = basalt(&["umount", &ms]);
    expect_code(&o, 0);
    assert!(stdout(&o).contains("synced"), "{}", stdout(&o));
    assert!(!mounted(&mnt));
    let db = basalt_engine::Db::open(tmp.path().join("data"), small_options()).unwrap();
    assert_eq!(db.get("c", b"k").unwrap().as_deref(), Some(&b"v"[..]));
}

#[test]
fn serve_reads_its_config_guards_http_with_a_token_and_reloads() {
    if !fuse_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let addr = free_addr();
    let cfg = tmp.path().join("basalt.toml");
    let write_cfg = |token: &str, extra: &str| {
        std::fs::write(
            &cfg,
            format!(
                "data_dir = \"{}\"\n[mount]\npath = \"{}\"\n[http]\nlisten = \"{addr}\"\n{token}\n[health]\ninterval_secs = 1\n{extra}",
                tmp.path().join("data").display(),
                tmp.path().join("mnt").display()
            ),
        )
        .unwrap();
    };
    // Malformed config: the line is named.
    write_cfg("", "colour = \"blue\"\n");
    let o = basalt(&["serve", "--config", &cfg.display().to_string()]);
    expect_code(&o, 1);
    assert!(stderr(&o).contains("basalt.toml:9:"), "{}", stderr(&o));
    assert!(stderr(&o).contains("colour"), "{}", stderr(&o));

    // A token makes every path but /metrics require it.
    write_cfg("token = \"t0ken\"", "");
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../monitoring/testdata/nvme-cli"
    );
    let mut args = vec![
        "serve".to_string(),
        "-v".into(),
        "--config".into(),
        cfg.display().to_string(),
    ];
    for f in std::fs::read_dir(fixture).unwrap().flatten() {
        if f.path().extension().is_some_and(|x| x == "json") {
            args.push("--smart-from-json".into());
            args.push(f.path().display().to_string());
        }
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let svc = Service::start(&args, "basalt serve: serving");
    wait_for("http", || TcpStream::connect(&addr).is_ok());
    assert_eq!(get(&addr, "/api/stats", None).0, 401);
    assert_eq!(get(&addr, "/api/stats", Some("wrong")).0, 401);
    assert_eq!(get(&addr, "/api/stats", Some("t0ken")).0, 200);
    assert_eq!(get(&addr, "/metrics", None).0, 200);
    wait_for("a health sample of the replayed devices", || {
        let (_, body) = get(&addr, "/api/health", Some("t0ken"));
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["devices"]
            .as_array()
            .is_some_and(|d| !d.is_empty())
    });
    assert!(mounted(&tmp.path().join("mnt")));

    // SIGHUP with a new token applies it; a broken file changes nothing.
    write_cfg("token = \"n3w\"", "");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(svc.pid(), libc::SIGHUP) };
    wait_for("the new token", || {
        get(&addr, "/api/stats", Some("n3w")).0 == 200
    });
    assert_eq!(get(&addr, "/api/stats", Some("t0ken")).0, 401);
    write_cfg("token = \"n3w\"", "[engine]\ntarget_fill_pct = 300\n");
    // SAFETY: as above.
    unsafe { libc::kill(svc.pid(), libc::SIGHUP) };
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(get(&addr, "/api/stats", Some("n3w")).0, 200);
    let (code, _, err) = svc.stop(libc::SIGTERM);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("reload of") && err.contains("failed"), "{err}");
    assert!(!mounted(&tmp.path().join("mnt")));
}

#[test]
fn http_on_a_public_address_without_a_token_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("basalt.toml");
    std::fs::write(
        &cfg,
        format!(
            "data_dir = \"{}\"\n[mount]\nenabled = false\n[http]\nlisten = \"0.0.0.0:0\"\n",
            tmp.path().join("data").display()
        ),
    )
    .unwrap();
    let o = basalt(&["serve", "--config", &cfg.display().to_string()]);
    expect_code(&o, 1);
    assert!(stderr(&o).contains("without a token"), "{}", stderr(&o));
    let o = basalt(&[
        "serve",
        "--config",
        &tmp.path().join("missing.toml").display().to_string(),
    ]);
    expect_code(&o, 1);
    assert!(stderr(&o).contains("cannot read config"), "{}", stderr(&o));
    let o = basalt(&["up", "--listen", "not-an-address"]);
    expect_code(&o, 2);
}

/// Mounts the engine in `data` at `mnt` and unmounts it cleanly (which writes the
/// filesystem's tree snapshot).
fn mount_and_stop(data: &Path, mnt: &Path) {
    std::fs::create_dir_all(mnt).unwrap();
    let db = basalt_engine::Db::open(data, small_options()).unwrap();
    let cfg = basalt_fusefs::MountConfig {
        mountpoint: mnt.to_path_buf(),
        threads: 2,
        allow_other: true,
        ..Default::default()
    };
    basalt_fusefs::mount(db, cfg).unwrap().unmount().unwrap();
}

/// A document written through the engine of a stopped appliance.
fn put(data: &Path, key: &[u8]) {
    let db = basalt_engine::Db::open(data, small_options()).unwrap();
    db.put("c", key, b"v").unwrap();
    db.flush().unwrap();
}

/// `basalt check` reports the tree snapshot a clean stop of the mount left: current
/// and matching the engine (exit 0); stale after an engine write or damaged (no
/// problem: the next mount reads the engine); and one that a mount would use but that
/// describes another engine (the snapshot of a copy that took another write) as a
/// problem (exit 1).
#[test]
fn check_reports_the_tree_snapshot_of_a_clean_stop() {
    if !fuse_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (a, b, mnt) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("mnt"),
    );
    let db = basalt_engine::Db::open(&a, small_options()).unwrap();
    db.create_collection("c")
        .unwrap()
        .put(b"first", b"1")
        .unwrap();
    drop(db);
    mount_and_stop(&a, &mnt);
    let check = |d: &Path, code: i32| {
        let o = basalt(&["check", "--data", &d.display().to_string()]);
        expect_code(&o, code);
        stdout(&o)
    };
    let out = check(&a, 0);
    assert!(
        out.contains("tree snapshot (fusefs-tree.aux): current at seqno"),
        "{out}"
    );
    // A copy of the stopped store, then one different engine write in each.
    std::fs::create_dir(&b).unwrap();
    for e in std::fs::read_dir(&a).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), b.join(e.file_name())).unwrap();
    }
    put(&a, b"x");
    put(&b, b"y");
    let out = check(&a, 0);
    assert!(
        out.contains("not used by the next mount") && out.contains("changed since"),
        "{out}"
    );
    mount_and_stop(&a, &mnt);
    mount_and_stop(&b, &mnt);
    let aux = |d: &Path| d.join("fusefs-tree.aux");
    let mut wrong = std::fs::read(aux(&a)).unwrap();
    std::fs::write(aux(&b), &wrong).unwrap();
    let out = check(&b, 1);
    assert!(
        out.contains("PROBLEM: tree snapshot differs from the engine"),
        "{out}"
    );
    let last = wrong.len() - 1;
    wrong[last] ^= 1;
    std::fs::write(aux(&a), &wrong).unwrap();
    let out = check(&a, 0);
    assert!(out.contains("checksum mismatch"), "{out}");
}

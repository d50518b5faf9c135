//! Every offline subcommand of the built `basalt` binary: one success and at least one bad
//! input each (missing directory, bad flag, corrupt data, malformed file).

mod common;
use common::*;
use std::path::Path;

fn dir_arg(d: &Path) -> String {
    d.display().to_string()
}

#[test]
fn help_names_every_subcommand_and_bad_usage_exits_2() {
    let o = basalt(&["--help"]);
    expect_code(&o, 0);
    let help = stdout(&o);
    for sub in [
        "up",
        "mount",
        "umount",
        "serve",
        "bench",
        "health",
        "stats",
        "check",
        "gc",
        "collections",
        "changes",
        "dump",
        "load",
        "completions",
    ] {
        assert!(
            help.lines()
                .any(|l| l.trim_start().starts_with(&format!("{sub} "))),
            "--help lists {sub}:\n{help}"
        );
    }
    let o = basalt(&["frobnicate"]);
    expect_code(&o, 2);
    assert!(stderr(&o).contains("unrecognized subcommand"));
    let o = basalt(&["stats", "--data", "/x", "--bogus"]);
    expect_code(&o, 2);
    assert!(stderr(&o).contains("--bogus"));
    let o = basalt(&["--version"]);
    expect_code(&o, 0);
    assert!(stdout(&o).contains(env!("CARGO_PKG_VERSION")));
}

#[test]
fn stats_prints_text_and_json_and_refuses_a_missing_directory() {
    let d = tempfile::tempdir().unwrap();
    populate(d.path());
    let o = basalt(&["stats", "--data", &dir_arg(d.path())]);
    expect_code(&o, 0);
    let text = stdout(&o);
    assert!(text.contains("collections      2 (bin, users)"), "{text}");
    assert!(text.contains("space-amp"), "{text}");
    assert!(
        text.contains("offline settings compression lz4 for new writes"),
        "{text}"
    );
    let o = basalt(&["stats", "--data", &dir_arg(d.path()), "--json"]);
    expect_code(&o, 0);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["collections"], 2);
    assert!(v["live_bytes"].as_u64().unwrap() > 0);
    assert!(v["last_seqno"].as_u64().unwrap() >= 3 * 200 + 20 + 50);

    let missing = d.path().join("nope");
    let o = basalt(&["stats", "--data", &dir_arg(&missing)]);
    expect_code(&o, 1);
    assert!(stderr(&o).contains("does not exist"), "{}", stderr(&o));
    assert!(!missing.exists(), "stats never creates a data directory");
}

#[test]
fn a_directory_in_use_is_refused_naming_the_holder() {
    let d = tempfile::tempdir().unwrap();
    populate(d.path());
    let db = basalt_engine::Db::open(d.path(), small_options()).unwrap();
    let me = format!("pid {}", std::process::id());
    for args in [
        vec!["stats", "--data"],
        vec!["check", "--data"],
        vec!["gc", "--data"],
    ] {
        let mut a = args.clone();
        let p = dir_arg(d.path());
        a.push(&p);
        let o = basalt(&a);
        expect_code(&o, 1);
        assert!(
            stderr(&o).contains(&me),
            "{a:?} names the holder: {}",
            stderr(&o)
        );
        assert!(stderr(&o).contains("in use"), "{}", stderr(&o));
    }
    drop(db);
}

#[test]
fn check_passes_a_good_store_and_fails_a_corrupt_one() {
    let d = tempfile::tempdir().unwrap();
    populate(d.path());
    let o = basalt(&["check", "--data", &dir_arg(d.path())]);
    expect_code(&o, 0);
    assert!(
        stdout(&o).contains("OK: no problems found"),
        "{}",
        stdout(&o)
    );
    let o = basalt(&["check", "--data", &dir_arg(d.path()), "--json"]);
    expect_code(&o, 0);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(v["documents"].as_u64().unwrap() > 0);
    assert_eq!(v["problems"].as_array().unwrap().len(), 0);

    // Damage the middle of the first log segment.
    let mut logs: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    let seg = &logs[0];
    let mut bytes = std::fs::read(seg).unwrap();
    let mid = bytes.len() / 3;
    for b in &mut bytes[mid..mid + 64] {
        *b ^= 0x5a;
    }
    std::fs::write(seg, &bytes).unwrap();
    let o = basalt(&["check", "--data", &dir_arg(d.path())]);
    expect_code(&o, 1);
    let text = stdout(&o);
    assert!(text.contains("PROBLEM:"), "{text}");
    assert!(text.contains("FAILED"), "{text}");

    let o = basalt(&["check", "--data", &dir_arg(&d.path().join("missing"))]);
    expect_code(&o, 1);
    assert!(stderr(&o).contains("does not exist"));
}

#[test]
fn gc_collects_overwritten_segments_and_rejects_a_bad_target() {
    let d = tempfile::tempdir().unwrap();
    populate(d.path());
    let before = basalt_engine::Db::open(d.path(), small_options())
        .unwrap()
        .stats()
        .disk_bytes;
    let o = basalt(&["gc", "--data", &dir_arg(d.path()), "--target-fill", "90"]);
    expect_code(&o, 0);
    let text = stdout(&o);
    assert!(
        text.starts_with("gc at target fill 90%: collected "),
        "{text}"
    );
    let collected: usize = text["gc at target fill 90%: collected ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        collected > 0,
        "three versions of every key leave garbage: {text}"
    );
    let db = basalt_engine::Db::open(d.path(), small_options()).unwrap();
    assert!(db.stats().disk_bytes < before, "gc reclaimed space");
    assert!(db
        .get("users", b"user0100")
        .unwrap()
        .unwrap()
        .starts_with(b"{\"user\":100,\"round\":2"));
    drop(db);

    let o = basalt(&["gc", "--data", &dir_arg(d.path()), "--target-fill", "5"]);
    expect_code(&o, 2);
    assert!(stderr(&o).contains("--target-fill"), "{}", stderr(&o));
    let o = basalt(&["gc", "--data", &dir_arg(&d.path().join("missing"))]);
    expect_code(&o, 1);
}

#[test]
fn collections_create_list_rename_drop_and_refuse_unknown_names() {
    let d = tempfile::tempdir().unwrap();
    populate(d.path());
    let p = dir_arg(d.path());
    expect_code(
        &basalt(&["collections", "--data", &p, "create", "orders"]),
        0,
    );
    expect_code(
        &basalt(&["collections", "--data", &p, "rename", "bin", "blobs"]),
        0,
    );
    expect_code(&basalt(&["collections", "--data", &p, "drop", "users"]), 0);
    let o = basalt(&["collections", "--data", &p]);
    expect_code(&o, 0);
    assert_eq!(stdout(&o), "blobs\norders\n");
    let o = basalt(&["collections", "--data", &p, "list"]);
    assert_eq!(stdout(&o), "blobs\norders\n");
    let db = basalt_engine::Db::open(d.path(), small_options()).unwrap();
    db.put("orders", b"k", b"was orders").unwrap();
    db.close().unwrap();
    let o = basalt(&["collections", "--data", &p, "exchange", "orders", "blobs"]);
    expect_code(&o, 0);
    assert!(stdout(&o).contains("exchanged"), "{}", stdout(&o));
    let db = basalt_engine::Db::open(d.path(), small_options()).unwrap();
    assert_eq!(db.get("blobs", b"k").unwrap().unwrap(), b"was orders");
    assert_eq!(db.get("orders", b"k").unwrap(), None);
    db.close().unwrap();
    expect_code(
        &basalt(&["collections", "--data", &p, "exchange", "orders", "nope"]),
        1,
    );

    let o = basalt(&["collections", "--data", &p, "drop", "users"]);
    expect_code(&o, 1);
    assert!(
        stderr(&o).contains("unknown collection \"users\""),
        "{}",
        stderr(&o)
    );
    let o = basalt(&["collections", "--data", &p, "create", "orders"]);
    expect_code(&o, 1);
    assert!(stderr(&o).contains("already exists"));
    let o = basalt(&["collections", "--data", &p, "explode"]);
    expect_code(&o, 2);
}

#[test]
fn changes_prints_the_feed_as_json_lines() {
    let d = tempfile::tempdir().unwrap();
    populate(d.path());
    let p = dir_arg(d.path());
    let o = basalt(&["changes", "--data", &p, "--collection", "bin"]);
    expect_code(&o, 0);
    let lines: Vec<serde_json::Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 50);
    assert_eq!(lines[0]["op"], "put");
    assert_eq!(lines[0]["collection"], "bin");
    assert!(lines[0]["key_b64"].is_string(), "binary keys are base64");
    let seqnos: Vec<u64> = lines.iter().map(|l| l["seqno"].as_u64().unwrap()).collect();
    assert!(seqnos.windows(2).all(|w| w[0] < w[1]), "in seqno order");

    // After a seqno: only later changes; deletes appear as such (tombstones not yet merged
    // away: the engine may purge older deletes from the feed, see Stats::purge_seqno).
    let db = basalt_engine::Db::open(d.path(), small_options()).unwrap();
    let last = db.stats().last_seqno;
    db.put("users", b"late", b"{}").unwrap();
    for i in 0..3u8 {
        db.delete("bin", &[0xff, i, 0]).unwrap();
    }
    db.delete("users", b"user0100").unwrap();
    db.close().unwrap();
    let since = last.to_string();
    let o = basalt(&["changes", "--data", &p, "-c", "users", "--since", &since]);
    expect_code(&o, 0);
    let v: Vec<serde_json::Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(v.len(), 2, "{v:?}");
    assert!(v.iter().all(|c| c["seqno"].as_u64().unwrap() > last));
    assert_eq!(
        (
            v[0]["op"].as_str(),
            v[0]["key"].as_str(),
            v[0]["value"].as_str()
        ),
        (Some("put"), Some("late"), Some("{}"))
    );
    assert_eq!(
        (v[1]["op"].as_str(), v[1]["key"].as_str()),
        (Some("delete"), Some("user0100"))
    );
    assert!(v[1].get("value").is_none());
    let o = basalt(&["changes", "--data", &p, "-c", "bin", "--since", &since]);
    let deletes: Vec<serde_json::Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(deletes.len(), 3);
    assert!(deletes
        .iter()
        .all(|c| c["op"] == "delete" && c["key_b64"].is_string()));

    let o = basalt(&["changes", "--data", &p, "-c", "nope"]);
    expect_code(&o, 1);
    assert!(stderr(&o).contains("unknown collection"));
    let o = basalt(&["changes", "--data", &p, "-c", "users", "--follow"]);
    expect_code(&o, 1);
    assert!(stderr(&o).contains("nothing is serving"), "{}", stderr(&o));
    let o = basalt(&["changes", "-c", "users", "--url", "http://127.0.0.1:9"]);
    expect_code(&o, 1);
    assert!(
        stderr(&o).contains("cannot reach the running service"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn dump_and_load_round_trip_every_collection() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    populate(&src);
    let db = basalt_engine::Db::open(&src, small_options()).unwrap();
    db.create_collection("empty").unwrap();
    db.close().unwrap();
    let file = d.path().join("all.jsonl");
    let o = basalt(&["dump", "--data", &dir_arg(&src), "-o", &dir_arg(&file)]);
    expect_code(&o, 0);
    assert!(
        stderr(&o).contains("3 collection(s), 230 record(s)"),
        "{}",
        stderr(&o)
    );
    let text = std::fs::read_to_string(&file).unwrap();
    let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["format"], "basalt-dump");
    assert_eq!(first["version"], 1);

    let dst = d.path().join("dst");
    let o = basalt(&["load", "--data", &dir_arg(&dst), &dir_arg(&file)]);
    expect_code(&o, 0);
    assert!(stdout(&o).contains("loaded 3 collection(s), 230 record(s)"));
    let a = basalt_engine::Db::open(&src, small_options()).unwrap();
    let b = basalt_engine::Db::open(&dst, small_options()).unwrap();
    assert_eq!(a.list_collections(), b.list_collections());
    for c in a.list_collections() {
        let all = |db: &basalt_engine::Db| -> Vec<(Vec<u8>, Vec<u8>)> {
            db.collection(&c)
                .unwrap()
                .scan(
                    std::ops::Bound::Unbounded,
                    std::ops::Bound::Unbounded,
                    basalt_engine::Direction::Forward,
                )
                .unwrap()
                .map(Result::unwrap)
                .collect()
        };
        assert_eq!(all(&a), all(&b), "collection {c}");
    }
    drop((a, b));

    // One collection to stdout.
    let o = basalt(&["dump", "--data", &dir_arg(&src), "-c", "bin"]);
    expect_code(&o, 0);
    assert_eq!(stdout(&o).lines().count(), 1 + 1 + 50 + 1);
    // `-o -` is stdout too (it used to create a file named "-").
    let dash = basalt(&["dump", "--data", &dir_arg(&src), "-c", "bin", "-o", "-"]);
    expect_code(&dash, 0);
    assert_eq!(stdout(&dash), stdout(&o));
    assert!(!Path::new("-").exists());
    let o = basalt(&["dump", "--data", &dir_arg(&src), "-c", "nope"]);
    expect_code(&o, 1);
    // To a device, which cannot be synced (timing a dump, or a FIFO).
    let o = basalt(&["dump", "--data", &dir_arg(&src), "-o", "/dev/null"]);
    expect_code(&o, 0);
    assert!(stderr(&o).contains("230 record(s)"), "{}", stderr(&o));
}

/// Compression bytes (block header byte 9: 0 none, 1 lz4, 2 zstd) of every block in
/// the segments of `dir`, found by the block magic "BLK1".
fn block_compressions(dir: &Path) -> std::collections::BTreeSet<u8> {
    let mut seen = std::collections::BTreeSet::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.file_name().unwrap().to_str().unwrap().starts_with("seg-") {
            let b = std::fs::read(&p).unwrap();
            for (i, w) in b.windows(4).enumerate() {
                if w == 0x314B_4C42u32.to_le_bytes() && i + 10 <= b.len() {
                    seen.insert(b[i + 9]);
                }
            }
        }
    }
    seen
}

#[test]
fn load_gc_and_stats_follow_the_engine_section_of_config() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    populate(&src);
    let file = d.path().join("all.jsonl");
    expect_code(
        &basalt(&["dump", "--data", &dir_arg(&src), "-o", &dir_arg(&file)]),
        0,
    );
    let cfg = d.path().join("basalt.toml");
    std::fs::write(
        &cfg,
        "[engine]\ncompression = \"zstd\"\ntarget_fill_pct = 80\n",
    )
    .unwrap();
    let (plain, zstd) = (d.path().join("plain"), d.path().join("zstd"));
    for (dst, extra) in [
        (&plain, vec![]),
        (&zstd, vec!["--config", cfg.to_str().unwrap()]),
    ] {
        let mut args = vec!["load", "--data", dst.to_str().unwrap()];
        args.extend(extra);
        args.push(file.to_str().unwrap());
        expect_code(&basalt(&args), 0);
    }
    // Blocks that do not compress (the binary collection) are stored raw (0) in both.
    let (p, z) = (block_compressions(&plain), block_compressions(&zstd));
    assert!(p.contains(&1) && !p.contains(&2), "lz4 by default: {p:?}");
    assert!(
        z.contains(&2) && !z.contains(&1),
        "zstd from the config: {z:?}"
    );

    // `basalt SUB --data ZSTD --config CONFIG EXTRA...`
    let run = |sub: &str, config: &Path, extra: &[&str]| {
        let (data, config) = (dir_arg(&zstd), dir_arg(config));
        let mut args = vec![sub, "--data", &data, "--config", &config];
        args.extend(extra);
        basalt(&args)
    };
    let o = run("stats", &cfg, &[]);
    expect_code(&o, 0);
    let text = stdout(&o);
    assert!(
        text.contains("compression zstd(3) for new writes, GC target fill 80%"),
        "{text}"
    );
    let o = run("gc", &cfg, &[]);
    expect_code(&o, 0);
    assert!(
        stdout(&o).starts_with("gc at target fill 80%"),
        "{}",
        stdout(&o)
    );
    // The flag still wins over the file.
    let o = run("gc", &cfg, &["--target-fill", "70"]);
    assert!(
        stdout(&o).starts_with("gc at target fill 70%"),
        "{}",
        stdout(&o)
    );
    // A config that does not parse is refused, naming the file.
    let bad = d.path().join("bad.toml");
    std::fs::write(&bad, "[engine]\ncompression = \"snappy\"\n").unwrap();
    let o = run("stats", &bad, &[]);
    expect_code(&o, 1);
    assert!(stderr(&o).contains("bad.toml"), "{}", stderr(&o));
}

#[test]
fn load_refuses_malformed_and_truncated_dumps_naming_the_line() {
    let d = tempfile::tempdir().unwrap();
    let dst = dir_arg(&d.path().join("db"));
    let write = |name: &str, text: &str| {
        let p = d.path().join(name);
        std::fs::write(&p, text).unwrap();
        dir_arg(&p)
    };
    let header = "{\"format\":\"basalt-dump\",\"version\":1}\n";
    let bad_json = write(
        "bad.jsonl",
        &format!("{header}{{\"collection\":\"a\"}}\n{{oops\n"),
    );
    let o = basalt(&["load", "--data", &dst, &bad_json]);
    expect_code(&o, 1);
    assert!(stderr(&o).contains("line 3: not JSON"), "{}", stderr(&o));

    let truncated = write(
        "trunc.jsonl",
        &format!("{header}{{\"collection\":\"a\"}}\n{{\"collection\":\"a\",\"key\":\"k\",\"value\":\"v\"}}\n"),
    );
    let o = basalt(&["load", "--data", &dst, &truncated]);
    expect_code(&o, 1);
    assert!(stderr(&o).contains("truncated"), "{}", stderr(&o));

    let not_dump = write("other.jsonl", "{\"hello\":1}\n");
    let o = basalt(&["load", "--data", &dst, &not_dump]);
    expect_code(&o, 1);
    assert!(stderr(&o).contains("not a basalt dump"), "{}", stderr(&o));

    let future = write("v9.jsonl", "{\"format\":\"basalt-dump\",\"version\":9}\n");
    let o = basalt(&["load", "--data", &dst, &future]);
    expect_code(&o, 1);
    assert!(stderr(&o).contains("version"), "{}", stderr(&o));

    let o = basalt(&[
        "load",
        "--data",
        &dst,
        &dir_arg(&d.path().join("missing.jsonl")),
    ]);
    expect_code(&o, 1);
    assert!(stderr(&o).contains("missing.jsonl"));
}

#[test]
fn health_replays_a_recording_and_refuses_a_missing_file() {
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../monitoring/testdata/nvme-cli"
    );
    let files: Vec<String> = std::fs::read_dir(fixture)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| p.display().to_string())
        .collect();
    assert!(!files.is_empty());
    let mut args = vec!["health", "--json"];
    for f in &files {
        args.push("--from-json");
        args.push(f);
    }
    let o = basalt(&args);
    assert!(matches!(o.status.code(), Some(0..=2)), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(!v["devices"].as_array().unwrap().is_empty(), "{v}");

    let o = basalt(&["health", "--config", "/nonexistent/monitoring.toml"]);
    expect_code(&o, 1);
    assert!(
        stderr(&o).contains("/nonexistent/monitoring.toml"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn bench_runs_db_bench_steps_on_basalt_and_rejects_unknown_flags() {
    let d = tempfile::tempdir().unwrap();
    let db = format!("--db={}", d.path().join("b").display());
    let o = basalt(&[
        "bench",
        &db,
        "--benchmarks=fillseq,readrandom",
        "--num=2000",
        "--seed=1",
    ]);
    expect_code(&o, 0);
    let text = stdout(&o);
    assert!(
        text.lines()
            .any(|l| l.starts_with("Engine:") && l.contains("basalt")),
        "{text}"
    );
    assert!(text.contains("(2000 of 2000 found)"), "{text}");
    let o = basalt(&["bench", &db, "--benchmarks=fillseq", "--no_such_flag=1"]);
    expect_code(&o, 1);
    assert!(stderr(&o).contains("no_such_flag"), "{}", stderr(&o));
    let o = basalt(&["bench", "--help"]);
    expect_code(&o, 0);
    assert!(stdout(&o).contains("--benchmarks"));
    let o = basalt(&["bench", "compare", "--suite", "huge", "--out", "/tmp/x"]);
    expect_code(&o, 1);
    assert!(stderr(&o).contains("huge"), "{}", stderr(&o));
}

#[test]
fn completions_and_man_pages_are_generated() {
    for (shell, marker) in [
        ("bash", "_basalt()"),
        ("zsh", "#compdef basalt"),
        ("fish", "complete -c basalt"),
    ] {
        let o = basalt(&["completions", shell]);
        expect_code(&o, 0);
        assert!(stdout(&o).contains(marker), "{shell}");
        assert!(
            stdout(&o).contains("collections"),
            "{shell} knows the subcommands"
        );
    }
    let o = basalt(&["completions", "cmd.exe"]);
    expect_code(&o, 2);

    let d = tempfile::tempdir().unwrap();
    let o = basalt(&["man", "--out", &dir_arg(d.path())]);
    expect_code(&o, 0);
    let page = std::fs::read_to_string(d.path().join("basalt.1")).unwrap();
    assert!(
        page.starts_with(".ie") || page.contains(".TH basalt"),
        "{}",
        &page[..200]
    );
    let up = std::fs::read_to_string(d.path().join("basalt-up.1")).unwrap();
    assert!(up.contains("mountpoint"));
    assert!(
        !d.path().join("basalt-man.1").exists(),
        "hidden commands have no page"
    );
    let o = basalt(&["man", "--out", "/proc/no/such/dir"]);
    expect_code(&o, 1);
}

#[test]
fn up_refuses_a_malformed_config_naming_the_line() {
    let d = tempfile::tempdir().unwrap();
    let cfg = d.path().join("basalt.toml");
    std::fs::write(
        &cfg,
        "data_dir = \"/tmp/x\"\n\n[engine]\ncompression = \"brotli\"\n",
    )
    .unwrap();
    let o = basalt(&["up", "--config", &dir_arg(&cfg)]);
    expect_code(&o, 1);
    assert!(stderr(&o).contains("basalt.toml:4:"), "{}", stderr(&o));
    assert!(stderr(&o).contains("brotli"), "{}", stderr(&o));
    assert!(!Path::new("/tmp/x").join("LOCK").exists());
}

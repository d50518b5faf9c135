//! The Basalt adapter: db_bench steps on the real engine find what they wrote, the KvEngine
//! methods map onto the engine, and options map as documented.

use basalt_bench::basalt_adapter::{engine_options, BasaltFactory};
use basalt_bench::flags::Flags;
use basalt_bench::keys::{key_number, make_key};
use basalt_bench::output::parse_output;
use basalt_bench::{
    run_benchmarks, BatchOp, Compression, Direction, Durability, EngineFactory, EngineOptions,
};

fn run(args: &[&str], dir: &std::path::Path) -> (Vec<basalt_bench::StepReport>, String) {
    let mut a = vec![format!("--db={}", dir.display()), "--seed=3".to_string()];
    a.extend(args.iter().map(|s| s.to_string()));
    let flags = Flags::parse(&a).unwrap();
    let mut out = Vec::new();
    let r = run_benchmarks(&flags, &BasaltFactory, &mut out).unwrap();
    (r, String::from_utf8(out).unwrap())
}

fn key(n: u64) -> Vec<u8> {
    let mut k = Vec::new();
    make_key(n, 16, &mut k);
    k
}

fn opts(dir: &std::path::Path, fresh: bool) -> EngineOptions {
    EngineOptions {
        path: dir.to_path_buf(),
        fresh,
        compression: Compression::Lz4,
        durability: Durability::NoSync,
        target_fill_pct: None,
        memory_budget: 16 << 20,
        direct_reads: false,
        direct_writes: false,
        io_backend: None,
        read_poll_micros: None,
        warm_index_cache: true,
        block_size: None,
        cache_writes: false,
        recycle_segments: None,
    }
}

#[test]
fn fillseq_then_readrandom_finds_every_key_and_names_basalt() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("db");
    let (r, text) = run(&["--benchmarks=fillseq,stats", "--num=3000"], &db);
    assert_eq!(r[0].ops, 3000);
    assert!(text.contains("basalt"), "header names the engine: {text}");
    let (r, text) = run(
        &[
            "--benchmarks=readrandom,multireadrandom",
            "--num=3000",
            "--reads=2000",
            "--batch_size=4",
            "--use_existing_db=1",
        ],
        &db,
    );
    assert_eq!((r[0].found, r[0].attempted), (2000, 2000));
    assert_eq!(r[1].found, 2000);
    let p = parse_output(&text).unwrap();
    assert_eq!(p.results[0].found, Some((2000, 2000)));
    assert!(
        text.lines()
            .any(|l| l.starts_with("Engine:") && l.contains("basalt")),
        "{text}"
    );
}

#[test]
fn kv_methods_map_onto_the_engine() {
    let d = tempfile::tempdir().unwrap();
    let e = BasaltFactory.open(&opts(d.path(), true)).unwrap();
    assert_eq!(e.name(), "basalt");
    assert!(e.version().contains(env!("CARGO_PKG_VERSION")));
    for n in 0..100 {
        e.put(&key(n), format!("v{n}").as_bytes()).unwrap();
    }
    e.write_batch(&[BatchOp::Put(&key(200), b"b"), BatchOp::Delete(&key(5))])
        .unwrap();
    e.delete(&key(6)).unwrap();
    assert_eq!(e.get(&key(7)).unwrap().as_deref(), Some(&b"v7"[..]));
    assert_eq!(e.get(&key(5)).unwrap(), None);
    let got = e.multi_get(&[&key(1), &key(6), &key(200)]).unwrap();
    assert_eq!(got, vec![Some(b"v1".to_vec()), None, Some(b"b".to_vec())]);
    let fwd = e.scan_from(&key(4), 4, Direction::Forward).unwrap();
    let nums: Vec<u64> = fwd.iter().map(|(k, _)| key_number(k).unwrap()).collect();
    assert_eq!(nums, vec![4, 7, 8, 9]);
    let back = e.scan_from(&key(8), 4, Direction::Backward).unwrap();
    let nums: Vec<u64> = back.iter().map(|(k, _)| key_number(k).unwrap()).collect();
    assert_eq!(nums, vec![8, 7, 4, 3]);
    e.flush().unwrap();
    e.wait_for_gc().unwrap();
    let s = e.stats();
    assert!(s.user_bytes_written.unwrap() > 0);
    assert!(s.device_bytes_written.unwrap() > 0);
    assert!(s.live_bytes.unwrap() > 0 && s.disk_bytes.unwrap() > 0);
    assert!(s.raw["last_seqno"].as_u64().unwrap() >= 102);
    e.close().unwrap();
    drop(e);
    // Reopening keeps the data; `fresh` wipes it.
    let e = BasaltFactory.open(&opts(d.path(), false)).unwrap();
    assert_eq!(e.get(&key(200)).unwrap().as_deref(), Some(&b"b"[..]));
    drop(e);
    let e = BasaltFactory.open(&opts(d.path(), true)).unwrap();
    assert_eq!(e.get(&key(200)).unwrap(), None);
}

#[test]
fn options_map_as_documented() {
    let d = tempfile::tempdir().unwrap();
    let mut o = opts(d.path(), false);
    o.durability = Durability::SyncEveryWrite;
    o.compression = Compression::Zstd;
    o.target_fill_pct = Some(80.0);
    o.direct_writes = true;
    o.io_backend = Some(basalt_bench::IoBackend::Psync);
    o.block_size = Some(4096);
    o.read_poll_micros = Some(0);
    o.cache_writes = true;
    o.warm_index_cache = false;
    let e = engine_options(&o).unwrap();
    assert!(!e.warm_index_cache);
    assert_eq!(e.block_size, 4096);
    assert!(e.cache_writes);
    assert_eq!(e.read_poll_micros, 0);
    assert_eq!(e.io_backend, basalt_engine::IoBackend::Psync);
    assert_eq!(e.durability, basalt_engine::Durability::SyncEveryWrite);
    assert_eq!(e.compression, basalt_engine::Compression::Zstd(3));
    assert_eq!(e.target_fill_pct, 80);
    assert_eq!(e.memory_budget, 16 << 20);
    assert!(e.direct_io);
    o.durability = Durability::Periodic;
    o.compression = Compression::None;
    o.direct_writes = false;
    o.cache_writes = false;
    let e = engine_options(&o).unwrap();
    assert!(!e.cache_writes);
    assert_eq!(e.durability, basalt_engine::Durability::NoSync);
    assert_eq!(e.compression, basalt_engine::Compression::None);
    assert!(!e.direct_io);
    o.target_fill_pct = Some(5.0);
    assert!(engine_options(&o)
        .unwrap_err()
        .to_string()
        .contains("target_fill"));
    o.target_fill_pct = None;
    o.memory_budget = 1 << 20;
    assert!(engine_options(&o)
        .unwrap_err()
        .to_string()
        .contains("memory_budget"));
}

//! Basalt's output and real db_bench output parse with the same regular expressions.

use basalt_bench::flags::Flags;
use basalt_bench::mem_engine::MemFactory;
use basalt_bench::output::{parse_output, parse_report_csv, percentiles_re, result_line_re};
use basalt_bench::{run_bench, BenchError};

const FIXTURE: &str = include_str!("fixtures/db_bench_7.8_fillseq_readrandom.txt");
const FIXTURE_CSV: &str = include_str!("fixtures/db_bench_7.8_report_file.csv");

fn args(s: &[&str]) -> Vec<String> {
    s.iter().map(|x| x.to_string()).collect()
}

#[test]
fn real_db_bench_fixture_parses() {
    let p = parse_output(FIXTURE).unwrap();
    let names: Vec<&str> = p.results.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "fillseq",
            "readrandom",
            "multireadrandom",
            "seekrandom",
            "overwrite",
            "readwhilewriting"
        ]
    );
    for r in &p.results {
        assert_eq!(r.ops, 20000, "{r:?}");
        assert!(r.ops_per_sec > 0.0 && r.mb_per_sec.is_some(), "{r:?}");
        assert!(
            r.percentiles.is_some(),
            "histogram percentiles attach to {}",
            r.name
        );
    }
    assert_eq!(p.results[1].found, Some((20000, 20000)));
    assert_eq!(p.stall_pct, Some(0.0));
    let rows = parse_report_csv(FIXTURE_CSV).unwrap();
    assert!(!rows.is_empty() && rows[0].0 == 1);
}

#[test]
fn our_output_parses_with_the_same_regexes() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("r.csv");
    let mut out = Vec::new();
    run_bench(
        &args(&[
            &format!("--db={}", dir.path().join("db").display()),
            "--benchmarks=fillseq,readrandom,multireadrandom,seekrandom,overwrite,readwhilewriting,stats",
            "--num=5000",
            "--batch_size=8",
            "--seek_nexts=10",
            "--histogram=1",
            "-seed=42",
            "--report_interval_seconds=1",
            &format!("--report_file={}", report.display()),
        ]),
        &MemFactory::new(),
        &mut out,
    )
    .unwrap();
    let text = String::from_utf8(out).unwrap();
    let ours = parse_output(&text).unwrap();
    let theirs = parse_output(FIXTURE).unwrap();
    let names = |p: &basalt_bench::output::ParsedOutput| {
        p.results.iter().map(|r| r.name.clone()).collect::<Vec<_>>()
    };
    assert_eq!(names(&ours), names(&theirs));
    for (a, b) in ours.results.iter().zip(&theirs.results) {
        assert_eq!(a.mb_per_sec.is_some(), b.mb_per_sec.is_some(), "{}", a.name);
        assert_eq!(a.found.is_some(), b.found.is_some(), "{}", a.name);
        assert!(a.percentiles.is_some(), "{}", a.name);
        assert_eq!(a.ops, 5000, "{}", a.name);
    }
    assert!(
        ours.stall_pct.is_some(),
        "the stats step prints a Cumulative stall line"
    );
    // Line-level: every result/percentile line of ours matches, as db_bench's do.
    let count = |t: &str| {
        (
            t.lines().filter(|l| result_line_re().is_match(l)).count(),
            t.lines().filter(|l| percentiles_re().is_match(l)).count(),
        )
    };
    assert_eq!(count(&text), (6, 6));
    assert_eq!(count(FIXTURE), (6, 6));
    let csv = std::fs::read_to_string(report).unwrap();
    parse_report_csv(&csv).unwrap();
}

#[test]
fn flag_forms_follow_gflags() {
    let f = Flags::parse(&[
        "--num=10",
        "-threads=3",
        "--histogram",
        "--nouse_existing_db",
        "--value-size",
        "400",
        "--memory_budget=1048576",
        "--io_backend=psync",
        "--target_fill=80",
        "--block_size=4096",
        "--read_poll_micros=50",
        "--warm_index_cache=0",
        "--prepopulate_block_cache=1",
    ])
    .unwrap();
    assert!(f.prepopulate_block_cache);
    assert!(!Flags::default().prepopulate_block_cache);
    assert_eq!(f.block_size, Some(4096));
    assert_eq!(f.read_poll_micros, Some(50));
    assert!(!f.warm_index_cache && Flags::default().warm_index_cache);
    assert_eq!((f.num, f.threads, f.value_size), (10, 3, 400));
    assert!(f.histogram && !f.use_existing_db);
    assert_eq!(f.cache_size, 1 << 20);
    assert_eq!(f.target_fill, Some(80.0));
    let f = Flags::parse(&["--histogram=0", "--sync=true"]).unwrap();
    assert!(!f.histogram && f.sync);
}

#[test]
fn bad_flags_are_named_in_the_error() {
    let e = Flags::parse(&["--num=1", "--max_bytes_for_level_base=5"]).unwrap_err();
    assert!(matches!(&e, BenchError::UnknownFlag(n) if n == "--max_bytes_for_level_base"));
    assert!(e.to_string().contains("max_bytes_for_level_base"));
    let e = Flags::parse(&["--prepopulate_block_cache=2"]).unwrap_err();
    assert!(e.to_string().contains("prepopulate_block_cache"), "{e}");
    let e = Flags::parse(&["--num=lots"]).unwrap_err();
    assert!(
        e.to_string().contains("--num") && e.to_string().contains("lots"),
        "{e}"
    );
    let e = Flags::parse(&["--benchmarks=fillseq,frobnicate"]).unwrap_err();
    assert!(e.to_string().contains("frobnicate"), "{e}");
    let e = Flags::parse(&["--compression_type=lzma"]).unwrap_err();
    assert!(e.to_string().contains("compression_type"), "{e}");
    assert!(Flags::parse(&["fillseq"]).is_err());
    assert!(Flags::parse(&["--num"]).is_err());
}

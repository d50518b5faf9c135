//! Each benchmark step does what its name says, checked on the in-memory engine.

use basalt_bench::flags::Flags;
use basalt_bench::keys::{key_number, make_key};
use basalt_bench::mem_engine::MemFactory;
use basalt_bench::output::parse_output;
use basalt_bench::{run_benchmarks, Direction, KvEngine, StepReport};

fn run(extra: &[&str], dir: &std::path::Path, f: &MemFactory) -> (Vec<StepReport>, String) {
    let mut a = vec![format!("--db={}", dir.display()), "--seed=7".to_string()];
    a.extend(extra.iter().map(|s| s.to_string()));
    let flags = Flags::parse(&a).unwrap();
    let mut out = Vec::new();
    let r = run_benchmarks(&flags, f, &mut out).unwrap();
    (r, String::from_utf8(out).unwrap())
}

fn all_keys(e: &dyn KvEngine) -> Vec<u64> {
    let mut k = Vec::new();
    make_key(0, 16, &mut k);
    e.scan_from(&k, usize::MAX, Direction::Forward)
        .unwrap()
        .iter()
        .map(|(k, _)| key_number(k).unwrap())
        .collect()
}

#[test]
fn fillseq_writes_exactly_num_keys_in_order() {
    let d = tempfile::tempdir().unwrap();
    let f = MemFactory::new();
    let (r, _) = run(
        &["--benchmarks=fillseq", "--num=3000", "--threads=3"],
        d.path(),
        &f,
    );
    assert_eq!(r[0].ops, 3000);
    let e = f.last_engine().unwrap();
    assert_eq!(all_keys(e.as_ref()), (0..3000).collect::<Vec<_>>());
    assert!(e
        .get(&{
            let mut k = Vec::new();
            make_key(0, 16, &mut k);
            k
        })
        .unwrap()
        .is_some_and(|v| v.len() == 100));
}

#[test]
fn filluniquerandom_writes_each_key_once_fillrandom_may_repeat() {
    let d = tempfile::tempdir().unwrap();
    let f = MemFactory::new();
    run(
        &["--benchmarks=filluniquerandom", "--num=2000"],
        d.path(),
        &f,
    );
    assert_eq!(
        all_keys(f.last_engine().unwrap().as_ref()),
        (0..2000).collect::<Vec<_>>()
    );
    let (r, _) = run(&["--benchmarks=fillrandom", "--num=2000"], d.path(), &f);
    assert_eq!(r[0].ops, 2000);
    let n = f.last_engine().unwrap().len();
    // Uniform draws with replacement leave about 1 - 1/e of the keys covered.
    assert!(n < 2000 && n > 1000, "fillrandom covered {n} keys");
}

#[test]
fn readrandom_reports_found_like_db_bench() {
    let d = tempfile::tempdir().unwrap();
    let f = MemFactory::new();
    // Half the key space: fill 1000 of num=2000 with fillseq on a num=1000 run, then read.
    run(&["--benchmarks=fillseq", "--num=1000"], d.path(), &f);
    let (r, text) = run(
        &[
            "--benchmarks=readrandom",
            "--num=2000",
            "--reads=4000",
            "--use_existing_db=1",
        ],
        d.path(),
        &f,
    );
    let p = parse_output(&text).unwrap();
    let (found, of) = p.results[0].found.unwrap();
    assert_eq!(of, 4000);
    assert_eq!(found, r[0].found);
    assert!(
        found > 1000 && found < 3000,
        "about half are found: {found}"
    );
}

#[test]
fn deleterandom_and_overwrite_change_the_data() {
    let d = tempfile::tempdir().unwrap();
    let f = MemFactory::new();
    run(
        &["--benchmarks=fillseq,deleterandom", "--num=1000"],
        d.path(),
        &f,
    );
    let left = f.last_engine().unwrap().len();
    assert!(left < 700 && left > 0, "deleterandom left {left} of 1000");
    let (r, _) = run(
        &[
            "--benchmarks=fillseq,overwrite",
            "--num=1000",
            "--writes=500",
        ],
        d.path(),
        &f,
    );
    assert_eq!(r[1].ops, 500);
    assert_eq!(
        f.last_engine().unwrap().len(),
        1000,
        "overwrite adds no keys"
    );
}

#[test]
fn multiread_and_seeks_count_keys_and_entries() {
    let d = tempfile::tempdir().unwrap();
    let f = MemFactory::new();
    let (r, text) = run(
        &[
            "--benchmarks=fillseq,multireadrandom,fwdrange,revrange,seekrandom",
            "--num=1000",
            "--reads=800",
            "--batch_size=8",
            "--seek_nexts=9",
        ],
        d.path(),
        &f,
    );
    assert_eq!(r[1].ops, 800);
    assert_eq!(r[1].found, 800);
    assert_eq!(
        r[1].hist.count(),
        100,
        "one latency sample per multi_get of 8 keys"
    );
    // Forward scans of 10 entries from a random key: near the end fewer remain.
    let entry = 16 + 100;
    assert!(r[2].bytes <= 800 * 10 * entry && r[2].bytes > 800 * 8 * entry);
    assert!(r[3].bytes <= 800 * 10 * entry && r[3].bytes > 800 * 8 * entry);
    assert_eq!(r[2].found, 800);
    let p = parse_output(&text).unwrap();
    assert_eq!(p.results.len(), 5);
}

#[test]
fn duration_bounds_time_and_intervals_are_recorded() {
    let d = tempfile::tempdir().unwrap();
    let f = MemFactory::new();
    let report = d.path().join("rep.csv");
    let (r, _) = run(
        &[
            "--benchmarks=fillseq,readwhilewriting,updaterandom",
            "--num=1000",
            "--duration=2",
            "--report_interval_seconds=1",
            &format!("--report_file={}", report.display()),
        ],
        d.path(),
        &f,
    );
    assert!(
        r[1].ops > 1000,
        "time, not --reads, bounds a --duration step"
    );
    assert!(r[1].background_writes > 0, "readwhilewriting runs a writer");
    assert!(
        !r[1].intervals.is_empty(),
        "1-second throughput samples are recorded"
    );
    assert!(r[2].found > 0);
    let csv = std::fs::read_to_string(&report).unwrap();
    assert!(csv.starts_with("secs_elapsed,interval_qps\n1,"), "{csv}");
}

/// Share of all reads of the last engine that went to its `top` most read keys.
fn top_read_share(f: &MemFactory, top: usize) -> f64 {
    let reads = f.last_engine().unwrap().reads_per_key();
    let mut c: Vec<u64> = reads.values().copied().collect();
    c.sort_unstable_by(|a, b| b.cmp(a));
    c.iter().take(top).sum::<u64>() as f64 / c.iter().sum::<u64>() as f64
}

/// `--read_random_exp_range` skews the keys of readrandom, multireadrandom and
/// readwhilewriting (as db_bench does) and of nothing else: with 10, about half the
/// reads go to the hottest 1% of keys, against about 2% when uniform, and fillrandom
/// still writes as many distinct keys as without it.
#[test]
fn read_random_exp_range_skews_reads_only() {
    let d = tempfile::tempdir().unwrap();
    let f = MemFactory::new();
    run(&["--benchmarks=fillseq", "--num=5000"], d.path(), &f);
    let read = |bench: &str, range: &str| {
        run(
            &[
                &format!("--benchmarks={bench}"),
                "--num=5000",
                "--reads=20000",
                "--batch_size=8",
                "--duration=0",
                "--use_existing_db=1",
                &format!("--read_random_exp_range={range}"),
            ],
            d.path(),
            &f,
        );
        top_read_share(&f, 50)
    };
    let uniform = read("readrandom", "0");
    assert!(uniform < 0.05, "uniform: top 1% of keys got {uniform}");
    for bench in ["readrandom", "multireadrandom", "readwhilewriting"] {
        let skewed = read(bench, "10");
        assert!(
            (0.4..0.7).contains(&skewed),
            "{bench}: top 1% of keys got {skewed} of the reads"
        );
    }
    let distinct_written = |range: &str| {
        let d = tempfile::tempdir().unwrap();
        let f = MemFactory::new();
        run(
            &[
                "--benchmarks=fillrandom",
                "--num=5000",
                &format!("--read_random_exp_range={range}"),
            ],
            d.path(),
            &f,
        );
        all_keys(f.last_engine().unwrap().as_ref()).len()
    };
    // Uniform: 1 - 1/e of 5000 distinct keys (3160).
    for range in ["0", "10"] {
        let n = distinct_written(range);
        assert!(
            (2900..3400).contains(&n),
            "range {range}: {n} distinct keys"
        );
    }
    let bad = Flags::parse(&["--read_random_exp_range=-1"]).unwrap_err();
    assert!(bad.to_string().contains("read_random_exp_range"), "{bad}");
}

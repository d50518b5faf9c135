//! The quick comparison suite end to end: memtest (standing in for Basalt, and labelled as
//! such), RocksDB db_bench and fio, each measured as its own process; the report has a row
//! for every engine and step. Skips (with the reason) when db_bench or fio is not installed.

use basalt_bench::compare::{suite_steps, CompareArgs, Suite, ROCKSDB_ONLY_FLAGS};
use basalt_bench::fio::baseline_jobs;
use basalt_bench::report::TSV_COLUMNS;
use std::process::Command;

fn have(tool: &str) -> bool {
    Command::new(tool).arg("--version").output().is_ok()
}

#[test]
fn quick_suite_runs_end_to_end_and_reports_every_engine_and_step() {
    for tool in ["db_bench", "fio"] {
        if !have(tool) {
            eprintln!(
                "SKIP quick suite: '{tool}' not found (make deps installs rocksdb-tools and fio)"
            );
            return;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let mut args = CompareArgs::new(
        Suite::Quick,
        dir.path().join("report"),
        vec![env!("CARGO_BIN_EXE_basalt-bench-mem").to_string()],
    );
    args.num = Some(5000);
    args.seconds = Some(1);
    let mut log = Vec::new();
    let report = basalt_bench::run_compare(&args, &mut log).unwrap();
    let log = String::from_utf8(log).unwrap();

    let tsv = std::fs::read_to_string(args.out.join("summary.tsv")).unwrap();
    let mut lines = tsv.lines();
    assert_eq!(lines.next().unwrap(), TSV_COLUMNS.join("\t"));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split('\t').collect()).collect();
    assert!(rows.iter().all(|r| r.len() == TSV_COLUMNS.len()));
    let has = |e: &str, s: &str| rows.iter().any(|r| r[0] == e && r[1] == s);
    let spec = args.spec();
    for st in suite_steps(&spec) {
        assert!(has("memtest", st.name), "memtest row for {}", st.name);
        assert!(has("rocksdb", st.name), "rocksdb row for {}", st.name);
        assert!(
            !has("basalt", st.name),
            "the in-memory engine is never labelled basalt"
        );
    }
    for j in baseline_jobs() {
        assert!(has("fio", j.name), "fio row for {}", j.name);
    }
    // fillseq wrote num keys on both engines and the numbers are measured, not blank.
    for e in ["memtest", "rocksdb"] {
        let r = rows
            .iter()
            .find(|r| r[0] == e && r[1] == "fillseq")
            .unwrap();
        assert!(r[2].parse::<f64>().unwrap() > 0.0, "{e} ops_sec");
        assert!(r[8].parse::<f64>().unwrap() > 0.0, "{e} write_amp");
        assert!(r[13].parse::<u64>().unwrap() > 0, "{e} rss_bytes");
        assert!(r[14].parse::<u64>().unwrap() > 0, "{e} disk_bytes");
    }
    let rr = report.engines[1]
        .rows
        .iter()
        .find(|r| r.step == "readrandom")
        .unwrap();
    let (found, of) = rr.found.unwrap();
    assert_eq!(found, of, "db_bench finds every key after fillseq");
    // RocksDB alone gets bloom filters and a partitioned index in its block cache (the
    // in-memory engine, like `basalt bench`, would refuse the flags), and db_bench ran with them.
    for (run, rocks) in [(&report.engines[0], false), (&report.engines[1], true)] {
        assert_eq!(
            run.commands.len(),
            suite_steps(&spec).len(),
            "{}",
            run.label
        );
        for c in &run.commands {
            let names: Vec<&str> = c.split(' ').filter_map(|a| a.split('=').next()).collect();
            let unique: std::collections::HashSet<&str> = names.iter().copied().collect();
            assert_eq!(unique.len(), names.len(), "a flag given twice: {c}");
            for f in ROCKSDB_ONLY_FLAGS {
                let has = c.split(' ').any(|a| a == *f);
                assert_eq!(has, rocks, "{} {f} in {c}", run.label);
            }
        }
    }
    let fio_qd32 = report.engines[2]
        .rows
        .iter()
        .find(|r| r.step == "randread-4k-qd32")
        .unwrap();
    assert!(fio_qd32.ops_sec.unwrap() > 0.0 && fio_qd32.dev_read_bytes_per_op.is_some());

    let md = std::fs::read_to_string(args.out.join("report.md")).unwrap();
    let html = std::fs::read_to_string(args.out.join("report.html")).unwrap();
    for text in [&md, &html] {
        assert!(
            text.contains("NOT Basalt"),
            "the report names the real engine"
        );
        assert!(
            text.contains("db_bench 7.8") && text.contains("fio-"),
            "versions"
        );
        assert!(text.contains("cores") && text.contains("RAM") && text.contains("file system"));
    }
    assert!(html.matches("<svg").count() >= 4, "charts are inline SVG");
    assert!(
        log.contains("memtest fillseq:") && log.contains("rocksdb overwrite:"),
        "{log}"
    );
}

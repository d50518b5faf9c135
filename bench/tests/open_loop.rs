//! Open-loop mode: a stall injected into the engine shows up in the latency of every request
//! scheduled behind it (queueing delay), which a closed loop hides.

use basalt_bench::flags::Flags;
use basalt_bench::mem_engine::MemFactory;
use basalt_bench::output::parse_output;
use basalt_bench::run_benchmarks;
use std::time::Duration;

const STALL: Duration = Duration::from_millis(300);

fn run(extra: &[&str]) -> (basalt_bench::StepReport, String) {
    let d = tempfile::tempdir().unwrap();
    let f = MemFactory::new();
    let mut a = vec![
        format!("--db={}", d.path().display()),
        "--seed=3".into(),
        "--num=2000".into(),
        "--histogram=1".into(),
    ];
    a.extend(extra.iter().map(|s| s.to_string()));
    let mut flags = Flags::parse(&a).unwrap();
    flags.benchmarks = vec!["fillseq".into()];
    run_benchmarks(&flags, &f, &mut Vec::new()).unwrap();
    // Stall the 500th read of the measured step.
    let f2 = MemFactory::with_stall(500, STALL);
    flags.benchmarks = vec!["readrandom".into()];
    flags.use_existing_db = true;
    let mut out = Vec::new();
    let r = run_benchmarks(&flags, &f2, &mut out).unwrap();
    (
        r.into_iter().next().unwrap(),
        String::from_utf8(out).unwrap(),
    )
}

#[test]
fn open_loop_latency_includes_queueing_behind_a_stall() {
    // 2000 reads offered at 2000/s: the ~600 requests due during a 300 ms stall all wait.
    let (r, text) = run(&[
        "--reads=2000",
        "--arrival_rate=2000",
        "--response_time_sla_us=50000",
    ]);
    let stall_ns = STALL.as_nanos() as u64;
    let delayed = r.hist.count_at_least_ns(stall_ns / 4);
    assert!(
        delayed >= 200,
        "requests queued behind the stall must carry its delay; only {delayed} did"
    );
    assert!(r.hist.percentile_us(99.0) >= STALL.as_micros() as f64 / 2.0);
    let ol = r.open_loop.clone().unwrap();
    assert_eq!(ol.responses, 2000);
    assert!(ol.within_sla < 2000 - 200, "SLA misses are counted: {ol:?}");
    let p = parse_output(&text).unwrap();
    let pol = p.results[0]
        .open_loop
        .clone()
        .expect("Open-loop line is printed and parsed");
    assert_eq!(pol.offered, 2000.0);
    assert_eq!(pol.responses, 2000);
    assert!(pol.within_sla_pct < 90.0);
}

#[test]
fn closed_loop_hides_the_same_stall_as_one_slow_request() {
    let (r, _) = run(&["--reads=2000"]);
    let stall_ns = STALL.as_nanos() as u64;
    assert_eq!(
        r.hist.count_at_least_ns(stall_ns / 4),
        1,
        "only the stalled call is slow"
    );
    assert!(r.hist.percentile_us(99.0) < STALL.as_micros() as f64 / 4.0);
    assert!(r.open_loop.is_none());
}

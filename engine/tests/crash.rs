//! Crash harness: a child process writes random batches with sync-every-write while
//! GC and index flushes run often, acknowledging each durable batch on its stdout.
//! The parent `kill -9`s it at random moments, reopens, and checks that every
//! acknowledged batch is there, the batch in flight is all-or-nothing, no deleted
//! key came back, and `check` passes. Values are 50-750 bytes, one in 40 over 16 KiB
//! (a paged block). One batch in 25 is larger than the writer's 1 MiB buffer, so it
//! reaches the file in pieces and a kill can leave some of its blocks written and the
//! rest not (recovery must discard all of them). In every other cycle the child's
//! checkpoints pause 3 ms between syncing the delete list and reading the index
//! (`BASALT_FAILPOINT_PAUSE`): an index change installed in that window used to be
//! listed without its dead versions, and deleted keys came back after a kill.
//!
//! Cycles: 300 by default, `BASALT_CRASH_CYCLES` to change (e.g. under `make bench`).

use basalt_engine::{Db, Durability, IoBackend, Options, WriteBatch};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const COLLS: [&str; 2] = ["x", "y"];
const KEYS: u64 = 300;
/// Key space of the large batches (a superset of the small batches' keys).
const BIG_KEYS: u64 = 2000;
/// Large batches write at least this much (more than the writer's 1 MiB buffer).
const BIG_BATCH_MIN_BYTES: usize = (1 << 20) + (64 << 10);

/// The pause widening the window between a checkpoint's delete-list sync and its read
/// of the index, where another thread's index change could be installed.
const CHECKPOINT_PAUSE: &str = "checkpoint-after-deletes-sync:3";

/// One batch in this many is large.
const BIG_EVERY: u64 = 25;

/// The child exchanges the two collections' names before one batch in this many.
const EXCHANGE_EVERY: u64 = 5;

/// The random source of batch `id`'s contents.
fn batch_rng(id: u64) -> Rng {
    Rng(id.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
}

/// Whether batch `id` is one of the large ones (its first draw decides).
fn is_big(id: u64) -> bool {
    batch_rng(id).next().is_multiple_of(BIG_EVERY)
}

fn backend() -> IoBackend {
    match std::env::var("BASALT_CRASH_BACKEND").as_deref() {
        Ok("psync") => IoBackend::Psync,
        _ => IoBackend::IoUring,
    }
}

fn opts() -> Options {
    Options {
        io_backend: backend(),
        segment_size: 256 << 10,
        block_size: 4096,
        memory_budget: 8 << 20,
        durability: Durability::SyncEveryWrite,
        background_gc: true,
        target_fill_pct: 85,
        ..Options::default()
    }
}

mod common;
use common::Rng;

/// The operations of batch `id` (deterministic): (collection, key, Some(value) | None).
fn batch_ops(id: u64) -> Vec<(usize, Vec<u8>, Option<Vec<u8>>)> {
    let mut r = batch_rng(id);
    let big = r.next().is_multiple_of(BIG_EVERY);
    let (n, keys) = if big {
        (u64::MAX, BIG_KEYS)
    } else {
        (1 + r.next() % 12, KEYS)
    };
    let mut seen = std::collections::HashSet::new();
    let mut ops = Vec::new();
    let mut bytes = 0;
    for _ in 0..n {
        if big && bytes >= BIG_BATCH_MIN_BYTES {
            break;
        }
        let c = (r.next() % 2) as usize;
        let k = r.next() % keys;
        if !seen.insert((c, k)) {
            continue;
        }
        let key = format!("k{k:04}").into_bytes();
        if r.next().is_multiple_of(5) {
            ops.push((c, key, None));
        } else {
            // One value in 40 is large enough for a paged block (page checksums).
            let len = if r.next().is_multiple_of(40) {
                16_500 + (r.next() % 4000) as usize
            } else if big {
                1500 + (r.next() % 3000) as usize
            } else {
                50 + (r.next() % 700) as usize
            };
            bytes += len;
            let mut v = format!("b{id}:").into_bytes();
            while v.len() < len {
                v.push(b'a' + (r.next() % 26) as u8);
            }
            ops.push((c, key, Some(v)));
        }
    }
    ops
}

/// The highest generation of the delete list's file in `dir` (`DELETES.<gen>`; 0 for
/// `DELETES`).
fn delete_list_generation(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name();
            name.to_str()?.strip_prefix("DELETES.")?.parse().ok()
        })
        .max()
        .unwrap_or(0)
}

/// Child entry point: only active when spawned by the parent with the env var set.
#[test]
fn crash_child_entry() {
    let Ok(dir) = std::env::var("BASALT_CRASH_CHILD_DIR") else {
        return;
    };
    let first: u64 = std::env::var("BASALT_CRASH_FIRST_BATCH")
        .unwrap()
        .parse()
        .unwrap();
    let db = Db::open(&dir, opts()).unwrap();
    for c in COLLS {
        db.collection_or_create(c).unwrap();
    }
    println!("READY");
    let mut id = first;
    loop {
        let mut b = WriteBatch::new();
        for (c, k, v) in batch_ops(id) {
            match v {
                Some(v) => b.put(COLLS[c], &k, &v),
                None => b.delete(COLLS[c], &k),
            };
        }
        if id % EXCHANGE_EVERY == 2 {
            println!("XBEGIN {id}");
            db.exchange_collections(COLLS[0], COLLS[1]).unwrap();
            println!("XACK {id}");
        }
        println!("BEGIN {id}");
        db.write(&b).unwrap();
        println!("ACK {id}");
        if id.is_multiple_of(25) {
            db.flush().unwrap();
        }
        if id.is_multiple_of(40) {
            db.gc_force_one().unwrap();
        }
        id += 1;
    }
}

type Model = BTreeMap<(usize, Vec<u8>), Vec<u8>>;

/// The first few differences between what the engine holds and the model.
fn diff(got: &Model, want: &Model) -> String {
    let mut out = Vec::new();
    for (k, v) in want {
        match got.get(k) {
            None => out.push(format!(
                "missing {:?}",
                (k.0, String::from_utf8_lossy(&k.1))
            )),
            Some(g) if g != v => out.push(format!(
                "{:?}: has {:?}, want {:?}",
                (k.0, String::from_utf8_lossy(&k.1)),
                String::from_utf8_lossy(&g[..g.len().min(12)]),
                String::from_utf8_lossy(&v[..v.len().min(12)])
            )),
            _ => {}
        }
    }
    for (k, g) in got.iter().filter(|(k, _)| !want.contains_key(*k)) {
        out.push(format!(
            "extra {:?} = {:?}",
            (k.0, String::from_utf8_lossy(&k.1)),
            String::from_utf8_lossy(&g[..g.len().min(12)])
        ));
    }
    out.truncate(8);
    out.join("; ")
}

/// The model after the two collections' names are exchanged.
fn swapped(model: &Model) -> Model {
    model
        .iter()
        .map(|((c, k), v)| ((1 - c, k.clone()), v.clone()))
        .collect()
}

fn apply(model: &mut Model, id: u64) {
    for (c, k, v) in batch_ops(id) {
        match v {
            Some(v) => model.insert((c, k), v),
            None => model.remove(&(c, k)),
        };
    }
}

fn read_all(db: &Db) -> Model {
    let mut m = Model::new();
    for (ci, c) in COLLS.iter().enumerate() {
        let Ok(coll) = db.collection(c) else { continue };
        for item in coll
            .scan(
                std::ops::Bound::Unbounded,
                std::ops::Bound::Unbounded,
                basalt_engine::Direction::Forward,
            )
            .unwrap()
        {
            let (k, v) = item.unwrap();
            m.insert((ci, k), v);
        }
    }
    m
}

/// Both backends in one test, one after the other: two tests spawning children while
/// the other opens a data directory could let a forked-but-not-yet-exec'd child hold
/// the other's `flock` for a moment (fork shares open file descriptions).
#[test]
fn kill_9_at_random_points_loses_no_acknowledged_write_on_both_backends() {
    crash_cycles("io_uring");
    crash_cycles("psync");
}

/// Whether the last segment file's header names a segment it was recycled from
/// (segment format 5: bytes 20..24).
fn tail_is_a_reused_file(dir: &std::path::Path) -> bool {
    let tail = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("seg-"))
        .max();
    tail.and_then(|p| std::fs::read(p).ok())
        .is_some_and(|b| b.len() >= 24 && b[20..24] != [0; 4])
}

fn crash_cycles(backend_name: &str) {
    if std::env::var("BASALT_CRASH_CHILD_DIR").is_ok() {
        return;
    }
    let cycles: u64 = std::env::var("BASALT_CRASH_CYCLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut model = Model::new();
    let mut next_batch = 1u64;
    let mut rng = Rng(0xC0FFEE ^ std::process::id() as u64);
    let (mut in_flight_applied, mut in_flight_lost, mut total_acked) = (0, 0, 0);
    let (mut big_acked, mut big_in_flight) = (0, 0);
    let mut deletes_gen = 0;
    let mut reused_tails = 0;
    let (mut exchanges_acked, mut exchanges_applied, mut exchanges_lost) = (0, 0, 0);
    let child_log = dir.path().join("child-stderr.log");
    for cycle in 0..cycles {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "crash_child_entry",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("BASALT_CRASH_CHILD_DIR", dir.path())
            .env("BASALT_CRASH_FIRST_BATCH", next_batch.to_string())
            .env("BASALT_CRASH_BACKEND", backend_name)
            .env(
                "BASALT_FAILPOINT_PAUSE",
                if cycle % 2 == 1 { CHECKPOINT_PAUSE } else { "" },
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::from(std::fs::File::create(&child_log).unwrap()))
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // Wait for the child to be ready, then let it run a random while.
        let t0 = Instant::now();
        loop {
            match rx.recv_timeout(Duration::from_secs(30)) {
                Ok(l) if l.ends_with("READY") => break,
                Ok(_) => {}
                Err(_) => panic!(
                    "cycle {cycle}: child did not start (recovery failed?): {}",
                    std::fs::read_to_string(&child_log).unwrap_or_default()
                ),
            }
            assert!(t0.elapsed() < Duration::from_secs(60));
        }
        std::thread::sleep(Duration::from_micros(2_000 + rng.next() % 60_000));
        // SIGKILL: no destructor, no flush.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        child.wait().unwrap();
        reader.join().unwrap();
        let mut acked = Vec::new();
        let mut begun = Vec::new();
        let mut exchange_in_flight = false;
        // In the child's order: a batch acknowledged after an exchange went to the
        // collection its name held then.
        while let Ok(l) = rx.try_recv() {
            if let Some(id) = l.strip_prefix("ACK ") {
                let id = id.parse::<u64>().unwrap();
                apply(&mut model, id);
                acked.push(id);
            } else if let Some(id) = l.strip_prefix("BEGIN ") {
                begun.push(id.parse::<u64>().unwrap());
            } else if l.starts_with("XBEGIN ") {
                exchange_in_flight = true;
            } else if l.starts_with("XACK ") {
                exchange_in_flight = false;
                model = swapped(&model);
                exchanges_acked += 1;
            }
        }
        total_acked += acked.len();
        reused_tails += usize::from(tail_is_a_reused_file(dir.path()));
        big_acked += acked.iter().filter(|&&id| is_big(id)).count();
        let in_flight = begun.iter().copied().find(|b| !acked.contains(b));
        big_in_flight += usize::from(in_flight.is_some_and(is_big));
        let reopen_opts = Options {
            background_gc: false,
            io_backend: if backend_name == "psync" {
                IoBackend::Psync
            } else {
                IoBackend::IoUring
            },
            ..opts()
        };
        let db = Db::open(dir.path(), reopen_opts)
            .unwrap_or_else(|e| panic!("cycle {cycle}: reopen failed: {e}"));
        deletes_gen = deletes_gen.max(delete_list_generation(dir.path()));
        assert_eq!(
            db.list_collections(),
            COLLS,
            "cycle {cycle}: the collections' names after recovery"
        );
        let got = read_all(&db);
        if exchange_in_flight {
            // The kill came between XBEGIN and XACK: no batch was in flight.
            if got == model {
                exchanges_lost += 1;
            } else {
                let with = swapped(&model);
                assert!(
                    got == with,
                    "cycle {cycle}: an exchange in flight is partially applied, or an acknowledged \
                     write was lost: against the names before it: {}; swapped: {}",
                    diff(&got, &model),
                    diff(&got, &with)
                );
                model = with;
                exchanges_applied += 1;
            }
        } else if got != model {
            let id = in_flight.unwrap_or_else(|| {
                panic!("cycle {cycle}: state differs from acknowledged writes and nothing was in flight: {}", diff(&got, &model))
            });
            let mut with = model.clone();
            apply(&mut with, id);
            assert!(
                got == with,
                "cycle {cycle}: batch {id} in flight is partially applied, or an acknowledged write was lost: \
                 against the writes before it: {}; against those and batch {id}: {}",
                diff(&got, &model),
                diff(&got, &with)
            );
            model = with;
            in_flight_applied += 1;
        } else if in_flight.is_some() {
            in_flight_lost += 1;
        }
        next_batch = begun.iter().copied().max().map_or(next_batch, |m| m + 1);
        drop(db);
        if cycle % 25 == 24 || cycle + 1 == cycles {
            let rep = basalt_engine::check(dir.path()).unwrap();
            assert!(
                rep.is_ok(),
                "cycle {cycle}: check found problems: {:?}",
                rep.problems
            );
        }
    }
    println!(
        "crash harness ({backend_name}): {cycles} kill -9 cycles, {total_acked} acknowledged batches all present; \
         in-flight batch applied {in_flight_applied}x, absent {in_flight_lost}x; {} live keys at the end; \
         batches over 1 MiB: {big_acked} acknowledged, {big_in_flight} in flight at the kill; \
         delete list rewritten whole up to generation {deletes_gen}; \
         the tail was a reused segment file at {reused_tails} kills; \
         {exchanges_acked} acknowledged collection exchanges, one in flight applied \
         {exchanges_applied}x, absent {exchanges_lost}x",
        model.len()
    );
    assert!(
        exchanges_applied + exchanges_lost > 0,
        "no kill landed while the collections were being exchanged"
    );
    assert!(
        deletes_gen > 0,
        "the delete list was never rewritten whole, so no kill could land around it"
    );
    assert!(
        reused_tails > 0,
        "no kill landed while the tail was a recycled segment file"
    );
    assert!(
        big_in_flight > 0,
        "no kill landed while a batch over 1 MiB was being written"
    );
    assert!(
        total_acked > cycles as usize,
        "the child acknowledged too few batches for a meaningful test"
    );
}

//! Read path: batched `multi_get` returns exactly what `get` returns on both IO
//! backends, the memory budget holds with a data set 100x larger than it, and the
//! write cache lends its idle part to the caches.

use basalt_engine::{Compression, Db, IoBackend, Options};

mod common;
use common::{read_test_options as opts, Rng};

fn value(k: u64, round: u64) -> Vec<u8> {
    let mut v = format!("{k}/{round}/").into_bytes();
    let mut r = Rng(k * 31 + round + 1);
    v.extend((0..300).map(|_| b'a' + (r.next() % 26) as u8));
    v
}

/// An engine with `o` in a fresh directory, holding `value(k, 0)` for keys `0..n` of
/// collection `c`, flushed.
fn loaded(o: Options, n: u64) -> (tempfile::TempDir, Db) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), o).unwrap();
    let c = db.create_collection("c").unwrap();
    for k in 0..n {
        c.put(&k.to_be_bytes(), &value(k, 0)).unwrap();
    }
    db.flush().unwrap();
    (dir, db)
}

#[test]
fn multi_get_equals_get_for_random_batches_on_both_backends() {
    for backend in [IoBackend::IoUring, IoBackend::Psync] {
        let (_dir, db) = loaded(opts(backend), 40_000);
        assert_eq!(db.io_backend(), backend);
        let c = db.collection("c").unwrap();
        for k in (0..40_000u64).step_by(7) {
            c.delete(&k.to_be_bytes()).unwrap();
        }
        // Some keys only in the write cache (memtable / open block), some overwritten.
        for k in (0..40_000u64).step_by(11) {
            c.put(&k.to_be_bytes(), &value(k, 1)).unwrap();
        }
        let mut rng = Rng(42);
        for batch in 0..60 {
            let n = 1 + (rng.next() % 64) as usize;
            // Keys beyond 40000 are missing; duplicates are allowed.
            let keys: Vec<[u8; 8]> = (0..n)
                .map(|_| (rng.next() % 44_000).to_be_bytes())
                .collect();
            let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
            let got = c.multi_get(&refs).unwrap();
            let want: Vec<_> = refs.iter().map(|k| c.get(k).unwrap()).collect();
            assert_eq!(got, want, "{backend:?} batch {batch}");
            if batch == 30 {
                c.put(&keys[0], b"fresh").unwrap();
            }
        }
        let s = db.stats();
        assert_eq!(s.io_backend, backend.name());
        assert!(s.multi_get_batches >= 60);
        if backend == IoBackend::IoUring {
            let deep: u64 = s.io_queue_depth.iter().skip(1).map(|(_, n)| n).sum();
            assert!(
                deep > 0,
                "multi_get never submitted more than one read at once: {:?}",
                s.io_queue_depth
            );
        }
    }
}

/// Point reads that miss the cache wait for their device read on the ring by polling
/// (the default), and with `read_poll_micros = 0` by `pread`, with no ring wait at all.
#[test]
fn point_reads_poll_for_their_completion_unless_polling_is_off() {
    for poll in [basalt_engine::DEFAULT_READ_POLL_MICROS, 0] {
        let o = Options {
            read_poll_micros: poll,
            compression: Compression::None,
            ..opts(IoBackend::IoUring)
        };
        let n = 40_000u64;
        let (_dir, db) = loaded(o, n);
        let c = db.collection("c").unwrap();
        let before = db.stats();
        let mut rng = Rng(9);
        for _ in 0..3000 {
            let k = rng.next() % n;
            assert_eq!(c.get(&k.to_be_bytes()).unwrap(), Some(value(k, 0)));
        }
        let s = db.stats();
        let reads = s.device_reads - before.device_reads;
        let polled = s.read_waits_polled - before.read_waits_polled;
        let slept = s.read_waits_slept - before.read_waits_slept;
        println!(
            "read_poll_micros {poll}: {reads} device reads, {polled} waits polled, {slept} slept"
        );
        assert_eq!(s.read_poll_micros, poll);
        assert!(
            reads > 1000,
            "the gets should mostly miss the cache: {reads} reads"
        );
        if poll > 0 {
            assert!(polled > 0, "no wait ended by polling ({slept} slept)");
        } else {
            assert_eq!(
                polled + slept,
                0,
                "lone reads go to pread when polling is off"
            );
        }
    }
}

/// `cache_writes` (RocksDB's prepopulate_block_cache) decides whether reading back
/// what was just written is served by the block cache or by the device: off (the
/// default), the first read of each block misses the cache and goes to the device;
/// on, none does.
#[test]
fn written_blocks_enter_the_block_cache_only_with_cache_writes() {
    for cache_writes in [false, true] {
        let o = Options {
            cache_writes,
            memory_budget: 64 << 20,
            ..opts(IoBackend::IoUring)
        };
        let n = 2_000u64;
        let (_dir, db) = loaded(o, n);
        let c = db.collection("c").unwrap();
        let before = db.stats();
        for k in 0..n {
            assert_eq!(c.get(&k.to_be_bytes()).unwrap(), Some(value(k, 0)));
        }
        let s = db.stats();
        let reads = s.device_reads - before.device_reads;
        let misses = s.block_cache_misses - before.block_cache_misses;
        println!("cache_writes {cache_writes}: {n} gets, {misses} block cache misses, {reads} device reads (data and index)");
        if cache_writes {
            assert_eq!(
                misses, 0,
                "every block read back should come from the cache"
            );
        } else {
            // About twelve 330-byte records per 4 KiB block: one miss per block.
            assert!(
                misses >= n / 20,
                "only {misses} misses: written blocks were cached"
            );
            assert!(reads >= misses, "a block cache miss is a device read");
        }
    }
}

/// An uncompressed engine with `budget` bytes of memory, in a fresh directory.
fn open_with_budget(budget: u64) -> (tempfile::TempDir, Db) {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        memory_budget: budget,
        compression: Compression::None,
        segment_size: 16 << 20,
        ..opts(IoBackend::IoUring)
    };
    let db = Db::open(dir.path(), opts).unwrap();
    (dir, db)
}

#[test]
fn memory_budget_holds_with_data_100x_larger() {
    let budget: u64 = 8 << 20;
    // Fixed overhead outside the budget: the 1 MiB log write buffer, per-thread rings,
    // thread stacks are not accounted; everything that grows with data is.
    let fixed_overhead: u64 = 0;
    let (_dir, db) = open_with_budget(budget);
    let c = db.create_collection("c").unwrap();
    let val = vec![7u8; 1000];
    let mut max_mem = 0;
    let n = budget * 100 / 1000 + 1000;
    for k in 0..n {
        c.put(&k.to_be_bytes(), &val).unwrap();
        if k % 50_000 == 0 {
            max_mem = max_mem.max(db.stats().memory_bytes);
        }
    }
    db.flush().unwrap();
    let before = db.stats();
    let mut rng = Rng(7);
    for _ in 0..20_000 {
        let k = rng.next() % n;
        assert!(c.get(&k.to_be_bytes()).unwrap().is_some());
    }
    let s = db.stats();
    // Every cache miss during the gets is a device read and is counted per get: data
    // blocks and index blocks alike.
    let misses = (s.block_cache_misses - before.block_cache_misses)
        + (s.index_cache_misses - before.index_cache_misses);
    let reads = (s.device_reads_per_get * s.gets as f64).round() as u64
        - (before.device_reads_per_get * before.gets as f64).round() as u64;
    assert_eq!(reads, misses, "device reads during gets vs cache misses");
    max_mem = max_mem.max(s.memory_bytes);
    assert!(
        s.log_disk_bytes >= 100 * budget,
        "data set {} is not 100x the budget",
        s.log_disk_bytes
    );
    assert!(
        max_mem <= budget + fixed_overhead,
        "accounted memory {max_mem} exceeds budget {budget} + {fixed_overhead}"
    );
    println!(
        "memory budget {budget}: data {} bytes ({}x), peak accounted memory {max_mem}, device reads per get {:.2}",
        s.log_disk_bytes,
        s.log_disk_bytes / budget,
        s.device_reads_per_get
    );
}

#[test]
fn idle_write_cache_is_lent_to_the_caches_and_taken_back_when_writes_resume() {
    let budget: u64 = 32 << 20;
    let write_cache = budget / 4; // Options::write_cache_bytes at this budget
    let (_dir, db) = open_with_budget(budget);
    let c = db.create_collection("c").unwrap();
    let val = vec![9u8; 1000];
    let n = 48_000u64; // ~48 MB: more than the caches can hold
    for k in 0..n {
        c.put(&k.to_be_bytes(), &val).unwrap();
    }
    db.flush().unwrap();
    let idle = db.stats();
    let caches = idle.block_cache_capacity + idle.index_cache_capacity + idle.head_cache_capacity;
    assert!(
        caches > budget - write_cache + write_cache / 2,
        "idle: caches get {caches} of {budget}; without lending they would get {}",
        budget - write_cache
    );
    // Fill the caches, then write again: every memtable rotation takes its share
    // back at once, so cache capacity plus memtables never exceed the budget (and
    // neither does accounted memory).
    for k in 0..n {
        assert!(c.get(&k.to_be_bytes()).unwrap().is_some());
    }
    // Small values, so the memtables (which hold index entries, not values) fill and
    // rotate several times.
    let (mut peak, mut worst_claim) = (0, 0);
    let flushes = db.stats().flushes;
    for k in n..n + 150_000 {
        c.put(&k.to_be_bytes(), &val[..16]).unwrap();
        if k % 10 == 0 {
            // Stats are not one atomic snapshot: a flush finishing between its
            // memtable and cache reads would show the flushed memtable beside the
            // grown caches. Without puts memtables only shrink, so pairing the caches
            // with the memtables of a second, later snapshot is a sound bound.
            let (s, later) = (db.stats(), db.stats());
            peak = peak.max(s.memory_bytes);
            let claim = s.block_cache_capacity
                + s.index_cache_capacity
                + s.head_cache_capacity
                + later.memtable_bytes;
            worst_claim = worst_claim.max(claim);
        }
    }
    assert!(
        db.stats().flushes >= flushes + 2,
        "the writes rotated memtables twice"
    );
    assert!(
        worst_claim <= budget,
        "cache capacity + memtables reached {worst_claim}, over the budget {budget}"
    );
    assert!(
        peak <= budget,
        "accounted memory {peak} over the budget {budget}"
    );
    println!(
        "budget {budget}: idle caches {caches} (fixed split: {}); writing: peak accounted \
         memory {peak}, peak cache capacity + memtables {worst_claim}",
        budget - write_cache
    );
}

/// Waits (up to a minute) until `done` holds for the stats.
fn stats_when(
    db: &Db,
    what: &str,
    done: impl Fn(&basalt_engine::Stats) -> bool,
) -> basalt_engine::Stats {
    let start = std::time::Instant::now();
    loop {
        let s = db.stats();
        if done(&s) {
            return s;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "{what}: not within a minute"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Waits for the index-cache warm-up (at open, or of a merge's output) to finish.
fn warmed(db: &Db) -> basalt_engine::Stats {
    stats_when(db, "index warm-up finished", |s| !s.index_cache_warming)
}

/// Index-cache misses during 3000 random gets of keys `0..n`.
fn index_misses_of_random_gets(db: &Db, n: u64) -> u64 {
    let c = db.collection("c").unwrap();
    let before = db.stats().index_cache_misses;
    let mut rng = Rng(9);
    for _ in 0..3000 {
        let k = rng.next() % n;
        assert_eq!(c.get(&k.to_be_bytes()).unwrap(), Some(value(k, 0)));
    }
    db.stats().index_cache_misses - before
}

#[test]
fn a_reopened_engine_finds_its_index_already_in_the_cache() {
    let n = 60_000;
    let o = Options {
        memory_budget: 32 << 20,
        ..opts(IoBackend::IoUring)
    };
    let (dir, db) = loaded(o.clone(), n);
    drop(db);
    let db = Db::open(dir.path(), o.clone()).unwrap();
    let s = warmed(&db);
    assert!(s.index_runs >= 1);
    assert!(
        s.index_cache_warmed_bytes > 0 && s.index_cache_warmed_bytes <= s.index_disk_bytes,
        "warmed {} of {} index bytes",
        s.index_cache_warmed_bytes,
        s.index_disk_bytes
    );
    let warm = index_misses_of_random_gets(&db, n);
    let warmed_bytes = s.index_cache_warmed_bytes;
    drop(db);
    let cold_opts = Options {
        warm_index_cache: false,
        ..o
    };
    let db = Db::open(dir.path(), cold_opts).unwrap();
    assert!(!db.stats().index_cache_warming);
    let cold = index_misses_of_random_gets(&db, n);
    let s = db.stats();
    assert_eq!(s.index_cache_warmed_bytes, 0);
    println!(
        "index {} bytes: warmed at open {warmed_bytes} bytes; index misses in 3000 gets: {warm} warmed, {cold} cold",
        s.index_disk_bytes
    );
    assert_eq!(warm, 0, "gets after the warm-up missed the index cache");
    assert!(
        cold > 100,
        "cold gets missed the index cache only {cold} times"
    );
}

/// Waits until the index cache has been warmed past `bytes` and the warm-up is idle.
fn warmed_past(db: &Db, bytes: u64) -> basalt_engine::Stats {
    stats_when(db, &format!("index warm-up past {bytes} bytes"), |s| {
        s.index_cache_warmed_bytes > bytes && !s.index_cache_warming
    })
}

/// Overwrites every key of `0..n` with the same value, then merges the whole index.
fn rewrite_and_merge(db: &Db, n: u64) {
    let c = db.collection("c").unwrap();
    for k in 0..n {
        c.put(&k.to_be_bytes(), &value(k, 0)).unwrap();
    }
    db.wait_for_gc().unwrap();
}

#[test]
fn a_merge_output_is_warmed_into_the_index_cache_only_while_reads_run() {
    let n = 60_000;
    let o = Options {
        memory_budget: 32 << 20,
        ..opts(IoBackend::IoUring)
    };
    let (_dir, db) = loaded(o, n);
    let w0 = warmed(&db).index_cache_warmed_bytes;
    // No reads yet: the merge's output is not read back.
    rewrite_and_merge(&db, n);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let s = warmed(&db);
    assert_eq!(
        s.index_cache_warmed_bytes, w0,
        "a merge with no reads before it warmed its output"
    );
    // Its inputs' blocks left the cache and its own are not there: lookups miss.
    let cold = index_misses_of_random_gets(&db, n);
    // Reads ran since: the next merges' outputs are read into the cache (GC's copies
    // make `wait_for_gc` merge more than once, with no read in between).
    rewrite_and_merge(&db, n);
    let s = warmed_past(&db, w0);
    let warm = index_misses_of_random_gets(&db, n);
    println!(
        "index {} bytes; after a merge, index misses in 3000 gets: {cold} not warmed, \
         {warm} warmed ({} bytes warmed)",
        s.index_disk_bytes,
        s.index_cache_warmed_bytes - w0
    );
    assert!(
        cold > 100,
        "gets after an unwarmed merge missed only {cold} times"
    );
    assert_eq!(warm, 0, "gets after a warmed merge missed the index cache");
}

#[test]
fn the_index_warm_up_stops_at_the_index_caches_budget() {
    let budget: u64 = 8 << 20;
    let (dir, db) = open_with_budget(budget);
    let c = db.create_collection("c").unwrap();
    // About 10 bytes of index per key: an index three times the cache.
    let n = 1_200_000u64;
    for k in 0..n {
        c.put(&k.to_be_bytes(), b"v").unwrap();
    }
    db.flush().unwrap();
    let o = db.options().clone();
    drop((c, db));
    let db = Db::open(dir.path(), o).unwrap();
    let s = warmed(&db);
    println!(
        "index {} bytes, index cache {} bytes: warmed {} bytes, memory {} of {budget}",
        s.index_disk_bytes, s.index_cache_capacity, s.index_cache_warmed_bytes, s.memory_bytes
    );
    assert!(
        s.index_disk_bytes > s.index_cache_capacity,
        "the index must be larger than its cache for this test"
    );
    assert!(s.index_cache_warmed_bytes > s.index_cache_capacity / 2);
    assert!(s.index_cache_warmed_bytes <= s.index_cache_capacity);
    assert!(
        s.memory_bytes <= budget,
        "memory {} over budget",
        s.memory_bytes
    );
}

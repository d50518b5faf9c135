//! GC's memory does not grow with the victim: collecting a segment that holds 48 MiB
//! of live records keeps one read chunk and one commit piece of it in memory, not the
//! records (which it once gathered all at once, hundreds of MiB above the budget with
//! large segments). The process's heap is measured by a counting allocator.

use basalt_engine::{Compression, Db, Options};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, counting bytes in use and their peak.
struct Counting;

static IN_USE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = IN_USE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const MIB: usize = 1 << 20;

#[test]
fn collecting_a_segment_of_48_mib_live_records_holds_a_few_mib_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let budget = 16 * MIB;
    let db = Db::open(
        dir.path(),
        Options {
            segment_size: 64 << 20,
            memory_budget: budget as u64,
            background_gc: false,
            compression: Compression::None,
            ..Options::default()
        },
    )
    .unwrap();
    let c = db.create_collection("c").unwrap();
    // The first segment: 48 MiB of records that stay live, 12 MiB overwritten later.
    let value = vec![7u8; 1000];
    let live = 48 * MIB / 1024;
    for k in 0..live {
        c.put(format!("live{k:08}").as_bytes(), &value).unwrap();
    }
    for round in 0..2 {
        for k in 0..12 * MIB / 1024 {
            c.put(format!("hot{k:08}").as_bytes(), &[round; 1000])
                .unwrap();
        }
    }
    db.flush().unwrap();
    let before = IN_USE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    assert!(
        db.gc_force_one().unwrap(),
        "the first segment was collected"
    );
    let grew = PEAK.load(Ordering::Relaxed) - before;
    let s = db.stats();
    println!(
        "GC moved {} MiB; the heap grew by at most {:.1} MiB over {:.1} MiB in use (budget {} MiB)",
        s.gc_bytes_moved / MIB as u64,
        grew as f64 / MIB as f64,
        before as f64 / MIB as f64,
        budget / MIB
    );
    assert!(s.gc_bytes_moved >= 40 * MIB as u64, "{s:?}");
    assert!(
        grew < budget,
        "GC grew the heap by {grew} bytes: more than the memory budget"
    );
    for k in (0..live).step_by(97) {
        assert_eq!(
            c.get(format!("live{k:08}").as_bytes()).unwrap().unwrap(),
            value
        );
    }
}

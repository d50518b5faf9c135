//! `basalt`: run, mount, serve, inspect, check and repair a Basalt store.

/// mimalloc instead of glibc malloc: the engine allocates on one thread and frees on
/// another (memtables built by writers are dropped by the flush thread, cached
/// blocks are evicted by whichever reader inserts next). glibc serves those frees
/// under the owning arena's lock and keeps the freed memory in per-thread arenas, so
/// resident memory drifts far above the engine's accounted budget.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    if let Err(e) = basalt_fusefs::disable_transparent_huge_pages() {
        eprintln!("basalt: cannot turn transparent huge pages off: {e}");
    }
    std::process::exit(basalt_appliance::main_entry());
}

//! A software prefetch hint: batched lookups ask for the memory of several keys
//! before touching any of it, so their cache misses overlap instead of queueing.

/// Asks the CPU to fetch the cache line holding `p` into every cache level. Only a
/// hint: it never faults, even for a dangling or out-of-bounds pointer.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults or changes memory, whatever the address.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

//! The index-cache warm-up at open: a background thread reads the index runs'
//! blocks, newest run first, in large sequential reads into the index cache until it
//! is full (never evicting), then exits. Without it, every first lookup of an index
//! block after an open is a 4 KiB device read the key's data read waits behind: on a
//! 60 MiB budget over 1.2 GiB of data, `multireadrandom` ran at a fifth of its steady
//! rate for its first second and at half for its second.

use crate::db::Inner;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Body of the warm-up thread (started at open when `Options::warm_index_cache`).
pub(crate) fn warm_index_thread(inner: &Arc<Inner>) {
    let v = inner.version.read().clone();
    for run in &v.runs {
        match run.warm(&inner.shutdown) {
            Ok((bytes, full)) => {
                inner
                    .stats
                    .index_warm_bytes
                    .fetch_add(bytes, Ordering::Relaxed);
                if full {
                    break;
                }
            }
            Err(e) => {
                tracing::warn!(
                    "index cache warm-up stopped at {}: {e}",
                    run.path().display()
                );
                break;
            }
        }
    }
    inner.stats.index_warming.store(false, Ordering::Relaxed);
}

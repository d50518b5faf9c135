//! Index-cache warm-up: a background thread reads index runs' blocks in large
//! sequential reads into the index cache while it has room (never evicting).
//!
//! At open it reads every run, newest first. Without it, every first lookup of an
//! index block after an open is a 4 KiB device read the key's data read waits behind:
//! on a 60 MiB budget over 1.2 GiB of data, `multireadrandom` ran at a fifth of its
//! steady rate for its first second and at half for its second.
//!
//! Then it warms each merge's output ([`after_merge`]): a merge replaces its inputs'
//! cached blocks with a run none of whose blocks is cached, so without it every lookup
//! after a merge paid an index-block read until the cache had refilled. It does so only
//! while reads run (a merge found gets since the previous merge within the last
//! [`READS_RECENT`]), so a workload without reads does not pay for reading the index
//! back.

use crate::db::Inner;
use crate::index_run::Run;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long after a merge last saw reads merge outputs are still warmed (merges can
/// follow each other with no read between them while readers are still there).
pub const READS_RECENT: Duration = Duration::from_secs(10);

/// Body of the warm-up thread (started at open when `Options::warm_index_cache`).
pub(crate) fn warm_index_thread(inner: &Arc<Inner>) {
    let runs = inner.version.read().runs.clone();
    warm_runs(inner, &runs);
    drop(runs);
    loop {
        // Idle unless a request came meanwhile (`after_merge` sets the flag with its
        // request, under the same lock).
        {
            let pending = inner.warm_request.lock();
            if pending.is_none() {
                inner.stats.index_warming.store(false, Ordering::Relaxed);
            }
        }
        let run = loop {
            if inner.shutdown.load(Ordering::SeqCst) {
                return;
            }
            if let Some(run) = inner.warm_request.lock().take() {
                break run;
            }
            let mut g = inner.bg_mutex.lock();
            inner.bg_cond.wait_for(&mut g, Duration::from_millis(100));
        };
        if !run.is_obsolete() {
            warm_runs(inner, &[run]);
        }
    }
}

/// Reads `runs`' blocks in order into the index cache until it is full.
fn warm_runs(inner: &Inner, runs: &[Arc<Run>]) {
    for run in runs {
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
}

/// After a merge installed `output` in place of `inputs`: the inputs' blocks leave the
/// index cache now (a reader still holding an input reads its blocks again), and while
/// reads run the warm-up thread is asked to read `output` into the room they leave.
pub(crate) fn after_merge(inner: &Inner, output: Option<&Arc<Run>>, inputs: &[Arc<Run>]) {
    let ids: Vec<u64> = inputs.iter().map(|r| r.id).collect();
    inner.index_cache.retain(|(id, _)| !ids.contains(id));
    let gets = inner.stats.gets.load(Ordering::Relaxed);
    let reads_recent = {
        let mut seen = inner.reads_at_merge.lock();
        if gets != seen.0 {
            *seen = (gets, Some(Instant::now()));
        }
        seen.1.is_some_and(|t| t.elapsed() < READS_RECENT)
    };
    if let Some(run) = output.filter(|_| inner.opts.warm_index_cache && reads_recent) {
        let mut request = inner.warm_request.lock();
        *request = Some(run.clone());
        inner.stats.index_warming.store(true, Ordering::Relaxed);
        drop(request);
        inner.bg_cond.notify_all();
    }
}

//! Engine reads off the FUSE worker threads, batched, so that a few workers (one per
//! core) keep many device reads in flight (fio at iodepth 16 sends 16 reads at once)
//! without a thread per outstanding read.
//!
//! A read is handled on the worker that received it when no other read is in flight
//! and the mount has other workers: at queue depth 1 a hand-off would only add a
//! wake-up to the latency, and another worker keeps taking the kernel's requests
//! meanwhile. With a single worker every read is queued: served on it, fio's reads at
//! iodepth 16 went to the device one at a time (about 5k IOPS instead of 14-18k on this
//! project's VM). Otherwise a read is queued and the worker returns to `/dev/fuse` at
//! once. A pool thread takes everything queued (up to [`MAX_BATCH`]) and hands it to
//! the work function as one batch, which the filesystem turns into one engine
//! `multi_get` (one io_uring submission).
//!
//! The work function replies to each read as soon as its bytes are there, not after
//! the batch: a reply lets the application send its next read, which another pool
//! thread takes while this batch's slower reads are still in flight. Before replying
//! it marks the read [`Finished::one`]: a reply wakes the reader, whose next read must
//! find nothing in flight to be served inline.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Most reads handed to the work function at once.
pub const MAX_BATCH: usize = 64;

/// The work function's way to say that one read of its batch is done.
pub struct Finished<'a> {
    in_flight: &'a AtomicUsize,
    left: std::cell::Cell<usize>,
}

impl Finished<'_> {
    /// One read of the batch is done: it no longer counts as in flight. Call before
    /// replying; calls beyond the batch's size are ignored.
    pub fn one(&self) {
        let left = self.left.get();
        if left > 0 {
            self.left.set(left - 1);
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Handles a batch of jobs, saying when each is done.
type Work<J> = dyn Fn(Vec<J>, &Finished<'_>) + Send + Sync;

/// What the pool runs: `work` handles a batch of jobs, saying when each is done.
struct Stages<J> {
    work: Box<Work<J>>,
    in_flight: AtomicUsize,
}

impl<J> Stages<J> {
    fn handle(&self, batch: Vec<J>) {
        let done = Finished {
            in_flight: &self.in_flight,
            left: std::cell::Cell::new(batch.len()),
        };
        (self.work)(batch, &done);
        // Reads the work function did not mark stop counting now.
        self.in_flight.fetch_sub(done.left.get(), Ordering::AcqRel);
    }
}

/// A fixed set of threads feeding queued jobs to a batch work function.
pub struct ReadPool<J: Send + 'static> {
    /// A lone read may be served on the calling thread.
    inline: bool,
    /// Jobs handed to [`ReadPool::run`], and how many of them went to a pool thread.
    handed: AtomicU64,
    queued: AtomicU64,
    tx: Mutex<Option<Sender<J>>>,
    stages: Arc<Stages<J>>,
    threads: Vec<JoinHandle<()>>,
}

impl<J: Send + 'static> ReadPool<J> {
    /// Starts `threads` pool threads (at least one) serving batches with `work`, which
    /// calls [`Finished::one`] as each job of its batch is done. With `inline`, a job
    /// arriving while none is in flight is handled on the calling thread.
    pub fn new(
        threads: usize,
        inline: bool,
        work: impl Fn(Vec<J>, &Finished<'_>) + Send + Sync + 'static,
    ) -> Self {
        let (tx, rx) = channel::<J>();
        let rx = Arc::new(Mutex::new(rx));
        let stages = Arc::new(Stages {
            work: Box::new(work),
            in_flight: AtomicUsize::new(0),
        });
        let threads = (0..threads.max(1))
            .map(|i| {
                let (rx, stages) = (Arc::clone(&rx), Arc::clone(&stages));
                std::thread::Builder::new()
                    .name(format!("basalt-read-{i}"))
                    .spawn(move || serve(&rx, &stages))
                    .expect("spawn a reader thread")
            })
            .collect();
        ReadPool {
            inline,
            handed: AtomicU64::new(0),
            queued: AtomicU64::new(0),
            tx: Mutex::new(Some(tx)),
            stages,
            threads,
        }
    }

    /// Handles `job` here when inline handling is on and no other job is in flight,
    /// else queues it.
    pub fn run(&self, job: J) {
        self.handed.fetch_add(1, Ordering::Relaxed);
        if self.stages.in_flight.fetch_add(1, Ordering::AcqRel) == 0 && self.inline {
            return self.stages.handle(vec![job]);
        }
        self.queued.fetch_add(1, Ordering::Relaxed);
        let tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        let rejected = match tx.as_ref() {
            Some(tx) => tx.send(job).err().map(|e| e.0),
            None => Some(job),
        };
        drop(tx);
        if let Some(job) = rejected {
            self.stages.handle(vec![job]);
        }
    }

    /// `{"reads": jobs handed to the pool, "queued": of which a pool thread served}`
    /// (the rest ran on the thread that handed them), for `/.basalt/stats.json`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "reads": self.handed.load(Ordering::Relaxed),
            "queued": self.queued.load(Ordering::Relaxed),
        })
    }

    /// Jobs being worked on or queued right now.
    #[cfg(test)]
    pub fn in_flight(&self) -> usize {
        self.stages.in_flight.load(Ordering::Acquire)
    }
}

fn serve<J>(rx: &Mutex<Receiver<J>>, stages: &Stages<J>) {
    loop {
        let batch = {
            let rx = rx.lock().unwrap_or_else(|e| e.into_inner());
            let Ok(first) = rx.recv() else { return };
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(j) => batch.push(j),
                    Err(_) => break,
                }
            }
            batch
        };
        stages.handle(batch);
    }
}

impl<J: Send + 'static> Drop for ReadPool<J> {
    /// Lets queued jobs finish, then stops the threads.
    fn drop(&mut self) {
        self.tx.lock().unwrap_or_else(|e| e.into_inner()).take();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::SyncSender;
    use std::sync::Barrier;
    use std::thread::ThreadId;

    /// Each job reports (its number, the handling thread, the batch size it came in).
    type Seen = (u32, ThreadId, usize);

    type Job = (u32, Arc<Barrier>);

    fn reporting_pool(threads: usize, inline: bool, tx: SyncSender<Seen>) -> ReadPool<Job> {
        let tx = Mutex::new(tx);
        ReadPool::new(
            threads,
            inline,
            move |batch: Vec<Job>, done: &Finished<'_>| {
                let len = batch.len();
                let me = std::thread::current().id();
                for (n, gate) in batch {
                    gate.wait();
                    done.one();
                    tx.lock().unwrap().send((n, me, len)).unwrap();
                }
            },
        )
    }

    #[test]
    fn a_lone_read_is_handled_on_the_calling_thread() {
        let (tx, rx) = std::sync::mpsc::sync_channel(16);
        let pool = reporting_pool(2, true, tx);
        pool.run((7, Arc::new(Barrier::new(1))));
        assert_eq!(rx.recv().unwrap(), (7, std::thread::current().id(), 1));
        assert_eq!(pool.in_flight(), 0);
        assert_eq!(pool.to_json(), serde_json::json!({"reads": 1, "queued": 0}));
    }

    #[test]
    fn without_inline_handling_a_lone_read_goes_to_a_pool_thread() {
        let (tx, rx) = std::sync::mpsc::sync_channel(16);
        let pool = reporting_pool(1, false, tx);
        pool.run((7, Arc::new(Barrier::new(1))));
        let (n, thread, batch) = rx.recv().unwrap();
        assert_eq!((n, batch), (7, 1));
        assert_ne!(thread, std::thread::current().id(), "handled on the caller");
        assert_eq!(pool.to_json(), serde_json::json!({"reads": 1, "queued": 1}));
        drop(pool);
    }

    #[test]
    fn a_read_marked_done_stops_counting_as_in_flight_while_its_batch_goes_on() {
        // Job 1 is marked done, then the work function holds (standing for job 2's
        // read still in flight) until the test has looked.
        let (reached, release) = (Arc::new(Barrier::new(2)), Arc::new(Barrier::new(2)));
        let pool = Arc::new({
            let (reached, release) = (Arc::clone(&reached), Arc::clone(&release));
            ReadPool::new(1, true, move |batch: Vec<u32>, done: &Finished<'_>| {
                for _ in batch {
                    done.one();
                    reached.wait();
                    release.wait();
                }
            })
        });
        let caller = {
            let pool = Arc::clone(&pool);
            std::thread::spawn(move || pool.run(1))
        };
        reached.wait();
        assert_eq!(pool.in_flight(), 0, "in flight after it was marked done");
        release.wait();
        caller.join().unwrap();
    }

    #[test]
    fn reads_the_work_function_does_not_mark_stop_counting_when_it_returns() {
        let pool = ReadPool::new(1, true, |_: Vec<u32>, done: &Finished<'_>| {
            // Marks more than the batch holds: the extra calls are ignored.
            for _ in 0..5 {
                done.one();
            }
        });
        pool.run(1);
        assert_eq!(pool.in_flight(), 0);
        let lazy = ReadPool::new(1, true, |_: Vec<u32>, _: &Finished<'_>| {});
        lazy.run(1);
        assert_eq!(lazy.in_flight(), 0);
    }

    #[test]
    fn reads_queued_behind_a_busy_one_reach_the_handler_as_one_batch() {
        let (tx, rx) = std::sync::mpsc::sync_channel(16);
        let pool = Arc::new(reporting_pool(1, true, tx));
        // Job 0 blocks its caller until released, so jobs 1..=5 queue up behind it.
        let release = Arc::new(Barrier::new(2));
        let first = {
            let (pool, release) = (Arc::clone(&pool), Arc::clone(&release));
            std::thread::spawn(move || pool.run((0, release)))
        };
        while pool.in_flight() == 0 {
            std::thread::yield_now();
        }
        // Job 1 holds the only pool thread until `gate` opens, so jobs 2..=5 queue.
        let gate = Arc::new(Barrier::new(2));
        pool.run((1, Arc::clone(&gate)));
        for n in 2..=5 {
            pool.run((n, Arc::new(Barrier::new(1))));
        }
        gate.wait();
        release.wait();
        first.join().unwrap();
        let mut seen: Vec<Seen> = (0..6).map(|_| rx.recv().unwrap()).collect();
        seen.sort_by_key(|s| s.0);
        assert_eq!(seen[0].2, 1, "the first read is handled alone, inline");
        assert!(
            seen[1..].iter().all(|s| s.1 != std::thread::current().id()),
            "queued reads are handled on the pool"
        );
        let batched: usize = seen[1..].iter().map(|s| s.2).max().unwrap();
        assert!(batched > 1, "queued reads come as a batch: {seen:?}");
        drop(pool);
    }

    #[test]
    fn every_queued_read_is_handled_before_the_pool_is_gone() {
        let (tx, rx) = std::sync::mpsc::sync_channel(64);
        let pool = reporting_pool(2, true, tx);
        let release = Arc::new(Barrier::new(2));
        std::thread::scope(|s| {
            let (pool, held) = (&pool, Arc::clone(&release));
            s.spawn(move || pool.run((0, held)));
            while pool.in_flight() == 0 {
                std::thread::yield_now();
            }
            for n in 1..=20 {
                pool.run((n, Arc::new(Barrier::new(1))));
            }
            release.wait();
        });
        drop(pool);
        let mut got: Vec<u32> = rx.try_iter().map(|s| s.0).collect();
        got.sort();
        assert_eq!(got, (0..=20).collect::<Vec<_>>());
    }
}

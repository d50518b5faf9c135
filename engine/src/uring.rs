//! The io_uring read backend: one ring per thread (readers never share a submission
//! queue or its lock) and batches of aligned reads submitted with one
//! `io_uring_enter` each, so a `multi_get` keeps the SSD's queue full.

use crate::aligned::AlignedBuf;
use crate::error::{Error, Result};
use crate::io::DataFile;
use io_uring::{opcode, types, IoUring};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Ring size per thread; larger batches are submitted in chunks of this many.
pub const RING_ENTRIES: usize = 64;

thread_local! {
    static RING: RefCell<Option<IoUring>> = const { RefCell::new(None) };
}

/// Whether this kernel (and seccomp policy) lets us create a ring.
pub fn available() -> bool {
    IoUring::new(4).is_ok()
}

/// Histogram of reads in flight per submission: 1, 2-3, 4-7, 8-15, 16-31, 32-63, 64+.
#[derive(Default, Debug)]
pub struct QueueDepthHistogram {
    pub buckets: [AtomicU64; 7],
}

impl QueueDepthHistogram {
    pub fn record(&self, depth: usize) {
        let i = (usize::BITS - depth.max(1).leading_zeros() - 1).min(6) as usize;
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
    }

    /// `(label, count)` pairs for reporting.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        const LABELS: [&str; 7] = ["1", "2-3", "4-7", "8-15", "16-31", "32-63", "64+"];
        LABELS
            .iter()
            .zip(&self.buckets)
            .map(|(l, b)| (*l, b.load(Ordering::Relaxed)))
            .collect()
    }
}

/// One aligned read: `buf.len()` bytes at `off` of `file`; `done` gets the byte count.
pub struct ReadReq<'a> {
    pub file: &'a DataFile,
    pub off: u64,
    pub buf: AlignedBuf,
    pub done: usize,
}

/// Executes all reads on this thread's ring and hands each finished read to
/// `on_done(index)` as its completion arrives, so the caller verifies and decodes
/// one block while the device still works on the others. Every submitted read has
/// completed before this returns (also on error), so no buffer is freed under the
/// kernel. After the first error (IO or from `on_done`) the remaining reads are
/// drained but not handed on.
pub fn read_batch(
    reqs: &mut [ReadReq<'_>],
    qd: &QueueDepthHistogram,
    mut on_done: impl FnMut(usize, &ReadReq<'_>) -> Result<()>,
) -> Result<()> {
    RING.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            let ring = IoUring::new(RING_ENTRIES as u32).map_err(|e| Error::io("io_uring", e))?;
            *slot = Some(ring);
        }
        let ring = slot.as_mut().expect("ring created above");
        let mut first_err: Option<Error> = None;
        for (c, chunk) in reqs.chunks_mut(RING_ENTRIES).enumerate() {
            {
                let mut sq = ring.submission();
                for (i, r) in chunk.iter_mut().enumerate() {
                    let e = opcode::Read::new(
                        types::Fd(r.file.raw_fd()),
                        r.buf.as_mut_ptr(),
                        r.buf.len() as u32,
                    )
                    .offset(r.off)
                    .build()
                    .user_data(i as u64);
                    // SAFETY: the buffer outlives the read: we wait for every completion below.
                    unsafe { sq.push(&e).expect("chunk fits the ring") };
                }
            }
            qd.record(chunk.len());
            let mut pending = chunk.len();
            while pending > 0 {
                match ring.submit_and_wait(1) {
                    Ok(_) => {}
                    Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                    Err(e) => return Err(Error::io("io_uring", e)),
                }
                for cqe in ring.completion() {
                    pending -= 1;
                    let i = cqe.user_data() as usize;
                    let r = &mut chunk[i];
                    if first_err.is_some() {
                        continue;
                    }
                    if cqe.result() < 0 {
                        let err = std::io::Error::from_raw_os_error(-cqe.result());
                        first_err = Some(Error::io(r.file.path(), err));
                        continue;
                    }
                    r.done = cqe.result() as usize;
                    r.file.account_read(r.done);
                    // A short read that is not at EOF: finish it with pread.
                    if r.done < r.buf.len() {
                        let done = r.done;
                        match r.file.read_full(&mut r.buf[done..], r.off + done as u64) {
                            Ok(n) => r.done += n,
                            Err(e) => {
                                first_err = Some(e);
                                continue;
                            }
                        }
                    }
                    if let Err(e) = on_done(c * RING_ENTRIES + i, r) {
                        first_err = Some(e);
                    }
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    })
}

//! Writes the log's full write buffers on a thread of its own, so that a writer fills
//! the next buffer while the device takes the last one. Under O_DIRECT a 1 MiB write
//! takes milliseconds, and tens of them while merges and GC use the same device; done
//! inline, that time landed on whichever write sealed the block that filled the buffer.
//!
//! Writes go out one at a time in submission order (a buffer's trailing partial page
//! is written again, with more data, by the next one), at most [`MAX_IN_FLIGHT`] are
//! queued, and each advances its segment's `written_end` when it has landed, so
//! readers see a block as readable only once all of it is on the file.
//!
//! After a failed write the thread writes nothing more until the writer has collected
//! every queued buffer; the failed buffer and those after it are then written again,
//! in order, on the writer's thread, and the error that remains (e.g. ENOSPC while the
//! disk is still full) is returned there. Nothing after a hole is ever written.

use crate::aligned::{AlignedBuf, PAGE};
use crate::codec::align_up;
use crate::error::Result;
use crate::segments::Segment;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Buffers queued for the device at most; a writer that fills one more waits.
pub const MAX_IN_FLIGHT: usize = 3;

/// One buffer to write: `len` bytes of log from `start` (page aligned), zero padded
/// to the page.
pub struct Job {
    pub seg: Arc<Segment>,
    pub buf: AlignedBuf,
    pub start: u64,
    pub len: usize,
}

impl Job {
    /// Writes the buffer and marks its bytes readable.
    fn write(&self) -> Result<()> {
        write_log(&self.seg, &self.buf, self.start, self.len)
    }
}

/// Writes `len` bytes of log from `buf` at `start` (page aligned; `buf` zero padded to
/// the page) and marks them readable.
fn write_log(seg: &Segment, buf: &[u8], start: u64, len: usize) -> Result<()> {
    if let Some(e) = crate::failpoint::log_write_failure() {
        return Err(crate::error::Error::io(seg.file.path(), e));
    }
    let aligned = align_up(len as u64, PAGE as u64) as usize;
    seg.file.write_aligned(&buf[..aligned], start)?;
    seg.written_end
        .fetch_max(start + len as u64, Ordering::SeqCst);
    Ok(())
}

/// A finished job; `written` is false when it failed or was skipped after a failure.
struct Done {
    job: Job,
    written: bool,
}

/// The writer's side of the log IO thread. Owned by the log writer (behind its mutex).
pub struct LogIo {
    jobs: Option<Sender<Job>>,
    done: Receiver<Done>,
    /// Set by the thread after a failed write; cleared once nothing is in flight.
    failed: Arc<AtomicBool>,
    in_flight: usize,
    free: Vec<AlignedBuf>,
    /// Buffers not written (a failure, and those queued after it), in file order.
    retry: VecDeque<Job>,
    buf_size: usize,
    /// Buffers written on the writer's thread ([`Self::write_now`]), for tests.
    #[cfg(test)]
    written_inline: u64,
    thread: Option<JoinHandle<()>>,
}

impl LogIo {
    /// Starts the IO thread; buffers handed out are `buf_size` bytes.
    pub fn start(buf_size: usize) -> LogIo {
        let (jobs, rx) = channel::<Job>();
        let (tx, done) = channel();
        let failed = Arc::new(AtomicBool::new(false));
        let fail = failed.clone();
        let thread = std::thread::Builder::new()
            .name("basalt-log-io".into())
            .spawn(move || {
                for job in rx {
                    let written = !fail.load(Ordering::SeqCst) && job.write().is_ok();
                    if !written {
                        fail.store(true, Ordering::SeqCst);
                    }
                    if tx.send(Done { job, written }).is_err() {
                        break;
                    }
                }
            })
            .expect("spawn the log IO thread");
        LogIo {
            jobs: Some(jobs),
            done,
            failed,
            in_flight: 0,
            free: Vec::new(),
            retry: VecDeque::new(),
            buf_size,
            #[cfg(test)]
            written_inline: 0,
            thread: Some(thread),
        }
    }

    /// A buffer to fill next. Collects finished writes; waits for one if
    /// [`MAX_IN_FLIGHT`] are queued. Errors of earlier writes surface here.
    pub fn buffer(&mut self) -> Result<AlignedBuf> {
        while let Ok(d) = self.done.try_recv() {
            self.collect(d);
        }
        if self.in_flight >= MAX_IN_FLIGHT {
            let d = self.done.recv().expect("log IO thread alive");
            self.collect(d);
        }
        if !self.retry.is_empty() {
            self.wait_all()?;
        }
        Ok(self
            .free
            .pop()
            .unwrap_or_else(|| AlignedBuf::zeroed(self.buf_size)))
    }

    /// Queues a write; call [`Self::buffer`] first (it settles earlier failures).
    pub fn submit(&mut self, job: Job) {
        debug_assert!(self.retry.is_empty());
        self.in_flight += 1;
        self.jobs
            .as_ref()
            .expect("log IO running")
            .send(job)
            .expect("log IO thread alive");
    }

    /// Waits until every queued write has landed, then writes again (on this thread,
    /// in order) any that failed; returns the error that remains.
    pub fn wait_all(&mut self) -> Result<()> {
        while self.in_flight > 0 {
            let d = self.done.recv().expect("log IO thread alive");
            self.collect(d);
        }
        self.failed.store(false, Ordering::SeqCst);
        while let Some(job) = self.retry.front() {
            job.write()?;
            let job = self.retry.pop_front().expect("front exists");
            self.free.push(job.buf);
        }
        Ok(())
    }

    /// Writes a buffer on this thread, after every queued write has landed (so the
    /// order holds): what a sync waits for anyway, without handing the last write to
    /// the IO thread and being woken when it lands (two thread wake-ups per synced
    /// commit). `buf` is zero padded to the page.
    pub fn write_now(&mut self, seg: &Segment, buf: &[u8], start: u64, len: usize) -> Result<()> {
        self.wait_all()?;
        write_log(seg, buf, start, len)?;
        #[cfg(test)]
        {
            self.written_inline += 1;
        }
        Ok(())
    }

    /// Buffers written by [`Self::write_now`] so far.
    #[cfg(test)]
    pub fn written_inline(&self) -> u64 {
        self.written_inline
    }

    fn collect(&mut self, d: Done) {
        self.in_flight -= 1;
        if d.written {
            self.free.push(d.job.buf);
        } else {
            self.retry.push_back(d.job);
        }
    }
}

impl Drop for LogIo {
    /// Lets queued writes finish, then stops the thread.
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::ClockCache;
    use crate::error::Error;
    use crate::io::{DataFile, IoCounters, IoMode};
    use crate::segments::SegmentCaches;
    use std::path::Path;
    use std::process::Command;

    const CHUNK: usize = 64 << 10;

    fn segment(path: &Path) -> Arc<Segment> {
        let file = DataFile::open(
            path,
            IoMode::Buffered,
            true,
            Arc::new(IoCounters::default()),
        )
        .unwrap();
        let caches = SegmentCaches {
            blocks: Arc::new(ClockCache::new(0)),
            heads: Arc::new(ClockCache::new(0)),
            recycler: Arc::new(crate::recycle::Recycler::open(
                path.parent().unwrap(),
                0,
                true,
            )),
        };
        let header = crate::segment::SegHeader::current(0);
        Arc::new(Segment::new(1, header, file, Vec::new(), false, 0, caches))
    }

    /// Queues chunks `from..n` of `CHUNK` bytes at `i * CHUNK`, chunk `i` filled with
    /// byte `i + 1`; the last one is `CHUNK - 100` bytes long (a partial page at the
    /// end). Returns how far it got and the error that stopped it.
    fn queue(io: &mut LogIo, seg: &Arc<Segment>, from: usize, n: usize) -> (usize, Result<()>) {
        for i in from..n {
            let mut buf = match io.buffer() {
                Ok(b) => b,
                Err(e) => return (i, Err(e)),
            };
            let len = if i + 1 == n { CHUNK - 100 } else { CHUNK };
            buf[..CHUNK].fill(0);
            buf[..len].fill(i as u8 + 1);
            io.submit(Job {
                seg: seg.clone(),
                buf,
                start: (i * CHUNK) as u64,
                len,
            });
            assert!(io.in_flight <= MAX_IN_FLIGHT, "{} queued", io.in_flight);
        }
        (n, Ok(()))
    }

    fn expected(n: usize) -> Vec<u8> {
        let mut v = Vec::new();
        for i in 0..n {
            let len = if i + 1 == n { CHUNK - 100 } else { CHUNK };
            v.extend(std::iter::repeat_n(i as u8 + 1, len));
        }
        v.resize(n * CHUNK, 0);
        v
    }

    #[test]
    fn buffers_land_in_order_with_at_most_three_queued_and_mark_their_bytes_readable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seg");
        let seg = segment(&path);
        let mut io = LogIo::start(CHUNK);
        queue(&mut io, &seg, 0, 20).1.unwrap();
        io.wait_all().unwrap();
        assert_eq!(io.in_flight, 0);
        let end = (20 * CHUNK - 100) as u64;
        assert_eq!(seg.written_end.load(Ordering::SeqCst), end);
        assert!(
            std::fs::read(&path).unwrap() == expected(20),
            "file differs"
        );
        assert!(
            io.free.len() <= MAX_IN_FLIGHT + 1,
            "{} buffers allocated for 20 writes",
            io.free.len()
        );
        println!("20 writes, {} buffers allocated", io.free.len());
    }

    /// A small tmpfs fills up part-way through the queued writes: nothing after the
    /// failed one reaches the file, the error comes back as ENOSPC, and once space is
    /// freed the same buffers are written in order.
    #[test]
    fn after_a_failed_write_nothing_later_lands_until_it_is_written_again() {
        if unsafe { libc::geteuid() } != 0 {
            println!("SKIP after_a_failed_write: needs root to mount a small tmpfs");
            return;
        }
        let base = tempfile::tempdir().unwrap();
        let mnt = base.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=512k", "tmpfs"])
            .arg(&mnt)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount tmpfs failed although running as root");
        struct Unmount<'a>(&'a Path);
        impl Drop for Unmount<'_> {
            fn drop(&mut self) {
                let _ = Command::new("umount").arg("-l").arg(self.0).status();
            }
        }
        let _u = Unmount(&mnt);
        let ballast = mnt.join("ballast");
        std::fs::write(&ballast, vec![0xAA; 256 << 10]).unwrap();
        let path = mnt.join("seg");
        let seg = segment(&path);
        // Chunk 4's pages are allocated up front: written out of turn, it would land.
        let late = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&late, &[0u8; CHUNK], 4 * CHUNK as u64).unwrap();
        let mut io = LogIo::start(CHUNK);
        // 6 chunks into room for 3 more; `buffer` may already report the failure.
        let (sent, queued) = queue(&mut io, &seg, 0, 6);
        let err = queued.err().or_else(|| io.wait_all().err());
        let err = err.expect("the full tmpfs refused a write");
        assert!(matches!(err, Error::NoSpace { .. }), "{err}");
        let readable = seg.written_end.load(Ordering::SeqCst);
        assert_eq!(readable, 3 * CHUNK as u64, "chunks 0..3 fit");
        let on_file = std::fs::read(&path).unwrap();
        assert!(
            on_file[readable as usize..].iter().all(|&b| b == 0),
            "a chunk queued after the failed one reached the file"
        );
        assert!(io.wait_all().is_err(), "still full: still an error");
        assert_eq!(seg.written_end.load(Ordering::SeqCst), readable);
        let retried = io.retry.len();
        std::fs::remove_file(&ballast).unwrap();
        io.wait_all().unwrap();
        queue(&mut io, &seg, sent, 6).1.unwrap();
        io.wait_all().unwrap();
        assert!(std::fs::read(&path).unwrap() == expected(6), "file differs");
        assert_eq!(
            seg.written_end.load(Ordering::SeqCst),
            (6 * CHUNK - 100) as u64
        );
        println!(
            "ENOSPC after {readable} bytes with {sent} of 6 buffers queued; {retried} \
             written again in order once space was freed"
        );
    }
}

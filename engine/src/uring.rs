//! The read backends behind one [`Reader`] interface. io_uring: one ring per thread
//! (readers never share a submission queue or its lock); reads are queued as the
//! caller finds them and submitted in groups, so a `multi_get` keeps the SSD's queue
//! full while it still resolves keys. psync: one `pread` per read.
//!
//! Waiting for a completion can poll: the thread spins on its completion queue for up
//! to a budget instead of sleeping. A sleeping reader is woken by the completion
//! interrupt through the scheduler (on a VM an inter-processor interrupt and a halt
//! exit); a polling one sees the completion at once. Rings are set up with
//! `COOP_TASKRUN`, so the kernel posts a completion as task work without interrupting
//! the spinning thread and raises a flag, and the thread enters the kernel once to
//! collect it. A thread polls only while no other thread waits for a read (and at
//! most one per two cores): when another starts waiting, the poller goes to sleep too.

use crate::aligned::AlignedBuf;
use crate::error::{Error, Result};
use crate::io::DataFile;
use io_uring::{opcode, types, IoUring};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Ring size per thread; larger batches are submitted in chunks of this many.
pub const RING_ENTRIES: usize = 64;

thread_local! {
    static RING: RefCell<Option<IoUring>> = const { RefCell::new(None) };
    /// A second ring for a batch opened inside a batch (a `multi_get` reading the index
    /// blocks its lookups miss while its data reads are in flight on `RING`).
    static NESTED_RING: RefCell<Option<IoUring>> = const { RefCell::new(None) };
    static POLL_HERE: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
}

/// Lets this thread poll for its io_uring read completions (the default, within the
/// engine's `read_poll_micros`) or makes it always sleep. A thread that serves reads
/// while other work needs the CPU (a filesystem's read pool at high queue depth) should
/// sleep: its spinning would take a core from the threads that feed it.
pub fn poll_reads_on_this_thread(on: bool) {
    POLL_HERE.with(|p| p.set(on));
}

/// Whether this kernel (and seccomp policy) lets us create a ring.
pub fn available() -> bool {
    IoUring::new(4).is_ok()
}

/// A ring whose completions are posted without interrupting a polling thread
/// (`COOP_TASKRUN` with its flag, Linux 5.19), or a plain one on older kernels.
fn new_ring(entries: u32) -> Result<IoUring> {
    IoUring::builder()
        .setup_coop_taskrun()
        .setup_taskrun_flag()
        .build(entries)
        .or_else(|_| IoUring::new(entries))
        .map_err(|e| Error::io("io_uring", e))
}

/// Threads polling for a completion right now.
static POLLERS: AtomicUsize = AtomicUsize::new(0);
/// Threads waiting for a completion right now (polling or asleep).
static WAITERS: AtomicUsize = AtomicUsize::new(0);

/// One polling thread per two cores (at least one), so polling never takes every core.
fn max_pollers() -> usize {
    static MAX: OnceLock<usize> = OnceLock::new();
    *MAX.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1)))
}

/// A polling slot, given back on drop.
struct PollSlot;

impl PollSlot {
    /// A slot for a thread about to wait, if it is the only one waiting: when several
    /// threads wait at once, completions come often enough that sleeping costs little,
    /// and the CPU a spinner would burn serves the others.
    fn take_if_alone() -> Option<PollSlot> {
        if WAITERS.load(Ordering::Acquire) > 1 {
            return None;
        }
        Self::take()
    }

    fn take() -> Option<PollSlot> {
        POLLERS
            .fetch_update(Ordering::Acquire, Ordering::Relaxed, |n| {
                (n < max_pollers()).then_some(n + 1)
            })
            .ok()
            .map(|_| PollSlot)
    }
}

impl Drop for PollSlot {
    fn drop(&mut self) {
        POLLERS.fetch_sub(1, Ordering::Release);
    }
}

/// What the rings of one engine count.
#[derive(Default, Debug)]
pub struct RingCounters {
    pub queue_depth: QueueDepthHistogram,
    /// Waits for a completion that ended while polling.
    pub polled_waits: AtomicU64,
    /// Waits that slept (polling off, no polling slot free, or the budget ran out).
    pub slept_waits: AtomicU64,
    /// Reads that went to the device inside the read queued before them (see
    /// [`MAX_MERGED_BYTES`]).
    pub merged_reads: AtomicU64,
}

/// Histogram of device reads in flight per submission: 1, 2-3, 4-7, 8-15, 16-31, 32-63, 64+.
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

/// A read target: anything that names the file to read (a segment, or the file itself).
pub trait ReadTarget {
    fn data_file(&self) -> &DataFile;
}

impl ReadTarget for DataFile {
    fn data_file(&self) -> &DataFile {
        self
    }
}

impl<T: ReadTarget + ?Sized> ReadTarget for &T {
    fn data_file(&self) -> &DataFile {
        (**self).data_file()
    }
}

impl<T: ReadTarget + ?Sized> ReadTarget for std::sync::Arc<T> {
    fn data_file(&self) -> &DataFile {
        (**self).data_file()
    }
}

/// One aligned read: `buf.len()` bytes at `off` of `target`'s file; `done` gets the
/// byte count.
pub struct ReadReq<T> {
    pub target: T,
    pub off: u64,
    pub buf: AlignedBuf,
    pub done: usize,
    /// The read reached the device as part of the reads queued before it (it continued
    /// them in one file: one vectored read), so it cost no device read of its own.
    pub merged: bool,
}

impl<T: ReadTarget> ReadReq<T> {
    /// A read of the whole pages covering `len` bytes at `off`.
    pub fn covering(target: T, off: u64, len: u32) -> Self {
        let page = crate::aligned::PAGE as u64;
        let start = crate::codec::align_down(off, page);
        let end = crate::codec::align_up(off + len as u64, page);
        ReadReq {
            target,
            off: start,
            buf: AlignedBuf::for_read((end - start) as usize),
            done: 0,
            merged: false,
        }
    }

    /// A read of `len` bytes at `off` (both page-aligned) straight into the caller's
    /// memory at `dest`, with no buffer of its own.
    ///
    /// # Safety
    /// As [`AlignedBuf::borrowed`]: `dest` is page-aligned and valid for `len` bytes
    /// and stays so, untouched, until the reader this request is queued on has
    /// finished (or been dropped).
    pub unsafe fn into_place(target: T, off: u64, dest: *mut u8, len: usize) -> Self {
        debug_assert!(off.is_multiple_of(crate::aligned::PAGE as u64));
        ReadReq {
            target,
            off,
            // SAFETY: the caller's promise, passed on.
            buf: unsafe { AlignedBuf::borrowed(dest, len) },
            done: 0,
            merged: false,
        }
    }

    /// Reads with `pread` (the psync backend, and the finish of short reads).
    pub fn read_sync(&mut self) -> Result<()> {
        let done = self.done;
        let file = self.target.data_file();
        self.done += file.read_full(&mut self.buf[done..], self.off + done as u64)?;
        Ok(())
    }
}

/// What a reader calls with each finished read: its index (the number of reads
/// queued before it) and the request with its filled buffer.
pub type OnDone<'a, T> = dyn FnMut(usize, &ReadReq<T>) -> Result<()> + 'a;

/// The read backends behind one interface: queue reads, get each back as it finishes.
pub trait Reader<T> {
    /// Queues a read and lets the backend start it when it sees fit; finished reads
    /// may be handed to `on_done` meanwhile.
    fn push(&mut self, req: ReadReq<T>, on_done: &mut OnDone<'_, T>) -> Result<()>;
    /// Queues a read to be started with the next ones (a batch known in advance).
    fn queue(&mut self, req: ReadReq<T>, on_done: &mut OnDone<'_, T>) -> Result<()>;
    /// Completes every read queued so far, handing each to `on_done`; returns the
    /// first error of a read or of `on_done`.
    fn finish(&mut self, on_done: &mut OnDone<'_, T>) -> Result<()>;
    /// Returns the finished reads' buffers to this thread's pool.
    fn recycle(&mut self);
}

/// The `pread` backend: every read runs when it is queued.
pub struct SyncReader<T> {
    reqs: Vec<ReadReq<T>>,
}

impl<T> Default for SyncReader<T> {
    fn default() -> Self {
        SyncReader { reqs: Vec::new() }
    }
}

impl<T: ReadTarget> Reader<T> for SyncReader<T> {
    fn push(&mut self, mut req: ReadReq<T>, on_done: &mut OnDone<'_, T>) -> Result<()> {
        req.read_sync()?;
        on_done(self.reqs.len(), &req)?;
        self.reqs.push(req);
        Ok(())
    }

    fn queue(&mut self, req: ReadReq<T>, on_done: &mut OnDone<'_, T>) -> Result<()> {
        self.push(req, on_done)
    }

    fn finish(&mut self, _: &mut OnDone<'_, T>) -> Result<()> {
        Ok(())
    }

    fn recycle(&mut self) {
        for r in self.reqs.drain(..) {
            r.buf.recycle();
        }
    }
}

/// Reads not yet submitted are pushed to the kernel once this many have queued up
/// (or at once while the device has nothing in flight), so that one `io_uring_enter`
/// (and one doorbell write, which costs a VM exit on a virtual disk) covers several.
pub const SUBMIT_GROUP: usize = 8;

/// Reads queued one after another that are adjacent in one file (the next starts
/// where the last ends, or inside its last pages and goes on past it: blocks that
/// share a page) go to the device as one vectored read (`READV` into each read's own
/// buffer; a shared page is read once and copied), up to this many bytes and
/// [`MAX_MERGED_READS`] reads: a filesystem's 1 MiB read of sixteen 64 KiB chunks
/// written in order is one device request instead of sixteen. Each read is still
/// handed on by itself, when the whole vectored read has landed.
pub const MAX_MERGED_BYTES: usize = 2 << 20;
/// Most reads in one vectored read.
pub const MAX_MERGED_READS: usize = 64;

/// How each read of a merged group gets its bytes: `(shared, from)` per read, in
/// order: its first `shared` bytes are also covered by read `from` of the group (the
/// one reaching furthest so far), which the device read fills and they are copied
/// from; the rest comes from the device in turn. A read wholly inside the group so
/// far has all its bytes shared.
fn group_layout<T>(reqs: &[ReadReq<T>], first: usize, count: usize) -> Vec<(usize, usize)> {
    let mut front = first;
    let mut end = reqs[first].off;
    (first..first + count)
        .map(|i| {
            let r = &reqs[i];
            let r_end = r.off + r.buf.len() as u64;
            let shared = (end.min(r_end).saturating_sub(r.off)) as usize;
            let from = front;
            if r_end > end {
                (front, end) = (i, r_end);
            }
            (shared, from)
        })
        .collect()
}

/// Reads `first..first + count` of a batch, adjacent, going to the device as one.
struct Group {
    first: usize,
    count: usize,
    /// The reads' buffers, for a vectored read; kept until its completion.
    iovecs: Vec<libc::iovec>,
    /// [`group_layout`] of a vectored read, kept for its completion (empty for a
    /// lone read, which shares nothing).
    layout: Vec<(usize, usize)>,
}

/// Reads in flight on this thread's ring. Reads are queued with [`Reader::push`] as
/// the caller discovers them, so the device works while the caller resolves the next
/// key; each finished read is handed to the caller's `on_done(index, req)` as its
/// completion arrives, so verifying and decoding one block overlaps the other reads.
/// Dropping a batch waits for every read still in flight, so no buffer is freed
/// under the kernel, also on error.
pub struct Batch<'r, T> {
    ring: &'r mut IoUring,
    counters: &'r RingCounters,
    /// How long a wait polls before it sleeps (zero: never).
    poll: Duration,
    reqs: Vec<ReadReq<T>>,
    /// Device reads put on the ring; a completion's user data is its index here.
    groups: Vec<Group>,
    /// Reads gathered into the next device read, not yet on the ring: `(first, count,
    /// bytes, the read reaching furthest)`.
    open: Option<(usize, usize, usize, usize)>,
    /// Device reads on the submission queue, not yet submitted.
    queued: usize,
    /// Device reads submitted or queued whose completion has not been reaped.
    inflight: usize,
    /// A first read held back from the ring: if no other joins it and waits do not
    /// poll, `finish` does it with `pread`, which on a lone read costs less kernel time
    /// than a sleeping ring round trip (fio on this project's test VM: 22.0k vs 19.0k
    /// IOPS at QD1). A polled ring round trip beats both.
    held: Option<usize>,
    err: Option<Error>,
}

/// Runs `f` with a batch on this thread's ring (created on first use); its waits poll
/// for up to `poll` (not at all on a thread that opted out). A nested call (a read
/// issued from inside `f`) gets a ring of its own: this thread's second ring, kept for
/// that, or a new one deeper down.
pub fn with_batch<T: ReadTarget, R>(
    counters: &RingCounters,
    poll: Duration,
    f: impl FnOnce(&mut Batch<'_, T>) -> Result<R>,
) -> Result<R> {
    let poll = if POLL_HERE.with(|p| p.get()) {
        poll
    } else {
        Duration::ZERO
    };
    let f = match RING.with(|cell| on_ring(cell, counters, poll, f)) {
        Ok(r) => return r,
        Err(f) => f,
    };
    match NESTED_RING.with(|cell| on_ring(cell, counters, poll, f)) {
        Ok(r) => r,
        Err(f) => f(&mut Batch::new(
            &mut new_ring(RING_ENTRIES as u32)?,
            counters,
            poll,
        )),
    }
}

/// Runs `f` with a batch on the ring kept in `cell` (created on first use), or hands
/// `f` back when that ring is in use further up this thread's stack.
fn on_ring<T: ReadTarget, R, F: FnOnce(&mut Batch<'_, T>) -> Result<R>>(
    cell: &RefCell<Option<IoUring>>,
    counters: &RingCounters,
    poll: Duration,
    f: F,
) -> std::result::Result<Result<R>, F> {
    let Ok(mut slot) = cell.try_borrow_mut() else {
        return Err(f);
    };
    if slot.is_none() {
        match new_ring(RING_ENTRIES as u32) {
            Ok(r) => *slot = Some(r),
            Err(e) => return Ok(Err(e)),
        }
    }
    let ring = slot.as_mut().expect("ring created above");
    let r = f(&mut Batch::new(ring, counters, poll));
    Ok(r)
}

impl<'r, T: ReadTarget> Batch<'r, T> {
    fn new(ring: &'r mut IoUring, counters: &'r RingCounters, poll: Duration) -> Self {
        Batch {
            ring,
            counters,
            poll,
            reqs: Vec::new(),
            groups: Vec::new(),
            open: None,
            queued: 0,
            inflight: 0,
            held: None,
            err: None,
        }
    }

    /// Queues a read; its index (for `on_done`) is the number of reads pushed before
    /// it. Submits the queue when the device is idle or a group has gathered, and
    /// hands on the completions already posted. A batch's first read waits for a
    /// second one to go with it (or for `finish`, which reads a lone one with `pread`).
    fn push_read(&mut self, req: ReadReq<T>, on_done: &mut OnDone<'_, T>) -> Result<()> {
        self.queue_read(req, on_done)?;
        if self.queued >= SUBMIT_GROUP || self.inflight == self.queued {
            self.submit(on_done)?;
        }
        self.reap(on_done);
        Ok(())
    }

    /// Queues a read without submitting it (the next `submit`, `push` or `finish`
    /// does), first waiting for a completion if the ring is full.
    fn queue_read(&mut self, req: ReadReq<T>, on_done: &mut OnDone<'_, T>) -> Result<()> {
        self.reqs.push(req);
        if self.reqs.len() == 1 {
            self.held = Some(0);
            return Ok(());
        }
        if let Some(h) = self.held.take() {
            self.put_on_ring(h, on_done)?;
        }
        self.put_on_ring(self.reqs.len() - 1, on_done)
    }

    /// Gathers read `i` into the next device read: the open one, if `i` continues it
    /// in the same file and the group has room, else a new one (the open one goes on
    /// the submission queue).
    fn put_on_ring(&mut self, i: usize, on_done: &mut OnDone<'_, T>) -> Result<()> {
        let (off, len) = (self.reqs[i].off, self.reqs[i].buf.len() as u64);
        if let Some((first, count, bytes, front)) = self.open {
            let front_r = &self.reqs[front];
            let end = front_r.off + front_r.buf.len() as u64;
            let grows = (off + len).saturating_sub(end) as usize;
            if first + count == i
                && count < MAX_MERGED_READS
                && (front_r.off..=end).contains(&off)
                && bytes + grows <= MAX_MERGED_BYTES
                && front_r.target.data_file().raw_fd() == self.reqs[i].target.data_file().raw_fd()
            {
                let front = if grows > 0 { i } else { front };
                self.open = Some((first, count + 1, bytes + grows, front));
                return Ok(());
            }
            self.close_open(on_done)?;
        }
        self.open = Some((i, 1, len as usize, i));
        Ok(())
    }

    /// Puts the open group of reads on the submission queue as one device read (first
    /// waiting for a completion if the ring is full).
    fn close_open(&mut self, on_done: &mut OnDone<'_, T>) -> Result<()> {
        let Some((first, count, _, _)) = self.open.take() else {
            return Ok(());
        };
        while self.inflight >= RING_ENTRIES {
            self.wait(on_done)?;
        }
        let fd = types::Fd(self.reqs[first].target.data_file().raw_fd());
        let off = self.reqs[first].off;
        let mut group = Group {
            first,
            count,
            iovecs: Vec::new(),
            layout: Vec::new(),
        };
        let e = if count == 1 {
            let buf = &mut self.reqs[first].buf;
            opcode::Read::new(fd, buf.as_mut_ptr(), buf.len() as u32)
                .offset(off)
                .build()
        } else {
            group.layout = group_layout(&self.reqs, first, count);
            for (i, &(skip, _)) in (first..).zip(&group.layout) {
                let buf = &mut self.reqs[i].buf;
                if skip == buf.len() {
                    continue;
                }
                group.iovecs.push(libc::iovec {
                    // SAFETY: `skip` < the buffer's length (a read wholly shared
                    // was skipped above).
                    iov_base: unsafe { buf.as_mut_ptr().add(skip) }.cast(),
                    iov_len: buf.len() - skip,
                });
            }
            self.counters
                .merged_reads
                .fetch_add(count as u64 - 1, Ordering::Relaxed);
            opcode::Readv::new(fd, group.iovecs.as_ptr(), group.iovecs.len() as u32)
                .offset(off)
                .build()
        };
        self.push_entry(e, group)
    }

    /// Puts one device read on the submission queue; its completion finds `group`.
    fn push_entry(&mut self, e: io_uring::squeue::Entry, group: Group) -> Result<()> {
        let e = e.user_data(self.groups.len() as u64);
        self.groups.push(group);
        // SAFETY: the buffers (heap blocks of the reads in `self.reqs`) and the iovec
        // array (a heap block owned by the group in `self.groups`) live until the
        // completion has arrived: `wait` and `Drop` collect every completion before
        // they go, and moving a `Vec` does not move its heap block.
        unsafe {
            self.ring
                .submission()
                .push(&e)
                .expect("fewer than RING_ENTRIES in flight")
        };
        self.queued += 1;
        self.inflight += 1;
        Ok(())
    }

    /// Submits every queued read without waiting (for a completion only if the ring
    /// is full).
    fn submit(&mut self, on_done: &mut OnDone<'_, T>) -> Result<()> {
        self.close_open(on_done)?;
        if self.queued == 0 {
            return Ok(());
        }
        loop {
            match self.ring.submit() {
                Ok(_) => break,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(Error::io("io_uring", e)),
            }
        }
        self.mark_submitted();
        Ok(())
    }

    /// Counts the queued reads as submitted, at the depth now in flight.
    fn mark_submitted(&mut self) {
        if self.queued > 0 {
            self.counters.queue_depth.record(self.inflight);
            self.queued = 0;
        }
    }

    /// Waits for every read pushed so far, handing each to `on_done`. Returns the
    /// first error (of a read or of `on_done`); reads after it are drained, not handed on.
    fn finish_reads(&mut self, on_done: &mut OnDone<'_, T>) -> Result<()> {
        if !self.poll.is_zero() {
            if let Some(h) = self.held.take() {
                self.put_on_ring(h, on_done)?;
            }
        }
        if let Some(h) = self.held.take() {
            self.counters.queue_depth.record(1);
            let r = &mut self.reqs[h];
            if let Err(e) = r.read_sync().and_then(|()| on_done(h, r)) {
                self.err.get_or_insert(e);
            }
        }
        self.close_open(on_done)?;
        while self.inflight > 0 {
            self.wait(on_done)?;
        }
        match self.err.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Submits what is queued and waits until at least one completion is there:
    /// polling for up to the budget if a polling slot is free, else (or then) asleep.
    fn wait(&mut self, on_done: &mut OnDone<'_, T>) -> Result<()> {
        self.close_open(on_done)?;
        self.mark_submitted();
        WAITERS.fetch_add(1, Ordering::AcqRel);
        let waited = self.poll_for_completion().and_then(|polled| {
            let n = if polled {
                &self.counters.polled_waits
            } else {
                self.enter(1)?;
                &self.counters.slept_waits
            };
            n.fetch_add(1, Ordering::Relaxed);
            Ok(())
        });
        WAITERS.fetch_sub(1, Ordering::AcqRel);
        waited?;
        self.reap(on_done);
        Ok(())
    }

    /// `io_uring_enter`: submits what is queued, collects completions posted as task
    /// work, and waits for `want` completions.
    fn enter(&mut self, want: usize) -> Result<()> {
        loop {
            match self.ring.submit_and_wait(want) {
                Ok(_) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(Error::io("io_uring", e)),
            }
        }
    }

    /// Submits what is queued, then spins until a completion is posted or the poll
    /// budget runs out (false; also when polling is off or no slot is free).
    fn poll_for_completion(&mut self) -> Result<bool> {
        if self.poll.is_zero() {
            return Ok(false);
        }
        let Some(_slot) = PollSlot::take_if_alone() else {
            return Ok(false);
        };
        self.enter(0)?;
        let deadline = Instant::now() + self.poll;
        let mut spins = 0u32;
        loop {
            if !self.ring.completion().is_empty() {
                return Ok(true);
            }
            if self.ring.submission().taskrun() {
                // Completions wait as task work: one entry posts them.
                self.enter(0)?;
                continue;
            }
            spins = spins.wrapping_add(1);
            // Give up at the budget, or once another thread waits too.
            if spins.is_multiple_of(64)
                && (Instant::now() >= deadline || WAITERS.load(Ordering::Relaxed) > 1)
            {
                return Ok(false);
            }
            std::hint::spin_loop();
        }
    }

    /// Hands on every completion already posted (no system call): each read of the
    /// device read that completed, in order, with its share of the bytes.
    fn reap(&mut self, on_done: &mut OnDone<'_, T>) {
        for cqe in self.ring.completion() {
            self.inflight -= 1;
            if self.err.is_some() {
                continue;
            }
            let g = &self.groups[cqe.user_data() as usize];
            let reads = g.first..g.first + g.count;
            if cqe.result() < 0 {
                let err = std::io::Error::from_raw_os_error(-cqe.result());
                let path = self.reqs[reads.start].target.data_file().path();
                self.err = Some(Error::io(path, err));
                continue;
            }
            let mut got = cqe.result() as usize;
            self.reqs[reads.start].target.data_file().account_read(got);
            for (k, i) in reads.clone().enumerate() {
                let (skip, from) = g.layout.get(k).copied().unwrap_or((0, i));
                // The shared bytes, if the read they are in got them.
                let at = (self.reqs[i].off - self.reqs[from].off) as usize;
                let have = skip == 0 || self.reqs[from].done >= at + skip;
                if skip > 0 && have {
                    let (before, rest) = self.reqs.split_at_mut(i);
                    rest[0].buf[..skip].copy_from_slice(&before[from].buf[at..at + skip]);
                }
                let r = &mut self.reqs[i];
                let own = got.min(r.buf.len() - skip);
                // Without the shared bytes the read counts as not started: `read_sync`
                // below reads it whole.
                r.done = if have { skip + own } else { 0 };
                r.merged = i != reads.start;
                got -= own;
                // A short read that is not at EOF: finish it with pread.
                if r.done < r.buf.len() {
                    if let Err(e) = r.read_sync() {
                        self.err = Some(e);
                        break;
                    }
                }
                if let Err(e) = on_done(i, r) {
                    self.err = Some(e);
                    break;
                }
            }
        }
    }
}

impl<T: ReadTarget> Reader<T> for Batch<'_, T> {
    fn push(&mut self, req: ReadReq<T>, on_done: &mut OnDone<'_, T>) -> Result<()> {
        self.push_read(req, on_done)
    }

    fn queue(&mut self, req: ReadReq<T>, on_done: &mut OnDone<'_, T>) -> Result<()> {
        self.queue_read(req, on_done)
    }

    fn finish(&mut self, on_done: &mut OnDone<'_, T>) -> Result<()> {
        self.finish_reads(on_done)
    }

    fn recycle(&mut self) {
        assert_eq!(self.inflight, 0, "recycle with reads in flight");
        self.groups.clear();
        for r in self.reqs.drain(..) {
            r.buf.recycle();
        }
    }
}

impl<T> Drop for Batch<'_, T> {
    fn drop(&mut self) {
        while self.inflight > 0 {
            if let Err(e) = self.ring.submit_and_wait(1) {
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                // The ring is unusable; leak the buffers rather than free them under
                // the kernel. Memory a read borrowed cannot be kept from its owner:
                // stop before the kernel can write into it after it is given back.
                if self.reqs.iter().any(|r| r.buf.is_borrowed()) {
                    eprintln!(
                        "basalt-engine: io_uring failed ({e}) with reads into borrowed \
                         memory in flight; aborting"
                    );
                    std::process::abort();
                }
                std::mem::forget(std::mem::take(&mut self.reqs));
                return;
            }
            self.inflight -= self.ring.completion().count();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aligned::PAGE;
    use crate::io::{IoCounters, IoMode};
    use std::sync::Arc;

    const PAGES: usize = 300;

    /// Ring waits so far, polled or slept.
    fn waits(rc: &RingCounters) -> u64 {
        rc.polled_waits.load(Ordering::Relaxed) + rc.slept_waits.load(Ordering::Relaxed)
    }

    /// A file whose page `p` is filled with the byte `p % 251`.
    fn patterned_file(dir: &std::path::Path) -> DataFile {
        let f = DataFile::open(
            &dir.join("pattern"),
            IoMode::Buffered,
            true,
            Arc::new(IoCounters::default()),
        )
        .unwrap();
        let mut page = AlignedBuf::zeroed(PAGE);
        for p in 0..PAGES {
            page.fill((p % 251) as u8);
            f.write_aligned(&page, (p * PAGE) as u64).unwrap();
        }
        f
    }

    /// The patterned file opened with O_DIRECT (reads complete by interrupt, so every
    /// wait is a real one), or `None` with a printed reason where O_DIRECT is refused.
    fn direct_patterned_file(dir: &std::path::Path) -> Option<DataFile> {
        if !crate::io::probe_direct_io(dir) {
            println!("skipped: O_DIRECT is refused on {}", dir.display());
            return None;
        }
        patterned_file(dir);
        let counters = Arc::new(IoCounters::default());
        Some(DataFile::open(&dir.join("pattern"), IoMode::Direct, false, counters).unwrap())
    }

    /// Pushes a read of every page (in a scrambled order) and checks each comes back
    /// once, with its own bytes.
    fn read_every_page<'f>(reader: &mut dyn Reader<&'f DataFile>, f: &'f DataFile) -> Vec<usize> {
        let order: Vec<usize> = (0..PAGES).map(|i| (i * 7) % PAGES).collect();
        let mut seen = vec![0usize; PAGES];
        let mut check = |i: usize, r: &ReadReq<&'f DataFile>| -> Result<()> {
            let p = order[i];
            assert_eq!(
                r.off,
                (p * PAGE) as u64,
                "read {i} came back with another's offset"
            );
            assert_eq!(r.done, PAGE);
            assert!(
                r.buf.iter().all(|&b| b == (p % 251) as u8),
                "page {p} has wrong bytes"
            );
            seen[p] += 1;
            Ok(())
        };
        for &p in &order {
            reader
                .push(
                    ReadReq::covering(f, (p * PAGE) as u64, PAGE as u32),
                    &mut check,
                )
                .unwrap();
        }
        reader.finish(&mut check).unwrap();
        reader.recycle();
        seen
    }

    #[test]
    fn more_reads_than_the_ring_holds_all_complete_once_with_their_own_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let f = patterned_file(dir.path());
        let rc = RingCounters::default();
        let seen = with_batch(&rc, Duration::ZERO, |b| Ok(read_every_page(b, &f))).unwrap();
        assert!(
            seen.iter().all(|&n| n == 1),
            "io_uring: a read was lost or handed on twice"
        );
    }

    #[test]
    fn reads_queued_together_go_to_the_kernel_in_one_submission() {
        let dir = tempfile::tempdir().unwrap();
        let f = patterned_file(dir.path());
        let rc = RingCounters::default();
        let mut landed = 0;
        with_batch(&rc, Duration::ZERO, |b: &mut Batch<'_, &DataFile>| {
            let mut count = |_: usize, _: &ReadReq<&DataFile>| -> Result<()> {
                landed += 1;
                Ok(())
            };
            // Every other page: no two reads adjacent, so none merge.
            for p in 0..40 {
                b.queue(ReadReq::covering(&f, (2 * p * PAGE) as u64, 1), &mut count)?;
            }
            b.finish(&mut count)?;
            b.recycle();
            Ok(())
        })
        .unwrap();
        assert_eq!(landed, 40);
        let submissions: Vec<(&str, u64)> = rc
            .queue_depth
            .snapshot()
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .collect();
        assert_eq!(
            submissions,
            vec![("32-63", 1)],
            "40 queued reads: one submission of depth 40"
        );
    }

    #[test]
    fn a_lone_read_is_done_without_the_ring_and_counted_at_depth_one() {
        let dir = tempfile::tempdir().unwrap();
        let f = patterned_file(dir.path());
        let rc = RingCounters::default();
        let mut got = Vec::new();
        with_batch(&rc, Duration::ZERO, |b: &mut Batch<'_, &DataFile>| {
            let mut keep = |i: usize, r: &ReadReq<&DataFile>| -> Result<()> {
                got.push((i, r.done, r.buf[0]));
                Ok(())
            };
            b.push(ReadReq::covering(&f, 5 * PAGE as u64, 10), &mut keep)?;
            assert_eq!(
                b.held,
                Some(0),
                "a lone read must be held back from the ring"
            );
            assert_eq!(b.inflight, 0);
            b.finish(&mut keep)?;
            b.recycle();
            Ok(())
        })
        .unwrap();
        assert_eq!(got, vec![(0, PAGE, 5)]);
        assert_eq!(rc.queue_depth.snapshot()[0], ("1", 1));
    }

    #[test]
    fn a_lone_read_goes_through_the_ring_when_waits_poll() {
        let dir = tempfile::tempdir().unwrap();
        let f = patterned_file(dir.path());
        let rc = RingCounters::default();
        let mut got = Vec::new();
        with_batch(
            &rc,
            Duration::from_millis(5),
            |b: &mut Batch<'_, &DataFile>| {
                let mut keep = |i: usize, r: &ReadReq<&DataFile>| -> Result<()> {
                    got.push((i, r.done, r.buf[0]));
                    Ok(())
                };
                b.push(ReadReq::covering(&f, 7 * PAGE as u64, 10), &mut keep)?;
                b.finish(&mut keep)?;
                b.recycle();
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(got, vec![(0, PAGE, 7)]);
        assert_eq!(
            waits(&rc),
            1,
            "the lone read was not waited for on the ring (pread instead?)"
        );
    }

    /// Direct reads complete by interrupt, so every wait is a real one: with polling on,
    /// every page still comes back once with its own bytes, and waits end by polling.
    #[test]
    fn polled_direct_reads_all_complete_once_with_their_own_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let Some(f) = direct_patterned_file(dir.path()) else {
            return;
        };
        let rc = RingCounters::default();
        // Other tests poll too and the polling slots are few: retry until one is ours.
        for attempt in 1..=50 {
            let seen = with_batch(&rc, Duration::from_millis(5), |b| {
                Ok(read_every_page(b, &f))
            })
            .unwrap();
            assert!(
                seen.iter().all(|&n| n == 1),
                "a polled read was lost or handed on twice"
            );
            if rc.polled_waits.load(Ordering::Relaxed) > 0 {
                println!(
                    "attempt {attempt}: {} waits polled, {} slept",
                    rc.polled_waits.load(Ordering::Relaxed),
                    rc.slept_waits.load(Ordering::Relaxed)
                );
                return;
            }
        }
        panic!("no wait ever ended by polling: {rc:?}");
    }

    #[test]
    fn a_thread_that_opts_out_of_polling_sleeps_for_every_completion() {
        let dir = tempfile::tempdir().unwrap();
        let Some(f) = direct_patterned_file(dir.path()) else {
            return;
        };
        let rc = RingCounters::default();
        poll_reads_on_this_thread(false);
        let seen = with_batch(&rc, Duration::from_millis(5), |b| {
            Ok(read_every_page(b, &f))
        });
        // A lone read on this thread is done with pread, as when polling is off.
        let before = waits(&rc);
        let lone = with_batch(
            &rc,
            Duration::from_millis(5),
            |b: &mut Batch<'_, &DataFile>| {
                let mut none = |_: usize, _: &ReadReq<&DataFile>| -> Result<()> { Ok(()) };
                b.push(ReadReq::covering(&f, 0, 1), &mut none)?;
                b.finish(&mut none)?;
                b.recycle();
                Ok(())
            },
        );
        poll_reads_on_this_thread(true);
        lone.unwrap();
        assert!(seen.unwrap().iter().all(|&n| n == 1));
        assert_eq!(
            waits(&rc),
            before,
            "a lone read was waited for on the ring on an opted-out thread, not read with pread"
        );
        assert_eq!(rc.polled_waits.load(Ordering::Relaxed), 0, "{rc:?}");
        assert!(
            rc.slept_waits.load(Ordering::Relaxed) > 0,
            "no wait happened: {rc:?}"
        );
    }

    #[test]
    fn polling_slots_are_limited_to_one_per_two_cores() {
        let max = max_pollers();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(max, (cores / 2).max(1));
        // Other tests take slots for a moment: retry until this test holds them all.
        let give_up = Instant::now() + Duration::from_secs(20);
        while Instant::now() < give_up {
            let mut held = Vec::new();
            while let Some(s) = PollSlot::take() {
                held.push(s);
            }
            assert!(held.len() <= max, "{} slots taken, limit {max}", held.len());
            if held.len() == max {
                return;
            }
            drop(held);
            std::thread::sleep(Duration::from_micros(200));
        }
        panic!("never held all {max} polling slots");
    }

    #[test]
    fn the_psync_reader_returns_the_same_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let f = patterned_file(dir.path());
        let seen = read_every_page(&mut SyncReader::default(), &f);
        assert!(
            seen.iter().all(|&n| n == 1),
            "psync: a read was lost or handed on twice"
        );
    }

    #[test]
    fn a_batch_opened_inside_a_batch_gets_a_ring_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let f = patterned_file(dir.path());
        let rc = RingCounters::default();
        let seen = with_batch(&rc, Duration::ZERO, |outer: &mut Batch<'_, &DataFile>| {
            let mut first = |_: usize, _: &ReadReq<&DataFile>| -> Result<()> { Ok(()) };
            outer.push(ReadReq::covering(&f, 0, 1), &mut first)?;
            let inner = with_batch(&rc, Duration::ZERO, |b| Ok(read_every_page(b, &f)))?;
            outer.finish(&mut first)?;
            outer.recycle();
            Ok(inner)
        })
        .unwrap();
        assert!(seen.iter().all(|&n| n == 1));
    }

    #[test]
    fn an_error_from_on_done_is_returned_after_every_read_has_landed() {
        let dir = tempfile::tempdir().unwrap();
        let f = patterned_file(dir.path());
        let rc = RingCounters::default();
        let mut handed = Vec::new();
        let res = with_batch(&rc, Duration::ZERO, |b: &mut Batch<'_, &DataFile>| {
            let mut fail_third = |i: usize, r: &ReadReq<&DataFile>| -> Result<()> {
                handed.push(i);
                if i == 2 {
                    return Err(Error::corruption(r.target.path(), r.off, "test failure"));
                }
                Ok(())
            };
            for p in 0..100 {
                b.queue(
                    ReadReq::covering(&f, (2 * p * PAGE) as u64, 1),
                    &mut fail_third,
                )?;
            }
            let res = b.finish(&mut fail_third);
            assert_eq!(b.inflight, 0, "finish returned with reads in flight");
            res
        });
        let err = res
            .expect_err("the on_done error must be returned")
            .to_string();
        assert!(err.contains("test failure"), "{err}");
        assert_eq!(
            handed.last(),
            Some(&2),
            "reads were handed on after the error"
        );
    }

    /// Per read: `(done, merged, every byte right)`; the submissions' queue depths; the
    /// count of merged reads.
    type Runs = (Vec<(usize, bool, bool)>, Vec<(&'static str, u64)>, u64);

    /// Queues a read of each `(file, first page, pages)` on a fresh batch (see [`Runs`]).
    fn read_runs(files: &[&DataFile], reads: &[(usize, usize, usize)]) -> Runs {
        let rc = RingCounters::default();
        let mut got: Vec<Option<(usize, bool, bool)>> = vec![None; reads.len()];
        with_batch(&rc, Duration::ZERO, |b: &mut Batch<'_, &DataFile>| {
            let mut keep = |i: usize, r: &ReadReq<&DataFile>| -> Result<()> {
                let first = reads[i].1;
                let right = r.buf[..r.done]
                    .chunks(PAGE)
                    .enumerate()
                    .all(|(k, page)| page.iter().all(|&x| x == ((first + k) % 251) as u8));
                assert!(got[i].is_none(), "read {i} handed on twice");
                got[i] = Some((r.done, r.merged, right));
                Ok(())
            };
            for &(f, page, pages) in reads {
                let req = ReadReq::covering(files[f], (page * PAGE) as u64, (pages * PAGE) as u32);
                b.queue(req, &mut keep)?;
            }
            b.finish(&mut keep)?;
            b.recycle();
            Ok(())
        })
        .unwrap();
        let depths = rc
            .queue_depth
            .snapshot()
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .collect();
        let got = got
            .into_iter()
            .map(|g| g.expect("every read handed on"))
            .collect();
        (got, depths, rc.merged_reads.load(Ordering::Relaxed))
    }

    /// Every read of `reads` came back whole with its own bytes; all but the first
    /// merged into the one device read.
    fn assert_one_device_read(reads: &[(usize, usize, usize)], (got, depths, merged): Runs) {
        for (i, (done, was_merged, right)) in got.iter().enumerate() {
            assert_eq!(*done, reads[i].2 * PAGE, "read {i} is short");
            assert!(right, "read {i} got another read's bytes");
            assert_eq!(*was_merged, i > 0, "read {i}: merged flag");
        }
        assert_eq!(
            merged as usize,
            reads.len() - 1,
            "all reads joined the first"
        );
        assert_eq!(depths, vec![("1", 1)], "one device read, submitted once");
    }

    #[test]
    fn adjacent_reads_go_to_the_device_as_one_vectored_read_each_with_its_own_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let plain = patterned_file(dir.path());
        let direct_dir = tempfile::tempdir().unwrap();
        let direct = direct_patterned_file(direct_dir.path());
        for f in std::iter::once(&plain).chain(direct.as_ref()) {
            // Forty reads of 1-3 pages, each starting where the last ended.
            let mut reads = Vec::new();
            let mut page = 3;
            for k in 0..40 {
                reads.push((0, page, 1 + k % 3));
                page += 1 + k % 3;
            }
            assert_one_device_read(&reads, read_runs(&[f], &reads));
            // Blocks that share a page: each read of 17 pages starts in the last page
            // of the one before (the engine's unpadded 64 KiB chunks).
            let shared: Vec<_> = (0..12).map(|k| (0, 1 + 16 * k, 17)).collect();
            assert_one_device_read(&shared, read_runs(&[f], &shared));
            // With the heads cached: each block's head page, then its value's pages,
            // the last of which is the next block's head page (read wholly inside the
            // one before it).
            let parts: Vec<_> = (0..12)
                .flat_map(|k| [(0, 16 * k, 1), (0, 16 * k + 1, 16)])
                .collect();
            assert_one_device_read(&parts, read_runs(&[f], &parts));
        }
    }

    #[test]
    fn merging_stops_at_a_gap_another_file_and_the_read_count_limit() {
        let dir = tempfile::tempdir().unwrap();
        let a = patterned_file(dir.path());
        let dir_b = tempfile::tempdir().unwrap();
        let b = patterned_file(dir_b.path());
        // A gap, another file, a read inside the last (joins), one starting before it.
        let mut reads = vec![
            (0, 0, 1),
            (0, 1, 1),
            (0, 3, 1),
            (0, 4, 1),
            (1, 5, 1),
            (1, 6, 1),
        ];
        reads.extend([(1, 6, 1), (1, 5, 2)]);
        // Then a run of MAX_MERGED_READS + 6 adjacent pages: two device reads.
        reads.extend((0..MAX_MERGED_READS + 6).map(|k| (0, 10 + k, 1)));
        let (got, _, merged) = read_runs(&[&a, &b], &reads);
        let flags: Vec<bool> = got.iter().map(|g| g.1).collect();
        assert_eq!(
            &flags[..8],
            &[false, true, false, true, false, true, true, false]
        );
        assert!(!flags[8] && flags[9..8 + MAX_MERGED_READS].iter().all(|&m| m));
        assert!(
            !flags[8 + MAX_MERGED_READS],
            "the read past the limit starts a new one"
        );
        assert!(
            got.iter().all(|g| g.0 >= PAGE && g.2),
            "short or wrong bytes: {got:?}"
        );
        assert_eq!(got[7].0, 2 * PAGE);
        assert_eq!(merged as usize, 4 + (MAX_MERGED_READS - 1) + 5);
    }

    #[test]
    fn merged_reads_past_the_end_of_the_file_come_back_short_not_failed() {
        let dir = tempfile::tempdir().unwrap();
        let f = patterned_file(dir.path());
        let last = PAGES - 1;
        let reads = [
            (0, last - 1, 1),
            (0, last, 1),
            (0, PAGES, 1),
            (0, PAGES + 1, 2),
        ];
        let (got, _, merged) = read_runs(&[&f], &reads);
        let done: Vec<usize> = got.iter().map(|g| g.0).collect();
        assert_eq!(done, vec![PAGE, PAGE, 0, 0]);
        assert!(got.iter().all(|g| g.2));
        assert_eq!(merged, 3);
    }
}

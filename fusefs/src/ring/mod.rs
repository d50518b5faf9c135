//! FUSE over io_uring (Linux 6.14+, with `/sys/module/fuse/parameters/enable_uring`
//! set): after INIT granted `FUSE_OVER_IO_URING`, the kernel queues requests per CPU
//! and hands each to a buffer pair the server registered on that CPU's queue; the
//! server answers and takes the next request with one `COMMIT_AND_FETCH` command,
//! instead of a `read` and a `write` on `/dev/fuse` per request. INIT, FORGET and
//! INTERRUPT stay on `/dev/fuse` (served by the `fuser` session as before).
//!
//! `threads` threads per queue, each with its own ring and `depth` entries (a header
//! buffer and a payload buffer each). Where they run is [`Pinning`]: on the queue's
//! CPU, the client's, so that a request and its reply wake nobody across CPUs, or
//! elsewhere (ARCHITECTURE.md, "FUSE over io_uring", has what each costs). Requests
//! are decoded here ([`request`]) and answered through [`Serve`]; this layer does not
//! depend on what the filesystem is. Used by the Basalt mount and the null filesystem
//! (`-o io_uring`).

pub mod abi;
mod reply;
mod request;

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use zerocopy::{FromZeros, IntoBytes};

pub use reply::{attr, Reply};
pub use request::{decode, Malformed, Op, Request};

/// What a queue thread that stopped with an error calls, with the error: no request
/// that reaches its entries will be answered any more.
pub type OnFailure = Arc<dyn Fn(&str) + Send + Sync>;

/// Test hook: the queue thread answering the `n`-th request from now fails before
/// committing its answer, as if the kernel had refused the command (0: off).
static FAIL_AFTER: AtomicU64 = AtomicU64::new(0);

/// Makes the queue thread that answers the `requests`-th next request (of any ring in
/// this process) stop with an error instead of committing it. For tests.
#[doc(hidden)]
pub fn fail_queue_after(requests: u64) {
    FAIL_AFTER.store(requests, Ordering::SeqCst);
}

fn injected_failure() -> bool {
    FAIL_AFTER
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok_and(|n| n == 1)
}

/// Serves requests taken from the ring, one call per request on the queue's thread.
/// A call that panics is answered `EIO`; the queue goes on.
pub trait Serve: Send + Sync + 'static {
    fn serve(&self, req: &Request<'_>, reply: &mut Reply<'_>);
}

/// Where a queue's thread runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pinning {
    /// On the queue's CPU: the one the requesting thread ran on.
    Same,
    /// On the next CPU (round robin): the server works beside the client.
    Other,
    /// Wherever the scheduler puts it.
    Unpinned,
}

impl std::str::FromStr for Pinning {
    type Err = String;
    fn from_str(s: &str) -> Result<Pinning, String> {
        match s {
            "" | "same" => Ok(Pinning::Same),
            "other" => Ok(Pinning::Other),
            "none" => Ok(Pinning::Unpinned),
            _ => Err(format!("io_uring={s}: expected same, other or none")),
        }
    }
}

/// How the ring is set up.
#[derive(Debug, Clone, Copy)]
pub struct RingConfig {
    pub pinning: Pinning,
    /// Threads per queue, each with its own io_uring and `depth` entries: while a
    /// request keeps one busy (a device read, an fsync), the others take the queue's
    /// next requests.
    pub threads: usize,
    /// Entries (requests in progress at once) per queue.
    pub depth: usize,
    /// Bytes of each entry's payload buffer: at least the mount's largest request or
    /// reply (`max_write`, and `max_pages` pages).
    pub payload: usize,
}

/// Whether the kernel lets FUSE servers use io_uring: `None` when this kernel has no
/// FUSE over io_uring at all.
pub fn kernel_enabled() -> Option<bool> {
    let v = std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring").ok()?;
    Some(v.trim() == "Y")
}

/// The kernel's queue count: one per possible CPU (`/sys/devices/system/cpu/possible`,
/// e.g. `0-3`), all of which must have entries before requests go to the ring.
fn possible_cpus() -> usize {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap_or_default();
    s.trim()
        .split(',')
        .filter_map(|r| r.rsplit('-').next()?.parse::<usize>().ok())
        .max()
        .map_or_else(
            || std::thread::available_parallelism().map_or(1, |n| n.get()),
            |m| m + 1,
        )
}

/// The running queue threads of one mount.
pub struct Ring {
    threads: Vec<JoinHandle<()>>,
    served: Arc<AtomicU64>,
    error: Arc<Mutex<Option<String>>>,
}

impl Ring {
    /// Registers `cfg.depth` entries on every queue of the FUSE connection behind
    /// `fd` (a `/dev/fuse` file whose INIT granted `FUSE_OVER_IO_URING`) and serves
    /// them with `server` until the connection ends. A queue thread that stops with
    /// an error records it and calls `on_failure`.
    pub fn start(
        fd: &impl AsFd,
        cfg: RingConfig,
        server: Arc<dyn Serve>,
        on_failure: OnFailure,
    ) -> std::io::Result<Ring> {
        let fd = Arc::new(fd.as_fd().try_clone_to_owned()?);
        let served = Arc::new(AtomicU64::new(0));
        let error = Arc::new(Mutex::new(None));
        let queues = possible_cpus();
        let per_queue = cfg.threads.max(1);
        let mut threads = Vec::with_capacity(queues * per_queue);
        let busy: Vec<Arc<AtomicUsize>> = (0..queues).map(|_| Arc::default()).collect();
        for q in (0..queues).flat_map(|q| std::iter::repeat_n(q, per_queue)) {
            let cpu = match cfg.pinning {
                Pinning::Same => Some(q),
                Pinning::Other => Some((q + 1) % queues),
                Pinning::Unpinned => None,
            };
            let queue = Queue {
                fd: fd.clone(),
                qid: q as u16,
                cfg,
                server: server.clone(),
                busy: busy[q].clone(),
                served: served.clone(),
                error: error.clone(),
            };
            let on_failure = on_failure.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("basalt-ring-{q}.{}", threads.len() % per_queue))
                    .spawn(move || {
                        if let Some(cpu) = cpu {
                            pin_to(cpu);
                        }
                        if let Err(e) = queue.run() {
                            on_failure(&e);
                            queue
                                .error
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .get_or_insert(e);
                        }
                    })?,
            );
        }
        Ok(Ring {
            threads,
            served,
            error,
        })
    }

    /// Requests answered over the ring so far.
    pub fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }

    /// The first error a queue stopped with (registration refused, a failed command).
    pub fn error(&self) -> Option<String> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Waits up to `timeout` for the queue threads, which end when the kernel cancels
    /// their entries at unmount; false if some are still running.
    pub fn join(self, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        while self.threads.iter().any(|t| !t.is_finished()) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        let all = self.threads.iter().all(|t| t.is_finished());
        for t in self.threads {
            if t.is_finished() {
                let _ = t.join();
            }
        }
        all
    }
}

fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is valid; sched_setaffinity only reads it. A CPU
    // that is possible but not online is refused; the thread then runs unpinned.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Byte offset of `len` in an SQE (after opcode, flags, ioprio, fd, off, addr).
const SQE_LEN_OFFSET: usize = 24;

/// `e` with the SQE's `len` field set (the io-uring crate's `UringCmd80` has no
/// setter for it; REGISTER needs the iovec count there).
fn with_len(e: squeue::Entry128, len: u32) -> squeue::Entry128 {
    const _: () = assert!(std::mem::size_of::<squeue::Entry128>() == 128);
    // SAFETY: Entry128 is a repr(C) wrapper of the kernel's 128-byte SQE; every byte
    // pattern of it is a valid value, and `len` is a plain u32 at this offset.
    let mut bytes: [u8; 128] = unsafe { std::mem::transmute(e) };
    bytes[SQE_LEN_OFFSET..SQE_LEN_OFFSET + 4].copy_from_slice(&len.to_ne_bytes());
    unsafe { std::mem::transmute::<[u8; 128], squeue::Entry128>(bytes) }
}

/// One queue's thread state.
struct Queue {
    fd: Arc<OwnedFd>,
    qid: u16,
    cfg: RingConfig,
    server: Arc<dyn Serve>,
    /// Requests in progress on this queue, across its threads.
    busy: Arc<AtomicUsize>,
    served: Arc<AtomicU64>,
    error: Arc<Mutex<Option<String>>>,
}

/// One registered entry: the buffers the kernel writes requests into and reads
/// replies from, and the iovecs that describe them to it.
struct Entry {
    headers: Box<abi::RingHeaders>,
    payload: Vec<u8>,
    iov: Box<[libc::iovec; 2]>,
}

/// How long registration is retried while the kernel finishes INIT (`EAGAIN`).
const REGISTER_PATIENCE: Duration = Duration::from_secs(5);

impl Queue {
    fn run(&self) -> Result<(), String> {
        let depth = self.cfg.depth.max(1);
        let mut entries: Vec<Entry> = (0..depth)
            .map(|_| {
                let mut headers = Box::new(abi::RingHeaders::new_zeroed());
                let mut payload = vec![0u8; self.cfg.payload];
                let iov = Box::new([
                    libc::iovec {
                        iov_base: headers.as_mut_bytes().as_mut_ptr().cast(),
                        iov_len: std::mem::size_of::<abi::RingHeaders>(),
                    },
                    libc::iovec {
                        iov_base: payload.as_mut_ptr().cast(),
                        iov_len: payload.len(),
                    },
                ]);
                Entry {
                    headers,
                    payload,
                    iov,
                }
            })
            .collect();
        let mut ring: IoUring<squeue::Entry128, cqueue::Entry> = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build((2 * depth).next_power_of_two() as u32)
            .map_err(|e| format!("io_uring setup: {e}"))?;
        let r = self.serve_entries(&mut ring, &mut entries);
        if r.is_err() {
            // The connection may still hand requests to this thread's other entries,
            // copying them into their buffers: those are never freed. (After a normal
            // end the kernel has let go of them: the connection is gone.)
            std::mem::forget(entries);
        }
        r
    }

    /// Registers `entries` on `ring` and serves the requests the kernel puts in them
    /// until the connection ends (`Ok`) or a command fails.
    fn serve_entries(
        &self,
        ring: &mut IoUring<squeue::Entry128, cqueue::Entry>,
        entries: &mut [Entry],
    ) -> Result<(), String> {
        let depth = entries.len();
        let fd = types::Fd(self.fd.as_raw_fd());
        let register = |e: &Entry, i: usize| {
            with_len(
                opcode::UringCmd80::new(fd, abi::CMD_REGISTER)
                    .cmd(abi::CmdReq::bytes(self.qid, 0))
                    .addr(Some(e.iov.as_ptr() as u64))
                    .build()
                    .user_data(i as u64),
                2,
            )
        };
        for (i, e) in entries.iter().enumerate() {
            // SAFETY: the entry's buffers and iovecs outlive the commands: `run` frees
            // them only after a normal end (the connection is gone, no request can
            // reach them), and leaks them otherwise.
            unsafe { ring.submission().push(&register(e, i)) }
                .map_err(|_| "submission queue full".to_string())?;
        }
        let started = Instant::now();
        let mut done = Vec::with_capacity(depth);
        let mut scratch = vec![0u8; self.cfg.payload];
        loop {
            match ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(format!("io_uring_enter: {e}")),
            }
            done.clear();
            done.extend(
                ring.completion()
                    .map(|c| (c.user_data() as usize, c.result())),
            );
            for &(i, res) in &done {
                if res == -libc::EAGAIN && started.elapsed() < REGISTER_PATIENCE {
                    // INIT not finished yet: the kernel cannot size the ring.
                    std::thread::sleep(Duration::from_millis(1));
                    unsafe { ring.submission().push(&register(&entries[i], i)) }
                        .map_err(|_| "submission queue full".to_string())?;
                    continue;
                }
                if res < 0 {
                    return match -res {
                        // The connection ended (unmount, abort) or the task is exiting.
                        libc::ENOTCONN | libc::ECANCELED | libc::ENODEV => Ok(()),
                        e => Err(format!(
                            "FUSE io_uring queue {}: {}",
                            self.qid,
                            std::io::Error::from_raw_os_error(e)
                        )),
                    };
                }
                let commit_id = self.answer(&mut entries[i], &mut scratch);
                if injected_failure() {
                    return Err(format!(
                        "FUSE io_uring queue {}: failure injected by a test",
                        self.qid
                    ));
                }
                let e = opcode::UringCmd80::new(fd, abi::CMD_COMMIT_AND_FETCH)
                    .cmd(abi::CmdReq::bytes(self.qid, commit_id))
                    .build()
                    .user_data(i as u64);
                unsafe { ring.submission().push(&e) }
                    .map_err(|_| "submission queue full".to_string())?;
            }
        }
    }

    /// Serves the request in `e` and writes the reply into it; returns the id to
    /// commit it with. A request whose arguments are in the payload buffer (names,
    /// write data) is answered into `scratch` and the reply copied over afterwards;
    /// one without (reads, directory listings, attributes) straight into the entry.
    fn answer(&self, e: &mut Entry, scratch: &mut [u8]) -> u64 {
        let ent = e.headers.ent;
        let payload_len = (ent.payload_sz as usize).min(e.payload.len());
        let in_progress = self.busy.fetch_add(1, Ordering::Relaxed) + 1;
        let (unique, errno, len) = if payload_len == 0 {
            match decode(&e.headers, &[]) {
                Ok(mut req) => {
                    req.in_progress = in_progress;
                    let (errno, len) = self.serve(&req, &mut e.payload);
                    (req.unique, errno, len)
                }
                Err(m) => (m.unique, self.malformed(m), 0),
            }
        } else {
            let r = match decode(&e.headers, &e.payload[..payload_len]) {
                Ok(mut req) => {
                    req.in_progress = in_progress;
                    let (errno, len) = self.serve(&req, scratch);
                    (req.unique, errno, len)
                }
                Err(m) => (m.unique, self.malformed(m), 0),
            };
            e.payload[..r.2].copy_from_slice(&scratch[..r.2]);
            r
        };
        self.busy.fetch_sub(1, Ordering::Relaxed);
        self.served.fetch_add(1, Ordering::Relaxed);
        let header = abi::OutHeader {
            len: (std::mem::size_of::<abi::OutHeader>() + len) as u32,
            error: -errno,
            unique,
        };
        e.headers.in_out[..std::mem::size_of::<abi::OutHeader>()]
            .copy_from_slice(header.as_bytes());
        e.headers.ent.payload_sz = len as u32;
        ent.commit_id
    }

    /// Serves `req`, answering into `buf`: `(errno, reply length)`. A server that
    /// panics gets its request answered `EIO` (its reply may be half written), and
    /// the queue goes on: unwinding would free buffers the kernel writes into.
    fn serve(&self, req: &Request<'_>, buf: &mut [u8]) -> (i32, usize) {
        let mut reply = Reply::new(buf);
        let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.server.serve(req, &mut reply)
        }));
        match served {
            Ok(()) => reply.finish(),
            Err(_) => {
                eprintln!(
                    "basalt-fusefs: the handler of FUSE request {} ({}, node {}) panicked: \
                     answered EIO",
                    req.unique,
                    req.op.name(),
                    req.nodeid
                );
                (libc::EIO, 0)
            }
        }
    }

    fn malformed(&self, m: Malformed) -> i32 {
        eprintln!(
            "basalt-fusefs: malformed FUSE request over io_uring (opcode {}, id {}): answered EIO",
            m.opcode, m.unique
        );
        libc::EIO
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers GETATTR by panicking, anything else with an empty reply.
    struct Panicky;
    impl Serve for Panicky {
        fn serve(&self, req: &Request<'_>, _: &mut Reply<'_>) {
            if matches!(req.op, Op::Getattr { .. }) {
                panic!("a handler bug");
            }
        }
    }

    fn entry(opcode: u32, unique: u64) -> Entry {
        let mut headers = Box::new(abi::RingHeaders::new_zeroed());
        let ih = abi::InHeader {
            len: 0,
            opcode,
            unique,
            nodeid: 1,
            uid: 0,
            gid: 0,
            pid: 1,
            total_extlen: 0,
            padding: 0,
        };
        headers.in_out[..ih.as_bytes().len()].copy_from_slice(ih.as_bytes());
        headers.ent.commit_id = unique + 100;
        Entry {
            headers,
            payload: vec![0; 4096],
            iov: Box::new(
                [libc::iovec {
                    iov_base: std::ptr::null_mut(),
                    iov_len: 0,
                }; 2],
            ),
        }
    }

    fn out_header(e: &Entry) -> abi::OutHeader {
        let n = std::mem::size_of::<abi::OutHeader>();
        zerocopy::FromBytes::read_from_bytes(&e.headers.in_out[..n]).unwrap()
    }

    #[test]
    fn a_panicking_handler_gets_its_request_answered_eio_and_the_queue_goes_on() {
        let q = Queue {
            fd: Arc::new(std::fs::File::open("/dev/null").unwrap().into()),
            qid: 0,
            cfg: RingConfig {
                pinning: Pinning::Unpinned,
                threads: 1,
                depth: 1,
                payload: 4096,
            },
            server: Arc::new(Panicky),
            busy: Arc::default(),
            served: Arc::default(),
            error: Arc::default(),
        };
        let mut scratch = vec![0u8; 4096];
        let mut e = entry(abi::opcode::GETATTR, 5);
        assert_eq!(q.answer(&mut e, &mut scratch), 105, "commit id");
        let h = out_header(&e);
        assert_eq!((h.unique, h.error), (5, -libc::EIO));
        assert_eq!(q.busy.load(Ordering::Relaxed), 0, "no longer in progress");
        // The next request on the same queue is served as usual.
        let mut e = entry(abi::opcode::STATFS, 6);
        q.answer(&mut e, &mut scratch);
        assert_eq!((out_header(&e).unique, out_header(&e).error), (6, 0));
        assert_eq!(q.served.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn the_failure_hook_fires_once_on_the_nth_request() {
        fail_queue_after(3);
        let fired: Vec<bool> = (0..5).map(|_| injected_failure()).collect();
        assert_eq!(fired, [false, false, true, false, false]);
    }
}

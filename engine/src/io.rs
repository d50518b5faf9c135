//! File access: O_DIRECT where the file system allows it, buffered otherwise,
//! with positional reads and writes that report errors with the file's path.

use crate::aligned::{AlignedBuf, PAGE};
use crate::codec::{align_down, align_up};
use crate::error::{Error, Result};
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// How data files are accessed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum IoMode {
    /// O_DIRECT: bypasses the page cache; every IO is 4 KiB aligned.
    Direct,
    /// Buffered IO (O_DIRECT was disabled or refused, e.g. on tmpfs).
    Buffered,
}

/// Device-level byte counters shared by every file of one engine.
#[derive(Default, Debug)]
pub struct IoCounters {
    pub bytes_written: AtomicU64,
    pub bytes_read: AtomicU64,
    pub reads: AtomicU64,
    pub writes: AtomicU64,
    pub syncs: AtomicU64,
}

/// A data file with its path (for error messages) and its IO mode.
pub struct DataFile {
    file: File,
    path: PathBuf,
    counters: Arc<IoCounters>,
}

/// Probes whether `dir` accepts O_DIRECT by creating a scratch file there.
pub fn probe_direct_io(dir: &Path) -> bool {
    let probe = dir.join(".odirect-probe");
    let res = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(&probe)
        .and_then(|f| {
            let buf = AlignedBuf::zeroed(PAGE);
            f.write_all_at(&buf, 0)
        });
    let _ = std::fs::remove_file(&probe);
    res.is_ok()
}

impl DataFile {
    /// Opens (and with `create`, creates) `path` read-write in `mode`.
    pub fn open(
        path: &Path,
        mode: IoMode,
        create: bool,
        counters: Arc<IoCounters>,
    ) -> Result<Self> {
        let mut oo = OpenOptions::new();
        oo.read(true).write(true).create(create);
        Self::open_with(oo, path, mode, counters)
    }

    /// Opens `path` read-only (used by offline checks).
    pub fn open_read(path: &Path, mode: IoMode, counters: Arc<IoCounters>) -> Result<Self> {
        let mut oo = OpenOptions::new();
        oo.read(true);
        Self::open_with(oo, path, mode, counters)
    }

    fn open_with(
        mut oo: OpenOptions,
        path: &Path,
        mode: IoMode,
        counters: Arc<IoCounters>,
    ) -> Result<Self> {
        if mode == IoMode::Direct {
            oo.custom_flags(libc::O_DIRECT);
        }
        let file = oo.open(path).map_err(|e| Error::io(path, e))?;
        Ok(DataFile {
            file,
            path: path.to_path_buf(),
            counters,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The raw descriptor (for io_uring submissions).
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.file.as_raw_fd()
    }

    /// Counts a read done outside `read_full` (io_uring completions).
    pub fn account_read(&self, bytes: usize) {
        self.counters
            .bytes_read
            .fetch_add(bytes as u64, Ordering::Relaxed);
        self.counters.reads.fetch_add(1, Ordering::Relaxed);
    }

    /// Current file length.
    pub fn len(&self) -> Result<u64> {
        Ok(self
            .file
            .metadata()
            .map_err(|e| Error::io(&self.path, e))?
            .len())
    }

    /// Writes a page-aligned buffer at a page-aligned offset.
    pub fn write_aligned(&self, buf: &[u8], off: u64) -> Result<()> {
        debug_assert_eq!(off % PAGE as u64, 0);
        debug_assert_eq!(buf.len() % PAGE, 0);
        self.file
            .write_all_at(buf, off)
            .map_err(|e| Error::io(&self.path, e))?;
        self.counters
            .bytes_written
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        self.counters.writes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Reads `len` bytes at `off` (any alignment). Performs one aligned device read
    /// covering the range and returns the aligned buffer plus the start of the
    /// requested bytes inside it.
    pub fn read_range(&self, off: u64, len: usize) -> Result<(AlignedBuf, usize)> {
        let start = align_down(off, PAGE as u64);
        let end = align_up(off + len as u64, PAGE as u64);
        let mut buf = AlignedBuf::zeroed((end - start) as usize);
        let n = self.read_full(&mut buf, start)?;
        let skip = (off - start) as usize;
        if n < skip + len {
            return Err(Error::corruption(
                &self.path,
                off,
                format!(
                    "short read: wanted {len} bytes, file ends at {}",
                    start + n as u64
                ),
            ));
        }
        Ok((buf, skip))
    }

    /// Reads into an aligned buffer at an aligned offset until full or EOF; returns bytes read.
    pub fn read_full(&self, buf: &mut [u8], off: u64) -> Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], off + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io(&self.path, e)),
            }
        }
        self.counters
            .bytes_read
            .fetch_add(done as u64, Ordering::Relaxed);
        self.counters.reads.fetch_add(1, Ordering::Relaxed);
        Ok(done)
    }

    /// fdatasync.
    pub fn sync_data(&self) -> Result<()> {
        self.counters.syncs.fetch_add(1, Ordering::Relaxed);
        self.file.sync_data().map_err(|e| Error::io(&self.path, e))
    }

    /// Truncates (or extends) the file to `len` bytes.
    pub fn set_len(&self, len: u64) -> Result<()> {
        self.file.set_len(len).map_err(|e| Error::io(&self.path, e))
    }
}

/// fsyncs a directory so that creations, renames and deletions in it are durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(dir, e))
}

/// Writes `bytes` to `path` atomically: temp file, fsync, rename, fsync directory.
pub fn write_file_atomic(path: &Path, bytes: &[u8], counters: &IoCounters) -> Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let mut f = File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
    f.write_all(bytes).map_err(|e| Error::io(&tmp, e))?;
    f.sync_all().map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))?;
    counters
        .bytes_written
        .fetch_add(align_up(bytes.len() as u64, PAGE as u64), Ordering::Relaxed);
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

impl DataFile {
    /// Reserves `len` bytes of disk space without changing the file size, so later
    /// writes inside it cannot fail with ENOSPC.
    pub fn preallocate(&self, len: u64) -> Result<()> {
        use std::os::fd::AsRawFd;
        // SAFETY: plain syscall on an open descriptor.
        let r = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_KEEP_SIZE,
                0,
                len as libc::off_t,
            )
        };
        if r == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            // File systems without fallocate: fall back to allocating on write.
            Some(libc::EOPNOTSUPP) => Ok(()),
            _ => Err(Error::io(&self.path, e)),
        }
    }
}

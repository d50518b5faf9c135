//! 4 KiB-aligned heap buffers, as O_DIRECT requires, and a per-thread pool of them so
//! that a device read does not allocate (or zero) its buffer.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::cell::RefCell;
use std::ops::{Deref, DerefMut};

/// Device IO granularity: every O_DIRECT offset and length is a multiple of this.
pub const PAGE: usize = 4096;

/// A zero-initialised, page-aligned byte buffer of fixed capacity, or a view of
/// page-aligned memory someone else owns that a device read fills in place
/// ([`AlignedBuf::borrowed`]).
pub struct AlignedBuf {
    ptr: *mut u8,
    cap: usize,
    len: usize,
    /// Allocated here (freed on drop, pooled on recycle); false for a borrowed view.
    owned: bool,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Vec<u8>, or (borrowed)
// has the exclusive use of the memory its creator promised (`AlignedBuf::borrowed`).
unsafe impl Send for AlignedBuf {}
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A buffer of `cap` bytes (rounded up to a page), length `len`.
    pub fn zeroed(len: usize) -> Self {
        let cap = len.max(1).div_ceil(PAGE) * PAGE;
        let layout = Layout::from_size_align(cap, PAGE).expect("layout");
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        AlignedBuf {
            ptr,
            cap,
            len,
            owned: true,
        }
    }

    /// A view of `len` bytes at `ptr`, which the caller owns, for a device read into
    /// them (nothing is allocated, freed or pooled).
    ///
    /// # Safety
    /// `ptr` is page-aligned and valid for reads and writes of `len` initialised
    /// bytes (a `&mut [u8]`'s), `len` is a multiple of [`PAGE`], and the memory stays
    /// valid, and is neither read nor written elsewhere, until this buffer is dropped,
    /// which the reader filling it does only once its read has completed.
    pub unsafe fn borrowed(ptr: *mut u8, len: usize) -> Self {
        debug_assert!((ptr as usize).is_multiple_of(PAGE) && len.is_multiple_of(PAGE));
        AlignedBuf {
            ptr,
            cap: len,
            len,
            owned: false,
        }
    }

    /// Bytes the buffer can hold.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Whether this is a view of memory someone else owns.
    pub fn is_borrowed(&self) -> bool {
        !self.owned
    }

    /// A buffer for a device read of `len` bytes: taken from this thread's pool when
    /// one of the same page count is free (its bytes are whatever an earlier read left:
    /// initialised, not zeroed; the reader overwrites what it uses), else allocated.
    pub fn for_read(len: usize) -> Self {
        let cap = len.max(1).div_ceil(PAGE) * PAGE;
        let pooled = POOL.try_with(|p| p.borrow_mut().take(cap)).ok().flatten();
        match pooled {
            Some(mut b) => {
                b.len = len;
                b
            }
            None => AlignedBuf::zeroed(len),
        }
    }

    /// Pointer to the first byte (for asynchronous IO).
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr
    }

    /// Sets the length (must not exceed the capacity). New bytes keep their old content.
    pub fn set_len(&mut self, len: usize) {
        assert!(len <= self.cap);
        self.len = len;
    }
}

/// Copies the front of `data` into `buf[*len..]` as far as it fits, advancing both;
/// returns true when `buf` is full (the caller writes it out and resets `*len`).
pub fn fill(buf: &mut [u8], len: &mut usize, data: &mut &[u8]) -> bool {
    let n = data.len().min(buf.len() - *len);
    buf[*len..*len + n].copy_from_slice(&data[..n]);
    *len += n;
    *data = &data[n..];
    *len == buf.len()
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for cap >= len bytes, initialised (zeroed at allocation,
        // or a borrowed slice's).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and we hold &mut self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// Largest buffer the pool keeps (bigger reads are rare: scans, GC, recovery).
const POOL_MAX_PAGES: usize = 32;
/// Bytes of free buffers a thread keeps. A batch holds all its buffers at once: a
/// filesystem's 4 MiB of readahead is 64 reads of a 64 KiB chunk and its head page
/// (17 pages each), and two such batches in flight on one thread need 128. With 64 per
/// page count, half of a sequential read's buffers were allocated and zeroed anew.
const POOL_BYTES: usize = 10 << 20;

/// Free read buffers of one thread, by page count.
struct Pool {
    free: Vec<Vec<AlignedBuf>>,
    /// Capacity of the buffers in `free`.
    bytes: usize,
}

impl Pool {
    fn take(&mut self, cap: usize) -> Option<AlignedBuf> {
        let b = self.free.get_mut(cap / PAGE)?.pop()?;
        self.bytes -= b.cap;
        Some(b)
    }

    /// Keeps `b` for reuse if its class has room; gives it back otherwise.
    fn keep(&mut self, b: AlignedBuf) -> Option<AlignedBuf> {
        let class = b.cap / PAGE;
        if class > POOL_MAX_PAGES {
            return Some(b);
        }
        if self.free.len() <= class {
            self.free.resize_with(class + 1, Vec::new);
        }
        if self.bytes + b.cap > POOL_BYTES {
            return Some(b);
        }
        self.bytes += b.cap;
        self.free[class].push(b);
        None
    }
}

thread_local! {
    static POOL: RefCell<Pool> = const { RefCell::new(Pool {
        free: Vec::new(),
        bytes: 0,
    }) };
}

impl AlignedBuf {
    /// Returns the buffer to this thread's read pool (freed if the pool is full, the
    /// buffer is too big, or the thread is exiting).
    pub fn recycle(self) {
        if !self.owned {
            return;
        }
        let _ = POOL.try_with(|p| {
            if let Ok(mut p) = p.try_borrow_mut() {
                drop(p.keep(self));
            }
        });
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let layout = Layout::from_size_align(self.cap, PAGE).expect("layout");
        // SAFETY: allocated in `zeroed` with this layout.
        unsafe { dealloc(self.ptr, layout) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recycled_read_buffer_is_reused_by_the_next_read_of_its_page_count() {
        let mut a = AlignedBuf::for_read(8192);
        a[0] = 7;
        let ptr = a.as_mut_ptr();
        a.recycle();
        let mut other = AlignedBuf::for_read(4096);
        assert_ne!(
            other.as_mut_ptr(),
            ptr,
            "a one-page read took the two-page buffer"
        );
        let mut b = AlignedBuf::for_read(5000);
        assert_eq!(
            b.as_mut_ptr(),
            ptr,
            "same page count: the pooled buffer comes back"
        );
        assert_eq!(b.len(), 5000);
        assert_eq!(b.as_mut_ptr() as usize % PAGE, 0);
    }

    #[test]
    fn buffers_beyond_the_pooled_sizes_are_freed_not_kept() {
        AlignedBuf::for_read((POOL_MAX_PAGES + 1) * PAGE).recycle();
        let pooled = POOL.with(|p| p.borrow().free.iter().map(Vec::len).sum::<usize>());
        assert_eq!(
            pooled,
            0,
            "the pool kept a {}-page buffer",
            POOL_MAX_PAGES + 1
        );
    }

    #[test]
    fn the_pool_keeps_buffers_up_to_its_byte_budget() {
        let size = 17 * PAGE; // a 64 KiB chunk and its head page
        let fit = POOL_BYTES / size;
        let bufs: Vec<AlignedBuf> = (0..fit + 10).map(|_| AlignedBuf::for_read(size)).collect();
        for b in bufs {
            b.recycle();
        }
        let (kept, bytes) = POOL.with(|p| (p.borrow().free[17].len(), p.borrow().bytes));
        assert_eq!(
            kept, fit,
            "all that fit in {POOL_BYTES} bytes are kept, no more"
        );
        assert_eq!(bytes, fit * size);
        let taken: Vec<AlignedBuf> = (0..fit).map(|_| AlignedBuf::for_read(size)).collect();
        assert_eq!(
            POOL.with(|p| p.borrow().bytes),
            0,
            "taking gives the budget back"
        );
        assert!(fit >= 128, "two batches of 4 MiB readahead ({fit} buffers)");
        drop(taken);
    }
}

//! 4 KiB-aligned heap buffers, as O_DIRECT requires.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ops::{Deref, DerefMut};

/// Device IO granularity: every O_DIRECT offset and length is a multiple of this.
pub const PAGE: usize = 4096;

/// A zero-initialised, page-aligned byte buffer of fixed capacity.
pub struct AlignedBuf {
    ptr: *mut u8,
    cap: usize,
    len: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Vec<u8>.
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
        AlignedBuf { ptr, cap, len }
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
        // SAFETY: ptr is valid for cap >= len bytes, initialised (zeroed at allocation).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and we hold &mut self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.cap, PAGE).expect("layout");
        // SAFETY: allocated in `zeroed` with this layout.
        unsafe { dealloc(self.ptr, layout) }
    }
}

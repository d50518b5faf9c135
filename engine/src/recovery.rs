//! Helpers for crash recovery of the tail segment: telling a torn tail (discard it)
//! from damage in the middle of the log (refuse to open, naming file and offset).

use crate::aligned::{AlignedBuf, PAGE};
use crate::block::{BLOCK_MAGIC, HEADER_LEN};
use crate::codec::{align_down, align_up};
use crate::error::Result;
use crate::io::DataFile;

/// Looks for an intact block (checksum seeded with `seed`) anywhere after `from`. A
/// torn write can only damage the end of the log, so an intact block after a bad one
/// means real corruption. Reads the rest of the file in 1 MiB windows.
pub fn valid_block_after(file: &DataFile, from: u64, seed: u32) -> Result<Option<u64>> {
    const WINDOW: usize = 1 << 20;
    let len = file.len()?;
    let magic = BLOCK_MAGIC.to_le_bytes();
    let mut buf = AlignedBuf::zeroed(WINDOW);
    // Candidates start at `from + 1`; a window overlaps the next by a header, so a
    // header across a window boundary is seen whole.
    let mut start = align_down(from, PAGE as u64);
    while start < len {
        let n = file.read_full(&mut buf, start)?;
        let data = &buf[..n];
        let first = (from + 1).saturating_sub(start) as usize;
        for i in first..n.saturating_sub(HEADER_LEN) {
            if data[i..i + 4] != magic {
                continue;
            }
            let at = start + i as u64;
            let Some(h) = crate::block::BlockHeader::parse(&data[i..]) else {
                continue;
            };
            let ok = if i + h.disk_len() <= n {
                crate::block::verify(&data[i..], at, seed).is_ok()
            } else if at + h.disk_len() as u64 <= len {
                let (b, skip) = file.read_range(at, h.disk_len())?;
                crate::block::verify(&b[skip..], at, seed).is_ok()
            } else {
                false
            };
            if ok {
                return Ok(Some(at));
            }
        }
        if n < WINDOW {
            break;
        }
        start += (WINDOW - PAGE) as u64;
    }
    Ok(None)
}

/// Cuts the tail segment back to `end`: zeroes the rest of its last page and drops
/// whole pages after it, then syncs, so stale blocks can never reappear later.
pub fn truncate_tail(file: &DataFile, end: u64) -> Result<()> {
    let page_start = align_down(end, PAGE as u64);
    let mut page = AlignedBuf::zeroed(PAGE);
    file.read_full(&mut page, page_start)?;
    page[(end - page_start) as usize..].fill(0);
    file.write_aligned(&page, page_start)?;
    file.set_len(align_up(end, PAGE as u64).max(page_start + PAGE as u64))?;
    file.sync_data()
}

/// Zeroes the bytes of a recycled tail from `end` to `upto` (rounded up to a page),
/// keeping the file's length and allocation, then syncs: an unfinished batch's intact
/// blocks can never reappear behind later writes.
pub fn zero_range(file: &DataFile, end: u64, upto: u64) -> Result<()> {
    let page_start = align_down(end, PAGE as u64);
    let stop = align_up(upto.max(end + 1), PAGE as u64);
    let mut page = AlignedBuf::zeroed(PAGE);
    file.read_full(&mut page, page_start)?;
    page[(end - page_start) as usize..].fill(0);
    file.write_aligned(&page, page_start)?;
    let zeros = AlignedBuf::zeroed(1 << 20);
    let mut at = page_start + PAGE as u64;
    while at < stop {
        let n = ((stop - at) as usize).min(zeros.len());
        file.write_aligned(&zeros[..n], at)?;
        at += n as u64;
    }
    file.sync_data()
}

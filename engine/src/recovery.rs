//! Helpers for crash recovery of the tail segment: telling a torn tail (discard it)
//! from damage in the middle of the log (refuse to open, naming file and offset).

use crate::aligned::{AlignedBuf, PAGE};
use crate::block::BLOCK_MAGIC;
use crate::codec::{align_down, align_up};
use crate::error::Result;
use crate::io::DataFile;

/// Looks for an intact block anywhere after `from`. A torn write can only damage the
/// end of the log, so an intact block after a bad one means real corruption.
pub fn valid_block_after(file: &DataFile, from: u64) -> Result<Option<u64>> {
    let len = file.len()?;
    if from >= len {
        return Ok(None);
    }
    let start = align_down(from, PAGE as u64);
    let mut buf = AlignedBuf::zeroed((align_up(len, PAGE as u64) - start) as usize);
    let n = file.read_full(&mut buf, start)?;
    let data = &buf[..n];
    let magic = BLOCK_MAGIC.to_le_bytes();
    let first = (from - start) as usize + 1;
    for i in first..data.len().saturating_sub(crate::block::HEADER_LEN) {
        if data[i..i + 4] != magic {
            continue;
        }
        if crate::block::verify(&data[i..], start + i as u64).is_ok() {
            return Ok(Some(start + i as u64));
        }
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

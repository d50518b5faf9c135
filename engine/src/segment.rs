//! Log segment files: `seg-NNNNNNNN.log`.
//!
//! Layout: a 4 KiB header page, then blocks packed back to back (see [`crate::block`];
//! a block flagged [`crate::block::FLAG_PAD`] is followed by zeros to the next page),
//! and — once sealed — a footer starting at a page boundary that lists every block
//! (offset, length, seqno range). The last 16 bytes of the file are
//! `footer offset:u64 | "BSLTEND1"`, so a sealed segment's block index is found with one
//! read of its last page. The tail segment has no footer; recovery scans it.

use crate::aligned::{AlignedBuf, PAGE};
use crate::block::{BlockHeader, HEADER_LEN};
use crate::codec::{align_up, Reader};
use crate::error::{Error, Result};
use crate::io::DataFile;
use crate::record::Seqno;
use std::path::{Path, PathBuf};

pub type SegId = u32;

const SEG_MAGIC: &[u8; 8] = b"BSLTSEG1";
const FOOTER_MAGIC: &[u8; 8] = b"BSLTFTR1";
const END_MAGIC: &[u8; 8] = b"BSLTEND1";
/// Segment format version written by this build. Version 2 added
/// [`crate::block::FLAG_PAD`], version 3 [`crate::block::FLAG_PAGED`], version 4
/// [`crate::block::FLAG_ROTATED`]; older files (which never set them) are read as they
/// are. Version 5 seeds every block checksum with the segment id ([`block_seed`]) and
/// names in the header the segment whose file was recycled for it, if any.
pub const SEG_VERSION: u32 = 5;
/// First version whose block checksums are seeded with the segment id.
const SEEDED_VERSION: u32 = 5;
/// Oldest segment format version this build reads.
const SEG_VERSION_MIN: u32 = 1;
/// Offset of the first block.
pub const DATA_START: u64 = PAGE as u64;
const FOOTER_ENTRY: usize = 8 + 4 + 4 + 8 + 8 + 1;

/// File name of segment `id` in `dir`.
pub fn segment_path(dir: &Path, id: SegId) -> PathBuf {
    dir.join(format!("seg-{id:08}.log"))
}

/// Parses a segment id from a file name.
pub fn parse_segment_name(name: &str) -> Option<SegId> {
    name.strip_prefix("seg-")?
        .strip_suffix(".log")?
        .parse()
        .ok()
}

/// Where one block lives and which seqnos it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockInfo {
    pub off: u64,
    pub len: u32,
    /// Uncompressed payload length (the sum of its records' encoded sizes).
    pub raw_len: u32,
    pub min_seqno: Seqno,
    pub max_seqno: Seqno,
    pub flags: u8,
}

/// What a segment's header page says besides its id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegHeader {
    /// Format version of the segment's blocks.
    pub version: u32,
    /// The segment whose file this one reuses (0: a new file). Bytes past the end of
    /// the log may be that segment's blocks, whose checksums carry its seed, not ours.
    pub recycled_from: SegId,
}

impl SegHeader {
    /// The header this build writes for a new segment (`recycled_from` 0 for a new file).
    pub fn current(recycled_from: SegId) -> SegHeader {
        SegHeader {
            version: SEG_VERSION,
            recycled_from,
        }
    }
}

/// Bytes of the header page the checksum covers: version 5 added `recycled_from` at
/// 20..24, after the checksum at 16..20.
fn header_crc(page: &[u8], version: u32) -> u32 {
    let crc = crc32c::crc32c(&page[0..16]);
    if version >= SEEDED_VERSION {
        crc32c::crc32c_append(crc, &page[20..24])
    } else {
        crc
    }
}

/// Length of the header page's used bytes for `version` (the rest is zero).
pub fn header_len(version: u32) -> usize {
    if version >= SEEDED_VERSION {
        24
    } else {
        20
    }
}

/// The seed of every block checksum in segment `id` of format `version`: the crc32c of
/// the id from version 5 on, so that a block left in a recycled file by the segment
/// that used it before never verifies as one of this segment's; 0 (no seed) before.
pub fn block_seed(version: u32, id: SegId) -> u32 {
    if version >= SEEDED_VERSION {
        crc32c::crc32c(&id.to_le_bytes())
    } else {
        0
    }
}

/// The 4 KiB header page of segment `id`.
pub fn encode_header(id: SegId, h: SegHeader) -> AlignedBuf {
    let mut page = AlignedBuf::zeroed(PAGE);
    page[0..8].copy_from_slice(SEG_MAGIC);
    page[8..12].copy_from_slice(&h.version.to_le_bytes());
    page[12..16].copy_from_slice(&id.to_le_bytes());
    if h.version >= SEEDED_VERSION {
        page[20..24].copy_from_slice(&h.recycled_from.to_le_bytes());
    }
    let crc = header_crc(&page, h.version);
    page[16..20].copy_from_slice(&crc.to_le_bytes());
    page
}

/// Writes segment `id`'s header page to `file` and syncs it.
pub fn write_header(file: &crate::io::DataFile, id: SegId, h: SegHeader) -> Result<()> {
    file.write_aligned(&encode_header(id, h), 0)?;
    file.sync_data()
}

/// Checks a header page: magic, checksum, version and id.
pub fn check_header(page: &[u8], id: SegId, path: &Path) -> Result<SegHeader> {
    if page.len() < 24 || &page[0..8] != SEG_MAGIC {
        return Err(Error::corruption(path, 0, "not a segment file (bad magic)"));
    }
    let crc = u32::from_le_bytes(page[16..20].try_into().unwrap());
    let version = u32::from_le_bytes(page[8..12].try_into().unwrap());
    // A newer build's header may cover its own fields: accept either layout there, so
    // that such a file is refused by its version, not as damaged.
    let newer_ok = version > SEG_VERSION && crc32c::crc32c(&page[0..16]) == crc;
    if header_crc(page, version) != crc && !newer_ok {
        return Err(Error::corruption(
            path,
            0,
            "segment header checksum mismatch",
        ));
    }
    if !(SEG_VERSION_MIN..=SEG_VERSION).contains(&version) {
        return Err(Error::FormatVersion {
            file: path.to_path_buf(),
            found: version,
            supported: SEG_VERSION,
        });
    }
    let got = u32::from_le_bytes(page[12..16].try_into().unwrap());
    if got != id {
        return Err(Error::corruption(
            path,
            12,
            format!("header names segment {got}, file name says {id}"),
        ));
    }
    let recycled_from = if version >= SEEDED_VERSION {
        u32::from_le_bytes(page[20..24].try_into().unwrap())
    } else {
        0
    };
    Ok(SegHeader {
        version,
        recycled_from,
    })
}

/// Encodes the footer for blocks ending at `data_end`; returns page-aligned bytes
/// to write at `align_up(data_end)`.
pub fn encode_footer(blocks: &[BlockInfo], data_end: u64) -> AlignedBuf {
    let body = footer_body_len(blocks.len());
    let total = footer_len(blocks.len()) as usize;
    let mut b = Vec::with_capacity(body);
    b.extend_from_slice(FOOTER_MAGIC);
    b.extend_from_slice(&(blocks.len() as u32).to_le_bytes());
    b.extend_from_slice(&data_end.to_le_bytes());
    for bi in blocks {
        b.extend_from_slice(&bi.off.to_le_bytes());
        b.extend_from_slice(&bi.len.to_le_bytes());
        b.extend_from_slice(&bi.raw_len.to_le_bytes());
        b.extend_from_slice(&bi.min_seqno.to_le_bytes());
        b.extend_from_slice(&bi.max_seqno.to_le_bytes());
        b.push(bi.flags);
    }
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    let mut out = AlignedBuf::zeroed(total);
    out[..b.len()].copy_from_slice(&b);
    let footer_off = align_up(data_end, PAGE as u64);
    out[total - 16..total - 8].copy_from_slice(&footer_off.to_le_bytes());
    out[total - 8..].copy_from_slice(END_MAGIC);
    out
}

/// Decodes a footer region (from its first byte to the end of the file).
/// Returns the block list and the end of the data area.
pub fn decode_footer(b: &[u8], path: &Path, footer_off: u64) -> Result<(Vec<BlockInfo>, u64)> {
    let bad = |d: &str| Error::corruption(path, footer_off, format!("segment footer: {d}"));
    let mut r = Reader::new(b);
    if r.bytes(8) != Some(FOOTER_MAGIC) {
        return Err(bad("bad magic"));
    }
    let n = r.u32().ok_or_else(|| bad("truncated"))? as usize;
    let data_end = r.u64().ok_or_else(|| bad("truncated"))?;
    if n > b.len() / FOOTER_ENTRY {
        return Err(bad("block count exceeds footer size"));
    }
    let mut blocks = Vec::with_capacity(n);
    for _ in 0..n {
        let (Some(off), Some(len), Some(raw_len), Some(min), Some(max), Some(flags)) =
            (r.u64(), r.u32(), r.u32(), r.u64(), r.u64(), r.u8())
        else {
            return Err(bad("truncated"));
        };
        blocks.push(BlockInfo {
            off,
            len,
            raw_len,
            min_seqno: min,
            max_seqno: max,
            flags,
        });
    }
    let body_end = r.pos();
    let crc = r.u32().ok_or_else(|| bad("truncated"))?;
    if crc32c::crc32c(&b[..body_end]) != crc {
        return Err(bad("checksum mismatch"));
    }
    let mut prev_end = DATA_START;
    for bi in &blocks {
        if bi.off < prev_end || bi.off + bi.len as u64 > data_end {
            return Err(bad("block list out of order or past the data end"));
        }
        prev_end = bi.off + bi.len as u64;
    }
    Ok((blocks, data_end))
}

/// Bytes of a footer's body of `count` blocks: magic, count, data end, the block
/// list and the checksum (zero padding and the end marker follow).
pub fn footer_body_len(count: usize) -> usize {
    8 + 4 + 8 + count * FOOTER_ENTRY + 4
}

/// Bytes of an encoded footer of `count` blocks (page aligned, end marker included).
pub fn footer_len(count: usize) -> u64 {
    align_up((footer_body_len(count) + 16) as u64, PAGE as u64)
}

/// The last page of a sealed segment whose file is longer than its footer (a reused
/// file keeps its length): zeros, then `footer_off | "BSLTEND1"`.
pub fn encode_end_page(footer_off: u64) -> AlignedBuf {
    let mut page = AlignedBuf::zeroed(PAGE);
    page[PAGE - 16..PAGE - 8].copy_from_slice(&footer_off.to_le_bytes());
    page[PAGE - 8..].copy_from_slice(END_MAGIC);
    page
}

/// Reads the footer of a sealed segment; `Ok(None)` if the segment has none (tail).
/// The footer starts at the offset the file's last page names; it usually ends there,
/// but a reused file sealed short of its length has stale bytes between the footer
/// and that page.
pub fn read_footer(file: &DataFile) -> Result<Option<(Vec<BlockInfo>, u64)>> {
    let len = file.len()?;
    if len < DATA_START + PAGE as u64 || len % PAGE as u64 != 0 {
        return Ok(None);
    }
    let mut last = AlignedBuf::zeroed(PAGE);
    file.read_full(&mut last, len - PAGE as u64)?;
    if &last[PAGE - 8..] != END_MAGIC {
        return Ok(None);
    }
    let footer_off = u64::from_le_bytes(last[PAGE - 16..PAGE - 8].try_into().unwrap());
    if footer_off < DATA_START || footer_off >= len || footer_off % PAGE as u64 != 0 {
        return Err(Error::corruption(
            file.path(),
            len - 16,
            "segment end marker points outside the file",
        ));
    }
    let mut first = AlignedBuf::zeroed(PAGE);
    file.read_full(&mut first, footer_off)?;
    let count = u32::from_le_bytes(first[8..12].try_into().unwrap()) as usize;
    let total = footer_len(count).min(len - footer_off) as usize;
    if total <= PAGE {
        return decode_footer(&first[..total], file.path(), footer_off).map(Some);
    }
    let mut buf = AlignedBuf::zeroed(total);
    file.read_full(&mut buf, footer_off)?;
    decode_footer(&buf, file.path(), footer_off).map(Some)
}

/// Outcome of scanning a segment's blocks from the front.
pub struct ScanEnd {
    /// End of the last block that completes a write batch (where writing resumes).
    pub committed_end: u64,
    /// Blocks up to `committed_end`.
    pub blocks: Vec<BlockInfo>,
    /// Why the scan stopped (`None`: clean end of data).
    pub stop_reason: Option<String>,
    /// Where the scan stopped: after the last intact block. Intact blocks between
    /// `committed_end` and here belong to a batch whose end never reached the file.
    pub stopped_at: u64,
}

/// Bytes of the blocks of an unfinished write batch that a scan keeps in memory until
/// the batch's last block is found; blocks past this are read again then. A batch
/// may be as large as a user makes it (all its blocks go into one segment), and
/// recovery must not need that much memory.
pub const HELD_BATCH_BYTES: usize = 8 << 20;

/// Scans blocks from `start` (checksums seeded with `seed`), calling `f` for each
/// valid block (offset, header, raw block bytes). Stops at the first invalid block: zeros, bad checksum, a torn write,
/// or a non-zero byte in the padding after a block flagged [`crate::block::FLAG_PAD`].
/// Blocks of a batch whose last block is missing are not reported as committed; a
/// batch's blocks go to `f` once its last block is verified (the first
/// [`HELD_BATCH_BYTES`] from memory, the rest read and verified again).
pub fn scan_blocks(
    file: &DataFile,
    start: u64,
    limit: Option<u64>,
    seed: u32,
    f: impl FnMut(u64, &BlockHeader, &[u8]) -> Result<()>,
) -> Result<ScanEnd> {
    scan_blocks_holding(file, start, limit, seed, HELD_BATCH_BYTES, f)
}

/// [`scan_blocks`] keeping at most `held` bytes of an unfinished batch in memory.
fn scan_blocks_holding(
    file: &DataFile,
    start: u64,
    limit: Option<u64>,
    seed: u32,
    held: usize,
    mut f: impl FnMut(u64, &BlockHeader, &[u8]) -> Result<()>,
) -> Result<ScanEnd> {
    const CHUNK: usize = 1 << 20;
    let file_len = file.len()?;
    let limit = limit.unwrap_or(file_len).min(file_len);
    let mut blocks = Vec::new();
    // Blocks of the batch being scanned; `None`: not held, read again at its end.
    let mut pending: Vec<(u64, BlockHeader, Option<Vec<u8>>)> = Vec::new();
    let mut pending_bytes = 0usize;
    let mut committed_end = start;
    let mut off = start;
    let mut stop_reason = None;
    let mut window = AlignedBuf::zeroed(CHUNK);
    let mut win_start = u64::MAX;
    let mut win_len = 0usize;
    let mut owned: Vec<u8> = Vec::new();
    loop {
        if off + HEADER_LEN as u64 > limit {
            break;
        }
        // Make sure [off, off+HEADER_LEN) is in the window.
        let need_hdr = off < win_start || off + HEADER_LEN as u64 > win_start + win_len as u64;
        if need_hdr {
            win_start = crate::codec::align_down(off, PAGE as u64);
            win_len = file.read_full(&mut window, win_start)?;
        }
        let rel = (off - win_start) as usize;
        let Some(h) = BlockHeader::parse(&window[rel..win_len.max(rel)]) else {
            if window[rel..(rel + HEADER_LEN).min(win_len)]
                .iter()
                .any(|&b| b != 0)
            {
                stop_reason = Some(format!("invalid block header at offset {off}"));
            }
            break;
        };
        let len = h.disk_len();
        if off + len as u64 > limit {
            stop_reason = Some(format!(
                "block at offset {off} extends past the end of the data"
            ));
            break;
        }
        let bytes: &[u8] = if rel + len <= win_len {
            &window[rel..rel + len]
        } else {
            let (buf, skip) = file.read_range(off, len)?;
            owned.clear();
            owned.extend_from_slice(&buf[skip..skip + len]);
            &owned
        };
        if let Err(m) = crate::block::verify(bytes, off, seed) {
            stop_reason = Some(format!("{m} in the block at offset {off}"));
            break;
        }
        let block = (pending_bytes + len <= held).then(|| bytes.to_vec());
        pending_bytes += block.as_ref().map_or(0, Vec::len);
        let mut next = off + len as u64;
        if h.flags & crate::block::FLAG_PAD != 0 {
            let pad_end = align_up(next, PAGE as u64).min(limit);
            if next < win_start || pad_end > win_start + win_len as u64 {
                win_start = crate::codec::align_down(next, PAGE as u64);
                win_len = file.read_full(&mut window, win_start)?;
            }
            let gap = (next - win_start) as usize..(pad_end - win_start) as usize;
            if let Some(at) = window[gap].iter().position(|&b| b != 0) {
                stop_reason = Some(format!(
                    "non-zero byte at offset {} in the padding after the block at offset {off}",
                    next + at as u64
                ));
                break;
            }
            next = align_up(next, PAGE as u64);
        }
        pending.push((off, h, block));
        off = next;
        if h.flags & crate::block::FLAG_CONTINUES == 0 {
            pending_bytes = 0;
            for (o, hh, b) in pending.drain(..) {
                match b {
                    Some(b) => f(o, &hh, &b)?,
                    None => {
                        let len = hh.disk_len();
                        let (buf, skip) = file.read_range(o, len)?;
                        let bytes = &buf[skip..skip + len];
                        crate::block::verify(bytes, o, seed).map_err(|m| {
                            Error::corruption(file.path(), o, format!("{m} when read again"))
                        })?;
                        f(o, &hh, bytes)?
                    }
                }
                blocks.push(BlockInfo {
                    off: o,
                    len: hh.disk_len() as u32,
                    raw_len: hh.raw_len,
                    min_seqno: hh.min_seqno,
                    max_seqno: hh.max_seqno,
                    flags: hh.flags,
                });
            }
            committed_end = off;
        }
    }
    if !pending.is_empty() && stop_reason.is_none() {
        stop_reason = Some(format!(
            "incomplete write batch at offset {committed_end} discarded"
        ));
    }
    Ok(ScanEnd {
        committed_end,
        blocks,
        stop_reason,
        stopped_at: off,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn footer_roundtrips_and_detects_flips() {
        let blocks = vec![
            BlockInfo {
                off: 4096,
                len: 100,
                raw_len: 200,
                min_seqno: 1,
                max_seqno: 5,
                flags: 0,
            },
            BlockInfo {
                off: 4196,
                len: 4000,
                raw_len: 9000,
                min_seqno: 6,
                max_seqno: 9,
                flags: 1,
            },
        ];
        let f = encode_footer(&blocks, 8196);
        let (got, end) = decode_footer(&f, Path::new("s"), 8192).unwrap();
        assert_eq!((got, end), (blocks, 8196));
        let body = footer_body_len(2);
        for bit in 0..body * 8 {
            let mut c = f.to_vec();
            c[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_footer(&c, Path::new("s"), 0).is_err(), "bit {bit}");
        }
    }

    /// Every block `scan_blocks_holding` hands on, with its bytes, and the scan's end.
    fn scan_all(file: &DataFile, seed: u32, held: usize) -> (Vec<(u64, Vec<u8>)>, ScanEnd) {
        let mut got = Vec::new();
        let end = scan_blocks_holding(file, DATA_START, None, seed, held, |off, _, b| {
            got.push((off, b.to_vec()));
            Ok(())
        })
        .unwrap();
        (got, end)
    }

    /// Blocks of a write batch past the held bound are read again at the batch's end:
    /// the scan hands on the same blocks with the same bytes whatever the bound, and an
    /// unfinished batch larger than the bound is still not committed.
    #[test]
    fn blocks_of_a_batch_past_the_held_bytes_are_read_again() {
        use crate::{Db, Durability, Options, WriteBatch};
        use rand::{RngCore, SeedableRng};
        let dir = tempfile::tempdir().unwrap();
        let opts = Options {
            direct_io: false,
            block_size: 4096,
            segment_size: 8 << 20,
            durability: Durability::NoSync,
            background_gc: false,
            ..Options::default()
        };
        let db = Db::open(dir.path(), opts).unwrap();
        let c = db.create_collection("c").unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        c.put(b"before", b"1").unwrap();
        let mut b = WriteBatch::new();
        for i in 0..40u32 {
            let mut v = vec![0u8; 20_000];
            rng.fill_bytes(&mut v);
            b.put("c", &i.to_be_bytes(), &v);
        }
        db.write(&b).unwrap();
        c.put(b"after", b"2").unwrap();
        let seg = db.inner.segments.read().values().next().unwrap().clone();
        let (path, seed) = (seg.file.path().to_path_buf(), seg.seed());
        db.sync().unwrap();
        let counters = std::sync::Arc::new(crate::io::IoCounters::default());
        let file =
            DataFile::open_read(&path, crate::io::IoMode::Buffered, counters.clone()).unwrap();

        let (all, end) = scan_all(&file, seed, usize::MAX);
        let batch: Vec<u64> = end
            .blocks
            .iter()
            .filter(|b| b.flags & crate::block::FLAG_CONTINUES != 0)
            .map(|b| b.off)
            .collect();
        assert!(batch.len() >= 10, "the batch spans many blocks: {batch:?}");
        for held in [0, 64 << 10] {
            let (got, e) = scan_all(&file, seed, held);
            assert_eq!(got, all, "held {held}");
            assert_eq!(
                (e.blocks, e.committed_end, e.stop_reason),
                (
                    end.blocks.clone(),
                    end.committed_end,
                    end.stop_reason.clone()
                )
            );
        }

        // Cut in the middle of the batch: its blocks are never handed on.
        let cut_at = batch[batch.len() / 2];
        let cut = dir.path().join("cut.log");
        std::fs::copy(&path, &cut).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&cut)
            .unwrap()
            .set_len(cut_at)
            .unwrap();
        let cut = DataFile::open_read(&cut, crate::io::IoMode::Buffered, counters).unwrap();
        let (got, e) = scan_all(&cut, seed, 0);
        assert_eq!(e.committed_end, batch[0]);
        assert!(got.iter().all(|(off, _)| *off < batch[0]));
        assert!(e.stop_reason.unwrap().contains("incomplete write batch"));
        drop(db);
    }

    proptest! {
        #[test]
        fn footer_decoder_survives_arbitrary_bytes(b in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = decode_footer(&b, Path::new("fuzz"), 0);
        }
        #[test]
        fn header_check_survives_arbitrary_bytes(b in proptest::collection::vec(any::<u8>(), 0..64), id in any::<u32>()) {
            let _ = check_header(&b, id, Path::new("fuzz"));
        }
    }
}

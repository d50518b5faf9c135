//! Log blocks: a checksummed, optionally compressed group of records.
//!
//! On disk a block is a 40-byte header followed by its payload:
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | magic `0x314B4C42` ("BLK1") |
//! | 4..8 | crc32c of bytes 8..40 and the payload |
//! | 8 | flags: bit 0 = the write batch continues in the next block; bit 1 = the next block starts at the next page boundary (zeros in between); bit 2 = paged, bit 3 = paged with its value's tail rotated (below) |
//! | 9 | compression: 0 none, 1 lz4, 2 zstd |
//! | 10..12 | record count |
//! | 12..16 | length on disk after the header (page checksums + payload) |
//! | 16..20 | uncompressed payload length |
//! | 20..24 | number of page checksums (0 unless paged) |
//! | 24..32 | smallest seqno in the block |
//! | 32..40 | largest seqno in the block |
//!
//! A *paged* block ([`FLAG_PAGED`]: one record of at least [`PAGED_MIN`] bytes, stored
//! raw) has a table of crc32c values after the header, one per device page its payload
//! touches (page boundaries are file offsets, so the first and last entries cover the
//! payload's bytes in a partial page); the header checksum then covers header bytes
//! 8..40 and the table only. Part of such a value can be read and verified with the
//! pages that hold it plus the block's head ([`crate::paged`]), instead of the whole
//! block. A *rotated* paged block ([`FLAG_ROTATED`], segment format 4) stores the last
//! bytes of its value right after the key, just enough to fill that page, and the rest
//! of the value from the next page boundary: page-aligned parts of the value (a file's
//! 4 KiB pages) are then whole device pages, and a 4 KiB read from a 64 KiB file chunk
//! costs one 4 KiB device read instead of 68 KiB. The block's length is unchanged;
//! [`decode`] puts the value back in order.
//!
//! Blocks are packed back to back inside a segment, cut so that they end at page
//! boundaries where they can (see [`crate::log_writer`]); all device IO is 4 KiB aligned.

use crate::aligned::PAGE;
use crate::codec::{align_down, Reader};
use crate::options::Compression;
use crate::record::{self, RecordRef, Seqno};
use std::ops::Range;
use std::path::Path;

pub const BLOCK_MAGIC: u32 = 0x314B_4C42;
pub const HEADER_LEN: usize = 40;
/// Flag: the write batch goes on in the next block (the batch is atomic across them).
pub const FLAG_CONTINUES: u8 = 1;
/// Flag: zeros fill the rest of the page after this block; the next block starts at
/// the next page boundary (segment format version 2).
pub const FLAG_PAD: u8 = 2;
/// Flag: the block has a page checksum table and holds one raw record (segment format
/// version 3).
pub const FLAG_PAGED: u8 = 4;
/// Flag: a paged block whose value's last [`tail_len`] bytes come before the rest of it,
/// so that the rest starts at a page boundary (segment format version 4).
pub const FLAG_ROTATED: u8 = 8;
/// Smallest record a block is paged for: below four pages a partial read saves little.
pub const PAGED_MIN: usize = 16 << 10;
/// Largest uncompressed payload a block may have (bounds decoder allocations).
pub const MAX_RAW_LEN: usize = 128 << 20;

/// Decoded block header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockHeader {
    pub crc: u32,
    pub flags: u8,
    pub compression: u8,
    pub nrecs: u16,
    pub payload_len: u32,
    pub raw_len: u32,
    /// Page checksums after the header (paged blocks only).
    pub pages: u32,
    pub min_seqno: Seqno,
    pub max_seqno: Seqno,
}

impl BlockHeader {
    /// Total on-disk length (header + page checksums + payload).
    pub fn disk_len(&self) -> usize {
        HEADER_LEN + self.payload_len as usize
    }

    /// Offset of the payload inside the block (after the page checksum table).
    pub fn payload_start(&self) -> usize {
        HEADER_LEN + 4 * self.pages as usize
    }

    /// Whether the block carries page checksums.
    pub fn is_paged(&self) -> bool {
        self.flags & FLAG_PAGED != 0
    }

    /// Parses a header; `None` if the magic or lengths are implausible.
    pub fn parse(b: &[u8]) -> Option<BlockHeader> {
        let mut r = Reader::new(b.get(..HEADER_LEN)?);
        if r.u32()? != BLOCK_MAGIC {
            return None;
        }
        let h = BlockHeader {
            crc: r.u32()?,
            flags: r.u8()?,
            compression: r.u8()?,
            nrecs: r.u16()?,
            payload_len: r.u32()?,
            raw_len: r.u32()?,
            pages: r.u32()?,
            min_seqno: r.u64()?,
            max_seqno: r.u64()?,
        };
        let table = 4 * h.pages as usize;
        if h.compression > 2
            || h.raw_len as usize > MAX_RAW_LEN
            || h.payload_len as usize > MAX_RAW_LEN + 1024 + table
            || h.min_seqno > h.max_seqno
        {
            return None;
        }
        if h.is_paged() {
            if h.compression != 0
                || h.nrecs != 1
                || h.payload_len as usize != table + h.raw_len as usize
            {
                return None;
            }
        } else if h.pages != 0 || h.flags & FLAG_ROTATED != 0 {
            return None;
        }
        Some(h)
    }
}

/// The payload's bytes of each device page, as ranges of block offsets, for a block at
/// file offset `off` whose payload spans block offsets `start..end`: split at page
/// boundaries of the file (a paged block has one checksum per range).
pub fn page_spans(off: u64, start: usize, end: usize) -> impl Iterator<Item = Range<usize>> {
    let page = PAGE as u64;
    let mut at = start;
    std::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let abs = off + at as u64;
        let next = ((align_down(abs, page) + page - off) as usize).min(end);
        let r = at..next;
        at = next;
        Some(r)
    })
}

/// Number of page checksums a paged block with a `raw` byte payload has: one more than
/// its whole pages, enough wherever the block starts (entries past the pages the payload
/// touches are zero).
pub fn table_entries(raw: usize) -> usize {
    raw.div_ceil(PAGE) + 1
}

/// How many of its last bytes a value of `value_len` bytes of a rotated paged block
/// stores first, when the value would start at file offset `value_start`: enough to
/// reach the next page boundary (none if it is one), so the rest starts on it.
pub fn tail_len(value_start: u64, value_len: usize) -> usize {
    let to_boundary = (PAGE as u64 - value_start % PAGE as u64) % PAGE as u64;
    (to_boundary as usize).min(value_len)
}

/// Length of the record header and key at the start of a paged block's payload.
fn record_head_len(payload: &[u8]) -> Option<usize> {
    let mut r = Reader::new(payload);
    record::decode_head(&mut r)?;
    Some(r.pos())
}

/// Bytes of a block's payload compressed as a trial before the whole block, when the
/// previous block did not compress.
pub const PROBE_LEN: usize = 4096;

/// Accumulates records for the next block.
#[derive(Default)]
pub struct BlockBuilder {
    raw: Vec<u8>,
    nrecs: u16,
    /// Encoded length of the largest record added since the last seal.
    largest: usize,
    min_seqno: Seqno,
    max_seqno: Seqno,
    /// The last sealed block was stored raw because compression did not pay: the next
    /// one is compressed only if a [`PROBE_LEN`] sample of it compresses.
    incompressible: bool,
}

/// Compresses `raw` into `out` (which the caller truncated to the payload start);
/// returns the compressed length.
fn compress_into(raw: &[u8], out: &mut Vec<u8>, compression: Compression) -> Option<usize> {
    let start = out.len();
    match compression {
        Compression::None => None,
        Compression::Lz4 => {
            out.resize(
                start + lz4_flex::block::get_maximum_output_size(raw.len()),
                0,
            );
            let n = lz4_flex::block::compress_into(raw, &mut out[start..])
                .expect("lz4 output sized by its bound");
            Some(n)
        }
        Compression::Zstd(level) => {
            let c = zstd::bulk::compress(raw, level).expect("zstd compress in memory");
            out.extend_from_slice(&c);
            Some(c.len())
        }
    }
}

/// Whether `compressed` bytes are worth storing for `raw` bytes: they must save at
/// least an eighth (RocksDB's rule), or decompressing on every read costs more than the
/// space saved.
fn pays(compressed: usize, raw: usize) -> bool {
    compressed <= raw - raw / 8
}

impl BlockBuilder {
    pub fn is_empty(&self) -> bool {
        self.nrecs == 0
    }
    pub fn raw_len(&self) -> usize {
        self.raw.len()
    }
    pub fn nrecs(&self) -> u16 {
        self.nrecs
    }
    /// Encoded length of the largest record in the block.
    pub fn largest(&self) -> usize {
        self.largest
    }
    /// Whether another record fits (the record count is a u16).
    pub fn has_room(&self) -> bool {
        self.nrecs < u16::MAX
    }
    /// Appends a record; returns its offset inside the uncompressed payload.
    pub fn add(&mut self, r: &RecordRef<'_>) -> usize {
        let at = self.raw.len();
        if self.nrecs == 0 {
            self.min_seqno = r.seqno;
            self.max_seqno = r.seqno;
        } else {
            self.min_seqno = self.min_seqno.min(r.seqno);
            self.max_seqno = self.max_seqno.max(r.seqno);
        }
        record::encode(&mut self.raw, r);
        self.largest = self.largest.max(self.raw.len() - at);
        self.nrecs += 1;
        at
    }
    /// Uncompressed payload so far (for reads of not yet sealed records).
    pub fn raw(&self) -> &[u8] {
        &self.raw
    }

    /// [`Self::seal_unframed`] then [`frame`] with `flags`; returns the uncompressed
    /// payload.
    #[cfg(test)]
    pub fn seal_into(&mut self, out: &mut Vec<u8>, compression: Compression, flags: u8) -> Vec<u8> {
        let start = out.len();
        let raw = self.raw.clone();
        self.seal_unframed(out, compression);
        frame(&mut out[start..], flags, 0);
        raw
    }

    /// Compresses the block and appends it to `out` without its flags and checksum
    /// (the caller learns the block's length first, then calls [`frame`] on its
    /// bytes) and resets the builder.
    ///
    /// A block is stored compressed only when that saves at least an eighth. After a
    /// block that did not compress (random or already compressed data), the next one
    /// is first probed with a [`PROBE_LEN`] sample, so incompressible streams cost a
    /// trial of 4 KiB per block instead of a full compression.
    pub fn seal_unframed(&mut self, out: &mut Vec<u8>, compression: Compression) {
        let start = out.len();
        out.resize(start + HEADER_LEN, 0);
        let worth_trying = compression != Compression::None
            && (!self.incompressible || self.raw.len() <= PROBE_LEN || {
                let sample = &self.raw[..PROBE_LEN];
                let n = compress_into(sample, out, compression);
                out.truncate(start + HEADER_LEN);
                n.is_some_and(|n| pays(n, sample.len()))
            });
        let compressed = if worth_trying {
            compress_into(&self.raw, out, compression).filter(|&n| pays(n, self.raw.len()))
        } else {
            None
        };
        self.incompressible = compression != Compression::None && compressed.is_none();
        let (code, payload_len) = match (compressed, compression) {
            (Some(n), Compression::Lz4) => (1u8, n),
            (Some(n), Compression::Zstd(_)) => (2u8, n),
            _ => {
                out.truncate(start + HEADER_LEN);
                out.extend_from_slice(&self.raw);
                (0, self.raw.len())
            }
        };
        out.truncate(start + HEADER_LEN + payload_len);
        let h = &mut out[start..start + HEADER_LEN];
        h[0..4].copy_from_slice(&BLOCK_MAGIC.to_le_bytes());
        h[9] = code;
        h[10..12].copy_from_slice(&self.nrecs.to_le_bytes());
        h[12..16].copy_from_slice(&(payload_len as u32).to_le_bytes());
        h[16..20].copy_from_slice(&(self.raw.len() as u32).to_le_bytes());
        h[20..24].copy_from_slice(&0u32.to_le_bytes());
        h[24..32].copy_from_slice(&self.min_seqno.to_le_bytes());
        h[32..40].copy_from_slice(&self.max_seqno.to_le_bytes());
        self.nrecs = 0;
        self.largest = 0;
        // The builder keeps its grown buffer for the next block.
        self.raw.clear();
    }
}

/// Turns a block produced by [`BlockBuilder::seal_unframed`] that holds one record
/// stored raw into a paged block at file offset `off`: the page checksum table goes
/// after the header and, if `rotate` (the writer always does; unrotated blocks are
/// segment format 3), the value's tail ([`tail_len`]) before the rest of it. The
/// block is built in `spare`, which then trades places with `block` (so both keep
/// their capacity for the next block). [`frame`] then sets the flags and the header
/// checksum.
pub fn make_paged(block: &mut Vec<u8>, off: u64, rotate: bool, spare: &mut Vec<u8>) {
    debug_assert_eq!(block[9], 0, "only raw blocks are paged");
    let payload = &block[HEADER_LEN..];
    let raw = payload.len();
    let head = record_head_len(payload).expect("the writer's record decodes");
    let n = table_entries(raw);
    let start = HEADER_LEN + 4 * n;
    let value_len = raw - head;
    let tail = if rotate {
        tail_len(off + (start + head) as u64, value_len)
    } else {
        0
    };
    let (body, tail_bytes) = payload[head..].split_at(value_len - tail);
    spare.clear();
    spare.extend_from_slice(&block[..HEADER_LEN]);
    spare.resize(start, 0);
    spare.extend_from_slice(&payload[..head]);
    spare.extend_from_slice(tail_bytes);
    spare.extend_from_slice(body);
    for (i, span) in page_spans(off, start, start + raw).enumerate() {
        let crc = crc32c::crc32c(&spare[span]);
        spare[HEADER_LEN + 4 * i..HEADER_LEN + 4 * i + 4].copy_from_slice(&crc.to_le_bytes());
    }
    spare[8] = if rotate {
        FLAG_PAGED | FLAG_ROTATED
    } else {
        FLAG_PAGED
    };
    spare[12..16].copy_from_slice(&((4 * n + raw) as u32).to_le_bytes());
    spare[20..24].copy_from_slice(&(n as u32).to_le_bytes());
    std::mem::swap(block, spare);
}

/// Sets the flags of a block produced by [`BlockBuilder::seal_unframed`] (all of
/// `block`, header first; made paged by [`make_paged`] or not) and its checksum,
/// seeded with `seed` (the segment's [`crate::segment::block_seed`]).
pub fn frame(block: &mut [u8], flags: u8, seed: u32) {
    block[8] = flags | (block[8] & (FLAG_PAGED | FLAG_ROTATED));
    let end = checked_end(block);
    let crc = crc32c::crc32c_append(seed, &block[8..end]);
    block[4..8].copy_from_slice(&crc.to_le_bytes());
}

/// End of the bytes the header checksum covers: the whole block, or for a paged block
/// the header and its page checksum table.
fn checked_end(block: &[u8]) -> usize {
    if block[8] & FLAG_PAGED != 0 {
        let n = u32::from_le_bytes(block[20..24].try_into().expect("4 bytes"));
        HEADER_LEN + 4 * n as usize
    } else {
        block.len()
    }
}

/// Entry `i` of a paged block's page checksum table (`block` starts at the header).
pub fn table_entry(block: &[u8], i: usize) -> u32 {
    let at = HEADER_LEN + 4 * i;
    u32::from_le_bytes(block[at..at + 4].try_into().expect("4 bytes"))
}

/// Verifies every checksum of the block at the start of `bytes` (at file offset `off`,
/// in a segment whose block checksums are seeded with `seed`): the header's, and for a
/// paged block each page's. `Err` says what is wrong, with the block offset of a bad
/// page.
pub fn verify(bytes: &[u8], off: u64, seed: u32) -> std::result::Result<BlockHeader, String> {
    let h = BlockHeader::parse(bytes).ok_or("bad block header")?;
    let end = h.disk_len();
    let Some(block) = bytes.get(..end) else {
        return Err("block extends past the data read".into());
    };
    check_header_crc(block, &h, seed)?;
    if h.is_paged() {
        let used = check_pages(block, off, &h, end)?;
        if (used..h.pages as usize).any(|i| table_entry(block, i) != 0) {
            return Err("page checksum table has entries past the payload".into());
        }
    }
    Ok(h)
}

/// Checks the header checksum of the block `h` was parsed from (`block` starts at its
/// header and holds at least the bytes the checksum covers: for a paged block the
/// header and page checksum table, else the whole block), seeded with `seed`.
pub fn check_header_crc(
    block: &[u8],
    h: &BlockHeader,
    seed: u32,
) -> std::result::Result<(), String> {
    let end = if h.is_paged() {
        h.payload_start()
    } else {
        h.disk_len()
    };
    let covered = block
        .get(8..end)
        .ok_or("block extends past the data read")?;
    if crc32c::crc32c_append(seed, covered) != h.crc {
        return Err("block checksum mismatch".into());
    }
    Ok(())
}

/// Checks the page checksums of the paged block `h` was parsed from, at file offset
/// `off` (`block` starts at its header), for the payload pages that start before block
/// offset `upto`; returns how many pages were checked.
pub fn check_pages(
    block: &[u8],
    off: u64,
    h: &BlockHeader,
    upto: usize,
) -> std::result::Result<usize, String> {
    let mut used = 0;
    for (i, span) in page_spans(off, h.payload_start(), h.disk_len()).enumerate() {
        if span.start >= upto {
            break;
        }
        let bytes = block
            .get(span.clone())
            .ok_or("block extends past the data read")?;
        if i >= h.pages as usize || crc32c::crc32c(bytes) != table_entry(block, i) {
            return Err(format!(
                "page checksum mismatch at block offset {}",
                span.start
            ));
        }
        used = i + 1;
    }
    Ok(used)
}

/// The record of a rotated paged block's `payload` (at file offset `at`) with its value
/// back in order; `None` if the record header does not decode.
fn unrotate(payload: &[u8], at: u64) -> Option<Vec<u8>> {
    let head = record_head_len(payload)?;
    let tail = tail_len(at + head as u64, payload.len() - head);
    let mut raw = Vec::with_capacity(payload.len());
    raw.extend_from_slice(&payload[..head]);
    raw.extend_from_slice(&payload[head + tail..]);
    raw.extend_from_slice(&payload[head..head + tail]);
    Some(raw)
}

/// Verifies a block's checksums (seeded with `seed`) and returns its uncompressed
/// payload. `file` and `off` name the block in errors; `off` must be the block's file
/// offset (page checksums follow file page boundaries).
pub fn decode(
    bytes: &[u8],
    file: &Path,
    off: u64,
    seed: u32,
) -> crate::Result<(BlockHeader, Vec<u8>)> {
    let h = verify(bytes, off, seed).map_err(|m| crate::Error::corruption(file, off, m))?;
    let payload = &bytes[h.payload_start()..h.disk_len()];
    let raw = match h.compression {
        0 if h.flags & FLAG_ROTATED != 0 => unrotate(payload, off + h.payload_start() as u64)
            .ok_or_else(|| crate::Error::corruption(file, off, "bad record in paged block"))?,
        0 => payload.to_vec(),
        1 => lz4_flex::block::decompress(payload, h.raw_len as usize)
            .map_err(|e| crate::Error::corruption(file, off, format!("lz4: {e}")))?,
        _ => zstd::bulk::decompress(payload, h.raw_len as usize)
            .map_err(|e| crate::Error::corruption(file, off, format!("zstd: {e}")))?,
    };
    if raw.len() != h.raw_len as usize {
        return Err(crate::Error::corruption(
            file,
            off,
            "decompressed length mismatch",
        ));
    }
    Ok((h, raw))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::record::Kind;
    use proptest::prelude::*;

    fn rec(seqno: u64, key: &[u8], value: &[u8]) -> RecordRef<'static> {
        let key: &'static [u8] = Box::leak(key.to_vec().into_boxed_slice());
        let value: &'static [u8] = Box::leak(value.to_vec().into_boxed_slice());
        RecordRef {
            kind: Kind::Put,
            reloc: false,
            coll: 1,
            seqno,
            key,
            value,
        }
    }

    #[test]
    fn sealed_block_roundtrips_for_every_compression() {
        for c in [Compression::None, Compression::Lz4, Compression::Zstd(3)] {
            let mut b = BlockBuilder::default();
            for i in 0..50u64 {
                b.add(&rec(100 + i, format!("key{i:05}").as_bytes(), &[b'x'; 300]));
            }
            let mut out = Vec::new();
            b.seal_into(&mut out, c, FLAG_CONTINUES);
            let (h, raw) = decode(&out, Path::new("t"), 0, 0).unwrap();
            assert_eq!(
                (h.nrecs, h.min_seqno, h.max_seqno, h.flags),
                (50, 100, 149, FLAG_CONTINUES)
            );
            if c != Compression::None {
                assert!(
                    h.payload_len < h.raw_len,
                    "{c:?} should compress repeated bytes"
                );
            }
            let recs: Vec<_> = record::RecordIter::new(&raw)
                .map(|r| r.unwrap().1.seqno)
                .collect();
            assert_eq!(recs, (100..150).collect::<Vec<_>>());
        }
    }

    /// Incompressible bytes (a splitmix64 stream, so the test needs no RNG crate).
    pub(crate) fn noise(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = x;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                (z ^ (z >> 31)) as u8
            })
            .collect()
    }

    /// Seals one record holding `value`; returns the stored compression code.
    fn seal_code(b: &mut BlockBuilder, value: &[u8], c: Compression) -> u8 {
        b.add(&rec(1, b"k", value));
        let mut out = Vec::new();
        let raw = b.seal_into(&mut out, c, 0);
        let (h, decoded) = decode(&out, Path::new("t"), 0, 0).unwrap();
        assert_eq!(decoded, raw, "the returned payload is the block's content");
        h.compression
    }

    #[test]
    fn incompressible_blocks_are_stored_raw_and_the_next_block_is_probed_first() {
        for c in [Compression::Lz4, Compression::Zstd(3)] {
            // Compressible only after its first 4 KiB: a full trial compresses it.
            let mut late = noise(PROBE_LEN + 64, 7);
            late.resize(64 << 10, b'z');
            let mut fresh = BlockBuilder::default();
            assert_ne!(seal_code(&mut fresh, &late, c), 0, "{c:?}: tried in full");
            // After an incompressible block the same content fails the 4 KiB probe and
            // is stored raw; a block that compresses from its start is still compressed.
            let mut b = BlockBuilder::default();
            assert_eq!(seal_code(&mut b, &noise(64 << 10, 1), c), 0, "{c:?}: noise");
            assert_eq!(seal_code(&mut b, &late, c), 0, "{c:?}: probe says raw");
            assert_ne!(
                seal_code(&mut b, &[b'a'; 64 << 10], c),
                0,
                "{c:?}: probe passes"
            );
            assert_ne!(seal_code(&mut b, &late, c), 0, "{c:?}: full trial again");
        }
    }

    #[test]
    fn compression_saving_less_than_an_eighth_is_not_kept() {
        // Seven eighths noise, one eighth zeros: lz4 saves a little under an eighth.
        let mut v = noise(56 << 10, 3);
        v.resize(64 << 10, 0);
        v[(56 << 10)..(56 << 10) + 1024].copy_from_slice(&noise(1024, 4));
        assert_eq!(
            seal_code(&mut BlockBuilder::default(), &v, Compression::Lz4),
            0
        );
        let mut v = noise(48 << 10, 3);
        v.resize(64 << 10, 0);
        assert_eq!(
            seal_code(&mut BlockBuilder::default(), &v, Compression::Lz4),
            1
        );
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        let mut b = BlockBuilder::default();
        b.add(&rec(1, b"a", b"hello world"));
        let mut out = Vec::new();
        b.seal_into(&mut out, Compression::Lz4, 0);
        for bit in 0..out.len() * 8 {
            let mut c = out.clone();
            c[bit / 8] ^= 1 << (bit % 8);
            assert!(
                decode(&c, Path::new("t"), 0, 0).is_err(),
                "flip of bit {bit} not detected"
            );
        }
    }

    #[test]
    fn a_block_verifies_only_under_the_seed_it_was_framed_with() {
        let seed = |id: u32| crate::segment::block_seed(crate::segment::SEG_VERSION, id);
        for paged_block in [false, true] {
            let mut out = if paged_block {
                let mut b = BlockBuilder::default();
                b.add(&rec(9, b"key", &noise(PAGED_MIN + 100, 3)));
                let mut out = Vec::new();
                b.seal_unframed(&mut out, Compression::None);
                make_paged(&mut out, 8192, true, &mut Vec::new());
                out
            } else {
                let mut b = BlockBuilder::default();
                b.add(&rec(1, b"a", b"hello world"));
                let mut out = Vec::new();
                b.seal_unframed(&mut out, Compression::Lz4);
                out
            };
            frame(&mut out, 0, seed(7));
            assert!(decode(&out, Path::new("t"), 8192, seed(7)).is_ok());
            for other in [0, seed(6), seed(8), seed(7 + (1 << 16))] {
                assert_eq!(
                    verify(&out, 8192, other).unwrap_err(),
                    "block checksum mismatch",
                    "paged {paged_block}"
                );
            }
        }
    }

    /// A paged block of one record of `value` at file offset `off`.
    fn paged(off: u64, value: &[u8]) -> Vec<u8> {
        paged_as(off, value, true)
    }

    /// [`paged`], rotated (as the writer does) or laid out as segment format 3 was.
    fn paged_as(off: u64, value: &[u8], rotate: bool) -> Vec<u8> {
        let mut b = BlockBuilder::default();
        b.add(&rec(9, b"key", value));
        let mut out = Vec::new();
        b.seal_unframed(&mut out, Compression::None);
        make_paged(&mut out, off, rotate, &mut Vec::new());
        frame(&mut out, FLAG_CONTINUES, 0);
        out
    }

    #[test]
    fn a_paged_block_rotated_or_not_decodes_to_its_record_wherever_it_starts_in_a_page() {
        let value = noise(PAGED_MIN + 5000, 11);
        for off in [
            4096u64,
            4096 + 1,
            8192 - 41,
            8192 - 40,
            12_000,
            4096 * 7 + 4000,
        ] {
            let old = paged_as(off, &value, false);
            let (h, raw) = decode(&old, Path::new("t"), off, 0).unwrap();
            assert_eq!(h.flags & FLAG_ROTATED, 0);
            let r = record::RecordIter::new(&raw).next().unwrap().unwrap().1;
            assert_eq!(
                (r.key, r.value),
                (&b"key"[..], &value[..]),
                "{off}: format 3"
            );
            let b = paged(off, &value);
            assert_eq!(b.len(), old.len(), "{off}: rotation takes no space");
            let (h, raw) = decode(&b, Path::new("t"), off, 0).unwrap();
            assert_ne!(h.flags & FLAG_ROTATED, 0);
            assert!(
                h.is_paged() && h.flags & FLAG_CONTINUES != 0,
                "{off}: flags"
            );
            assert_eq!(h.pages as usize, table_entries(raw.len()));
            let used = page_spans(off, h.payload_start(), h.disk_len()).count();
            assert!(used <= h.pages as usize, "{off}: {used} pages used");
            let r = record::RecordIter::new(&raw).next().unwrap().unwrap().1;
            assert_eq!((r.key, r.value), (&b"key"[..], &value[..]), "{off}");
            // Checksums follow file pages: the same bytes at another offset do not verify
            // (unless the shift is a whole number of pages).
            assert!(
                decode(&b, Path::new("t"), off + 100, 0).is_err(),
                "{off}: shifted"
            );
            assert!(
                decode(&b, Path::new("t"), off + 4096, 0).is_ok(),
                "{off}: page shift"
            );
        }
    }

    #[test]
    fn every_flipped_byte_of_a_paged_block_is_detected() {
        let off = 4096 + 1234;
        let b = paged(off, &noise(PAGED_MIN + 100, 5));
        for at in 0..b.len() {
            let mut c = b.clone();
            c[at] ^= 1 << (at % 8);
            let e = decode(&c, Path::new("t"), off, 0);
            assert!(e.is_err(), "flip at byte {at} not detected");
        }
    }

    proptest! {
        #[test]
        fn block_decoder_survives_arbitrary_bytes(b in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode(&b, Path::new("fuzz"), 0, 0);
        }

        #[test]
        fn block_decoder_survives_valid_header_with_garbage_payload(
            payload in proptest::collection::vec(any::<u8>(), 0..256), comp in 0u8..3, raw_len in 0u32..4096,
            paged in any::<bool>(), pages in 0u32..80, off in 0u64..10_000) {
            let mut b = vec![0u8; HEADER_LEN];
            b[0..4].copy_from_slice(&BLOCK_MAGIC.to_le_bytes());
            b[9] = comp;
            b[12..16].copy_from_slice(&(payload.len() as u32).to_le_bytes());
            b[16..20].copy_from_slice(&raw_len.to_le_bytes());
            if paged {
                b[8] = FLAG_PAGED;
                b[10] = 1;
                b[20..24].copy_from_slice(&pages.to_le_bytes());
            }
            b.extend_from_slice(&payload);
            let end = if paged { (HEADER_LEN + 4 * pages as usize).min(b.len()) } else { b.len() };
            let crc = crc32c::crc32c(&b[8..end.max(8)]);
            b[4..8].copy_from_slice(&crc.to_le_bytes());
            if let Ok((_, raw)) = decode(&b, Path::new("fuzz"), off, 0) {
                for _ in record::RecordIter::new(&raw) {}
            }
        }
    }
}

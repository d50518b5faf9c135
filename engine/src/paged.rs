//! Reading part of a large value: a paged block ([`crate::block::FLAG_PAGED`]) holds one
//! record and a crc32c per device page, so bytes `a..z` of its value are read and
//! verified with only the pages that hold them, once the block's head (header, page
//! checksum table, record header and key) is known. Heads are small and cached apart
//! from data blocks. In a rotated block ([`crate::block::FLAG_ROTATED`]) the value's
//! page-aligned parts are whole device pages: a 4 KiB read from a 64 KiB value costs
//! one 4 KiB device read (two reads when it reaches into the value's last bytes, which
//! are stored in the head's page) instead of 68 KiB. Where a rotated block keeps its
//! value is known from the index entry alone ([`Geometry::rotated_layout`]), so the
//! first read of a block fetches the part's pages together with the head.

use crate::aligned::PAGE;
use crate::block::{self, BlockHeader, HEADER_LEN};
use crate::codec::{align_down, align_up, Reader};
use crate::record::{self, CollId, Kind, Seqno};
use std::ops::Range;

/// Where a paged block at `off` would keep its value, from what the index knows of
/// the record (its encoded size, collection, seqno and key length) and the block's
/// length. `None` when a block of that length cannot be a paged block of that record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// File offset of the block.
    pub off: u64,
    /// File offset of the value's first byte.
    pub value_start: u64,
    pub value_len: usize,
}

impl Geometry {
    pub fn guess(
        off: u64,
        len: u32,
        rec_size: usize,
        coll: CollId,
        seqno: Seqno,
        klen: usize,
    ) -> Option<Geometry> {
        if rec_size < block::PAGED_MIN {
            return None;
        }
        let table = 4 * block::table_entries(rec_size);
        if len as usize != HEADER_LEN + table + rec_size {
            return None;
        }
        let value_len = record::value_len(coll, seqno, klen, rec_size)?;
        Some(Geometry {
            off,
            value_start: off + len as u64 - value_len as u64,
            value_len,
        })
    }

    /// The aligned file range `(start, len)` holding the block's head: from its page
    /// to the end of the page the value starts in.
    pub fn head_pages(&self) -> (u64, u32) {
        let start = align_down(self.off, PAGE as u64);
        let end = align_up(self.value_start + 1, PAGE as u64);
        (start, (end - start) as u32)
    }

    /// Where the value's bytes would be if the block is rotated, as every block of the
    /// current segment format is: known before the head is read, so a part's pages can
    /// be read together with the head. [`PagedHead::layout`] says whether it was right.
    pub fn rotated_layout(&self) -> ValueLayout {
        ValueLayout {
            value_start: self.value_start,
            value_len: self.value_len,
            tail: block::tail_len(self.value_start, self.value_len),
        }
    }
}

/// Where a paged block keeps its value's bytes in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValueLayout {
    /// File offset right after the key: where the value (or, rotated, its tail) starts.
    value_start: u64,
    value_len: usize,
    /// Bytes of the value's end stored first (rotated blocks; else 0).
    tail: usize,
}

impl ValueLayout {
    /// File offset of value byte `i` (`i` < the value's length; for the end of a part,
    /// the offset after its last byte is `file_offset(end - 1) + 1`).
    fn file_offset(&self, i: usize) -> u64 {
        let body = self.value_len - self.tail;
        if i < body {
            self.value_start + (self.tail + i) as u64
        } else {
            self.value_start + (i - body) as u64
        }
    }

    /// The page-aligned file reads that hold value bytes `a..z` (clamped to the value),
    /// in value order: none for an empty range, one, or two when the range reaches into
    /// a rotated value's tail from before it.
    pub fn reads_for(&self, a: usize, z: usize) -> Vec<PageRead> {
        let z = z.min(self.value_len);
        let a = a.min(z);
        let body = self.value_len - self.tail;
        [a..z.min(body), a.max(body)..z]
            .into_iter()
            .filter(|p| p.start < p.end)
            .map(|part| {
                let from = self.file_offset(part.start);
                let to = self.file_offset(part.end - 1) + 1;
                let start = align_down(from, PAGE as u64);
                let len = (align_up(to, PAGE as u64) - start) as u32;
                let lead = (from - start) as u32;
                PageRead {
                    start,
                    len,
                    part,
                    lead,
                }
            })
            .collect()
    }
}

/// A verified head of a paged block: enough to read and check any part of its value.
#[derive(Debug)]
pub struct PagedHead {
    /// File offset of the block.
    off: u64,
    payload_start: u64,
    layout: ValueLayout,
    /// One crc32c per device page of the payload, the first for the page `off` is in.
    table: Box<[u32]>,
}

/// One page-aligned file read for part of a value: the file's bytes
/// `start..start + len` hold value bytes `part`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageRead {
    pub start: u64,
    pub len: u32,
    pub part: Range<usize>,
    /// Bytes of the read before the part's first byte (the part's bytes are
    /// contiguous from there).
    pub lead: u32,
}

impl PagedHead {
    /// Parses and verifies the head of the paged block at `off` from `buf`, which holds
    /// the file from `buf_off` (page aligned) at least to the end of the page the value
    /// starts in. Checks the header and table checksum, the page checksums of the
    /// record's header and key, and that the record is `(coll, key, seqno)`; block
    /// checksums are seeded with `seed`.
    pub fn parse(
        buf: &[u8],
        buf_off: u64,
        off: u64,
        coll: CollId,
        key: &[u8],
        seqno: Seqno,
        seed: u32,
    ) -> Result<PagedHead, String> {
        let rel = off
            .checked_sub(buf_off)
            .and_then(|r| usize::try_from(r).ok())
            .ok_or("head read starts after the block")?;
        let b = buf.get(rel..).ok_or("head read is short")?;
        let h = BlockHeader::parse(b).ok_or("bad block header")?;
        if !h.is_paged() {
            return Err("block is not paged".into());
        }
        block::check_header_crc(b, &h, seed)?;
        let table_end = h.payload_start();
        let table: Box<[u32]> = (0..h.pages as usize)
            .map(|i| block::table_entry(b, i))
            .collect();
        let mut r = Reader::new(b.get(table_end..).ok_or("head read is short")?);
        let rh = record::decode_head(&mut r).ok_or("record header past the head read")?;
        let value_at = table_end + r.pos();
        if rh.kind != Kind::Put || rh.coll != coll || rh.key != key || rh.seqno != seqno {
            return Err(crate::read_path::not_in_block(key, seqno));
        }
        if value_at + rh.value_len != h.disk_len() {
            return Err("record does not end where its paged block does".into());
        }
        let value_start = off + value_at as u64;
        let tail = if h.flags & block::FLAG_ROTATED != 0 {
            block::tail_len(value_start, rh.value_len)
        } else {
            0
        };
        // The pages holding the record's header and key.
        block::check_pages(b, off, &h, value_at)?;
        Ok(PagedHead {
            off,
            payload_start: off + table_end as u64,
            layout: ValueLayout {
                value_start,
                value_len: rh.value_len,
                tail,
            },
            table,
        })
    }

    /// Length of the value.
    pub fn value_len(&self) -> usize {
        self.layout.value_len
    }

    /// Where the block keeps its value's bytes.
    pub fn layout(&self) -> &ValueLayout {
        &self.layout
    }

    /// The page-aligned file reads that hold value bytes `a..z`; see
    /// [`ValueLayout::reads_for`].
    pub fn reads_for(&self, a: usize, z: usize) -> Vec<PageRead> {
        self.layout.reads_for(a, z)
    }

    /// Value bytes `part` (one [`PageRead::part`] of [`Self::reads_for`]) from `buf`,
    /// the file read from `buf_off` as that read said, after checking the checksum of
    /// every page they touch. `Err` gives the file offset of a bad page and what is
    /// wrong.
    pub fn extract<'b>(
        &self,
        buf: &'b [u8],
        buf_off: u64,
        part: Range<usize>,
    ) -> Result<&'b [u8], (u64, String)> {
        if part.start >= part.end || part.end > self.layout.value_len {
            return Ok(&[]);
        }
        let from = self.layout.file_offset(part.start);
        let to = self.layout.file_offset(part.end - 1) + 1;
        if to - from != part.len() as u64 {
            return Err((
                from,
                "part crosses the end of a rotated value's body".into(),
            ));
        }
        let end = self.layout.value_start + self.layout.value_len as u64;
        let first = align_down(self.payload_start, PAGE as u64);
        let slice = |r: Range<u64>| {
            r.start
                .checked_sub(buf_off)
                .and_then(|s| buf.get(s as usize..(r.end - buf_off) as usize))
        };
        let mut page = align_down(from, PAGE as u64);
        while page < to {
            let span = page.max(self.payload_start)..(page + PAGE as u64).min(end);
            let i = ((page - first) / PAGE as u64) as usize;
            let bytes = slice(span).ok_or((page, "short read".to_string()))?;
            if self.table.get(i) != Some(&crc32c::crc32c(bytes)) {
                return Err((
                    page,
                    format!("page checksum mismatch (block at offset {})", self.off),
                ));
            }
            page += PAGE as u64;
        }
        slice(from..to).ok_or((from, "short read".to_string()))
    }

    /// Bytes to charge the head cache for this head.
    pub fn charge(&self) -> usize {
        std::mem::size_of::<Self>() + 4 * self.table.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::tests::noise;
    use crate::block::BlockBuilder;
    use crate::options::Compression;
    use crate::record::RecordRef;
    use proptest::prelude::*;

    /// A file image with one paged block of `(key, value)` at `off`, laid out as the
    /// writer does (`rotate`) or as segment format 3 did; returns the image and the
    /// block's length.
    fn image_of(off: u64, key: &[u8], value: &[u8], rotate: bool) -> (Vec<u8>, u32) {
        let mut b = BlockBuilder::default();
        b.add(&RecordRef {
            kind: Kind::Put,
            reloc: false,
            coll: 3,
            seqno: 77,
            key,
            value,
        });
        let mut blk = Vec::new();
        b.seal_unframed(&mut blk, Compression::None);
        block::make_paged(&mut blk, off, rotate, &mut Vec::new());
        block::frame(&mut blk, 0, 0);
        let mut file = vec![0u8; off as usize];
        file.extend_from_slice(&blk);
        file.resize(align_up(file.len() as u64, PAGE as u64) as usize, 0);
        (file, blk.len() as u32)
    }

    fn image(off: u64, key: &[u8], value: &[u8]) -> (Vec<u8>, u32) {
        image_of(off, key, value, true)
    }

    fn head_of(file: &[u8], g: &Geometry, key: &[u8]) -> PagedHead {
        let (s, l) = g.head_pages();
        PagedHead::parse(
            &file[s as usize..(s + l as u64) as usize],
            s,
            g.off,
            3,
            key,
            77,
            0,
        )
        .unwrap()
    }

    /// The bytes of a part, or the bad page's offset and what is wrong.
    type PartResult = Result<Vec<u8>, (u64, String)>;

    /// Value bytes `a..z` read from `file` as the engine does: each of
    /// [`PagedHead::reads_for`]'s reads, checked and put in place. Also returns the
    /// reads.
    fn read_part(head: &PagedHead, file: &[u8], a: usize, z: usize) -> (PartResult, Vec<PageRead>) {
        let reads = head.reads_for(a, z);
        let mut out = Vec::new();
        for r in &reads {
            let buf = &file[r.start as usize..(r.start + r.len as u64) as usize];
            match head.extract(buf, r.start, r.part.clone()) {
                Ok(b) => out.extend_from_slice(b),
                Err(e) => return (Err(e), reads),
            }
        }
        (Ok(out), reads)
    }

    proptest! {
        /// Any part of the value read through the head and its pages equals the value's
        /// bytes, wherever the block starts in its page, rotated or not; each read is
        /// the fewest pages that hold its part.
        #[test]
        fn any_range_reads_back_the_values_bytes(
            off in 4096u64..20_000, vlen in 16_400usize..70_000, a in 0usize..80_000,
            n in 0usize..70_000, rotate: bool,
        ) {
            let key = b"chunk/7";
            let value = noise(vlen, off);
            let (file, len) = image_of(off, key, &value, rotate);
            let rec = crate::record::encoded_len(3, 77, key.len(), vlen);
            let g = Geometry::guess(off, len, rec, 3, 77, key.len()).expect("paged geometry");
            prop_assert_eq!(g.value_len, vlen);
            let head = head_of(&file, &g, key);
            // The layout predicted before the head is read is the block's own when the
            // block is rotated, or when an unrotated value happens to start on a page.
            let tail_free = g.value_start.is_multiple_of(4096);
            prop_assert_eq!(g.rotated_layout() == *head.layout(), rotate || tail_free);
            let (got, reads) = read_part(&head, &file, a, a + n);
            let (ca, cz) = (a.min(vlen), (a + n).min(vlen));
            prop_assert_eq!(&got.unwrap()[..], &value[ca.min(cz)..cz]);
            prop_assert!(reads.len() <= 1 + rotate as usize);
            for r in &reads {
                let from = head.layout.file_offset(r.part.start);
                let to = head.layout.file_offset(r.part.end - 1) + 1;
                prop_assert_eq!(r.start, align_down(from, 4096));
                prop_assert_eq!(r.start + r.len as u64, align_up(to, 4096));
            }
        }

        /// In a rotated block a page-aligned part of the value short of its tail is read
        /// as exactly its own pages: one 4 KiB device read for a file's 4 KiB page.
        #[test]
        fn a_page_aligned_part_of_a_rotated_value_is_its_own_pages(
            off in 4096u64..20_000, pages in 5usize..17, first in 0usize..16, n in 1usize..4,
        ) {
            let key = b"chunk/7";
            let value = noise(pages * 4096, off);
            let (file, len) = image(off, key, &value);
            let rec = crate::record::encoded_len(3, 77, key.len(), value.len());
            let g = Geometry::guess(off, len, rec, 3, 77, key.len()).unwrap();
            let head = head_of(&file, &g, key);
            let a = (first % (pages - 1)) * 4096;
            let z = (a + n * 4096).min((pages - 1) * 4096);
            let (got, reads) = read_part(&head, &file, a, z);
            prop_assert_eq!(&got.unwrap()[..], &value[a..z]);
            prop_assert_eq!(reads.len(), 1);
            prop_assert_eq!(reads[0].len as usize, z - a);
        }
    }

    proptest! {
        #[test]
        fn head_parser_survives_arbitrary_bytes(b in proptest::collection::vec(any::<u8>(), 0..600)) {
            crate::decoders::paged_head(&b);
        }

        /// A real block's head with bytes damaged anywhere: an error or a head whose
        /// checked parts still hold (never a panic).
        #[test]
        fn head_parser_survives_damage(at in 0usize..8192, x in 1u8..=255, off in 4096u64..8000) {
            let (mut file, _) = image(off, b"k", &noise(20_000, 1));
            let at = at % file.len();
            file[at] ^= x;
            let _ = PagedHead::parse(&file, 0, off, 3, b"k", 77, 0);
        }
    }

    #[test]
    fn a_block_that_is_not_paged_has_no_paged_geometry() {
        // Same record, stored without page checksums: the length does not fit.
        let rec = crate::record::encoded_len(3, 77, 7, 20_000);
        assert!(Geometry::guess(4096, (HEADER_LEN + rec) as u32, rec, 3, 77, 7).is_none());
        // Too small to be paged.
        assert!(Geometry::guess(4096, 9000, 8000, 3, 77, 7).is_none());
    }

    #[test]
    fn every_flipped_byte_in_the_pages_read_is_detected() {
        let key = b"k";
        let value = noise(40_000, 9);
        let off = 4096 + 3000;
        let (file, len) = image(off, key, &value);
        let rec = crate::record::encoded_len(3, 77, 1, value.len());
        let g = Geometry::guess(off, len, rec, 3, 77, 1).unwrap();
        let (hs, hl) = g.head_pages();
        let head_range = hs as usize..(hs + hl as u64) as usize;
        for at in head_range.clone() {
            let mut f = file.clone();
            f[at] ^= 0x10;
            let r = PagedHead::parse(&f[head_range.clone()], hs, off, 3, key, 77, 0);
            // Bytes before the block and after the key's page are not the head's.
            let in_head = at as u64 >= off && (at as u64) < align_up(g.value_start, 4096);
            if in_head {
                assert!(r.is_err(), "flip at {at} in the head not detected");
            }
        }
        let head = head_of(&file, &g, key);
        // A part from the body and the tail (two reads).
        let (a, z) = (10_000, value.len() - 10);
        let (_, reads) = read_part(&head, &file, a, z);
        assert_eq!(reads.len(), 2, "{reads:?}");
        for r in &reads {
            for at in r.start..r.start + r.len as u64 {
                let mut f = file.clone();
                f[at as usize] ^= 1;
                let (got, _) = read_part(&head, &f, a, z);
                // Bytes past the block, or before its payload, are no page's.
                if at < off + len as u64 && at >= head.payload_start {
                    let (page, _) = got.expect_err("flip in a page read");
                    assert_eq!(page, align_down(at, 4096), "names the damaged page");
                }
            }
        }
    }
}

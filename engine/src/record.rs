//! Records: the unit stored in log blocks. One record is one put, delete or
//! catalog change, carrying collection id, key, seqno, kind and value.
//!
//! Encoding: `kind:u8 | coll:varint | seqno:varint | klen:varint | vlen:varint | key | value`.
//! Bit 0x80 of `kind` marks a copy written by GC (relocation).

use crate::codec::{put_varint, varint_len, Reader};

/// Sequence number: global, strictly increasing across all collections.
pub type Seqno = u64;
/// Collection id (never reused after a drop).
pub type CollId = u32;

/// What a record does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Put = 0,
    Delete = 1,
    /// A collection catalog change (create/drop/rename); value is JSON.
    Catalog = 2,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        match b {
            0 => Some(Kind::Put),
            1 => Some(Kind::Delete),
            2 => Some(Kind::Catalog),
            _ => None,
        }
    }
}

const RELOC_BIT: u8 = 0x80;

/// A decoded record borrowing from its block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordRef<'a> {
    pub kind: Kind,
    /// Written by GC as a copy of a record with the same seqno.
    pub reloc: bool,
    pub coll: CollId,
    pub seqno: Seqno,
    pub key: &'a [u8],
    pub value: &'a [u8],
}

impl RecordRef<'_> {
    /// Bytes this record takes in an uncompressed block.
    pub fn encoded_len(&self) -> usize {
        encoded_len(self.coll, self.seqno, self.key.len(), self.value.len())
    }
}

/// Encoded size of a record with these fields.
pub fn encoded_len(coll: CollId, seqno: Seqno, klen: usize, vlen: usize) -> usize {
    1 + varint_len(coll as u64)
        + varint_len(seqno)
        + varint_len(klen as u64)
        + varint_len(vlen as u64)
        + klen
        + vlen
}

/// Appends one record to `buf`.
pub fn encode(buf: &mut Vec<u8>, r: &RecordRef<'_>) {
    buf.push(r.kind as u8 | if r.reloc { RELOC_BIT } else { 0 });
    put_varint(buf, r.coll as u64);
    put_varint(buf, r.seqno);
    put_varint(buf, r.key.len() as u64);
    put_varint(buf, r.value.len() as u64);
    buf.extend_from_slice(r.key);
    buf.extend_from_slice(r.value);
}

/// Iterates the records of an uncompressed block payload. Yields `Err(offset)`
/// once (then stops) if the payload is malformed.
pub struct RecordIter<'a> {
    r: Reader<'a>,
    failed: bool,
}

impl<'a> RecordIter<'a> {
    pub fn new(payload: &'a [u8]) -> Self {
        RecordIter {
            r: Reader::new(payload),
            failed: false,
        }
    }

    fn decode_one(&mut self) -> Option<RecordRef<'a>> {
        let h = decode_head(&mut self.r)?;
        let value = self.r.bytes(h.value_len)?;
        Some(RecordRef {
            kind: h.kind,
            reloc: h.reloc,
            coll: h.coll,
            seqno: h.seqno,
            key: h.key,
            value,
        })
    }
}

/// A record's fields up to its key: what a read of part of a large value checks
/// before it takes bytes from the value, which starts right after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHead<'a> {
    pub kind: Kind,
    pub reloc: bool,
    pub coll: CollId,
    pub seqno: Seqno,
    pub key: &'a [u8],
    pub value_len: usize,
}

/// Decodes a record's head from `r`, leaving it at the first byte of the value.
pub fn decode_head<'a>(r: &mut Reader<'a>) -> Option<RecordHead<'a>> {
    let kb = r.u8()?;
    let kind = Kind::from_u8(kb & !RELOC_BIT)?;
    let coll = u32::try_from(r.varint()?).ok()?;
    let seqno = r.varint()?;
    let klen = usize::try_from(r.varint()?).ok()?;
    let value_len = usize::try_from(r.varint()?).ok()?;
    let key = r.bytes(klen)?;
    Some(RecordHead {
        kind,
        reloc: kb & RELOC_BIT != 0,
        coll,
        seqno,
        key,
        value_len,
    })
}

/// Value length of a record with these fields whose encoding is `rec_size` bytes.
pub fn value_len(coll: CollId, seqno: Seqno, klen: usize, rec_size: usize) -> Option<usize> {
    let fixed = 1 + varint_len(coll as u64) + varint_len(seqno) + varint_len(klen as u64);
    (1..=10).find_map(|vb| {
        let vlen = rec_size.checked_sub(fixed + vb + klen)?;
        (varint_len(vlen as u64) == vb).then_some(vlen)
    })
}

impl<'a> Iterator for RecordIter<'a> {
    /// `(offset in payload, record)` or `Err(offset)` where decoding failed.
    type Item = Result<(usize, RecordRef<'a>), usize>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.r.is_empty() {
            return None;
        }
        let at = self.r.pos();
        match self.decode_one() {
            Some(rec) => Some(Ok((at, rec))),
            None => {
                self.failed = true;
                Some(Err(at))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn encode_decode_roundtrip_with_reloc_flag() {
        let mut buf = Vec::new();
        let a = RecordRef {
            kind: Kind::Put,
            reloc: true,
            coll: 7,
            seqno: 1 << 40,
            key: b"k",
            value: b"value",
        };
        let b = RecordRef {
            kind: Kind::Delete,
            reloc: false,
            coll: 0,
            seqno: 2,
            key: b"",
            value: b"",
        };
        encode(&mut buf, &a);
        encode(&mut buf, &b);
        assert_eq!(buf.len(), a.encoded_len() + b.encoded_len());
        let got: Vec<_> = RecordIter::new(&buf).map(|r| r.unwrap().1).collect();
        assert_eq!(got, vec![a, b]);
    }

    proptest! {
        /// The value length is recovered from a record's encoded size and other fields,
        /// across every varint width.
        #[test]
        fn value_len_inverts_encoded_len(coll in any::<u32>(), seqno in any::<u64>(),
                                         klen in 0usize..300, vexp in 0u32..28, vlo in 0usize..1000) {
            let vlen = (1usize << vexp) + vlo;
            let size = encoded_len(coll, seqno, klen, vlen);
            prop_assert_eq!(value_len(coll, seqno, klen, size), Some(vlen));
        }

        #[test]
        fn record_decoder_survives_arbitrary_bytes(b in proptest::collection::vec(any::<u8>(), 0..256)) {
            for (at, r) in RecordIter::new(&b).flatten() {
                prop_assert!(at + r.encoded_len() <= b.len());
            }
        }
    }
}

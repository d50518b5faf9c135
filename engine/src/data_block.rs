//! A decompressed log block as the data cache holds it: the payload plus a table from
//! seqno to record offset, built once when the block enters the cache, so a point read
//! decodes the one record it wants instead of walking the block.

use crate::record::{CollId, RecordIter, RecordRef, Seqno};

/// Bytes the offset table costs per record (charged to the cache with the payload).
const SLOT_BYTES: usize = std::mem::size_of::<(Seqno, u32)>();

/// An uncompressed block payload with its seqno → offset table.
#[derive(Debug)]
pub struct DataBlock {
    payload: Vec<u8>,
    /// `(seqno, offset in payload)`, sorted by seqno.
    slots: Vec<(Seqno, u32)>,
}

impl DataBlock {
    /// Indexes `payload`, which its block header says holds `nrecs` records (sizes
    /// the table in one allocation). `Err(offset)` names the first record that does
    /// not decode.
    pub fn new(payload: Vec<u8>, nrecs: usize) -> Result<DataBlock, usize> {
        let mut slots = Vec::with_capacity(nrecs);
        for item in RecordIter::new(&payload) {
            let (at, r) = item?;
            slots.push((r.seqno, at as u32));
        }
        // Log order is seqno order; sorting keeps lookups right whatever wrote the block.
        if !slots.is_sorted() {
            slots.sort_unstable();
        }
        Ok(DataBlock { payload, slots })
    }

    /// The uncompressed records, in log order.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// Bytes to charge the cache for this block.
    pub fn charge(&self) -> usize {
        self.payload.capacity() + self.slots.capacity() * SLOT_BYTES
    }

    /// The record `(coll, key, seqno)` if this block holds it.
    pub fn find(&self, coll: CollId, key: &[u8], seqno: Seqno) -> Option<RecordRef<'_>> {
        let first = self.slots.partition_point(|(s, _)| *s < seqno);
        self.slots[first..]
            .iter()
            .take_while(|(s, _)| *s == seqno)
            .filter_map(|&(_, at)| {
                let (_, r) = RecordIter::new(&self.payload[at as usize..]).next()?.ok()?;
                (r.coll == coll && r.key == key).then_some(r)
            })
            .next()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{encode, Kind};
    use proptest::prelude::*;

    fn rec(coll: CollId, seqno: Seqno, key: &[u8], value: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        encode(
            &mut b,
            &RecordRef {
                kind: Kind::Put,
                reloc: false,
                coll,
                seqno,
                key,
                value,
            },
        );
        b
    }

    proptest! {
        /// Every record of a block is found by (coll, key, seqno) with its value, in any
        /// seqno order; a wrong key, collection or seqno finds nothing.
        #[test]
        fn finds_exactly_the_records_of_the_block(
            seqnos in proptest::collection::hash_set(1u64..10_000, 1..40),
        ) {
            let seqnos: Vec<u64> = seqnos.into_iter().collect();
            let mut payload = Vec::new();
            for s in &seqnos {
                payload.extend(rec((s % 3) as CollId, *s, format!("k{s}").as_bytes(), &s.to_le_bytes()));
            }
            payload.shrink_to_fit();
            let b = DataBlock::new(payload, seqnos.len()).unwrap();
            for s in &seqnos {
                let coll = (s % 3) as CollId;
                let key = format!("k{s}");
                let r = b.find(coll, key.as_bytes(), *s).expect("record present");
                prop_assert_eq!(r.value, &s.to_le_bytes()[..]);
                prop_assert!(b.find(coll + 1, key.as_bytes(), *s).is_none());
                prop_assert!(b.find(coll, b"other", *s).is_none());
                prop_assert!(b.find(coll, key.as_bytes(), s + 10_000).is_none());
            }
            // Charged at what is allocated: payload and a table sized from the header.
            prop_assert_eq!(b.charge(), b.payload().len() + seqnos.len() * SLOT_BYTES);
        }

        #[test]
        fn indexing_survives_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            if let Ok(b) = DataBlock::new(bytes, 4) {
                for &(s, _) in &b.slots {
                    let _ = b.find(0, b"", s);
                }
            }
        }
    }

    #[test]
    fn a_malformed_record_is_reported_at_its_offset() {
        let mut payload = rec(1, 1, b"a", b"x");
        let at = payload.len();
        payload.push(0x7f); // not a record kind
        assert_eq!(DataBlock::new(payload, 1).unwrap_err(), at);
    }
}

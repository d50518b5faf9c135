//! Index run data blocks: prefix-compressed, varint-packed index entries with restart
//! points, so a cached block holds ~2x the entries of a fixed-width layout and a point
//! lookup binary-searches restarts instead of decoding the whole block.
//!
//! Block: `crc:u32 (of bytes 4..used) | count:u16 | nrestarts:u16 | used:u32 | entries |
//! nrestarts × restart:u32`, zero padded to whole pages. A restart is the offset (from
//! the block start) of every `RESTART_INTERVAL`-th entry; entries there store their
//! whole key.
//!
//! Entry: `shared:varint | unshared:varint | key suffix | coll:varint | seqno:varint |
//! flags:u8 | seg:varint | off:varint | len:varint | rec_size:varint`, where `shared`
//! is the number of leading key bytes equal to the previous entry's key (0 at restarts
//! and when the collection changes). Flags: bit 0 tombstone, bit 7 relocated.

use crate::aligned::PAGE;
use crate::codec::{put_varint, varint_len, Reader};
use crate::entry::{IndexEntry, Location};
use crate::record::{CollId, Kind};
use std::cmp::Ordering;

/// Bytes before the first entry.
pub const BLOCK_HEADER: usize = 12;
/// Every this many entries the full key is stored (binary-search points).
const RESTART_INTERVAL: u16 = 16;

/// One decoded index entry with its collection and key.
pub type KeyedEntry = (CollId, Box<[u8]>, IndexEntry);

/// Orders (collection, key) pairs the way runs are sorted.
pub fn cmp_key(ac: CollId, ak: &[u8], bc: CollId, bk: &[u8]) -> Ordering {
    ac.cmp(&bc).then_with(|| ak.cmp(bk))
}

fn shared_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn value_len(coll: CollId, e: &IndexEntry) -> usize {
    varint_len(coll as u64)
        + varint_len(e.seqno)
        + 1
        + varint_len(e.loc.seg as u64)
        + varint_len(e.loc.off)
        + varint_len(e.loc.len as u64)
        + varint_len(e.rec_size as u64)
}

/// Accumulates sorted entries into one block.
#[derive(Default)]
pub struct BlockBuilder {
    body: Vec<u8>,
    restarts: Vec<u32>,
    count: u16,
    last: Option<(CollId, Vec<u8>)>,
}

impl BlockBuilder {
    /// Number of entries added since the last `finish`.
    pub fn len(&self) -> u16 {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn shared_with_last(&self, coll: CollId, key: &[u8]) -> usize {
        match &self.last {
            Some((c, k)) if *c == coll && !self.count.is_multiple_of(RESTART_INTERVAL) => {
                shared_prefix(k, key).min(u16::MAX as usize)
            }
            _ => 0,
        }
    }

    /// Bytes the block would use (header, entries, restarts) after adding this entry.
    pub fn used_with(&self, coll: CollId, key: &[u8], e: &IndexEntry) -> usize {
        let shared = self.shared_with_last(coll, key);
        let unshared = key.len() - shared;
        let restart = self.count.is_multiple_of(RESTART_INTERVAL) as usize;
        BLOCK_HEADER
            + self.body.len()
            + varint_len(shared as u64)
            + varint_len(unshared as u64)
            + unshared
            + value_len(coll, e)
            + 4 * (self.restarts.len() + restart)
    }

    /// Appends an entry; (coll, key) must be greater than the previous one.
    pub fn add(&mut self, coll: CollId, key: &[u8], e: &IndexEntry) {
        let shared = self.shared_with_last(coll, key);
        if self.count.is_multiple_of(RESTART_INTERVAL) {
            self.restarts.push((BLOCK_HEADER + self.body.len()) as u32);
        }
        let b = &mut self.body;
        put_varint(b, shared as u64);
        put_varint(b, (key.len() - shared) as u64);
        b.extend_from_slice(&key[shared..]);
        put_varint(b, coll as u64);
        put_varint(b, e.seqno);
        b.push((e.kind == Kind::Delete) as u8 | if e.reloc { 0x80 } else { 0 });
        put_varint(b, e.loc.seg as u64);
        put_varint(b, e.loc.off);
        put_varint(b, e.loc.len as u64);
        put_varint(b, e.rec_size as u64);
        match &mut self.last {
            Some((c, k)) => {
                *c = coll;
                k.clear();
                k.extend_from_slice(key);
            }
            None => self.last = Some((coll, key.to_vec())),
        }
        self.count += 1;
    }

    /// Seals the block: header, restarts, checksum, zero padding to whole pages.
    /// The builder is left empty.
    pub fn finish(&mut self) -> Vec<u8> {
        let used = BLOCK_HEADER + self.body.len() + 4 * self.restarts.len();
        let mut b = vec![0u8; used.div_ceil(PAGE) * PAGE];
        b[4..6].copy_from_slice(&self.count.to_le_bytes());
        b[6..8].copy_from_slice(&(self.restarts.len() as u16).to_le_bytes());
        b[8..12].copy_from_slice(&(used as u32).to_le_bytes());
        b[BLOCK_HEADER..BLOCK_HEADER + self.body.len()].copy_from_slice(&self.body);
        let mut at = BLOCK_HEADER + self.body.len();
        for r in &self.restarts {
            b[at..at + 4].copy_from_slice(&r.to_le_bytes());
            at += 4;
        }
        let crc = crc32c::crc32c(&b[4..used]);
        b[0..4].copy_from_slice(&crc.to_le_bytes());
        self.body.clear();
        self.restarts.clear();
        self.count = 0;
        self.last = None;
        b
    }
}

/// Bytes of the block that carry data (header, entries, restarts); `None` if the
/// header is malformed.
pub fn used_len(block: &[u8]) -> Option<usize> {
    let used = u32::from_le_bytes(block.get(8..12)?.try_into().ok()?) as usize;
    (BLOCK_HEADER..=block.len()).contains(&used).then_some(used)
}

/// Verifies a block's checksum.
pub fn verify_block(block: &[u8]) -> bool {
    let Some(used) = used_len(block) else {
        return false;
    };
    let crc = u32::from_le_bytes(block[0..4].try_into().unwrap());
    crc32c::crc32c(&block[4..used]) == crc
}

/// A parsed block header: entry count, where entries end, restart offsets.
struct Layout<'a> {
    count: usize,
    entries_end: usize,
    restarts: &'a [u8],
}

impl<'a> Layout<'a> {
    fn parse(block: &'a [u8]) -> Option<Layout<'a>> {
        let used = used_len(block)?;
        let count = u16::from_le_bytes(block[4..6].try_into().ok()?) as usize;
        let nrestarts = u16::from_le_bytes(block[6..8].try_into().ok()?) as usize;
        if nrestarts != count.div_ceil(RESTART_INTERVAL as usize) {
            return None;
        }
        let entries_end = used.checked_sub(4 * nrestarts)?;
        if entries_end < BLOCK_HEADER {
            return None;
        }
        Some(Layout {
            count,
            entries_end,
            restarts: &block[entries_end..used],
        })
    }

    fn restart(&self, i: usize) -> usize {
        u32::from_le_bytes(self.restarts[4 * i..4 * i + 4].try_into().unwrap()) as usize
    }

    fn nrestarts(&self) -> usize {
        self.restarts.len() / 4
    }

    /// Entries in restart group `i`.
    fn group_len(&self, i: usize) -> usize {
        (self.count - i * RESTART_INTERVAL as usize).min(RESTART_INTERVAL as usize)
    }
}

/// Decodes one entry at the reader, extending/truncating `key` by the prefix rule.
fn decode_entry(r: &mut Reader<'_>, key: &mut Vec<u8>) -> Option<(CollId, IndexEntry)> {
    let shared = r.varint()? as usize;
    let unshared = r.varint()? as usize;
    if shared > key.len() {
        return None;
    }
    key.truncate(shared);
    key.extend_from_slice(r.bytes(unshared)?);
    let coll = CollId::try_from(r.varint()?).ok()?;
    let seqno = r.varint()?;
    let flags = r.u8()?;
    if flags & !0x81 != 0 {
        return None;
    }
    let seg = u32::try_from(r.varint()?).ok()?;
    let off = r.varint()?;
    let len = u32::try_from(r.varint()?).ok()?;
    let rec_size = u32::try_from(r.varint()?).ok()?;
    let kind = if flags & 1 != 0 {
        Kind::Delete
    } else {
        Kind::Put
    };
    Some((
        coll,
        IndexEntry {
            seqno,
            kind,
            reloc: flags & 0x80 != 0,
            loc: Location { seg, off, len },
            rec_size,
        },
    ))
}

/// Decodes every entry of a block, checking that restarts point at full-key entries
/// and that entries are strictly increasing. `None` if anything is malformed.
pub fn decode_block_entries(block: &[u8]) -> Option<Vec<KeyedEntry>> {
    let l = Layout::parse(block)?;
    let mut r = Reader::new(block.get(..l.entries_end)?);
    r.bytes(BLOCK_HEADER)?;
    let mut out: Vec<KeyedEntry> = Vec::with_capacity(l.count);
    let mut key = Vec::new();
    for i in 0..l.count {
        if i.is_multiple_of(RESTART_INTERVAL as usize) {
            if l.restart(i / RESTART_INTERVAL as usize) != r.pos() {
                return None;
            }
            key.clear();
        }
        let (coll, e) = decode_entry(&mut r, &mut key)?;
        if let Some((pc, pk, _)) = out.last() {
            if cmp_key(*pc, pk, coll, &key) != Ordering::Less {
                return None;
            }
        }
        out.push((coll, key.as_slice().into(), e));
    }
    r.is_empty().then_some(out)
}

/// Restart group that may hold (coll, key): the last whose first key ≤ it; `Ok(None)`
/// if the key sorts before the block. `Err(())` if the block is malformed.
fn find_group(block: &[u8], l: &Layout<'_>, coll: CollId, key: &[u8]) -> Result<Option<usize>, ()> {
    let body = block.get(..l.entries_end).ok_or(())?;
    let mut buf = Vec::with_capacity(key.len() + 16);
    let (mut lo, mut hi) = (0usize, l.nrestarts());
    while lo < hi {
        let mid = (lo + hi) / 2;
        // The entry at a restart has shared = 0: its key is whole.
        let mut r = Reader::new(body.get(l.restart(mid)..).ok_or(())?);
        buf.clear();
        let (c, _) = decode_entry(&mut r, &mut buf).ok_or(())?;
        if cmp_key(c, &buf, coll, key) == Ordering::Greater {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Ok(lo.checked_sub(1))
}

/// Point lookup in a verified block: binary search over restarts, then a short scan.
/// `Err(())` if the block is malformed.
#[allow(clippy::result_unit_err)]
pub fn block_get(block: &[u8], coll: CollId, key: &[u8]) -> Result<Option<IndexEntry>, ()> {
    let l = Layout::parse(block).ok_or(())?;
    let Some(start) = find_group(block, &l, coll, key)? else {
        return Ok(None);
    };
    let body = block.get(..l.entries_end).ok_or(())?;
    let mut r = Reader::new(body.get(l.restart(start)..).ok_or(())?);
    let mut buf = Vec::with_capacity(key.len() + 16);
    for _ in 0..l.group_len(start) {
        let (c, e) = decode_entry(&mut r, &mut buf).ok_or(())?;
        match cmp_key(c, &buf, coll, key) {
            Ordering::Less => continue,
            Ordering::Equal => return Ok(Some(e)),
            Ordering::Greater => break,
        }
    }
    Ok(None)
}

/// The entries of one restart interval (at most 16) of a block, decoded into buffers
/// that are reused from group to group: walking a block allocates nothing per entry.
#[derive(Default, Debug)]
pub struct Group {
    keys: Vec<u8>,
    ends: Vec<usize>,
    items: Vec<(CollId, IndexEntry)>,
}

impl Group {
    /// Entries in the group.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when the group holds no entries.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Entry `i`: (collection, key, index entry).
    pub fn get(&self, i: usize) -> (CollId, &[u8], IndexEntry) {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        let (c, e) = self.items[i];
        (c, &self.keys[start..self.ends[i]], e)
    }

    /// How many entries sort before (coll, key), or also equal to it when `inclusive`.
    pub fn count_below(&self, coll: CollId, key: &[u8], inclusive: bool) -> usize {
        (0..self.len())
            .find(|&i| {
                let (c, k, _) = self.get(i);
                match cmp_key(c, k, coll, key) {
                    Ordering::Less => false,
                    Ordering::Equal => !inclusive,
                    Ordering::Greater => true,
                }
            })
            .unwrap_or(self.len())
    }
}

/// Restart groups of a block; `None` if its header is malformed.
pub fn group_count(block: &[u8]) -> Option<usize> {
    Layout::parse(block).map(|l| l.nrestarts())
}

/// Restart group that may hold (coll, key) (see `find_group`); `Err(())` if malformed.
#[allow(clippy::result_unit_err)]
pub fn group_for(block: &[u8], coll: CollId, key: &[u8]) -> Result<Option<usize>, ()> {
    let l = Layout::parse(block).ok_or(())?;
    find_group(block, &l, coll, key)
}

/// Decodes restart group `i` of a block into `g`, checking that it ends where the next
/// group starts and that its keys strictly increase. `None` if malformed.
pub fn decode_group(block: &[u8], i: usize, g: &mut Group) -> Option<()> {
    let l = Layout::parse(block)?;
    if i >= l.nrestarts() {
        return None;
    }
    let end = if i + 1 < l.nrestarts() {
        l.restart(i + 1)
    } else {
        l.entries_end
    };
    let mut r = Reader::new(block.get(l.restart(i)..end)?);
    g.keys.clear();
    g.ends.clear();
    g.items.clear();
    let mut key = Vec::new();
    for n in 0..l.group_len(i) {
        let (c, e) = decode_entry(&mut r, &mut key)?;
        if n > 0 {
            let (pc, pk, _) = g.get(n - 1);
            if cmp_key(pc, pk, c, &key) != Ordering::Less {
                return None;
            }
        }
        g.keys.extend_from_slice(&key);
        g.ends.push(g.keys.len());
        g.items.push((c, e));
    }
    r.is_empty().then_some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry(seqno: u64, seg: u32) -> IndexEntry {
        IndexEntry {
            seqno,
            kind: if seqno.is_multiple_of(7) {
                Kind::Delete
            } else {
                Kind::Put
            },
            reloc: seqno.is_multiple_of(5),
            loc: Location {
                seg,
                off: seqno * 4096 + 40,
                len: 16_000,
            },
            rec_size: 440,
        }
    }

    fn build(keys: &[(CollId, Vec<u8>)]) -> Vec<u8> {
        let mut b = BlockBuilder::default();
        for (i, (c, k)) in keys.iter().enumerate() {
            b.add(*c, k, &entry(i as u64 + 1, 3));
        }
        b.finish()
    }

    fn sorted_keys(raw: Vec<(u8, Vec<u8>)>) -> Vec<(CollId, Vec<u8>)> {
        let mut keys: Vec<(CollId, Vec<u8>)> =
            raw.into_iter().map(|(c, k)| (c as CollId % 3, k)).collect();
        keys.sort();
        keys.dedup();
        keys
    }

    #[test]
    fn db_bench_keys_pack_about_twice_as_dense_as_fixed_width() {
        let mut b = BlockBuilder::default();
        let mut n = 0u64;
        let e = entry(30_000_000, 200);
        loop {
            let mut k = (n * 37).to_be_bytes().to_vec();
            k.resize(20, b'0');
            if b.used_with(1, &k, &e) > PAGE {
                break;
            }
            b.add(1, &k, &e);
            n += 1;
        }
        // The fixed-width v1 layout fit 74 such entries in a page.
        assert!(n >= 110, "only {n} entries per 4 KiB page");
    }

    proptest! {
        #[test]
        fn blocks_roundtrip_and_lookups_find_exactly_the_stored_keys(
            raw in proptest::collection::vec((any::<u8>(), proptest::collection::vec(0u8..4, 0..12)), 1..120),
            probes in proptest::collection::vec((any::<u8>(), proptest::collection::vec(0u8..4, 0..12)), 0..40),
        ) {
            let keys = sorted_keys(raw);
            let block = build(&keys);
            prop_assert!(verify_block(&block));
            prop_assert_eq!(block.len() % PAGE, 0);
            let got = decode_block_entries(&block).unwrap();
            prop_assert_eq!(got.len(), keys.len());
            for (i, ((c, k, e), (ec, ek))) in got.iter().zip(&keys).enumerate() {
                prop_assert_eq!((c, &**k), (ec, ek.as_slice()));
                prop_assert_eq!(*e, entry(i as u64 + 1, 3));
                prop_assert_eq!(block_get(&block, *ec, ek).unwrap(), Some(*e));
            }
            for (c, k) in probes {
                let c = c as CollId % 3;
                let want = keys.iter().position(|(kc, kk)| *kc == c && *kk == k);
                let got = block_get(&block, c, &k).unwrap();
                prop_assert_eq!(got.map(|e| e.seqno), want.map(|i| i as u64 + 1));
            }
        }

        #[test]
        fn decoders_survive_arbitrary_bytes(b in proptest::collection::vec(any::<u8>(), 0..600), k in proptest::collection::vec(any::<u8>(), 0..8)) {
            let _ = verify_block(&b);
            let _ = decode_block_entries(&b);
            let _ = block_get(&b, 1, &k);
        }

        #[test]
        fn any_flipped_bit_is_caught_by_the_checksum(
            raw in proptest::collection::vec((any::<u8>(), proptest::collection::vec(any::<u8>(), 0..24)), 1..60),
            bit in any::<usize>(),
        ) {
            let block = build(&sorted_keys(raw));
            let used = used_len(&block).unwrap();
            let mut bad = block.clone();
            let bit = bit % (used * 8);
            bad[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(!verify_block(&bad));
        }
    }
}

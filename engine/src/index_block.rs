//! Index run data blocks: front- and rear-coded, delta-packed index entries with
//! restart points, so a cached block holds several times the entries of a fixed-width
//! layout and a point lookup binary-searches restarts instead of decoding the whole
//! block.
//!
//! Block: `crc:u32 (of bytes 4..used) | count:u16 | nrestarts:u16 | used:u32 | entries |
//! nrestarts × restart:u32`, zero padded to whole pages. A restart is the offset (from
//! the block start) of every `RESTART_INTERVAL`-th entry; decoding starts afresh there
//! (no previous entry), so the entry holds its whole key, collection and location.
//!
//! Entry (format version 3): `shared:varint | rear:varint | mid_len:varint | mid |
//! flags:u8 | [coll:varint] | seqno delta:zigzag varint | [seg:varint | off:varint |
//! len:varint] | rec_size:varint`. The key is the previous entry's first `shared` bytes,
//! then `mid`, then the previous key's last `rear` bytes (front and rear coding: keys
//! that share a padded or fixed suffix, like db_bench's, store only the bytes that
//! differ). The seqno is stored as the difference from the previous entry's. Flags:
//! bit 0 tombstone, bit 1 same location as the previous entry (the location fields are
//! left out), bit 2 the collection follows (set whenever it differs from the previous
//! entry's, always at a restart), bit 7 relocated.

use crate::aligned::PAGE;
use crate::codec::{put_varint, Reader};
use crate::entry::{IndexEntry, Location};
use crate::record::{CollId, Kind};
use std::cmp::Ordering;

/// Bytes before the first entry.
pub const BLOCK_HEADER: usize = 12;
/// Every this many entries decoding restarts from scratch (binary-search points).
const RESTART_INTERVAL: u16 = 16;

const FLAG_TOMBSTONE: u8 = 0x01;
const FLAG_SAME_LOC: u8 = 0x02;
const FLAG_COLL: u8 = 0x04;
const FLAG_RELOC: u8 = 0x80;

/// One decoded index entry with its collection and key.
pub type KeyedEntry = (CollId, Box<[u8]>, IndexEntry);

/// Orders (collection, key) pairs the way runs are sorted.
pub fn cmp_key(ac: CollId, ak: &[u8], bc: CollId, bk: &[u8]) -> Ordering {
    ac.cmp(&bc).then_with(|| ak.cmp(bk))
}

/// A key's first 8 bytes, big-endian and zero padded: keys whose prefixes differ
/// compare like their prefixes, so sorted structures can decide most comparisons on
/// an inline integer without dereferencing the key.
pub fn key_prefix(key: &[u8]) -> u64 {
    let mut p = [0u8; 8];
    let n = key.len().min(8);
    p[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(p)
}

fn shared_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn shared_suffix(a: &[u8], b: &[u8]) -> usize {
    a.iter()
        .rev()
        .zip(b.iter().rev())
        .take_while(|(x, y)| x == y)
        .count()
}

fn zigzag(d: i64) -> u64 {
    ((d << 1) ^ (d >> 63)) as u64
}

fn unzigzag(z: u64) -> i64 {
    (z >> 1) as i64 ^ -((z & 1) as i64)
}

/// The previous entry of a restart group: what the next entry is coded against.
/// `Default` is the state at a restart.
#[derive(Default)]
struct Prev {
    key: Vec<u8>,
    coll: Option<CollId>,
    seqno: u64,
    loc: Option<Location>,
}

impl Prev {
    fn reset(&mut self) {
        self.key.clear();
        self.coll = None;
        self.seqno = 0;
        self.loc = None;
    }

    fn set(&mut self, coll: CollId, key: &[u8], e: &IndexEntry) {
        self.key.clear();
        self.key.extend_from_slice(key);
        self.coll = Some(coll);
        self.seqno = e.seqno;
        self.loc = Some(e.loc);
    }

    /// Appends the entry coded against this previous entry.
    fn encode(&self, out: &mut Vec<u8>, coll: CollId, key: &[u8], e: &IndexEntry) {
        let shared = shared_prefix(&self.key, key);
        let rear = shared_suffix(&self.key[shared..], &key[shared..]);
        let mid = &key[shared..key.len() - rear];
        put_varint(out, shared as u64);
        put_varint(out, rear as u64);
        put_varint(out, mid.len() as u64);
        out.extend_from_slice(mid);
        let same_loc = self.loc == Some(e.loc);
        let new_coll = self.coll != Some(coll);
        let mut flags = 0;
        if e.kind == Kind::Delete {
            flags |= FLAG_TOMBSTONE;
        }
        if same_loc {
            flags |= FLAG_SAME_LOC;
        }
        if new_coll {
            flags |= FLAG_COLL;
        }
        if e.reloc {
            flags |= FLAG_RELOC;
        }
        out.push(flags);
        if new_coll {
            put_varint(out, coll as u64);
        }
        put_varint(out, zigzag(e.seqno.wrapping_sub(self.seqno) as i64));
        if !same_loc {
            put_varint(out, e.loc.seg as u64);
            put_varint(out, e.loc.off);
            put_varint(out, e.loc.len as u64);
        }
        put_varint(out, e.rec_size as u64);
    }

    /// Decodes the next entry; afterwards `self.key` is its key.
    fn decode(&mut self, r: &mut Reader<'_>) -> Option<(CollId, IndexEntry)> {
        let shared = r.varint()? as usize;
        let rear = r.varint()? as usize;
        let mid_len = r.varint()? as usize;
        let mid = r.bytes(mid_len)?;
        if shared.checked_add(rear)? > self.key.len() {
            return None;
        }
        // key = previous[..shared] ++ mid ++ previous[len - rear..], built in place.
        let len = self.key.len();
        let new_len = shared + mid.len() + rear;
        if new_len > len {
            self.key.resize(new_len, 0);
        }
        self.key.copy_within(len - rear..len, shared + mid.len());
        self.key[shared..shared + mid.len()].copy_from_slice(mid);
        self.key.truncate(new_len);
        let flags = r.u8()?;
        if flags & !(FLAG_TOMBSTONE | FLAG_SAME_LOC | FLAG_COLL | FLAG_RELOC) != 0 {
            return None;
        }
        let coll = if flags & FLAG_COLL != 0 {
            CollId::try_from(r.varint()?).ok()?
        } else {
            self.coll?
        };
        let seqno = self.seqno.wrapping_add(unzigzag(r.varint()?) as u64);
        let loc = if flags & FLAG_SAME_LOC != 0 {
            self.loc?
        } else {
            let seg = u32::try_from(r.varint()?).ok()?;
            let off = r.varint()?;
            let len = u32::try_from(r.varint()?).ok()?;
            Location { seg, off, len }
        };
        let rec_size = u32::try_from(r.varint()?).ok()?;
        let kind = if flags & FLAG_TOMBSTONE != 0 {
            Kind::Delete
        } else {
            Kind::Put
        };
        let e = IndexEntry {
            seqno,
            kind,
            reloc: flags & FLAG_RELOC != 0,
            loc,
            rec_size,
        };
        self.coll = Some(coll);
        self.seqno = seqno;
        self.loc = Some(loc);
        Some((coll, e))
    }
}

/// Accumulates sorted entries into one block.
#[derive(Default)]
pub struct BlockBuilder {
    body: Vec<u8>,
    restarts: Vec<u32>,
    count: u16,
    prev: Prev,
    scratch: Vec<u8>,
}

impl BlockBuilder {
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn at_restart(&self) -> bool {
        self.count.is_multiple_of(RESTART_INTERVAL)
    }

    /// Codes the entry against the previous one (or from scratch at a restart) into
    /// `scratch`.
    fn encode_next(&mut self, coll: CollId, key: &[u8], e: &IndexEntry) {
        if self.at_restart() {
            self.prev.reset();
        }
        self.scratch.clear();
        self.prev.encode(&mut self.scratch, coll, key, e);
    }

    /// Appends the entry if the block then uses at most `limit` bytes (header, entries,
    /// restarts) and holds fewer than `u16::MAX` entries; an empty block always takes
    /// it. Returns whether it was added. The entry is coded once either way.
    pub fn add_within(&mut self, coll: CollId, key: &[u8], e: &IndexEntry, limit: usize) -> bool {
        if self.count == u16::MAX {
            return false;
        }
        self.encode_next(coll, key, e);
        let used = BLOCK_HEADER
            + self.body.len()
            + self.scratch.len()
            + 4 * (self.restarts.len() + self.at_restart() as usize);
        if !self.is_empty() && used > limit {
            return false;
        }
        self.append_encoded(coll, key, e);
        true
    }

    /// Appends an entry; (coll, key) must be greater than the previous one.
    pub fn add(&mut self, coll: CollId, key: &[u8], e: &IndexEntry) {
        self.encode_next(coll, key, e);
        self.append_encoded(coll, key, e);
    }

    /// Appends the entry `encode_next` just coded into `scratch`.
    fn append_encoded(&mut self, coll: CollId, key: &[u8], e: &IndexEntry) {
        if self.at_restart() {
            self.restarts.push((BLOCK_HEADER + self.body.len()) as u32);
        }
        self.body.extend_from_slice(&self.scratch);
        self.prev.set(coll, key, e);
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
        self.prev.reset();
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

/// Decodes every entry of a block, checking that restarts point at full-key entries
/// and that entries are strictly increasing. `None` if anything is malformed.
pub fn decode_block_entries(block: &[u8]) -> Option<Vec<KeyedEntry>> {
    let l = Layout::parse(block)?;
    let mut r = Reader::new(block.get(..l.entries_end)?);
    r.bytes(BLOCK_HEADER)?;
    let mut out: Vec<KeyedEntry> = Vec::with_capacity(l.count);
    let mut prev = Prev::default();
    for i in 0..l.count {
        if i.is_multiple_of(RESTART_INTERVAL as usize) {
            if l.restart(i / RESTART_INTERVAL as usize) != r.pos() {
                return None;
            }
            prev.reset();
        }
        let (coll, e) = prev.decode(&mut r)?;
        if let Some((pc, pk, _)) = out.last() {
            if cmp_key(*pc, pk, coll, &prev.key) != Ordering::Less {
                return None;
            }
        }
        out.push((coll, prev.key.as_slice().into(), e));
    }
    r.is_empty().then_some(out)
}

/// Restart group that may hold (coll, key): the last whose first key ≤ it; `Ok(None)`
/// if the key sorts before the block. `Err(())` if the block is malformed.
fn find_group(block: &[u8], l: &Layout<'_>, coll: CollId, key: &[u8]) -> Result<Option<usize>, ()> {
    let mut s = RestartSearch::new(l);
    while s.is_open() {
        s.step(block, l, coll, key).ok_or(())?;
    }
    Ok(s.group())
}

/// A binary search over a block's restarts for the last whose key ≤ the one looked
/// up: the open interval `lo..hi` of restarts not yet decided.
struct RestartSearch {
    lo: usize,
    hi: usize,
}

impl RestartSearch {
    fn new(l: &Layout<'_>) -> Self {
        RestartSearch {
            lo: 0,
            hi: l.nrestarts(),
        }
    }

    fn is_open(&self) -> bool {
        self.lo < self.hi
    }

    /// Compares the middle restart's key with (coll, key) and halves the interval;
    /// `None` if that restart is malformed.
    fn step(&mut self, block: &[u8], l: &Layout<'_>, coll: CollId, key: &[u8]) -> Option<()> {
        let mid = (self.lo + self.hi) / 2;
        let (c, k) = restart_key(block.get(..l.entries_end)?, l.restart(mid))?;
        if cmp_key(c, k, coll, key) == Ordering::Greater {
            self.hi = mid;
        } else {
            self.lo = mid + 1;
        }
        Some(())
    }

    /// The restart the search reads next: the middle one while open, else the start
    /// of the group to scan (none when the key sorts before the block).
    fn next_read(&self) -> Option<usize> {
        if self.is_open() {
            Some((self.lo + self.hi) / 2)
        } else {
            self.group()
        }
    }

    /// Once closed: the group that may hold the key.
    fn group(&self) -> Option<usize> {
        self.lo.checked_sub(1)
    }
}

/// Asks the CPU to fetch the parts of a cached block (its used bytes) that a
/// lookup touches first: the header, the restart offsets at the end and the middle,
/// where the binary search over restarts starts.
pub fn prefetch_search(block: &[u8]) {
    let p = block.as_ptr();
    let n = block.len();
    for at in [
        0,
        n / 2,
        n.saturating_sub(1),
        n.saturating_sub(64),
        n.saturating_sub(128),
    ] {
        crate::prefetch::prefetch(p.wrapping_add(at));
    }
}

/// The (collection, key) of the entry at offset `off`, a restart, read in place: it is
/// coded from scratch (nothing shared with a previous key, the collection present), so
/// its key is its middle part, and nothing after the collection need be decoded.
fn restart_key(body: &[u8], off: usize) -> Option<(CollId, &[u8])> {
    let mut r = Reader::new(body.get(off..)?);
    let (shared, rear) = (r.varint()?, r.varint()?);
    let mid_len = r.varint()? as usize;
    let key = r.bytes(mid_len)?;
    let flags = r.u8()?;
    let known = FLAG_TOMBSTONE | FLAG_SAME_LOC | FLAG_COLL | FLAG_RELOC;
    if shared != 0 || rear != 0 || flags & FLAG_COLL == 0 || flags & !known != 0 {
        return None;
    }
    Some((CollId::try_from(r.varint()?).ok()?, key))
}

/// Point lookup in a verified block: binary search over restarts, then a short scan.
/// `Err(())` if the block is malformed.
#[allow(clippy::result_unit_err)]
pub fn block_get(block: &[u8], coll: CollId, key: &[u8]) -> Result<Option<IndexEntry>, ()> {
    let l = Layout::parse(block).ok_or(())?;
    match find_group(block, &l, coll, key)? {
        Some(start) => scan_group(block, &l, start, coll, key),
        None => Ok(None),
    }
}

/// [`block_get`] of each `(block, key)` of `lookups`, answered through
/// `found(j, answer)`. The binary searches over restarts advance in step, one probe
/// of every block per round with the next round's restart key prefetched, so the
/// blocks' cache misses overlap instead of stalling one after another.
pub fn block_get_many(
    lookups: &[(&[u8], &[u8])],
    coll: CollId,
    mut found: impl FnMut(usize, Result<Option<IndexEntry>, ()>),
) {
    let mut searches: Vec<Option<(Layout<'_>, RestartSearch)>> = lookups
        .iter()
        .map(|&(block, _)| {
            let l = Layout::parse(block)?;
            let s = RestartSearch::new(&l);
            prefetch_next(block, &l, &s);
            Some((l, s))
        })
        .collect();
    let mut open = true;
    while open {
        open = false;
        for (entry, &(block, key)) in searches.iter_mut().zip(lookups) {
            let Some((l, s)) = entry else { continue };
            if !s.is_open() {
                continue;
            }
            if s.step(block, l, coll, key).is_none() {
                *entry = None;
                continue;
            }
            prefetch_next(block, l, s);
            open |= s.is_open();
        }
    }
    for (j, (entry, &(block, key))) in searches.iter().zip(lookups).enumerate() {
        found(
            j,
            match entry {
                None => Err(()),
                Some((l, s)) => match s.group() {
                    Some(start) => scan_group(block, l, start, coll, key),
                    None => Ok(None),
                },
            },
        );
    }
}

/// Prefetches the restart key search `s` reads next.
fn prefetch_next(block: &[u8], l: &Layout<'_>, s: &RestartSearch) {
    if let Some(i) = s.next_read() {
        crate::prefetch::prefetch(block.as_ptr().wrapping_add(l.restart(i)));
    }
}

/// The entry for (coll, key) in restart group `start` of a block, if there.
fn scan_group(
    block: &[u8],
    l: &Layout<'_>,
    start: usize,
    coll: CollId,
    key: &[u8],
) -> Result<Option<IndexEntry>, ()> {
    let body = block.get(..l.entries_end).ok_or(())?;
    let mut r = Reader::new(body.get(l.restart(start)..).ok_or(())?);
    let mut prev = Prev::default();
    for _ in 0..l.group_len(start) {
        let (c, e) = prev.decode(&mut r).ok_or(())?;
        match cmp_key(c, &prev.key, coll, key) {
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
    let mut prev = Prev::default();
    for n in 0..l.group_len(i) {
        let (c, e) = prev.decode(&mut r)?;
        if n > 0 {
            let (pc, pk, _) = g.get(n - 1);
            if cmp_key(pc, pk, c, &prev.key) != Ordering::Less {
                return None;
            }
        }
        g.keys.extend_from_slice(&prev.key);
        g.ends.push(g.keys.len());
        g.items.push((c, e));
    }
    r.is_empty().then_some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Entry `i` of a test block: seqnos jump up and down (as after a random load),
    /// runs of three entries share a block location, collections vary.
    fn entry(i: u64) -> IndexEntry {
        let seqno = (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20) | 1;
        IndexEntry {
            seqno,
            kind: if i.is_multiple_of(7) {
                Kind::Delete
            } else {
                Kind::Put
            },
            reloc: i.is_multiple_of(5),
            loc: Location {
                seg: (i / 9) as u32,
                off: (i / 3) * 4096 + 40,
                len: 16_000,
            },
            rec_size: 440,
        }
    }

    fn build(keys: &[(CollId, Vec<u8>)]) -> Vec<u8> {
        let mut b = BlockBuilder::default();
        for (i, (c, k)) in keys.iter().enumerate() {
            b.add(*c, k, &entry(i as u64));
        }
        b.finish()
    }

    /// Entries of db_bench keys (`n` as 8 big-endian bytes, padded with '0' to 20) that
    /// fit one page, with `entry_for(n)` as their index entries.
    fn entries_per_page(key_of: impl Fn(u64) -> u64, entry_for: impl Fn(u64) -> IndexEntry) -> u64 {
        let mut b = BlockBuilder::default();
        let mut n = 0u64;
        loop {
            let mut k = key_of(n).to_be_bytes().to_vec();
            k.resize(20, b'0');
            let e = entry_for(n);
            if !b.add_within(1, &k, &e, PAGE) {
                break;
            }
            n += 1;
        }
        let block = b.finish();
        assert_eq!(block.len(), PAGE);
        assert_eq!(decode_block_entries(&block).unwrap().len() as u64, n);
        eprintln!("{n} entries per 4 KiB page");
        n
    }

    #[test]
    fn sequentially_loaded_db_bench_keys_pack_over_three_hundred_entries_per_page() {
        // fillseq: consecutive keys, consecutive seqnos, ten records per log block.
        let n = entries_per_page(
            |n| 1_000_000 + n,
            |n| IndexEntry {
                seqno: 1_000_000 + n,
                kind: Kind::Put,
                reloc: false,
                loc: Location {
                    seg: 7,
                    off: 40_000_000 + (n / 10) * 2100,
                    len: 2100,
                },
                rec_size: 424,
            },
        );
        // Format version 2 (front coding only, absolute fields) fit about 120.
        assert!(n >= 300, "only {n} entries per 4 KiB page");
    }

    #[test]
    fn randomly_loaded_db_bench_keys_pack_over_one_hundred_sixty_entries_per_page() {
        // fillrandom: sorted keys with gaps, unrelated seqnos and block locations.
        let scatter = |n: u64| n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let n = entries_per_page(
            |n| 1_000_000 + n * 3,
            |n| IndexEntry {
                seqno: scatter(n) >> 42,
                kind: Kind::Put,
                reloc: false,
                loc: Location {
                    seg: (scatter(n) >> 60) as u32,
                    off: (scatter(n) >> 38) & ((64 << 20) - 1),
                    len: 2100,
                },
                rec_size: 424,
            },
        );
        assert!(n >= 160, "only {n} entries per 4 KiB page");
    }

    fn sorted_keys(raw: Vec<(u8, Vec<u8>)>) -> Vec<(CollId, Vec<u8>)> {
        let mut keys: Vec<(CollId, Vec<u8>)> =
            raw.into_iter().map(|(c, k)| (c as CollId % 3, k)).collect();
        keys.sort();
        keys.dedup();
        keys
    }

    /// The keys of `keys` as probes (any collection byte: the caller picks one).
    fn raw_keys(keys: &[(CollId, Vec<u8>)]) -> Vec<(u8, Vec<u8>)> {
        keys.iter().map(|(c, k)| (*c as u8, k.clone())).collect()
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
                prop_assert_eq!(*e, entry(i as u64));
                prop_assert_eq!(block_get(&block, *ec, ek).unwrap(), Some(*e));
            }
            for (c, k) in &probes {
                let c = *c as CollId % 3;
                let want = keys.iter().position(|(kc, kk)| *kc == c && kk == k);
                let got = block_get(&block, c, k).unwrap();
                prop_assert_eq!(got, want.map(|i| entry(i as u64)));
            }
            // Searched in step: every probe in this block and in one of its first half,
            // answered as block_get answers each.
            let half = build(&keys[..keys.len().div_ceil(2)]);
            let stored = raw_keys(&keys);
            for coll in 0..3 {
                let lookups: Vec<(&[u8], &[u8])> = probes
                    .iter()
                    .chain(&stored)
                    .flat_map(|(_, k)| [(&block[..], &k[..]), (&half[..], &k[..])])
                    .collect();
                let mut answers = vec![None; lookups.len()];
                block_get_many(&lookups, coll, |j, a| answers[j] = Some(a));
                for (j, (b, k)) in lookups.iter().enumerate() {
                    prop_assert_eq!(answers[j], Some(block_get(b, coll, k)), "probe {}", j);
                }
            }
        }

        #[test]
        fn decoders_survive_arbitrary_bytes(b in proptest::collection::vec(any::<u8>(), 0..600), k in proptest::collection::vec(any::<u8>(), 0..8)) {
            let _ = verify_block(&b);
            let _ = decode_block_entries(&b);
            let one = block_get(&b, 1, &k);
            let mut many = None;
            block_get_many(&[(&b, &k)], 1, |_, a| many = Some(a));
            prop_assert_eq!(many, Some(one));
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

//! Exact garbage accounting without index lookups.
//!
//! When the index drops a version (a newer version or tombstone shadows it, or its
//! collection was dropped), the dropped version's `(segment, block offset, seqno, size)`
//! goes to the delete list. The list is an append-only file, `DELETES`, made durable
//! *before* the checkpoint that installs the index change; the checkpoint records how
//! many bytes of it are valid, and recovery truncates anything after that (it will be
//! rediscovered by the same index change redone). GC reads a victim's dead set from
//! memory and copies only records not in it.
//!
//! In memory a segment's dead set is a compressed bitmap of seqnos (about one bit per
//! record of the segment's seqno range, instead of a hash entry per dead record). That
//! is exact because no segment holds two records with the same seqno: user writes get
//! fresh seqnos, and every GC attempt writes its copies into a segment of its own.
//!
//! The file would grow by 24 bytes per overwrite forever, so once it is at least
//! `COMPACT_MIN` long and four times what the map would take written whole, `persist`
//! writes the map whole to a new generation of the file (`DELETES.<gen>`), which the
//! next checkpoint names; the old generation is removed once that checkpoint is
//! written. A crash in between leaves the old checkpoint naming the old file, intact.
//!
//! Frames: `crc:u32 | count:u32 | count × (seg:u32 | off:u64 | seqno:u64 | size:u32)`,
//! or a whole segment's dead set, `crc:u32 | u32::MAX | seg:u32 | dead_bytes:u64 |
//! len:u32 | len bytes of a serialized roaring bitmap`. The crc32c covers the rest of
//! the frame.

use crate::codec::Reader;
use crate::error::{Error, Result};
use crate::io::{sync_dir, IoCounters};
use crate::record::Seqno;
use crate::segment::SegId;
use roaring::RoaringTreemap;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

const ENTRY: usize = 4 + 8 + 8 + 4;

/// The count that marks a frame holding a whole segment's dead set.
const SEGMENT_FRAME: u32 = u32::MAX;

/// The delete list is rewritten whole only once it is at least this long.
const COMPACT_MIN: u64 = 64 << 10;

/// One dropped version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DeadRecord {
    pub seg: SegId,
    pub off: u64,
    pub seqno: Seqno,
    pub size: u32,
}

/// Garbage known in one segment.
#[derive(Default, Debug, Clone, PartialEq)]
pub struct SegGarbage {
    pub dead_bytes: u64,
    /// Seqnos of the segment's dead records.
    pub dead: RoaringTreemap,
}

/// What a delete-list frame holds: dead records, or a segment's whole dead set.
#[derive(Debug, PartialEq)]
pub enum DeleteItem {
    Dead(DeadRecord),
    Segment(SegId, SegGarbage),
}

/// Where the delete list stands on disk: its file's generation and valid length.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeletesPos {
    pub gen: u64,
    pub len: u64,
}

/// The delete list's file of generation `gen` (`DELETES`, then `DELETES.<gen>`).
pub fn deletes_path(dir: &Path, gen: u64) -> PathBuf {
    match gen {
        0 => dir.join("DELETES"),
        g => dir.join(format!("DELETES.{g}")),
    }
}

/// The generation of a delete-list file name, if it is one.
fn deletes_gen(name: &str) -> Option<u64> {
    match name {
        "DELETES" => Some(0),
        _ => name.strip_prefix("DELETES.")?.parse().ok(),
    }
}

/// The in-memory garbage map plus its durable delete list.
pub struct GarbageMap {
    dir: PathBuf,
    path: PathBuf,
    file: File,
    pos: DeletesPos,
    pub segs: HashMap<SegId, SegGarbage>,
    /// Entries appended since the last `persist`.
    pending: Vec<DeadRecord>,
    /// Earlier generations, removed once a checkpoint names a later one.
    superseded: Vec<PathBuf>,
    /// A segment's dead set came back after `forget` (its retirement failed): the
    /// file may lack it, so the next `persist` writes the whole map.
    compact_next: bool,
    counters: Arc<IoCounters>,
}

pub fn encode_entries(entries: &[DeadRecord]) -> Vec<u8> {
    let mut b = Vec::with_capacity(8 + entries.len() * ENTRY);
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for d in entries {
        b.extend_from_slice(&d.seg.to_le_bytes());
        b.extend_from_slice(&d.off.to_le_bytes());
        b.extend_from_slice(&d.seqno.to_le_bytes());
        b.extend_from_slice(&d.size.to_le_bytes());
    }
    seal_frame(b)
}

/// A frame holding segment `seg`'s whole dead set.
pub fn encode_segment(seg: SegId, g: &SegGarbage) -> Vec<u8> {
    let mut b = Vec::with_capacity(24 + g.dead.serialized_size());
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(&SEGMENT_FRAME.to_le_bytes());
    b.extend_from_slice(&seg.to_le_bytes());
    b.extend_from_slice(&g.dead_bytes.to_le_bytes());
    b.extend_from_slice(&(g.dead.serialized_size() as u32).to_le_bytes());
    g.dead
        .serialize_into(&mut b)
        .expect("serializing into a Vec cannot fail");
    seal_frame(b)
}

/// Fills in the crc32c of a frame (over everything after it).
fn seal_frame(mut b: Vec<u8>) -> Vec<u8> {
    let crc = crc32c::crc32c(&b[4..]);
    b[0..4].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Decodes a delete-list file prefix; errors name the offset of the bad frame.
pub fn decode_items(b: &[u8], path: &Path) -> Result<Vec<DeleteItem>> {
    let mut out = Vec::new();
    let mut r = Reader::new(b);
    while !r.is_empty() {
        let at = r.pos();
        let bad = || Error::corruption(path, at as u64, "delete list frame damaged");
        let crc = r.u32().ok_or_else(bad)?;
        let n = r.u32().ok_or_else(bad)?;
        if n == SEGMENT_FRAME {
            let seg = r.u32().ok_or_else(bad)?;
            let dead_bytes = r.u64().ok_or_else(bad)?;
            let len = r.u32().ok_or_else(bad)? as usize;
            let bitmap = r.bytes(len).ok_or_else(bad)?;
            if crc32c::crc32c(&b[at + 4..r.pos()]) != crc {
                return Err(bad());
            }
            let dead = RoaringTreemap::deserialize_from(bitmap).map_err(|_| bad())?;
            out.push(DeleteItem::Segment(seg, SegGarbage { dead_bytes, dead }));
            continue;
        }
        let n = n as usize;
        if n > r.remaining() / ENTRY {
            return Err(bad());
        }
        let body = r.bytes(n * ENTRY).ok_or_else(bad)?;
        if crc32c::crc32c(&b[at + 4..r.pos()]) != crc {
            return Err(bad());
        }
        let mut e = Reader::new(body);
        for _ in 0..n {
            out.push(DeleteItem::Dead(DeadRecord {
                seg: e.u32().ok_or_else(bad)?,
                off: e.u64().ok_or_else(bad)?,
                seqno: e.u64().ok_or_else(bad)?,
                size: e.u32().ok_or_else(bad)?,
            }));
        }
    }
    Ok(out)
}

impl GarbageMap {
    /// Opens the delete list at `pos` in `dir`, keeps its first `pos.len` bytes, and
    /// loads entries of segments for which `live` is true. Other generations of the
    /// file (a compaction no checkpoint named, or one that replaced them) are removed.
    pub fn open(
        dir: &Path,
        pos: DeletesPos,
        live: impl Fn(SegId) -> bool,
        read_only: bool,
        counters: Arc<IoCounters>,
    ) -> Result<Self> {
        let path = deletes_path(dir, pos.gen);
        let file = OpenOptions::new()
            .read(true)
            .append(!read_only)
            .create(!read_only)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        let actual = file.metadata().map_err(|e| Error::io(&path, e))?.len();
        if actual < pos.len {
            return Err(Error::corruption(
                &path,
                actual,
                format!(
                    "delete list is shorter than the checkpoint says ({} bytes)",
                    pos.len
                ),
            ));
        }
        let mut buf = vec![0u8; pos.len as usize];
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut buf, 0)
            .map_err(|e| Error::io(&path, e))?;
        if actual > pos.len && !read_only {
            file.set_len(pos.len).map_err(|e| Error::io(&path, e))?;
        }
        let mut g = GarbageMap {
            dir: dir.to_path_buf(),
            path: path.clone(),
            file,
            pos,
            segs: HashMap::new(),
            pending: Vec::new(),
            superseded: Vec::new(),
            compact_next: false,
            counters,
        };
        for item in decode_items(&buf, &path)? {
            match item {
                DeleteItem::Dead(d) if live(d.seg) => g.apply(d),
                DeleteItem::Segment(seg, sg) if live(seg) => {
                    g.segs.insert(seg, sg);
                }
                _ => {}
            }
        }
        if !read_only {
            g.superseded = other_generations(dir, pos.gen)?;
            g.remove_superseded();
        }
        Ok(g)
    }

    fn apply(&mut self, d: DeadRecord) {
        let s = self.segs.entry(d.seg).or_default();
        if s.dead.insert(d.seqno) {
            s.dead_bytes += d.size as u64;
        }
    }

    /// Records dead versions (in memory now; durable at the next `persist`).
    pub fn add(&mut self, entries: impl IntoIterator<Item = DeadRecord>) {
        for d in entries {
            self.apply(d);
            self.pending.push(d);
        }
    }

    /// Makes every recorded entry durable and returns where the list now stands:
    /// appends the pending entries and fsyncs, or, when the file has grown to four
    /// times the map written whole, writes the whole map to a new generation.
    pub fn persist(&mut self) -> Result<DeletesPos> {
        let due = self.pos.len >= COMPACT_MIN && self.pos.len >= 4 * self.whole_bytes();
        if due || self.compact_next {
            self.compact()?;
        } else if !self.pending.is_empty() {
            for chunk in self.pending.chunks(64 << 10) {
                let b = encode_entries(chunk);
                self.file
                    .write_all(&b)
                    .map_err(|e| Error::io(&self.path, e))?;
                self.pos.len += b.len() as u64;
                self.count_write(b.len());
            }
            self.file
                .sync_data()
                .map_err(|e| Error::io(&self.path, e))?;
            self.counters.syncs.fetch_add(1, Ordering::Relaxed);
            self.pending.clear();
        }
        Ok(self.pos)
    }

    /// Bytes the map takes written whole.
    fn whole_bytes(&self) -> u64 {
        self.segs
            .values()
            .map(|s| 24 + s.dead.serialized_size() as u64)
            .sum()
    }

    /// Writes the whole map to the next generation of the file and switches to it.
    fn compact(&mut self) -> Result<()> {
        let gen = self.pos.gen + 1;
        let path = deletes_path(&self.dir, gen);
        let mut segs: Vec<_> = self.segs.iter().collect();
        segs.sort_by_key(|(id, _)| **id);
        let mut b = Vec::with_capacity(self.whole_bytes() as usize);
        for (id, g) in segs {
            b.extend_from_slice(&encode_segment(*id, g));
        }
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        // A file of this generation left by a compaction that no checkpoint named.
        file.set_len(0).map_err(|e| Error::io(&path, e))?;
        file.write_all(&b).map_err(|e| Error::io(&path, e))?;
        file.sync_data().map_err(|e| Error::io(&path, e))?;
        sync_dir(&self.dir)?;
        self.count_write(b.len());
        self.counters.syncs.fetch_add(2, Ordering::Relaxed);
        self.superseded
            .push(std::mem::replace(&mut self.path, path));
        self.file = file;
        self.pos = DeletesPos {
            gen,
            len: b.len() as u64,
        };
        self.pending.clear();
        self.compact_next = false;
        Ok(())
    }

    fn count_write(&self, bytes: usize) {
        self.counters
            .bytes_written
            .fetch_add(bytes as u64, Ordering::Relaxed);
        self.counters.writes.fetch_add(1, Ordering::Relaxed);
    }

    /// Removes earlier generations of the file; call once a checkpoint names the
    /// current one. A file that cannot be removed is retried next time.
    pub fn remove_superseded(&mut self) {
        self.superseded.retain(|p| match std::fs::remove_file(p) {
            Ok(()) => false,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => {
                tracing::warn!("cannot remove old delete list {}: {e}", p.display());
                true
            }
        });
    }

    /// Forgets a segment removed by GC; returns its dead set for `restore`.
    pub fn forget(&mut self, seg: SegId) -> Option<SegGarbage> {
        self.pending.retain(|d| d.seg != seg);
        self.segs.remove(&seg)
    }

    /// Puts back a dead set `forget` returned (the segment stays after all). The next
    /// `persist` writes the whole map, since the file may have been compacted without it.
    pub fn restore(&mut self, seg: SegId, g: SegGarbage) {
        self.segs.insert(seg, g);
        self.compact_next = true;
    }

    pub fn dead_bytes(&self, seg: SegId) -> u64 {
        self.segs.get(&seg).map_or(0, |s| s.dead_bytes)
    }

    pub fn is_dead(&self, seg: SegId, seqno: Seqno) -> bool {
        self.segs.get(&seg).is_some_and(|s| s.dead.contains(seqno))
    }

    /// Approximate memory held.
    pub fn memory_bytes(&self) -> usize {
        self.segs
            .values()
            .map(|s| s.dead.serialized_size() + 64)
            .sum::<usize>()
            + self.pending.capacity() * ENTRY
    }
}

/// Delete-list files in `dir` of generations other than `gen`.
fn other_generations(dir: &Path, gen: u64) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let e = e.map_err(|e| Error::io(dir, e))?;
        let name = e.file_name();
        if deletes_gen(&name.to_string_lossy()).is_some_and(|g| g != gen) {
            out.push(e.path());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn delete_list_decoder_survives_arbitrary_bytes(b in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode_items(&b, Path::new("fuzz"));
        }

        #[test]
        fn segment_frames_decode_to_what_was_encoded(seqnos in proptest::collection::btree_set(any::<u64>(), 0..200), seg in any::<u32>(), bytes in any::<u64>()) {
            let g = SegGarbage { dead_bytes: bytes, dead: seqnos.into_iter().collect() };
            let mut file = encode_segment(seg, &g);
            file.extend_from_slice(&encode_entries(&[dead(7, 9)]));
            let items = decode_items(&file, Path::new("t")).unwrap();
            prop_assert_eq!(items, vec![DeleteItem::Segment(seg, g), DeleteItem::Dead(dead(7, 9))]);
        }
    }

    fn dead(seg: SegId, seqno: Seqno) -> DeadRecord {
        DeadRecord {
            seg,
            off: 4096,
            seqno,
            size: 100,
        }
    }

    fn open(dir: &Path, pos: DeletesPos) -> Result<GarbageMap> {
        GarbageMap::open(dir, pos, |s| s != 3, false, Arc::default())
    }

    fn files(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn delete_list_roundtrip_and_truncation_to_checkpointed_length() {
        let dir = tempfile::tempdir().unwrap();
        let mut g = open(dir.path(), DeletesPos::default()).unwrap();
        g.add([dead(1, 5)]);
        let pos1 = g.persist().unwrap();
        g.add([dead(2, 6)]);
        g.persist().unwrap();
        drop(g);
        let g = open(dir.path(), pos1).unwrap();
        assert_eq!((g.dead_bytes(1), g.dead_bytes(2)), (100, 0));
        assert!(g.is_dead(1, 5));
        // a duplicate report of the same record is counted once
        let mut g = g;
        g.add([dead(1, 5)]);
        assert_eq!(g.dead_bytes(1), 100);
    }

    /// 24 bytes per dead record would grow without end under overwrites (700 MB a
    /// minute at 500k overwrites/s); the list is rewritten whole instead, and until a
    /// checkpoint names the new file a crash finds the old one intact.
    #[test]
    fn a_long_delete_list_is_rewritten_whole_and_the_old_file_goes_once_a_checkpoint_names_the_new()
    {
        let dir = tempfile::tempdir().unwrap();
        let mut g = open(dir.path(), DeletesPos::default()).unwrap();
        for seg in 1..=4 {
            g.add((0..1500).map(|i| dead(seg, seg as u64 * 10_000 + i)));
        }
        let appended = g.persist().unwrap();
        assert_eq!(appended.gen, 0);
        assert!(appended.len >= COMPACT_MIN, "{appended:?}");
        g.forget(4);
        let mut expect = g.segs.clone();
        expect.remove(&3); // not live, so not loaded
        let compacted = g.persist().unwrap();
        println!(
            "{} bytes appended, {} bytes written whole",
            appended.len, compacted.len
        );
        assert_eq!(compacted.gen, 1);
        assert!(compacted.len * 10 < appended.len, "{compacted:?}");
        assert_eq!(files(dir.path()), ["DELETES", "DELETES.1"]);
        drop(g);

        // A crash before the checkpoint named generation 1: the old file is read, the
        // new one removed.
        let g = open(dir.path(), appended).unwrap();
        assert_eq!(files(dir.path()), ["DELETES"]);
        assert_eq!(g.dead_bytes(1), 150_000);
        assert_eq!(g.dead_bytes(3), 0, "segment 3 is not live");
        drop(g);

        let mut g = open(dir.path(), appended).unwrap();
        g.forget(4);
        let compacted = g.persist().unwrap();
        g.add([dead(2, 7)]);
        let after = g.persist().unwrap();
        assert_eq!(after.gen, 1, "appends go on in the new file");
        g.remove_superseded();
        assert_eq!(files(dir.path()), ["DELETES.1"]);
        drop(g);
        let g = open(dir.path(), after).unwrap();
        assert!(g.is_dead(2, 7) && g.dead_bytes(2) == expect[&2].dead_bytes + 100);
        drop(g);
        // Opening at the rewrite's length drops the append after it.
        let g = open(dir.path(), compacted).unwrap();
        assert_eq!(g.segs, expect);
        drop(g);

        let path = dir.path().join("DELETES.1");
        let mut b = std::fs::read(&path).unwrap();
        b[40] ^= 0x10;
        std::fs::write(&path, &b).unwrap();
        let err = open(dir.path(), after)
            .err()
            .expect("a flipped bit is found");
        assert!(err.to_string().contains("DELETES.1"), "{err}");
    }

    /// GC forgets its victim's dead set before the checkpoint that drops the victim;
    /// if that checkpoint fails the set comes back, and reaches the file even if it
    /// was rewritten whole without it meanwhile.
    #[test]
    fn a_dead_set_restored_after_a_failed_retirement_is_written_whole_next_time() {
        let dir = tempfile::tempdir().unwrap();
        let mut g = open(dir.path(), DeletesPos::default()).unwrap();
        g.add([dead(1, 5), dead(2, 6)]);
        g.persist().unwrap();
        let set = g.forget(2).unwrap();
        g.restore(2, set);
        let pos = g.persist().unwrap();
        assert_eq!(pos.gen, 1, "restoring forces a whole rewrite");
        drop(g);
        let g = open(dir.path(), pos).unwrap();
        assert!(g.is_dead(2, 6) && g.is_dead(1, 5));
    }
}

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
//! Record framing in `DELETES`: `crc:u32 | count:u32 | count × (seg:u32 | off:u64 | seqno:u64 | size:u32)`.

use crate::codec::Reader;
use crate::error::{Error, Result};
use crate::record::Seqno;
use crate::segment::SegId;
use roaring::RoaringTreemap;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

const ENTRY: usize = 4 + 8 + 8 + 4;

/// One dropped version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DeadRecord {
    pub seg: SegId,
    pub off: u64,
    pub seqno: Seqno,
    pub size: u32,
}

/// Garbage known in one segment.
#[derive(Default, Debug, Clone)]
pub struct SegGarbage {
    pub dead_bytes: u64,
    /// Seqnos of the segment's dead records.
    pub dead: RoaringTreemap,
}

/// The in-memory garbage map plus its durable delete list.
pub struct GarbageMap {
    path: PathBuf,
    file: File,
    len: u64,
    pub segs: HashMap<SegId, SegGarbage>,
    /// Entries appended since the last `persist`.
    pending: Vec<DeadRecord>,
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
    let crc = crc32c::crc32c(&b[4..]);
    b[0..4].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Decodes a delete-list file prefix; errors name the offset of the bad frame.
pub fn decode_entries(b: &[u8], path: &Path) -> Result<Vec<DeadRecord>> {
    let mut out = Vec::new();
    let mut r = Reader::new(b);
    while !r.is_empty() {
        let at = r.pos() as u64;
        let bad = || Error::corruption(path, at, "delete list frame damaged");
        let crc = r.u32().ok_or_else(bad)?;
        let n = r.u32().ok_or_else(bad)? as usize;
        if n > r.remaining() / ENTRY {
            return Err(bad());
        }
        let body = r.bytes(n * ENTRY).ok_or_else(bad)?;
        let c = crc32c::crc32c_append(crc32c::crc32c(&(n as u32).to_le_bytes()), body);
        if c != crc {
            return Err(bad());
        }
        let mut e = Reader::new(body);
        for _ in 0..n {
            out.push(DeadRecord {
                seg: e.u32().ok_or_else(bad)?,
                off: e.u64().ok_or_else(bad)?,
                seqno: e.u64().ok_or_else(bad)?,
                size: e.u32().ok_or_else(bad)?,
            });
        }
    }
    Ok(out)
}

impl GarbageMap {
    /// Opens `dir/DELETES`, keeps its first `valid_len` bytes, and loads entries of
    /// segments for which `live` is true.
    pub fn open(
        dir: &Path,
        valid_len: u64,
        live: impl Fn(SegId) -> bool,
        read_only: bool,
    ) -> Result<Self> {
        let path = dir.join("DELETES");
        let file = OpenOptions::new()
            .read(true)
            .append(!read_only)
            .create(!read_only)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        let actual = file.metadata().map_err(|e| Error::io(&path, e))?.len();
        if actual < valid_len {
            return Err(Error::corruption(
                &path,
                actual,
                format!("delete list is shorter than the checkpoint says ({valid_len} bytes)"),
            ));
        }
        let mut buf = vec![0u8; valid_len as usize];
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut buf, 0)
            .map_err(|e| Error::io(&path, e))?;
        if actual > valid_len && !read_only {
            file.set_len(valid_len).map_err(|e| Error::io(&path, e))?;
        }
        let mut g = GarbageMap {
            path: path.clone(),
            file,
            len: valid_len,
            segs: HashMap::new(),
            pending: Vec::new(),
        };
        for d in decode_entries(&buf, &path)? {
            if live(d.seg) {
                g.apply(d);
            }
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

    /// Appends pending entries to the file and fsyncs; returns the new valid length.
    pub fn persist(&mut self) -> Result<u64> {
        if !self.pending.is_empty() {
            for chunk in self.pending.chunks(64 << 10) {
                let b = encode_entries(chunk);
                self.file
                    .write_all(&b)
                    .map_err(|e| Error::io(&self.path, e))?;
                self.len += b.len() as u64;
            }
            self.file
                .sync_data()
                .map_err(|e| Error::io(&self.path, e))?;
            self.pending.clear();
        }
        Ok(self.len)
    }

    /// Forgets a segment removed by GC.
    pub fn forget(&mut self, seg: SegId) {
        self.segs.remove(&seg);
        self.pending.retain(|d| d.seg != seg);
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn delete_list_decoder_survives_arbitrary_bytes(b in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode_entries(&b, Path::new("fuzz"));
        }
    }

    #[test]
    fn delete_list_roundtrip_and_truncation_to_checkpointed_length() {
        let dir = tempfile::tempdir().unwrap();
        let mut g = GarbageMap::open(dir.path(), 0, |_| true, false).unwrap();
        g.add([DeadRecord {
            seg: 1,
            off: 4096,
            seqno: 5,
            size: 100,
        }]);
        let len1 = g.persist().unwrap();
        g.add([DeadRecord {
            seg: 2,
            off: 4096,
            seqno: 6,
            size: 50,
        }]);
        g.persist().unwrap();
        drop(g);
        let g = GarbageMap::open(dir.path(), len1, |_| true, false).unwrap();
        assert_eq!((g.dead_bytes(1), g.dead_bytes(2)), (100, 0));
        assert!(g.is_dead(1, 5));
        // a duplicate report of the same record is counted once
        let mut g = g;
        g.add([DeadRecord {
            seg: 1,
            off: 4096,
            seqno: 5,
            size: 100,
        }]);
        assert_eq!(g.dead_bytes(1), 100);
    }
}

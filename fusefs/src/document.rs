//! The engine-API view of files: stream a document's content whether it is stored
//! inline or as a manifest plus chunks, and write one the same way the mount does.

use std::io::{self, Read};
use std::ops::Bound;
use std::time::SystemTime;

use basalt_engine::{Db, Direction, WriteBatch};

use crate::layout::{self, InodeRecord, Kind, Manifest, Storage};
use crate::FsError;

/// Default chunk size (see `ARCHITECTURE.md` for the measurements behind it).
pub const DEFAULT_CHUNK_SIZE: usize = 64 << 10;

/// Streams the whole content of a document, as a file on the mount shows it.
pub struct DocumentReader {
    source: Source,
}

enum Source {
    Inline { data: Vec<u8>, pos: usize },
    Chunked(ChunkStream),
}

struct ChunkStream {
    coll: basalt_engine::Collection,
    fid: u64,
    chunk_size: u64,
    size: u64,
    pos: u64,
    buf: Vec<u8>,
    buf_start: u64,
}

impl DocumentReader {
    /// Opens `key` in `collection`. Fails with [`FsError::NotFound`] when absent.
    #[allow(clippy::new_ret_no_self)]
    pub fn open(db: &Db, collection: &str, key: &str) -> Result<DocumentReader, FsError> {
        let what = || format!("{collection}/{key}");
        let coll = db
            .collection(collection)
            .map_err(|e| FsError::engine(what(), e))?;
        let doc = coll
            .get(key.as_bytes())
            .map_err(|e| FsError::engine(what(), e))?
            .ok_or_else(|| FsError::NotFound {
                collection: collection.into(),
                key: key.into(),
            })?;
        let Some(m) = Manifest::decode(&doc) else {
            return Ok(DocumentReader {
                source: Source::Inline { data: doc, pos: 0 },
            });
        };
        let rec = coll
            .get(&layout::inode_key(m.fid))
            .map_err(|e| FsError::engine(what(), e))?
            .and_then(|r| InodeRecord::decode(&r))
            .ok_or_else(|| FsError::Damaged {
                collection: collection.into(),
                key: key.into(),
                detail: format!("manifest names inode {} which has no valid record", m.fid),
            })?;
        Ok(DocumentReader {
            source: Source::Chunked(ChunkStream {
                coll,
                fid: m.fid,
                chunk_size: m.chunk_size as u64,
                size: rec.size,
                pos: 0,
                buf: Vec::new(),
                buf_start: 0,
            }),
        })
    }

    /// Total content length in bytes.
    pub fn len(&self) -> u64 {
        match &self.source {
            Source::Inline { data, .. } => data.len() as u64,
            Source::Chunked(c) => c.size,
        }
    }

    /// True for an empty document.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Read for DocumentReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        match &mut self.source {
            Source::Inline { data, pos } => {
                let n = out.len().min(data.len() - *pos);
                out[..n].copy_from_slice(&data[*pos..*pos + n]);
                *pos += n;
                Ok(n)
            }
            Source::Chunked(c) => c.read(out),
        }
    }
}

impl ChunkStream {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.pos >= self.size || out.is_empty() {
            return Ok(0);
        }
        let idx = self.pos / self.chunk_size;
        let start = idx * self.chunk_size;
        if self.buf_start != start || self.buf.is_empty() {
            let want = (self.size - start).min(self.chunk_size) as usize;
            let mut data = self
                .coll
                .get(&layout::chunk_key(self.fid, idx))
                .map_err(|e| io::Error::from_raw_os_error(e.errno()))?
                .unwrap_or_default();
            // Holes and short chunks read as zeros up to the file size.
            data.resize(want, 0);
            // Newer copies of some of its pages (small writes committed alone).
            let prefix = layout::patch_chunk_prefix(self.fid, idx);
            let patches = self.coll.scan_prefix(&prefix, Direction::Forward);
            for item in patches.map_err(|e| io::Error::from_raw_os_error(e.errno()))? {
                let (k, v) = item.map_err(|e| io::Error::from_raw_os_error(e.errno()))?;
                if let Some((_, _, p)) = layout::patch_location(&k) {
                    let a = (p as u64 * layout::PATCH_PAGE).min(want as u64) as usize;
                    let z = (a + v.len()).min(want);
                    data[a..z].copy_from_slice(&v[..z - a]);
                }
            }
            self.buf = data;
            self.buf_start = start;
        }
        let off = (self.pos - start) as usize;
        let n = out.len().min(self.buf.len() - off);
        out[..n].copy_from_slice(&self.buf[off..off + n]);
        self.pos += n as u64;
        Ok(n)
    }
}

/// Keys of the stored chunks and chunk patches of file `fid` from chunk `from` on
/// (only the index is read, never their values).
pub(crate) fn data_keys(
    coll: &basalt_engine::Collection,
    fid: u64,
    from: u64,
) -> Result<Vec<Vec<u8>>, basalt_engine::Error> {
    let ranges = [
        (layout::chunk_key(fid, from), layout::chunk_key_prefix(fid)),
        (
            layout::patch_key(fid, from, 0),
            layout::patch_key_prefix(fid),
        ),
    ];
    let mut out = Vec::new();
    for (lo, mut hi) in ranges {
        // Past every key of the prefix (those are 8 or 12 bytes longer).
        hi.extend_from_slice(&[0xff; 13]);
        let keys = coll.scan(
            Bound::Included(&lo[..]),
            Bound::Excluded(&hi[..]),
            Direction::Forward,
        )?;
        for k in keys.keys() {
            out.push(k?);
        }
    }
    Ok(out)
}

/// Highest inode id (fid) stored in a collection, 0 when none.
pub(crate) fn max_fid(coll: &basalt_engine::Collection) -> Result<u64, basalt_engine::Error> {
    let mut it = coll.scan_prefix(layout::INODE_PREFIX, Direction::Backward)?;
    match it.next() {
        Some(Ok((k, _))) => Ok(layout::inode_key_fid(&k).unwrap_or(0)),
        Some(Err(e)) => Err(e),
        None => Ok(0),
    }
}

/// Writes `data` as the document `key` of `collection` (created when missing), in the
/// layout the mount uses: one record up to the default chunk size, a manifest plus
/// chunks beyond. Replaces an existing document. Not for a collection that is mounted
/// at the same time (the mount keeps its metadata in memory).
pub fn write_document(
    db: &Db,
    collection: &str,
    key: &str,
    data: &mut dyn Read,
) -> Result<(), FsError> {
    if layout::split_path(key.as_bytes()).is_none() {
        return Err(FsError::InvalidKey(key.into()));
    }
    let what = || format!("{collection}/{key}");
    let coll = db
        .collection_or_create(collection)
        .map_err(|e| FsError::engine(what(), e))?;
    let cs = DEFAULT_CHUNK_SIZE;
    let first = read_full(data, cs + 1)?;
    // One batch drops the metadata of the document being replaced and publishes the
    // new one; chunks of a large document are written before it (invisible until the
    // manifest appears).
    let mut batch = WriteBatch::new();
    let name_key = layout::name_key(key.as_bytes());
    let old_fid = coll
        .get(&name_key)
        .map_err(|e| FsError::engine(what(), e))?
        .and_then(|v| v.try_into().ok().map(u64::from_be_bytes));
    if let Some(fid) = old_fid {
        batch.delete(collection, &name_key);
        let rec = coll
            .get(&layout::inode_key(fid))
            .map_err(|e| FsError::engine(what(), e))?
            .and_then(|r| InodeRecord::decode(&r));
        if let Some(mut rec) = rec {
            if rec.nlink > 1 {
                rec.nlink -= 1;
                batch.put(collection, &layout::inode_key(fid), &rec.encode());
            } else {
                batch.delete(collection, &layout::inode_key(fid));
                for k in data_keys(&coll, fid, 0).map_err(|e| FsError::engine(what(), e))? {
                    batch.delete(collection, &k);
                }
            }
        }
    }
    if first.len() <= cs {
        batch.put(collection, key.as_bytes(), &first);
        db.write(&batch).map_err(|e| FsError::engine(what(), e))?;
        return Ok(());
    }
    let fid = max_fid(&coll).map_err(|e| FsError::engine(what(), e))? + 1;
    let mut size = 0u64;
    let mut idx = 0u64;
    let mut pending = first;
    while !pending.is_empty() {
        let rest = if pending.len() > cs {
            pending.split_off(cs)
        } else {
            Vec::new()
        };
        size += pending.len() as u64;
        coll.put(&layout::chunk_key(fid, idx), &pending)
            .map_err(|e| FsError::engine(what(), e))?;
        idx += 1;
        pending = rest;
        let more = read_full(data, cs - pending.len())?;
        pending.extend_from_slice(&more);
    }
    let now = SystemTime::now();
    let rec = InodeRecord {
        kind: Kind::File,
        perm: 0o644,
        uid: 0,
        gid: 0,
        nlink: 1,
        rdev: 0,
        size,
        atime: now,
        mtime: now,
        ctime: now,
        crtime: now,
        storage: Storage::Chunked,
        chunk_size: cs as u32,
        symlink: Vec::new(),
        xattrs: Vec::new(),
    };
    let manifest = Manifest {
        fid,
        chunk_size: cs as u32,
    };
    batch
        .put(collection, &layout::inode_key(fid), &rec.encode())
        .put(collection, &name_key, &fid.to_be_bytes())
        .put(collection, key.as_bytes(), &manifest.encode());
    db.write(&batch).map_err(|e| FsError::engine(what(), e))?;
    Ok(())
}

fn read_full(r: &mut dyn Read, n: usize) -> Result<Vec<u8>, FsError> {
    let mut out = Vec::with_capacity(n.min(1 << 20));
    r.take(n as u64)
        .read_to_end(&mut out)
        .map_err(FsError::Input)?;
    Ok(out)
}

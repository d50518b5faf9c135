//! The engine-API view of files: stream a document's content whether it is stored
//! inline or as a manifest plus chunks, and write one the same way the mount does.

use std::io::{self, Read};
use std::ops::Bound;
use std::time::SystemTime;

use basalt_engine::{Db, Direction, WriteBatch};

use crate::fids::Fids;
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

/// Chunks a [`DocumentReader`] reads at once: one engine `multi_get` (their device
/// reads in flight together) and one scan for their patches.
const READ_AHEAD_CHUNKS: u64 = 16;

fn io_err(e: basalt_engine::Error) -> io::Error {
    io::Error::from_raw_os_error(e.errno())
}

impl ChunkStream {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.pos >= self.size || out.is_empty() {
            return Ok(0);
        }
        let buffered = self.buf_start..self.buf_start + self.buf.len() as u64;
        if !buffered.contains(&self.pos) {
            self.fill()?;
        }
        let off = (self.pos - self.buf_start) as usize;
        let n = out.len().min(self.buf.len() - off);
        out[..n].copy_from_slice(&self.buf[off..off + n]);
        self.pos += n as u64;
        Ok(n)
    }

    /// Reads the chunks from the one holding `pos` on, up to [`READ_AHEAD_CHUNKS`],
    /// with their patches laid over them.
    fn fill(&mut self) -> io::Result<()> {
        let cs = self.chunk_size;
        let first = self.pos / cs;
        let start = first * cs;
        let count = (self.size - start).div_ceil(cs).min(READ_AHEAD_CHUNKS);
        let end = (start + count * cs).min(self.size);
        let keys: Vec<Vec<u8>> = (first..first + count)
            .map(|i| layout::chunk_key(self.fid, i))
            .collect();
        // Each chunk goes straight into its place in the buffer (kept from the last
        // fill: every byte is written below, so it is not zeroed first).
        let mut data = std::mem::take(&mut self.buf);
        data.resize((end - start) as usize, 0);
        let mut parts: Vec<&mut [u8]> = data.chunks_mut(cs as usize).collect();
        let reqs: Vec<basalt_engine::RangeRequest<'_>> = keys
            .iter()
            .zip(&parts)
            .map(|(k, part)| (k.as_slice(), 0..part.len()))
            .collect();
        let lens = self
            .coll
            .db()
            .multi_get_ranges_into(self.coll.name(), &reqs, &mut parts)
            .map_err(io_err)?;
        // Holes and short chunks read as zeros up to the file size.
        for (part, len) in parts.iter_mut().zip(lens) {
            part[len.unwrap_or(0)..].fill(0);
        }
        // Newer copies of some of their pages (small writes committed alone).
        let lo = layout::patch_key(self.fid, first, 0);
        let hi = layout::patch_key(self.fid, first + count, 0);
        let patches = self
            .coll
            .scan(
                Bound::Included(&lo[..]),
                Bound::Excluded(&hi[..]),
                Direction::Forward,
            )
            .map_err(io_err)?;
        for item in patches {
            let (k, v) = item.map_err(io_err)?;
            if let Some((_, idx, p)) = layout::patch_location(&k) {
                let chunk_start = (idx - first) * cs;
                let chunk_end = (chunk_start + cs).min(data.len() as u64);
                let a = (chunk_start + p as u64 * layout::PATCH_PAGE).min(chunk_end) as usize;
                let z = (a + v.len()).min(chunk_end as usize);
                data[a..z].copy_from_slice(&v[..z - a]);
            }
        }
        self.buf = data;
        self.buf_start = start;
        Ok(())
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
    for (lo, prefix) in ranges {
        for k in keys_from(coll, &lo, prefix)? {
            out.push(k?);
        }
    }
    Ok(out)
}

/// Indices of the stored chunks of file `fid` from chunk `from` on, in order, read
/// from the index as the caller goes (it can stop at the first it needs).
pub(crate) fn chunk_indices(
    coll: &basalt_engine::Collection,
    fid: u64,
    from: u64,
) -> Result<impl Iterator<Item = Result<u64, basalt_engine::Error>>, basalt_engine::Error> {
    let keys = keys_from(
        coll,
        &layout::chunk_key(fid, from),
        layout::chunk_key_prefix(fid),
    )?;
    Ok(keys.filter_map(move |k| match k {
        Ok(k) => layout::chunk_index(&k, fid).map(Ok),
        Err(e) => Some(Err(e)),
    }))
}

/// The keys from `lo` on that start with `prefix`, in order.
fn keys_from(
    coll: &basalt_engine::Collection,
    lo: &[u8],
    mut prefix: Vec<u8>,
) -> Result<basalt_engine::KeyIter, basalt_engine::Error> {
    // Past every key of the prefix (those are 8 or 12 bytes longer).
    prefix.extend_from_slice(&[0xff; 13]);
    let scan = coll.scan(
        Bound::Included(lo),
        Bound::Excluded(&prefix[..]),
        Direction::Forward,
    )?;
    Ok(scan.keys())
}

/// A scan over the user documents of a collection, in key order: every key from 0x01
/// on (the mount's metadata keys start with NUL).
pub(crate) fn documents(
    coll: &basalt_engine::Collection,
) -> Result<basalt_engine::ScanIter, basalt_engine::Error> {
    coll.scan(
        Bound::Included(&[1u8][..]),
        Bound::Unbounded,
        Direction::Forward,
    )
}

/// Highest inode id (fid) stored in a collection, 0 when none (from the index alone).
pub(crate) fn max_fid(coll: &basalt_engine::Collection) -> Result<u64, basalt_engine::Error> {
    let mut it = coll
        .scan_prefix(layout::INODE_PREFIX, Direction::Backward)?
        .keys();
    match it.next() {
        Some(Ok(k)) => Ok(layout::inode_key_fid(&k).unwrap_or(0)),
        Some(Err(e)) => Err(e),
        None => Ok(0),
    }
}

/// Writes `data` as the document `key` of `collection` (created when missing), in the
/// layout the mount uses: one record up to the default chunk size, a manifest plus
/// chunks beyond. Replaces an existing document. A mount of the same engine in this
/// process shows the result at once; a large document's inode id comes from the
/// allocator that mount uses, so it is no file's the mount holds.
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
    // The allocator first: held, it keeps the ids a live mount or another call handed
    // out; the stored ones are read after, so none stored meanwhile is missed.
    let fids = Fids::of(db);
    let stored = max_fid(&coll).map_err(|e| FsError::engine(what(), e))?;
    let fid = fids.take(coll.id(), stored + 1);
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

//! The tree snapshot: at clean unmount the mount writes what it would read from the
//! engine at the next mount (per collection, the [`Records`] that `load` builds the
//! tree from) to one file beside the engine (`Db::write_aux`, name [`AUX_NAME`]), with
//! the engine's seqno. A mount whose engine is still at that seqno, with the same
//! collections, builds its tree from the file instead of reading every metadata block
//! of the log (which small files' data shares).
//!
//! The records are derived from the tree once everything is flushed and every write
//! through the engine API up to the seqno has been taken in (`Db::settled_seqno`).
//! Any later write, through the mount or the engine API, in this process or another,
//! moves the engine past the seqno, so a stale snapshot is never used; a crash that
//! loses writes after it leaves the engine exactly as the snapshot describes. What the
//! snapshot leaves out is only what a mount does not show: documents whose keys are no
//! paths or that a directory hides are not listed (so they are not reported at mount)
//! and records a mount would delete as leftovers are not there to delete.
//!
//! Format: magic, version, seqno, the body's length, a crc32c of these and of the
//! stored body, then the body compressed with lz4: per collection its name, engine id, largest inode id, inode
//! records, name records, documents (length and manifest) and patch keys.

use std::collections::{BTreeMap, HashMap};

use basalt_engine::{CollId, Db, Seqno};

use crate::layout::{self, put_bytes, Cursor, InodeRecord, Kind, Manifest, Storage};
use crate::load::Records;
use crate::state::{pages_of, State, ROOT_INO};
use crate::views::DIR_NAME;

/// Name of the engine aux file holding the snapshot.
pub const AUX_NAME: &str = "fusefs-tree";
const MAGIC: &[u8; 8] = b"BSLTTREE";
const VERSION: u32 = 1;
/// Header: magic, version, seqno, body length, crc32c of those three and the stored
/// body.
const HEADER_LEN: usize = 8 + 4 + 8 + 8 + 4;
/// Largest body accepted when reading (a corrupt length must not allocate without end).
const MAX_BODY: u64 = 16 << 30;

/// Every collection's records at one engine seqno.
#[derive(Debug, PartialEq)]
pub(crate) struct Snapshot {
    pub seqno: Seqno,
    /// By collection name: the engine's id of the collection and its records.
    pub colls: BTreeMap<String, (CollId, Records)>,
}

/// How the mount's tree was loaded, for `/.basalt/stats.json`.
#[derive(Clone, Debug, Default)]
pub struct LoadedFrom {
    /// The tree snapshot was used.
    pub snapshot: bool,
    /// Why not, when a snapshot was there but not used.
    pub skipped: Option<String>,
}

impl LoadedFrom {
    /// `{"source": "snapshot"|"engine", "snapshot_skipped": why or null}`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "source": if self.snapshot { "snapshot" } else { "engine" },
            "snapshot_skipped": self.skipped,
        })
    }
}

impl Snapshot {
    /// The binary form (see the module docs).
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::new();
        put_u32(&mut body, self.colls.len() as u32);
        for (name, (id, r)) in &self.colls {
            put_bytes(&mut body, name.as_bytes());
            put_u32(&mut body, *id);
            put_u64(&mut body, r.max_fid);
            let recs: BTreeMap<&u64, &InodeRecord> =
                r.recs.iter().map(|(f, r)| (f, &**r)).collect();
            put_u32(&mut body, recs.len() as u32);
            for (fid, rec) in recs {
                put_u64(&mut body, *fid);
                put_bytes(&mut body, &rec.encode());
            }
            put_u32(&mut body, r.names.len() as u32);
            for (path, fid) in &r.names {
                put_bytes(&mut body, path);
                put_u64(&mut body, *fid);
            }
            put_u32(&mut body, r.docs.len() as u32);
            for (path, (len, m)) in &r.docs {
                put_bytes(&mut body, path);
                put_u64(&mut body, *len);
                put_bytes(&mut body, &m.map(|m| m.encode()).unwrap_or_default());
            }
            put_u32(&mut body, r.patches.len() as u32);
            for k in &r.patches {
                put_bytes(&mut body, k);
            }
        }
        let stored = lz4_flex::compress(&body);
        let mut out = Vec::with_capacity(HEADER_LEN + stored.len());
        out.extend_from_slice(MAGIC);
        put_u32(&mut out, VERSION);
        put_u64(&mut out, self.seqno);
        put_u64(&mut out, body.len() as u64);
        let crc = checksum(&out[8..], &stored);
        put_u32(&mut out, crc);
        out.extend_from_slice(&stored);
        out
    }

    /// Parses [`Snapshot::encode`]'s form; the error says what is wrong and where.
    pub fn decode(b: &[u8]) -> Result<Snapshot, String> {
        let (seqno, len, crc) = header(b)?;
        let stored = &b[HEADER_LEN..];
        let want = checksum(&b[8..HEADER_LEN - 4], stored);
        if want != crc {
            return Err(format!(
                "checksum mismatch over bytes 8..{} (crc32c {want:08x}, header says {crc:08x})",
                b.len()
            ));
        }
        if len > MAX_BODY {
            return Err(format!("body of {len} bytes claimed"));
        }
        let body = lz4_flex::decompress(stored, len as usize)
            .map_err(|e| format!("body does not decompress: {e}"))?;
        let mut c = Cursor(&body);
        let colls = read_colls(&mut c).ok_or("body cut short or malformed")?;
        if !c.0.is_empty() {
            return Err(format!("{} bytes after the last collection", c.0.len()));
        }
        Ok(Snapshot { seqno, colls })
    }

    /// The snapshot of `st` (whose writes must all be in the engine), at `seqno`.
    pub fn of_state(st: &State, seqno: Seqno) -> Result<Snapshot, String> {
        let mut by_coll: HashMap<u32, Records> = HashMap::new();
        for (cid, c) in &st.colls {
            let r = Records {
                max_fid: st.fids.next_free(c.engine_id).saturating_sub(1),
                ..Records::default()
            };
            by_coll.insert(*cid, r);
        }
        for (&ino, n) in &st.nodes {
            let Some(r) = by_coll.get_mut(&n.coll) else {
                continue; // the mount root
            };
            if n.has_dirty_data() || n.meta_dirty {
                return Err(format!("inode {ino} has unwritten changes"));
            }
            let root = st.colls.get(&n.coll).map(|c| c.root) == Some(ino);
            if n.links.is_empty() && !root {
                if n.persisted {
                    return Err(format!("inode {ino} is stored but has no name (open?)"));
                }
                continue;
            }
            if !n.persisted && n.kind != Kind::File {
                continue; // a directory implied by the paths below it, as at mount
            }
            let paths = st
                .paths(ino)
                .map_err(|e| format!("inode {ino}: errno {}", e.0))?;
            r.max_fid = r.max_fid.max(n.fid);
            if n.persisted {
                r.recs.insert(n.fid, Box::new(n.record()));
                if root {
                    r.names.insert(Vec::new(), n.fid);
                }
                for p in &paths {
                    r.names.insert(p.clone(), n.fid);
                }
            } else if n.storage == Storage::Chunked {
                return Err(format!("chunked file {ino} has no name records"));
            }
            if n.kind != Kind::File {
                continue;
            }
            match n.storage {
                Storage::Inline if n.has_doc => {
                    for p in paths {
                        r.docs.insert(p, (n.size, None));
                    }
                }
                Storage::Inline => {}
                Storage::Chunked => {
                    let m = Manifest {
                        fid: n.fid,
                        chunk_size: n.chunk_size as u32,
                    };
                    for p in paths {
                        r.docs.insert(p, (layout::MANIFEST_LEN as u64, Some(m)));
                    }
                    for (&idx, &mask) in &n.chunks.patches {
                        for p in pages_of(mask) {
                            r.patches.push(layout::patch_key(n.fid, idx, p));
                        }
                    }
                }
            }
        }
        let mut colls = BTreeMap::new();
        for (cid, mut r) in by_coll {
            r.patches.sort();
            let c = &st.colls[&cid];
            colls.insert(c.name.clone(), (c.engine_id, r));
        }
        Ok(Snapshot { seqno, colls })
    }
}

/// The header's seqno, body length and checksum (magic and version checked), without
/// reading the body.
fn header(b: &[u8]) -> Result<(Seqno, u64, u32), String> {
    if b.len() < HEADER_LEN || &b[..8] != MAGIC {
        return Err("not a tree snapshot (bad magic or shorter than its header)".into());
    }
    let mut h = Cursor(&b[8..HEADER_LEN]);
    let short = || "header cut short".to_string();
    let version = h.u32().ok_or_else(short)?;
    if version != VERSION {
        return Err(format!("version {version}, this build reads {VERSION}"));
    }
    Ok((
        h.u64().ok_or_else(short)?,
        h.u64().ok_or_else(short)?,
        h.u32().ok_or_else(short)?,
    ))
}

fn read_colls(c: &mut Cursor<'_>) -> Option<BTreeMap<String, (CollId, Records)>> {
    let mut colls = BTreeMap::new();
    for _ in 0..c.u32()? {
        let name = String::from_utf8(c.bytes()?).ok()?;
        let id = c.u32()?;
        let mut r = Records {
            max_fid: c.u64()?,
            ..Records::default()
        };
        for _ in 0..c.u32()? {
            let fid = c.u64()?;
            r.recs
                .insert(fid, Box::new(InodeRecord::decode(&c.bytes()?)?));
        }
        for _ in 0..c.u32()? {
            let path = c.bytes()?;
            r.names.insert(path, c.u64()?);
        }
        for _ in 0..c.u32()? {
            let path = c.bytes()?;
            let len = c.u64()?;
            let m = c.bytes()?;
            let m = match m.is_empty() {
                true => None,
                false => Some(Manifest::decode(&m)?),
            };
            r.docs.insert(path, (len, m));
        }
        for _ in 0..c.u32()? {
            r.patches.push(c.bytes()?);
        }
        colls.insert(name, (id, r));
    }
    Some(colls)
}

/// crc32c of the header's fields after the magic and of the stored body.
fn checksum(fields: &[u8], stored: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(fields), stored)
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// The snapshot `db` holds if it describes the engine as it is now: written at the
/// engine's current seqno for the same collections. Otherwise `Err` says why (`Ok(None)`:
/// there is none).
pub(crate) fn usable(db: &Db) -> Result<Option<Snapshot>, String> {
    let bytes = match db.read_aux(AUX_NAME) {
        Ok(Some(b)) => b,
        Ok(None) => return Ok(None),
        Err(e) => return Err(format!("unreadable: {e}")),
    };
    let file = || format!("{}/{AUX_NAME}.aux", db.path().display());
    // The seqno first: a stale snapshot is refused without checking and unpacking
    // its body.
    let (seqno, _, _) = header(&bytes).map_err(|e| format!("{}: {e}", file()))?;
    let now = db.last_seqno();
    if seqno != now {
        return Err(format!(
            "written at seqno {seqno}, the engine is at {now} (changed since)"
        ));
    }
    let snap = Snapshot::decode(&bytes).map_err(|e| format!("{}: {e}", file()))?;
    let mut live = BTreeMap::new();
    // A collection the `/.basalt` view hides is not mounted, so no snapshot lists it.
    for name in db.list_collections().into_iter().filter(|n| n != DIR_NAME) {
        let id = db.collection(&name).map_err(|e| e.to_string())?.id();
        live.insert(name, id);
    }
    let listed: BTreeMap<String, CollId> = snap
        .colls
        .iter()
        .map(|(n, (id, _))| (n.clone(), *id))
        .collect();
    if listed != live {
        return Err("the engine's collections differ from the snapshot's".into());
    }
    Ok(Some(snap))
}

/// Whether `st` is ready for a snapshot: nothing dirty, the mount root written.
pub(crate) fn is_settled(st: &State) -> bool {
    st.dirty_nodes.is_empty() && st.nodes.get(&ROOT_INO).is_some_and(|n| !n.meta_dirty)
}

/// Linked chunked files without name records (a manifest found at mount whose inode
/// has no name there): marked dirty, so that the next flush writes their records and
/// the snapshot can describe them as stored.
pub(crate) fn mark_unnamed(st: &mut State) {
    let unnamed: Vec<u64> = (st.nodes.iter())
        .filter(|(_, n)| !n.persisted && n.storage == Storage::Chunked && !n.links.is_empty())
        .map(|(&ino, _)| ino)
        .collect();
    for ino in unnamed {
        if let Some(n) = st.nodes.get_mut(&ino) {
            n.meta_dirty = true;
        }
        st.mark_dirty(ino);
    }
}

/// What [`verify`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// No tree snapshot.
    Absent,
    /// One a mount would not use, and why (the engine changed since, damaged).
    Unused(String),
    /// One a mount would use, at this seqno, describing exactly the engine's records.
    Current(Seqno),
}

/// Checks the tree snapshot `db` holds against the engine's records (documents whose
/// keys are no paths aside); `Err` names the first difference of a snapshot a mount
/// would use, which is a problem: that mount would show another tree than the engine
/// holds.
pub fn verify(db: &Db) -> Result<Verdict, String> {
    let snap = match usable(db) {
        Ok(Some(snap)) => snap,
        Ok(None) => return Ok(Verdict::Absent),
        Err(why) => return Ok(Verdict::Unused(why)),
    };
    for (name, (_, saved)) in &snap.colls {
        let c = db.collection(name).map_err(|e| e.to_string())?;
        let mut stored = crate::load::read_records(&c, name).map_err(|e| e.to_string())?;
        stored.docs.retain(|k, _| layout::split_path(k).is_some());
        if saved.max_fid < stored.max_fid {
            return Err(format!(
                "{name}: largest inode id {} below the stored {}",
                saved.max_fid, stored.max_fid
            ));
        }
        stored.max_fid = saved.max_fid;
        if *saved != stored {
            return Err(format!("{name}: {}", first_difference(saved, &stored)));
        }
    }
    Ok(Verdict::Current(snap.seqno))
}

/// Where two collections' records differ, in words.
fn first_difference(saved: &Records, stored: &Records) -> String {
    let fids = saved.recs.keys().chain(stored.recs.keys());
    for fid in fids {
        if saved.recs.get(fid) != stored.recs.get(fid) {
            return format!(
                "inode {fid}: snapshot {:?}, engine {:?}",
                saved.recs.get(fid),
                stored.recs.get(fid)
            );
        }
    }
    if let Some(d) = map_difference("name", &saved.names, &stored.names) {
        return d;
    }
    if let Some(d) = map_difference("document", &saved.docs, &stored.docs) {
        return d;
    }
    format!(
        "patches: snapshot {} keys, engine {}",
        saved.patches.len(),
        stored.patches.len()
    )
}

/// The first path whose entry differs between two maps by path, in words.
fn map_difference<V: PartialEq + std::fmt::Debug>(
    what: &str,
    saved: &BTreeMap<Vec<u8>, V>,
    stored: &BTreeMap<Vec<u8>, V>,
) -> Option<String> {
    let path = (saved.keys().chain(stored.keys())).find(|p| saved.get(*p) != stored.get(*p))?;
    Some(format!(
        "{what} {:?}: snapshot {:?}, engine {:?}",
        String::from_utf8_lossy(path),
        saved.get(path),
        stored.get(path)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    fn sample() -> Snapshot {
        let rec = |kind, size| InodeRecord {
            kind,
            perm: 0o644,
            uid: 1,
            gid: 2,
            nlink: 1,
            rdev: 0,
            size,
            atime: SystemTime::UNIX_EPOCH,
            mtime: SystemTime::UNIX_EPOCH,
            ctime: SystemTime::UNIX_EPOCH,
            crtime: SystemTime::UNIX_EPOCH,
            storage: Storage::Inline,
            chunk_size: 65536,
            symlink: Vec::new(),
            xattrs: vec![(b"user.a".to_vec(), b"1".to_vec())],
        };
        let mut r = Records {
            max_fid: 9,
            ..Records::default()
        };
        r.recs.insert(1, Box::new(rec(Kind::Dir, 0)));
        r.recs.insert(7, Box::new(rec(Kind::File, 12)));
        r.names.insert(Vec::new(), 1);
        r.names.insert(b"d/f".to_vec(), 7);
        r.docs.insert(b"d/f".to_vec(), (12, None));
        let m = Manifest {
            fid: 8,
            chunk_size: 65536,
        };
        r.docs
            .insert(b"big".to_vec(), (layout::MANIFEST_LEN as u64, Some(m)));
        r.patches.push(layout::patch_key(8, 3, 1));
        let mut colls = BTreeMap::new();
        colls.insert("c".to_string(), (4, r));
        colls.insert("empty".to_string(), (5, Records::default()));
        Snapshot { seqno: 1234, colls }
    }

    #[test]
    fn a_snapshot_reads_back_as_written() {
        let s = sample();
        assert_eq!(Snapshot::decode(&s.encode()).unwrap(), s);
    }

    #[test]
    fn every_changed_or_cut_byte_is_refused_not_misread() {
        let bytes = sample().encode();
        for i in 0..bytes.len() {
            for bit in [0x01u8, 0x80] {
                let mut b = bytes.clone();
                b[i] ^= bit;
                assert!(
                    Snapshot::decode(&b).is_err(),
                    "byte {i} ^ {bit:#x} accepted"
                );
            }
        }
        for len in 0..bytes.len() {
            assert!(
                Snapshot::decode(&bytes[..len]).is_err(),
                "cut at {len} accepted"
            );
        }
        let err = Snapshot::decode(&bytes[..HEADER_LEN + 1]).unwrap_err();
        assert!(err.contains("checksum mismatch"), "{err}");
    }
}

//! Offline verification (`basalt check`): every checksum of every file, zeroed
//! padding, and every index → log reference of the live index.

use crate::aligned::{AlignedBuf, PAGE};
use crate::codec::align_up;
use crate::db::Db;
use crate::error::{Error, Result};
use crate::io::{DataFile, IoCounters, IoMode};
use crate::segment::{
    check_header, footer_body_len, footer_len, header_len, read_footer, scan_blocks, DATA_START,
};
use crate::{Direction, Options};
use serde::Serialize;
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

/// What `check` looked at and what it found wrong.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CheckReport {
    pub segments: usize,
    pub blocks: u64,
    pub index_runs: usize,
    pub index_blocks: u64,
    pub documents: u64,
    /// One line per problem, naming file and offset.
    pub problems: Vec<String>,
}

impl CheckReport {
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

fn nonzero_at(b: &[u8]) -> Option<usize> {
    b.iter().position(|&x| x != 0)
}

/// Verifies the data directory at `path` without changing it. The engine must not be
/// open elsewhere for the result to be meaningful.
pub fn check(path: &Path) -> Result<CheckReport> {
    if !path.is_dir() {
        return Err(Error::io(
            path,
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "data directory does not exist",
            ),
        ));
    }
    let mut rep = CheckReport::default();
    let opts = Options {
        direct_io: false,
        background_gc: false,
        create_if_missing: false,
        ..Options::default()
    };
    let db = match Db::open_read_only(path, opts) {
        Ok(db) => db,
        Err(e) => {
            rep.problems.push(format!("cannot open: {e}"));
            return Ok(rep);
        }
    };
    let counters = Arc::new(IoCounters::default());
    let segs = db.inner.segments.read().clone();
    for seg in segs.values() {
        rep.segments += 1;
        let file = DataFile::open_read(seg.file.path(), IoMode::Buffered, counters.clone())?;
        let p = file.path().display().to_string();
        let mut hdr = AlignedBuf::zeroed(PAGE);
        file.read_full(&mut hdr, 0)?;
        let header = match check_header(&hdr, seg.id, file.path()) {
            Ok(h) => h,
            Err(e) => {
                rep.problems.push(e.to_string());
                continue;
            }
        };
        let used = header_len(header.version);
        if let Some(at) = nonzero_at(&hdr[used..]) {
            rep.problems.push(format!(
                "corruption in {p} at offset {}: non-zero byte in header padding",
                used + at
            ));
        }
        let footer = match read_footer(&file) {
            Ok(f) => f,
            Err(e) => {
                rep.problems.push(e.to_string());
                continue;
            }
        };
        let limit = footer.as_ref().map(|f| f.1);
        // GC's dead sets are keyed by seqno: a segment must never hold one twice.
        let mut seqnos = roaring::RoaringTreemap::new();
        let mut repeated = None;
        let seed = seg.seed();
        let scan = scan_blocks(&file, DATA_START, limit, seed, |off, _, bytes| {
            let (_, raw) = crate::block::decode(bytes, file.path(), off, seed)?;
            for (_, r) in crate::record::RecordIter::new(&raw).flatten() {
                if !seqnos.insert(r.seqno) && repeated.is_none() {
                    repeated = Some((off, r.seqno));
                }
            }
            Ok(())
        });
        if let Some((off, seqno)) = repeated {
            rep.problems.push(format!(
                "corruption in {p} at offset {off}: seqno {seqno} appears twice in the segment"
            ));
        }
        let scan = match scan {
            Ok(s) => s,
            Err(e) => {
                rep.problems.push(e.to_string());
                continue;
            }
        };
        rep.blocks += scan.blocks.len() as u64;
        // A recycled file's log ends where its blocks stop verifying: the older
        // segment's blocks (another seed) follow.
        let recycled_tail = footer.is_none() && header.recycled_from != 0;
        if let Some(reason) = scan.stop_reason.as_ref().filter(|_| !recycled_tail) {
            rep.problems.push(format!(
                "corruption in {p} at offset {}: {reason}",
                scan.committed_end
            ));
        }
        let expected = seg.blocks.read().clone();
        if let Some((fblocks, data_end)) = &footer {
            if *fblocks != scan.blocks {
                rep.problems.push(format!(
                    "corruption in {p}: footer block list disagrees with the blocks found"
                ));
            }
            // Zero padding between the data end and the footer, inside the footer,
            // and on the end page of a reused file sealed short of its length (the
            // bytes between its footer and that page are the older segment's).
            let foff = align_up(*data_end, PAGE as u64);
            let len = file.len()?;
            let fend = (foff + footer_len(fblocks.len())).min(len);
            let start = crate::codec::align_down(*data_end, PAGE as u64);
            let mut tail = AlignedBuf::zeroed((fend - start) as usize);
            file.read_full(&mut tail, start)?;
            let gap = &tail[(*data_end - start) as usize..(foff - start) as usize];
            if let Some(at) = nonzero_at(gap) {
                rep.problems.push(format!(
                    "corruption in {p} at offset {}: non-zero byte after the last block",
                    data_end + at as u64
                ));
            }
            let footer_bytes = &tail[(foff - start) as usize..];
            let body = footer_body_len(fblocks.len());
            if let Some(at) =
                nonzero_at(&footer_bytes[body.min(footer_bytes.len())..footer_bytes.len() - 16])
            {
                rep.problems.push(format!(
                    "corruption in {p} at offset {}: non-zero byte in footer padding",
                    foff + (body + at) as u64
                ));
            }
            if len > fend {
                let mut end_page = AlignedBuf::zeroed(PAGE);
                file.read_full(&mut end_page, len - PAGE as u64)?;
                if header.recycled_from == 0 {
                    rep.problems.push(format!(
                        "corruption in {p}: {} bytes after the footer of a segment that reuses no file",
                        len - fend
                    ));
                } else if let Some(at) = nonzero_at(&end_page[..PAGE - 16]) {
                    rep.problems.push(format!(
                        "corruption in {p} at offset {}: non-zero byte in the end page",
                        len - PAGE as u64 + at as u64
                    ));
                }
            }
        } else if expected.len() != scan.blocks.len() {
            rep.problems.push(format!(
                "corruption in {p}: tail holds {} blocks, the engine recovered {}",
                scan.blocks.len(),
                expected.len()
            ));
        } else if !recycled_tail {
            let end = scan.committed_end;
            let len = file.len()?;
            if len > end {
                let start = crate::codec::align_down(end, PAGE as u64);
                let mut t = AlignedBuf::zeroed((align_up(len, PAGE as u64) - start) as usize);
                let n = file.read_full(&mut t, start)?;
                if let Some(at) = nonzero_at(&t[(end - start) as usize..n]) {
                    rep.problems.push(format!(
                        "corruption in {p} at offset {}: non-zero byte after the last block",
                        end + at as u64
                    ));
                }
            }
        }
    }
    let v = db.inner.version.read().clone();
    for run in &v.runs {
        rep.index_runs += 1;
        rep.index_blocks += run.block_count() as u64;
        rep.problems.extend(run.verify());
    }
    for name in db.list_collections() {
        let c = db.collection(&name)?;
        for item in c.scan(Bound::Unbounded, Bound::Unbounded, Direction::Forward)? {
            match item {
                Ok(_) => rep.documents += 1,
                Err(e) => {
                    rep.problems.push(format!("collection {name}: {e}"));
                    break;
                }
            }
        }
    }
    Ok(rep)
}

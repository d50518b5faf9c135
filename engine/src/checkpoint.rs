//! The checkpoint file (`CHECKPOINT`): which index runs and segments make up the
//! database, where log replay starts, how much of the delete list is valid, and the
//! catalog. Written atomically (temp file, fsync, rename, fsync dir).
//!
//! Framing: `"BSLTCKP1" | version:u32 | len:u32 | crc32c(json):u32 | json`.

use crate::catalog::Catalog;
use crate::error::{Error, Result};
use crate::io::{write_file_atomic, IoCounters};
use crate::record::Seqno;
use crate::segment::SegId;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"BSLTCKP1";
/// Checkpoint format version written by this build (2 added `deletes_gen`; version 1
/// is read as generation 0).
pub const CHECKPOINT_VERSION: u32 = 2;

/// A position in the log: segment and byte offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LogPos {
    pub seg: SegId,
    pub off: u64,
}

/// Contents of a checkpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Highest seqno covered by the index runs (replay continues after it).
    pub last_seqno: Seqno,
    /// Replay the log from here: every record before it is in the runs.
    pub replay_from: LogPos,
    /// Index runs, newest first.
    pub runs: Vec<u64>,
    /// Live segments (ascending). Later segment files were created after this checkpoint.
    pub segments: Vec<SegId>,
    /// Valid length of the delete list.
    pub deletes_len: u64,
    /// Generation of the delete list's file (`DELETES`, then `DELETES.<gen>`).
    #[serde(default)]
    pub deletes_gen: u64,
    pub next_run_id: u64,
    pub catalog: Catalog,
    /// Deletes older than this seqno may be missing from the change feed.
    pub purge_seqno: Seqno,
    /// Per mille of the newer runs' entries that the last merge into the oldest run
    /// found superseding a version (drives the merge policy; absent: not measured,
    /// as in checkpoints written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow_permille: Option<u64>,
}

pub fn checkpoint_path(dir: &Path) -> PathBuf {
    dir.join("CHECKPOINT")
}

pub fn encode(c: &Checkpoint) -> Vec<u8> {
    let json = serde_json::to_vec(c).expect("checkpoint serializes");
    let mut b = Vec::with_capacity(20 + json.len());
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&CHECKPOINT_VERSION.to_le_bytes());
    b.extend_from_slice(&(json.len() as u32).to_le_bytes());
    b.extend_from_slice(&crc32c::crc32c(&json).to_le_bytes());
    b.extend_from_slice(&json);
    b
}

pub fn decode(b: &[u8], path: &Path) -> Result<Checkpoint> {
    let bad = |off: u64, d: &str| Error::corruption(path, off, format!("checkpoint: {d}"));
    if b.len() < 20 || &b[0..8] != MAGIC {
        return Err(bad(0, "bad magic"));
    }
    let version = u32::from_le_bytes(b[8..12].try_into().unwrap());
    if !(1..=CHECKPOINT_VERSION).contains(&version) {
        return Err(Error::FormatVersion {
            file: path.to_path_buf(),
            found: version,
            supported: CHECKPOINT_VERSION,
        });
    }
    let len = u32::from_le_bytes(b[12..16].try_into().unwrap()) as usize;
    let crc = u32::from_le_bytes(b[16..20].try_into().unwrap());
    if b.len() != 20 + len {
        return Err(bad(12, "length does not match the file size"));
    }
    if crc32c::crc32c(&b[20..]) != crc {
        return Err(bad(16, "checksum mismatch"));
    }
    serde_json::from_slice(&b[20..]).map_err(|e| bad(20, &format!("malformed contents: {e}")))
}

pub fn write(dir: &Path, c: &Checkpoint, counters: &IoCounters) -> Result<()> {
    write_file_atomic(&checkpoint_path(dir), &encode(c), counters)
}

/// Reads the checkpoint; `Ok(None)` when the file does not exist.
pub fn read(dir: &Path) -> Result<Option<Checkpoint>> {
    let path = checkpoint_path(dir);
    match std::fs::read(&path) {
        Ok(b) => decode(&b, &path).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(&path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Checkpoint {
        Checkpoint {
            last_seqno: 42,
            replay_from: LogPos { seg: 3, off: 8192 },
            runs: vec![5, 2],
            segments: vec![1, 3],
            deletes_len: 100,
            deletes_gen: 2,
            next_run_id: 6,
            catalog: Catalog::new(),
            purge_seqno: 0,
            shadow_permille: Some(250),
        }
    }

    #[test]
    fn checkpoint_roundtrip_and_every_flipped_bit_detected() {
        let b = encode(&sample());
        assert_eq!(decode(&b, Path::new("c")).unwrap(), sample());
        for bit in 0..b.len() * 8 {
            let mut c = b.clone();
            c[bit / 8] ^= 1 << (bit % 8);
            assert!(decode(&c, Path::new("c")).is_err(), "bit {bit}");
        }
        assert!(decode(&b[..b.len() - 1], Path::new("c")).is_err());
    }

    proptest! {
        #[test]
        fn checkpoint_decoder_survives_arbitrary_bytes(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&b, Path::new("fuzz"));
        }
    }
}

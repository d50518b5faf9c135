//! The read-only `/.basalt/` directory: engine and filesystem stats, SSD health and
//! per-collection change feeds. Contents are generated when a file is opened.

use std::io::Write;

use basalt_engine::Db;

use crate::layout;

/// Name of the virtual directory at the mount root.
pub const DIR_NAME: &str = ".basalt";
pub const DIR_INO: u64 = 2;
pub const STATS_INO: u64 = 3;
pub const HEALTH_INO: u64 = 4;
pub const CHANGES_INO: u64 = 5;
/// Change-feed files get inode numbers from here on.
pub const CHANGE_FILE_BASE: u64 = 1 << 56;
/// Largest change-feed file generated at one open.
pub const MAX_FEED_BYTES: usize = 64 << 20;

/// A virtual inode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Virtual {
    Dir,
    Stats,
    Health,
    ChangesDir,
    /// Change feed of a collection after a seqno.
    Changes {
        collection: String,
        since: u64,
    },
}

impl Virtual {
    pub fn is_dir(&self) -> bool {
        matches!(self, Virtual::Dir | Virtual::ChangesDir)
    }
}

/// Parses a change-feed file name: `COLLECTION` (from the start) or
/// `COLLECTION@SEQNO` (changes after SEQNO).
pub fn parse_feed_name(name: &str) -> (String, u64) {
    if let Some((c, s)) = name.rsplit_once('@') {
        if let Ok(since) = s.parse::<u64>() {
            return (c.to_string(), since);
        }
    }
    (name.to_string(), 0)
}

/// JSON lines of a collection's change feed (user documents only), seqno order.
pub fn change_feed(db: &Db, collection: &str, since: u64) -> Result<Vec<u8>, basalt_engine::Error> {
    let coll = db.collection(collection)?;
    let mut out = Vec::new();
    for ch in coll.changes(since)? {
        let ch = ch?;
        if layout::is_internal_key(&ch.key) {
            continue;
        }
        let (op, size) = match &ch.value {
            Some(v) => ("put", Some(v.len())),
            None => ("delete", None),
        };
        let line = serde_json::json!({
            "seqno": ch.seqno,
            "key": String::from_utf8_lossy(&ch.key),
            "op": op,
            "size": size,
        });
        let _ = writeln!(out, "{line}");
        if out.len() >= MAX_FEED_BYTES {
            break;
        }
    }
    Ok(out)
}

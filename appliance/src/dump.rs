//! The portable dump format of `basalt dump` / `basalt load`: JSON lines.
//!
//! ```text
//! {"format":"basalt-dump","version":1,"basalt":"0.1.0","seqno":1234}
//! {"collection":"users"}                                   (starts a collection, even empty)
//! {"collection":"users","key":"alice","value":"{...}"}     (or key_b64 / value_b64)
//! {"end":true,"collections":1,"records":1}
//! ```
//! A dump is one consistent snapshot. `load` streams it in batches, creating collections;
//! it refuses another format or version, and stops with an error naming the line at a
//! malformed line or a missing or mismatched end line (a truncated file). Batches before
//! the error stay loaded: loading the complete file again is idempotent.

use crate::jsonbytes;
use anyhow::{bail, Context, Result};
use basalt_engine::{Db, Direction, WriteBatch};
use serde_json::{json, Map, Value};
use std::io::{BufRead, Write};
use std::ops::Bound;

/// Value of the header's `format` field.
pub const FORMAT: &str = "basalt-dump";
/// The version this build writes and reads.
pub const VERSION: u64 = 1;
/// `load` commits a batch every `BATCH` records or `BATCH_BYTES` of keys and values,
/// whichever comes first: one batch of large values had made one segment as big as the
/// whole dump (a batch is never split across segments) and every later open replay it
/// in memory (1.36 GB for 100 values of 12 MiB).
const BATCH: usize = 1000;
const BATCH_BYTES: u64 = 16 << 20;

/// What a dump or load moved.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub collections: u64,
    pub records: u64,
}

fn line(out: &mut dyn Write, v: &Value) -> Result<()> {
    serde_json::to_writer(&mut *out, v)?;
    out.write_all(b"\n")?;
    Ok(())
}

/// Writes `collections` (all when empty) of `db` as of one snapshot.
pub fn dump(db: &Db, collections: &[String], out: &mut dyn Write) -> Result<Counts> {
    let names = if collections.is_empty() {
        db.list_collections()
    } else {
        collections.to_vec()
    };
    let snap = db.snapshot();
    line(
        out,
        &json!({"format": FORMAT, "version": VERSION, "basalt": env!("CARGO_PKG_VERSION"), "seqno": snap.seqno()}),
    )?;
    let mut n = Counts::default();
    for name in &names {
        let iter = snap
            .scan(name, Bound::Unbounded, Bound::Unbounded, Direction::Forward)
            .with_context(|| format!("collection {name:?}"))?;
        line(out, &json!({ "collection": name }))?;
        n.collections += 1;
        for kv in iter {
            let (k, v) = kv?;
            let mut m = Map::new();
            m.insert("collection".into(), Value::String(name.clone()));
            jsonbytes::put(&mut m, "key", &k);
            jsonbytes::put(&mut m, "value", &v);
            line(out, &Value::Object(m))?;
            n.records += 1;
        }
    }
    line(
        out,
        &json!({"end": true, "collections": n.collections, "records": n.records}),
    )?;
    out.flush()?;
    Ok(n)
}

/// Reads a dump into `db` (collections are created when missing; keys overwritten).
pub fn load(db: &Db, input: &mut dyn BufRead) -> Result<Counts> {
    let mut lines = input.lines().enumerate();
    let (_, first) = lines.next().context("empty input: not a basalt dump")?;
    let header: Value =
        serde_json::from_str(&first?).context("line 1: not a basalt dump header")?;
    if header.get("format").and_then(Value::as_str) != Some(FORMAT) {
        bail!("line 1: not a basalt dump (format is not {FORMAT:?})");
    }
    match header.get("version").and_then(Value::as_u64) {
        Some(VERSION) => {}
        v => bail!("line 1: dump version {v:?} is not supported (this build reads {VERSION})"),
    }
    let mut n = Counts::default();
    let mut batch = WriteBatch::new();
    let mut ended = None;
    for (i, l) in lines {
        let no = i + 1;
        let l = l.with_context(|| format!("line {no}"))?;
        if ended.is_some() {
            bail!("line {no}: data after the end line");
        }
        let v: Value = serde_json::from_str(&l).with_context(|| format!("line {no}: not JSON"))?;
        let Value::Object(m) = v else {
            bail!("line {no}: expected an object");
        };
        if m.get("end") == Some(&Value::Bool(true)) {
            ended = Some(m);
            continue;
        }
        let coll = m
            .get("collection")
            .and_then(Value::as_str)
            .with_context(|| format!("line {no}: missing \"collection\""))?;
        let key = jsonbytes::get(&m, "key").map_err(|e| anyhow::anyhow!("line {no}: {e}"))?;
        let Some(key) = key else {
            if !batch.is_empty() {
                db.write(&batch)?;
                batch = WriteBatch::new();
            }
            db.collection_or_create(coll)
                .with_context(|| format!("line {no}"))?;
            n.collections += 1;
            continue;
        };
        let value = jsonbytes::get(&m, "value")
            .map_err(|e| anyhow::anyhow!("line {no}: {e}"))?
            .with_context(|| format!("line {no}: missing \"value\""))?;
        batch.put_owned(coll, key, value);
        n.records += 1;
        if batch.len() >= BATCH || batch.user_bytes() >= BATCH_BYTES {
            db.write(&batch).with_context(|| format!("line {no}"))?;
            batch = WriteBatch::new();
        }
    }
    let Some(end) = ended else {
        bail!("the end line is missing: the dump is truncated");
    };
    let want = (
        end.get("collections").and_then(Value::as_u64),
        end.get("records").and_then(Value::as_u64),
    );
    if want != (Some(n.collections), Some(n.records)) {
        bail!(
            "the end line announces {:?} collections and {:?} records but the file holds {} and {}",
            want.0,
            want.1,
            n.collections,
            n.records
        );
    }
    if !batch.is_empty() {
        db.write(&batch)?;
    }
    db.flush()?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_commits_large_values_in_bounded_batches() {
        let dir = tempfile::tempdir().unwrap();
        let segment_size = 4u64 << 20;
        let opts = || basalt_engine::Options {
            segment_size,
            durability: basalt_engine::Durability::NoSync,
            ..basalt_engine::Options::default()
        };
        // Incompressible values of 1 MiB, so the disk holds what was written.
        let value = |i: u8| -> Vec<u8> {
            use rand::{RngCore, SeedableRng};
            let mut v = vec![0u8; 1 << 20];
            rand::rngs::StdRng::seed_from_u64(u64::from(i)).fill_bytes(&mut v);
            v
        };
        let src = Db::open(dir.path().join("src"), opts()).unwrap();
        let c = src.create_collection("big").unwrap();
        for i in 0..40u8 {
            c.put(&[i], &value(i)).unwrap();
        }
        let mut text = Vec::new();
        dump(&src, &[], &mut text).unwrap();
        let dst = Db::open(dir.path().join("dst"), opts()).unwrap();
        let n = load(&dst, &mut &text[..]).unwrap();
        assert_eq!(n.records, 40);
        let biggest = dst.stats().segments.iter().map(|s| s.disk_bytes).max();
        assert!(
            biggest.unwrap() <= segment_size + (17 << 20),
            "a segment of {biggest:?} bytes: 40 MiB went in one batch"
        );
        let d = dst.collection("big").unwrap();
        for i in 0..40u8 {
            assert_eq!(d.get(&[i]).unwrap(), Some(value(i)));
        }
    }
}

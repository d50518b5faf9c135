//! `basalt dump` and `basalt load`.

use crate::cli::{DumpArgs, LoadArgs};
use crate::{dump, store};
use anyhow::{Context, Result};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

/// A file argument, `None` for `-` (standard input or output, as the convention goes).
fn named(p: &Option<PathBuf>) -> Option<&Path> {
    p.as_deref().filter(|p| *p != Path::new("-"))
}

pub fn run_dump(args: &DumpArgs, out: &mut dyn Write) -> Result<i32> {
    let db = store::open(&args.data.data, store::offline_options())?;
    let n = match named(&args.output) {
        Some(p) => {
            let f =
                std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?;
            let mut w = BufWriter::new(f);
            let n = dump::dump(&db, &args.collection, &mut w)?;
            let f = w.into_inner().map_err(|e| e.into_error())?;
            // A file is synced; a device or pipe (`-o /dev/null`, a FIFO) cannot be.
            if f.metadata().is_ok_and(|m| m.is_file()) {
                f.sync_all()
                    .with_context(|| format!("syncing {}", p.display()))?;
            }
            n
        }
        None => dump::dump(&db, &args.collection, &mut BufWriter::new(&mut *out))?,
    };
    eprintln!(
        "basalt dump: {} collection(s), {} record(s)",
        n.collections, n.records
    );
    Ok(0)
}

pub fn run_load(args: &LoadArgs, out: &mut dyn Write) -> Result<i32> {
    let opts = basalt_engine::Options {
        durability: basalt_engine::Durability::NoSync,
        create_if_missing: true,
        ..store::configured_offline_options(&args.engine, &args.data.data)?
    };
    let mut input: Box<dyn BufRead> = match named(&args.input) {
        Some(p) => Box::new(BufReader::new(
            std::fs::File::open(p).with_context(|| format!("opening {}", p.display()))?,
        )),
        None => Box::new(std::io::stdin().lock()),
    };
    let db = store::open(&args.data.data, opts)?;
    let n = dump::load(&db, &mut input)?;
    db.close()?;
    writeln!(
        out,
        "loaded {} collection(s), {} record(s) into {}",
        n.collections,
        n.records,
        args.data.data.display()
    )?;
    Ok(0)
}

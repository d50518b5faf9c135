//! `basalt collections --data DIR [list|create NAME|drop NAME|rename FROM TO|exchange A B]`

use crate::cli::{CollectionAction, CollectionsArgs};
use crate::store;
use anyhow::Result;
use std::io::Write;

pub fn run(args: &CollectionsArgs, out: &mut dyn Write) -> Result<i32> {
    let db = store::open(&args.data.data, store::offline_options())?;
    match args.action.clone().unwrap_or(CollectionAction::List) {
        CollectionAction::List => {
            for c in db.list_collections() {
                writeln!(out, "{c}")?;
            }
        }
        CollectionAction::Create { name } => {
            db.create_collection(&name)?;
            writeln!(out, "created collection {name:?}")?;
        }
        CollectionAction::Drop { name } => {
            db.drop_collection(&name)?;
            writeln!(
                out,
                "dropped collection {name:?} (its space is reclaimed by GC)"
            )?;
        }
        CollectionAction::Rename { from, to } => {
            db.rename_collection(&from, &to)?;
            writeln!(out, "renamed collection {from:?} to {to:?}")?;
        }
        CollectionAction::Exchange { a, b } => {
            db.exchange_collections(&a, &b)?;
            writeln!(out, "exchanged the names of collections {a:?} and {b:?}")?;
        }
    }
    db.close()?;
    Ok(0)
}

//! The collection catalog: names ↔ ids, and ids dropped but not yet purged from
//! the index. Changes are logged as `Catalog` records (JSON values) and the whole
//! catalog is saved in every checkpoint.

use crate::error::{Error, Result};
use crate::record::CollId;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Longest collection name in bytes.
pub const MAX_COLLECTION_NAME: usize = 255;

/// A catalog change, as stored in the log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum CatalogOp {
    Create {
        name: String,
        id: CollId,
    },
    Drop {
        name: String,
        id: CollId,
    },
    Rename {
        from: String,
        to: String,
        id: CollId,
    },
}

/// Name ↔ id map of live collections.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Catalog {
    pub next_id: CollId,
    pub by_name: BTreeMap<String, CollId>,
    /// Dropped ids whose index entries may still exist.
    pub dropped: BTreeSet<CollId>,
}

/// Checks a collection name: non-empty, at most 255 bytes, no `/` or NUL, not `.`/`..`.
pub fn validate_name(name: &str) -> Result<()> {
    let bad = |reason| {
        Err(Error::InvalidCollectionName {
            name: name.to_string(),
            reason,
        })
    };
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > MAX_COLLECTION_NAME {
        return bad("longer than 255 bytes");
    }
    if name.contains('/') || name.contains('\0') {
        return bad("contains '/' or NUL");
    }
    if name == "." || name == ".." {
        return bad("reserved name");
    }
    Ok(())
}

impl Catalog {
    pub fn new() -> Self {
        Catalog {
            next_id: 1,
            ..Default::default()
        }
    }

    pub fn id(&self, name: &str) -> Result<CollId> {
        self.by_name
            .get(name)
            .copied()
            .ok_or_else(|| Error::UnknownCollection(name.to_string()))
    }

    pub fn name_of(&self, id: CollId) -> Option<&str> {
        self.by_name
            .iter()
            .find(|(_, &i)| i == id)
            .map(|(n, _)| n.as_str())
    }

    pub fn is_live(&self, id: CollId) -> bool {
        self.by_name.values().any(|&i| i == id)
    }

    /// Plans a create (does not change the catalog).
    pub fn plan_create(&self, name: &str) -> Result<CatalogOp> {
        validate_name(name)?;
        if self.by_name.contains_key(name) {
            return Err(Error::CollectionExists(name.to_string()));
        }
        Ok(CatalogOp::Create {
            name: name.to_string(),
            id: self.next_id,
        })
    }

    pub fn plan_drop(&self, name: &str) -> Result<CatalogOp> {
        Ok(CatalogOp::Drop {
            name: name.to_string(),
            id: self.id(name)?,
        })
    }

    pub fn plan_rename(&self, from: &str, to: &str) -> Result<CatalogOp> {
        validate_name(to)?;
        let id = self.id(from)?;
        if self.by_name.contains_key(to) {
            return Err(Error::CollectionExists(to.to_string()));
        }
        Ok(CatalogOp::Rename {
            from: from.to_string(),
            to: to.to_string(),
            id,
        })
    }

    /// Plans swapping the names of collections `a` and `b`: three renames through a
    /// name no collection can have (it holds a NUL), to be logged in one batch so that
    /// they are applied together or not at all. Nothing to do when `a` is `b`.
    pub fn plan_exchange(&self, a: &str, b: &str) -> Result<Vec<CatalogOp>> {
        let (ia, ib) = (self.id(a)?, self.id(b)?);
        if a == b {
            return Ok(Vec::new());
        }
        let through = format!("\0exchange-{ia}");
        let rename = |from: &str, to: &str, id| CatalogOp::Rename {
            from: from.to_string(),
            to: to.to_string(),
            id,
        };
        Ok(vec![
            rename(a, &through, ia),
            rename(b, a, ib),
            rename(&through, b, ia),
        ])
    }

    /// Applies a logged change (idempotent for replay).
    pub fn apply(&mut self, op: &CatalogOp) {
        match op {
            CatalogOp::Create { name, id } => {
                self.by_name.insert(name.clone(), *id);
                self.next_id = self.next_id.max(id + 1);
            }
            CatalogOp::Drop { name, id } => {
                if self.by_name.get(name) == Some(id) {
                    self.by_name.remove(name);
                }
                self.dropped.insert(*id);
            }
            CatalogOp::Rename { from, to, id } => {
                if self.by_name.get(from) == Some(id) {
                    self.by_name.remove(from);
                    self.by_name.insert(to.clone(), *id);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_rename_drop_and_replay_idempotence() {
        let mut c = Catalog::new();
        let op = c.plan_create("users").unwrap();
        c.apply(&op);
        c.apply(&op);
        assert_eq!(c.id("users").unwrap(), 1);
        assert!(matches!(
            c.plan_create("users"),
            Err(Error::CollectionExists(_))
        ));
        let r = c.plan_rename("users", "people").unwrap();
        c.apply(&r);
        assert!(c.id("users").is_err());
        let d = c.plan_drop("people").unwrap();
        c.apply(&d);
        assert!(c.dropped.contains(&1) && c.by_name.is_empty());
        assert_eq!(
            c.plan_create("x").unwrap(),
            CatalogOp::Create {
                name: "x".into(),
                id: 2
            }
        );
        assert!(
            validate_name("a/b").is_err()
                && validate_name("\0exchange-1").is_err()
                && validate_name("").is_err()
                && validate_name(&"x".repeat(256)).is_err()
        );
    }

    #[test]
    fn exchange_swaps_two_names_and_replays_idempotently() {
        let mut c = Catalog::new();
        for name in ["a", "b", "c"] {
            let op = c.plan_create(name).unwrap();
            c.apply(&op);
        }
        let ops = c.plan_exchange("a", "b").unwrap();
        for _ in 0..2 {
            // The second pass is a replay over a catalog that already holds the swap.
            for op in &ops {
                c.apply(op);
            }
            assert_eq!(
                c.by_name
                    .iter()
                    .map(|(n, &i)| (n.as_str(), i))
                    .collect::<Vec<_>>(),
                [("a", 2), ("b", 1), ("c", 3)]
            );
        }
        assert!(c.plan_exchange("a", "a").unwrap().is_empty());
        assert!(matches!(
            c.plan_exchange("a", "missing"),
            Err(Error::UnknownCollection(_))
        ));
    }
}

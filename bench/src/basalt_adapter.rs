//! The Basalt side of `basalt bench`: [`BasaltFactory`] opens a `basalt_engine::Db` with the
//! db_bench flags mapped onto engine options, and [`BasaltEngine`] drives one collection
//! (`bench`) of it through the [`KvEngine`] trait.
//!
//! Mapping: `--compression_type` none → none, zstd/zlib → zstd, lz4/snappy → lz4 (Basalt has
//! no snappy); `--sync=1` → sync every write, otherwise no sync until flush/close (db_bench's
//! default writes the WAL without fsync too); `--cache_size`/`--memory_budget` → the engine's
//! whole memory budget; either direct-IO flag → O_DIRECT; `--target_fill` → GC's target fill;
//! `--io_backend=io_uring|psync` → the engine's read backend; `--read_poll_micros` → how long
//! an io_uring read polls before sleeping; `--warm_index_cache=0` → start with a cold
//! index cache (the engine warms it at open by default); `--block_size` → the log block size (engine
//! default 16 KiB when absent); `--prepopulate_block_cache=1` → cache each log block as
//! it is written; `--recycle_log_file_num` → retired segment files kept for reuse.

use crate::engine::{
    BatchOp, Compression, Direction, Durability, EngineError, EngineFactory, EngineOptions,
    EngineStats, IoBackend, KvEngine, KvPairs,
};
use basalt_engine::{Collection, Db, Options, WriteBatch};
use std::ops::Bound;
use std::sync::Arc;
use std::time::Instant;

/// The collection the benchmark writes to.
pub const BENCH_COLLECTION: &str = "bench";

/// Opens Basalt for `basalt bench`.
#[derive(Debug, Default, Clone, Copy)]
pub struct BasaltFactory;

/// One open Basalt engine and its `bench` collection.
pub struct BasaltEngine {
    db: Db,
    coll: Collection,
    opened: Instant,
}

fn err(e: basalt_engine::Error) -> EngineError {
    EngineError::new(e.to_string())
}

/// Engine options for the benchmark's options.
pub fn engine_options(o: &EngineOptions) -> Result<Options, EngineError> {
    let compression = match o.compression {
        Compression::None => basalt_engine::Compression::None,
        Compression::Snappy | Compression::Lz4 => basalt_engine::Compression::Lz4,
        Compression::Zstd | Compression::Zlib => basalt_engine::Compression::Zstd(3),
    };
    let durability = match o.durability {
        Durability::SyncEveryWrite => basalt_engine::Durability::SyncEveryWrite,
        Durability::Periodic | Durability::NoSync => basalt_engine::Durability::NoSync,
    };
    let mut opts = Options {
        compression,
        durability,
        memory_budget: o.memory_budget,
        direct_io: o.direct_reads || o.direct_writes,
        cache_writes: o.cache_writes,
        warm_index_cache: o.warm_index_cache,
        create_if_missing: true,
        ..Options::default()
    };
    if let Some(b) = o.io_backend {
        opts.io_backend = match b {
            IoBackend::IoUring => basalt_engine::IoBackend::IoUring,
            IoBackend::Psync => basalt_engine::IoBackend::Psync,
        };
    }
    if let Some(p) = o.read_poll_micros {
        opts.read_poll_micros = p;
    }
    if let Some(n) = o.recycle_segments {
        opts.recycle_segments = n;
    }
    if let Some(b) = o.block_size {
        opts.block_size = b;
    }
    if let Some(t) = o.target_fill_pct {
        if !(1.0..=99.0).contains(&t) {
            return Err(EngineError::new(format!(
                "--target_fill={t} must be between 1 and 99"
            )));
        }
        opts.target_fill_pct = t.round() as u8;
    }
    opts.validate().map_err(err)?;
    Ok(opts)
}

impl EngineFactory for BasaltFactory {
    fn open(&self, o: &EngineOptions) -> Result<Arc<dyn KvEngine>, EngineError> {
        let opts = engine_options(o)?;
        if o.fresh && o.path.exists() {
            std::fs::remove_dir_all(&o.path)
                .map_err(|e| EngineError::new(format!("removing {}: {e}", o.path.display())))?;
        }
        let db = Db::open(&o.path, opts).map_err(err)?;
        let coll = db.collection_or_create(BENCH_COLLECTION).map_err(err)?;
        Ok(Arc::new(BasaltEngine {
            db,
            coll,
            opened: Instant::now(),
        }))
    }
}

impl BasaltEngine {
    /// The open engine (for tests and the `stats` step).
    pub fn db(&self) -> &Db {
        &self.db
    }
}

impl KvEngine for BasaltEngine {
    fn name(&self) -> &str {
        "basalt"
    }

    fn version(&self) -> String {
        format!(
            "basalt {} (compression {}, io {:?})",
            env!("CARGO_PKG_VERSION"),
            self.db.stats().compression,
            self.db.io_mode()
        )
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), EngineError> {
        self.coll.put(key, value).map(|_| ()).map_err(err)
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        self.coll.get(key).map_err(err)
    }

    fn delete(&self, key: &[u8]) -> Result<(), EngineError> {
        self.coll.delete(key).map(|_| ()).map_err(err)
    }

    fn write_batch(&self, ops: &[BatchOp<'_>]) -> Result<(), EngineError> {
        let mut b = WriteBatch::new();
        for op in ops {
            match op {
                BatchOp::Put(k, v) => b.put(BENCH_COLLECTION, k, v),
                BatchOp::Delete(k) => b.delete(BENCH_COLLECTION, k),
            };
        }
        self.db.write(&b).map(|_| ()).map_err(err)
    }

    fn multi_get(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>, EngineError> {
        self.coll.multi_get(keys).map_err(err)
    }

    fn scan_from(
        &self,
        start: &[u8],
        limit: usize,
        dir: Direction,
    ) -> Result<KvPairs, EngineError> {
        let iter = match dir {
            Direction::Forward => self.coll.scan(
                Bound::Included(start),
                Bound::Unbounded,
                basalt_engine::Direction::Forward,
            ),
            Direction::Backward => self.coll.scan(
                Bound::Unbounded,
                Bound::Included(start),
                basalt_engine::Direction::Backward,
            ),
        }
        .map_err(err)?;
        iter.take(limit).map(|r| r.map_err(err)).collect()
    }

    fn flush(&self) -> Result<(), EngineError> {
        self.db.flush().map_err(err)
    }

    fn wait_for_gc(&self) -> Result<(), EngineError> {
        self.db.wait_for_gc().map_err(err)
    }

    fn stats(&self) -> EngineStats {
        let s = self.db.stats();
        EngineStats {
            user_bytes_written: Some(s.user_bytes_written),
            device_bytes_written: Some(s.device_bytes_written),
            live_bytes: Some(s.live_bytes),
            disk_bytes: Some(s.disk_bytes),
            write_stall_micros: Some(s.write_stall_micros),
            uptime_micros: Some(self.opened.elapsed().as_micros() as u64),
            raw: serde_json::to_value(&s).unwrap_or(serde_json::Value::Null),
        }
    }

    fn close(&self) -> Result<(), EngineError> {
        self.db.sync().map_err(err)
    }
}

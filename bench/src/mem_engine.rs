//! `memtest`: an in-memory test engine (a BTreeMap under a lock) with an injectable stall.
//! It persists by writing one snapshot file at `close` and loading it at open, so that the
//! compare harness, which runs every step in its own process, sees the data of earlier steps.
//! It is a test double, never Basalt: it reports itself as `memtest`.

use crate::engine::{
    BatchOp, Direction, EngineError, EngineFactory, EngineOptions, EngineStats, KvEngine, KvPairs,
};
use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::{BufReader, BufWriter, Read, Write};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

pub const SNAPSHOT_FILE: &str = "MEMTEST-SNAPSHOT";
const MAGIC: &[u8; 8] = b"MEMTEST1";

pub struct MemEngine {
    map: RwLock<BTreeMap<Vec<u8>, Vec<u8>>>,
    dir: Option<PathBuf>,
    ops: AtomicU64,
    stall_at_op: AtomicU64,
    stall_ns: AtomicU64,
    stall_micros_total: AtomicU64,
    user_bytes_written: AtomicU64,
    snapshot_bytes_written: AtomicU64,
    opened: Instant,
    /// How often each key was read (`get` and `multi_get`), for tests of key choice.
    reads: Mutex<HashMap<Vec<u8>, u64>>,
}

impl MemEngine {
    /// A purely in-memory engine (nothing on disk).
    pub fn new() -> Self {
        Self::with_map(BTreeMap::new(), None)
    }

    fn with_map(map: BTreeMap<Vec<u8>, Vec<u8>>, dir: Option<PathBuf>) -> Self {
        MemEngine {
            map: RwLock::new(map),
            dir,
            ops: AtomicU64::new(0),
            stall_at_op: AtomicU64::new(u64::MAX),
            stall_ns: AtomicU64::new(0),
            stall_micros_total: AtomicU64::new(0),
            user_bytes_written: AtomicU64::new(0),
            snapshot_bytes_written: AtomicU64::new(0),
            opened: Instant::now(),
            reads: Mutex::default(),
        }
    }

    /// Make the operation that comes `after_ops` operations from now hold the engine's
    /// write lock for `stall`, blocking every other operation too (a write stall).
    pub fn inject_stall(&self, after_ops: u64, stall: Duration) {
        self.stall_ns
            .store(stall.as_nanos() as u64, Ordering::SeqCst);
        let now = self.ops.load(Ordering::SeqCst);
        self.stall_at_op.store(now + after_ops, Ordering::SeqCst);
    }

    pub fn len(&self) -> usize {
        self.map.read().unwrap().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How often each key was read since the engine opened.
    pub fn reads_per_key(&self) -> HashMap<Vec<u8>, u64> {
        self.reads.lock().unwrap().clone()
    }

    fn count_reads<'a>(&self, keys: impl IntoIterator<Item = &'a [u8]>) {
        let mut r = self.reads.lock().unwrap();
        for k in keys {
            *r.entry(k.to_vec()).or_default() += 1;
        }
    }

    fn tick(&self) {
        let n = self.ops.fetch_add(1, Ordering::SeqCst);
        if n == self.stall_at_op.load(Ordering::SeqCst) {
            let d = Duration::from_nanos(self.stall_ns.load(Ordering::SeqCst));
            let _guard = self.map.write().unwrap();
            std::thread::sleep(d);
            self.stall_micros_total
                .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
        }
    }

    fn snapshot_path(dir: &Path) -> PathBuf {
        dir.join(SNAPSHOT_FILE)
    }

    fn load(dir: &Path) -> Result<BTreeMap<Vec<u8>, Vec<u8>>, EngineError> {
        let p = Self::snapshot_path(dir);
        let mut map = BTreeMap::new();
        let f = match fs::File::open(&p) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(map),
            Err(e) => return Err(EngineError::new(format!("open {}: {e}", p.display()))),
        };
        let mut r = BufReader::new(f);
        let mut magic = [0u8; 8];
        r.read_exact(&mut magic)
            .map_err(|e| EngineError::new(format!("{}: {e}", p.display())))?;
        if &magic != MAGIC {
            return Err(EngineError::new(format!(
                "{} is not a memtest snapshot",
                p.display()
            )));
        }
        let mut len = [0u8; 4];
        loop {
            match r.read_exact(&mut len) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                Err(e) => return Err(e.into()),
            }
            let mut k = vec![0u8; u32::from_le_bytes(len) as usize];
            r.read_exact(&mut k)?;
            r.read_exact(&mut len)?;
            let mut v = vec![0u8; u32::from_le_bytes(len) as usize];
            r.read_exact(&mut v)?;
            map.insert(k, v);
        }
        Ok(map)
    }
}

impl Default for MemEngine {
    fn default() -> Self {
        Self::new()
    }
}

impl KvEngine for MemEngine {
    fn name(&self) -> &str {
        "memtest"
    }
    fn version(&self) -> String {
        format!(
            "memtest {} (in-memory BTreeMap test engine of basalt-bench, NOT Basalt)",
            env!("CARGO_PKG_VERSION")
        )
    }
    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), EngineError> {
        self.tick();
        self.user_bytes_written
            .fetch_add((key.len() + value.len()) as u64, Ordering::Relaxed);
        self.map
            .write()
            .unwrap()
            .insert(key.to_vec(), value.to_vec());
        Ok(())
    }
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        self.tick();
        self.count_reads([key]);
        Ok(self.map.read().unwrap().get(key).cloned())
    }
    fn delete(&self, key: &[u8]) -> Result<(), EngineError> {
        self.tick();
        self.user_bytes_written
            .fetch_add(key.len() as u64, Ordering::Relaxed);
        self.map.write().unwrap().remove(key);
        Ok(())
    }
    fn write_batch(&self, ops: &[BatchOp<'_>]) -> Result<(), EngineError> {
        self.tick();
        let mut m = self.map.write().unwrap();
        for op in ops {
            match *op {
                BatchOp::Put(k, v) => {
                    self.user_bytes_written
                        .fetch_add((k.len() + v.len()) as u64, Ordering::Relaxed);
                    m.insert(k.to_vec(), v.to_vec());
                }
                BatchOp::Delete(k) => {
                    self.user_bytes_written
                        .fetch_add(k.len() as u64, Ordering::Relaxed);
                    m.remove(k);
                }
            }
        }
        Ok(())
    }
    fn multi_get(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>, EngineError> {
        self.tick();
        self.count_reads(keys.iter().copied());
        let m = self.map.read().unwrap();
        Ok(keys.iter().map(|k| m.get(*k).cloned()).collect())
    }
    fn scan_from(
        &self,
        start: &[u8],
        limit: usize,
        dir: Direction,
    ) -> Result<KvPairs, EngineError> {
        self.tick();
        let m = self.map.read().unwrap();
        let clone = |(k, v): (&Vec<u8>, &Vec<u8>)| (k.clone(), v.clone());
        Ok(match dir {
            Direction::Forward => m
                .range::<[u8], _>((Bound::Included(start), Bound::Unbounded))
                .take(limit)
                .map(clone)
                .collect(),
            Direction::Backward => m
                .range::<[u8], _>((Bound::Unbounded, Bound::Included(start)))
                .rev()
                .take(limit)
                .map(clone)
                .collect(),
        })
    }
    fn flush(&self) -> Result<(), EngineError> {
        Ok(())
    }
    fn wait_for_gc(&self) -> Result<(), EngineError> {
        Ok(())
    }
    fn stats(&self) -> EngineStats {
        let m = self.map.read().unwrap();
        let live: u64 = m.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum();
        let disk = self
            .dir
            .as_ref()
            .and_then(|d| fs::metadata(Self::snapshot_path(d)).ok())
            .map(|md| md.len())
            .unwrap_or(0);
        let stall = self.stall_micros_total.load(Ordering::Relaxed);
        EngineStats {
            user_bytes_written: Some(self.user_bytes_written.load(Ordering::Relaxed)),
            device_bytes_written: Some(self.snapshot_bytes_written.load(Ordering::Relaxed)),
            live_bytes: Some(live),
            disk_bytes: Some(disk),
            write_stall_micros: Some(stall),
            uptime_micros: Some(self.opened.elapsed().as_micros() as u64),
            raw: serde_json::json!({
                "engine": "memtest",
                "keys": m.len(),
                "live_bytes": live,
                "snapshot_bytes": disk,
                "operations": self.ops.load(Ordering::Relaxed),
                "write_stall_micros": stall,
                "uptime_micros": self.opened.elapsed().as_micros() as u64,
            }),
        }
    }
    fn close(&self) -> Result<(), EngineError> {
        let Some(dir) = &self.dir else { return Ok(()) };
        let tmp = dir.join(format!("{SNAPSHOT_FILE}.tmp"));
        let m = self.map.read().unwrap();
        let f = fs::File::create(&tmp)?;
        let mut w = BufWriter::with_capacity(1 << 20, f);
        w.write_all(MAGIC)?;
        let mut written = MAGIC.len() as u64;
        for (k, v) in m.iter() {
            w.write_all(&(k.len() as u32).to_le_bytes())?;
            w.write_all(k)?;
            w.write_all(&(v.len() as u32).to_le_bytes())?;
            w.write_all(v)?;
            written += 8 + (k.len() + v.len()) as u64;
        }
        let f = w
            .into_inner()
            .map_err(|e| EngineError::new(e.to_string()))?;
        f.sync_all()?;
        fs::rename(&tmp, Self::snapshot_path(dir))?;
        self.snapshot_bytes_written
            .fetch_add(written, Ordering::Relaxed);
        Ok(())
    }
}

/// Opens [`MemEngine`]s. With a directory it snapshots there; `fresh` removes the snapshot.
/// Tests can reach the last engine opened (to inject stalls or count keys).
#[derive(Default)]
pub struct MemFactory {
    pub last: std::sync::Mutex<Option<Arc<MemEngine>>>,
    /// When set, every engine this factory opens gets this stall injected.
    pub stall: Option<(u64, Duration)>,
}

impl MemFactory {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn with_stall(after_ops: u64, stall: Duration) -> Self {
        MemFactory {
            last: Default::default(),
            stall: Some((after_ops, stall)),
        }
    }
    pub fn last_engine(&self) -> Option<Arc<MemEngine>> {
        self.last.lock().unwrap().clone()
    }
}

impl EngineFactory for MemFactory {
    fn open(&self, opts: &EngineOptions) -> Result<Arc<dyn KvEngine>, EngineError> {
        fs::create_dir_all(&opts.path)
            .map_err(|e| EngineError::new(format!("create {}: {e}", opts.path.display())))?;
        let snap = MemEngine::snapshot_path(&opts.path);
        if opts.fresh && snap.exists() {
            fs::remove_file(&snap)?;
        }
        let map = MemEngine::load(&opts.path)?;
        let e = Arc::new(MemEngine::with_map(map, Some(opts.path.clone())));
        if let Some((after, d)) = self.stall {
            e.inject_stall(after, d);
        }
        *self.last.lock().unwrap() = Some(e.clone());
        Ok(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_both_directions_and_snapshot_roundtrip() {
        let dir = tempfile::tempdir().unwrap();
        let f = MemFactory::new();
        let mut opts = crate::flags::Flags::default().engine_options(true);
        opts.path = dir.path().to_path_buf();
        let e = f.open(&opts).unwrap();
        for i in 0u8..10 {
            e.put(&[i], &[i, i]).unwrap();
        }
        let fwd = e.scan_from(&[3], 3, Direction::Forward).unwrap();
        assert_eq!(
            fwd.iter().map(|(k, _)| k[0]).collect::<Vec<_>>(),
            vec![3, 4, 5]
        );
        let back = e.scan_from(&[3], 10, Direction::Backward).unwrap();
        assert_eq!(
            back.iter().map(|(k, _)| k[0]).collect::<Vec<_>>(),
            vec![3, 2, 1, 0]
        );
        e.close().unwrap();
        opts.fresh = false;
        let e2 = f.open(&opts).unwrap();
        assert_eq!(e2.get(&[7]).unwrap(), Some(vec![7, 7]));
        opts.fresh = true;
        let e3 = f.open(&opts).unwrap();
        assert_eq!(e3.get(&[7]).unwrap(), None);
    }
}

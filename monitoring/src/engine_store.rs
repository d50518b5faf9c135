//! History stored in a Basalt engine collection of its own (`.monitoring` by default),
//! so samples share the appliance's durability, checksums and `basalt check`.
//!
//! Key: `device 0x00 metric 0x00 resolution(b'r'|b'h') ts(u64 BE, offset by 2^63)`, so one
//! (device, metric, resolution) series is a contiguous, time-ordered key range. Value: the
//! sample as an `f64` in little-endian bytes.

use crate::error::MonitoringError;
use crate::history::{plan_prune, PruneStats, Resolution, Retention, Sample, SampleStore};
use basalt_engine::{Collection, Db, Direction, WriteBatch};
use std::collections::HashSet;
use std::ops::Bound;

/// Default collection name (hidden in the mount's listing).
pub const DEFAULT_COLLECTION: &str = ".monitoring";

/// A [`SampleStore`] backed by a Basalt engine collection.
pub struct EngineStore {
    db: Db,
    coll: Collection,
}

fn engine_err(e: basalt_engine::Error) -> MonitoringError {
    MonitoringError::Io {
        path: "engine history store".into(),
        source: std::io::Error::other(e.to_string()),
    }
}

fn res_byte(r: Resolution) -> u8 {
    match r {
        Resolution::Raw => b'r',
        Resolution::Hourly => b'h',
    }
}

fn series_prefix(device: &str, metric: &str, res: Resolution) -> Vec<u8> {
    let mut k = Vec::with_capacity(device.len() + metric.len() + 3);
    k.extend_from_slice(device.as_bytes());
    k.push(0);
    k.extend_from_slice(metric.as_bytes());
    k.push(0);
    k.push(res_byte(res));
    k
}

fn key(s: &Sample) -> Vec<u8> {
    let mut k = series_prefix(&s.device, &s.metric, s.resolution);
    k.extend_from_slice(&ts_bytes(s.ts));
    k
}

fn ts_bytes(ts: i64) -> [u8; 8] {
    ((ts as u64) ^ (1 << 63)).to_be_bytes()
}

fn decode(k: &[u8], v: &[u8]) -> Option<Sample> {
    let (head, ts) = k.split_at(k.len().checked_sub(8)?);
    let ts = (u64::from_be_bytes(ts.try_into().ok()?) ^ (1 << 63)) as i64;
    let (rest, res) = head.split_at(head.len().checked_sub(1)?);
    let resolution = match res[0] {
        b'r' => Resolution::Raw,
        b'h' => Resolution::Hourly,
        _ => return None,
    };
    let rest = rest.strip_suffix(&[0])?;
    let sep = rest.iter().position(|&b| b == 0)?;
    let device = std::str::from_utf8(&rest[..sep]).ok()?.to_string();
    let metric = std::str::from_utf8(&rest[sep + 1..]).ok()?.to_string();
    let value = f64::from_le_bytes(v.try_into().ok()?);
    Some(Sample {
        ts,
        device,
        metric,
        value,
        resolution,
    })
}

impl EngineStore {
    /// Uses (creating if needed) `collection` in `db`.
    pub fn open(db: Db, collection: &str) -> Result<Self, MonitoringError> {
        let coll = db.collection_or_create(collection).map_err(engine_err)?;
        Ok(EngineStore { db, coll })
    }

    fn all(&self) -> Result<Vec<Sample>, MonitoringError> {
        let mut out = Vec::new();
        for item in self
            .coll
            .scan(Bound::Unbounded, Bound::Unbounded, Direction::Forward)
            .map_err(engine_err)?
        {
            let (k, v) = item.map_err(engine_err)?;
            out.extend(decode(&k, &v));
        }
        Ok(out)
    }
}

impl SampleStore for EngineStore {
    fn append(&self, samples: &[Sample]) -> Result<(), MonitoringError> {
        if samples.is_empty() {
            return Ok(());
        }
        let mut b = WriteBatch::new();
        for s in samples {
            b.put(self.coll.name(), &key(s), &s.value.to_le_bytes());
        }
        self.db.write(&b).map_err(engine_err)?;
        self.db.sync().map_err(engine_err)
    }

    fn range(
        &self,
        device: &str,
        metric: &str,
        from: i64,
        to: i64,
    ) -> Result<Vec<Sample>, MonitoringError> {
        let mut out = Vec::new();
        for res in [Resolution::Hourly, Resolution::Raw] {
            let p = series_prefix(device, metric, res);
            let lo = [p.as_slice(), &ts_bytes(from)].concat();
            let hi = [p.as_slice(), &ts_bytes(to)].concat();
            for item in self
                .coll
                .scan(
                    Bound::Included(&lo),
                    Bound::Excluded(&hi),
                    Direction::Forward,
                )
                .map_err(engine_err)?
            {
                let (k, v) = item.map_err(engine_err)?;
                out.extend(decode(&k, &v));
            }
        }
        // Hourly rollups only where raw samples have been pruned.
        let first_raw = out
            .iter()
            .filter(|s| s.resolution == Resolution::Raw)
            .map(|s| s.ts)
            .min();
        out.retain(|s| {
            s.resolution == Resolution::Raw || first_raw.is_none_or(|r| s.ts + 3600 <= r)
        });
        out.sort_by_key(|s| s.ts);
        Ok(out)
    }

    fn prune(&self, now: i64, retention: &Retention) -> Result<PruneStats, MonitoringError> {
        let before = self.all()?;
        let old_keys: HashSet<Vec<u8>> = before.iter().map(key).collect();
        let plan = plan_prune(before, now, retention);
        let keep: HashSet<Vec<u8>> = plan.keep.iter().map(key).collect();
        let mut b = WriteBatch::new();
        for k in old_keys.difference(&keep) {
            b.delete(self.coll.name(), k);
        }
        for s in plan.keep.iter().filter(|s| !old_keys.contains(&key(s))) {
            b.put(self.coll.name(), &key(s), &s.value.to_le_bytes());
        }
        if !b.is_empty() {
            self.db.write(&b).map_err(engine_err)?;
            self.db.sync().map_err(engine_err)?;
        }
        Ok(plan.stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(dir: &std::path::Path) -> EngineStore {
        let db = Db::open(
            dir,
            basalt_engine::Options {
                memory_budget: 16 << 20,
                segment_size: 1 << 20,
                ..Default::default()
            },
        )
        .unwrap();
        EngineStore::open(db, DEFAULT_COLLECTION).unwrap()
    }

    #[test]
    fn engine_store_appends_ranges_and_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = open(dir.path());
            s.append(&[
                Sample::raw(-5, "/dev/nvme0", "temperature_c", 41.0),
                Sample::raw(100, "/dev/nvme0", "temperature_c", 43.5),
            ])
            .unwrap();
            s.append(&[
                Sample::raw(50, "/dev/nvme0", "percentage_used", 3.0),
                Sample::raw(60, "/dev/sda", "temperature_c", 30.0),
            ])
            .unwrap();
        }
        let s = open(dir.path());
        let t = s.range("/dev/nvme0", "temperature_c", -10, 101).unwrap();
        assert_eq!(
            t.iter().map(|x| (x.ts, x.value)).collect::<Vec<_>>(),
            vec![(-5, 41.0), (100, 43.5)]
        );
        assert_eq!(
            s.range("/dev/nvme0", "temperature_c", 0, 100)
                .unwrap()
                .len(),
            0,
            "to is exclusive, from inclusive"
        );
        assert_eq!(
            s.range("/dev/sda", "temperature_c", 0, 1000).unwrap()[0].value,
            30.0
        );
    }

    #[test]
    fn engine_store_prune_rolls_raw_into_hourly_and_drops_old_hourly() {
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path());
        let day: i64 = 86_400;
        let now = 100 * day;
        // Raw samples 10 days old (two per hour for one hour) and fresh ones.
        let old = now - 10 * day;
        let hour = old.div_euclid(3600) * 3600;
        s.append(&[
            Sample::raw(hour + 10, "d", "temperature_c", 40.0),
            Sample::raw(hour + 20, "d", "temperature_c", 50.0),
            Sample::raw(now - 60, "d", "temperature_c", 45.0),
        ])
        .unwrap();
        let st = s
            .prune(
                now,
                &Retention {
                    raw_days: 7,
                    hourly_days: 90,
                },
            )
            .unwrap();
        assert_eq!(
            (st.raw_removed, st.hourly_added, st.hourly_removed),
            (2, 1, 0)
        );
        let all = s.range("d", "temperature_c", 0, now + 1).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(
            (all[0].ts, all[0].value, all[0].resolution),
            (hour, 45.0, Resolution::Hourly)
        );
        assert_eq!(all[1].resolution, Resolution::Raw);
        // 100 days later the hourly rollup expires too.
        let st = s
            .prune(
                now + 100 * day,
                &Retention {
                    raw_days: 7,
                    hourly_days: 90,
                },
            )
            .unwrap();
        assert_eq!(
            st.hourly_removed, 2,
            "the old rollup and the rollup of the fresh sample"
        );
        assert!(s
            .range("d", "temperature_c", 0, now + 200 * day)
            .unwrap()
            .is_empty());
    }
}

//! The filesystem side of the service, on `basalt_fusefs`: mount with the plan's options,
//! stale-mount detection and cleanup, clean unmount.

use crate::service::MountPlan;
use anyhow::{Context, Result};
use basalt_engine::Db;
use basalt_fusefs::{MountConfig, MountHandle};
use std::path::Path;
use std::sync::Arc;

/// Health JSON served inside the mount.
pub type HealthFn = Arc<dyn Fn() -> serde_json::Value + Send + Sync>;

/// Whether `path` is a FUSE mount whose serving process is gone.
pub fn is_stale(path: &Path) -> bool {
    basalt_fusefs::is_stale_mount(path)
}

/// Detaches a (stale) mount.
pub fn force_unmount(path: &Path) -> Result<()> {
    basalt_fusefs::force_unmount(path).map_err(anyhow::Error::from)
}

/// Mounts `db` at `path` (absolute); `data_dir` names the source in the mount table.
pub fn mount(
    db: Db,
    path: &Path,
    plan: &MountPlan,
    data_dir: &Path,
    health: HealthFn,
) -> Result<MountHandle> {
    let mut options = vec![format!("fsname=basalt:{}", data_dir.display())];
    options.extend(plan.options.iter().cloned());
    let cfg = MountConfig {
        mountpoint: path.to_path_buf(),
        threads: plan.threads,
        allow_other: plan.allow_other,
        options,
        chunk_size: plan.chunk_size,
        health: Some(health),
    };
    basalt_fusefs::mount(db, cfg).with_context(|| {
        if !Path::new("/dev/fuse").exists() {
            "/dev/fuse is missing: load the fuse module (modprobe fuse) or give the container the device".to_string()
        } else {
            format!("mounting at {}", path.display())
        }
    })
}

/// Unmounts and waits for the filesystem threads.
pub fn unmount(handle: MountHandle) -> Result<()> {
    let p = handle.mountpoint().to_path_buf();
    handle
        .unmount()
        .with_context(|| format!("unmounting {}", p.display()))
}

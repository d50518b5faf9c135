//! Several processes create, write, truncate, rename and unlink files in the same
//! directories at once; the tree must match the union of their models, before and
//! after a remount.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

use common::DevMount;

fn fnv1a(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in b {
        h ^= x as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Every file under `root` as `path -> (len, hash)`.
fn tree(root: &Path) -> BTreeMap<String, (usize, u64)> {
    let mut out = BTreeMap::new();
    for d in 0..4 {
        for e in std::fs::read_dir(root.join(format!("d{d}"))).unwrap() {
            let e = e.unwrap();
            let data = std::fs::read(e.path()).unwrap();
            let name = format!("d{d}/{}", e.file_name().to_string_lossy());
            out.insert(name, (data.len(), fnv1a(&data)));
        }
    }
    out
}

#[test]
fn concurrent_processes_match_model() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let (data, mp) = (tmp.path().join("data"), tmp.path().join("mnt"));
    let m = DevMount::start(&data, &mp, &[]);
    let root = mp.join("shared");
    for d in 0..4 {
        std::fs::create_dir_all(root.join(format!("d{d}"))).unwrap();
    }
    let workers: Vec<_> = (0..4)
        .map(|id| {
            Command::new(env!("CARGO_BIN_EXE_basalt-fusefs-dev"))
                .args(["churn", "--dir"])
                .arg(&root)
                .args(["--id", &id.to_string(), "--ops", "1500", "--seed", "11"])
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut model = BTreeMap::new();
    for w in workers {
        let out = w.wait_with_output().unwrap();
        assert!(out.status.success(), "worker failed");
        for line in String::from_utf8(out.stdout).unwrap().lines() {
            let f: Vec<&str> = line.split('\t').collect();
            let len: usize = f[1].parse().unwrap();
            let hash = u64::from_str_radix(f[2], 16).unwrap();
            model.insert(f[0].to_string(), (len, hash));
        }
    }
    assert!(!model.is_empty());
    assert_eq!(
        tree(&root),
        model,
        "tree differs from the model while mounted"
    );
    m.stop_external();
    let m = DevMount::start(&data, &mp, &[]);
    assert_eq!(
        tree(&root),
        model,
        "tree differs from the model after remount"
    );
    m.stop();
}

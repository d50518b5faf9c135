//! Several processes create, write, truncate, rename, exchange (`RENAME_EXCHANGE`) and
//! unlink files in the same directories at once; the tree must match the union of their
//! models, before and after a remount.

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

/// Eight threads read a remounted file with O_DIRECT at once (4 and 8 KiB pieces at
/// random 512-byte offsets: some across a chunk boundary, some in a hole, some past
/// the end), so the read pool takes them in batches and answers each read as its own
/// pages land. Every answer must hold exactly the file's bytes at that offset, also
/// on a mount with a single FUSE worker.
#[test]
fn concurrent_direct_reads_each_get_the_bytes_at_their_offset() {
    use basalt_fusefs::mount;
    use common::{assert_bytes, mount_config, open_db, pattern};
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let (data, mp) = (tmp.path().join("data"), tmp.path().join("mnt"));
    std::fs::create_dir_all(&mp).unwrap();
    // 3 MiB of data, a 1 MiB hole, then 100 bytes: 64 KiB chunks, the last one short.
    let mut want = pattern(11, 3 << 20);
    want.resize(4 << 20, 0);
    want.extend_from_slice(&pattern(12, 100));
    {
        let h = mount(open_db(&data), mount_config(&mp)).unwrap();
        std::fs::create_dir(mp.join("c")).unwrap();
        let f = std::fs::File::create(mp.join("c/f")).unwrap();
        f.write_all_at(&want[..3 << 20], 0).unwrap();
        f.write_all_at(&want[4 << 20..], 4 << 20).unwrap();
        f.sync_all().unwrap();
        drop(f);
        h.unmount().unwrap();
    }
    // Remounted: the reads go to the device, not to the write cache. Once with the
    // default workers, once with one (which queues every read to the pool).
    for workers in [0, 1] {
        let mut cfg = mount_config(&mp);
        cfg.threads = workers;
        let h = mount(open_db(&data), cfg).unwrap();
        let path = mp.join("c/f");
        std::thread::scope(|s| {
            for t in 0..8u64 {
                let (path, want) = (&path, &want);
                s.spawn(move || {
                    let f = std::fs::OpenOptions::new()
                        .read(true)
                        .custom_flags(libc::O_DIRECT)
                        .open(path)
                        .unwrap();
                    let mut raw = vec![0u8; 3 * 4096];
                    let at = raw.as_ptr().align_offset(4096);
                    let buf = &mut raw[at..at + 8192];
                    let mut x = (t + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    for i in 0..300 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let off = (x % (want.len() as u64 + 8192)) / 512 * 512;
                        let len = if x & 1 == 0 { 4096 } else { 8192 };
                        let n = f.read_at(&mut buf[..len], off).unwrap();
                        let a = (off as usize).min(want.len());
                        let z = (a + len).min(want.len());
                        assert_bytes(
                            &buf[..n],
                            &want[a..z],
                            &format!(
                                "workers {workers}, thread {t} read {i}: {len} bytes at {off}"
                            ),
                        );
                    }
                });
            }
        });
        h.unmount().unwrap();
    }
}

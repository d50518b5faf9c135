//! A full disk: the failing write returns ENOSPC (`Error::NoSpace`), every earlier
//! acknowledged write stays readable, nothing is corrupted, and writes work again once
//! space is freed. Runs on a small tmpfs (buffered-IO fallback) and on a loop-mounted
//! ext4 (O_DIRECT). Needs root for `mount`; skipped with the reason otherwise.

use basalt_engine::{Db, Durability, Error, Options};
use std::path::Path;
use std::process::Command;

struct Mount(std::path::PathBuf);
impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

fn run_until_full(dir: &Path, ballast_bytes: usize) {
    let ballast = dir.join("ballast");
    std::fs::write(&ballast, vec![0xAAu8; ballast_bytes]).unwrap();
    let data = dir.join("db");
    let opts = Options {
        segment_size: 512 << 10,
        memory_budget: 8 << 20,
        durability: Durability::SyncEveryWrite,
        compression: basalt_engine::Compression::None,
        ..Options::default()
    };
    let db = Db::open(&data, opts.clone()).unwrap();
    let c = db.create_collection("c").unwrap();
    let value = |i: u32| format!("{i:08}-{}", "v".repeat(400)).into_bytes();
    let mut acked = 0u32;
    let err = loop {
        match c.put(&acked.to_be_bytes(), &value(acked)) {
            Ok(_) => acked += 1,
            Err(e) => break e,
        }
        assert!(acked < 1_000_000, "the file system never filled up");
    };
    assert!(
        matches!(err, Error::NoSpace { .. }),
        "expected ENOSPC, got: {err}"
    );
    assert!(err.to_string().contains("no space left"), "{err}");
    assert!(acked > 100, "only {acked} writes before ENOSPC");
    for i in 0..acked {
        assert_eq!(
            c.get(&i.to_be_bytes()).unwrap().unwrap(),
            value(i),
            "acknowledged write {i} unreadable after ENOSPC"
        );
    }
    // Free space: writes work again without reopening.
    std::fs::remove_file(&ballast).unwrap();
    let mut more = 0;
    for i in acked..acked + 200 {
        c.put(&i.to_be_bytes(), &value(i))
            .unwrap_or_else(|e| panic!("write after freeing space failed: {e}"));
        more += 1;
    }
    drop(c);
    db.close().unwrap();
    let db = Db::open(&data, opts).unwrap();
    for i in 0..acked + more {
        assert_eq!(
            db.get("c", &i.to_be_bytes()).unwrap().unwrap(),
            value(i),
            "write {i} missing after reopen"
        );
    }
    drop(db);
    let rep = basalt_engine::check(&data).unwrap();
    assert!(rep.is_ok(), "{:?}", rep.problems);
    println!(
        "{}: ENOSPC after {acked} writes; all readable; {more} more after freeing space",
        dir.display()
    );
}

#[test]
fn enospc_on_a_small_tmpfs_loses_nothing_and_recovers() {
    if !is_root() {
        println!("SKIP enospc_on_a_small_tmpfs: needs root to mount tmpfs");
        return;
    }
    let base = tempfile::tempdir().unwrap();
    let mnt = base.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=6m", "tmpfs"])
        .arg(&mnt)
        .status()
        .unwrap()
        .success();
    assert!(ok, "mount tmpfs failed although running as root");
    let _m = Mount(mnt.clone());
    run_until_full(&mnt, 2 << 20);
}

#[test]
fn enospc_on_loop_mounted_ext4_with_o_direct_loses_nothing_and_recovers() {
    if !is_root() {
        println!("SKIP enospc_on_loop_mounted_ext4: needs root for mount -o loop");
        return;
    }
    if Command::new("mkfs.ext4").arg("-V").output().is_err() {
        println!("SKIP enospc_on_loop_mounted_ext4: mkfs.ext4 not installed (e2fsprogs)");
        return;
    }
    let base = tempfile::tempdir().unwrap();
    let img = base.path().join("fs.img");
    let f = std::fs::File::create(&img).unwrap();
    f.set_len(24 << 20).unwrap();
    drop(f);
    assert!(Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .arg(&img)
        .status()
        .unwrap()
        .success());
    let mnt = base.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let st = Command::new("mount")
        .args(["-o", "loop"])
        .arg(&img)
        .arg(&mnt)
        .status()
        .unwrap();
    if !st.success() {
        println!("SKIP enospc_on_loop_mounted_ext4: loop devices unavailable here (mount -o loop failed)");
        return;
    }
    let _m = Mount(mnt.clone());
    let probe = Db::open(
        mnt.join("probe"),
        Options {
            segment_size: 512 << 10,
            ..Options::default()
        },
    )
    .unwrap();
    assert_eq!(
        probe.io_mode(),
        basalt_engine::IoMode::Direct,
        "ext4 must take O_DIRECT"
    );
    drop(probe);
    std::fs::remove_dir_all(mnt.join("probe")).unwrap();
    run_until_full(&mnt, 4 << 20);
}

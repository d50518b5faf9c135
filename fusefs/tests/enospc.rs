//! A full disk under the mount: the write or fsync that does not fit fails with
//! ENOSPC, files fsynced before stay intact, and the refused data is kept, so once
//! space is freed an fsync stores all of it (nothing acknowledged is lost).

mod common;

use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;

use basalt_fusefs::mount;
use common::{assert_bytes, mount_config, pattern};

struct Tmpfs(std::path::PathBuf);
impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Small segments, so the engine can use the last megabytes of the disk.
fn open_db(dir: &Path) -> basalt_engine::Db {
    let opts = basalt_engine::Options {
        segment_size: 4 << 20,
        durability: basalt_engine::Durability::NoSync,
        ..Default::default()
    };
    basalt_engine::Db::open(dir, opts).unwrap()
}

fn read_all(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

#[test]
fn a_full_disk_fails_with_enospc_and_the_refused_data_is_kept_until_space_is_freed() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let (disk, mp) = (tmp.path().join("disk"), tmp.path().join("mnt"));
    std::fs::create_dir_all(&disk).unwrap();
    std::fs::create_dir_all(&mp).unwrap();
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=40m", "tmpfs"])
        .arg(&disk)
        .status()
        .unwrap()
        .success();
    assert!(ok, "mount tmpfs failed although running as root");
    let _disk = Tmpfs(disk.clone());
    let ballast = disk.join("ballast");
    std::fs::write(&ballast, vec![0xAA; 30 << 20]).unwrap();

    let data = disk.join("data");
    let cfg = mount_config(&mp);
    let h = mount(open_db(&data), cfg.clone()).unwrap();
    std::fs::create_dir(mp.join("c")).unwrap();
    let small = pattern(1, 1 << 20);
    let mut f = std::fs::File::create(mp.join("c/small.bin")).unwrap();
    f.write_all(&small).unwrap();
    f.sync_all().unwrap();
    drop(f);

    // 20 MiB into the 9 MiB left: some write or the fsync must fail.
    let big = pattern(2, 20 << 20);
    let f = std::fs::File::create(mp.join("c/big.bin")).unwrap();
    let (mut refused, mut acked) = (None, 0);
    for (i, piece) in big.chunks(1 << 20).enumerate() {
        if let Err(e) = f.write_all_at(piece, (i << 20) as u64) {
            refused = Some(e);
            break;
        }
        acked = i + 1;
    }
    let refused = refused.or_else(|| f.sync_all().err());
    let refused = refused.expect("20 MiB fit into a 40 MiB tmpfs holding 30 MiB ballast");
    assert_eq!(refused.raw_os_error(), Some(libc::ENOSPC), "{refused}");
    assert_bytes(&read_all(&mp.join("c/small.bin")), &small, "fsynced file");

    // Synced 4 KiB writes into the fsynced file while the disk is full (each would be
    // a page patch): a refused one stays in the mount and is stored later.
    let mut small_now = small.clone();
    let g = std::fs::OpenOptions::new()
        .write(true)
        .open(mp.join("c/small.bin"))
        .unwrap();
    let mut pages_refused = 0;
    for i in 0..4usize {
        let (at, page) = (i * 65536 + 8192, pattern(10 + i as u64, 4096));
        g.write_all_at(&page, at as u64).unwrap();
        small_now[at..at + 4096].copy_from_slice(&page);
        if let Err(e) = g.sync_data() {
            assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
            pages_refused += 1;
        }
    }

    // Free space. Writes that were acknowledged are still in the mount; only those
    // the kernel refused are written again, then fsync stores everything.
    std::fs::remove_file(&ballast).unwrap();
    for (i, piece) in big.chunks(1 << 20).enumerate().skip(acked) {
        f.write_all_at(piece, (i << 20) as u64).unwrap();
    }
    // Writebacks the kernel started before the space was freed may still report
    // their ENOSPC to the first fsync (once each); the mount kept their data.
    let synced = (0..3).find_map(|_| f.sync_all().ok());
    assert!(
        synced.is_some(),
        "fsync keeps failing after space was freed"
    );
    drop(f);
    assert_bytes(
        &read_all(&mp.join("c/big.bin")),
        &big,
        "big file after fsync",
    );
    assert!(
        (0..3).any(|_| g.sync_data().is_ok()),
        "page writes not stored after space was freed"
    );
    drop(g);
    h.unmount().unwrap();

    let h = mount(open_db(&data), cfg).unwrap();
    assert_bytes(
        &read_all(&mp.join("c/small.bin")),
        &small_now,
        "small (with its page writes) after remount",
    );
    assert_bytes(&read_all(&mp.join("c/big.bin")), &big, "big after remount");
    h.unmount().unwrap();
    println!(
        "ENOSPC after {acked} acknowledged 1 MiB writes ({refused}); {pages_refused} of 4 \
         synced page writes refused; after freeing space both files intact across remount"
    );
}

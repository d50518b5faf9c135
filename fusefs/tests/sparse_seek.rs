//! `lseek(SEEK_DATA)` and `lseek(SEEK_HOLE)` on the mount: they name a sparse file's
//! data chunks and holes (also after a remount, from the stored chunks alone), an
//! inline file is all data, a file with a handle open for writing is answered all
//! data (the kernel may hold dirty pages the daemon has not seen), and a sparse-aware
//! `cp` of a sparse file copies its bytes exactly and leaves its holes unallocated.

mod common;

use std::os::unix::fs::MetadataExt;

use basalt_fusefs::mount;
use common::{
    assert_bytes, assert_sparse_map, mount_config, mounted_with_collection_c, open_db, seek,
    seek_settled, write_sparse_file,
};

#[test]
fn seek_data_and_seek_hole_name_the_chunks_that_hold_data_before_and_after_a_remount() {
    require_fuse!();
    let (tmp, mp, h) = mounted_with_collection_c();
    let data = tmp.path().join("data");
    let p = mp.join("c/sparse");
    let want = write_sparse_file(&p);
    let f = std::fs::File::open(&p).unwrap();
    assert_sparse_map(&f, "written through this mount");
    // An inline file (one record) is all data.
    std::fs::write(mp.join("c/small"), b"0123456789").unwrap();
    let s = std::fs::File::open(mp.join("c/small")).unwrap();
    assert_eq!(seek(&s, 3, libc::SEEK_DATA), Ok(3), "inline: data");
    assert_eq!(
        seek(&s, 3, libc::SEEK_HOLE),
        Ok(10),
        "inline: hole at the end"
    );
    assert_eq!(
        seek(&s, 10, libc::SEEK_DATA),
        Err(libc::ENXIO),
        "inline: at the end"
    );
    // A handle that can write is open: every offset before the known end is data.
    let w = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    assert_eq!(
        seek(&f, 2 << 20, libc::SEEK_DATA),
        Ok(2 << 20),
        "open for writing: data"
    );
    assert_eq!(
        seek(&f, 0, libc::SEEK_HOLE),
        Ok(3 << 20),
        "open for writing: hole at the end"
    );
    drop(w);
    // A sparse-aware copy to the local filesystem: the same bytes, holes left unwritten.
    let copy = tmp.path().join("copy");
    let st = std::process::Command::new("cp")
        .arg("--sparse=always")
        .arg(&p)
        .arg(&copy)
        .status()
        .unwrap();
    assert!(st.success(), "cp: {st}");
    assert_bytes(&std::fs::read(&copy).unwrap(), &want, "sparse copy");
    let blocks = std::fs::metadata(&copy).unwrap().blocks() * 512;
    assert!(
        blocks < 1 << 20,
        "the copy allocates {blocks} bytes of a 3 MiB file with 8 KiB of data"
    );
    drop(f);
    drop(s);
    h.unmount().unwrap();
    // Mounted again: the map comes from the stored chunks.
    let h = mount(open_db(&data), mount_config(&mp)).unwrap();
    let f = std::fs::File::open(&p).unwrap();
    assert_sparse_map(&f, "after a remount");
    assert_bytes(&std::fs::read(&p).unwrap(), &want, "after a remount");
    drop(f);
    h.unmount().unwrap();
}

#[test]
fn a_truncated_file_has_no_data_past_its_new_end() {
    require_fuse!();
    let (_tmp, mp, h) = mounted_with_collection_c();
    let p = mp.join("c/f");
    std::fs::write(&p, common::pattern(5, 1 << 20)).unwrap(); // chunks 0-15
    let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    f.set_len(100_000).unwrap(); // chunk 1 cut, chunks 2-15 gone
    f.set_len(2 << 20).unwrap(); // a hole from 100,000 on
    drop(f);
    let f = std::fs::File::open(&p).unwrap();
    assert_eq!(
        seek_settled(&f, 0, libc::SEEK_HOLE, Ok(128 << 10)),
        Ok(128 << 10),
        "data to the end of chunk 1"
    );
    assert_eq!(
        seek(&f, 200_000, libc::SEEK_DATA),
        Err(libc::ENXIO),
        "nothing past the cut"
    );
    drop(f);
    h.unmount().unwrap();
}

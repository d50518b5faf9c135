//! Set-user-ID and set-group-ID bits are cleared like on ext4 when a file is changed:
//! the filesystem does it itself (the kernel hands it over with
//! FUSE_HANDLE_KILLPRIV_V2). pjdfstest covers chown and open; this covers write,
//! truncate and fallocate by callers with and without CAP_FSETID.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use basalt_fusefs::mount;
use common::{mode, mount_config, open_db};

const NOBODY: u32 = 65534;

fn chmod(p: &Path, m: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    assert_eq!(mode(p), m);
}

/// Runs `sh -c script` with `$1` = `p` as user and group nobody (no capabilities).
fn as_nobody(script: &str, p: &Path) {
    let st = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("sh")
        .arg(p)
        .uid(NOBODY)
        .gid(NOBODY)
        .status()
        .unwrap();
    assert!(st.success(), "{script} as nobody: {st}");
}

#[test]
fn changing_a_file_clears_set_id_bits_unless_the_caller_has_cap_fsetid() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (data, mp) = (tmp.path().join("data"), tmp.path().join("mnt"));
    std::fs::create_dir_all(&mp).unwrap();
    let h = mount(open_db(&data), mount_config(&mp)).unwrap();
    std::fs::create_dir(mp.join("c")).unwrap();
    let f = mp.join("c/f");
    std::fs::write(&f, b"0123456789").unwrap();

    // Root (CAP_FSETID) keeps the bits when writing or truncating.
    chmod(&f, 0o6777);
    let mut w = std::fs::OpenOptions::new().append(true).open(&f).unwrap();
    std::io::Write::write_all(&mut w, b"root").unwrap();
    w.set_len(12).unwrap();
    drop(w);
    assert_eq!(mode(&f), 0o6777, "root write/truncate");

    // Without CAP_FSETID: write clears set-user-ID and (group executable) set-group-ID.
    as_nobody("printf x >> \"$1\"", &f);
    assert_eq!(mode(&f), 0o777, "write by nobody");
    chmod(&f, 0o6777);
    as_nobody("truncate -s 3 \"$1\"", &f);
    assert_eq!(mode(&f), 0o777, "truncate by nobody");
    chmod(&f, 0o6777);
    as_nobody("fallocate -l 8192 \"$1\"", &f);
    assert_eq!(mode(&f), 0o777, "fallocate by nobody");

    // Set-group-ID without group execute (mandatory locking mark) stays on write.
    chmod(&f, 0o6767);
    as_nobody("printf y >> \"$1\"", &f);
    assert_eq!(mode(&f), 0o2767, "write by nobody, no g+x");

    // The cleared bits are stored: they stay cleared after a remount.
    h.unmount().unwrap();
    let h = mount(open_db(&data), mount_config(&mp)).unwrap();
    assert_eq!(mode(&f), 0o2767);
    assert_eq!(std::fs::metadata(&f).unwrap().len(), 8193);
    h.unmount().unwrap();
}

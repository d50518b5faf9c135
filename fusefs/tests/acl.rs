//! POSIX ACLs on the mount behave as on ext4: the kernel enforces them (a named user
//! gets what its entry and the mask allow), the mode follows an access ACL and `chmod`
//! rewrites the ACL, an ACL that says no more than the mode is not stored, a
//! directory's default ACL is inherited by what is created in it and replaces the
//! umask, and all of it survives a remount.

mod common;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use basalt_fusefs::mount;
use common::{mode, mount_config, open_db, set_xattr};

const NOBODY: u32 = 65534;
const STRANGER: u32 = 65533;
const ACCESS: &str = "system.posix_acl_access";
const DEFAULT: &str = "system.posix_acl_default";
// ACL entry tags.
const USER_OBJ: u16 = 0x01;
const USER: u16 = 0x02;
const GROUP_OBJ: u16 = 0x04;
const MASK: u16 = 0x10;
const OTHER: u16 = 0x20;

/// The id of entries that name no one, as the kernel writes it.
const NO_ID: u32 = u32::MAX;

/// The kernel's xattr form of an ACL: version 2, then (tag, permissions, id) each.
fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// The value of xattr `name`, `None` when it has none (ENODATA).
fn get_xattr(p: &Path, name: &str) -> Option<Vec<u8>> {
    let n = CString::new(name).unwrap();
    let mut buf = vec![0u8; 4096];
    // SAFETY: valid C strings and a buffer of the given length.
    let r = unsafe {
        libc::getxattr(
            cpath(p).as_ptr(),
            n.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        assert_eq!(
            e.raw_os_error(),
            Some(libc::ENODATA),
            "getxattr {name}: {e}"
        );
        return None;
    }
    buf.truncate(r as usize);
    Some(buf)
}

/// Whether `sh -c script` with `$1` = `p` succeeds as user and group `uid`.
fn as_user(uid: u32, script: &str, p: &Path) -> bool {
    Command::new("sh")
        .args(["-c", script, "sh"])
        .arg(p)
        .uid(uid)
        .gid(uid)
        .status()
        .unwrap()
        .success()
}

const READ: &str = "cat \"$1\" > /dev/null 2>&1";
const WRITE: &str = "echo more >> \"$1\" 2>/dev/null";

/// The default ACL both tests give a directory: user nobody rwx, group r-x, mask rwx,
/// others nothing.
fn nobody_rwx_default() -> Vec<u8> {
    acl(&[
        (USER_OBJ, 7, NO_ID),
        (USER, 7, NOBODY),
        (GROUP_OBJ, 5, NO_ID),
        (MASK, 7, NO_ID),
        (OTHER, 0, NO_ID),
    ])
}

/// A data directory and a mount point under a temporary directory other users may
/// search (the tests run commands as them); the engine opened on the data.
fn searchable_data_and_mountpoint() -> (tempfile::TempDir, basalt_engine::Db, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), PermissionsExt::from_mode(0o755)).unwrap();
    let (data, mp) = (tmp.path().join("data"), tmp.path().join("mnt"));
    std::fs::create_dir_all(&mp).unwrap();
    let db = open_db(&data);
    (tmp, db, mp)
}

#[test]
fn posix_acls_are_enforced_follow_the_mode_and_are_inherited() {
    require_fuse!();
    let (_tmp, db, mp) = searchable_data_and_mountpoint();
    let h = mount(db.clone(), mount_config(&mp)).unwrap();
    let c = mp.join("c");
    std::fs::create_dir(&c).unwrap();
    std::fs::set_permissions(&c, PermissionsExt::from_mode(0o755)).unwrap();

    // A named user may read a 0600 file through its entry, within the mask.
    let f = c.join("f");
    std::fs::write(&f, b"secret").unwrap();
    std::fs::set_permissions(&f, PermissionsExt::from_mode(0o600)).unwrap();
    assert!(!as_user(NOBODY, READ, &f), "nobody reads a 0600 file");
    let named = acl(&[
        (USER_OBJ, 6, NO_ID),
        (USER, 4, NOBODY),
        (GROUP_OBJ, 0, NO_ID),
        (MASK, 4, NO_ID),
        (OTHER, 0, NO_ID),
    ]);
    set_xattr(&f, ACCESS, &named);
    assert_eq!(mode(&f), 0o640, "the group bits show the mask");
    assert_eq!(get_xattr(&f, ACCESS).unwrap(), named);
    assert!(as_user(NOBODY, READ, &f), "nobody reads through its entry");
    assert!(!as_user(NOBODY, WRITE, &f), "but may not write");
    assert!(!as_user(STRANGER, READ, &f), "another user may not read");

    // chmod rewrites the mask: nothing for the group class, so nothing for nobody.
    std::fs::set_permissions(&f, PermissionsExt::from_mode(0o600)).unwrap();
    let masked = acl(&[
        (USER_OBJ, 6, NO_ID),
        (USER, 4, NOBODY),
        (GROUP_OBJ, 0, NO_ID),
        (MASK, 0, NO_ID),
        (OTHER, 0, NO_ID),
    ]);
    assert_eq!(get_xattr(&f, ACCESS).unwrap(), masked);
    assert!(!as_user(NOBODY, READ, &f), "the mask now denies nobody");

    // An ACL that says no more than a mode is a mode.
    let g = c.join("g");
    std::fs::write(&g, b"g").unwrap();
    set_xattr(
        &g,
        ACCESS,
        &acl(&[
            (USER_OBJ, 7, NO_ID),
            (GROUP_OBJ, 5, NO_ID),
            (OTHER, 0, NO_ID),
        ]),
    );
    assert_eq!(mode(&g), 0o750);
    assert_eq!(get_xattr(&g, ACCESS), None, "a minimal ACL is not stored");

    // A default ACL: inherited, and the umask (077 here) does not apply.
    let d = c.join("d");
    std::fs::create_dir(&d).unwrap();
    let default = nobody_rwx_default();
    set_xattr(&d, DEFAULT, &default);
    let made = Command::new("sh")
        .args(["-c", "umask 077 && echo x > \"$1/new\" && mkdir \"$1/sub\" && mkdir \"$2/plain\" && echo y > \"$2/plain/f\"", "sh"])
        .arg(&d)
        .arg(&c)
        .status()
        .unwrap();
    assert!(made.success());
    let new = d.join("new");
    assert_eq!(
        mode(&new),
        0o660,
        "0666 within the default ACL, umask ignored"
    );
    assert_eq!(
        get_xattr(&new, ACCESS).unwrap(),
        acl(&[
            (USER_OBJ, 6, NO_ID),
            (USER, 7, NOBODY),
            (GROUP_OBJ, 5, NO_ID),
            (MASK, 6, NO_ID),
            (OTHER, 0, NO_ID)
        ])
    );
    assert!(
        as_user(NOBODY, WRITE, &new),
        "nobody writes through the inherited entry"
    );
    let sub = d.join("sub");
    assert_eq!(mode(&sub), 0o770);
    assert_eq!(
        get_xattr(&sub, DEFAULT).unwrap(),
        default,
        "a directory inherits the default ACL"
    );
    assert!(get_xattr(&sub, ACCESS).is_some());
    assert_eq!(get_xattr(&new, DEFAULT), None, "a file has no default ACL");
    // Without a default ACL the umask applies.
    assert_eq!(mode(&c.join("plain")), 0o700);
    assert_eq!(mode(&c.join("plain/f")), 0o600);
    assert_eq!(get_xattr(&c.join("plain/f"), ACCESS), None);
    h.unmount().unwrap();

    let h = mount(db.clone(), mount_config(&mp)).unwrap();
    assert_eq!(get_xattr(&f, ACCESS).unwrap(), masked);
    assert_eq!(mode(&f), 0o600);
    assert_eq!(get_xattr(&sub, DEFAULT).unwrap(), default);
    assert_eq!(mode(&new), 0o660);
    assert!(as_user(NOBODY, READ, &new), "enforced after a remount");
    assert!(!as_user(STRANGER, READ, &new));
    h.unmount().unwrap();
}

/// Documents written through the engine API into a directory with a default ACL, and
/// the directories their paths imply, get what root creating them there through the
/// mount would: the ACL within the modes 0644 and 0755, the default ACL on the
/// directories, and the group of a set-group-ID directory; the same for documents
/// written while unmounted, built from the engine's documents alone at mount.
/// Elsewhere they stay 0644.
#[test]
fn engine_api_documents_inherit_their_directorys_default_acl() {
    require_fuse!();
    let (_tmp, db, mp) = searchable_data_and_mountpoint();
    let h = mount(db.clone(), mount_config(&mp)).unwrap();
    let c = mp.join("c");
    let d = c.join("d");
    std::fs::create_dir_all(&d).unwrap();
    let default = nobody_rwx_default();
    set_xattr(&d, DEFAULT, &default);
    std::os::unix::fs::chown(&d, None, Some(NOBODY)).unwrap();
    std::fs::set_permissions(&d, PermissionsExt::from_mode(0o2775)).unwrap();
    db.put("c", b"d/doc", b"by the engine").unwrap();
    db.put("c", b"d/implied/deep", b"deeper").unwrap();
    db.put("c", b"plain", b"no default ACL here").unwrap();

    // `doc`, in directory `dir` with `deep` inside, written through the engine API.
    let check = |doc: &str, dir: &str, deep: &[u8]| {
        let doc = d.join(doc);
        // Taken in at the next request (this lookup), within the flush interval at most.
        let t0 = std::time::Instant::now();
        while !doc.exists() {
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(10),
                "doc never appeared"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(mode(&doc), 0o640, "0644 within the default ACL");
        assert_eq!(
            get_xattr(&doc, ACCESS).unwrap(),
            acl(&[
                (USER_OBJ, 6, NO_ID),
                (USER, 7, NOBODY),
                (GROUP_OBJ, 5, NO_ID),
                (MASK, 4, NO_ID),
                (OTHER, 0, NO_ID)
            ])
        );
        assert_eq!(get_xattr(&doc, DEFAULT), None, "a file has no default ACL");
        let implied = d.join(dir);
        assert_eq!(
            mode(&implied),
            0o2750,
            "0755 within the ACL, set-group-ID kept"
        );
        assert_eq!(get_xattr(&implied, DEFAULT).unwrap(), default);
        for p in [&doc, &implied, &implied.join("deep")] {
            use std::os::unix::fs::MetadataExt;
            assert_eq!(std::fs::metadata(p).unwrap().gid(), NOBODY, "{p:?}");
        }
        assert_eq!(std::fs::read(implied.join("deep")).unwrap(), deep);
        assert!(
            as_user(NOBODY, READ, &doc),
            "nobody reads through its entry"
        );
        assert!(
            !as_user(NOBODY, WRITE, &doc),
            "the mask (from 0644) denies writing"
        );
        assert!(!as_user(STRANGER, READ, &doc), "others get nothing");
        let plain = c.join("plain");
        assert_eq!(mode(&plain), 0o644);
        assert_eq!(get_xattr(&plain, ACCESS), None);
    };
    check("doc", "implied", b"deeper");
    h.unmount().unwrap();
    // Written while unmounted: built from the documents alone at the next mount.
    db.put("c", b"d/offline", b"while unmounted").unwrap();
    db.put("c", b"d/offline-dir/deep", b"also").unwrap();
    let h = mount(db.clone(), mount_config(&mp)).unwrap();
    check("doc", "implied", b"deeper");
    check("offline", "offline-dir", b"also");
    h.unmount().unwrap();
}

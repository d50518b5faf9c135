//! POSIX ACLs. The mount negotiates FUSE_POSIX_ACL: the kernel enforces ACLs and caches
//! them, and hands this filesystem the duties ext4 does in its own code: ACLs are the
//! extended attributes `system.posix_acl_access` and `system.posix_acl_default` (the
//! kernel's xattr form: a version word, then tag, permissions and id per entry, little
//! endian), kept in step with the mode's permission bits both ways (setting an access
//! ACL sets the mode, one that says no more than the mode is not stored; `chmod`
//! rewrites the ACL's owner, group class and other entries), and inherited at creation
//! from the directory's default ACL, which then replaces the umask.

use crate::state::{Errno, Node};

/// Extended attribute of the access ACL.
pub const ACCESS: &[u8] = b"system.posix_acl_access";
/// Extended attribute of a directory's default ACL.
pub const DEFAULT: &[u8] = b"system.posix_acl_default";

const VERSION: u32 = 2;
const USER_OBJ: u16 = 0x01;
const USER: u16 = 0x02;
const GROUP_OBJ: u16 = 0x04;
const GROUP: u16 = 0x08;
const MASK: u16 = 0x10;
const OTHER: u16 = 0x20;

/// One ACL entry: tag, permissions (rwx, 0-7), user or group id for named entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    tag: u16,
    perm: u16,
    id: u32,
}

/// A decoded ACL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acl(Vec<Entry>);

fn einval() -> Errno {
    Errno(libc::EINVAL)
}

impl Acl {
    /// Decodes and checks the xattr form (one owner, owning group and other entry; a
    /// mask when there are named entries); EINVAL otherwise.
    pub fn decode(b: &[u8]) -> Result<Acl, Errno> {
        let (head, body) = b.split_at_checked(4).ok_or_else(einval)?;
        if u32::from_le_bytes(head.try_into().map_err(|_| einval())?) != VERSION
            || body.len() % 8 != 0
        {
            return Err(einval());
        }
        let entries: Vec<Entry> = body
            .chunks_exact(8)
            .map(|e| Entry {
                tag: u16::from_le_bytes([e[0], e[1]]),
                perm: u16::from_le_bytes([e[2], e[3]]),
                id: u32::from_le_bytes([e[4], e[5], e[6], e[7]]),
            })
            .collect();
        let count = |t: u16| entries.iter().filter(|e| e.tag == t).count();
        let named = count(USER) + count(GROUP);
        let known = [USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER];
        if entries
            .iter()
            .any(|e| e.perm > 7 || !known.contains(&e.tag))
            || count(USER_OBJ) != 1
            || count(GROUP_OBJ) != 1
            || count(OTHER) != 1
            || count(MASK) > 1
            || (named > 0 && count(MASK) == 0)
        {
            return Err(einval());
        }
        Ok(Acl(entries))
    }

    /// The xattr form.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = VERSION.to_le_bytes().to_vec();
        for e in &self.0 {
            out.extend_from_slice(&e.tag.to_le_bytes());
            out.extend_from_slice(&e.perm.to_le_bytes());
            out.extend_from_slice(&e.id.to_le_bytes());
        }
        out
    }

    /// Says no more than permission bits do (owner, owning group, other only).
    pub fn is_minimal(&self) -> bool {
        self.0.len() == 3
    }

    /// The entries the mode's three classes stand for, with the shift of each class's
    /// bits in the mode: the owner (6), the group class (3: the mask if there is one,
    /// else the owning group) and other (0).
    fn classes(&self) -> impl Iterator<Item = (usize, u16)> {
        let at = |tag| self.0.iter().position(|e| e.tag == tag);
        let group = at(MASK).or_else(|| at(GROUP_OBJ));
        [(at(USER_OBJ), 6), (group, 3), (at(OTHER), 0)]
            .into_iter()
            .filter_map(|(i, shift)| Some((i?, shift)))
    }

    /// Sets each class entry's permissions to `f(its permissions, the class's bits
    /// of perm)`.
    fn apply(&mut self, perm: u16, f: impl Fn(u16, u16) -> u16) {
        for (i, shift) in self.classes().collect::<Vec<_>>() {
            let e = &mut self.0[i];
            e.perm = f(e.perm, perm >> shift & 7);
        }
    }

    #[cfg(test)]
    fn entry(&mut self, tag: u16) -> Option<&mut Entry> {
        self.0.iter_mut().find(|e| e.tag == tag)
    }

    /// The permission bits (0o777) this ACL gives the mode.
    pub fn mode_bits(&self) -> u16 {
        self.classes()
            .fold(0, |bits, (i, shift)| bits | self.0[i].perm << shift)
    }

    /// Takes the owner, group class and other permissions from `perm` (a chmod).
    pub fn chmod(&mut self, perm: u16) {
        self.apply(perm, |_, new| new);
    }

    /// A new node's access ACL from its directory's default ACL and the mode it was
    /// created with: each class keeps only what both allow. Returns the mode's
    /// permission bits and the ACL.
    pub fn for_new(&self, perm: u16) -> (u16, Acl) {
        let mut a = self.clone();
        a.apply(perm, |old, asked| old & asked);
        (a.mode_bits(), a)
    }
}

/// Sets `n`'s access ACL from its xattr form: the mode takes its permission bits, and
/// the ACL is kept unless it says no more than they do (as ext4 does).
pub fn set_access(n: &mut Node, value: &[u8]) -> Result<(), Errno> {
    let acl = Acl::decode(value)?;
    n.perm = (n.perm & !0o777) | acl.mode_bits();
    if acl.is_minimal() {
        if let Some(x) = n.xattrs.existing() {
            x.remove(ACCESS);
        }
        n.xattrs.shrink();
    } else {
        n.xattrs.insert(ACCESS.to_vec(), acl.encode());
    }
    Ok(())
}

/// After `n`'s mode changed: its access ACL, if any, takes the new permission bits.
pub fn follow_chmod(n: &mut Node) {
    let perm = n.perm & 0o777;
    if let Some(mut acl) = n.xattrs.get(ACCESS).and_then(|v| Acl::decode(v).ok()) {
        acl.chmod(perm);
        n.xattrs.insert(ACCESS.to_vec(), acl.encode());
    }
}

/// Permission bits and ACLs of a node created in a directory with default ACL
/// `default` (xattr form) and requested permission bits `perm` (the umask does not
/// apply): returns the bits and sets the new node's ACLs (a directory also inherits
/// the default ACL).
pub fn inherit(default: &[u8], perm: u16, n: &mut Node) -> u16 {
    let Ok(acl) = Acl::decode(default) else {
        return perm;
    };
    let (bits, access) = acl.for_new(perm);
    if !access.is_minimal() {
        n.xattrs.insert(ACCESS.to_vec(), access.encode());
    }
    if n.is_dir() {
        n.xattrs.insert(DEFAULT.to_vec(), default.to_vec());
    }
    bits
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(entries: &[(u16, u16, u32)]) -> Acl {
        Acl(entries
            .iter()
            .map(|&(tag, perm, id)| Entry { tag, perm, id })
            .collect())
    }

    fn named() -> Acl {
        acl(&[
            (USER_OBJ, 6, 0),
            (USER, 4, 65534),
            (GROUP_OBJ, 4, 0),
            (MASK, 5, 0),
            (OTHER, 0, 0),
        ])
    }

    #[test]
    fn xattr_form_round_trips_and_bad_forms_are_einval() {
        let a = named();
        assert_eq!(Acl::decode(&a.encode()).unwrap(), a);
        let good = a.encode();
        let bad = |mut b: Vec<u8>, f: &dyn Fn(&mut Vec<u8>)| {
            f(&mut b);
            assert_eq!(Acl::decode(&b), Err(Errno(libc::EINVAL)));
        };
        bad(good.clone(), &|b| b[0] = 1); // version
        bad(good.clone(), &|b| b.truncate(b.len() - 1)); // torn entry
        bad(good.clone(), &|b| b[6] = 8); // permission bits
        bad(good.clone(), &|b| b.truncate(3));
        // A named entry without a mask; two owners.
        bad(
            acl(&[
                (USER_OBJ, 6, 0),
                (USER, 4, 1),
                (GROUP_OBJ, 4, 0),
                (OTHER, 0, 0),
            ])
            .encode(),
            &|_| {},
        );
        bad(
            acl(&[
                (USER_OBJ, 6, 0),
                (USER_OBJ, 4, 0),
                (GROUP_OBJ, 4, 0),
                (OTHER, 0, 0),
            ])
            .encode(),
            &|_| {},
        );
    }

    #[test]
    fn the_mask_stands_for_the_group_bits_when_there_is_one() {
        let mut a = named();
        assert_eq!(a.mode_bits(), 0o650);
        a.chmod(0o704);
        assert_eq!(a.mode_bits(), 0o704);
        assert_eq!(a.entry(GROUP_OBJ).unwrap().perm, 4, "owning group kept");
        assert_eq!(a.entry(USER).unwrap().perm, 4, "named user kept");
        let mut m = acl(&[(USER_OBJ, 7, 0), (GROUP_OBJ, 5, 0), (OTHER, 1, 0)]);
        assert!(m.is_minimal() && m.mode_bits() == 0o751);
        m.chmod(0o640);
        assert_eq!(m.mode_bits(), 0o640);
    }

    #[test]
    fn new_nodes_keep_what_both_the_default_acl_and_the_mode_allow() {
        let (bits, a) = named().for_new(0o666);
        assert_eq!(bits, 0o640);
        assert!(!a.is_minimal());
        let (bits, a) = acl(&[(USER_OBJ, 7, 0), (GROUP_OBJ, 7, 0), (OTHER, 7, 0)]).for_new(0o751);
        assert_eq!(bits, 0o751);
        assert!(a.is_minimal());
    }
}

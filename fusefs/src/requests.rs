//! Counts of the FUSE requests the kernel sent, by operation, shown in
//! `/.basalt/stats.json` (`filesystem.requests`). They tell how many round trips a
//! workload costs, which is what bounds metadata-heavy work on FUSE.

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! ops {
    ($($op:ident => $name:literal,)*) => {
        /// A FUSE operation this filesystem serves.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Op { $($op,)* }

        impl Op {
            pub const ALL: &'static [Op] = &[$(Op::$op,)*];

            pub fn name(self) -> &'static str {
                match self { $(Op::$op => $name,)* }
            }
        }
    };
}

ops! {
    Lookup => "lookup",
    Forget => "forget",
    Getattr => "getattr",
    Setattr => "setattr",
    Readlink => "readlink",
    Mknod => "mknod",
    Mkdir => "mkdir",
    Unlink => "unlink",
    Rmdir => "rmdir",
    Symlink => "symlink",
    Rename => "rename",
    Link => "link",
    Open => "open",
    Read => "read",
    Write => "write",
    Flush => "flush",
    Release => "release",
    Fsync => "fsync",
    Opendir => "opendir",
    Readdir => "readdir",
    Readdirplus => "readdirplus",
    Releasedir => "releasedir",
    Fsyncdir => "fsyncdir",
    Statfs => "statfs",
    Setxattr => "setxattr",
    Getxattr => "getxattr",
    Listxattr => "listxattr",
    Removexattr => "removexattr",
    Access => "access",
    Create => "create",
    Fallocate => "fallocate",
    Lseek => "lseek",
}

/// One relaxed counter per operation.
pub struct Requests([AtomicU64; Op::ALL.len()]);

impl Default for Requests {
    fn default() -> Self {
        Requests(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

impl Requests {
    pub fn count(&self, op: Op) {
        self.0[op as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn get(&self, op: Op) -> u64 {
        self.0[op as usize].load(Ordering::Relaxed)
    }

    /// `{"lookup": n, ...}`, every operation present.
    pub fn to_json(&self) -> serde_json::Value {
        let m: serde_json::Map<String, serde_json::Value> = Op::ALL
            .iter()
            .map(|&op| (op.name().to_string(), self.get(op).into()))
            .collect();
        serde_json::Value::Object(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_operation_has_its_own_counter_and_name() {
        let r = Requests::default();
        r.count(Op::Flush);
        r.count(Op::Flush);
        r.count(Op::Fallocate);
        assert_eq!((r.get(Op::Flush), r.get(Op::Fallocate)), (2, 1));
        assert_eq!(r.get(Op::Lookup), 0);
        let j = r.to_json();
        assert_eq!(j.as_object().unwrap().len(), Op::ALL.len());
        assert_eq!(j["flush"], 2);
        assert_eq!(j["fallocate"], 1);
        let mut names: Vec<_> = Op::ALL.iter().map(|o| o.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Op::ALL.len());
    }
}

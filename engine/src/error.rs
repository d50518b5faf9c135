//! Engine errors: every variant says what went wrong and where.

use std::path::PathBuf;

/// Result alias used throughout the engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the engine.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An operating-system IO error on a named file.
    #[error("io error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The device or file system is full. Earlier data stays readable.
    #[error("no space left on device while writing {path}")]
    NoSpace { path: PathBuf },
    /// A checksum or structural check failed.
    #[error("corruption in {file} at offset {offset}: {detail}")]
    Corruption {
        file: PathBuf,
        offset: u64,
        detail: String,
    },
    /// A file was written by an incompatible format version.
    #[error(
        "{file}: format version {found} is not supported (this build reads version {supported})"
    )]
    FormatVersion {
        file: PathBuf,
        found: u32,
        supported: u32,
    },
    /// The data directory is already open in another process.
    #[error("data directory {path} is locked by another process ({holder})")]
    Locked { path: PathBuf, holder: String },
    /// Key longer than [`crate::MAX_KEY_LEN`].
    #[error("key of {len} bytes exceeds the limit of {max} bytes")]
    KeyTooLarge { len: usize, max: usize },
    /// Value longer than [`crate::MAX_VALUE_LEN`].
    #[error("value of {len} bytes exceeds the limit of {max} bytes")]
    ValueTooLarge { len: usize, max: usize },
    /// No collection of that name.
    #[error("unknown collection {0:?}")]
    UnknownCollection(String),
    /// A collection of that name exists already.
    #[error("collection {0:?} already exists")]
    CollectionExists(String),
    /// A collection name that cannot be stored.
    #[error("invalid collection name {name:?}: {reason}")]
    InvalidCollectionName { name: String, reason: &'static str },
    /// A bad option or argument.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The engine hit an unrecoverable write error earlier and refuses writes
    /// until reopened (reads still work).
    #[error("engine is read-only after an earlier write failure: {0}")]
    Poisoned(String),
}

impl Error {
    /// Wraps an `io::Error` on `path`, turning ENOSPC/EDQUOT into [`Error::NoSpace`].
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        let path = path.into();
        match source.raw_os_error() {
            Some(libc::ENOSPC) | Some(libc::EDQUOT) => Error::NoSpace { path },
            _ => Error::Io { path, source },
        }
    }

    /// A corruption error naming file and offset.
    pub fn corruption(file: impl Into<PathBuf>, offset: u64, detail: impl Into<String>) -> Self {
        Error::Corruption {
            file: file.into(),
            offset,
            detail: detail.into(),
        }
    }

    /// A record inside a verified block that does not decode: the block's file and
    /// offset, and the record's offset in the uncompressed payload.
    pub fn malformed_record(file: impl Into<PathBuf>, block_off: u64, at: usize) -> Self {
        Error::corruption(
            file,
            block_off,
            format!("record at payload offset {at} malformed"),
        )
    }

    /// The closest `errno` for this error (used by the FUSE layer).
    pub fn errno(&self) -> i32 {
        match self {
            Error::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            Error::NoSpace { .. } => libc::ENOSPC,
            Error::Corruption { .. } | Error::FormatVersion { .. } => libc::EIO,
            Error::Locked { .. } => libc::EBUSY,
            Error::KeyTooLarge { .. } => libc::ENAMETOOLONG,
            Error::ValueTooLarge { .. } => libc::EFBIG,
            Error::UnknownCollection(_) => libc::ENOENT,
            Error::CollectionExists(_) => libc::EEXIST,
            Error::InvalidCollectionName { .. } | Error::InvalidArgument(_) => libc::EINVAL,
            Error::Poisoned(_) => libc::EROFS,
        }
    }
}

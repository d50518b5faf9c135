//! Errors of the mount API and of the document helpers.

use std::path::PathBuf;

/// Everything that can go wrong when mounting, unmounting or streaming documents.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// An engine operation failed.
    #[error("engine error on {what}: {source}")]
    Engine {
        what: String,
        #[source]
        source: basalt_engine::Error,
    },
    /// Mounting failed (no /dev/fuse, mountpoint missing or busy, no permission...).
    #[error("cannot mount at {mountpoint}: {source}")]
    Mount {
        mountpoint: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The engine is mounted already by this process.
    #[error("the engine at {0} is already mounted by this process")]
    AlreadyMounted(PathBuf),
    /// Unmounting failed.
    #[error("cannot unmount {mountpoint}: {detail}")]
    Unmount { mountpoint: PathBuf, detail: String },
    /// An unknown or malformed `-o` option.
    #[error("invalid mount option {0:?}")]
    InvalidOption(String),
    /// A document does not exist.
    #[error("no document {key:?} in collection {collection:?}")]
    NotFound { collection: String, key: String },
    /// A document's metadata is inconsistent (manifest without inode record...).
    #[error("document {key:?} in collection {collection:?} is damaged: {detail}")]
    Damaged {
        collection: String,
        key: String,
        detail: String,
    },
    /// A key that cannot be a file path (empty component, NUL, leading `/`...).
    #[error("key {0:?} is not a valid file path")]
    InvalidKey(String),
    /// Reading the source of [`crate::write_document`] failed.
    #[error("reading input: {0}")]
    Input(#[source] std::io::Error),
}

impl FsError {
    pub(crate) fn engine(what: impl Into<String>, source: basalt_engine::Error) -> Self {
        FsError::Engine {
            what: what.into(),
            source,
        }
    }
}

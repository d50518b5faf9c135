//! Basalt FUSE filesystem.

//! Basalt bench.

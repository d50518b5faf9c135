//! Basalt monitoring.

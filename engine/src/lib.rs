//! Basalt storage engine.

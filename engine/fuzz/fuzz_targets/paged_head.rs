//! Fuzz target: the paged-block head parser and page-range check must return an
//! error, never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    basalt_engine::decoders::paged_head(data);
});

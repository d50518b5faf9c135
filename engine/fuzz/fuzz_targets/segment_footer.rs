//! Fuzz target: the segment footer decoder must return an error, never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    basalt_engine::decoders::segment_footer(data);
});

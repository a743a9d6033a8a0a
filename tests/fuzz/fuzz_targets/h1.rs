//! libFuzzer entry point of the `h1` target (see tests/fuzz/src/targets.rs).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tokenclock_fuzz::h1(data));

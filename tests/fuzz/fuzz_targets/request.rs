//! libFuzzer entry point of the `request` target (see tests/fuzz/src/targets.rs).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tokenclock_fuzz::request(data));

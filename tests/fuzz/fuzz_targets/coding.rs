//! libFuzzer entry point of the `coding` target (see tests/fuzz/src/targets.rs).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tokenclock_fuzz::coding(data));

//! A script of device lines, the pool's messages on each device's own channel, clock steps
//! and failovers against the translator's core in per-device mode (see
//! `translator::fuzz_support::per_device::translator_per_device`). Any panic is a bug.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    translator::fuzz_support::per_device::translator_per_device(data);
});

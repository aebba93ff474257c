//! A script of device lines, upstream messages, clock steps and failovers against the farm
//! proxy's core in aggregated mode, over an SV2 or an SV1 uplink (see
//! `translator::fuzz_support::translator_session`). Any panic is a bug.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    translator::fuzz_support::translator_session(data);
});

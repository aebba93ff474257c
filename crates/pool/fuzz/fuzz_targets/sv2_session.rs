//! A script of messages, clock steps and new work against one SV2 session (see
//! `pool::fuzz_support::sv2_session`). Any panic is a bug.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    pool::fuzz_support::sv2_session(data);
});

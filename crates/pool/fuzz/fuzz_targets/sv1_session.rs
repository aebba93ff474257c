//! A script of lines, clock steps, new work and writes against one SV1 session (see
//! `pool::fuzz_support::sv1_session`). Any panic is a bug.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    pool::fuzz_support::sv1_session(data);
});

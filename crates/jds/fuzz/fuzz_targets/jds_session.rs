//! A script of messages, clock steps, mempool changes and hang-ups against two JDS sessions
//! sharing one token issuer and mempool (see `jds::fuzz_support::jds_session`). Any panic is a
//! bug.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    jds::fuzz_support::jds_session(data);
});

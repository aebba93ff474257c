//! Arbitrary bytes through `submitblock`'s decoding and block checks, as received and repaired
//! (see `simnet::checks::fuzz`): any panic is a bug.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    simnet::checks::fuzz::submit(data);
});

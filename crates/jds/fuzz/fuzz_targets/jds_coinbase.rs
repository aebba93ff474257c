//! Bytes as a declared coinbase (prefix and suffix around the extranonce) through the JDS's
//! parser and what it feeds (see `jds::fuzz_support::jds_coinbase`). Any panic is a bug.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    jds::fuzz_support::jds_coinbase(data);
});

//! Hostile bytes into Noise connections (see `sv2::fuzz_support::frames`): raw bytes to either
//! side, corrupted handshakes, and scripted frames cut into arbitrary reads under a size limit,
//! optionally corrupted. Any panic is a bug.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sv2::fuzz_support::frames(data);
});

//! Arbitrary bytes, cut into random reads, through `LineBuffer`, `parse_line` and every typed
//! parser, checked against a model of the framing and against serde_json (see
//! `sv1::fuzz_support`): any panic is a bug.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sv1::fuzz_support::line(data);
});

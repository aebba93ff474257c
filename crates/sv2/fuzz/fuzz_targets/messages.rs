//! A message type and payload through `sv2::messages::Message::decode`, checked against the
//! reference crates' own decoding (see `sv2::fuzz_support::messages`). Any panic is a bug.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sv2::fuzz_support::messages(data);
});

//! Arbitrary bytes, cut into reads at arbitrary points, through the ZMTP reader a subscriber's
//! connection is read with (see `simnet::zmq::zmtp::fuzz`): any panic is a bug.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    simnet::zmq::zmtp::fuzz::reader(data);
});

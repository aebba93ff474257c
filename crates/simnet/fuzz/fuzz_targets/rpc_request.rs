//! Arbitrary JSON-RPC bodies, raw or built from the input's choices, through the endpoint's
//! request parsing, argument conversion and methods (see `simnet::rpc::fuzz`): any panic is a
//! bug.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    simnet::rpc::fuzz::request(data);
});

//! A script of templates, transaction data, JDS and pool messages, shares, lost links, failed
//! sends, clock steps and rejoins against one JDC core (see `jdc::fuzz_support::jdc_core`).
//! Any panic is a bug.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    jdc::fuzz_support::jdc_core(data);
});

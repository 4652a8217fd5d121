//! TLS 1.3 records opened by ring's record opener and aws-lc's; see
//! `src/records.rs`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    mtls_sidecar_fuzz::records::check(data);
});

//! The SPIFFE agent's X509SVIDResponse bytes, decoded as the spiffe crate
//! decodes them, turned into a revision by
//! `credentials::workload::revision_from_context`; see `src/workload.rs`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    mtls_sidecar_fuzz::workload::check(data);
});

//! h2 header blocks followed and charged to a route's budget; see
//! `src/h2_blocks.rs`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    mtls_sidecar_fuzz::h2_blocks::check(data);
});

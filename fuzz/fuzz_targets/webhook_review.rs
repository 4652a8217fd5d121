//! The webhook's `/inject` body: any bytes through
//! `tools::webhook::review::review`; see `src/inject.rs`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    mtls_sidecar_fuzz::inject::check_review(data);
});

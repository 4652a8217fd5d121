//! `inject -f`'s input: any text through `tools::inject::run::transform`
//! (the YAML or JSON loader, then injection); see `src/inject.rs`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        mtls_sidecar_fuzz::inject::check_manifest(text);
    }
});

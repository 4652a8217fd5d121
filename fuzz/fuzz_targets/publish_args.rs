//! `publish`'s arguments: `--mode` and the `NAME=PATH` / `PATH` file
//! arguments, and publishing what they name into a scratch directory
//! (checked in `src/publish.rs`).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        mtls_sidecar_fuzz::publish::check(text);
    }
});

//! The deny-list parser (`credentials::deny::parse_deny`) on arbitrary
//! text: never a panic; every error names a line of the file; every
//! accepted list agrees with the reference in `src/deny.rs` (one entry per
//! entry line, serials and DNS names normalised as docs/deny.md says) and
//! its canonical lines parse back to the same entries.

#![no_main]

use libfuzzer_sys::fuzz_target;
use mtls_sidecar_fuzz::deny::check;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        check(text);
    }
});

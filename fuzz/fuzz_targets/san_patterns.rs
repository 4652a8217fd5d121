//! SAN, URI and SPIFFE patterns: the sidecar's parser and matcher against
//! the reference in `src/san.rs`. Input: the pattern on the first line,
//! then one SAN per line: `d` + a DNS SAN, `=` + a fill (the pattern with
//! each `*` replaced by the fill, as a DNS SAN and as a URI SAN, so that
//! near-misses are common), anything else a URI SAN. Both must agree on
//! which patterns are refused and on every match.

#![no_main]

use libfuzzer_sys::fuzz_target;
use mtls_sidecar_fuzz::san::check;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        check(text);
    }
});

//! The HTTP identity code (`proxy/http/`). The first byte picks the part:
//!
//! - `0`: the rest is a header name; `is_xfcc_name` against the
//!   reference rule (lowercase, `_` as `-`);
//! - `1`: the rest is lines, `b` + our URI SAN (`By=`), `s` + a subject
//!   CN, `u` + a URI SAN, `d` + a DNS SAN; the value `xfcc_value` builds
//!   is visible ASCII and reads, under the tests' plain RFC 9110
//!   quoted-string parser (`tests/common/rfc9110.rs`), as exactly
//!   one element with exactly the SANs given and the subject between
//!   `Subject`'s quotes unchanged, and the subject's `dn::escape_bytes`
//!   unescape to the CNs;
//! - `2`: the rest is a peer certificate's DER; `XfccParts::from_certs`
//!   never panics and its value reads the same way (one element, exactly
//!   the leaf's SANs, the subject unchanged);
//! - else: the second byte seeds the chunk splits and the third the
//!   limits; the rest is a client's HTTP/1.1 bytes, fed to the smuggling
//!   `Scanner` whole, in pseudo-random chunks and one byte at a time:
//!   the same verdicts each way, nothing after a refusal.

#![no_main]

use libfuzzer_sys::fuzz_target;
use mtls_sidecar_fuzz::xfcc_check::{check_cert, check_name, check_scanner, check_value};

fuzz_target!(|data: &[u8]| {
    match data.split_first() {
        Some((0, rest)) => check_name(rest),
        Some((1, rest)) => {
            if let Ok(text) = std::str::from_utf8(rest) {
                check_value(text);
            }
        }
        Some((2, rest)) => check_cert(rest),
        Some((_, rest)) => check_scanner(rest),
        None => {}
    }
});

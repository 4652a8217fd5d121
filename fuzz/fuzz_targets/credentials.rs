//! The credential loader: certificate, key, CA and CRL files built from
//! records (DER the target wraps in PEM, or raw bytes) through the same
//! parse and judge steps a reload runs. It must never panic; every error
//! must name one of the files; a file of PEM certificates must read back
//! exactly the DER that was wrapped; what parses must be self-consistent.

#![no_main]

use libfuzzer_sys::fuzz_target;
use mtls_sidecar_fuzz::credentials::check;

fuzz_target!(|data: &[u8]| check(data));

//! The admin HTTP request path: the input served as one connection with
//! the admin listener's HTTP settings and router (`src/admin.rs` reads the
//! answers back and checks them against the documented routes).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mtls_sidecar_fuzz::admin::check(data));

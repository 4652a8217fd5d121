//! The PROXY v2 header the sidecar writes to its target: a hand-off built
//! from the input, encoded by the sidecar (`ppp`), decoded by the strict
//! reference decoder in `src/proxy_v2.rs` (a mirror of
//! `tests/common/parse_proxy_v2.py`) and compared field by field.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mtls_sidecar_fuzz::proxy_check::check(data));

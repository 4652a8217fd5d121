//! The input of `check --secret` (a Kubernetes Secret as YAML or JSON)
//! read by `Secret::parse`; see `src/secret.rs`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    mtls_sidecar_fuzz::secret::check(data);
});

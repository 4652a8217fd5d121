//! The README's first command works: `mtls-sidecar demo` walks through the
//! product with no setup and exits 0 quickly, revocation step included.

use crate::common;

use std::time::{Duration, Instant};

#[test]
fn demo_runs_clean_and_fast() {
    let started = Instant::now();
    let (code, out) = common::run_bin(&["demo"]);
    let took = started.elapsed();
    assert_eq!(code, 0, "demo failed:\n{out}");
    for step in [
        "received \"PING from the controller\"",
        "refused during the handshake",
        "reason=\"unknown_ca\"} 1",
        "served to new handshakes",
        "the live connection never noticed",
        "its live connection was closed as revoked: \
         mtls_sidecar_connections_closed_total{route=\"replica\",reason=\"revoked\"} 1",
        "its new handshake was refused",
        "mtls_sidecar_tls_handshake_failures_total{route=\"replica\",reason=\"revoked\"} 1",
        "the controller's own connection is untouched",
        "mtls_sidecar_credential_reloads_total{result=\"applied\"} 2",
        "temporary directory is removed",
    ] {
        assert!(out.contains(step), "missing {step:?} in:\n{out}");
    }
    assert!(took < Duration::from_secs(10), "demo took {took:?}");
    let dir = out
        .split_whitespace()
        .find(|w| w.contains("mtls-sidecar-demo-"))
        .expect("temp dir named");
    assert!(!std::path::Path::new(dir).exists(), "{dir} left behind");
}

//! `mtls-sidecar health --path PATH` against the real binary: the whole
//! body, so `kubectl exec … -- mtls-sidecar health --path /status` is enough
//! to read the status document from a pod whose image has no shell or curl.

use crate::common;

use common::*;
use mtls_sidecar::pki::Role;

#[tokio::test(flavor = "multi_thread")]
async fn health_prints_the_whole_status_document_and_metrics_page() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("health CA");
    let dir = pki.dir(tmp.path(), "replica", &pki.leaf(REPLICA, Role::Server));
    let echo = echo_target().await;
    let sc = start_server(&dir, &echo.addr.to_string(), &["--admin", "127.0.0.1:0"]).await;
    let admin = sc.admin();

    let (code, out) = run_bin(&["health", "--admin", &admin, "--path", "/status"]);
    assert_eq!(code, 0, "{out}");
    let (status_line, body) = out.split_once('\n').expect("a status line, then the body");
    assert_eq!(status_line, "HTTP/1.1 200 OK");
    let doc: serde_json::Value = serde_json::from_str(body)
        .unwrap_or_else(|e| panic!("body is not the JSON document ({e}):\n{out}"));
    assert_eq!(doc["ready"], true);
    assert_eq!(doc["routes"][0]["name"], "server");
    assert_eq!(
        doc["credentials"][0]["identity"]["dns_sans"][0], REPLICA,
        "{doc:#}"
    );

    let (code, out) = run_bin(&["health", "--admin", &admin, "--path", "/metrics"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("HTTP/1.1 200 OK\n# "), "{out}");
    for name in [
        "mtls_sidecar_tls_handshakes_total",
        "mtls_sidecar_cert_not_after_timestamp_seconds",
        "mtls_sidecar_credential_reloads_total",
    ] {
        assert!(out.contains(name), "{name} missing from\n{out}");
    }

    // A one-line body stays on the status line, as HEALTHCHECK logs show it.
    let (code, out) = run_bin(&["health", "--admin", &admin]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out.trim_end(), "HTTP/1.1 200 OK: ready");
}

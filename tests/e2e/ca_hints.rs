//! A `server` route names no acceptable CAs in its CertificateRequest. Its
//! trust changes under it (rotation, grace, retirement), and a client that
//! picks its certificate by the names offered (Go's `crypto/tls`, OpenSSL's
//! `SSL_CTX_set_client_cert_cb` users) would send none when its issuer is
//! not among them; with no names every client sends its certificate.

use crate::common;

use std::sync::{Arc, Mutex};

use common::*;
use mtls_sidecar::pki::Role;
use rustls::client::ResolvesClientCert;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::PrivateKeyDer;
use rustls::sign::CertifiedKey;
use rustls::SignatureScheme;

/// A client identity that records the CA names each server offered.
#[derive(Debug)]
struct Recorder {
    key: Arc<CertifiedKey>,
    offered: Mutex<Vec<Vec<Vec<u8>>>>,
}

impl ResolvesClientCert for Recorder {
    fn resolve(&self, hints: &[&[u8]], _: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        if let Ok(mut o) = self.offered.lock() {
            o.push(hints.iter().map(|h| h.to_vec()).collect());
        }
        Some(self.key.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_server_names_no_acceptable_cas() {
    let creds = Creds::new();
    let echo = echo_target().await;
    let server = start_server(&creds.server_dir, &echo.addr.to_string(), &[]).await;
    let leaf = creds.pki.leaf(CONTROLLER, Role::Client);
    let key = PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap();
    let recorder = Arc::new(Recorder {
        key: Arc::new(
            CertifiedKey::from_der(vec![leaf.cert_der.clone()], key, &provider()).unwrap(),
        ),
        offered: Mutex::new(Vec::new()),
    });
    // The server's certificate is checked as usual; only the client's
    // identity comes from the recorder.
    let mut cfg = (*client_config(None, &creds.pki.ca.cert_pem)).clone();
    cfg.client_auth_cert_resolver = recorder.clone();
    let mut s = tls_connect(&server.addr("server"), REPLICA, Arc::new(cfg))
        .await
        .unwrap();
    assert_eq!(roundtrip(&mut s, b"admitted").await, b"admitted");
    let offered = recorder.offered.lock().unwrap().clone();
    assert_eq!(offered.len(), 1, "one CertificateRequest");
    assert!(offered[0].is_empty(), "CA names offered: {offered:?}");
}

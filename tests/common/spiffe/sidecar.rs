//! The sidecar side of the Workload API tests: a server sidecar on an
//! agent, its `/status` and metrics, and TLS peers holding SVIDs (which
//! carry no DNS name, so the test client checks the chain only).
#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use mtls_sidecar::pki::{DevCa, Issued};
use serde_json::Value;

use super::{Agent, Svid};
use crate::common::expo::Exposition;
use crate::common::{client_config, echo_target, get, refused, tls_connect, Sidecar, DEADLINE};

pub const SERVER_ID: &str = "spiffe://prod.test/ns/db/sa/replica";
pub const CLIENT_ID: &str = "spiffe://prod.test/ns/app/sa/controller";

/// A server sidecar on the agent's Workload API, admitting CLIENT_ID.
pub async fn server(agent: &Agent, extra: &[&str]) -> Sidecar {
    server_admitting(agent, &["--allow-san", CLIENT_ID], extra).await
}

/// A server sidecar on the agent's Workload API with this admission
/// policy (`--allow-san …` or `--allow-any-san`).
pub async fn server_admitting(agent: &Agent, policy: &[&str], extra: &[&str]) -> Sidecar {
    let echo = echo_target().await;
    let target = echo.addr.to_string();
    let endpoint = agent.endpoint();
    let mut args = vec![
        "server",
        "--listen",
        "127.0.0.1:0",
        "--target",
        &target,
        "--workload-api",
        &endpoint,
        "--admin",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(policy);
    args.extend_from_slice(extra);
    let sc = Sidecar::start(&args, 1).await;
    std::mem::forget(echo);
    sc
}

pub async fn status(sc: &Sidecar) -> Value {
    serde_json::from_str(&get(&sc.admin(), "/status").await.body).expect("status JSON")
}

pub async fn metric(sc: &Sidecar, name: &str) -> Option<f64> {
    let body = get(&sc.admin(), "/metrics").await.body;
    Exposition::parse(&body).ok()?.value(name, &[])
}

/// Waits until `/status` shows the identity serial `serial` in force.
pub async fn wait_serial(sc: &Sidecar, leaf: &Issued) -> Value {
    let serial = mtls_sidecar::identity::CertInfo::parse(&leaf.cert_der)
        .unwrap()
        .serial;
    let deadline = Instant::now() + DEADLINE;
    loop {
        let st = status(sc).await;
        if st["credentials"][0]["identity"]["serial"] == serial.as_str() {
            return st;
        }
        assert!(
            Instant::now() < deadline,
            "serial {serial} never in force: {st}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Connects to the server sidecar as `who`, trusting `ca`.
pub async fn connect_as(sc: &Sidecar, who: &Issued, ca: &DevCa) -> crate::common::ClientTls {
    let cfg = client_config(Some(who), &ca.cert_pem);
    // SVIDs carry no DNS name: the test client checks the CA only.
    tls_connect(&sc.addr("server"), "svid", no_name_check(cfg))
        .await
        .expect("TLS connect")
}

/// The client config with host-name checking off (SVIDs have URI SANs).
pub fn no_name_check(cfg: Arc<rustls::ClientConfig>) -> Arc<rustls::ClientConfig> {
    let mut cfg = (*cfg).clone();
    cfg.dangerous()
        .set_certificate_verifier(Arc::new(AnyServer));
    Arc::new(cfg)
}

#[derive(Debug)]
struct AnyServer;

impl rustls::client::danger::ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &rustls::pki_types::CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        signature(rustls::crypto::verify_tls12_signature, m, c, d)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &rustls::pki_types::CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        signature(rustls::crypto::verify_tls13_signature, m, c, d)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        crate::common::provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

type Verify = fn(
    &[u8],
    &rustls::pki_types::CertificateDer<'_>,
    &rustls::DigitallySignedStruct,
    &rustls::crypto::WebPkiSupportedAlgorithms,
) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error>;

/// The handshake signature, checked by rustls's own code.
fn signature(
    verify: Verify,
    m: &[u8],
    c: &rustls::pki_types::CertificateDer<'_>,
    d: &rustls::DigitallySignedStruct,
) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
    let p = crate::common::provider();
    verify(m, c, d, &p.signature_verification_algorithms)
}

pub async fn admitted(sc: &Sidecar, who: &Issued, ca: &DevCa) -> bool {
    let mut s = connect_as(sc, who, ca).await;
    !refused(&mut s).await
}

/// An agent in a temporary directory streaming one context: a first SVID
/// for SERVER_ID from the prod.test CA, and `federated` bundles.
pub struct Fixture {
    pub agent: Agent,
    pub svid: Svid,
    pub ca: DevCa,
    /// Last: the agent's sockets live here.
    pub tmp: tempfile::TempDir,
}

pub async fn fixture(federated: &[(&str, &DevCa)]) -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let ca = DevCa::new("prod.test CA", 30).unwrap();
    let agent = Agent::start(tmp.path(), true);
    let svid = Svid::new(&ca, SERVER_ID);
    agent.push(&[&svid], federated).await;
    Fixture {
        agent,
        svid,
        ca,
        tmp,
    }
}

/// A [`fixture`] and a server sidecar on it with `extra` flags, its first
/// SVID in force.
pub async fn running(extra: &[&str]) -> (Fixture, Sidecar) {
    let f = fixture(&[]).await;
    let sc = server(&f.agent, extra).await;
    wait_serial(&sc, &f.svid.leaf).await;
    (f, sc)
}

//! Identity is proven, not claimed, in both directions, through the real
//! binary: a peer presenting a certificate the sidecar trusts but signing
//! the handshake (CertificateVerify) with another key is refused and no
//! byte reaches the other side; a certificate whose subject CN is the
//! allowed name but whose SANs are not is refused (`bad_san`); and a
//! certificate without any extended key usage extension is accepted for
//! either usage (webpki reads a missing extension as "any usage";
//! docs/security.md, "Identity is the role SAN", says exactly that).
//!
//! The misbehaving peers are plain rustls: `CertifiedKey::new` pairs a
//! certificate with any signing key without checking that they match.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::*;
use mtls_sidecar::pki::{Issued, LeafSpec, Role};
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyUsagePurpose, SanType};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

const FAILURES: &str = "mtls_sidecar_tls_handshake_failures_total";
const MARKER: &[u8] = b"BYTES-THAT-MUST-NOT-ARRIVE";

/// `ident`'s certificate with the private key of `other`: what a thief of
/// the certificate alone can present.
fn stolen(ident: &Issued, other: &Issued) -> Arc<CertifiedKey> {
    let key = PrivateKeyDer::from_pem_slice(other.key_pem.as_bytes()).expect("key");
    let signer = provider()
        .key_provider
        .load_private_key(key)
        .expect("load key");
    Arc::new(CertifiedKey::new(vec![ident.cert_der.clone()], signer))
}

/// A client config presenting `key` (no consistency check), trusting `ca_pem`.
fn client_with(key: Arc<CertifiedKey>, ca_pem: &str) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.expect("CA")).expect("add CA");
    }
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_client_cert_resolver(Arc::new(SingleCertAndKey::from(key))),
    )
}

/// Waits until `reason` is counted `n` times on `route` of `sc`.
async fn counted(sc: &Sidecar, route: &str, reason: &str, n: f64) {
    let labels = [("route", route), ("reason", reason)];
    scrape_until(&sc.admin(), &format!("{reason} counted {n}"), |m| {
        m.value(FAILURES, &labels) == Some(n)
    })
    .await;
}

/// What a plain rustls server saw on its one connection.
struct Seen {
    handshake_ok: bool,
    plaintext: Vec<u8>,
}

/// One connection to a rustls server presenting `key` (requiring no client
/// certificate: what it may not do is prove a name it cannot sign for).
async fn impostor_server(key: Arc<CertifiedKey>) -> (String, JoinHandle<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(SingleCertAndKey::from(key)));
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let task = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.expect("accept");
        let Ok(mut tls) = acceptor.accept(tcp).await else {
            return Seen {
                handshake_ok: false,
                plaintext: Vec::new(),
            };
        };
        let mut got = Vec::new();
        let _ = tls.read_to_end(&mut got).await;
        Seen {
            handshake_ok: true,
            plaintext: got,
        }
    });
    (addr, task)
}

/// A client sidecar (the controller of `pki`, expecting the replica) in
/// front of a server presenting `key`: the app writes MARKER and
/// half-closes. Returns the sidecar, what the app got back and what the
/// server saw.
async fn client_route_against(pki: &Pki, key: Arc<CertifiedKey>) -> (Sidecar, Vec<u8>, Seen) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = pki.dir(
        tmp.path(),
        "controller",
        &pki.leaf(CONTROLLER, Role::Client),
    );
    let (target, server) = impostor_server(key).await;
    let client = start_client(&dir, &target, &["--admin", "127.0.0.1:0"]).await;
    let mut app = TcpStream::connect(client.addr("client"))
        .await
        .expect("connect");
    app.write_all(MARKER).await.expect("write");
    let _ = app.shutdown().await;
    let back = read_until_closed(&mut app).await;
    let seen = tokio::time::timeout(DEADLINE, server)
        .await
        .expect("server done in time")
        .expect("server task");
    (client, back, seen)
}

/// The server route's answer to a client presenting `key`: true when
/// admitted (MARKER echoed back).
async fn server_route_admits(srv: &ServerSide, key: Arc<CertifiedKey>) -> bool {
    let cfg = client_with(key, &srv.pki.ca.cert_pem);
    match tls_connect(&srv.addr, REPLICA, cfg).await {
        Ok(mut s) => !refused(&mut s).await,
        Err(_) => false,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn server_route_refuses_a_client_that_cannot_sign_for_its_certificate() {
    let srv = ServerSide::start(&["--admin", "127.0.0.1:0"]).await;
    // The allowed controller's certificate, signed for by another key of
    // the same CA (a key the sidecar would trust with its own certificate).
    let other = srv.pki.leaf("thief.env-1.svc", Role::Client);
    assert!(!server_route_admits(&srv, stolen(&srv.controller, &other)).await);
    let line = srv.sidecar.wait_log(&["handshake refused"]).await;
    assert!(line.contains(" WARN "), "{line}");
    counted(&srv.sidecar, "server", "unknown_ca", 1.0).await;
    assert_eq!(srv.echo.accepted(), 0, "a refused peer reached the target");

    // Control: the same certificate with its own key.
    let own = stolen(&srv.controller, &srv.controller);
    assert!(server_route_admits(&srv, own).await);
    assert_eq!(srv.echo.accepted(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn client_route_refuses_a_server_that_cannot_sign_for_its_certificate() {
    let pki = Pki::new("test CA");
    let replica = pki.leaf(REPLICA, Role::Server);
    let other = pki.leaf("thief.env-1.svc", Role::Server);
    let (client, back, seen) = client_route_against(&pki, stolen(&replica, &other)).await;
    assert!(back.is_empty(), "app got {back:?}");
    assert!(!seen.handshake_ok, "the impostor completed a handshake");
    assert!(
        seen.plaintext.is_empty(),
        "impostor read {:?}",
        seen.plaintext
    );
    client.wait_log(&["handshake refused"]).await;
    counted(&client, "client", "unknown_ca", 1.0).await;

    // Control: the same certificate with its own key.
    let (client, _, seen) = client_route_against(&pki, stolen(&replica, &replica)).await;
    assert!(seen.handshake_ok);
    assert_eq!(seen.plaintext, MARKER);
    assert!(client.warn_lines(&["handshake refused"]).is_empty());
}

/// A leaf of `pki` whose subject CN is `cn` and whose only SAN is
/// `san`.
fn cn_only(pki: &Pki, cn: &str, san: &str, role: Role) -> Issued {
    let mut spec = LeafSpec::dns(san, role, 1);
    spec.common_name = cn.to_string();
    pki.issue(&spec)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cn_naming_the_allowed_client_is_no_identity() {
    let srv = ServerSide::start(&["--admin", "127.0.0.1:0"]).await;
    let client_cn = cn_only(&srv.pki, CONTROLLER, "other.env-1.svc", Role::Client);
    let key = stolen(&client_cn, &client_cn);
    assert!(!server_route_admits(&srv, key).await);
    srv.sidecar
        .wait_field("handshake refused", "reason", "bad_san")
        .await;
    counted(&srv.sidecar, "server", "bad_san", 1.0).await;
    assert_eq!(srv.echo.accepted(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cn_naming_the_expected_server_is_no_identity() {
    let pki = Pki::new("test CA");
    let server_cn = cn_only(&pki, REPLICA, "other.env-1.svc", Role::Server);
    let key = stolen(&server_cn, &server_cn);
    let (client, back, seen) = client_route_against(&pki, key).await;
    assert!(back.is_empty(), "app got {back:?}");
    assert!(
        seen.plaintext.is_empty(),
        "server read {:?}",
        seen.plaintext
    );
    client
        .wait_field("handshake refused", "reason", "bad_san")
        .await;
    counted(&client, "client", "bad_san", 1.0).await;
}

/// A leaf of `pki` named `name` (CN and DNS SAN) without an extended key
/// usage extension.
fn without_eku(pki: &Pki, name: &str) -> Issued {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    params.distinguished_name = dn;
    params.subject_alt_names = vec![SanType::DnsName(name.try_into().expect("DNS name"))];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = Vec::new();
    params.use_authority_key_identifier_extension = true;
    let now = SystemTime::now();
    params.not_before = (now - Duration::from_secs(60)).into();
    params.not_after = (now + Duration::from_secs(86_400)).into();
    sign_by(&pki.ca, params)
}

#[tokio::test(flavor = "multi_thread")]
async fn certificates_without_an_eku_extension_are_accepted_for_either_usage() {
    let srv = ServerSide::start(&["--admin", "127.0.0.1:0"]).await;
    let client = without_eku(&srv.pki, CONTROLLER);
    let info = mtls_sidecar::identity::CertInfo::parse(&client.cert_der).expect("parse");
    assert!(info.client_auth && info.server_auth, "{info:?}");
    assert!(server_route_admits(&srv, stolen(&client, &client)).await);
    assert_eq!(srv.echo.accepted(), 1);

    let server = without_eku(&srv.pki, REPLICA);
    let (sc, _, seen) = client_route_against(&srv.pki, stolen(&server, &server)).await;
    assert!(seen.handshake_ok);
    assert_eq!(seen.plaintext, MARKER);
    assert!(sc.warn_lines(&["handshake refused"]).is_empty());
}

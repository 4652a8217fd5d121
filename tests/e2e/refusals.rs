//! Fail closed: what `server` and `client` refuse, that a refused peer never
//! reaches (or sees) the plaintext side, the one WARN line each refusal logs,
//! and `--exclusive` displacement only after authentication.

use crate::common;

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use common::*;
use mtls_sidecar::pki::{Issued, LeafSpec, Role};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

const DAY: Duration = Duration::from_secs(86_400);

fn expired_leaf(pki: &Pki, name: &str, role: Role) -> Issued {
    let now = SystemTime::now();
    pki.issue(&LeafSpec::dns(name, role, 30).valid(now - 10 * DAY, now - DAY))
}

/// Valid from tomorrow: issued ahead of a clock, or by a skewed issuer.
fn future_leaf(pki: &Pki, name: &str, role: Role) -> Issued {
    let now = SystemTime::now();
    pki.issue(&LeafSpec::dns(name, role, 30).valid(now + DAY, now + 10 * DAY))
}

/// After a refusal with `reason`: exactly one refusal was logged, at WARN,
/// with that reason (and, when `names` is given, the peer's subject and
/// SANs); the target never saw a connection, while a good client still gets
/// through (which also flushes any connection a buggy sidecar made early:
/// the echo accepts in order).
async fn assert_refused_once(srv: &ServerSide, reason: &str, names: Option<&str>) {
    let line = srv
        .sidecar
        .wait_field("handshake refused", "reason", reason)
        .await;
    assert!(line.contains(" WARN "), "not at WARN: {line}");
    assert!(line.contains("route=server"), "no route: {line}");
    assert!(line.contains("peer=127.0.0.1:"), "no peer address: {line}");
    if let Some(name) = names {
        assert!(
            line.contains(&format!("subject=CN={name}")),
            "no subject: {line}"
        );
        let sans = field(&line, "sans");
        assert!(sans.contains(name), "no SANs: {line}");
    }
    assert_eq!(srv.echo.accepted(), 0, "the target saw a refused peer");
    let mut good = srv.connect_good().await;
    assert_eq!(roundtrip(&mut good, b"good").await, b"good");
    assert_eq!(srv.echo.accepted(), 1, "the target saw a refused peer");
    let refusals = srv.sidecar.warn_lines(&["handshake refused"]);
    assert_eq!(refusals.len(), 1, "{refusals:#?}");
    assert_eq!(srv.sidecar.warn_reason(reason).len(), 1);
}

/// Connects with `ident`, expects the server to end the connection without
/// a byte of the target's, and returns nothing else.
async fn expect_refused(srv: &ServerSide, ident: Option<&Issued>, ca_pem: &str) {
    // In TLS 1.3 the client finishes first; a refused certificate shows up
    // as an alert or EOF on the first read. A failed connect is fine too.
    let cfg = client_config(ident, ca_pem);
    if let Ok(mut s) = tls_connect(&srv.addr, REPLICA, cfg).await {
        assert!(refused(&mut s).await, "server forwarded a refused peer");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn server_refuses_a_client_without_a_certificate() {
    let srv = ServerSide::start(&[]).await;
    expect_refused(&srv, None, &srv.pki.ca.cert_pem).await;
    assert_refused_once(&srv, "no_client_cert", None).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn server_refuses_a_certificate_from_a_foreign_ca() {
    let srv = ServerSide::start(&[]).await;
    let foreign = Pki::new("foreign CA");
    let impostor = foreign.leaf(CONTROLLER, Role::Client);
    expect_refused(&srv, Some(&impostor), &srv.pki.ca.cert_pem).await;
    assert_refused_once(&srv, "unknown_ca", Some(CONTROLLER)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn server_refuses_a_replica_certificate_presented_as_the_controller() {
    let srv = ServerSide::start(&[]).await;
    // Same CA, both usages granted: only the role SAN tells it apart.
    let replica = srv.pki.leaf(REPLICA, Role::Both);
    expect_refused(&srv, Some(&replica), &srv.pki.ca.cert_pem).await;
    assert_refused_once(&srv, "bad_san", Some(REPLICA)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn server_refuses_an_expired_client_certificate() {
    let srv = ServerSide::start(&[]).await;
    let expired = expired_leaf(&srv.pki, CONTROLLER, Role::Client);
    expect_refused(&srv, Some(&expired), &srv.pki.ca.cert_pem).await;
    assert_refused_once(&srv, "expired", Some(CONTROLLER)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn server_refuses_a_client_certificate_not_yet_valid() {
    let srv = ServerSide::start(&[]).await;
    let early = future_leaf(&srv.pki, CONTROLLER, Role::Client);
    expect_refused(&srv, Some(&early), &srv.pki.ca.cert_pem).await;
    assert_refused_once(&srv, "expired", Some(CONTROLLER)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn server_refuses_a_plaintext_probe() {
    let srv = ServerSide::start(&[]).await;
    let mut s = TcpStream::connect(&srv.addr).await.unwrap();
    s.write_all(b"PING plaintext probe\r\n").await.unwrap();
    let got = read_until_closed(&mut s).await;
    // At most a TLS alert record comes back, never the echo.
    assert!(
        got.is_empty() || got[0] == 0x15,
        "plaintext probe got {got:?}"
    );
    assert!(!got.windows(4).any(|w| w == b"PING"));
    assert_refused_once(&srv, "not_tls", None).await;
}

/// A TCP stream that records every raw byte read from it.
struct Recording {
    inner: TcpStream,
    raw: Arc<Mutex<Vec<u8>>>,
}

impl AsyncRead for Recording {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let res = Pin::new(&mut self.inner).poll_read(cx, buf);
        let new = &buf.filled()[before..];
        self.raw.lock().unwrap().extend_from_slice(new);
        res
    }
}

impl AsyncWrite for Recording {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// What a rustls test server saw on its one connection.
#[derive(Debug)]
struct Seen {
    /// Every byte on the wire from the client.
    raw: Vec<u8>,
    /// Whether the TLS handshake completed on the server's side.
    handshake_ok: bool,
    /// Every plaintext byte read after the handshake.
    plaintext: Vec<u8>,
}

/// A rustls server presenting `ident` and requiring a client certificate
/// from `client_ca`; it records everything its one connection delivers.
async fn recording_server(ident: &Issued, client_ca: &str) -> (String, JoinHandle<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let acceptor = tokio_rustls::TlsAcceptor::from(server_config(ident, Some(client_ca)));
    let task = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let raw = Arc::new(Mutex::new(Vec::new()));
        let rec = Recording {
            inner: tcp,
            raw: raw.clone(),
        };
        let (handshake_ok, plaintext) = match acceptor.accept(rec).await {
            Ok(mut tls) => {
                let mut got = Vec::new();
                let _ = tls.read_to_end(&mut got).await;
                (true, got)
            }
            Err(_) => (false, Vec::new()),
        };
        let raw = raw.lock().unwrap().clone();
        Seen {
            raw,
            handshake_ok,
            plaintext,
        }
    });
    (addr, task)
}

const MARKER: &[u8] = b"SECRET-PLAINTEXT-FROM-THE-CONTROLLER";

/// A client sidecar (identity CONTROLLER, expecting REPLICA) in front of a
/// recording server presenting `server_ident`. The local app writes MARKER
/// and half-closes; returns the sidecar, what the app got back and what the
/// server saw.
async fn client_against(pki: &Pki, server_ident: &Issued) -> (Sidecar, Vec<u8>, Seen) {
    let tmp = tempfile::tempdir().unwrap();
    let cd = pki.dir(
        tmp.path(),
        "controller",
        &pki.leaf(CONTROLLER, Role::Client),
    );
    let (target, server) = recording_server(server_ident, &pki.ca.cert_pem).await;
    let client = start_client(&cd, &target, &[]).await;
    let mut app = TcpStream::connect(client.addr("client")).await.unwrap();
    app.write_all(MARKER).await.unwrap();
    let _ = app.shutdown().await;
    let back = read_until_closed(&mut app).await;
    let seen = tokio::time::timeout(DEADLINE, server)
        .await
        .expect("test server done")
        .unwrap();
    (client, back, seen)
}

async fn assert_client_refuses(server_ident: Issued, pki: &Pki, reason: &str, names: &str) {
    let (client, back, seen) = client_against(pki, &server_ident).await;
    assert!(back.is_empty(), "app got {back:?}");
    assert!(!seen.handshake_ok, "server completed a handshake");
    assert!(
        seen.plaintext.is_empty(),
        "server read {:?}",
        seen.plaintext
    );
    assert!(
        !seen.raw.windows(MARKER.len()).any(|w| w == MARKER),
        "the plaintext went over the wire"
    );
    assert!(!seen.raw.is_empty(), "no ClientHello either");
    let line = client
        .wait_field("handshake refused", "reason", reason)
        .await;
    assert!(line.contains(" WARN "), "{line}");
    assert!(line.contains("route=client"), "{line}");
    assert!(line.contains(&format!("subject=CN={names}")), "{line}");
    assert!(field(&line, "sans").contains(names), "{line}");
    assert_eq!(client.warn_lines(&["handshake refused"]).len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn client_forwards_to_a_good_server() {
    // The control for the refusals below: the same harness sees the bytes.
    let pki = Pki::new("test CA");
    let good = pki.leaf(REPLICA, Role::Server);
    let (client, back, seen) = client_against(&pki, &good).await;
    assert!(seen.handshake_ok);
    assert_eq!(seen.plaintext, MARKER);
    assert!(back.is_empty());
    assert!(client.warn_lines(&["handshake refused"]).is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn client_refuses_a_server_certificate_with_the_wrong_san() {
    let pki = Pki::new("test CA");
    let other = pki.leaf("replica-1.env-1.svc", Role::Server);
    assert_client_refuses(other, &pki, "bad_san", "replica-1.env-1.svc").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn client_refuses_a_server_certificate_from_a_foreign_ca() {
    let pki = Pki::new("test CA");
    let foreign = Pki::new("foreign CA");
    let impostor = foreign.leaf(REPLICA, Role::Server);
    assert_client_refuses(impostor, &pki, "unknown_ca", REPLICA).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn client_refuses_an_expired_server_certificate() {
    let pki = Pki::new("test CA");
    let expired = expired_leaf(&pki, REPLICA, Role::Server);
    assert_client_refuses(expired, &pki, "expired", REPLICA).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn client_refuses_a_server_certificate_not_yet_valid() {
    let pki = Pki::new("test CA");
    let early = future_leaf(&pki, REPLICA, Role::Server);
    assert_client_refuses(early, &pki, "expired", REPLICA).await;
}

/// The incumbent still echoes.
async fn still_serving(s: &mut ClientTls, what: &str) {
    let msg = format!("incumbent after {what}");
    assert_eq!(
        roundtrip(s, msg.as_bytes()).await,
        msg.as_bytes(),
        "incumbent disturbed by {what}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn exclusive_authenticated_newcomer_displaces_the_incumbent() {
    let srv = ServerSide::start(&["--exclusive", "--admin", "127.0.0.1:0"]).await;
    let mut incumbent = srv.connect_good().await;
    assert_eq!(roundtrip(&mut incumbent, b"first").await, b"first");
    let mut newcomer = srv.connect_good().await;
    assert_eq!(roundtrip(&mut newcomer, b"second").await, b"second");

    let left = read_until_closed(&mut incumbent).await;
    assert!(left.is_empty(), "incumbent got {left:?}");
    assert_eq!(roundtrip(&mut newcomer, b"still").await, b"still");
    srv.sidecar
        .wait_log(&["displaces the incumbent", "route=server"])
        .await;
    srv.sidecar
        .wait_field("connection closed", "reason", "displaced")
        .await;
    srv.sidecar.wait_closed("server", "displaced", 1.0).await;
    assert_eq!(srv.echo.accepted(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn exclusive_unauthenticated_peers_do_not_disturb_the_incumbent() {
    // Long enough that no refusal below, however slow a loaded machine
    // makes it, turns into a timeout; short enough to wait out once.
    let srv = ServerSide::start(&["--exclusive", "--handshake-timeout", "5s"]).await;
    let mut incumbent = srv.connect_good().await;
    assert_eq!(roundtrip(&mut incumbent, b"first").await, b"first");

    // A peer without a certificate.
    expect_refused(&srv, None, &srv.pki.ca.cert_pem).await;
    srv.sidecar
        .wait_field("handshake refused", "reason", "no_client_cert")
        .await;
    still_serving(&mut incumbent, "a certless peer").await;

    // A peer from the right CA with the wrong role SAN.
    let replica = srv.pki.leaf(REPLICA, Role::Both);
    expect_refused(&srv, Some(&replica), &srv.pki.ca.cert_pem).await;
    srv.sidecar
        .wait_field("handshake refused", "reason", "bad_san")
        .await;
    still_serving(&mut incumbent, "a wrong-SAN peer").await;

    // A peer that connects and never sends a ClientHello: neither while it
    // stalls nor when its handshake times out.
    let mut stalled = TcpStream::connect(&srv.addr).await.unwrap();
    still_serving(&mut incumbent, "a stalled peer").await;
    assert!(read_until_closed(&mut stalled).await.is_empty());
    srv.sidecar
        .wait_field("handshake refused", "reason", "timeout")
        .await;
    still_serving(&mut incumbent, "a timed-out peer").await;

    assert_eq!(srv.sidecar.log_count("displaces the incumbent"), 0);
    assert_eq!(srv.echo.accepted(), 1);
}

/// A CA certificate under `parent` whose params `constrain` edits (a name
/// constraint, a path length), as a [`mtls_sidecar::pki::DevCa`]
/// that issues under it.
fn constrained_ca(
    parent: &mtls_sidecar::pki::DevCa,
    name: &str,
    constrain: impl FnOnce(&mut rcgen::CertificateParams),
) -> mtls_sidecar::pki::DevCa {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    params.use_authority_key_identifier_extension = true;
    constrain(&mut params);
    let issuer = rcgen::Issuer::from_ca_cert_pem(
        &parent.cert_pem,
        rcgen::KeyPair::from_pem(&parent.key_pem).expect("parent key"),
    )
    .expect("issuer");
    let cert = params.signed_by(&key, &issuer).expect("signed");
    mtls_sidecar::pki::DevCa::from_pem(&cert.pem(), &key.serialize_pem()).expect("CA")
}

/// A chain that breaks a constraint its CA sets (a name outside the
/// intermediate's permitted subtree; an intermediate below one whose path
/// length is 0) is refused and counted as `bad_chain`, not as `protocol`.
#[tokio::test(flavor = "multi_thread")]
async fn server_refuses_a_chain_breaking_a_ca_constraint_as_bad_chain() {
    for case in ["name constraint", "path length"] {
        let srv = ServerSide::start(&[]).await;
        let root = &srv.pki.ca;
        let (leaf, cas) = match case {
            "name constraint" => {
                let inter = constrained_ca(root, "constrained CA", |p| {
                    p.name_constraints = Some(rcgen::NameConstraints {
                        permitted_subtrees: vec![rcgen::GeneralSubtree::DnsName(
                            "allowed.test".into(),
                        )],
                        excluded_subtrees: Vec::new(),
                    });
                });
                let leaf = inter
                    .issue(&LeafSpec::dns(CONTROLLER, Role::Client, 30))
                    .expect("leaf");
                (leaf, vec![inter.cert_pem.clone()])
            }
            _ => {
                let top = constrained_ca(root, "path length 0 CA", |p| {
                    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
                });
                let below = constrained_ca(&top, "too deep CA", |_| {});
                let leaf = below
                    .issue(&LeafSpec::dns(CONTROLLER, Role::Client, 30))
                    .expect("leaf");
                (leaf, vec![below.cert_pem.clone(), top.cert_pem.clone()])
            }
        };
        let cas: Vec<&str> = cas.iter().map(String::as_str).collect();
        let cfg = chain_client_of(&leaf, &cas, &root.cert_pem);
        if let Ok(mut s) = tls_connect(&srv.addr, REPLICA, cfg).await {
            assert!(refused(&mut s).await, "{case}: forwarded");
        }
        assert_refused_once(&srv, "bad_chain", Some(CONTROLLER)).await;
    }
}

//! Extended key usage, both directions, through the real binary: a
//! certificate from the right CA with the right role SAN is still refused
//! (reason `bad_san`) when its usage is for the other side of the
//! connection: serverAuth-only presented as a client, clientAuth-only
//! presented as a server. Each refusal has a positive control that differs
//! only in the usage.
//!
//! The misused certificates are presented by plain rustls peers: a sidecar
//! refuses to start with an identity whose usage does not fit its own mode.

use crate::common;

use common::http;

use std::time::{Duration, Instant};

use common::*;
use mtls_sidecar::pki::{Issued, Role};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

const FAILURES: &str = "mtls_sidecar_tls_handshake_failures_total";
const MARKER: &[u8] = b"PLAINTEXT-FROM-THE-CONTROLLER";

async fn failures(sc: &Sidecar, route: &str, reason: &str) -> f64 {
    let a = http::request(&sc.admin(), "GET", "/metrics").await;
    assert_eq!(a.code, 200, "{}", a.body);
    let m = expo::Exposition::parse(&a.body).unwrap_or_else(|e| panic!("{e}\n{}", a.body));
    m.get(FAILURES, &[("route", route), ("reason", reason)])
}

/// Exactly one refusal on `route`, at WARN, reason `bad_san`, naming the
/// peer `name`; counted once on `/metrics`.
async fn assert_bad_san_once(sc: &Sidecar, route: &str, name: &str) {
    let line = sc
        .wait_field("handshake refused", "reason", "bad_san")
        .await;
    assert!(line.contains(" WARN "), "not at WARN: {line}");
    assert!(has_field(&line, "route", route), "{line}");
    assert!(line.contains(&format!("subject=CN={name}")), "{line}");
    let deadline = Instant::now() + DEADLINE;
    while failures(sc, route, "bad_san").await < 1.0 {
        assert!(Instant::now() < deadline, "bad_san never counted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(failures(sc, route, "bad_san").await, 1.0);
    let refusals = sc.warn_lines(&["handshake refused"]);
    assert_eq!(refusals.len(), 1, "{refusals:#?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn server_refuses_a_server_auth_only_client_certificate() {
    let srv = ServerSide::start(&["--admin", "127.0.0.1:0"]).await;
    let ca = srv.pki.ca.cert_pem.clone();
    // The allowed controller SAN, from the trusted CA, but for servers.
    let misused = srv.pki.leaf(CONTROLLER, Role::Server);
    if let Ok(mut s) = tls_connect(&srv.addr, REPLICA, client_config(Some(&misused), &ca)).await {
        assert!(
            refused(&mut s).await,
            "server forwarded a serverAuth-only client"
        );
    }
    assert_bad_san_once(&srv.sidecar, "server", CONTROLLER).await;
    assert_eq!(srv.echo.accepted(), 0, "the target saw a refused peer");

    // Control: the same name and CA, issued for clients.
    let right = srv.pki.leaf(CONTROLLER, Role::Client);
    let mut s = tls_connect(&srv.addr, REPLICA, client_config(Some(&right), &ca))
        .await
        .expect("controller handshake");
    assert_eq!(roundtrip(&mut s, b"control").await, b"control");
    assert_eq!(srv.echo.accepted(), 1);
    assert_eq!(srv.sidecar.warn_lines(&["handshake refused"]).len(), 1);
}

/// What a plain rustls server saw on its one connection.
struct Seen {
    handshake_ok: bool,
    plaintext: Vec<u8>,
}

/// A rustls server presenting `ident`, requiring a client certificate from
/// `ca_pem`, for one connection.
async fn rustls_server(ident: &Issued, ca_pem: &str) -> (String, JoinHandle<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let acceptor = tokio_rustls::TlsAcceptor::from(server_config(ident, Some(ca_pem)));
    let task = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        match acceptor.accept(tcp).await {
            Ok(mut tls) => {
                let mut got = Vec::new();
                let _ = tls.read_to_end(&mut got).await;
                Seen {
                    handshake_ok: true,
                    plaintext: got,
                }
            }
            Err(_) => Seen {
                handshake_ok: false,
                plaintext: Vec::new(),
            },
        }
    });
    (addr, task)
}

/// A client sidecar (controller, expecting the replica) in front of a
/// rustls server presenting `server_ident`: the app writes MARKER and
/// half-closes. Returns the sidecar, what the app got back and what the
/// server saw.
async fn client_against(pki: &Pki, server_ident: &Issued) -> (Sidecar, Vec<u8>, Seen) {
    let tmp = tempfile::tempdir().unwrap();
    let cd = pki.dir(
        tmp.path(),
        "controller",
        &pki.leaf(CONTROLLER, Role::Client),
    );
    let (target, server) = rustls_server(server_ident, &pki.ca.cert_pem).await;
    let client = start_client(&cd, &target, &["--admin", "127.0.0.1:0"]).await;
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

#[tokio::test(flavor = "multi_thread")]
async fn client_refuses_a_client_auth_only_server_certificate() {
    let pki = Pki::new("test CA");
    // The expected replica SAN, from the trusted CA, but for clients.
    let misused = pki.leaf(REPLICA, Role::Client);
    let (client, back, seen) = client_against(&pki, &misused).await;
    assert!(back.is_empty(), "app got {back:?}");
    assert!(!seen.handshake_ok, "server completed a handshake");
    assert!(
        seen.plaintext.is_empty(),
        "server read {:?}",
        seen.plaintext
    );
    assert_bad_san_once(&client, "client", REPLICA).await;

    // Control: the same name and CA, issued for servers.
    let right = pki.leaf(REPLICA, Role::Server);
    let (client, back, seen) = client_against(&pki, &right).await;
    assert!(seen.handshake_ok);
    assert_eq!(seen.plaintext, MARKER);
    assert!(back.is_empty());
    assert!(client.warn_lines(&["handshake refused"]).is_empty());
    assert_eq!(failures(&client, "client", "bad_san").await, 0.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn both_usages_pass_in_both_directions() {
    // A certificate granted both usages is accepted on either side: the
    // usage check does not stand in for the role SAN check (see refusals.rs
    // for a both-usage replica refused as the controller).
    let srv = ServerSide::start(&["--admin", "127.0.0.1:0"]).await;
    let both = srv.pki.leaf(CONTROLLER, Role::Both);
    let ca = srv.pki.ca.cert_pem.clone();
    let mut s = tls_connect(&srv.addr, REPLICA, client_config(Some(&both), &ca))
        .await
        .expect("controller handshake");
    assert_eq!(roundtrip(&mut s, b"both").await, b"both");

    let pki = Pki::new("test CA");
    let (_client, _back, seen) = client_against(&pki, &pki.leaf(REPLICA, Role::Both)).await;
    assert!(seen.handshake_ok);
    assert_eq!(seen.plaintext, MARKER);
}

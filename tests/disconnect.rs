//! How connections end: a plaintext EOF becomes a TLS close_notify, and a
//! TLS peer that vanishes without close_notify is an ordinary disconnect.

mod common;

use common::*;
use mtls_sidecar::pki::Role;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A server sidecar in front of a target that answers one line then closes.
async fn setup() -> (
    tempfile::TempDir,
    Pki,
    Sidecar,
    tokio::task::JoinHandle<Vec<u8>>,
) {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("CA");
    let dir = pki.dir(tmp.path(), "replica", &pki.leaf(REPLICA, Role::Server));
    let target = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let taddr = target.local_addr().unwrap().to_string();
    let seen = tokio::spawn(async move {
        let (mut s, _) = target.accept().await.unwrap();
        let mut got = Vec::new();
        // Read to EOF: the sidecar must deliver the peer's end as a FIN.
        s.read_to_end(&mut got).await.unwrap();
        s.write_all(b"bye\n").await.unwrap();
        got
    });
    let sc = start_server(&dir, &taddr, &[]).await;
    (tmp, pki, sc, seen)
}

#[tokio::test(flavor = "multi_thread")]
async fn target_eof_reaches_the_tls_peer_as_close_notify() {
    let (_tmp, pki, sc, seen) = setup().await;
    let cfg = client_config(Some(&pki.leaf(CONTROLLER, Role::Client)), &pki.ca.cert_pem);
    let mut tls = tls_connect(&sc.addr("server"), REPLICA, cfg).await.unwrap();
    tls.write_all(b"request").await.unwrap();
    tls.shutdown().await.unwrap(); // our close_notify → the target's EOF
    let mut reply = Vec::new();
    // rustls reports a close without close_notify as UnexpectedEof; a clean
    // read_to_end proves the sidecar sent one after the target's FIN.
    tokio::time::timeout(DEADLINE, tls.read_to_end(&mut reply))
        .await
        .unwrap()
        .expect("clean TLS close");
    assert_eq!(reply, b"bye\n");
    assert_eq!(seen.await.unwrap(), b"request");
    sc.wait_log(&["connection closed", "to_target=7", "from_target=4"])
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_peer_vanishing_without_close_notify_is_a_normal_disconnect() {
    let (_tmp, pki, sc, seen) = setup().await;
    let cfg = client_config(Some(&pki.leaf(CONTROLLER, Role::Client)), &pki.ca.cert_pem);
    let mut tls = tls_connect(&sc.addr("server"), REPLICA, cfg).await.unwrap();
    tls.write_all(b"request").await.unwrap();
    tls.flush().await.unwrap();
    // Close the TCP socket's write side with no close_notify.
    let (mut tcp, _) = tls.into_inner();
    tcp.shutdown().await.unwrap();
    assert_eq!(
        seen.await.unwrap(),
        b"request",
        "the target got the data and a FIN"
    );
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(DEADLINE, tcp.read_to_end(&mut rest))
        .await
        .unwrap();
    let line = sc.wait_log(&["connection closed"]).await;
    assert!(!line.contains("peer_error"), "not an error: {line}");
    assert_eq!(sc.log_count("ERROR"), 0);
}

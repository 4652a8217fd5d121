//! How connections end: a plaintext EOF becomes a TLS close_notify, and a
//! TLS peer that vanishes without close_notify is an ordinary disconnect
//! (logged and counted as one).

use crate::common;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A server sidecar (with an admin endpoint) in front of a target that
/// answers one line then closes.
async fn setup() -> (Creds, Sidecar, tokio::task::JoinHandle<Vec<u8>>) {
    let creds = Creds::new();
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
    let sc = start_server(&creds.server_dir, &taddr, &["--admin", "127.0.0.1:0"]).await;
    (creds, sc, seen)
}

#[tokio::test(flavor = "multi_thread")]
async fn target_eof_reaches_the_tls_peer_as_close_notify() {
    let (creds, sc, seen) = setup().await;
    let cfg = client_config(Some(&creds.controller), &creds.pki.ca.cert_pem);
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
    let (creds, sc, seen) = setup().await;
    let cfg = client_config(Some(&creds.controller), &creds.pki.ca.cert_pem);
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
    // An ordinary end carries no close reason in the log, and is counted
    // as `completed`, not as a failure.
    assert!(!line.contains("reason="), "not an ordinary end: {line}");
    let m = sc.wait_closed("server", "completed", 1.0).await;
    assert_eq!(
        m.get(CLOSED, &[("route", "server"), ("reason", "peer_error")]),
        0.0
    );
    assert_eq!(sc.log_count("ERROR"), 0);
    assert!(sc.warn_lines(&[]).is_empty(), "{:#?}", sc.logs());
}

/// A target that half-closes reaches a TLS peer of the server sidecar as
/// close_notify *and* a TCP FIN, while the other direction stays open:
/// after the TLS EOF the raw socket reads EOF too, and what the peer sends
/// next still reaches the target. (Without the FIN a peer that waits for
/// the socket's end, as TLS stacks that ignore close_notify do, would hang.)
#[tokio::test(flavor = "multi_thread")]
async fn target_half_close_reaches_the_tls_peer_as_close_notify_then_fin() {
    let creds = Creds::new();
    let (taddr, seen) = banner_then_listen().await;
    let sc = start_server(&creds.server_dir, &taddr, &[]).await;
    let cfg = client_config(Some(&creds.controller), &creds.pki.ca.cert_pem);
    let mut tls = tls_connect(&sc.addr("server"), REPLICA, cfg).await.unwrap();
    let mut banner = Vec::new();
    tokio::time::timeout(DEADLINE, tls.read_to_end(&mut banner))
        .await
        .unwrap()
        .expect("clean TLS close");
    assert_eq!(banner, b"banner");
    // The TCP stream under it has ended too (FIN), not only the TLS one.
    let mut byte = [0u8; 1];
    let raw = tokio::time::timeout(DEADLINE, tls.get_mut().0.read(&mut byte))
        .await
        .expect("a FIN after close_notify")
        .unwrap();
    assert_eq!(raw, 0, "bytes after close_notify");
    tls.write_all(b"after the banner").await.unwrap();
    tls.shutdown().await.unwrap();
    let got = tokio::time::timeout(DEADLINE, seen).await.unwrap().unwrap();
    assert_eq!(got, b"after the banner");
}

//! Where routes listen and connect: `unix:` sockets on every hop (listen
//! and target, both sidecars), a stale socket file replaced and any other
//! file refused, and targets that cannot be reached: refused at once, or
//! silent until `--connect-timeout`, each counted as a connect failure and
//! closed as `target_error`.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use tokio::io::AsyncWriteExt;
use tokio::net::{UnixListener, UnixStream};

const CONNECT_FAILURES: &str = "mtls_sidecar_target_connect_failures_total";

fn unix(path: &Path) -> String {
    format!("unix:{}", path.display())
}

/// An echo server on a Unix socket; counts what it accepted.
fn unix_echo(path: &Path) -> std::sync::Arc<std::sync::atomic::AtomicUsize> {
    let listener = UnixListener::bind(path).unwrap();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                let (mut r, mut w) = tokio::io::split(s);
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
    });
    accepted
}

#[tokio::test(flavor = "multi_thread")]
async fn unix_sockets_on_every_hop() {
    let creds = Creds::new();
    let dir = creds.tmp.path();
    let (app_sock, tls_sock, echo_sock) = (
        dir.join("app.sock"),
        dir.join("tls.sock"),
        dir.join("echo.sock"),
    );
    let echoed = unix_echo(&echo_sock);
    // A socket file left behind by an earlier run is replaced.
    drop(std::os::unix::net::UnixListener::bind(&tls_sock).unwrap());
    assert!(UnixStream::connect(&tls_sock).await.is_err(), "stale");

    let server = Sidecar::start(
        &[
            "server",
            "--listen",
            &unix(&tls_sock),
            "--target",
            &unix(&echo_sock),
            "--tls-dir",
            creds.server_dir.to_str().unwrap(),
            "--allow-san",
            CONTROLLER,
        ],
        1,
    )
    .await;
    assert_eq!(server.addr("server"), unix(&tls_sock));
    // A unix target has no host to take the expected name from: given.
    let client = Sidecar::start(
        &[
            "client",
            "--listen",
            &unix(&app_sock),
            "--target",
            &unix(&tls_sock),
            "--server-name",
            REPLICA,
            "--tls-dir",
            creds.client_dir.to_str().unwrap(),
        ],
        1,
    )
    .await;
    assert_eq!(client.addr("client"), unix(&app_sock));

    let mut app = UnixStream::connect(&app_sock).await.unwrap();
    assert_eq!(
        roundtrip(&mut app, b"over three unix sockets").await,
        b"over three unix sockets"
    );
    assert_eq!(echoed.load(std::sync::atomic::Ordering::SeqCst), 1);
    // Mutual TLS all the same: the server checked the client's identity.
    server
        .wait_log(&["handshake complete", "peer=unix", "CN=controller.env-1.svc"])
        .await;
    // And nothing but TLS on the TLS socket: plaintext there is refused.
    let mut probe = UnixStream::connect(&tls_sock).await.unwrap();
    probe.write_all(b"PING plaintext\r\n").await.unwrap();
    let got = read_until_closed(&mut probe).await;
    assert!(!got.windows(4).any(|w| w == b"PING"), "{got:?}");
    server
        .wait_field("handshake refused", "reason", "not_tls")
        .await;
    assert_eq!(echoed.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[test]
fn a_listen_path_holding_another_file_is_refused_and_left_alone() {
    let creds = Creds::new();
    let path = creds.tmp.path().join("not-a-socket");
    std::fs::write(&path, "precious\n").unwrap();
    let out = run_bin_within(
        &[
            "server",
            "--listen",
            &unix(&path),
            "--target",
            "127.0.0.1:9",
            "--tls-dir",
            creds.server_dir.to_str().unwrap(),
            "--allow-san",
            CONTROLLER,
        ],
        DEADLINE,
    );
    let (code, text) = out.expect("the binary exits instead of listening");
    assert_eq!(code, 1, "{text}");
    assert!(text.contains(path.to_str().unwrap()), "{text}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "precious\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_silent_target_is_given_up_after_the_connect_timeout() {
    let creds = Creds::new();
    // The target accepts one connection (the control), then its backlog is
    // full and it drops every SYN: connecting to it hangs.
    let mut target = Backlogged::new(1);
    let sc = start_server(
        &creds.server_dir,
        &target.addr.to_string(),
        &["--connect-timeout", "1s", "--admin", "127.0.0.1:0"],
    )
    .await;
    let cfg = client_config(Some(&creds.controller), &creds.pki.ca.cert_pem);
    let addr = sc.addr("server");

    // Control: while the target accepts, a connection is forwarded.
    let mut first = tls_connect(&addr, REPLICA, cfg.clone()).await.unwrap();
    let echo = target.accepted().await;
    tokio::spawn(async move {
        let (mut r, mut w) = tokio::io::split(echo);
        let _ = tokio::io::copy(&mut r, &mut w).await;
    });
    assert_eq!(roundtrip(&mut first, b"reachable").await, b"reachable");

    target.fill();
    // Taken before the handshake: the sidecar starts connecting only after
    // it, so the close comes at least 1 s after this instant. (Taken after
    // `tls_connect` returned, it could be later than the sidecar's start
    // when this task is scheduled late: 998 ms under stress-ng.)
    let started = Instant::now();
    let mut second = tls_connect(&addr, REPLICA, cfg).await.unwrap();
    second.write_all(b"never delivered").await.unwrap();
    assert!(read_until_closed(&mut second).await.is_empty());
    let waited = started.elapsed();
    assert!(waited >= Duration::from_secs(1), "gave up after {waited:?}");
    let line = sc.wait_log(&["cannot connect to target"]).await;
    assert!(line.contains(" WARN "), "{line}");
    assert!(line.contains("timed out after 1s"), "{line}");
    let m = sc.wait_closed("server", "target_error", 1.0).await;
    assert_eq!(m.get(CONNECT_FAILURES, &[("route", "server")]), 1.0);
    // The control is still served.
    assert_eq!(roundtrip(&mut first, b"still").await, b"still");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_target_is_counted_at_once() {
    let creds = Creds::new();
    // A socket file nobody listens on: connecting is refused.
    let nobody = creds.tmp.path().join("nobody.sock");
    drop(std::os::unix::net::UnixListener::bind(&nobody).unwrap());
    let sc = start_server(
        &creds.server_dir,
        &unix(&nobody),
        &["--admin", "127.0.0.1:0"],
    )
    .await;
    let m = scrape(&sc.admin()).await;
    assert_eq!(m.get(CONNECT_FAILURES, &[("route", "server")]), 0.0);
    let mut s = tls_connect(
        &sc.addr("server"),
        REPLICA,
        client_config(Some(&creds.controller), &creds.pki.ca.cert_pem),
    )
    .await
    .unwrap();
    s.write_all(b"never delivered").await.unwrap();
    assert!(read_until_closed(&mut s).await.is_empty());
    let line = sc.wait_log(&["cannot connect to target"]).await;
    assert!(line.contains(&unix(&nobody)), "{line}");
    let m = sc.wait_closed("server", "target_error", 1.0).await;
    assert_eq!(m.get(CONNECT_FAILURES, &[("route", "server")]), 1.0);
    // The handshake itself succeeded: the failure is the target's.
    assert_eq!(
        m.get("mtls_sidecar_tls_handshakes_total", &[("route", "server")]),
        1.0
    );
}

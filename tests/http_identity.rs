//! `--http-identity xfcc` over HTTP/1.1 through the real binary, against a
//! real HTTP server (Python's http.server): every request on a keep-alive
//! connection reaches the target with exactly one x-forwarded-client-cert,
//! ours, whatever the client forged (any case, `_` for `-`, named in
//! `Connection`, or as a chunked trailer); smuggling shapes get 400 and
//! never reach the target; the header limits give 431.

mod common;
#[path = "http_identity/support.rs"]
mod support;

use common::*;
use support::*;

async fn route(extra: &[&str]) -> (Ids, PyTarget, Sidecar) {
    let ids = Ids::new();
    let target = PyTarget::start();
    let mut args = vec!["--http-identity", "xfcc"];
    args.extend_from_slice(extra);
    let sc = start_server(&ids.server_dir, &target.addr, &args).await;
    (ids, target, sc)
}

/// Checks that the target saw exactly our header and no such trailer;
/// what differs is added to `wrong` (every variant is checked before the
/// test fails, so a broken build shows all it lets through). Returns the
/// target-side port the request came from.
fn only_ours(r: &Resp, want: &str, what: &str, wrong: &mut Vec<String>) -> u64 {
    assert_eq!(r.status, 200, "{what}: {r:?}");
    let j = r.json();
    if j["xfcc"] != serde_json::json!([want]) || j["trailer_xfcc"] != serde_json::json!([]) {
        wrong.push(format!(
            "{what}: headers {} trailers {}",
            j["xfcc"], j["trailer_xfcc"]
        ));
    }
    j["port"].as_u64().unwrap()
}

#[tokio::test]
async fn every_request_on_a_keep_alive_connection_carries_only_our_identity() {
    if tools::skip_unless(&["python3"]) {
        return;
    }
    let (ids, _target, sc) = route(&[]).await;
    let want = ids.expected();
    let mut c = Raw::connect(&sc.addr("server"), ids.tls(&["http/1.1"])).await;
    let mut wrong = Vec::new();
    let mut ports = Vec::new();
    for (what, extra) in FORGED {
        c.send(
            format!(
                "GET /{} HTTP/1.1\r\nHost: t\r\n{extra}\r\n",
                what.replace(' ', "-")
            )
            .as_bytes(),
        )
        .await;
        ports.push(only_ours(&c.response().await, &want, what, &mut wrong));
    }
    // Chunked, the forged identity in the trailers (declared, so a proxy
    // that forwarded trailers would forward it) and in a header.
    c.send(
        b"POST /trailer HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\
          Trailer: X-Forwarded-Client-Cert, X_Forwarded_Client_Cert, X-Other\r\n\
          X-Forwarded-Client-Cert: Hash=00\r\n\r\n\
          5\r\nhello\r\n0\r\nX-Forwarded-Client-Cert: Hash=00\r\n\
          X_Forwarded_Client_Cert: Hash=01\r\nX-Other: kept\r\n\r\n",
    )
    .await;
    let r = c.response().await;
    ports.push(only_ours(&r, &want, "chunked trailer", &mut wrong));
    assert_eq!(r.json()["body"], 5);
    if r.json()["trailers"] != serde_json::json!(["x-other"]) {
        wrong.push(format!("trailers forwarded: {}", r.json()["trailers"]));
    }
    // Two pipelined in one write, then Expect: 100-continue.
    c.send(b"GET /p1 HTTP/1.1\r\nHost: t\r\nX-Forwarded-Client-Cert: a\r\n\r\nGET /p2 HTTP/1.1\r\nHost: t\r\nx_forwarded_client_cert: b\r\n\r\n")
        .await;
    for p in ["/p1", "/p2"] {
        let r = c.response().await;
        ports.push(only_ours(&r, &want, p, &mut wrong));
        assert_eq!(r.json()["path"], p);
    }
    c.send(b"PUT /expect HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
        .await;
    let mut interim = [0u8; 25];
    tokio::time::timeout(
        DEADLINE,
        tokio::io::AsyncReadExt::read_exact(&mut c.tls, &mut interim),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    c.send(b"abc").await;
    let r = c.response().await;
    ports.push(only_ours(&r, &want, "expect", &mut wrong));
    assert_eq!(r.json()["body"], 3);
    assert!(
        wrong.is_empty(),
        "forged identities reached the target: {wrong:#?}"
    );
    // One target connection for the whole client connection, and another
    // for another client connection.
    assert!(ports.iter().all(|p| *p == ports[0]), "{ports:?}");
    let mut other = Raw::connect(&sc.addr("server"), ids.tls(&[])).await;
    other.send(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").await;
    let port = only_ours(
        &other.response().await,
        &want,
        "second connection",
        &mut wrong,
    );
    assert_ne!(
        port, ports[0],
        "two client connections shared a target connection"
    );
}

#[tokio::test]
async fn an_h2c_upgrade_is_removed_and_ends_the_connection() {
    if tools::skip_unless(&["python3"]) {
        return;
    }
    let (ids, _target, sc) = route(&[]).await;
    let mut c = Raw::connect(&sc.addr("server"), ids.tls(&[])).await;
    c.send(b"GET /up HTTP/1.1\r\nHost: t\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n")
        .await;
    let r = c.response().await;
    assert_eq!(r.status, 200, "{r:?}");
    let names = r.json()["names"].clone();
    for gone in ["upgrade", "http2-settings", "connection"] {
        assert!(
            !names.as_array().unwrap().iter().any(|n| n == gone),
            "{gone} forwarded: {names}"
        );
    }
    assert_eq!(r.header("connection"), Some("close"));
    assert!(
        c.closed().await,
        "the connection ends after a refused upgrade"
    );
}

#[tokio::test]
async fn a_target_that_closes_its_connection_closes_the_clients() {
    if tools::skip_unless(&["python3"]) {
        return;
    }
    let (ids, _target, sc) = route(&[]).await;
    let mut c = Raw::connect(&sc.addr("server"), ids.tls(&[])).await;
    c.send(b"GET /close HTTP/1.1\r\nHost: t\r\n\r\n").await;
    let r = c.response().await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(
        c.closed().await,
        "the client's connection ends with the target's"
    );
}

/// Each smuggling shape, alone on its connection: 400, and the target
/// never sees it.
#[tokio::test]
async fn smuggling_shapes_get_400_and_never_reach_the_target() {
    if tools::skip_unless(&["python3"]) {
        return;
    }
    let (ids, _target, sc) = route(&[]).await;
    let shapes: &[(&str, &str)] = &[
        (
            "CL then TE",
            "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        ),
        (
            "TE then CL",
            "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
        ),
        (
            "duplicate CL",
            "Content-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
        ),
        (
            "conflicting CL",
            "Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
        ),
        ("CL list", "Content-Length: 3, 3\r\n\r\nabc"),
        ("obs-fold", "X-A: a\r\n folded\r\nContent-Length: 0\r\n\r\n"),
        ("TE not chunked", "Transfer-Encoding: gzip\r\n\r\n"),
        (
            "TE chunked then gzip",
            "Transfer-Encoding: chunked, gzip\r\n\r\n",
        ),
        (
            "invalid chunk size",
            "Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
        ),
        (
            "overflowing chunk size",
            "Transfer-Encoding: chunked\r\n\r\n1ffffffffffffffff\r\nx\r\n0\r\n\r\n",
        ),
    ];
    let mut wrong = Vec::new();
    for (what, rest) in shapes {
        let mut c = Raw::connect(&sc.addr("server"), ids.tls(&[])).await;
        c.send(format!("POST /smuggle HTTP/1.1\r\nHost: t\r\n{rest}").as_bytes())
            .await;
        let r = c.response().await;
        if r.status != 400 {
            wrong.push(format!(
                "{what}: {} {}",
                r.status,
                String::from_utf8_lossy(&r.body)
            ));
        } else if !c.closed().await {
            wrong.push(format!("{what}: 400 but the connection stays open"));
        }
    }
    assert!(
        wrong.is_empty(),
        "not refused with 400 and a close: {wrong:#?}"
    );
    // The first request the target ever sees is this one.
    let mut c = Raw::connect(&sc.addr("server"), ids.tls(&[])).await;
    c.send(b"GET /clean HTTP/1.1\r\nHost: t\r\n\r\n").await;
    let r = c.response().await;
    assert_eq!(
        r.json()["seen"],
        1,
        "a smuggling shape reached the target: {r:?}"
    );
}

#[tokio::test]
async fn header_limits_give_431() {
    if tools::skip_unless(&["python3"]) {
        return;
    }
    let (ids, _target, sc) = route(&[
        "--http-max-headers",
        "10",
        "--http-max-header-bytes",
        "16384",
    ])
    .await;
    let addr = sc.addr("server");
    let fields = |n: usize| (0..n).map(|i| format!("X-F{i}: v\r\n")).collect::<String>();
    // Host plus 9: at the limit, forwarded (ours is added after the check).
    let mut c = Raw::connect(&addr, ids.tls(&[])).await;
    c.send(format!("GET / HTTP/1.1\r\nHost: t\r\n{}\r\n", fields(9)).as_bytes())
        .await;
    assert_eq!(c.response().await.status, 200);
    c.send(format!("GET / HTTP/1.1\r\nHost: t\r\n{}\r\n", fields(10)).as_bytes())
        .await;
    assert_eq!(c.response().await.status, 431, "11 fields");
    let mut c = Raw::connect(&addr, ids.tls(&[])).await;
    let big = "a".repeat(20_000);
    c.send(format!("GET / HTTP/1.1\r\nHost: t\r\nX-Big: {big}\r\n\r\n").as_bytes())
        .await;
    assert_eq!(c.response().await.status, 431, "a 20 KB head");
}

/// A target that accepts one WebSocket upgrade: it hands over the request
/// head it got, answers 101 with its first bytes right behind, then
/// echoes.
async fn websocket_target() -> (String, tokio::sync::oneshot::Receiver<String>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut head = Vec::new();
        let mut b = [0u8; 4096];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut b).await.unwrap();
            assert!(n > 0);
            head.extend_from_slice(&b[..n]);
        }
        let _ = tx.send(String::from_utf8_lossy(&head).into_owned());
        s.write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nhello")
            .await
            .unwrap();
        loop {
            let n = s.read(&mut b).await.unwrap_or(0);
            if n == 0 || s.write_all(&b[..n]).await.is_err() {
                return;
            }
        }
    });
    (addr, rx)
}

#[tokio::test]
async fn a_websocket_upgrade_becomes_a_tunnel_opened_with_our_identity() {
    let ids = Ids::new();
    let (target, head) = websocket_target().await;
    let sc = start_server(&ids.server_dir, &target, &["--http-identity", "xfcc"]).await;
    let mut c = Raw::connect(&sc.addr("server"), ids.tls(&["http/1.1"])).await;
    c.send(
        b"GET /ws HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
             X_Forwarded_Client_Cert: forged\r\n\r\n",
    )
    .await;
    let r = c.head().await;
    assert_eq!(r.status, 101, "{r:?}");
    assert_eq!(c.bytes(5).await, b"hello", "the target's first bytes");
    c.send(b"ping").await;
    assert_eq!(c.bytes(4).await, b"ping", "echoed through the tunnel");
    let head = tokio::time::timeout(DEADLINE, head).await.unwrap().unwrap();
    let xfcc: Vec<&str> = head
        .split("\r\n")
        .filter(|l| {
            l.to_ascii_lowercase()
                .replace('_', "-")
                .starts_with("x-forwarded-client-cert:")
        })
        .collect();
    assert_eq!(
        xfcc,
        [format!("x-forwarded-client-cert: {}", ids.expected())],
        "{head}"
    );
}

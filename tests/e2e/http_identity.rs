//! `--http-identity xfcc` over HTTP/1.1 through the real binary, against a
//! real HTTP server (Python's http.server): every request on a keep-alive
//! connection reaches the target with exactly one x-forwarded-client-cert,
//! ours, whatever the client forged (any case, `_` for `-`, named in
//! `Connection`, or as a chunked trailer); smuggling shapes get 400 and
//! never reach the target; the header limits give 431; the header
//! timeout closes unfinished heads and idle keep-alives, the body timeout
//! answers 408 to a stalled body and closes, and a route's unfinished
//! heads share a byte budget.

use crate::common;
use crate::common::http_identity as support;

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

/// An HTTP route counts its bytes as a byte-copying route does: what the
/// client sent (`to_target`) and what it was sent (`from_target`), in
/// `mtls_sidecar_bytes_total` and the connection's totals in
/// `/connections`, exactly. Kills `Counters::read` and `wrote` -> `()`.
#[tokio::test]
async fn an_http_routes_bytes_are_counted_both_ways() {
    if tools::skip_unless(&["python3"]) {
        return;
    }
    let (ids, _target, sc) = route(&["--admin", "127.0.0.1:0"]).await;
    let mut c = Raw::connect(&sc.addr("server"), ids.tls(&["http/1.1"])).await;
    let mut sent = 0;
    for req in [
        &b"GET /one HTTP/1.1\r\nHost: t\r\n\r\n"[..],
        b"POST /two HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello",
    ] {
        c.send(req).await;
        sent += req.len();
        assert_eq!(c.response().await.status, 200);
    }
    let received = c.received;
    let admin = sc.admin();
    let bytes = |m: &expo::Exposition, direction: &str| {
        m.value(
            "mtls_sidecar_bytes_total",
            &[("route", "server"), ("direction", direction)],
        )
    };
    scrape_until(&admin, "both directions counted", |m| {
        bytes(m, "to_target") == Some(sent as f64)
            && bytes(m, "from_target") == Some(received as f64)
    })
    .await;
    // The totals are counted just after the metric: awaited the same way.
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let v: serde_json::Value =
            serde_json::from_str(&get(&admin, "/connections").await.body).expect("JSON");
        let conn = &v["connections"][0];
        if conn["bytes_to_target"] == sent && conn["bytes_from_target"] == received {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "sent {sent}, received {received}: {v}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
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

/// A request reaches the target framed as the client framed it: no body
/// and no framing header for a bodiless GET, `Content-Length` (not
/// chunked) for a POST body of known length, even when the client's
/// `Connection` names `Content-Length` (dropped as hop-by-hop, it is
/// written again from the body's length), chunked for a chunked one. The
/// request body the sidecar forwards passes its end and its length
/// through (`Sanitized::is_end_stream`, `size_hint`), which hyper's
/// client reads to frame it: kills both returning a default.
#[tokio::test]
async fn a_request_reaches_the_target_framed_as_it_was_sent() {
    if tools::skip_unless(&["python3"]) {
        return;
    }
    let (ids, _target, sc) = route(&[]).await;
    let mut c = Raw::connect(&sc.addr("server"), ids.tls(&[])).await;
    let cases: &[(&str, &str, &[&str])] = &[
        ("GET", "\r\n", &[]),
        (
            "POST",
            "Content-Length: 5\r\n\r\nhello",
            &["content-length"],
        ),
        (
            "POST",
            "Content-Length: 0000000000000000005\r\n\r\nhello",
            &["content-length"],
        ),
        // `Connection` names the length: the header is dropped as
        // hop-by-hop, and the body's own length frames it again.
        (
            "POST",
            "Connection: content-length\r\nContent-Length: 5\r\n\r\nhello",
            &["content-length"],
        ),
        (
            "POST",
            "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            &["transfer-encoding"],
        ),
    ];
    for (method, rest, want) in cases {
        c.send(format!("{method} /framed HTTP/1.1\r\nHost: t\r\n{rest}").as_bytes())
            .await;
        let r = c.response().await;
        assert_eq!(r.status, 200, "{r:?}");
        let names = r.json()["names"].clone();
        let framing: Vec<&str> = ["content-length", "transfer-encoding"]
            .into_iter()
            .filter(|n| names.as_array().unwrap().iter().any(|v| v == n))
            .collect();
        assert_eq!(&framing, want, "{method} {rest:?}: {names}");
    }
}

/// `Subject=` renders the client's subject as OpenSSL's `-nameopt RFC2253`
/// does for the attribute types RFC 4514 names and those openssl does not
/// know (docs/http-identity.md says where the two forms part), judged by
/// openssl itself on a certificate it wrote: RDNs last to
/// first, a multi-valued RDN joined by `+`, RFC 4514's escapes, and an
/// attribute type with no short name as its dotted OID with the value's
/// DER in hex, short and long (a length over 127 bytes takes the long
/// form). Kills `der_of`'s mutants (no test had such an attribute).
#[tokio::test]
async fn the_subject_is_rendered_as_openssl_renders_it() {
    if tools::skip_unless(&["python3", "openssl"]) {
        return;
    }
    let ids = Ids::new();
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::write(d.join("ca.crt"), &ids.pki.ca.cert_pem).unwrap();
    std::fs::write(d.join("ca.key"), &ids.pki.ca.key_pem).unwrap();
    std::fs::write(
        d.join("ext"),
        format!("subjectAltName = DNS:{CONTROLLER}\nextendedKeyUsage = clientAuth\n"),
    )
    .unwrap();
    // Two attribute types openssl's own table does not know, named for
    // `req` only: `x509 -nameopt` then dumps them as `OID=#DER`.
    std::fs::write(
        d.join("req.cnf"),
        "oid_section = new_oids\n[ new_oids ]\nattrOne = 1.3.6.1.4.1.55555.1\n\
         attrTwo = 1.3.6.1.4.1.55555.2\nattrThree = 1.3.6.1.4.1.55555.3\n\
         attrFour = 1.3.6.1.4.1.55555.4\n[ req ]\ndistinguished_name = dn\n[ dn ]\n",
    )
    .unwrap();
    // Values of 200, 128 and 127 bytes: the long form of the length, its
    // first length, and the last short one.
    let (long, l128, l127) = ("l".repeat(200), "m".repeat(128), "s".repeat(127));
    let subject = format!(
        "/C=XX/O=Ops\\, Inc/attrOne=x+CN=multi/attrTwo={long}/attrThree={l128}\
         /attrFour={l127}/CN=client"
    );
    let run = common::openssl_ca::openssl_in;
    run(
        d,
        &[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            "c.key",
            "-out",
            "c.csr",
            "-multivalue-rdn",
            "-subj",
            &subject,
            "-config",
            "req.cnf",
        ],
    );
    run(
        d,
        &[
            "x509",
            "-req",
            "-in",
            "c.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-days",
            "1",
            "-set_serial",
            "7",
            "-extfile",
            "ext",
            "-out",
            "c.crt",
        ],
    );
    let out = std::process::Command::new("openssl")
        .args([
            "x509", "-in", "c.crt", "-noout", "-subject", "-nameopt", "RFC2253",
        ])
        .current_dir(d)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs = String::from_utf8(out.stdout).unwrap();
    let theirs = theirs.trim().strip_prefix("subject=").expect("subject=");
    assert!(
        theirs.contains(&format!("#0C81C8{}", "6C".repeat(200))),
        "{theirs}"
    );
    assert!(theirs.contains("+"), "one multi-valued RDN: {theirs}");
    assert!(
        theirs.contains(&format!("#0C8180{}", "6D".repeat(128))),
        "{theirs}"
    );
    assert!(
        theirs.contains(&format!("#0C7F{}", "73".repeat(127))),
        "{theirs}"
    );

    let cert_pem = std::fs::read_to_string(d.join("c.crt")).unwrap();
    let client = mtls_sidecar::pki::Issued {
        cert_der: {
            use rustls::pki_types::pem::PemObject;
            rustls::pki_types::CertificateDer::from_pem_slice(cert_pem.as_bytes()).unwrap()
        },
        cert_pem,
        key_pem: std::fs::read_to_string(d.join("c.key")).unwrap(),
    };
    let target = PyTarget::start();
    let sc = start_server(&ids.server_dir, &target.addr, &["--http-identity", "xfcc"]).await;
    let cfg = client_config(Some(&client), &ids.pki.ca.cert_pem);
    let mut c = Raw::connect(&sc.addr("server"), cfg).await;
    c.send(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").await;
    let r = c.response().await;
    assert_eq!(r.status, 200, "{r:?}");
    let xfcc = r.json()["xfcc"][0].as_str().unwrap().to_string();
    let ours = xfcc
        .split(';')
        .find_map(|f| f.strip_prefix("Subject=\""))
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or_else(|| panic!("no Subject: {xfcc}"));
    assert_eq!(ours, theirs);
}

/// A response reaches the client without what concerned only the hop it
/// came over: `Keep-Alive`, and a header the target's `Connection` names;
/// its other headers are kept. Kills `sanitize_response` -> `()` and its
/// `||` to `&&` and `==` to `!=`.
#[tokio::test]
async fn a_responses_hop_by_hop_headers_stay_on_the_targets_hop() {
    if tools::skip_unless(&["python3"]) {
        return;
    }
    let (ids, _target, sc) = route(&[]).await;
    let mut c = Raw::connect(&sc.addr("server"), ids.tls(&[])).await;
    c.send(b"GET /hop HTTP/1.1\r\nHost: t\r\n\r\n").await;
    let r = c.response().await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("x-end"), Some("kept"), "{r:?}");
    for gone in ["x-hop", "keep-alive"] {
        assert_eq!(r.header(gone), None, "{gone} forwarded: {r:?}");
    }
    assert!(
        r.headers
            .iter()
            .all(|(k, v)| !k.eq_ignore_ascii_case("connection")
                || !v.to_lowercase().contains("x-hop")),
        "{r:?}"
    );
}

/// The smuggling reader follows a chunked body chunk by chunk to the next
/// request head, which it then judges: a chunk size of three hex digits
/// (0x100 bytes), and a chunk line with extensions exactly as long as the
/// reader allows (`--http-max-header-bytes` + 4 with its CRLF), each
/// followed on the same connection by a clean request (200) and by a
/// smuggling shape (400). Kills `-` to `/` in `Scanner::complete` (the
/// size read from the first half of the line) and `>` to `>=` in
/// `Scanner::gather`'s line bound.
#[tokio::test]
async fn a_chunked_body_is_followed_to_the_next_request() {
    if tools::skip_unless(&["python3"]) {
        return;
    }
    let (ids, _target, sc) = route(&["--http-max-header-bytes", "8192"]).await;
    let data = "d".repeat(0x100);
    let ext = format!("5;e={}\r\n", "x".repeat(8192 + 4 - "5;e=\r\n".len()));
    assert_eq!(ext.len(), 8192 + 4);
    let bodies = [
        format!("100\r\n{data}\r\n0\r\n\r\n"),
        format!("{ext}hello\r\n0\r\n\r\n"),
    ];
    for body in &bodies {
        let mut c = Raw::connect(&sc.addr("server"), ids.tls(&[])).await;
        c.send(
            format!(
                "POST /chunked HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n{body}"
            )
            .as_bytes(),
        )
        .await;
        let r = c.response().await;
        assert_eq!(r.status, 200, "{r:?}");
        c.send(b"GET /next HTTP/1.1\r\nHost: t\r\n\r\n").await;
        let r = c.response().await;
        assert_eq!(r.status, 200, "the request after the body: {r:?}");
        c.send(
            b"POST /smuggle HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\
              Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        )
        .await;
        let r = c.response().await;
        assert_eq!(r.status, 400, "a smuggling shape after the body: {r:?}");
    }
}

/// A chunk-size line the smuggling reader does not accept (17 hex digits,
/// though their value fits: hyper decodes it) ends the reader's judging
/// of the connection: that request is answered, the next one is refused
/// with 400 and a close, never forwarded. Kills `||` to `&&` in
/// `chunk_size`'s digit count.
#[tokio::test]
async fn after_a_chunk_size_of_17_digits_no_request_is_forwarded() {
    if tools::skip_unless(&["python3"]) {
        return;
    }
    let (ids, _target, sc) = route(&[]).await;
    let mut c = Raw::connect(&sc.addr("server"), ids.tls(&[])).await;
    c.send(
        b"POST /chunked HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n\
          00000000000000005\r\nhello\r\n0\r\n\r\n",
    )
    .await;
    let r = c.response().await;
    assert_eq!(r.status, 200, "{r:?}");
    c.send(b"GET /next HTTP/1.1\r\nHost: t\r\n\r\n").await;
    let r = c.response().await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(c.closed().await);
}

/// Empty lines before a request line (RFC 9112 §2.2) are skipped by the
/// smuggling reader as hyper skips them, however many, at the start of a
/// connection and between requests: every request is answered by the
/// target. Kills `>` to `<` in `Scanner::gather`'s skip (the reader then
/// judged two empty lines an incomplete head of their own: 400).
#[tokio::test]
async fn empty_lines_before_a_request_line_are_skipped() {
    if tools::skip_unless(&["python3"]) {
        return;
    }
    let (ids, _target, sc) = route(&[]).await;
    for lead in ["\r\n", "\r\n\r\n", "\n\n", "\r\n\n\r\n"] {
        let mut c = Raw::connect(&sc.addr("server"), ids.tls(&[])).await;
        for path in ["/first", "/second"] {
            c.send(format!("{lead}GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
                .await;
            let r = c.response().await;
            assert_eq!(r.status, 200, "{lead:?} {path}: {r:?}");
            assert_eq!(r.json()["path"], path);
        }
    }
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
        (
            "CL of 20 digits",
            "Content-Length: 00000000000000000003\r\n\r\nabc",
        ),
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

/// `--http-header-timeout` bounds the wait for a complete request head:
/// a connection that sends nothing, one whose head never ends (bytes
/// trickling in), and a keep-alive connection idle after its response are
/// each closed once it passes (`closed{reason="http_timeout"}`), while a
/// request that completes in time is answered. Without a timer in hyper's
/// builder all three stayed open (the 30 s default did nothing).
#[tokio::test]
async fn the_header_timeout_closes_unfinished_heads_and_idle_keep_alives() {
    if tools::skip_unless(&["python3"]) {
        return;
    }
    let (ids, _target, sc) =
        route(&["--admin", "127.0.0.1:0", "--http-header-timeout", "400ms"]).await;
    let addr = sc.addr("server");
    let mut silent = Raw::connect(&addr, ids.tls(&["http/1.1"])).await;
    let mut slow = Raw::connect(&addr, ids.tls(&["http/1.1"])).await;
    slow.send(b"GET / HTTP/1.1\r\nHost: t\r\nX-Slow: ").await;
    let mut idle = Raw::connect(&addr, ids.tls(&["http/1.1"])).await;
    idle.send(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").await;
    assert_eq!(idle.response().await.status, 200);
    // Trickling bytes does not restart the clock.
    let started = std::time::Instant::now();
    while started.elapsed() < std::time::Duration::from_millis(300) {
        slow.send(b"a").await;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    for (what, c) in [
        ("silent", &mut silent),
        ("slow", &mut slow),
        ("idle", &mut idle),
    ] {
        assert!(c.closed().await, "{what} stayed open");
    }
    sc.wait_closed("server", "http_timeout", 3.0).await;
}

/// `--http-body-timeout` bounds each wait for the next part of a request
/// body: a body that stops arriving (Content-Length or chunked) is
/// answered 408 and its connection closed (`closed{reason="http_timeout"}`,
/// `mtls_sidecar_http_body_timeouts_total`), while one trickling in faster
/// than the timeout, for longer than it in all, is forwarded whole.
/// Without the bound a stalled body held its connection, and the target's,
/// for as long as the client liked.
#[tokio::test]
async fn a_request_body_that_stops_arriving_is_answered_408_and_closed() {
    if tools::skip_unless(&["python3"]) {
        return;
    }
    let (ids, _target, sc) =
        route(&["--admin", "127.0.0.1:0", "--http-body-timeout", "400ms"]).await;
    let addr = sc.addr("server");
    let mut trickle = Raw::connect(&addr, ids.tls(&["http/1.1"])).await;
    trickle
        .send(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 8\r\n\r\n")
        .await;
    // The gaps between the parts are the case itself (each shorter than
    // the timeout, all together longer).
    for _ in 0..8 {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        trickle.send(b"a").await;
    }
    let r = trickle.response().await;
    assert_eq!(
        (r.status, r.json()["body"].as_u64()),
        (200, Some(8)),
        "{r:?}"
    );
    let stalls: [&[u8]; 2] = [
        b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nabc",
        b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n",
    ];
    for (i, stall) in stalls.into_iter().enumerate() {
        let mut c = Raw::connect(&addr, ids.tls(&["http/1.1"])).await;
        c.send(stall).await;
        let r = c.response().await;
        assert_eq!(r.status, 408, "{r:?}");
        assert!(c.closed().await, "the stalled connection stayed open");
        sc.wait_closed("server", "http_timeout", (i + 1) as f64)
            .await;
    }
    scrape_until(&sc.admin(), "two body timeouts counted", |m| {
        m.value(
            "mtls_sidecar_http_body_timeouts_total",
            &[("route", "server")],
        ) == Some(2.0)
    })
    .await;
}

/// The unfinished HTTP/1.1 heads of a route's connections share
/// `--http-max-pending-head-bytes`: a connection whose head would take
/// them past it is closed (`closed{reason="overload"}`), and the one
/// already holding its part completes its request. Each head's first
/// 8 KiB is free, so two 40,000-byte heads charge 63,616 bytes. Without the
/// budget both heads were held (300 such connections took 63 MB).
#[tokio::test]
async fn unfinished_heads_share_the_routes_budget() {
    if tools::skip_unless(&["python3"]) {
        return;
    }
    let (ids, _target, sc) = route(&[
        "--admin",
        "127.0.0.1:0",
        "--http-max-header-bytes",
        "49152",
        "--http-max-pending-head-bytes",
        "49152",
    ])
    .await;
    let addr = sc.addr("server");
    let admin = sc.admin();
    let part = |name: &str| {
        let mut head = format!("GET / HTTP/1.1\r\nHost: t\r\nX-{name}: ").into_bytes();
        head.resize(40_000, b'a');
        head
    };
    let mut first = Raw::connect(&addr, ids.tls(&["http/1.1"])).await;
    let head = part("first");
    first.send(&head).await;
    scrape_until(&admin, "the first head read", |m| {
        server_read(m) >= 40_000.0
    })
    .await;
    let mut second = Raw::connect(&addr, ids.tls(&["http/1.1"])).await;
    second.send(&part("second")).await;
    assert!(second.closed().await, "the second head was held too");
    sc.wait_closed("server", "overload", 1.0).await;
    first.send(b"\r\n\r\n").await;
    assert_eq!(first.response().await.status, 200);
}

//! Interop with TLS stacks we did not write: `openssl s_client` and Python's
//! `ssl` module against `server`, and `client` against `openssl s_server`
//! (TLS 1.3, and TLS 1.2 only when `--tls-min-version 1.2` allows it).

use crate::common;

use common::foreign::{path, s_client_with_cert, s_server, Proc};
use common::openssl_ca::OpensslCa;
use common::*;
use mtls_sidecar::pki::Role;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test(flavor = "multi_thread")]
async fn openssl_s_client_with_a_certificate_round_trips() {
    if tools::skip_unless(&["openssl"]) {
        return;
    }
    let srv = ServerSide::start(&[]).await;
    let d = &srv.controller_dir;
    let mut p = s_client_with_cert(
        &srv.addr,
        d,
        REPLICA,
        &["-verify_hostname", REPLICA, "-quiet"],
    );
    p.send(b"hello from openssl\n").await;
    p.wait_stdout("hello from openssl\n").await;
    assert_eq!(srv.echo.accepted(), 1);
    assert!(srv.sidecar.warn_lines(&["handshake refused"]).is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn openssl_s_client_without_a_certificate_is_refused() {
    if tools::skip_unless(&["openssl"]) {
        return;
    }
    let srv = ServerSide::start(&[]).await;
    let d = &srv.controller_dir;
    let mut p = Proc::spawn(
        "openssl",
        &[
            "s_client",
            "-connect",
            &srv.addr,
            "-servername",
            REPLICA,
            "-verify_return_error",
            "-CAfile",
            &path(d, "ca.crt"),
            "-quiet",
        ],
    );
    p.send(b"hello without a certificate\n").await;
    // The server's alert ends the session and s_client exits.
    let code = p.wait_exit().await;
    assert!(!p.stdout().contains("hello"), "echoed: {}", p.stdout());
    assert_ne!(code, Some(0), "stderr:\n{}", p.stderr());
    srv.sidecar
        .wait_field("handshake refused", "reason", "no_client_cert")
        .await;
    assert_eq!(srv.echo.accepted(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn client_sidecar_talks_to_openssl_s_server() {
    if tools::skip_unless(&["openssl"]) {
        return;
    }
    let creds = Creds::new();
    let (mut server, target) = s_server(&creds.server_dir, &["-tls1_3"]).await;
    let client = start_client(&creds.client_dir, &target, &[]).await;
    let mut app = TcpStream::connect(client.addr("client")).await.unwrap();
    app.write_all(b"controller says hi\n").await.unwrap();
    server.wait_stdout("controller says hi\n").await;
    server.reply_to(&mut app, b"replica says hi\n").await;
    assert!(client.warn_lines(&["handshake refused"]).is_empty());
}

/// The client sidecar offers TLS 1.3 only unless told otherwise: a
/// TLS 1.2-only OpenSSL server refuses it (counted and logged as
/// `protocol`), and `--tls-min-version 1.2` makes the same server work.
#[tokio::test(flavor = "multi_thread")]
async fn client_sidecar_speaks_tls12_to_openssl_only_when_allowed() {
    if tools::skip_unless(&["openssl"]) {
        return;
    }
    let creds = Creds::new();
    let hello = b"controller over 1.2\n";

    let (strict_server, target) = s_server(&creds.server_dir, &["-tls1_2"]).await;
    let strict = start_client(&creds.client_dir, &target, &["--admin", "127.0.0.1:0"]).await;
    let mut app = TcpStream::connect(strict.addr("client")).await.unwrap();
    app.write_all(hello).await.unwrap();
    assert!(read_until_closed(&mut app).await.is_empty());
    let line = strict
        .wait_field("handshake refused", "reason", "protocol")
        .await;
    assert!(line.contains(" WARN "), "{line}");
    let m = scrape_until(&strict.admin(), "the protocol refusal", |m| {
        m.value(
            "mtls_sidecar_tls_handshake_failures_total",
            &[("route", "client"), ("reason", "protocol")],
        ) == Some(1.0)
    })
    .await;
    assert_eq!(
        m.get("mtls_sidecar_tls_handshakes_total", &[("route", "client")]),
        0.0
    );
    assert!(!strict_server.stdout().contains("controller"));

    let (mut server, target) = s_server(&creds.server_dir, &["-tls1_2"]).await;
    let relaxed = start_client(&creds.client_dir, &target, &["--tls-min-version", "1.2"]).await;
    let mut app = TcpStream::connect(relaxed.addr("client")).await.unwrap();
    app.write_all(hello).await.unwrap();
    server.wait_stdout("controller over 1.2\n").await;
    server.reply_to(&mut app, b"replica over 1.2\n").await;
    assert!(relaxed.warn_lines(&["handshake refused"]).is_empty());
}

const PY_CLIENT: &str = r#"
import socket, ssl, sys
host, port, cert, key, ca, name = sys.argv[1:7]
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.minimum_version = ssl.TLSVersion.TLSv1_3
ctx.load_cert_chain(cert, key)
ctx.load_verify_locations(ca)
with socket.create_connection((host, int(port)), timeout=20) as raw:
    with ctx.wrap_socket(raw, server_hostname=name) as s:
        try:
            s.sendall(b"hello from python")
            got = b""
            while len(got) < len(b"hello from python"):
                chunk = s.recv(64)
                if not chunk:
                    break
                got += chunk
        except (ssl.SSLError, OSError) as e:
            print("REFUSED", repr(e))
            sys.exit(3)
        if not got:
            print("REFUSED eof")
            sys.exit(3)
        print("GOT", got.decode())
"#;

/// Runs the Python client against `srv` presenting the identity in `dir`.
async fn python_client(srv: &ServerSide, dir: &std::path::Path) -> (Option<i32>, String) {
    let (host, port) = srv.addr.rsplit_once(':').unwrap();
    let mut p = Proc::spawn(
        "python3",
        &[
            "-c",
            PY_CLIENT,
            host,
            port,
            &path(dir, "tls.crt"),
            &path(dir, "tls.key"),
            &path(dir, "ca.crt"),
            REPLICA,
        ],
    );
    let code = p.wait_exit().await;
    (code, p.stdout() + &p.stderr())
}

#[tokio::test(flavor = "multi_thread")]
async fn python_ssl_client_is_accepted() {
    if tools::skip_unless(&["python3"]) {
        return;
    }
    let srv = ServerSide::start(&[]).await;
    let (code, out) = python_client(&srv, &srv.controller_dir).await;
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("GOT hello from python"), "{out}");
    assert_eq!(srv.echo.accepted(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn python_ssl_client_with_the_wrong_san_is_refused() {
    if tools::skip_unless(&["python3"]) {
        return;
    }
    let srv = ServerSide::start(&[]).await;
    let replica = srv.pki.leaf(REPLICA, Role::Both);
    let dir = srv.pki.dir(srv.tmp.path(), "wrong-role", &replica);
    let (code, out) = python_client(&srv, &dir).await;
    assert_eq!(code, Some(3), "{out}");
    assert!(out.contains("REFUSED"), "{out}");
    assert!(!out.contains("GOT"), "{out}");
    srv.sidecar
        .wait_field("handshake refused", "reason", "bad_san")
        .await;
    assert_eq!(srv.echo.accepted(), 0);
}

// ---- CRLs written by `openssl ca -gencrl` ----

/// Connects presenting `ident` and says whether the server let it talk: it
/// answers a line (our echo target echoes it, `s_server -rev` reverses it)
/// rather than failing the handshake or the first read with an alert.
async fn admitted(addr: &str, ident: &mtls_sidecar::pki::Issued, ca_pem: &str) -> bool {
    let Ok(mut s) = tls_connect(addr, REPLICA, client_config(Some(ident), ca_pem)).await else {
        return false;
    };
    let _ = s.write_all(b"ping\n").await;
    let _ = s.flush().await;
    let mut buf = [0u8; 16];
    match tokio::time::timeout(DEADLINE, s.read(&mut buf)).await {
        Ok(Ok(0)) | Ok(Err(_)) => false,
        Ok(Ok(_)) => true,
        Err(_) => panic!("no answer from {addr}"),
    }
}

/// A CRL written by `openssl ca -gencrl` is honoured by `server`, and for a
/// revoked and a good client certificate our verdict is OpenSSL's.
#[tokio::test(flavor = "multi_thread")]
async fn an_openssl_crl_gives_our_server_and_s_server_the_same_verdicts() {
    if tools::skip_unless(&["openssl"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("interop CA");
    let leaked = pki.leaf(CONTROLLER, Role::Client);
    let good = pki.leaf(CONTROLLER, Role::Client);
    let ca = OpensslCa::new(tmp.path(), &pki, true);
    ca.revoke(&leaked);
    let crl = ca.gencrl(None);
    let dir = pki.dir(tmp.path(), "replica", &pki.leaf(REPLICA, Role::Server));
    std::fs::write(dir.join("ca.crl"), &crl).unwrap();
    let echo = echo_target().await;
    let ours = start_server(&dir, &echo.addr.to_string(), &["--admin", "127.0.0.1:0"]).await;
    let st = status(&ours.admin()).await;
    let crls = &st["credentials"][0]["crls"];
    assert_eq!(crls[0]["number"], "1", "{st}");
    assert_eq!(crls[0]["revoked"], 1, "{st}");

    let ca_pem = &pki.ca.cert_pem;
    let crl_file = path(&dir, "ca.crl");
    for (ident, expected) in [(&leaked, false), (&good, true)] {
        // -rev: echo each line reversed, so an admitted client hears back.
        let (_openssl, addr) = s_server(&dir, &["-rev", "-crl_check", "-CRL", &crl_file]).await;
        let theirs = admitted(&addr, ident, ca_pem).await;
        let mine = admitted(&ours.addr("server"), ident, ca_pem).await;
        assert_eq!(theirs, expected, "openssl s_server's verdict");
        assert_eq!(mine, theirs, "our verdict differs from openssl's");
    }
    let line = ours
        .wait_field("handshake refused", "reason", "revoked")
        .await;
    let serial = mtls_sidecar::identity::CertInfo::parse(&leaked.cert_der)
        .unwrap()
        .serial;
    assert!(has_field(&line, "serial", &serial), "{line}");
    assert_eq!(
        echo.accepted(),
        1,
        "only the good client reaches the target"
    );
}

/// A CRL without a CRL number (`openssl ca` with no `crlnumber` file) is
/// ordered by thisUpdate: an older one rejects the revision, a newer one is
/// applied.
#[tokio::test(flavor = "multi_thread")]
async fn crls_without_a_number_are_ordered_by_this_update() {
    if tools::skip_unless(&["openssl"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("interop CA");
    let leaked = pki.leaf(CONTROLLER, Role::Client);
    let ca = OpensslCa::new(tmp.path(), &pki, false);
    // openssl's YYYYMMDDHHMMSSZ, `secs_ago` seconds ago.
    let day = |secs_ago: u64| {
        let t = std::time::SystemTime::now() - std::time::Duration::from_secs(secs_ago);
        humantime::format_rfc3339_seconds(t)
            .to_string()
            .replace(['-', 'T', ':'], "")
    };
    // In force: thisUpdate two hours ago, revoking nothing.
    let in_force = ca.gencrl(Some(&day(7200)));
    let server = pki.leaf(REPLICA, Role::Server);
    let dir =
        mtls_sidecar::tools::atomic_writer::AtomicDir::new(&tmp.path().join("replica")).unwrap();
    let publish = |crl: &str| {
        dir.publish(&[
            ("tls.crt", server.cert_pem.as_bytes()),
            ("tls.key", server.key_pem.as_bytes()),
            ("ca.crt", pki.ca.cert_pem.as_bytes()),
            ("ca.crl", crl.as_bytes()),
        ])
        .unwrap()
    };
    publish(&in_force);
    let echo = echo_target().await;
    let sc = start_server(
        dir.path(),
        &echo.addr.to_string(),
        &["--admin", "127.0.0.1:0", "--reload-interval", "100ms"],
    )
    .await;
    let st = status(&sc.admin()).await;
    assert!(st["credentials"][0]["crls"][0]["number"].is_null(), "{st}");
    let addr = sc.addr("server");
    let ca_pem = &pki.ca.cert_pem;
    assert!(admitted(&addr, &leaked, ca_pem).await);

    // Older by thisUpdate (three hours ago), and it would revoke `leaked`:
    // rejected whole, `leaked` still admitted.
    ca.revoke(&leaked);
    publish(&ca.gencrl(Some(&day(3 * 3600))));
    let line = sc.wait_log(&["rejected credential revision"]).await;
    assert!(line.contains("older than the one in force"), "{line}");
    assert!(line.contains("thisUpdate"), "{line}");
    assert!(admitted(&addr, &leaked, ca_pem).await);

    // Newer by thisUpdate (now): applied, `leaked` refused.
    publish(&ca.gencrl(None));
    sc.wait_log(&["applied credential revision"]).await;
    assert!(!admitted(&addr, &leaked, ca_pem).await);
    sc.wait_field("handshake refused", "reason", "revoked")
        .await;
}

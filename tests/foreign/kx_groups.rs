//! Key exchange groups, end to end: which groups the real binary offers and
//! accepts, against OpenSSL peers restricted to one group (a CNSA/FIPS-style
//! P-384-only peer, an FFDHE-only peer we must refuse), an OpenSSL TLS 1.2
//! server holding a P-384 certificate, and default peers, which must still
//! get the post-quantum hybrid when they know it. The `client` route's
//! ClientHello is read off the wire to check that adding a group grows
//! `supported_groups` but never the key shares sent up front.

use super::p384;
use crate::common;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::foreign::{s_server, Proc};
use common::*;
use mtls_sidecar::pki::write_secret_dir;
use rustls::NamedGroup;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// IANA code points (RFC 8446 §4.2.7, draft-ietf-tls-ecdhe-mlkem).
const X25519MLKEM768: u16 = 0x11ec;
const X25519: u16 = 0x001d;
const SECP256R1: u16 = 0x0017;
const SECP384R1: u16 = 0x0018;

const HANDSHAKES: &str = "mtls_sidecar_tls_handshakes_total";
const FAILURES: &str = "mtls_sidecar_tls_handshake_failures_total";

/// True when the installed OpenSSL knows X25519MLKEM768 (3.5 and later):
/// an older one refuses to even set the group.
fn openssl_knows_the_hybrid() -> bool {
    let out = std::process::Command::new("openssl")
        .args([
            "s_client",
            "-groups",
            "X25519MLKEM768",
            "-connect",
            "127.0.0.1:1",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run openssl");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    !text.contains("SSL_CONF_cmd(-groups")
}

/// `openssl s_client` against a `server` route, presenting the controller
/// identity in `dir` and offering `groups` (OpenSSL's defaults when empty).
fn s_client(addr: &str, dir: &Path, groups: &[&str]) -> Proc {
    // Lines we send are data, not commands ("k…" would be KeyUpdate).
    let mut extra = vec!["-verify_hostname", REPLICA, "-nocommands"];
    extra.extend_from_slice(groups);
    common::foreign::s_client_with_cert(addr, dir, REPLICA, &extra)
}

/// `openssl s_server -trace` (see [`s_server`]) plus `extra`: the trace
/// shows the group each handshake used.
async fn s_server_traced(dir: &Path, extra: &[&str]) -> (Proc, String) {
    let args: Vec<&str> = ["-trace"].iter().chain(extra).copied().collect();
    s_server(dir, &args).await
}

/// The group named in the key share of the last ServerHello in an
/// `s_server -trace` log (after a HelloRetryRequest, the second one's):
/// the group the handshake used.
fn server_hello_group(trace: &str) -> Option<String> {
    let mut message = "";
    let mut group = None;
    for line in trace.lines() {
        let line = line.trim();
        if let Some((name, _)) = line.split_once(", Length=") {
            message = name;
        } else if let Some(g) = line.strip_prefix("NamedGroup: ") {
            if message == "ServerHello" {
                group = Some(g.to_string());
            }
        }
    }
    group
}

/// Sends `line` from the app into the `client` route and waits for the
/// OpenSSL server behind it to print it.
async fn deliver_through(client: &Sidecar, server: &Proc, line: &str) -> TcpStream {
    let mut app = TcpStream::connect(client.addr("client")).await.unwrap();
    app.write_all(line.as_bytes()).await.unwrap();
    server.wait_output(line).await;
    app
}

// ---- server route ----

/// A P-384-only client (`-groups secp384r1`, as a CNSA/FIPS-restricted
/// OpenSSL is configured) completes the handshake with a `server` route,
/// over P-384, and its data reaches the target.
#[tokio::test(flavor = "multi_thread")]
async fn server_route_accepts_a_p384_only_client() {
    if tools::skip_unless(&["openssl"]) {
        return;
    }
    let srv = ServerSide::start(&[]).await;
    let mut c = s_client(&srv.addr, &srv.controller_dir, &["-groups", "secp384r1"]);
    c.send(b"kx over p-384\n").await;
    let out = c.wait_output("\nkx over p-384\n").await;
    assert!(
        out.contains("Server Temp Key: ECDH, secp384r1, 384 bits"),
        "{out}"
    );
    assert_eq!(srv.echo.accepted(), 1);
    assert!(srv.sidecar.warn_lines(&["handshake refused"]).is_empty());
}

/// A default OpenSSL client gets the hybrid X25519MLKEM768 when it knows
/// it, X25519 otherwise (OpenSSL before 3.5): P-384 being offered changes
/// nothing for it.
#[tokio::test(flavor = "multi_thread")]
async fn server_route_gives_a_default_openssl_client_its_best_group() {
    if tools::skip_unless(&["openssl"]) {
        return;
    }
    let srv = ServerSide::start(&[]).await;
    let mut c = s_client(&srv.addr, &srv.controller_dir, &[]);
    c.send(b"kx by default\n").await;
    let out = c.wait_output("\nkx by default\n").await;
    let expected = if openssl_knows_the_hybrid() {
        "X25519MLKEM768"
    } else {
        "Server Temp Key: X25519, 253 bits"
    };
    assert!(out.contains(expected), "expected {expected:?} in:\n{out}");
}

/// A client offering only a group we do not (FFDHE) is refused without
/// reaching the target, counted as a `protocol` handshake failure, logged,
/// and the sidecar goes on serving.
#[tokio::test(flavor = "multi_thread")]
async fn server_route_refuses_a_client_with_no_group_in_common() {
    if tools::skip_unless(&["openssl"]) {
        return;
    }
    let srv = ServerSide::start(&["--admin", "127.0.0.1:0"]).await;
    let mut c = s_client(&srv.addr, &srv.controller_dir, &["-groups", "ffdhe2048"]);
    let code = c.wait_exit().await;
    assert_ne!(code, Some(0), "{}", c.output());
    let admin = srv.sidecar.admin();
    let m = scrape_until(&admin, "the protocol refusal", |m| {
        m.value(FAILURES, &[("route", "server"), ("reason", "protocol")]) == Some(1.0)
    })
    .await;
    assert_eq!(m.get(HANDSHAKES, &[("route", "server")]), 0.0);
    let line = srv
        .sidecar
        .wait_field("handshake refused", "reason", "protocol")
        .await;
    assert!(line.contains("NoKxGroupsInCommon"), "{line}");
    assert_eq!(srv.echo.accepted(), 0);
    // Still serving: the next, ordinary client is admitted.
    let mut tls = srv.connect_good().await;
    assert_eq!(roundtrip(&mut tls, b"after").await, b"after");
    assert_eq!(srv.sidecar.log_count("panicked"), 0);
}

// ---- client route ----

/// A `client` route reaches a P-384-only OpenSSL server, over P-384.
#[tokio::test(flavor = "multi_thread")]
async fn client_route_reaches_a_p384_only_server() {
    if tools::skip_unless(&["openssl"]) {
        return;
    }
    let creds = Creds::new();
    let (server, target) = s_server_traced(&creds.server_dir, &["-groups", "secp384r1"]).await;
    let client = start_client(&creds.client_dir, &target, &[]).await;
    let _app = deliver_through(&client, &server, "controller over p-384\n").await;
    let trace = server.output();
    assert_eq!(
        server_hello_group(&trace).as_deref(),
        Some("secp384r1 (P-384) (24)"),
        "{trace}"
    );
    assert!(client.warn_lines(&["handshake refused"]).is_empty());
}

/// With TLS 1.2 allowed, a `client` route reaches an OpenSSL TLS 1.2
/// server holding an ECDSA P-384 certificate: OpenSSL serves such a
/// certificate over TLS 1.2 only to a client listing P-384 among its
/// groups (RFC 8422 §5.1), whatever group the ECDHE itself uses.
#[tokio::test(flavor = "multi_thread")]
async fn client_route_reaches_a_tls12_server_with_a_p384_certificate() {
    if tools::skip_unless(&["openssl"]) {
        return;
    }
    let creds = Creds::new();
    let (replica, p384_ca) = p384::server_identity(REPLICA);
    // Each side trusts both CAs: its peer's, and its own leaf's.
    let cas = format!("{p384_ca}{}", creds.pki.ca.cert_pem);
    let root = creds.tmp.path();
    let server_dir: PathBuf = root.join("replica-p384");
    write_secret_dir(&server_dir, &replica, &cas).unwrap();
    let client_dir = root.join("controller-p384");
    write_secret_dir(&client_dir, &creds.controller, &cas).unwrap();

    let (mut server, target) = s_server_traced(&server_dir, &["-tls1_2"]).await;
    let client = start_client(&client_dir, &target, &["--tls-min-version", "1.2"]).await;
    let mut app = deliver_through(&client, &server, "controller over 1.2\n").await;
    server.reply_to(&mut app, b"replica over 1.2\n").await;
    let trace = server.output();
    assert!(trace.contains("server_version=0x303 (TLS 1.2)"), "{trace}");
    assert!(client.warn_lines(&["handshake refused"]).is_empty());
}

/// A default OpenSSL server gets the hybrid when it knows it, X25519
/// otherwise.
#[tokio::test(flavor = "multi_thread")]
async fn client_route_gives_a_default_openssl_server_its_best_group() {
    if tools::skip_unless(&["openssl"]) {
        return;
    }
    let creds = Creds::new();
    let (server, target) = s_server_traced(&creds.server_dir, &[]).await;
    let client = start_client(&creds.client_dir, &target, &[]).await;
    let _app = deliver_through(&client, &server, "controller by default\n").await;
    let trace = server.output();
    let expected = if openssl_knows_the_hybrid() {
        "(4588)"
    } else {
        "ecdh_x25519 (29)"
    };
    let group = server_hello_group(&trace).unwrap_or_else(|| panic!("{trace}"));
    assert!(group.ends_with(expected), "{group}, expected {expected}");
}

/// A rustls server on the sidecar's own provider gets the hybrid from a
/// `client` route (tests/e2e/process.rs checks the `server` route's side).
#[tokio::test(flavor = "multi_thread")]
async fn client_route_prefers_the_hybrid() {
    let creds = Creds::new();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = listener.local_addr().unwrap().to_string();
    let acceptor = tokio_rustls::TlsAcceptor::from(server_config(
        &creds.replica,
        Some(&creds.pki.ca.cert_pem),
    ));
    let client = start_client(&creds.client_dir, &target, &[]).await;
    let mut app = TcpStream::connect(client.addr("client")).await.unwrap();
    app.write_all(b"pq").await.unwrap();
    let (tcp, _) = tokio::time::timeout(DEADLINE, listener.accept())
        .await
        .expect("the client route dialled")
        .unwrap();
    let mut tls = tokio::time::timeout(DEADLINE, acceptor.accept(tcp))
        .await
        .expect("handshake in time")
        .expect("handshake");
    let mut buf = [0u8; 2];
    tls.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"pq");
    let group = tls.get_ref().1.negotiated_key_exchange_group().unwrap();
    assert_eq!(group.name(), NamedGroup::X25519MLKEM768);
}

/// A server offering only a group we do not (FFDHE) is refused, counted
/// on the `client` route as a `protocol` handshake failure.
#[tokio::test(flavor = "multi_thread")]
async fn client_route_refuses_a_server_with_no_group_in_common() {
    if tools::skip_unless(&["openssl"]) {
        return;
    }
    let creds = Creds::new();
    let (server, target) = s_server_traced(&creds.server_dir, &["-groups", "ffdhe2048"]).await;
    let client = start_client(&creds.client_dir, &target, &["--admin", "127.0.0.1:0"]).await;
    let mut app = TcpStream::connect(client.addr("client")).await.unwrap();
    app.write_all(b"never delivered\n").await.unwrap();
    assert!(read_until_closed(&mut app).await.is_empty());
    let m = scrape_until(&client.admin(), "the protocol refusal", |m| {
        m.value(FAILURES, &[("route", "client"), ("reason", "protocol")]) == Some(1.0)
    })
    .await;
    assert_eq!(m.get(HANDSHAKES, &[("route", "client")]), 0.0);
    let line = client
        .wait_field("handshake refused", "reason", "protocol")
        .await;
    assert!(line.contains("HandshakeFailure"), "{line}");
    assert!(!server.output().contains("never delivered"));
    assert_eq!(client.log_count("panicked"), 0);
}

// ---- what the client route sends ----

/// What a ClientHello offers for key exchange, and its size on the wire.
#[derive(Debug)]
struct Offer {
    /// The TLS record carrying it, header included.
    bytes: usize,
    supported_groups: Vec<u16>,
    key_shares: Vec<u16>,
}

/// A cursor over a ClientHello body; `None` past its end.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<usize> {
        self.take(1).map(|b| usize::from(b[0]))
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }
    /// A vector with a `len_bytes`-byte length prefix.
    fn vec(&mut self, len_bytes: usize) -> Option<Reader<'a>> {
        let n = match len_bytes {
            1 => self.u8()?,
            _ => usize::from(self.u16()?),
        };
        self.take(n).map(Reader)
    }
}

/// The key exchange offer of a ClientHello record (RFC 8446 §4.1.2).
fn parse_client_hello(record: &[u8]) -> Option<Offer> {
    let mut r = Reader(record);
    (r.u8()? == 22).then_some(())?; // handshake record
    r.take(2)?;
    let mut hs = r.vec(2)?;
    (hs.u8()? == 1).then_some(())?; // client_hello
    hs.take(3)?;
    hs.take(2 + 32)?; // legacy_version, random
    hs.vec(1)?; // legacy_session_id
    hs.vec(2)?; // cipher_suites
    hs.vec(1)?; // legacy_compression_methods
    let mut exts = hs.vec(2)?;
    let (mut supported_groups, mut key_shares) = (Vec::new(), Vec::new());
    while !exts.0.is_empty() {
        let kind = exts.u16()?;
        let mut body = exts.vec(2)?;
        match kind {
            10 => {
                let mut list = body.vec(2)?;
                while !list.0.is_empty() {
                    supported_groups.push(list.u16()?);
                }
            }
            51 => {
                let mut shares = body.vec(2)?;
                while !shares.0.is_empty() {
                    key_shares.push(shares.u16()?);
                    shares.vec(2)?;
                }
            }
            _ => {}
        }
    }
    Some(Offer {
        bytes: record.len(),
        supported_groups,
        key_shares,
    })
}

/// The first ClientHello a `client` route started with `extra` sends.
async fn client_hello(extra: &[&str]) -> Offer {
    let creds = Creds::new();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = listener.local_addr().unwrap().to_string();
    let client = start_client(&creds.client_dir, &target, extra).await;
    let mut app = TcpStream::connect(client.addr("client")).await.unwrap();
    app.write_all(b"x").await.unwrap();
    let (mut tcp, _) = tokio::time::timeout(DEADLINE, listener.accept())
        .await
        .expect("the client route dialled")
        .unwrap();
    let mut record = vec![0u8; 5];
    let read = async {
        tcp.read_exact(&mut record).await?;
        let len = usize::from(u16::from_be_bytes([record[3], record[4]]));
        record.resize(5 + len, 0);
        tcp.read_exact(&mut record[5..]).await
    };
    tokio::time::timeout(DEADLINE, read)
        .await
        .expect("a ClientHello in time")
        .expect("a whole ClientHello record");
    parse_client_hello(&record).unwrap_or_else(|| panic!("not a ClientHello: {record:02x?}"))
}

/// The `client` route lists P-384 after the hybrid, X25519 and P-256, but
/// sends key shares for the hybrid and X25519 only, as before P-384 was
/// added: a P-384 server costs a HelloRetryRequest, never every handshake
/// a bigger ClientHello. Prints the sizes (`--nocapture`).
#[tokio::test(flavor = "multi_thread")]
async fn client_hello_lists_p384_but_shares_only_the_hybrid_and_x25519() {
    for extra in [&[][..], &["--tls-min-version", "1.2"][..]] {
        let offer = client_hello(extra).await;
        println!("ClientHello {extra:?}: {} bytes, {offer:04x?}", offer.bytes);
        assert_eq!(
            offer.supported_groups,
            [X25519MLKEM768, X25519, SECP256R1, SECP384R1],
            "{extra:?}"
        );
        assert_eq!(offer.key_shares, [X25519MLKEM768, X25519], "{extra:?}");
    }
}

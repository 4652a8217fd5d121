//! The client side's own accounting: every way a client route's handshake
//! with the remote server can fail is counted under its own reason on that
//! route, a remote it cannot reach is counted as a connect failure, and
//! nothing of the local application's reaches a server that was refused.
//! (The refusals themselves, WARN lines and wire contents, are in
//! `refusals.rs`; TLS 1.2 against OpenSSL is in `interop.rs`.)

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::expo::Exposition;
use common::*;
use mtls_sidecar::pki::{LeafSpec, Role};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::PrivateKeyDer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const FAILURES: &str = "mtls_sidecar_tls_handshake_failures_total";
const HANDSHAKES: &str = "mtls_sidecar_tls_handshakes_total";
const CONNECT_FAILURES: &str = "mtls_sidecar_target_connect_failures_total";

const REASONS: [&str; 8] = [
    "no_client_cert",
    "unknown_ca",
    "bad_san",
    "expired",
    "not_tls",
    "timeout",
    "protocol",
    "io",
];

/// A remote "server sidecar" that misbehaves one way, on every connection.
enum Remote {
    /// A TLS server with this config; what it accepts, it echoes.
    Tls(Arc<rustls::ServerConfig>),
    /// Answers in plaintext and closes.
    Plaintext,
    /// Accepts and never says a word.
    Silent,
    /// Accepts and closes at once.
    Hangup,
}

/// Serves `remote` on a loopback port; returns its address.
async fn serve(remote: Remote) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let remote = Arc::new(remote);
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((mut s, _)) = listener.accept().await {
            match &*remote {
                Remote::Tls(cfg) => {
                    let acceptor = tokio_rustls::TlsAcceptor::from(cfg.clone());
                    tokio::spawn(async move {
                        if let Ok(mut tls) = acceptor.accept(s).await {
                            let mut buf = [0u8; 1024];
                            while let Ok(n) = tls.read(&mut buf).await {
                                if n == 0 || tls.write_all(&buf[..n]).await.is_err() {
                                    break;
                                }
                            }
                        }
                    });
                }
                Remote::Plaintext => {
                    let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
                }
                Remote::Silent => held.push(s),
                Remote::Hangup => drop(s),
            }
        }
    });
    addr
}

/// A server config presenting `ident` with only TLS 1.2, requiring a
/// client certificate from `client_ca`.
fn tls12_server(ident: &mtls_sidecar::pki::Issued, client_ca: &str) -> Arc<rustls::ServerConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(client_ca.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .unwrap();
    Arc::new(
        rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS12])
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(
                vec![ident.cert_der.clone()],
                PrivateKeyDer::from_pem_slice(ident.key_pem.as_bytes()).unwrap(),
            )
            .unwrap(),
    )
}

/// One client route of the process: its name, where it connects, the
/// failure it must count (`None`: it must succeed), and extra TOML keys.
struct Case {
    route: &'static str,
    target: String,
    reason: Option<&'static str>,
    extra: &'static str,
}

/// Every failure series of every route: (route, reason) → value.
fn failures(
    m: &Exposition,
    routes: &[&'static str],
) -> BTreeMap<(&'static str, &'static str), f64> {
    let mut all = BTreeMap::new();
    for route in routes {
        for reason in REASONS {
            let v = m.get(FAILURES, &[("route", route), ("reason", reason)]);
            all.insert((*route, reason), v);
        }
    }
    all
}

/// One client sidecar process, one client route per way to fail (and a
/// good one as the control), all on one `/metrics`: each connection's
/// failure moves exactly its own route's series for its own reason.
#[tokio::test(flavor = "multi_thread")]
async fn each_client_side_failure_is_counted_under_its_own_reason() {
    let creds = Creds::new();
    let pki = &creds.pki;
    let ca = &pki.ca.cert_pem;
    let foreign = Pki::new("foreign CA");
    let now = std::time::SystemTime::now();
    let day = std::time::Duration::from_secs(86_400);
    let expired =
        pki.issue(&LeafSpec::dns(REPLICA, Role::Server, 1).valid(now - 2 * day, now - day));
    let echo = echo_target().await;
    let good_server = start_server(&creds.server_dir, &echo.addr.to_string(), &[]).await;
    // A socket file nobody listens on: connecting is refused at once.
    let nobody = creds.tmp.path().join("nobody.sock");
    drop(std::os::unix::net::UnixListener::bind(&nobody).unwrap());

    let tls = |ident: &mtls_sidecar::pki::Issued, client_ca: &str| {
        Remote::Tls(server_config(ident, Some(client_ca)))
    };
    let cases = [
        Case {
            route: "good",
            target: good_server.addr("server"),
            reason: None,
            extra: "",
        },
        Case {
            route: "wrong_san",
            target: serve(tls(&pki.leaf("replica-1.env-1.svc", Role::Server), ca)).await,
            reason: Some("bad_san"),
            extra: "",
        },
        Case {
            route: "foreign_ca",
            target: serve(tls(&foreign.leaf(REPLICA, Role::Server), ca)).await,
            reason: Some("unknown_ca"),
            extra: "",
        },
        Case {
            route: "expired",
            target: serve(tls(&expired, ca)).await,
            reason: Some("expired"),
            extra: "",
        },
        Case {
            // TLS 1.2 only, while the client offers 1.3 only by default.
            route: "tls12_only",
            target: serve(Remote::Tls(tls12_server(&creds.replica, ca))).await,
            reason: Some("protocol"),
            extra: "",
        },
        Case {
            // The right server, which refuses our certificate (it trusts
            // another CA for clients). Over TLS 1.2 the refusal comes
            // inside the handshake, as an alert.
            route: "refuses_us",
            target: serve(Remote::Tls(tls12_server(
                &creds.replica,
                &foreign.ca.cert_pem,
            )))
            .await,
            reason: Some("protocol"),
            extra: "tls_min_version = \"1.2\"",
        },
        Case {
            route: "plaintext",
            target: serve(Remote::Plaintext).await,
            reason: Some("not_tls"),
            extra: "",
        },
        Case {
            route: "silent",
            target: serve(Remote::Silent).await,
            reason: Some("timeout"),
            extra: "handshake_timeout = \"1s\"",
        },
        Case {
            route: "hangup",
            target: serve(Remote::Hangup).await,
            reason: Some("io"),
            extra: "",
        },
        Case {
            route: "unreachable",
            target: format!("unix:{}", nobody.display()),
            reason: None,
            extra: "",
        },
    ];
    let mut config = format!(
        "tls_dir = \"{}\"\nadmin = \"127.0.0.1:0\"\n",
        creds.client_dir.display()
    );
    for c in &cases {
        config += &format!(
            "[[route]]\nname = \"{}\"\nmode = \"client\"\nlisten = \"127.0.0.1:0\"\n\
             target = \"{}\"\nserver_name = \"{REPLICA}\"\n{}\n",
            c.route, c.target, c.extra
        );
    }
    let path = creds.tmp.path().join("clients.toml");
    std::fs::write(&path, config).unwrap();
    let sc = Sidecar::start(&["run", "--config", path.to_str().unwrap()], cases.len()).await;
    sc.wait_log(&["admin endpoint listening"]).await;
    let admin = sc.admin();
    let routes: Vec<&'static str> = cases.iter().map(|c| c.route).collect();

    let m = scrape(&admin).await;
    let mut before = failures(&m, &routes);
    assert!(before.values().all(|v| *v == 0.0), "{before:?}");
    for c in &cases {
        let mut app = TcpStream::connect(sc.addr(c.route)).await.unwrap();
        app.write_all(b"from the application").await.unwrap();
        let r = [("route", c.route)];
        let m = match (c.route, c.reason) {
            ("good", _) => {
                let mut buf = [0u8; 20];
                tokio::time::timeout(DEADLINE, app.read_exact(&mut buf))
                    .await
                    .expect("the control is echoed")
                    .unwrap();
                assert_eq!(&buf, b"from the application");
                scrape_until(&admin, "the good handshake", |m| {
                    m.get(HANDSHAKES, &r) == 1.0
                })
                .await
            }
            ("unreachable", _) => {
                assert!(read_until_closed(&mut app).await.is_empty());
                let m = scrape_until(&admin, "the connect failure", |m| {
                    m.get(CONNECT_FAILURES, &r) == 1.0
                })
                .await;
                let closed = [("route", c.route), ("reason", "target_error")];
                assert_eq!(m.get(CLOSED, &closed), 1.0);
                m
            }
            (_, Some(reason)) => {
                // Refused: the application is closed on, having got nothing.
                assert!(read_until_closed(&mut app).await.is_empty(), "{}", c.route);
                let series = [("route", c.route), ("reason", reason)];
                scrape_until(&admin, &format!("{} counted", c.route), |m| {
                    m.get(FAILURES, &series) == 1.0
                })
                .await
            }
            _ => unreachable!(),
        };
        let after = failures(&m, &routes);
        let moved: BTreeMap<_, _> = after
            .iter()
            .map(|(k, v)| (*k, v - before[k]))
            .filter(|(_, d)| *d != 0.0)
            .collect();
        let want = match c.reason {
            Some(reason) => BTreeMap::from([((c.route, reason), 1.0)]),
            None => BTreeMap::new(),
        };
        assert_eq!(moved, want, "{}:\n{}", c.route, sc.logs().join("\n"));
        before = after;
    }
    let m = scrape(&admin).await;
    for c in &cases {
        let r = [("route", c.route)];
        let ok = if c.route == "good" { 1.0 } else { 0.0 };
        assert_eq!(m.get(HANDSHAKES, &r), ok, "{}", c.route);
        let connect = if c.route == "unreachable" { 1.0 } else { 0.0 };
        assert_eq!(m.get(CONNECT_FAILURES, &r), connect, "{}", c.route);
    }
    // Only the control reached a target.
    assert_eq!(echo.accepted(), 1);
}

/// Every close reason of one route, summed.
fn closes(m: &Exposition, route: &str) -> f64 {
    m.series(CLOSED)
        .iter()
        .filter(|s| s.labels.get("route").map(String::as_str) == Some(route))
        .map(|s| s.value)
        .sum()
}

/// Sends a ping through the route and waits for its echo.
async fn ping(app: &mut TcpStream) {
    app.write_all(b"ping").await.unwrap();
    let mut buf = [0u8; 4];
    tokio::time::timeout(DEADLINE, app.read_exact(&mut buf))
        .await
        .expect("echoed in time")
        .unwrap();
    assert_eq!(&buf, b"ping");
}

/// The route's completed handshakes.
fn completed(m: &Exposition, route: &str) -> f64 {
    m.get(HANDSHAKES, &[("route", route)])
}

/// A server with the right identity that trusts another CA for its
/// clients refuses our certificate. Whenever the refusal arrives (inside
/// the handshake over TLS 1.2, after ours finished over TLS 1.3), the
/// route counts one `protocol` failure and logs one WARN naming the route,
/// the server and its alert; it counts no completed handshake and no
/// closed connection (docs/troubleshooting.md: `protocol`, any other TLS
/// alert; every refusal a WARN), and the application gets nothing.
async fn refused_by_the_server(server: fn(&Creds, &str) -> Remote, extra: &[&str]) {
    let creds = Creds::new();
    let foreign = Pki::new("foreign CA");
    let remote = serve(server(&creds, &foreign.ca.cert_pem)).await;
    let mut args = vec!["--admin", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let sc = start_client(&creds.client_dir, &remote, &args).await;
    let mut app = TcpStream::connect(sc.addr("client")).await.unwrap();
    app.write_all(b"from the application").await.unwrap();
    assert!(read_until_closed(&mut app).await.is_empty());
    let line = sc
        .wait_field("handshake refused", "reason", "protocol")
        .await;
    assert!(line.contains(" WARN "), "{line}");
    assert_eq!(field(&line, "route"), "client", "{line}");
    assert_eq!(field(&line, "peer"), remote, "{line}");
    // The verifier refuses an unknown issuer with an unknown_ca alert.
    assert!(line.contains("fatal alert: UnknownCA"), "{line}");
    let series = [("route", "client"), ("reason", "protocol")];
    let m = scrape_until(&sc.admin(), "the refusal counted", |m| {
        m.get(FAILURES, &series) == 1.0
    })
    .await;
    let all = failures(&m, &["client"]);
    assert_eq!(all.values().sum::<f64>(), 1.0, "{all:?}");
    assert_eq!(completed(&m, "client"), 0.0);
    assert_eq!(closes(&m, "client"), 0.0, "{:#?}", m.samples);
    assert_eq!(sc.warn_lines(&["handshake refused"]).len(), 1);
}

/// Over TLS 1.3 the client finishes its handshake before the server has
/// judged the client certificate, so a server that refuses ours says so
/// only with an alert after it. That is still a refused handshake.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_refusing_our_certificate_over_tls13_is_a_protocol_failure() {
    refused_by_the_server(
        |creds, client_ca| Remote::Tls(server_config(&creds.replica, Some(client_ca))),
        &[],
    )
    .await;
}

/// The same refusal from a TLS 1.2-only server comes inside the handshake;
/// it ends the same way.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_refusing_our_certificate_over_tls12_is_a_protocol_failure() {
    refused_by_the_server(
        |creds, client_ca| Remote::Tls(tls12_server(&creds.replica, client_ca)),
        &["--tls-min-version", "1.2"],
    )
    .await;
}

/// Against a server sidecar (which sends no session ticket), a client
/// route's handshake counts as completed once the server has shown that it
/// accepted us, never before: on its first data, or when the connection
/// ends without a refusal; and only once.
#[tokio::test(flavor = "multi_thread")]
async fn a_client_route_counts_its_handshake_once_the_server_accepted_it() {
    let creds = Creds::new();
    let echo = echo_target().await;
    let admin = ["--admin", "127.0.0.1:0"];
    let (server, client) = creds.pair(&echo.addr.to_string(), &admin, &admin).await;
    let (server_admin, client_admin) = (server.admin(), client.admin());

    // The server accepted us, and has sent nothing since: not yet counted.
    let mut app = TcpStream::connect(client.addr("client")).await.unwrap();
    scrape_until(&server_admin, "the server's handshake", |m| {
        completed(m, "server") == 1.0
    })
    .await;
    assert_eq!(completed(&scrape(&client_admin).await, "client"), 0.0);
    // Its first data shows it accepted us: counted while still open.
    ping(&mut app).await;
    scrape_until(
        &client_admin,
        "the handshake counted on the first data",
        |m| completed(m, "client") == 1.0,
    )
    .await;
    drop(app);
    let m = client.wait_closed("client", "completed", 1.0).await;
    assert_eq!(completed(&m, "client"), 1.0, "counted once");

    // Closed before the server said anything (the application resets):
    // no refusal, so the handshake counts as completed when it ends.
    let app = TcpStream::connect(client.addr("client")).await.unwrap();
    scrape_until(&server_admin, "the second server handshake", |m| {
        completed(m, "server") == 2.0
    })
    .await;
    assert_eq!(completed(&scrape(&client_admin).await, "client"), 1.0);
    app.set_zero_linger().unwrap();
    drop(app);
    let m = client.wait_closed("client", "peer_error", 1.0).await;
    assert_eq!(completed(&m, "client"), 2.0);
    assert_eq!(failures(&m, &["client"]).values().sum::<f64>(), 0.0);
    assert!(client.warn_lines(&["handshake refused"]).is_empty());
}

/// A TLS 1.3 server sends session tickets only once it has accepted the
/// client: the first one counts the handshake, before any data.
#[tokio::test(flavor = "multi_thread")]
async fn a_session_ticket_from_the_server_counts_the_handshake() {
    let creds = Creds::new();
    let ca = &creds.pki.ca.cert_pem;
    // rustls' defaults: two tickets after the client's Finished.
    let remote = serve(Remote::Tls(server_config(&creds.replica, Some(ca)))).await;
    let sc = start_client(&creds.client_dir, &remote, &["--admin", "127.0.0.1:0"]).await;
    let mut app = TcpStream::connect(sc.addr("client")).await.unwrap();
    scrape_until(&sc.admin(), "the handshake counted on a ticket", |m| {
        completed(m, "client") == 1.0
    })
    .await;
    // Still open, nothing exchanged yet: it was the ticket.
    ping(&mut app).await;
}

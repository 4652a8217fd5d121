//! Revocation through the real binary on loopback: an intermediate's CRL
//! (intermediates known from `--intermediates`) refuses that
//! intermediate's leaf inside the handshake; and one revision gives ONE
//! verdict everywhere: a certificate out of its issuer's CRL scope
//! (Issuing Distribution Point URI differing by letter case) is refused
//! as `revoked_status_unknown` by a server route's handshake, a client
//! route's handshake, live re-verification (the connection is closed),
//! `check` on that identity, and `/status` of a sidecar holding it; and a
//! CRL dated beyond the skew tolerance is held pending (WARN once, gauge,
//! `/status`), revoking nothing yet.

use crate::common;

use common::*;
use mtls_sidecar::pki::{serial_of, CrlIdp, CrlSpec, DevCa, Issued, LeafSpec, Role};
use mtls_sidecar::tools::atomic_writer::AtomicDir;

const HANDSHAKE_FAILURES: &str = "mtls_sidecar_tls_handshake_failures_total";

fn serial(l: &Issued) -> Vec<u8> {
    serial_of(&l.cert_der).expect("serial")
}

/// True when the server at `addr` refuses a client with `cfg`.
async fn refuses(addr: &str, cfg: std::sync::Arc<rustls::ClientConfig>) -> bool {
    match tls_connect(addr, REPLICA, cfg).await {
        Ok(mut s) => refused(&mut s).await,
        Err(_) => true,
    }
}

async fn failures(admin: &str, route: &str, reason: &str) -> f64 {
    let e = scrape(admin).await;
    e.value(HANDSHAKE_FAILURES, &[("route", route), ("reason", reason)])
        .unwrap_or(0.0)
}

/// Root → issuing CA → leaves; `ca.crt` holds the root only, the issuing
/// CA is given with `--intermediates`, and its CRL (verified at load with
/// that key) revokes one leaf: refused inside the handshake as `revoked`,
/// the other leaf of the same intermediate is admitted. Before: the
/// intermediate's CRL rejected the whole configuration ("no CA in ca.crt
/// has this name").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_intermediates_crl_refuses_its_leaf_at_the_handshake() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("e2e root");
    let issuing = pki.ca.intermediate("e2e issuing CA", 30).unwrap();
    let spec = || LeafSpec::dns(CONTROLLER, Role::Client, 30);
    let (bad, good) = (
        issuing.issue(&spec()).unwrap(),
        issuing.issue(&spec()).unwrap(),
    );
    let dir = pki.dir(tmp.path(), "replica", &pki.leaf(REPLICA, Role::Server));
    let crl = issuing
        .crl(&CrlSpec::new(1, vec![serial(&bad)], 7))
        .unwrap();
    std::fs::write(dir.join("issuing.crl"), &crl.pem).unwrap();
    std::fs::write(dir.join("issuing.pem"), &issuing.cert_pem).unwrap();
    let echo = echo_target().await;
    let p = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let sc = Sidecar::start(
        &[
            "server",
            "--listen",
            "127.0.0.1:0",
            "--target",
            &echo.addr.to_string(),
            "--cert",
            &p("tls.crt"),
            "--key",
            &p("tls.key"),
            "--ca",
            &p("ca.crt"),
            "--crl",
            &p("issuing.crl"),
            "--intermediates",
            &p("issuing.pem"),
            "--allow-san",
            CONTROLLER,
            "--admin",
            "127.0.0.1:0",
        ],
        1,
    )
    .await;
    let addr = sc.addr("server");
    let st = status(&sc.admin()).await;
    assert_eq!(st["credentials"][0]["crls"][0]["state"], "verified", "{st}");
    assert!(
        refuses(
            &addr,
            chain_client(&bad, &issuing.cert_pem, &pki.ca.cert_pem)
        )
        .await
    );
    sc.wait_field("handshake refused", "reason", "revoked")
        .await;
    let mut ok = tls_connect(
        &addr,
        REPLICA,
        chain_client(&good, &issuing.cert_pem, &pki.ca.cert_pem),
    )
    .await
    .expect("good leaf handshake");
    assert_eq!(roundtrip(&mut ok, b"hi").await, b"hi");
    assert_eq!(echo.accepted(), 1, "the revoked leaf reached the target");
    assert_eq!(failures(&sc.admin(), "server", "revoked").await, 1.0);
}

/// A leaf of `ca` whose CRL Distribution Point is `url`, for `name` in
/// both roles.
fn leaf_with_dp(ca: &DevCa, name: &str, url: &str) -> Issued {
    ca.issue_with_crl_urls(&LeafSpec::dns(name, Role::Both, 30), &[url])
        .unwrap()
}

fn write_dir(dir: &std::path::Path, me: &Issued, ca: &DevCa, crl: Option<&str>) {
    mtls_sidecar::pki::write_secret_dir(dir, me, &ca.cert_pem).unwrap();
    if let Some(c) = crl {
        std::fs::write(dir.join("ca.crl"), c).unwrap();
    }
}

/// One revision, one verdict: `revoked_status_unknown` from the server
/// route's handshake, the client route's handshake, live re-verification,
/// `check` and `/status`. Seen failing (admitted everywhere) with
/// `unknown_status` returning `Ok`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_revision_one_verdict_everywhere() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = DevCa::new("scoped CA", 30).unwrap();
    let covered = "http://crl.example/ca.crl";
    let other_case = "http://crl.example/CA.crl";
    let x_client = leaf_with_dp(&ca, CONTROLLER, other_case);
    let x_server = leaf_with_dp(&ca, REPLICA, other_case);
    let mut spec = CrlSpec::new(1, vec![serial(&x_client), serial(&x_server)], 7);
    spec.idp = Some(CrlIdp {
        urls: vec![covered.to_string()],
        ..Default::default()
    });
    let crl = ca.crl(&spec).unwrap().pem;
    let echo = echo_target().await;
    let target = echo.addr.to_string();

    // `/status` and `check` of the identity X (x_server) with the CRL.
    let x_dir = tmp.path().join("x");
    write_dir(&x_dir, &x_server, &ca, Some(&crl));
    let x_sidecar = start_server(&x_dir, &target, &["--admin", "127.0.0.1:0"]).await;
    let st = status(&x_sidecar.admin()).await;
    assert_eq!(
        st["credentials"][0]["identity_verdict"], "revoked_status_unknown",
        "{st}"
    );
    let (code, out) = run_bin(&["check", "--tls-dir", x_dir.to_str().unwrap()]);
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("revoked_status_unknown"), "{out}");

    // Server route handshake: x_client presented to the sidecar holding
    // the CRL.
    let server_addr = x_sidecar.addr("server");
    assert!(refuses(&server_addr, client_config(Some(&x_client), &ca.cert_pem)).await);
    x_sidecar
        .wait_field("handshake refused", "reason", "revoked_status_unknown")
        .await;
    assert_eq!(echo.accepted(), 0);

    // Client route handshake: a client sidecar with the CRL meets x_server.
    let c_dir = tmp.path().join("c");
    write_dir(
        &c_dir,
        &ca.issue(&LeafSpec::dns(CONTROLLER, Role::Client, 30))
            .unwrap(),
        &ca,
        Some(&crl),
    );
    let client = start_client(&c_dir, &server_addr, &["--admin", "127.0.0.1:0"]).await;
    let mut local = tokio::net::TcpStream::connect(client.addr("client"))
        .await
        .unwrap();
    assert!(read_until_closed(&mut local).await.is_empty());
    client
        .wait_field("handshake refused", "reason", "revoked_status_unknown")
        .await;
    assert_eq!(
        failures(&client.admin(), "client", "revoked_status_unknown").await,
        1.0
    );
    assert_eq!(echo.accepted(), 0, "the target was reached");

    // Live re-verification: admitted without a CRL, closed once it lands.
    let live_root = tmp.path().join("live");
    let live = AtomicDir::new(&live_root).unwrap();
    let me = ca.issue(&LeafSpec::dns(REPLICA, Role::Server, 30)).unwrap();
    let files = |crl: Option<&str>| {
        let mut f: Vec<(&str, Vec<u8>)> = vec![
            ("tls.crt", me.cert_pem.clone().into_bytes()),
            ("tls.key", me.key_pem.clone().into_bytes()),
            ("ca.crt", ca.cert_pem.clone().into_bytes()),
        ];
        if let Some(c) = crl {
            f.push(("ca.crl", c.as_bytes().to_vec()));
        }
        f
    };
    let publish = |crl: Option<&str>| {
        let f = files(crl);
        let refs: Vec<(&str, &[u8])> = f.iter().map(|(n, b)| (*n, b.as_slice())).collect();
        live.publish(&refs).unwrap();
    };
    publish(None);
    let sc = start_server(
        live.path(),
        &target,
        &["--reload-interval", "100ms", "--admin", "127.0.0.1:0"],
    )
    .await;
    let mut conn = tls_connect(
        &sc.addr("server"),
        REPLICA,
        client_config(Some(&x_client), &ca.cert_pem),
    )
    .await
    .expect("handshake before the CRL");
    assert_eq!(roundtrip(&mut conn, b"before").await, b"before");
    publish(Some(&crl));
    read_until_closed(&mut conn).await;
    let line = sc.wait_log(&["closing connection"]).await;
    assert!(line.contains("UnknownRevocationStatus"), "{line}");
    sc.wait_closed("server", "revoked", 1.0).await;
}

/// A CRL dated an hour ahead (beyond the 5-minute skew tolerance) does not
/// stop the sidecar: it is held pending (one WARN, the gauge, `/status`)
/// and revokes nothing yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_future_crl_is_held_pending_and_shown() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("pending CA");
    let peer = pki.leaf(CONTROLLER, Role::Client);
    let dir = pki.dir(tmp.path(), "replica", &pki.leaf(REPLICA, Role::Server));
    let now = std::time::SystemTime::now();
    let mut spec = CrlSpec::new(1, vec![serial(&peer)], 7);
    spec.this_update = now + std::time::Duration::from_secs(3600);
    spec.next_update = now + std::time::Duration::from_secs(7200);
    std::fs::write(dir.join("ca.crl"), pki.ca.crl(&spec).unwrap().pem).unwrap();
    let echo = echo_target().await;
    let sc = start_server(
        &dir,
        &echo.addr.to_string(),
        &["--admin", "127.0.0.1:0", "--reload-interval", "100ms"],
    )
    .await;
    sc.wait_log(&["CRL held pending"]).await;
    let admin = sc.admin();
    scrape_until(&admin, "the pending gauge", |m| {
        m.value("mtls_sidecar_crl_pending", &[]) == Some(1.0)
    })
    .await;
    let st = status(&admin).await;
    assert_eq!(st["credentials"][0]["crls"][0]["state"], "pending", "{st}");
    let mut s = tls_connect(
        &sc.addr("server"),
        REPLICA,
        client_config(Some(&peer), &pki.ca.cert_pem),
    )
    .await
    .expect("not revoked yet");
    assert_eq!(roundtrip(&mut s, b"hi").await, b"hi");
    assert_eq!(sc.log_count("CRL held pending"), 1, "{:#?}", sc.logs());
}

//! SAN options end to end, through a real server sidecar and a real client
//! sidecar: `--allow-any-san`, `*.suffix` and URI patterns in `--allow-san`
//! and `--expect-san`, the default expected SAN (`--server-name`, else the
//! target's host), and patterns that can never match refused at start-up
//! (exit 2 naming the flag, the pattern and the reason).
//!
//! Each refusal is checked the same way: the local application gets
//! nothing back, exactly one WARN line with reason `bad_san`, the
//! `bad_san` failure counter on `/metrics` at exactly 1, and the plaintext
//! target never connected to; then a positive control that differs in one
//! thing only (the certificate, or the one flag) gets through the very same
//! sidecar.

use crate::common;

use common::http;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use mtls_sidecar::identity::CertInfo;
use mtls_sidecar::pki::{Issued, LeafSpec, Role};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const FAILURES: &str = "mtls_sidecar_tls_handshake_failures_total";
const MSG: &[u8] = b"hello through the sidecars";
const TD: &str = "env-1.example";

/// A leaf for `cn` with exactly these DNS and URI SANs.
fn leaf(pki: &Pki, cn: &str, dns: &[&str], uris: &[&str], role: Role) -> Issued {
    let mut spec = LeafSpec::dns(cn, role, 30);
    spec.dns = dns.iter().map(|s| s.to_string()).collect();
    spec.uris = uris.iter().map(|s| s.to_string()).collect();
    pki.issue(&spec)
}

/// A Secret-style directory holding `leaf` under a fresh name in `root`.
fn dir(pki: &Pki, root: &Path, leaf: &Issued) -> PathBuf {
    let n = std::fs::read_dir(root).map(|d| d.count()).unwrap_or(0);
    pki.dir(root, &format!("id-{n}"), leaf)
}

/// `server` with an admin endpoint and exactly the SAN flags given.
async fn server(tls_dir: &Path, target: &str, san_flags: &[&str]) -> Sidecar {
    let d = tls_dir.to_str().unwrap();
    let mut args = vec![
        "server",
        "--listen",
        "127.0.0.1:0",
        "--target",
        target,
        "--tls-dir",
        d,
        "--admin",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(san_flags);
    Sidecar::start(&args, 1).await
}

/// `client` with an admin endpoint and exactly the name flags given.
async fn client(tls_dir: &Path, target: &str, name_flags: &[&str]) -> Sidecar {
    let d = tls_dir.to_str().unwrap();
    let mut args = vec![
        "client",
        "--listen",
        "127.0.0.1:0",
        "--target",
        target,
        "--tls-dir",
        d,
        "--admin",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(name_flags);
    Sidecar::start(&args, 1).await
}

/// The local application's view: write MSG into the client sidecar,
/// half-close, and read until the sidecar closes. The echo target sends MSG
/// back when the pair forwarded; a refusal yields nothing.
async fn exchange(client: &Sidecar) -> Vec<u8> {
    let mut app = TcpStream::connect(client.addr("client")).await.unwrap();
    app.write_all(MSG).await.unwrap();
    let _ = app.shutdown().await;
    read_until_closed(&mut app).await
}

async fn failures(sc: &Sidecar, route: &str, reason: &str) -> f64 {
    let a = http::request(&sc.admin(), "GET", "/metrics").await;
    assert_eq!(a.code, 200, "{}", a.body);
    let m = expo::Exposition::parse(&a.body).unwrap_or_else(|e| panic!("{e}\n{}", a.body));
    m.get(FAILURES, &[("route", route), ("reason", reason)])
}

/// Exactly one refusal on `route` of `sc`, at WARN with reason `reason`
/// and the SANs of `peer`, counted once on `/metrics`.
async fn assert_refused_once(sc: &Sidecar, route: &str, reason: &str, peer: &Issued) {
    let line = sc.wait_field("handshake refused", "reason", reason).await;
    assert!(line.contains(" WARN "), "not at WARN: {line}");
    assert!(has_field(&line, "route", route), "{line}");
    for san in CertInfo::parse(&peer.cert_der).unwrap().sans() {
        assert!(
            line.contains(&format!("{san:?}")),
            "{san} not logged: {line}"
        );
    }
    let deadline = Instant::now() + DEADLINE;
    while failures(sc, route, reason).await < 1.0 {
        assert!(Instant::now() < deadline, "{reason} never counted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(failures(sc, route, reason).await, 1.0);
    let refusals = sc.warn_lines(&["handshake refused"]);
    assert_eq!(refusals.len(), 1, "{refusals:#?}");
}

/// A server sidecar in front of an echo target with `san_flags`; the client
/// sidecars that talk to it present one identity each.
struct ServerUnderTest {
    tmp: tempfile::TempDir,
    pki: Pki,
    echo: Echo,
    server: Sidecar,
}

impl ServerUnderTest {
    async fn start(san_flags: &[&str]) -> ServerUnderTest {
        let tmp = tempfile::tempdir().unwrap();
        let pki = Pki::new("test CA");
        let sd = dir(&pki, tmp.path(), &pki.leaf(REPLICA, Role::Server));
        let echo = echo_target().await;
        let server = server(&sd, &echo.addr.to_string(), san_flags).await;
        ServerUnderTest {
            tmp,
            pki,
            echo,
            server,
        }
    }

    /// A client sidecar presenting `ident`, expecting the replica.
    async fn client_as(&self, ident: &Issued, ca_pem: &str) -> Sidecar {
        let d = self.tmp.path().join(format!(
            "client-{}",
            std::fs::read_dir(self.tmp.path()).unwrap().count()
        ));
        mtls_sidecar::pki::write_secret_dir(&d, ident, ca_pem).unwrap();
        client(&d, &self.server.addr("server"), &["--server-name", REPLICA]).await
    }

    /// `refused` is turned away with `reason` and never reaches the target;
    /// then `control`, differing from it in one thing, gets through.
    async fn refuses_then_admits(&self, refused: &Issued, reason: &str, control: &Issued) {
        let ca = self.pki.ca.cert_pem.clone();
        self.refuses(refused, &ca, reason).await;
        self.admits(control).await;
        assert_eq!(self.server.warn_lines(&["handshake refused"]).len(), 1);
    }

    async fn refuses(&self, ident: &Issued, ca_pem: &str, reason: &str) {
        let c = self.client_as(ident, ca_pem).await;
        assert_eq!(exchange(&c).await, b"", "a refused peer got an answer");
        assert_refused_once(&self.server, "server", reason, ident).await;
        assert_eq!(self.echo.accepted(), 0, "the target saw a refused peer");
    }

    async fn admits(&self, ident: &Issued) {
        let before = self.echo.accepted();
        let c = self.client_as(ident, &self.pki.ca.cert_pem).await;
        assert_eq!(exchange(&c).await, MSG, "the control did not get through");
        assert_eq!(self.echo.accepted(), before + 1);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn allow_any_san_admits_any_client_of_the_ca_and_warns() {
    // The same client identity, a name on nobody's allow-list, against two
    // servers that differ only in --allow-any-san versus --allow-san.
    let pinned = ServerUnderTest::start(&["--allow-san", CONTROLLER]).await;
    let stranger = leaf(
        &pinned.pki,
        "batch-job",
        &["batch-job.env-9.svc"],
        &[],
        Role::Client,
    );
    let ca = pinned.pki.ca.cert_pem.clone();
    pinned.refuses(&stranger, &ca, "bad_san").await;
    assert_eq!(pinned.server.log_count("--allow-any-san"), 0);

    let open = ServerUnderTest::start(&["--allow-any-san"]).await;
    let warn = open.server.wait_log(&["--allow-any-san"]).await;
    assert!(warn.contains(" WARN "), "{warn}");
    assert!(has_field(&warn, "route", "server"), "{warn}");
    let stranger = leaf(
        &open.pki,
        "batch-job",
        &["batch-job.env-9.svc"],
        &[],
        Role::Client,
    );
    open.admits(&stranger).await;
    // Still only certificates from the trusted CA.
    let foreign = Pki::new("foreign CA");
    let impostor = leaf(
        &foreign,
        "batch-job",
        &["batch-job.env-9.svc"],
        &[],
        Role::Client,
    );
    // Its own sidecar trusts both CAs (it must chain its own identity).
    let both = format!("{}{}", foreign.ca.cert_pem, open.pki.ca.cert_pem);
    let c = open.client_as(&impostor, &both).await;
    assert_eq!(exchange(&c).await, b"");
    assert_refused_once(&open.server, "server", "unknown_ca", &impostor).await;
    assert_eq!(failures(&open.server, "server", "bad_san").await, 0.0);
    assert_eq!(open.echo.accepted(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn wildcard_allow_san_admits_one_label_not_two() {
    let srv = ServerUnderTest::start(&["--allow-san", "*.controllers.env-1.svc"]).await;
    let two = "a.c-0.controllers.env-1.svc";
    let one = "c-0.controllers.env-1.svc";
    let refused = leaf(&srv.pki, "controller", &[two], &[], Role::Client);
    let control = leaf(&srv.pki, "controller", &[one], &[], Role::Client);
    srv.refuses_then_admits(&refused, "bad_san", &control).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn uri_allow_san_star_is_exactly_one_segment() {
    let srv =
        ServerUnderTest::start(&["--allow-san", "spiffe://env-1.example/ns/*/sa/controller"]).await;
    // Both carry the same DNS SAN (not allowed); only the URI differs.
    let dns = ["workload.env-1.svc"];
    let two = format!("spiffe://{TD}/ns/prod/extra/sa/controller");
    let one = format!("spiffe://{TD}/ns/prod/sa/controller");
    let refused = leaf(&srv.pki, "controller", &dns, &[&two], Role::Client);
    let control = leaf(&srv.pki, "controller", &dns, &[&one], Role::Client);
    srv.refuses_then_admits(&refused, "bad_san", &control).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn uri_allow_san_double_star_needs_a_path_under_the_prefix() {
    let srv = ServerUnderTest::start(&["--allow-san", "spiffe://env-1.example/**"]).await;
    let bare = format!("spiffe://{TD}");
    let under = format!("spiffe://{TD}/ns/prod/sa/controller");
    let refused = leaf(&srv.pki, "controller", &[], &[&bare], Role::Client);
    let control = leaf(&srv.pki, "controller", &[], &[&under], Role::Client);
    srv.refuses_then_admits(&refused, "bad_san", &control).await;
}

/// Two server sidecars, identical but for their certificate, each in front
/// of its own echo target, and two client sidecars with the same
/// `name_flags` (one per server). The first pair must refuse, the second
/// forward.
async fn client_refuses_then_admits(
    name_flags: &[&str],
    target_host: &str,
    refused: impl Fn(&Pki) -> Issued,
    control: impl Fn(&Pki) -> Issued,
) {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("test CA");
    let cd = dir(&pki, tmp.path(), &pki.leaf(CONTROLLER, Role::Client));
    let allow = ["--allow-san", CONTROLLER];

    let bad_echo = echo_target().await;
    let bad = refused(&pki);
    let bad_dir = dir(&pki, tmp.path(), &bad);
    let bad_server = server(&bad_dir, &bad_echo.addr.to_string(), &allow).await;
    let port = bad_server
        .addr("server")
        .rsplit_once(':')
        .unwrap()
        .1
        .to_string();
    let c = client(&cd, &format!("{target_host}:{port}"), name_flags).await;
    assert_eq!(exchange(&c).await, b"", "the app got an answer");
    assert_refused_once(&c, "client", "bad_san", &bad).await;
    assert_eq!(bad_echo.accepted(), 0, "the target saw a refused server");

    let good_echo = echo_target().await;
    let good_dir = dir(&pki, tmp.path(), &control(&pki));
    let good_server = server(&good_dir, &good_echo.addr.to_string(), &allow).await;
    let port = good_server
        .addr("server")
        .rsplit_once(':')
        .unwrap()
        .1
        .to_string();
    let c = client(&cd, &format!("{target_host}:{port}"), name_flags).await;
    assert_eq!(exchange(&c).await, MSG, "the control did not get through");
    assert_eq!(good_echo.accepted(), 1);
    assert!(c.warn_lines(&["handshake refused"]).is_empty());
    assert_eq!(failures(&c, "client", "bad_san").await, 0.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn default_expected_san_is_the_server_name() {
    client_refuses_then_admits(
        &["--server-name", REPLICA],
        "127.0.0.1",
        |pki| pki.leaf("replica-1.env-1.svc", Role::Server),
        |pki| pki.leaf(REPLICA, Role::Server),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn default_expected_san_is_the_target_host() {
    // No --server-name, no --expect-san: the target's host names the peer.
    client_refuses_then_admits(
        &[],
        "localhost",
        |pki| pki.leaf(REPLICA, Role::Server),
        |pki| pki.leaf("localhost", Role::Server),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn expect_san_uri_replaces_the_server_name() {
    // Both servers carry the server name as a DNS SAN; --expect-san asks for
    // the SPIFFE ID instead, which only the control has.
    let want = format!("spiffe://{TD}/ns/env-1/sa/replica");
    let other = format!("spiffe://{TD}/ns/env-1/sa/replica-evil");
    client_refuses_then_admits(
        &["--server-name", REPLICA, "--expect-san", &want],
        "127.0.0.1",
        |pki| leaf(pki, REPLICA, &[REPLICA], &[&other], Role::Server),
        |pki| leaf(pki, REPLICA, &[REPLICA], &[&want], Role::Server),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn expect_san_wildcard_takes_one_label() {
    client_refuses_then_admits(
        &[
            "--server-name",
            "replicas.env-1.svc",
            "--expect-san",
            "*.replicas.env-1.svc",
        ],
        "127.0.0.1",
        |pki| pki.leaf("replicas.env-1.svc", Role::Server),
        |pki| pki.leaf("replica-0.replicas.env-1.svc", Role::Server),
    )
    .await;
}

/// Runs the binary with `args`; it must exit 2 at once, naming `flag`, the
/// pattern and `why`.
fn refused_at_start(args: &[&str], flag: &str, pattern: &str, why: &str) {
    let (code, text) = run_bin_within(args, DEADLINE)
        .unwrap_or_else(|| panic!("started with {flag} {pattern:?} (it can never match)"));
    assert_eq!(code, 2, "{flag} {pattern:?}: {text}");
    assert!(text.contains(flag), "{flag} not named: {text}");
    assert!(
        text.contains(&format!("{pattern:?}")),
        "{pattern:?} not named: {text}"
    );
    assert!(text.contains(why), "{pattern:?}: no {why:?} in {text}");
}

/// `(pattern, reason)`: each was once accepted and then never matched.
const NEVER_MATCH: [(&str, &str); 10] = [
    ("x.svc.", "trailing '.'"),
    ("*.svc.", "trailing '.'"),
    ("name.", "trailing '.'"),
    ("ctl_1.svc", "a-z, 0-9 and '-'"),
    ("spiffe://td/ns/a/", "empty path segment"),
    ("spiffe://td/ns/../sa/x", "dot segment"),
    ("spiffe://td:8443/ns/a", "trust domain"),
    ("spiffe://td/ns/a?x=1", "query"),
    ("spiffe://td/ns/a%2Fb", "SPIFFE path segment"),
    ("https://", "authority"),
];

#[tokio::test(flavor = "multi_thread")]
async fn patterns_that_can_never_match_are_refused_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("test CA");
    let sd = dir(&pki, tmp.path(), &pki.leaf(REPLICA, Role::Server));
    let cd = dir(&pki, tmp.path(), &pki.leaf(CONTROLLER, Role::Client));
    let echo = echo_target().await;
    let target = echo.addr.to_string();
    let (sd, cd) = (sd.to_str().unwrap(), cd.to_str().unwrap());
    let server_args = |p: &'static str| {
        let args = [
            "server",
            "--listen",
            "127.0.0.1:0",
            "--target",
            &target,
            "--tls-dir",
            sd,
            "--allow-san",
            CONTROLLER,
            "--allow-san",
            p,
        ];
        args.map(str::to_string)
    };
    let client_args = |flag: &'static str, p: &'static str| {
        let args = [
            "client",
            "--listen",
            "127.0.0.1:0",
            "--target",
            &target,
            "--tls-dir",
            cd,
            flag,
            p,
        ];
        args.map(str::to_string)
    };
    for (p, why) in NEVER_MATCH {
        let a = server_args(p);
        refused_at_start(&a.each_ref().map(String::as_str), "--allow-san", p, why);
        let a = client_args("--expect-san", p);
        refused_at_start(&a.each_ref().map(String::as_str), "--expect-san", p, why);
    }
    for (p, why) in [
        ("x.svc.", "trailing '.'"),
        ("ctl_1.svc", "a-z, 0-9 and '-'"),
    ] {
        let a = client_args("--server-name", p);
        refused_at_start(&a.each_ref().map(String::as_str), "--server-name", p, why);
    }
    // Positive control: the same command lines with a pattern that can match.
    let a = server_args("x.svc");
    Sidecar::start(&a.each_ref().map(String::as_str), 1).await;
    let a = client_args("--expect-san", "spiffe://td/ns/a/**");
    Sidecar::start(&a.each_ref().map(String::as_str), 1).await;
    let a = client_args("--server-name", "x.svc");
    Sidecar::start(&a.each_ref().map(String::as_str), 1).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn config_file_patterns_are_validated_too() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("test CA");
    let sd = dir(&pki, tmp.path(), &pki.leaf(REPLICA, Role::Server));
    let cfg = tmp.path().join("sidecar.toml");
    let write = |pattern: &str| {
        std::fs::write(
            &cfg,
            format!(
                "tls_dir = {:?}\n\n[[route]]\nname = \"r\"\nmode = \"server\"\n\
                 listen = \"127.0.0.1:0\"\ntarget = \"127.0.0.1:9\"\nallow_san = [{pattern:?}]\n",
                sd.to_str().unwrap()
            ),
        )
        .unwrap();
    };
    write("*.svc.");
    let args = ["run", "--config", cfg.to_str().unwrap()];
    refused_at_start(&args, "allow_san", "*.svc.", "trailing '.'");
    write("*.env-1.svc");
    Sidecar::start(&args, 1).await;
}

//! The admin endpoint of the real binary, over real HTTP: the metrics
//! contract (names, types, label sets, zero series from start-up), one
//! handshake-failure series per induced failure, byte counts, readiness
//! through an expiring identity, `/status`, a Unix socket, and the `health`
//! probe. (Readiness through a drain is in `process.rs`, with the drain.)

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use common::expo::Exposition;
use common::*;
use mtls_sidecar::pki::{LeafSpec, Role};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const FAILURES: &str = "mtls_sidecar_tls_handshake_failures_total";
const HANDSHAKES: &str = "mtls_sidecar_tls_handshakes_total";
const DURATION: &str = "mtls_sidecar_tls_handshake_duration_seconds";
const BYTES: &str = "mtls_sidecar_bytes_total";
const CLOSED: &str = "mtls_sidecar_connections_closed_total";
const ACTIVE: &str = "mtls_sidecar_connections_active";
const CONNECTIONS: &str = "mtls_sidecar_connections_total";
const RELOADS: &str = "mtls_sidecar_credential_reloads_total";
const NOT_AFTER: &str = "mtls_sidecar_cert_not_after_timestamp_seconds";

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

/// The metrics contract (docs/metrics.md): name, type, label names.
const CONTRACT: [(&str, &str, &[&str]); 10] = [
    (HANDSHAKES, "counter", &["route"]),
    (FAILURES, "counter", &["route", "reason"]),
    (DURATION, "histogram", &["route"]),
    (ACTIVE, "gauge", &["route"]),
    (CONNECTIONS, "counter", &["route"]),
    (CLOSED, "counter", &["route", "reason"]),
    (BYTES, "counter", &["route", "direction"]),
    (
        "mtls_sidecar_target_connect_failures_total",
        "counter",
        &["route"],
    ),
    (RELOADS, "counter", &["result"]),
    (NOT_AFTER, "gauge", &["cert"]),
];

/// Every metric in the contract has its `# TYPE`, a help text, and only
/// series with exactly the contract's label names.
fn assert_contract(m: &Exposition) {
    for (name, ty, labels) in CONTRACT {
        assert_eq!(m.types.get(name).map(String::as_str), Some(ty), "{name}");
        assert!(
            m.helps.get(name).is_some_and(|h| !h.is_empty()),
            "{name} help"
        );
        let sample = if ty == "histogram" {
            format!("{name}_count")
        } else {
            name.to_string()
        };
        let series = m.series(&sample);
        assert!(!series.is_empty(), "{sample} has no series");
        for s in series {
            let got: Vec<&str> = s.labels.keys().map(String::as_str).collect();
            let mut want = labels.to_vec();
            want.sort_unstable();
            assert_eq!(got, want, "{sample} labels");
        }
    }
}

fn failures(m: &Exposition, route: &str) -> BTreeMap<&'static str, f64> {
    REASONS
        .iter()
        .map(|r| (*r, m.get(FAILURES, &[("route", route), ("reason", r)])))
        .collect()
}

/// Every failure series of both routes: (route, reason) → value.
fn all_failures(m: &Exposition) -> BTreeMap<(&'static str, &'static str), f64> {
    [ROUTE, QUICK]
        .iter()
        .flat_map(|route| {
            failures(m, route)
                .into_iter()
                .map(move |(reason, v)| ((*route, reason), v))
        })
        .collect()
}

/// Reads until the server closes the connection.
async fn until_closed(mut s: TcpStream) {
    let mut buf = [0u8; 1024];
    let closed = async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(DEADLINE, closed)
        .await
        .expect("server closed the connection");
}

async fn tls_refused(addr: &str, cfg: std::sync::Arc<rustls::ClientConfig>) {
    if let Ok(mut s) = tls_connect(addr, REPLICA, cfg).await {
        assert!(refused(&mut s).await, "the server accepted us");
    }
}

/// Makes one handshake fail against the server sidecar at `addr` for `reason`.
async fn induce(reason: &str, addr: &str, pki: &Pki) {
    let ca = &pki.ca.cert_pem;
    match reason {
        "no_client_cert" => tls_refused(addr, client_config(None, ca)).await,
        "unknown_ca" => {
            let rogue = Pki::new("rogue CA");
            let id = rogue.leaf(CONTROLLER, Role::Client);
            tls_refused(addr, client_config(Some(&id), ca)).await
        }
        "bad_san" => {
            let id = pki.leaf("intruder.env-1.svc", Role::Client);
            tls_refused(addr, client_config(Some(&id), ca)).await
        }
        "expired" => {
            let now = SystemTime::now();
            let day = Duration::from_secs(86_400);
            let spec = LeafSpec::dns(CONTROLLER, Role::Client, 1).valid(now - 2 * day, now - day);
            let id = pki.issue(&spec);
            tls_refused(addr, client_config(Some(&id), ca)).await
        }
        "not_tls" => {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(b"GET / HTTP/1.1\r\nHost: replica\r\n\r\n")
                .await
                .unwrap();
            until_closed(s).await
        }
        "timeout" => until_closed(TcpStream::connect(addr).await.unwrap()).await,
        "protocol" => {
            let id = pki.leaf(CONTROLLER, Role::Client);
            let mut roots = rustls::RootCertStore::empty();
            roots.add(id_root(pki)).unwrap();
            let cfg = rustls::ClientConfig::builder_with_provider(provider())
                .with_protocol_versions(&[&rustls::version::TLS12])
                .unwrap()
                .with_root_certificates(roots)
                .with_client_auth_cert(
                    vec![id.cert_der.clone()],
                    rustls::pki_types::pem::PemObject::from_pem_slice(id.key_pem.as_bytes())
                        .unwrap(),
                )
                .unwrap();
            let r = tls_connect(addr, REPLICA, std::sync::Arc::new(cfg)).await;
            assert!(r.is_err(), "a TLS 1.2-only client got through");
        }
        "io" => {
            // A ClientHello record header promising 200 bytes, then EOF.
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(&[
                0x16, 0x03, 0x01, 0x00, 0xc8, 0x01, 0x00, 0x00, 0xc4, 0x03, 0x03,
            ])
            .await
            .unwrap();
            s.shutdown().await.unwrap();
            until_closed(s).await
        }
        other => panic!("no way to induce {other}"),
    }
}

fn id_root(pki: &Pki) -> rustls::pki_types::CertificateDer<'static> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::from_pem_slice(pki.ca.cert_pem.as_bytes()).unwrap()
}

/// A server sidecar in front of an echo target, admin on loopback.
async fn server(dir: &std::path::Path, echo: &Echo, extra: &[&str]) -> Sidecar {
    start_server(dir, &echo.addr.to_string(), extra).await
}

/// The route every reason but `timeout` is induced on: the default
/// handshake timeout, so a refusal slowed down by a loaded machine is
/// still refused for its own reason, not timed out.
const ROUTE: &str = "server";
/// The route `timeout` is induced on: a one-second handshake timeout.
const QUICK: &str = "quick";

/// One process with the two server routes above and an admin endpoint.
async fn two_routes(dir: &std::path::Path, echo: &Echo) -> Sidecar {
    let route = |name: &str, extra: &str| {
        format!(
            "[[route]]\nname = \"{name}\"\nmode = \"server\"\nlisten = \"127.0.0.1:0\"\n\
             target = \"{}\"\nallow_san = [\"{CONTROLLER}\"]\n{extra}\n",
            echo.addr
        )
    };
    let config = dir.with_file_name("two-routes.toml");
    std::fs::write(
        &config,
        format!(
            "tls_dir = \"{}\"\nadmin = \"127.0.0.1:0\"\n{}{}",
            dir.display(),
            route(ROUTE, ""),
            route(QUICK, "handshake_timeout = \"1s\""),
        ),
    )
    .unwrap();
    let sc = Sidecar::start(&["run", "--config", config.to_str().unwrap()], 2).await;
    sc.wait_log(&["admin endpoint listening"]).await;
    sc
}

#[tokio::test(flavor = "multi_thread")]
async fn each_failure_reason_moves_exactly_its_own_series() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("test CA");
    let dir = pki.dir(tmp.path(), "replica", &pki.leaf(REPLICA, Role::Server));
    let echo = echo_target().await;
    let sc = two_routes(&dir, &echo).await;
    let admin = sc.admin();

    let m = scrape(&admin).await;
    assert_contract(&m);
    let mut before = all_failures(&m);
    assert!(before.values().all(|v| *v == 0.0), "{before:?}");
    for result in ["applied", "rejected"] {
        assert_eq!(m.get(RELOADS, &[("result", result)]), 0.0);
    }
    for route in [ROUTE, QUICK] {
        for dir in ["to_target", "from_target"] {
            assert_eq!(m.get(BYTES, &[("route", route), ("direction", dir)]), 0.0);
        }
    }

    for reason in REASONS {
        let route = if reason == "timeout" { QUICK } else { ROUTE };
        induce(reason, &sc.addr(route), &pki).await;
        let total: f64 = before.values().sum::<f64>() + 1.0;
        let m = scrape_until(&admin, &format!("{reason} counted"), |m| {
            all_failures(m).values().sum::<f64>() >= total
        })
        .await;
        let after = all_failures(&m);
        let moved: BTreeMap<_, _> = after
            .iter()
            .map(|(k, v)| (*k, v - before[k]))
            .filter(|(_, d)| *d != 0.0)
            .collect();
        assert_eq!(
            moved,
            BTreeMap::from([((route, reason), 1.0)]),
            "inducing {reason}:\n{}",
            sc.logs().join("\n")
        );
        before = after;
    }

    let m = scrape(&admin).await;
    assert_eq!(all_failures(&m), before, "a late count arrived");
    for (route, n) in [(ROUTE, 7.0), (QUICK, 1.0)] {
        let r = [("route", route)];
        assert_eq!(m.get(HANDSHAKES, &r), 0.0, "{route}");
        assert_eq!(m.get(CONNECTIONS, &r), n, "{route}");
        // Failed handshakes are timed too, in real histogram buckets.
        assert_eq!(m.get(&format!("{DURATION}_count"), &r), n, "{route}");
    }
    let buckets: Vec<_> = m
        .series(&format!("{DURATION}_bucket"))
        .into_iter()
        .filter(|s| s.labels["route"] == ROUTE)
        .collect();
    let les: Vec<&str> = buckets.iter().map(|s| s.labels["le"].as_str()).collect();
    for le in ["0.0001", "1", "10", "+Inf"] {
        assert!(les.contains(&le), "no le={le} bucket in {les:?}");
    }
    assert!(
        buckets.windows(2).all(|w| w[0].value <= w[1].value),
        "buckets are not cumulative"
    );
    assert_eq!(
        echo.accepted(),
        0,
        "an unauthenticated peer reached the target"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bytes_and_handshakes_are_counted_on_both_sidecars() {
    let admin = ["--admin", "127.0.0.1:0"];
    let pair = Pair::start(&admin, &admin).await;
    let mut s = pair.connect().await;
    let big: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(roundtrip(&mut s, &big).await, big);
    assert_eq!(
        roundtrip(&mut s, b"and a short one").await,
        b"and a short one"
    );
    let sent = (big.len() + 15) as f64;
    s.shutdown().await.unwrap();
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty());

    for (sc, route) in [(&pair.server, "server"), (&pair.client, "client")] {
        let r = [("route", route)];
        let m = scrape_until(&sc.admin(), &format!("{route} closed"), |m| {
            m.get(CLOSED, &[("route", route), ("reason", "completed")]) == 1.0
        })
        .await;
        assert_contract(&m);
        for dir in ["to_target", "from_target"] {
            let got = m.get(BYTES, &[("route", route), ("direction", dir)]);
            assert_eq!(got, sent, "{route} {dir}");
        }
        assert_eq!(m.get(HANDSHAKES, &r), 1.0, "{route}");
        assert_eq!(m.get(&format!("{DURATION}_count"), &r), 1.0, "{route}");
        assert_eq!(m.get(CONNECTIONS, &r), 1.0, "{route}");
        assert_eq!(m.get(ACTIVE, &r), 0.0, "{route}");
        assert!(failures(&m, route).values().all(|v| *v == 0.0), "{route}");
        // docs/logging.md: a connection both sides simply ended is logged
        // without a reason (kills `delete match arm CloseReason::Completed
        // in Route::supervise`, which logged `reason="completed"`).
        let route_field = format!("route={route}");
        let line = sc.wait_log(&["connection closed", &route_field]).await;
        assert!(!line.contains("reason="), "{line}");
    }
}

/// Whole seconds since the epoch (X.509 times have no finer grain).
fn epoch_secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs()
}

#[tokio::test(flavor = "multi_thread")]
async fn livez_stays_200_while_readyz_reports_the_expired_identity() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("test CA");
    let echo = echo_target().await;
    // The identity must still be valid when the sidecar starts (it refuses
    // to start with an expired one) and when it is first seen ready. A
    // machine too loaded for that gets a longer-lived identity next round.
    let mut left = Duration::from_secs(3);
    let (sc, not_after) = loop {
        assert!(
            left < DEADLINE,
            "could not start before the identity expired"
        );
        let now = SystemTime::now();
        let not_after = now + left;
        let leaf = pki.issue(&LeafSpec::dns(REPLICA, Role::Server, 1).valid(now - left, not_after));
        let dir = pki.dir(tmp.path(), &format!("replica-{}", left.as_secs()), &leaf);
        let args = [
            "server",
            "--listen",
            "127.0.0.1:0",
            "--target",
            &echo.addr.to_string(),
            "--tls-dir",
            dir.to_str().unwrap(),
            "--allow-san",
            CONTROLLER,
            "--admin",
            "127.0.0.1:0",
        ];
        left *= 2;
        let sc = match Sidecar::try_start(&args, 1).await {
            Ok(sc) => sc,
            Err((_, logs)) if logs.iter().any(|l| l.contains("expired")) => continue,
            Err((code, logs)) => panic!("exit {code:?}:\n{}", logs.join("\n")),
        };
        // Seen ready first: the 503 below is the expiry, not anything else.
        if get(&sc.admin(), "/readyz").await.code == 200 {
            break (sc, epoch_secs(not_after));
        }
    };
    let admin = sc.admin();

    let expired = get_until(&admin, "/readyz", 503).await;
    // Not before the certificate's last second is over.
    let seen = epoch_secs(SystemTime::now());
    assert!(
        seen > not_after,
        "503 at {seen}, the identity is valid through {not_after}"
    );
    assert!(
        expired.body.contains("identity certificate") && expired.body.contains("expired at"),
        "{}",
        expired.body
    );
    assert_eq!(expired.body.lines().count(), 1, "{}", expired.body);
    let live = get(&admin, "/livez").await;
    assert_eq!((live.code, live.body.as_str()), (200, "ok\n"));

    let st = status(&admin).await;
    assert_eq!(st["ready"], false);
    assert!(
        st["credentials"][0]["identity"]["expires_in_seconds"]
            .as_i64()
            .unwrap()
            < 0
    );
    // The gauge holds the notAfter this test issued, not merely what
    // /status says (both read the same parsed certificate).
    let m = scrape(&admin).await;
    assert_eq!(m.get(NOT_AFTER, &[("cert", "identity")]), not_after as f64);
    assert_eq!(
        epoch_secs(rfc3339(&st["credentials"][0]["identity"]["not_after"])),
        not_after
    );
}

fn rfc3339(v: &Value) -> SystemTime {
    humantime::parse_rfc3339(v.as_str().unwrap_or_else(|| panic!("not a time: {v}")))
        .unwrap_or_else(|e| panic!("{v}: {e}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn status_names_routes_credentials_and_the_rejected_revision() {
    let admin = ["--admin", "127.0.0.1:0"];
    let server_extra = ["--admin", "127.0.0.1:0", "--reload-interval", "50ms"];
    let pair = Pair::start(&server_extra, &admin).await;
    let mut live = pair.connect().await;
    assert_eq!(roundtrip(&mut live, b"hi").await, b"hi");
    let sadmin = pair.server.admin();

    let st = status(&sadmin).await;
    assert_eq!(st["ready"], true);
    assert_eq!(st["draining"], false);
    let route = &st["routes"][0];
    assert_eq!(st["routes"].as_array().unwrap().len(), 1);
    assert_eq!(route["name"], "server");
    assert_eq!(route["mode"], "server");
    assert_eq!(route["listen"], pair.server.addr("server"));
    assert_eq!(route["target"], pair.echo.addr.to_string());
    assert_eq!(route["allowed_sans"], serde_json::json!([CONTROLLER]));
    assert_eq!(route["live_connections"], 1);
    assert_eq!(route["http_identity"], "off");
    assert_eq!(route["resumption"], "off");
    let source = pair.server_dir.to_str().unwrap();
    assert_eq!(route["credentials"], source);

    let creds = &st["credentials"][0];
    assert_eq!(creds["source"], source);
    let revision = creds["revision"].as_str().unwrap().to_string();
    assert!(
        revision.len() == 64 && revision.chars().all(|c| c.is_ascii_hexdigit()),
        "{revision}"
    );
    let id = &creds["identity"];
    assert!(id["subject"].as_str().unwrap().contains(REPLICA), "{id}");
    assert_eq!(id["dns_sans"], serde_json::json!([REPLICA]));
    assert!(!id["serial"].as_str().unwrap().is_empty());
    let (nb, na) = (rfc3339(&id["not_before"]), rfc3339(&id["not_after"]));
    assert!(nb < SystemTime::now() && SystemTime::now() < na);
    let anchors = creds["trust_anchors"].as_array().unwrap();
    assert_eq!(anchors.len(), 1);
    assert!(anchors[0]["subject"].as_str().unwrap().contains("test CA"));
    assert!(rfc3339(&anchors[0]["not_after"]) > SystemTime::now());
    assert!(anchors[0]["retire_at"].is_null());
    rfc3339(&creds["last_poll"]);
    rfc3339(&creds["last_applied"]);
    assert!(creds["last_rejected"].is_null());

    let cst = status(&pair.client.admin()).await;
    let croute = &cst["routes"][0];
    assert_eq!(croute["mode"], "client");
    assert_eq!(croute["target"], pair.server.addr("server"));
    assert_eq!(croute["expected_sans"], serde_json::json!([REPLICA]));
    assert_eq!(croute["server_name"], REPLICA);
    assert!(croute.get("allowed_sans").is_none());
    assert_eq!(croute["resumption"], "off");

    // A broken revision is rejected and named; the good one stays in force.
    // Renamed into place, so the poller sees exactly one new revision.
    let tmp = pair.server_dir.join("tls.crt.new");
    std::fs::write(&tmp, "not a certificate\n").unwrap();
    std::fs::rename(&tmp, pair.server_dir.join("tls.crt")).unwrap();
    let deadline = Instant::now() + DEADLINE;
    let rejected = loop {
        let st = status(&sadmin).await;
        if !st["credentials"][0]["last_rejected"].is_null() {
            break st;
        }
        assert!(Instant::now() < deadline, "rejection never shown: {st}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let creds = &rejected["credentials"][0];
    assert_eq!(creds["revision"], revision.as_str());
    let last = &creds["last_rejected"];
    assert!(
        last["error"].as_str().unwrap().contains("tls.crt"),
        "{last}"
    );
    assert_ne!(last["revision"], revision.as_str());
    rfc3339(&last["at"]);
    let ready = get(&sadmin, "/readyz").await;
    assert_eq!(ready.code, 200);
    assert!(
        ready.body.starts_with("ready; ") && ready.body.contains("rejected"),
        "{}",
        ready.body
    );
    let m = scrape(&sadmin).await;
    assert_eq!(m.get(RELOADS, &[("result", "rejected")]), 1.0);
    assert_eq!(m.get(RELOADS, &[("result", "applied")]), 0.0);
    assert_eq!(roundtrip(&mut live, b"still up").await, b"still up");

    assert_eq!(get(&sadmin, "/nope").await.code, 404);
    assert_eq!(get(&sadmin, "/metrics/extra").await.code, 404);
    let head = http::request(&sadmin, "HEAD", "/readyz").await;
    assert_eq!(head.code, 200);
    assert!(head.body.is_empty());
    let post = http::request(&sadmin, "POST", "/status").await;
    assert_eq!(post.code, 405);
    assert_eq!(post.header("allow"), Some("GET, HEAD"));
}

#[tokio::test(flavor = "multi_thread")]
async fn admin_serves_on_a_unix_socket_and_health_probes_it() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("test CA");
    let dir = pki.dir(tmp.path(), "replica", &pki.leaf(REPLICA, Role::Server));
    let echo = echo_target().await;
    let sock = format!("unix:{}", tmp.path().join("admin.sock").display());
    let sc = server(&dir, &echo, &["--admin", &sock]).await;
    assert_eq!(sc.admin(), sock);

    assert_eq!(get(&sock, "/livez").await.code, 200);
    assert_contract(&scrape(&sock).await);
    assert_eq!(status(&sock).await["routes"][0]["name"], "server");

    let (code, out) = health(&["--admin", &sock]).await;
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(out.trim(), "HTTP/1.1 200 OK: ready");
    let (code, out) = health(&["--admin", &sock, "--path", "/missing"]).await;
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("404"), "{out}");
    let gone = format!("unix:{}", tmp.path().join("nobody.sock").display());
    let (code, out) = health(&["--admin", &gone]).await;
    assert_eq!(code, Some(1), "{out}");
    let (code, out) = health(&["--admin", "no-port"]).await;
    assert_eq!(code, Some(2), "{out}");
}

/// The admin endpoint serves `/connections` (every live peer's identity)
/// on a Unix socket: the socket file is created 0600 whatever the umask the
/// sidecar starts under (umask 000 here would leave it 0777, open to every
/// local user).
#[tokio::test(flavor = "multi_thread")]
async fn a_unix_socket_admin_endpoint_is_0600_under_any_umask() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("test CA");
    let dir = pki.dir(tmp.path(), "replica", &pki.leaf(REPLICA, Role::Server));
    let echo = echo_target().await;
    let path = tmp.path().join("admin.sock");
    let sock = format!("unix:{}", path.display());
    let target = echo.addr.to_string();
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.args(["-c", "umask 000; exec \"$@\"", "sh", &bin()])
        .args(["server", "--listen", "127.0.0.1:0", "--target", &target])
        .args([
            "--tls-dir",
            dir.to_str().unwrap(),
            "--allow-san",
            CONTROLLER,
        ])
        .args(["--admin", &sock])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let sc = Sidecar::from_command(cmd);
    sc.wait_log(&["admin endpoint listening"]).await;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "admin socket mode {mode:o}");
    // Still served to its own user.
    assert_eq!(get(&sock, "/livez").await.code, 200);
    assert_eq!(get(&sock, "/connections").await.code, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn health_gives_up_after_its_timeout() {
    // An admin address that accepts connections and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let _mute = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    for (timeout, shown) in [
        ("300ms", Duration::from_millis(300)),
        ("1s", Duration::from_secs(1)),
    ] {
        let started = Instant::now();
        let (code, out) = health(&["--admin", &addr, "--timeout", timeout]).await;
        let took = started.elapsed();
        assert_eq!(code, Some(1), "{out}");
        assert!(
            out.contains(&format!("no answer within {shown:?}")),
            "--timeout {timeout}: {out}"
        );
        assert!(took >= shown, "--timeout {timeout} gave up after {took:?}");
    }
    let (code, out) = health(&["--admin", &addr, "--timeout", "soon"]).await;
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("--timeout"), "{out}");
}

#[test]
fn parses_the_exposition_format() {
    let page = "# HELP a_total Things.\n# TYPE a_total counter\n\
                a_total{route=\"x\",reason=\"q\\\"uote\"} 3\n\
                # TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 0.5\nh_count 2 1700000000\n";
    let e = Exposition::parse(page).expect("parse");
    assert_eq!(
        e.get("a_total", &[("route", "x"), ("reason", "q\"uote")]),
        3.0
    );
    assert_eq!(e.value("a_total", &[("route", "x")]), None);
    assert_eq!(e.get("h_bucket", &[("le", "+Inf")]), 2.0);
    assert_eq!(e.family_type("h_count"), Some("histogram"));
    assert!(Exposition::parse("orphan 1\n").is_err());
    assert!(Exposition::parse("# TYPE a counter\na{x=\"1\" 1\n").is_err());
}

/// `/status` shows per route whether the verified identity goes to the
/// target in an HTTP header and whether sessions resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_http_identity_and_resumption_per_route() {
    let creds = Creds::new();
    let sc = start_server(
        &creds.server_dir,
        "127.0.0.1:9",
        &[
            "--admin",
            "127.0.0.1:0",
            "--http-identity",
            "xfcc",
            "--resumption",
        ],
    )
    .await;
    let route = &status(&sc.admin()).await["routes"][0];
    assert_eq!(route["http_identity"], "xfcc", "{route}");
    assert_eq!(route["resumption"], "on", "{route}");
}

//! Process-level behaviour: several routes from one config file sharing one
//! credential store, TLS policy, JSON logs, drain on SIGTERM and SIGINT
//! (server and client sidecars), and limits (max connections, running out
//! of file descriptors).

use crate::common;

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use mtls_sidecar::identity::CertInfo;
use mtls_sidecar::pki::Role;
use mtls_sidecar::tools::atomic_writer::AtomicDir;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

#[tokio::test(flavor = "multi_thread")]
async fn run_config_routes_share_one_store_and_one_rotation_covers_them() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("CA");
    // One identity that may act as both roles, as a process with a server
    // and a client route would hold.
    let both = |p: &Pki| {
        p.issue(&mtls_sidecar::pki::LeafSpec {
            dns: vec![REPLICA.into(), CONTROLLER.into()],
            ..mtls_sidecar::pki::LeafSpec::dns(REPLICA, Role::Both, 30)
        })
    };
    let dir = AtomicDir::new(&tmp.path().join("tls")).unwrap();
    let publish = |leaf: &mtls_sidecar::pki::Issued| {
        dir.publish(&[
            ("tls.crt", leaf.cert_pem.as_bytes()),
            ("tls.key", leaf.key_pem.as_bytes()),
            ("ca.crt", pki.ca.cert_pem.as_bytes()),
        ])
        .unwrap();
    };
    publish(&both(&pki));
    let echo = echo_target().await;
    // The client route must know the server route's address before either
    // starts: a socket path, not a TCP port reserved and released.
    let sock = tmp.path().join("replica.sock");
    let config = tmp.path().join("sidecar.toml");
    std::fs::write(
        &config,
        format!(
            r#"
tls_dir = "{dir}"
reload_interval = "100ms"
admin = "127.0.0.1:0"

[[route]]
name = "replica"
mode = "server"
listen = "unix:{sock}"
target = "{echo}"
allow_san = ["{CONTROLLER}"]

[[route]]
name = "controller"
mode = "client"
listen = "127.0.0.1:0"
target = "unix:{sock}"
server_name = "{REPLICA}"
"#,
            dir = dir.path().display(),
            sock = sock.display(),
            echo = echo.addr,
        ),
    )
    .unwrap();
    let sc = Sidecar::start(&["run", "--config", config.to_str().unwrap()], 2).await;
    sc.wait_log(&["admin endpoint listening"]).await;
    let mut s = TcpStream::connect(sc.addr("controller")).await.unwrap();
    assert_eq!(
        roundtrip(&mut s, b"through both routes").await,
        b"through both routes"
    );
    let st = status(&sc.admin()).await;
    let source = dir.path().to_str().unwrap();
    assert_eq!(st["credentials"].as_array().unwrap().len(), 1, "{st}");
    for route in st["routes"].as_array().unwrap() {
        assert_eq!(route["credentials"], source, "{route}");
    }

    let next = both(&pki);
    publish(&next);
    sc.wait_log(&["applied credential revision"]).await;
    let mut s2 = TcpStream::connect(sc.addr("controller")).await.unwrap();
    assert_eq!(
        roundtrip(&mut s2, b"after rotation").await,
        b"after rotation"
    );
    // Each route presents the new identity to the other: the server route
    // logs the client route's certificate and the client route the server
    // route's.
    let new_serial = CertInfo::parse(&next.cert_der).unwrap().serial;
    sc.wait_log(&[
        "handshake complete",
        "route=replica",
        &format!("serial={new_serial}"),
    ])
    .await;
    sc.wait_log(&[
        "handshake complete",
        "route=controller",
        &format!("serial={new_serial}"),
    ])
    .await;
    // Had each route a store of its own, both would have applied the new
    // revision by now: there was one apply, so one store.
    assert_eq!(
        sc.log_count("applied credential revision"),
        1,
        "{}",
        sc.logs().join("\n")
    );
    assert_eq!(
        roundtrip(&mut s, b"old connection").await,
        b"old connection"
    );
}

fn tls12_only(ident: &mtls_sidecar::pki::Issued, ca: &str) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.as_bytes()).unwrap())
        .unwrap();
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS12])
            .unwrap()
            .with_root_certificates(roots)
            .with_client_auth_cert(
                vec![ident.cert_der.clone()],
                PrivateKeyDer::from_pem_slice(ident.key_pem.as_bytes()).unwrap(),
            )
            .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn tls13_only_by_default_and_post_quantum_key_exchange_preferred() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("CA");
    let dir = pki.dir(tmp.path(), "replica", &pki.leaf(REPLICA, Role::Server));
    let echo = echo_target().await;
    let t = echo.addr.to_string();
    let strict = start_server(&dir, &t, &[]).await;
    let relaxed = start_server(&dir, &t, &["--tls-min-version", "1.2"]).await;
    let me = pki.leaf(CONTROLLER, Role::Client);

    // Default: TLS 1.3 with the hybrid post-quantum group.
    let s = tls_connect(
        &strict.addr("server"),
        REPLICA,
        client_config(Some(&me), &pki.ca.cert_pem),
    )
    .await
    .unwrap();
    let (_, conn) = s.get_ref();
    assert_eq!(
        conn.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_3)
    );
    assert_eq!(
        conn.negotiated_key_exchange_group().unwrap().name(),
        rustls::NamedGroup::X25519MLKEM768
    );

    // A TLS 1.2-only client is refused unless 1.2 is opted in.
    assert!(tls_connect(
        &strict.addr("server"),
        REPLICA,
        tls12_only(&me, &pki.ca.cert_pem)
    )
    .await
    .is_err());
    strict
        .wait_log(&["handshake refused", "reason=\"protocol\""])
        .await;
    let mut s = tls_connect(
        &relaxed.addr("server"),
        REPLICA,
        tls12_only(&me, &pki.ca.cert_pem),
    )
    .await
    .unwrap();
    assert_eq!(roundtrip(&mut s, b"tls12").await, b"tls12");
}

#[tokio::test(flavor = "multi_thread")]
async fn json_logs_are_one_object_per_line() {
    let creds = Creds::new();
    let echo = echo_target().await;
    let sc = Sidecar::spawn(&[
        "server",
        "--listen",
        "127.0.0.1:0",
        "--target",
        &echo.addr.to_string(),
        "--tls-dir",
        creds.server_dir.to_str().unwrap(),
        "--allow-san",
        CONTROLLER,
        "--reload-interval",
        "100ms",
        "--log-format",
        "json",
    ]);
    let line = sc.wait_log(&["\"listening\""]).await;
    let v: serde_json::Value = serde_json::from_str(&line).expect("a JSON object per line");
    assert_eq!(v["route"], "server");
    assert!(
        !line.contains("mtls_sidecar::"),
        "no duplicate `target` key: {line}"
    );
    assert_eq!(v["level"], "INFO");
    let addr = v["listen"].as_str().unwrap().to_string();
    // Every kind of event: a refused handshake (WARN)...
    let mut s = TcpStream::connect(&addr).await.unwrap();
    use tokio::io::AsyncWriteExt;
    s.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
    let line = sc.wait_log(&["handshake refused"]).await;
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["level"], "WARN");
    assert_eq!(v["reason"], "not_tls");
    // ...a forwarded connection (DEBUG), a rejected revision (ERROR)...
    let cfg = client_config(Some(&creds.controller), &creds.pki.ca.cert_pem);
    let mut tls = tls_connect(&addr, REPLICA, cfg).await.unwrap();
    assert_eq!(roundtrip(&mut tls, b"json").await, b"json");
    drop(tls);
    sc.wait_log(&["connection closed"]).await;
    std::fs::write(creds.server_dir.join("tls.crt"), "not a certificate\n").unwrap();
    sc.wait_log(&["rejected credential revision"]).await;
    // ...and the drain and exit (INFO).
    sc.signal(libc::SIGTERM);
    let (code, logs) = sc.wait_exit().await;
    assert_eq!(code, Some(0), "{}", logs.join("\n"));
    let mut levels = std::collections::BTreeSet::new();
    for line in &logs {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        let obj = v
            .as_object()
            .unwrap_or_else(|| panic!("not an object: {line}"));
        for key in ["timestamp", "level", "message"] {
            assert!(obj.contains_key(key), "no {key}: {line}");
        }
        levels.insert(obj["level"].as_str().unwrap().to_string());
    }
    assert_eq!(
        levels.into_iter().collect::<Vec<_>>(),
        ["DEBUG", "ERROR", "INFO", "WARN"],
        "{logs:#?}"
    );
    let drained = logs.iter().any(|l| l.contains("\"drained\""));
    assert!(drained, "{logs:#?}");
}

/// Polls until connecting to `addr` is refused: the listener is closed.
async fn until_not_accepting(addr: &str) {
    let deadline = Instant::now() + DEADLINE;
    while TcpStream::connect(addr).await.is_ok() {
        assert!(Instant::now() < deadline, "{addr} still accepting");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_drains_live_connections_then_exits_zero() {
    // A drain timeout far beyond the test: the live connection is never
    // cut short, and the process exits as soon as it ends by itself.
    let pair = Pair::start(&["--admin", "127.0.0.1:0", "--drain-timeout", "1h"], &[]).await;
    let admin = pair.server.admin();
    let ready = get(&admin, "/readyz").await;
    assert_eq!((ready.code, ready.body.as_str()), (200, "ready\n"));
    let (code, out) = health(&["--admin", &admin]).await;
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("HTTP/1.1 200 OK"), "{out}");

    let mut live = pair.connect().await;
    assert_eq!(roundtrip(&mut live, b"before").await, b"before");
    pair.server.signal(libc::SIGTERM);
    pair.server.wait_log(&["SIGTERM received"]).await;
    let draining = get_until(&admin, "/readyz", 503).await;
    assert!(draining.body.starts_with("draining"), "{}", draining.body);
    assert_eq!(draining.body.lines().count(), 1, "{}", draining.body);
    // New connections are no longer accepted...
    until_not_accepting(&pair.server.addr("server")).await;
    // ...the live one keeps working...
    assert_eq!(roundtrip(&mut live, b"during drain").await, b"during drain");
    assert_eq!(get(&admin, "/livez").await.code, 200);
    assert_eq!(status(&admin).await["draining"], true);
    let (code, out) = health(&["--admin", &admin, "--path", "/readyz"]).await;
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("503") && out.contains("draining"), "{out}");

    // ...and once it ends, the process exits 0 without cutting anything.
    drop(live);
    let Pair { server, client, .. } = pair;
    let (code, logs) = server.wait_exit().await;
    assert_eq!(code, Some(0), "{}", logs.join("\n"));
    assert!(logs.iter().any(|l| l.contains("drained")), "{logs:#?}");
    assert!(
        !logs.iter().any(|l| l.contains("drain timeout reached")),
        "{logs:#?}"
    );
    // The accept loop said it stopped, once.
    let stopped = logs.iter().filter(|l| l.contains("stopped accepting"));
    assert_eq!(stopped.count(), 1, "{logs:#?}");
    drop(client);
}

#[tokio::test(flavor = "multi_thread")]
async fn sigint_drains_and_the_drain_timeout_closes_what_is_left() {
    let creds = Creds::new();
    // The target echoes the first connection, then stops accepting with
    // a full backlog: a second one hangs connecting to it.
    let mut target = Backlogged::new(1);
    let server = start_server(
        &creds.server_dir,
        &target.addr.to_string(),
        &[
            "--admin",
            "127.0.0.1:0",
            "--drain-timeout",
            "1s",
            "--connect-timeout",
            "1h",
        ],
    )
    .await;
    let addr = server.addr("server");
    let admin = server.admin();
    let cfg = client_config(Some(&creds.controller), &creds.pki.ca.cert_pem);
    let mut live = tls_connect(&addr, REPLICA, cfg.clone()).await.unwrap();
    let echo = target.accepted().await;
    tokio::spawn(async move {
        let (mut r, mut w) = tokio::io::split(echo);
        let _ = tokio::io::copy(&mut r, &mut w).await;
    });
    assert_eq!(roundtrip(&mut live, b"before").await, b"before");
    // A second authenticated connection, stuck connecting to the target:
    // the drain timeout closes it too (a connect in progress listens for
    // the close signal).
    target.fill();
    let _stuck = tls_connect(&addr, REPLICA, cfg).await.unwrap();
    let deadline = Instant::now() + DEADLINE;
    while status(&admin).await["routes"][0]["live_connections"] != 2 {
        assert!(
            Instant::now() < deadline,
            "the second connection never registered"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    server.signal(libc::SIGINT);
    server.wait_log(&["SIGINT received"]).await;
    let draining = server.wait_log(&["draining", "live=2"]).await;
    until_not_accepting(&addr).await;
    // The drain timeout closes the live connection, as `drain`...
    assert!(read_until_closed(&mut live).await.is_empty());
    let closed = server
        .wait_field("connection closed", "reason", "drain")
        .await;
    let waited = log_time(&closed)
        .duration_since(log_time(&draining))
        .unwrap_or_default();
    assert!(
        waited >= Duration::from_secs(1),
        "closed {waited:?} into the drain"
    );
    // Both connections are closed as `drain` (the one still connecting to
    // the target before it was forwarded). The counter is not scraped here:
    // the admin endpoint stops with the process once nothing is left, so a
    // scrape would race the exit (tests/e2e/limits.rs and the close-reason
    // tests read counters on a live process).
    server
        .wait_log(&["connection closed before forwarding", "reason=\"drain\""])
        .await;
    // ...and the process still exits 0.
    let (code, logs) = server.wait_exit().await;
    assert_eq!(code, Some(0), "{}", logs.join("\n"));
    assert!(
        logs.iter().any(|l| l.contains("drain timeout reached")),
        "{logs:#?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_sidecar_drains_too() {
    let pair = Pair::start(&[], &["--admin", "127.0.0.1:0", "--drain-timeout", "1h"]).await;
    let admin = pair.client.admin();
    let mut live = pair.connect().await;
    assert_eq!(roundtrip(&mut live, b"before").await, b"before");
    pair.client.signal(libc::SIGTERM);
    let draining = get_until(&admin, "/readyz", 503).await;
    assert!(draining.body.starts_with("draining"), "{}", draining.body);
    until_not_accepting(&pair.client.addr("client")).await;
    assert_eq!(roundtrip(&mut live, b"during drain").await, b"during drain");
    drop(live);
    let Pair { server, client, .. } = pair;
    let (code, logs) = client.wait_exit().await;
    assert_eq!(code, Some(0), "{}", logs.join("\n"));
    assert!(logs.iter().any(|l| l.contains("drained")), "{logs:#?}");
    // The server sidecar saw an ordinary end, not a failure.
    server
        .wait_log(&["connection closed", "route=server"])
        .await;
    assert!(server.warn_lines(&[]).is_empty(), "{:#?}", server.logs());
}

/// Sends `msg` on a fresh connection through `pair` and returns it, with
/// the reply still to be read.
async fn send_on_new(pair: &Pair, msg: &[u8]) -> TcpStream {
    use tokio::io::AsyncWriteExt;
    let mut s = pair.connect().await;
    s.write_all(msg).await.unwrap();
    s
}

#[tokio::test(flavor = "multi_thread")]
async fn max_connections_queues_the_excess() {
    // Control: with room for two, a second connection is forwarded while
    // the first is open, and how long that takes here is the yardstick.
    let roomy = Pair::start(&["--max-connections", "2"], &[]).await;
    let mut first = roomy.connect().await;
    assert_eq!(roundtrip(&mut first, b"one").await, b"one");
    let started = Instant::now();
    let mut second = send_on_new(&roomy, b"two").await;
    let mut buf = [0u8; 3];
    tokio::time::timeout(DEADLINE, second.read_exact(&mut buf))
        .await
        .expect("the control's second connection is served")
        .unwrap();
    let control = started.elapsed();
    assert_eq!(roomy.echo.accepted(), 2);
    drop((first, second, roomy));

    // With room for one, the second connection is held: for many times
    // what the control took, the target sees only the first and nothing
    // comes back...
    let pair = Pair::start(&["--max-connections", "1"], &[]).await;
    let mut first = pair.connect().await;
    assert_eq!(roundtrip(&mut first, b"one").await, b"one");
    let mut second = send_on_new(&pair, b"two").await;
    let hold = (control * 20).max(Duration::from_secs(2));
    let until = Instant::now() + hold;
    while Instant::now() < until {
        assert_eq!(pair.echo.accepted(), 1, "forwarded past the limit");
        let early = tokio::time::timeout(Duration::from_millis(50), second.read(&mut buf)).await;
        assert!(
            early.is_err(),
            "the second connection was answered: {early:?}"
        );
    }
    // ...until the first one closes; then it is served.
    drop(first);
    tokio::time::timeout(DEADLINE, second.read_exact(&mut buf))
        .await
        .expect("served once a slot frees")
        .unwrap();
    assert_eq!(&buf, b"two");
    assert_eq!(pair.echo.accepted(), 2);
    eprintln!("control {control:?}, held {hold:?}");
}

/// A server sidecar limited to 64 descriptors, handshakes timing out after
/// `handshake_timeout`, in front of an echo target: its PKI, the sidecar and
/// its route's address (kept with the temporary directory and the target).
struct With64Fds {
    _tmp: tempfile::TempDir,
    _echo: Echo,
    pki: Pki,
    sc: Sidecar,
    addr: String,
}

async fn with_64_fds(handshake_timeout: &str) -> With64Fds {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("CA");
    let dir = pki.dir(tmp.path(), "replica", &pki.leaf(REPLICA, Role::Server));
    let echo = echo_target().await;
    let sc = limited_to_64_fds(&dir, &echo.addr.to_string(), handshake_timeout);
    let addr = field(&sc.wait_log(&[" listening "]).await, "listen");
    With64Fds {
        _tmp: tmp,
        _echo: echo,
        pki,
        sc,
        addr,
    }
}

fn limited_to_64_fds(dir: &std::path::Path, target: &str, handshake_timeout: &str) -> Sidecar {
    let mut cmd = Command::new(bin());
    cmd.args([
        "server",
        "--listen",
        "127.0.0.1:0",
        "--target",
        target,
        "--tls-dir",
        dir.to_str().unwrap(),
        "--allow-san",
        CONTROLLER,
        "--handshake-timeout",
        handshake_timeout,
    ])
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    // SAFETY: the pre_exec closure only calls setrlimit(2) on a local value: async-signal-safe, no allocation.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 64,
                rlim_max: 64,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Sidecar::from_command(cmd)
}

#[tokio::test(flavor = "multi_thread")]
async fn running_out_of_file_descriptors_backs_off_and_recovers() {
    let With64Fds { pki, sc, addr, .. } = with_64_fds("2s").await;
    // Exhaust the sidecar's descriptors with peers that never handshake.
    let mut idle = Vec::new();
    for _ in 0..100 {
        idle.push(TcpStream::connect(&addr).await.unwrap());
    }
    sc.wait_log(&["accept failed; backing off"]).await;
    drop(idle);
    // The listener survived: a good client is served.
    let cfg = client_config(Some(&pki.leaf(CONTROLLER, Role::Client)), &pki.ca.cert_pem);
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Ok(mut s) = tls_connect(&addr, REPLICA, cfg.clone()).await {
            if roundtrip(&mut s, b"recovered").await == b"recovered" {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "listener did not recover:\n{}",
            sc.logs().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Out of descriptors, a failing accept loop does not spin: a second and
/// a half after the first failure is a handful of WARN lines. What this
/// sees with a runtime per core is each failure evicting a handshake still
/// in flight, whose descriptor lets the next accept succeed, so the loops
/// rarely fail twice in a row (a halved wait passed it on 2026-12-04: two
/// lines in 1.5 s). That the wait doubles up to a second, the rate of an
/// unbroken run of failures, is the unit test of `next_backoff` in
/// src/proxy/route/mod.rs.
#[tokio::test(flavor = "multi_thread")]
async fn out_of_descriptors_the_accept_loops_do_not_spin() {
    let With64Fds { pki, sc, addr, .. } = with_64_fds("60s").await;
    let cfg = client_config(Some(&pki.leaf(CONTROLLER, Role::Client)), &pki.ca.cert_pem);
    // Forwarded connections (two descriptors each) until the sidecar
    // fails to accept one (a handshake that stalls stays queued; one that
    // timed out here on a slow machine is simply tried again).
    let mut live = Vec::new();
    let mut stalled = 0;
    while sc.log_count("accept failed; backing off") == 0 {
        assert!(live.len() + stalled < 200, "never out of descriptors");
        let connect = tls_connect(&addr, REPLICA, cfg.clone());
        match tokio::time::timeout(Duration::from_secs(5), connect).await {
            Ok(Ok(mut s)) => {
                assert_eq!(roundtrip(&mut s, b"held").await, b"held");
                live.push(s);
            }
            _ => stalled += 1,
        }
    }
    // One more connection keeps the accept failing from now on.
    let _queued = TcpStream::connect(&addr).await.unwrap();
    sc.wait_log(&["accept failed; backing off"]).await;
    let before = sc.log_count("accept failed; backing off");
    // A window of time, not a wait for an event: the rate is the property.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let during = sc.log_count("accept failed; backing off") - before;
    assert!(
        during <= 12,
        "{during} failed accepts in 1.5 s ({} forwarded): no back-off",
        live.len()
    );
    drop(live);
}

/// Out of descriptors, the route closes its oldest pending handshake to
/// get one back, so the next peer is accepted: with every silent socket
/// still held by the test (none closes on its own: the handshake timeout
/// is a minute), only that eviction can let the controller in. The oldest
/// are the ones closed; the youngest stay pending.
#[tokio::test(flavor = "multi_thread")]
async fn out_of_descriptors_the_oldest_pending_handshake_makes_room() {
    let With64Fds { pki, sc, addr, .. } = with_64_fds("60s").await;
    let port: u16 = addr.rsplit(':').next().unwrap().parse().unwrap();
    // More silent peers than descriptors, all held to the end.
    let mut idle = Vec::new();
    for _ in 0..100 {
        idle.push(TcpStream::connect(&addr).await.unwrap());
    }
    sc.wait_log(&["accept failed; backing off"]).await;
    // The kernel's accept queue empties only as evictions make room.
    eventually("the route to accept every silent peer", || {
        waits::accept_backlog(port) == Some(0)
    })
    .await;
    let cfg = client_config(Some(&pki.leaf(CONTROLLER, Role::Client)), &pki.ca.cert_pem);
    let tls = tokio::time::timeout(DEADLINE, tls_connect(&addr, REPLICA, cfg))
        .await
        .expect("the controller's handshake stalled: no descriptor was freed")
        .expect("the controller's handshake");
    drop(tls);
    // The first silent peer was closed by the sidecar; the last is pending.
    let mut buf = [0u8; 1];
    let first = tokio::time::timeout(DEADLINE, idle[0].read(&mut buf)).await;
    assert!(
        matches!(first, Ok(Ok(0)) | Ok(Err(_))),
        "the oldest silent peer is still open: {first:?}"
    );
    let last = idle.last().unwrap();
    assert!(
        matches!(last.try_read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the youngest silent peer was closed"
    );
    drop(idle);
}

/// Session resumption is off in both directions: a client that would resume
/// gets a full handshake from the server sidecar, and the client sidecar
/// never offers to resume with a server that would allow it.
#[tokio::test(flavor = "multi_thread")]
async fn every_connection_is_a_full_handshake() {
    use rustls::HandshakeKind;
    use tokio::io::AsyncWriteExt;

    // Server side: a resumption-capable client, twice.
    let pair = Pair::start(&[], &[]).await;
    let me = pair.pki.leaf(CONTROLLER, Role::Client);
    let cfg = client_config(Some(&me), &pair.pki.ca.cert_pem);
    // rustls clients cache sessions and offer to resume by default.
    let saddr = pair.server.addr("server");
    for round in 0..2 {
        let mut s = tls_connect(&saddr, REPLICA, cfg.clone()).await.unwrap();
        // Read a reply so any session ticket would have been processed.
        assert_eq!(roundtrip(&mut s, b"again").await, b"again");
        assert_eq!(
            s.get_ref().1.handshake_kind(),
            Some(HandshakeKind::Full),
            "round {round}"
        );
        s.shutdown().await.unwrap();
    }

    // Client side: a server that issues tickets and would accept them.
    let server_ident = pair.pki.leaf(REPLICA, Role::Server);
    let acceptor =
        tokio_rustls::TlsAcceptor::from(server_config(&server_ident, Some(&pair.pki.ca.cert_pem)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let taddr = listener.local_addr().unwrap().to_string();
    let kinds = tokio::spawn(async move {
        let mut kinds = Vec::new();
        for _ in 0..2 {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut tls = acceptor.accept(tcp).await.unwrap();
            kinds.push(tls.get_ref().1.handshake_kind());
            let mut buf = [0u8; 5];
            tls.read_exact(&mut buf).await.unwrap();
            tls.write_all(&buf).await.unwrap();
            tls.shutdown().await.unwrap();
        }
        kinds
    });
    let client = start_client(&pair.client_dir, &taddr, &[]).await;
    for _ in 0..2 {
        let mut s = TcpStream::connect(client.addr("client")).await.unwrap();
        assert_eq!(roundtrip(&mut s, b"hello").await, b"hello");
    }
    let kinds = kinds.await.unwrap();
    assert_eq!(kinds, vec![Some(HandshakeKind::Full); 2]);
}

/// SIGHUP polls the credentials at once. The files are symlinks into a
/// directory nobody watches, and the interval is an hour, so only the
/// signal can make the sidecar notice the new certificate.
/// A kubelet-style `..data` swap is applied by the file watch, long before
/// an hour's `--reload-interval`, and the poll that applied it says the
/// watch woke it. Seen failing with the watch disabled.
#[tokio::test(flavor = "multi_thread")]
async fn a_data_swap_is_applied_by_the_file_watch_not_the_interval() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("CA");
    let dir = AtomicDir::new(&tmp.path().join("tls")).unwrap();
    publish_identity(&dir, &pki.leaf(REPLICA, Role::Server), &pki.ca.cert_pem);
    let echo = echo_target().await;
    let sc = start_server(
        dir.path(),
        &echo.addr.to_string(),
        &["--reload-interval", "1h"],
    )
    .await;
    publish_identity(&dir, &pki.leaf(REPLICA, Role::Server), &pki.ca.cert_pem);
    sc.wait_log(&["applied credential revision"]).await;
    // Each poll says what woke it, after its outcome.
    sc.wait_log(&[waits::POLLED, "trigger=\"file\""]).await;
}

/// The poller's own reads of a plain directory (opens, reads, closes:
/// inotify reports them all) must not wake it again, or it polls in a loop
/// and spins a core. First a positive control: a file written beside the
/// credentials wakes the poller through the watch. Then, after a SIGHUP's
/// poll and twenty handshakes, the watch has woken it no more (a couple at
/// most, for the control's own late events); waking on reads wakes it
/// hundreds of times.
#[tokio::test(flavor = "multi_thread")]
async fn the_pollers_own_reads_do_not_wake_it() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("CA");
    let dir = pki.dir(tmp.path(), "replica", &pki.leaf(REPLICA, Role::Server));
    let echo = echo_target().await;
    let sc = start_server(&dir, &echo.addr.to_string(), &["--reload-interval", "1h"]).await;
    let by_watch = || {
        sc.logs()
            .iter()
            .filter(|l| l.contains(waits::POLLED) && l.contains("trigger=\"file\""))
            .count()
    };
    std::fs::write(dir.join("unrelated"), "x").unwrap();
    eventually("a poll woken by the file watch", || by_watch() >= 1).await;
    sc.signal(libc::SIGHUP);
    sc.wait_log(&[waits::POLLED, "trigger=\"signal\""]).await;
    let before = by_watch();
    let cfg = client_config(Some(&pki.leaf(CONTROLLER, Role::Client)), &pki.ca.cert_pem);
    for _ in 0..20 {
        let mut s = tls_connect(&sc.addr("server"), REPLICA, cfg.clone())
            .await
            .unwrap();
        roundtrip(&mut s, b"ping").await;
    }
    let woken = by_watch() - before;
    assert!(woken <= 2, "woken {woken} more times by the file watch");
}

#[tokio::test(flavor = "multi_thread")]
async fn sighup_polls_the_credentials_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("CA");
    let store = tmp.path().join("store");
    let first = pki.leaf(REPLICA, Role::Server);
    mtls_sidecar::pki::write_secret_dir(&store, &first, &pki.ca.cert_pem).unwrap();
    let links = tmp.path().join("links");
    std::fs::create_dir(&links).unwrap();
    for f in ["tls.crt", "tls.key", "ca.crt"] {
        std::os::unix::fs::symlink(store.join(f), links.join(f)).unwrap();
    }
    let echo = echo_target().await;
    let sc = start_server(&links, &echo.addr.to_string(), &["--reload-interval", "1h"]).await;
    // Replace the files behind the links: one rename per file, in a
    // directory the sidecar does not watch.
    let next = pki.leaf(REPLICA, Role::Server);
    let staging = tmp.path().join("staging");
    mtls_sidecar::pki::write_secret_dir(&staging, &next, &pki.ca.cert_pem).unwrap();
    for f in ["tls.crt", "tls.key", "ca.crt"] {
        std::fs::rename(staging.join(f), store.join(f)).unwrap();
    }
    sc.signal(libc::SIGHUP);
    sc.wait_log(&["SIGHUP received"]).await;
    sc.wait_log(&["applied credential revision"]).await;
    // The poll that applied it was the signal's, and the only one: each
    // poll says what woke it once it has reported (no sleep can show that
    // nothing else would have polled).
    let polls = sc.wait_log_count(waits::POLLED, 1).await;
    let logs = sc.logs();
    let applied = logs
        .iter()
        .position(|l| l.contains("applied credential revision"))
        .unwrap();
    let poll = logs[applied..]
        .iter()
        .find(|l| l.contains(waits::POLLED))
        .unwrap();
    assert!(has_field(poll, "trigger", "signal"), "{poll}");
    assert_eq!(
        polls,
        1,
        "nothing but SIGHUP may poll:\n{}",
        logs.join("\n")
    );
    let cfg = client_config(Some(&pki.leaf(CONTROLLER, Role::Client)), &pki.ca.cert_pem);
    let s = tls_connect(&sc.addr("server"), REPLICA, cfg).await.unwrap();
    let served = CertInfo::parse(&s.get_ref().1.peer_certificates().unwrap()[0])
        .unwrap()
        .serial;
    assert_eq!(served, CertInfo::parse(&next.cert_der).unwrap().serial);
}

//! Zero-drop credential rotation from a Kubernetes-style Secret mount, and
//! trust that really shrinks: proven by the rotated-away credential failing.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use common::*;
use mtls_sidecar::identity::CertInfo;
use mtls_sidecar::pki::{Issued, LeafSpec, Role};
use mtls_sidecar::tools::atomic_writer::AtomicDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Publishes a leaf and a CA bundle as one kubelet-style revision.
fn publish(dir: &AtomicDir, leaf: &Issued, ca_bundle: &str) {
    dir.publish(&[
        ("tls.crt", leaf.cert_pem.as_bytes()),
        ("tls.key", leaf.key_pem.as_bytes()),
        ("ca.crt", ca_bundle.as_bytes()),
    ])
    .expect("publish revision");
}

/// A revision's files: (name, contents).
type Revision<'a> = Vec<(&'a str, &'a [u8])>;

fn serial(leaf: &Issued) -> String {
    CertInfo::parse(&leaf.cert_der).unwrap().serial
}

/// The serial of the certificate a TLS server presents.
async fn served_serial(addr: &str, name: &str, cfg: Arc<rustls::ClientConfig>) -> String {
    let tls = tls_connect(addr, name, cfg).await.expect("handshake");
    let (_, conn) = tls.get_ref();
    let der = conn.peer_certificates().expect("server cert")[0].clone();
    CertInfo::parse(&der).unwrap().serial
}

/// Waits until the n-th "applied credential revision" line appears.
async fn applied(sc: &Sidecar, n: usize) {
    let deadline = Instant::now() + DEADLINE;
    while sc.log_count("applied credential revision") < n {
        assert!(
            Instant::now() < deadline,
            "revision {n} not applied:\n{}",
            sc.logs().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn server(dir: &AtomicDir, target: &str, extra: &[&str]) -> Sidecar {
    start_server(dir.path(), target, extra).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rotation_under_load_drops_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("rotation CA");
    let sdir = AtomicDir::new(&tmp.path().join("replica")).unwrap();
    let cdir = AtomicDir::new(&tmp.path().join("controller")).unwrap();
    publish(&sdir, &pki.leaf(REPLICA, Role::Server), &pki.ca.cert_pem);
    publish(&cdir, &pki.leaf(CONTROLLER, Role::Client), &pki.ca.cert_pem);
    let echo = echo_target().await;
    let server = server(&sdir, &echo.addr.to_string(), &["--reload-interval", "1s"]).await;
    let saddr = server.addr("server");
    let client = start_client(cdir.path(), &saddr, &["--reload-interval", "1s"]).await;
    let caddr = client.addr("client");

    let stop = Arc::new(AtomicBool::new(false));
    let requests = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for i in 0..8 {
        let (stop, requests, caddr) = (stop.clone(), requests.clone(), caddr.clone());
        workers.push(tokio::spawn(async move {
            let fresh = i % 2 == 0;
            let mut long: Option<TcpStream> = None;
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let msg = format!("worker {i} frame {n}");
                let s = match (&mut long, fresh) {
                    (Some(s), false) => s,
                    _ => {
                        let s = TcpStream::connect(&caddr)
                            .await
                            .map_err(|e| format!("connect: {e}"))?;
                        long.insert(s)
                    }
                };
                s.write_all(msg.as_bytes())
                    .await
                    .map_err(|e| format!("{msg}: write: {e}"))?;
                let mut buf = vec![0u8; msg.len()];
                tokio::time::timeout(DEADLINE, s.read_exact(&mut buf))
                    .await
                    .map_err(|_| format!("{msg}: no reply"))?
                    .map_err(|e| format!("{msg}: read: {e}"))?;
                if buf != msg.as_bytes() {
                    return Err(format!("{msg}: corrupted reply"));
                }
                if fresh {
                    long = None;
                }
                n += 1;
                requests.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<u64, String>(n)
        }));
    }

    let direct = client_config(Some(&pki.leaf(CONTROLLER, Role::Client)), &pki.ca.cert_pem);
    'rounds: for round in 1..=5 {
        let leaf = pki.leaf(REPLICA, Role::Server);
        let client_leaf = pki.leaf(CONTROLLER, Role::Client);
        publish(&sdir, &leaf, &pki.ca.cert_pem);
        publish(&cdir, &client_leaf, &pki.ca.cert_pem);
        // How soon a revision is picked up is the poller's business
        // (tests/e2e/settle.rs); here it only has to happen, under load.
        applied(&server, round).await;
        applied(&client, round).await;
        // The new server certificate is what new handshakes get.
        assert_eq!(
            served_serial(&saddr, REPLICA, direct.clone()).await,
            serial(&leaf)
        );
        // The server sees the client sidecar's new identity on a new connection.
        let mut s = TcpStream::connect(&caddr).await.unwrap();
        assert_eq!(
            roundtrip(&mut s, b"new client identity").await,
            b"new client identity"
        );
        server
            .wait_log(&[
                "handshake complete",
                &format!("serial={}", serial(&client_leaf)),
            ])
            .await;
        let before = requests.load(Ordering::Relaxed);
        // Let traffic flow on the new credentials before the next rotation
        // (a worker that failed stops counting: its error is reported below).
        let deadline = Instant::now() + DEADLINE;
        while requests.load(Ordering::Relaxed) < before + 50 {
            if workers.iter().any(|w| w.is_finished()) {
                break 'rounds;
            }
            assert!(
                Instant::now() < deadline,
                "round {round}: traffic stalled after the rotation"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let n = w
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("a request failed during rotation: {e}"));
        assert!(n > 0);
    }
    assert_eq!(server.log_count("rejected credential revision"), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn ca_rotation_refuses_the_old_ca_and_revokes_live_connections() {
    ca_rotation(None).await;
}

/// Generous: the test must use the old CA inside the grace, after seeing
/// the drop applied, on a machine that may be busy.
const GRACE: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread")]
async fn trust_grace_delays_the_refusal() {
    ca_rotation(Some(GRACE)).await;
}

fn rfc3339(v: &serde_json::Value) -> SystemTime {
    humantime::parse_rfc3339(v.as_str().unwrap_or_else(|| panic!("not a time: {v}")))
        .unwrap_or_else(|e| panic!("{v}: {e}"))
}

/// Closes a connection and waits until the server has let go of it, so a
/// later revocation cannot find it still open.
async fn closed(server: &Sidecar, s: ClientTls) {
    let me = s.get_ref().0.local_addr().unwrap().to_string();
    drop(s);
    server.wait_field("connection closed", "peer", &me).await;
}

async fn ca_rotation(grace: Option<Duration>) {
    let tmp = tempfile::tempdir().unwrap();
    let ca_a = Pki::new("CA A");
    let ca_b = Pki::new("CA B");
    let both = format!("{}{}", ca_a.ca.cert_pem, ca_b.ca.cert_pem);
    let sdir = AtomicDir::new(&tmp.path().join("replica")).unwrap();
    publish(&sdir, &ca_a.leaf(REPLICA, Role::Server), &ca_a.ca.cert_pem);
    let echo = echo_target().await;
    let grace_arg = format!("{}ms", grace.unwrap_or_default().as_millis());
    let server = server(
        &sdir,
        &echo.addr.to_string(),
        &[
            "--reload-interval",
            "200ms",
            "--trust-grace",
            &grace_arg,
            "--admin",
            "127.0.0.1:0",
        ],
    )
    .await;
    let addr = server.addr("server");
    // The test client trusts both CAs for the server side throughout, so
    // only the server's trust in *clients* is under test.
    let a_client = client_config(Some(&ca_a.leaf(CONTROLLER, Role::Client)), &both);
    let b_client = client_config(Some(&ca_b.leaf(CONTROLLER, Role::Client)), &both);

    // Before: an A-issued client is accepted; keep one connection open.
    let mut live = tls_connect(&addr, REPLICA, a_client.clone()).await.unwrap();
    assert_eq!(roundtrip(&mut live, b"before").await, b"before");
    let mut b_conn = tls_connect(&addr, REPLICA, b_client.clone()).await.unwrap();
    assert!(refused(&mut b_conn).await, "B is not trusted yet");
    server
        .wait_field("handshake refused", "reason", "unknown_ca")
        .await;

    // Overlap: bundle A+B, leaves re-issued from B. Both are accepted.
    publish(&sdir, &ca_b.leaf(REPLICA, Role::Server), &both);
    applied(&server, 1).await;
    let mut s = tls_connect(&addr, REPLICA, a_client.clone()).await.unwrap();
    assert_eq!(roundtrip(&mut s, b"overlap A").await, b"overlap A");
    closed(&server, s).await;
    // A B-authenticated connection stays open through the drop of A.
    let mut live_b = tls_connect(&addr, REPLICA, b_client.clone()).await.unwrap();
    assert_eq!(roundtrip(&mut live_b, b"overlap B").await, b"overlap B");
    assert_eq!(roundtrip(&mut live, b"still").await, b"still");

    // Drop A.
    publish(&sdir, &ca_b.leaf(REPLICA, Role::Server), &ca_b.ca.cert_pem);
    applied(&server, 2).await;
    if let Some(grace) = grace {
        // The grace runs from the poll that applied the drop: A retires
        // exactly `grace` after it (both shown to the second).
        let st = status(&server.admin()).await;
        let creds = &st["credentials"][0];
        let anchors = creds["trust_anchors"].as_array().unwrap();
        let a = anchors
            .iter()
            .find(|a| a["subject"].as_str().unwrap().contains("CA A"))
            .unwrap_or_else(|| panic!("CA A dropped at once: {creds}"));
        let retire_at = rfc3339(&a["retire_at"]);
        let applied_at = rfc3339(&creds["last_applied"]);
        assert_eq!(retire_at.duration_since(applied_at).unwrap(), grace);
        // Inside the grace the old CA still works, live connection included.
        let mut s = tls_connect(&addr, REPLICA, a_client.clone()).await.unwrap();
        assert_eq!(roundtrip(&mut s, b"grace").await, b"grace");
        closed(&server, s).await;
        assert_eq!(roundtrip(&mut live, b"graced").await, b"graced");
        assert_eq!(
            server.log_count("trust grace ended"),
            0,
            "the grace had ended before the old CA was used"
        );
        let ended = server.wait_log(&["trust grace ended"]).await;
        assert!(
            log_time(&ended) >= retire_at,
            "grace ended before {}: {ended}",
            humantime::format_rfc3339(retire_at)
        );
    }
    // After: A is refused, B still works, and the A-authenticated live
    // connection was closed as revoked.
    let mut s = tls_connect(&addr, REPLICA, a_client.clone()).await.unwrap();
    let me = s.get_ref().0.local_addr().unwrap().to_string();
    assert!(
        refused(&mut s).await,
        "an A-issued client must be refused after the drop"
    );
    // Refused for its CA, on a WARN line of its own: B's refusal before the
    // overlap has the same reason, so the line is found by our address.
    let line = server.wait_field("handshake refused", "peer", &me).await;
    assert!(line.contains(" WARN "), "{line}");
    assert!(has_field(&line, "reason", "unknown_ca"), "{line}");
    assert!(line.contains("subject=CN=controller.env-1.svc"), "{line}");
    assert_eq!(server.warn_reason("unknown_ca").len(), 2);
    let mut s = tls_connect(&addr, REPLICA, b_client).await.unwrap();
    assert_eq!(roundtrip(&mut s, b"after B").await, b"after B");
    let mut buf = [0u8; 8];
    let n = tokio::time::timeout(DEADLINE, live.read(&mut buf))
        .await
        .expect("live connection closed");
    assert!(
        matches!(n, Ok(0) | Err(_)),
        "revoked connection must be closed"
    );
    server
        .wait_log(&["connection closed", "reason=\"revoked\""])
        .await;
    server
        .wait_log(&[
            "its peer is no longer trusted",
            "subject=CN=controller.env-1.svc",
        ])
        .await;
    // Counted as well as logged: the one A-authenticated connection left
    // open, while the B-authenticated one is untouched.
    server.wait_closed("server", "revoked", 1.0).await;
    assert_eq!(roundtrip(&mut live_b, b"B untouched").await, b"B untouched");
    assert_eq!(
        server.log_count("its peer is no longer trusted"),
        1,
        "{}",
        server.logs().join("\n")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_revisions_are_rejected_and_the_last_good_one_serves() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("CA");
    let foreign = Pki::new("foreign CA");
    let sdir = AtomicDir::new(&tmp.path().join("replica")).unwrap();
    let good = pki.leaf(REPLICA, Role::Server);
    publish(&sdir, &good, &pki.ca.cert_pem);
    let echo = echo_target().await;
    let server = server(
        &sdir,
        &echo.addr.to_string(),
        &["--reload-interval", "100ms"],
    )
    .await;
    let addr = server.addr("server");
    let cfg = client_config(Some(&pki.leaf(CONTROLLER, Role::Client)), &pki.ca.cert_pem);

    let other = pki.leaf(REPLICA, Role::Server);
    let truncated = &good.cert_pem[..good.cert_pem.len() / 2];
    let foreign_leaf = foreign.leaf(REPLICA, Role::Server);
    let bad: Vec<(&str, Revision, &str)> = vec![
        (
            "key mismatch",
            vec![
                ("tls.crt", other.cert_pem.as_bytes()),
                ("tls.key", good.key_pem.as_bytes()),
                ("ca.crt", pki.ca.cert_pem.as_bytes()),
            ],
            "tls.key: private key does not match the certificate",
        ),
        (
            "truncated PEM",
            vec![
                ("tls.crt", truncated.as_bytes()),
                ("tls.key", good.key_pem.as_bytes()),
                ("ca.crt", pki.ca.cert_pem.as_bytes()),
            ],
            "tls.crt: not valid PEM",
        ),
        (
            "empty ca.crt",
            vec![
                ("tls.crt", good.cert_pem.as_bytes()),
                ("tls.key", good.key_pem.as_bytes()),
                ("ca.crt", b""),
            ],
            "ca.crt: file is empty",
        ),
        (
            "foreign leaf",
            vec![
                ("tls.crt", foreign_leaf.cert_pem.as_bytes()),
                ("tls.key", foreign_leaf.key_pem.as_bytes()),
                ("ca.crt", pki.ca.cert_pem.as_bytes()),
            ],
            "tls.crt: certificate does not chain to",
        ),
    ];
    for (i, (what, files, needle)) in bad.iter().enumerate() {
        sdir.publish(files).unwrap();
        let deadline = Instant::now() + DEADLINE;
        while server.log_count("rejected credential revision") < i + 1 {
            assert!(
                Instant::now() < deadline,
                "{what} not rejected:\n{}",
                server.logs().join("\n")
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // This revision's own line, rejected for its own reason (earlier
        // lines name tls.crt too).
        let lines: Vec<String> = server
            .logs()
            .into_iter()
            .filter(|l| l.contains("rejected credential revision"))
            .collect();
        assert_eq!(lines.len(), i + 1, "{what}: {lines:#?}");
        let line = &lines[i];
        assert!(line.contains(needle), "{what}: {line}");
        assert!(line.contains(" ERROR "), "{line}");
        // The last good identity keeps serving.
        assert_eq!(
            served_serial(&addr, REPLICA, cfg.clone()).await,
            serial(&good),
            "after {what}"
        );
    }
    // Each bad revision is reported once, not on every poll: several
    // polls (counted, not slept for) add no line.
    let rejected = server.log_count("rejected credential revision");
    server.wait_polls(5).await;
    assert_eq!(server.log_count("rejected credential revision"), rejected);
    assert_eq!(server.log_count("applied credential revision"), 0);

    let next = pki.leaf(REPLICA, Role::Server);
    publish(&sdir, &next, &pki.ca.cert_pem);
    applied(&server, 1).await;
    assert_eq!(served_serial(&addr, REPLICA, cfg).await, serial(&next));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plain_directory_written_file_by_file_never_serves_a_mismatched_pair() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("CA");
    let first = pki.leaf(REPLICA, Role::Server);
    let dir = pki.dir(tmp.path(), "plain", &first);
    let echo = echo_target().await;
    let target = echo.addr.to_string();
    let server = start_server(&dir, &target, &["--reload-interval", "50ms"]).await;
    let addr = server.addr("server");
    let cfg = client_config(Some(&pki.leaf(CONTROLLER, Role::Client)), &pki.ca.cert_pem);
    let next = pki.leaf(REPLICA, Role::Server);

    let stop = Arc::new(AtomicBool::new(false));
    let handshakes = Arc::new(AtomicUsize::new(0));
    let hammer = {
        let (stop, addr, cfg) = (stop.clone(), addr.clone(), cfg.clone());
        let handshakes = handshakes.clone();
        tokio::spawn(async move {
            let mut seen = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                // A mismatched pair fails the handshake's signature check.
                let mut s = tls_connect(&addr, REPLICA, cfg.clone())
                    .await
                    .map_err(|e| e.to_string())?;
                let (_, conn) = s.get_ref();
                let sn = CertInfo::parse(&conn.peer_certificates().unwrap()[0])
                    .unwrap()
                    .serial;
                if roundtrip(&mut s, b"x").await != b"x" {
                    return Err("bad echo".to_string());
                }
                seen.push(sn);
                handshakes.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, String>(seen)
        })
    };
    // A slow writer: the certificate lands several polls before its key.
    std::fs::write(dir.join("tls.crt"), &next.cert_pem).unwrap();
    // The window is events, not a sleep a starved task can miss: the
    // sidecar has seen the half-written directory (3 polls) and the hammer
    // has completed handshakes while it stood.
    const SETTLING: &str = "credential files changed; judging them once unchanged";
    server.wait_log_count(SETTLING, 1).await;
    let before = handshakes.load(Ordering::Relaxed);
    server.wait_log_count(SETTLING, 3).await;
    eventually(
        "handshakes while the certificate lands before its key",
        || handshakes.load(Ordering::Relaxed) >= before + 3,
    )
    .await;
    mtls_sidecar::pki::write_private(&dir.join("tls.key"), next.key_pem.as_bytes()).unwrap();
    applied(&server, 1).await;
    let deadline = Instant::now() + DEADLINE;
    while served_serial(&addr, REPLICA, cfg.clone()).await != serial(&next) {
        assert!(Instant::now() < deadline);
    }
    stop.store(true, Ordering::Relaxed);
    let seen = hammer.await.unwrap().expect("every handshake succeeds");
    assert!(seen
        .iter()
        .all(|s| *s == serial(&first) || *s == serial(&next)));
    assert!(seen.contains(&serial(&first)));
    // A write in progress is waited out, not reported as a bad revision.
    assert_eq!(server.log_count("rejected credential revision"), 0);
}

/// Sends `msg` and reads its echo; `None` when the connection ends first.
async fn echoed(s: &mut ClientTls, msg: &[u8]) -> Option<()> {
    s.write_all(msg).await.ok()?;
    s.flush().await.ok()?;
    let mut buf = vec![0u8; msg.len()];
    tokio::time::timeout(DEADLINE, s.read_exact(&mut buf))
        .await
        .expect("an answer or a close")
        .ok()?;
    assert_eq!(buf, msg);
    Some(())
}

/// A `Duration` as its `Debug` form prints it (`duration=` in log lines).
fn debug_duration(text: &str) -> Duration {
    let units = [("ns", 1e-9), ("µs", 1e-6), ("ms", 1e-3), ("s", 1.0)];
    let (num, scale) = units
        .iter()
        .find_map(|(u, scale)| Some((text.strip_suffix(u)?, *scale)))
        .unwrap_or_else(|| panic!("not a duration: {text}"));
    let n: f64 = num
        .parse()
        .unwrap_or_else(|_| panic!("not a duration: {text}"));
    Duration::from_secs_f64(n * scale)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_peer_certificate_expiring_mid_connection_closes_it() {
    expiring_mid_connection(&[]).await;
}

/// The earlier of the two deadlines wins: a connection lifetime longer than
/// what is left of the peer's certificate does not keep the connection open
/// past it (kills `replace match guard l < e with true in
/// Route::supervise`, which let the lifetime win whenever both were set).
#[tokio::test(flavor = "multi_thread")]
async fn a_longer_connection_lifetime_does_not_outlive_the_peer_certificate() {
    expiring_mid_connection(&["--max-connection-lifetime", "1h"]).await;
}

/// A connection whose peer certificate expires a few seconds after its
/// handshake is closed `expired`, not before the certificate's last second.
async fn expiring_mid_connection(extra: &[&str]) {
    let creds = Creds::new();
    let echo = echo_target().await;
    let mut args = vec!["--admin", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let server = start_server(&creds.server_dir, &echo.addr.to_string(), &args).await;
    let addr = server.addr("server");
    // The peer's certificate must still be valid when its handshake is
    // judged; a machine too busy for that gets a longer-lived one.
    let mut left = Duration::from_secs(2);
    let (mut s, not_after) = loop {
        assert!(
            left < DEADLINE,
            "could not connect before the certificate expired"
        );
        let now = SystemTime::now();
        let not_after = now + left;
        left *= 2;
        let short = creds.pki.issue(
            &LeafSpec::dns(CONTROLLER, Role::Client, 1)
                .valid(now - Duration::from_secs(60), not_after),
        );
        let cfg = client_config(Some(&short), &creds.pki.ca.cert_pem);
        let mut s = tls_connect(&addr, REPLICA, cfg).await.unwrap();
        if echoed(&mut s, b"alive").await.is_some() {
            break (s, not_after);
        }
        server
            .wait_field("handshake refused", "reason", "expired")
            .await;
    };
    let got = read_until_closed(&mut s).await;
    assert!(got.is_empty(), "{got:?}");
    let line = server
        .wait_field("connection closed", "reason", "expired")
        .await;
    // docs/logging.md: a close the sidecar decides is logged at INFO (kills
    // `delete match arm CloseReason::Expired | ... in Route::supervise`).
    assert!(line.contains(" INFO "), "{line}");
    // Not before the certificate's last second.
    let last = not_after
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let closed_at = log_time(&line)
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap();
    assert!(
        closed_at.as_secs() >= last,
        "closed at {closed_at:?}, valid through {last}"
    );
    server.wait_closed("server", "expired", 1.0).await;
    assert_eq!(echo.accepted(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn max_connection_lifetime_closes_old_connections() {
    // Long enough for a busy machine to get a round trip in first.
    const LIFETIME: Duration = Duration::from_secs(3);
    let pair = Pair::start(
        &["--max-connection-lifetime", "3s", "--admin", "127.0.0.1:0"],
        &[],
    )
    .await;
    let mut s = pair.connect().await;
    assert_eq!(roundtrip(&mut s, b"young").await, b"young");
    let got = read_until_closed(&mut s).await;
    assert!(got.is_empty(), "{got:?}");
    let line = pair
        .server
        .wait_field("connection closed", "reason", "lifetime")
        .await;
    let lived = debug_duration(&field(&line, "duration"));
    assert!(lived >= LIFETIME, "closed after {lived:?}: {line}");
    pair.server.wait_closed("server", "lifetime", 1.0).await;
    // A new connection works: the client re-handshakes.
    let mut s = pair.connect().await;
    assert_eq!(roundtrip(&mut s, b"again").await, b"again");
}

/// The TLS records in a buffer: (content type, end offset).
fn records(buf: &[u8]) -> Vec<(u8, usize)> {
    let mut v = Vec::new();
    let mut i = 0;
    while i + 5 <= buf.len() {
        let len = u16::from_be_bytes([buf[i + 3], buf[i + 4]]) as usize;
        v.push((buf[i], i + 5 + len));
        i += 5 + len;
    }
    v
}

/// A peer whose chain was verified just before its CA was dropped, and
/// which finishes its handshake only afterwards, must not be forwarded:
/// the trust watcher could not see it yet, so admission re-checks it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_handshake_straddling_a_trust_shrink_is_not_forwarded() {
    use std::io::{Read, Write};
    let tmp = tempfile::tempdir().unwrap();
    let a = Pki::new("CA A");
    let b = Pki::new("CA B");
    let both = format!("{}{}", a.ca.cert_pem, b.ca.cert_pem);
    let dir = AtomicDir::new(&tmp.path().join("r")).unwrap();
    let srv = b.leaf(REPLICA, Role::Server);
    publish(&dir, &srv, &both);
    let echo = echo_target().await;
    let server = server(
        &dir,
        &echo.addr.to_string(),
        &["--reload-interval", "100ms"],
    )
    .await;
    let addr = server.addr("server");
    let cfg = client_config(Some(&a.leaf(CONTROLLER, Role::Client)), &both);

    // Drive the client by hand, in small records, so the second flight can
    // be held back between Certificate and Finished.
    let mut sock = std::net::TcpStream::connect(&addr).unwrap();
    sock.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut small = (*cfg).clone();
    small.max_fragment_size = Some(64);
    let mut conn =
        rustls::ClientConnection::new(Arc::new(small), REPLICA.try_into().unwrap()).unwrap();
    let mut out = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut out).unwrap();
    }
    sock.write_all(&out).unwrap();
    while !conn.wants_write() {
        conn.read_tls(&mut sock).unwrap();
        conn.process_new_packets().unwrap();
    }
    out.clear();
    while conn.wants_write() {
        conn.write_tls(&mut out).unwrap();
    }
    let recs = records(&out);
    let cut = recs[recs.len() - 3].1;
    sock.write_all(&out[..cut]).unwrap();
    server
        .wait_log(&["client certificate chain verified"])
        .await;
    assert_eq!(server.log_count("handshake complete"), 0);

    publish(&dir, &srv, &b.ca.cert_pem); // drop A
    server
        .wait_log(&["applied credential revision", "trust_shrank=true"])
        .await;

    // Finish the handshake and try to use the connection.
    sock.write_all(&out[cut..]).unwrap();
    conn.writer().write_all(b"after the drop").unwrap();
    out.clear();
    while conn.wants_write() {
        conn.write_tls(&mut out).unwrap();
    }
    sock.write_all(&out).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    loop {
        match conn.read_tls(&mut sock) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if conn.process_new_packets().is_err() {
            break;
        }
        if let Ok(n) = conn.reader().read(&mut buf) {
            got.extend_from_slice(&buf[..n]);
        }
    }
    assert!(
        got.is_empty(),
        "an A-issued peer was forwarded after A was dropped: {got:?}"
    );
    server.wait_log(&["lost trust during the handshake"]).await;
    assert_eq!(echo.accepted(), 0, "the target never saw the peer");
}

//! `--resumption`, through the real binary: off by default (no ticket is
//! ever sent); on, a server route resumes a TLS 1.3 session (counted in
//! `mtls_sidecar_tls_resumptions_total`), never a TLS 1.2 one; a peer
//! holding a ticket gets no resumed session once it is revoked, untrusted
//! (its CA removed), re-pinned or expired; `openssl s_client -sess_out` /
//! `-sess_in` resumes; a client route resumes against a server route and
//! forgets its sessions when its own credentials change; and a client
//! route that resumed with a server whose stored certificate has expired
//! since closes the connection after the handshake (the re-judgement of
//! the stored chain, the second line, seen with a real peer); and early
//! data offered on a resumed session (`s_client -early_data`) is never
//! taken as 0-RTT: nothing reaches the target before the handshake ends.
//!
//! The test clients keep their tickets in rustls's cache and run on a
//! clock that stands still, so they offer a ticket whatever its lifetime
//! said: what the sidecar accepts is its own decision.

use crate::common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::foreign::Proc;
use common::*;
use mtls_sidecar::pki::{Issued, LeafSpec, Role};
use mtls_sidecar::tools::atomic_writer::AtomicDir;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::{ClientConfig, HandshakeKind};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const RESUMPTIONS: &str = "mtls_sidecar_tls_resumptions_total";
const HANDSHAKES: &str = "mtls_sidecar_tls_handshakes_total";
const FAILURES: &str = "mtls_sidecar_tls_handshake_failures_total";

/// A clock that stands still at the moment it was made.
#[derive(Debug)]
struct Frozen(UnixTime);

impl rustls::time_provider::TimeProvider for Frozen {
    fn current_time(&self) -> Option<UnixTime> {
        Some(self.0)
    }
}

/// A client presenting `ident`, trusting `ca_pem`, keeping its tickets,
/// its clock frozen now; `versions` defaults to TLS 1.3 and 1.2.
fn holder(ident: &Issued, ca_pem: &str, tls12_only: bool) -> Arc<ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let versions: &[&rustls::SupportedProtocolVersion] = if tls12_only {
        &[&rustls::version::TLS12]
    } else {
        &[&rustls::version::TLS13, &rustls::version::TLS12]
    };
    let cfg = ClientConfig::builder_with_details(provider(), Arc::new(Frozen(UnixTime::now())))
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(
            vec![ident.cert_der.clone()],
            PrivateKeyDer::from_pem_slice(ident.key_pem.as_bytes()).unwrap(),
        )
        .unwrap();
    Arc::new(cfg)
}

/// What one connection got.
#[derive(Debug, PartialEq)]
struct Outcome {
    resumed: bool,
    /// The server echoed through the sidecar (the peer was admitted).
    forwarded: bool,
    /// TLS 1.3 session tickets received.
    tickets: usize,
}

/// Connects with `cfg` (reusing its tickets), sends a line and reads the
/// echo, or the close that refuses us.
async fn session(addr: &str, cfg: &Arc<ClientConfig>) -> Outcome {
    let mut s = match tls_connect(addr, REPLICA, cfg.clone()).await {
        Ok(s) => s,
        Err(_) => {
            return Outcome {
                resumed: false,
                forwarded: false,
                tickets: 0,
            }
        }
    };
    let resumed = s.get_ref().1.handshake_kind() == Some(HandshakeKind::Resumed);
    let _ = s.write_all(b"ping").await;
    let _ = s.flush().await;
    let mut buf = [0u8; 4];
    let forwarded = match tokio::time::timeout(DEADLINE, s.read_exact(&mut buf)).await {
        Ok(Ok(_)) => &buf == b"ping",
        Ok(Err(_)) => false,
        Err(_) => panic!("no answer from the sidecar"),
    };
    Outcome {
        resumed,
        forwarded,
        tickets: s.get_ref().1.tls13_tickets_received() as usize,
    }
}

const FULL: Outcome = Outcome {
    resumed: false,
    forwarded: true,
    tickets: 2,
};
const RESUMED: Outcome = Outcome {
    resumed: true,
    forwarded: true,
    tickets: 2,
};
const REFUSED: Outcome = Outcome {
    resumed: false,
    forwarded: false,
    tickets: 0,
};

async fn counter(admin: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    scrape(admin).await.value(name, labels).unwrap_or(0.0)
}

/// A refusal counter once it reaches `least`: the peer sees its refusal
/// before the sidecar has counted it, so one scrape right after can be
/// short (seen under stress-ng).
async fn counted(admin: &str, name: &str, labels: &[(&str, &str)], least: f64) -> f64 {
    scrape_until(admin, &format!("{name} {labels:?} >= {least}"), |m| {
        m.value(name, labels).unwrap_or(0.0) >= least
    })
    .await
    .value(name, labels)
    .unwrap_or(0.0)
}

fn publish(dir: &AtomicDir, leaf: &Issued, ca_pem: &str, crl: Option<&str>) {
    let mut files: Vec<(&str, &[u8])> = vec![
        ("tls.crt", leaf.cert_pem.as_bytes()),
        ("tls.key", leaf.key_pem.as_bytes()),
        ("ca.crt", ca_pem.as_bytes()),
    ];
    if let Some(crl) = crl {
        files.push(("ca.crl", crl.as_bytes()));
    }
    dir.publish(&files).expect("publish a revision");
}

/// Publishes a revision, has the sidecar poll at once and waits until it
/// applied it.
async fn apply(sc: &Sidecar, dir: &AtomicDir, leaf: &Issued, ca_pem: &str, crl: Option<&str>) {
    let before = sc.log_count("applied credential revision");
    publish(dir, leaf, ca_pem, crl);
    sc.signal(libc::SIGHUP);
    sc.wait_log_count("applied credential revision", before + 1)
        .await;
}

/// A server sidecar with `--resumption` on an atomically published
/// directory (`replica`, trusting `ca_pem`), in front of an echo target.
async fn resuming_server(
    root: &Path,
    replica: &Issued,
    ca_pem: &str,
    extra: &[&str],
) -> (AtomicDir, Echo, Sidecar) {
    let dir = AtomicDir::new(&root.join("replica")).unwrap();
    publish(&dir, replica, ca_pem, None);
    let echo = echo_target().await;
    let mut args = vec!["--resumption", "--admin", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let sc = start_server(dir.path(), &echo.addr.to_string(), &args).await;
    (dir, echo, sc)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resumption_is_off_by_default_and_no_ticket_is_sent() {
    let srv = ServerSide::start(&["--admin", "127.0.0.1:0"]).await;
    let cfg = holder(&srv.controller, &srv.pki.ca.cert_pem, false);
    let no_tickets = Outcome { tickets: 0, ..FULL };
    assert_eq!(session(&srv.addr, &cfg).await, no_tickets);
    assert_eq!(session(&srv.addr, &cfg).await, no_tickets);
    let admin = srv.sidecar.admin();
    assert_eq!(
        counter(&admin, HANDSHAKES, &[("route", "server")]).await,
        2.0
    );
    assert_eq!(
        counter(&admin, RESUMPTIONS, &[("route", "server")]).await,
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_route_resumes_tls13_sessions_and_counts_them() {
    let srv = ServerSide::start(&["--resumption", "--admin", "127.0.0.1:0"]).await;
    let cfg = holder(&srv.controller, &srv.pki.ca.cert_pem, false);
    assert_eq!(session(&srv.addr, &cfg).await, FULL);
    assert_eq!(session(&srv.addr, &cfg).await, RESUMED);
    assert_eq!(session(&srv.addr, &cfg).await, RESUMED);
    let admin = srv.sidecar.admin();
    assert_eq!(
        counter(&admin, HANDSHAKES, &[("route", "server")]).await,
        3.0
    );
    assert_eq!(
        counter(&admin, RESUMPTIONS, &[("route", "server")]).await,
        2.0
    );
    assert_eq!(srv.echo.accepted(), 3);
}

/// `--tls-min-version 1.2` admits TLS 1.2 peers, but `--resumption` never
/// resumes them: no session-ID cache, no TLS 1.2 ticket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls12_sessions_are_never_resumed() {
    let srv = ServerSide::start(&["--resumption", "--tls-min-version", "1.2"]).await;
    let cfg = holder(&srv.controller, &srv.pki.ca.cert_pem, true);
    let tls12 = Outcome { tickets: 0, ..FULL };
    assert_eq!(session(&srv.addr, &cfg).await, tls12);
    assert_eq!(session(&srv.addr, &cfg).await, tls12);
    // And TLS 1.3 on the same route does resume.
    let cfg = holder(&srv.controller, &srv.pki.ca.cert_pem, false);
    assert_eq!(session(&srv.addr, &cfg).await, FULL);
    assert_eq!(session(&srv.addr, &cfg).await, RESUMED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_peer_holding_a_ticket_gets_a_full_handshake_and_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("test CA");
    let replica = pki.leaf(REPLICA, Role::Server);
    let controller = pki.leaf(CONTROLLER, Role::Client);
    let ca = &pki.ca.cert_pem;
    let (dir, echo, sc) = resuming_server(tmp.path(), &replica, ca, &[]).await;
    let addr = sc.addr("server");
    let cfg = holder(&controller, ca, false);
    assert_eq!(session(&addr, &cfg).await, FULL);
    let crl = pki.crl(1, &[&controller]).pem;
    apply(&sc, &dir, &replica, ca, Some(&crl)).await;
    assert_eq!(session(&addr, &cfg).await, REFUSED);
    let admin = sc.admin();
    let revoked = [("route", "server"), ("reason", "revoked")];
    assert_eq!(counted(&admin, FAILURES, &revoked, 1.0).await, 1.0);
    assert_eq!(
        counter(&admin, RESUMPTIONS, &[("route", "server")]).await,
        0.0
    );
    assert_eq!(echo.accepted(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_of_a_removed_ca_holding_a_ticket_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let ours = Pki::new("our CA");
    let theirs = Pki::new("their CA");
    let replica = ours.leaf(REPLICA, Role::Server);
    let controller = theirs.leaf(CONTROLLER, Role::Client);
    let both = format!("{}{}", ours.ca.cert_pem, theirs.ca.cert_pem);
    let (dir, echo, sc) = resuming_server(tmp.path(), &replica, &both, &[]).await;
    let addr = sc.addr("server");
    let cfg = holder(&controller, &ours.ca.cert_pem, false);
    assert_eq!(session(&addr, &cfg).await, FULL);
    assert_eq!(session(&addr, &cfg).await, RESUMED);
    apply(&sc, &dir, &replica, &ours.ca.cert_pem, None).await;
    assert_eq!(session(&addr, &cfg).await, REFUSED);
    let unknown = [("route", "server"), ("reason", "unknown_ca")];
    assert_eq!(counted(&sc.admin(), FAILURES, &unknown, 1.0).await, 1.0);
    assert_eq!(echo.accepted(), 2);
}

/// Pins change only with a restart; the restarted route's ticket keys are
/// new, so the ticket the old one issued is worthless.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_pinned_route_does_not_resume_an_earlier_ticket() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("test CA");
    let replica = pki.leaf(REPLICA, Role::Server);
    let controller = pki.leaf(CONTROLLER, Role::Client);
    let other = pki.leaf(CONTROLLER, Role::Client);
    let pin = |l: &Issued| {
        let spki = mtls_sidecar::identity::pin::spki_sha256(l.cert_der.as_ref()).unwrap();
        mtls_sidecar::identity::pin::encode(&spki)
    };
    let ca = &pki.ca.cert_pem;
    let pinned = pin(&controller);
    let (dir, echo, sc) =
        resuming_server(tmp.path(), &replica, ca, &["--allow-spki-sha256", &pinned]).await;
    let cfg = holder(&controller, ca, false);
    assert_eq!(session(&sc.addr("server"), &cfg).await, FULL);
    drop(sc);
    let repinned = pin(&other);
    let args = [
        "--resumption",
        "--admin",
        "127.0.0.1:0",
        "--allow-spki-sha256",
        &repinned,
    ];
    let sc = start_server(dir.path(), &echo.addr.to_string(), &args).await;
    assert_eq!(session(&sc.addr("server"), &cfg).await, REFUSED);
    let mismatch = [("route", "server"), ("reason", "pin_mismatch")];
    assert_eq!(counted(&sc.admin(), FAILURES, &mismatch, 1.0).await, 1.0);
    assert_eq!(echo.accepted(), 1);
}

/// Waits (on the wall clock: the event is time itself) until `t` passed.
async fn until_past(t: SystemTime) {
    eventually("the certificate to expire", || {
        SystemTime::now() > t + Duration::from_secs(1)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_peer_holding_a_ticket_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("test CA");
    let replica = pki.leaf(REPLICA, Role::Server);
    let now = SystemTime::now();
    let ends = now + Duration::from_secs(10);
    let spec =
        LeafSpec::dns(CONTROLLER, Role::Client, 1).valid(now - Duration::from_secs(60), ends);
    let controller = pki.issue(&spec);
    let ca = &pki.ca.cert_pem;
    let (_dir, echo, sc) = resuming_server(tmp.path(), &replica, ca, &[]).await;
    let addr = sc.addr("server");
    let cfg = holder(&controller, ca, false);
    assert_eq!(session(&addr, &cfg).await, FULL);
    until_past(ends).await;
    assert_eq!(session(&addr, &cfg).await, REFUSED);
    let expired = [("route", "server"), ("reason", "expired")];
    assert_eq!(counted(&sc.admin(), FAILURES, &expired, 1.0).await, 1.0);
    assert_eq!(echo.accepted(), 1);
}

/// `openssl s_client` presenting the identity in `d`, with `extra` flags.
fn s_client(addr: &str, d: &Path, extra: &[&str]) -> Proc {
    common::foreign::s_client_with_cert(addr, d, REPLICA, extra)
}

/// A first, full `s_client` session saved to `sess`; what
/// `openssl sess_id -text` reads in it.
async fn saved_session(addr: &str, d: &Path, sess: &str) -> String {
    let mut first = s_client(addr, d, &["-sess_out", sess]);
    first.send(b"first\n").await;
    let out = first.wait_stdout("first\n").await;
    assert!(out.contains("New, TLSv1.3"), "{out}");
    eventually("s_client to save the session", || {
        std::fs::metadata(sess).is_ok_and(|m| m.len() > 0)
    })
    .await;
    drop(first);
    let text = std::process::Command::new("openssl")
        .args(["sess_id", "-in", sess, "-noout", "-text"])
        .output()
        .expect("openssl sess_id");
    String::from_utf8_lossy(&text.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openssl_s_client_resumes_with_a_saved_session() {
    if tools::skip_unless(&["openssl"]) {
        return;
    }
    let srv = ServerSide::start(&["--resumption"]).await;
    let sess = srv.tmp.path().join("session.pem");
    let sess = sess.to_str().unwrap();
    // The ticket advertises the time left until its end: the ticket
    // bound (one hour) here, the certificates lasting longer. Kills
    // `lifetime -> 0` / `1`.
    let text = saved_session(&srv.addr, &srv.controller_dir, sess).await;
    let hint: u64 = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("TLS session ticket lifetime hint: "))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no lifetime hint:\n{text}"));
    assert!(
        (3000..=3600).contains(&hint),
        "lifetime hint {hint}:\n{text}"
    );
    let mut again = s_client(&srv.addr, &srv.controller_dir, &["-sess_in", sess]);
    again.send(b"again\n").await;
    let out = again.wait_stdout("again\n").await;
    assert!(out.contains("Reused, TLSv1.3"), "{out}");
    assert_eq!(srv.echo.accepted(), 2);
}

/// A target that echoes and records, per accepted connection, each chunk
/// it reads and when.
struct Recorder {
    addr: String,
    chunks: Arc<std::sync::Mutex<Vec<Chunk>>>,
}

/// A chunk a [`Recorder`] read: its connection (in accept order), when,
/// and the bytes.
type Chunk = (usize, std::time::Instant, Vec<u8>);

impl Recorder {
    async fn start() -> Recorder {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let chunks = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = chunks.clone();
        tokio::spawn(async move {
            for conn in 0.. {
                let Ok((mut s, _)) = listener.accept().await else {
                    return;
                };
                let seen = seen.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    while let Ok(n @ 1..) = s.read(&mut buf).await {
                        let at = std::time::Instant::now();
                        seen.lock().unwrap().push((conn, at, buf[..n].to_vec()));
                        if s.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Recorder { addr, chunks }
    }

    /// Connection `conn`'s chunks, in order, with when each arrived.
    fn of(&self, conn: usize) -> Vec<(std::time::Instant, Vec<u8>)> {
        let all = self.chunks.lock().unwrap();
        all.iter()
            .filter(|(c, _, _)| *c == conn)
            .map(|(_, at, b)| (*at, b.clone()))
            .collect()
    }
}

/// Never 0-RTT: `openssl s_client -early_data` on a resumed session
/// offers early data to a `--resumption` server route. The ticket allows
/// none (`Max Early Data: 0`), s_client reports it not accepted, the
/// session is resumed, and the target receives nothing before the
/// handshake completed and never the early data itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_data_on_a_resumed_session_never_reaches_the_target_as_0rtt() {
    if tools::skip_unless(&["openssl"]) {
        return;
    }
    let creds = Creds::new();
    let target = Recorder::start().await;
    let sc = start_server(&creds.server_dir, &target.addr, &["--resumption"]).await;
    let addr = sc.addr("server");
    let d = &creds.client_dir;
    let sess = creds.tmp.path().join("session.pem");
    let sess = sess.to_str().unwrap();
    let text = saved_session(&addr, d, sess).await;
    assert!(text.contains("Max Early Data: 0"), "{text}");
    // Offer early data anyway on the resumed session.
    const EARLY: &[u8] = b"EARLY-0RTT-PAYLOAD\n";
    let early = creds.tmp.path().join("early.txt");
    std::fs::write(&early, EARLY).unwrap();
    let early = early.to_str().unwrap();
    let mut again = s_client(&addr, d, &["-sess_in", sess, "-early_data", early]);
    let out = again.wait_stdout("Early data was ").await;
    assert!(out.contains("Reused, TLSv1.3"), "{out}");
    assert!(!out.contains("Early data was accepted"), "{out}");
    assert!(
        out.contains("Early data was not sent") || out.contains("Early data was rejected"),
        "{out}"
    );
    // s_client has reported the finished handshake: only now is anything
    // sent on the connection's application data.
    let handshake_done = std::time::Instant::now();
    again.send(b"again\n").await;
    again.wait_stdout("again\n").await;
    let got = target.of(1);
    assert!(!got.is_empty(), "the resumed connection reached no target");
    for (at, bytes) in &got {
        assert!(
            *at >= handshake_done,
            "bytes before the handshake: {bytes:?}"
        );
    }
    let all: Vec<u8> = got.into_iter().flat_map(|(_, b)| b).collect();
    assert_eq!(all, b"again\n", "{}", String::from_utf8_lossy(&all));
    assert!(target.of(2).is_empty());
}

/// A resuming server route and, in front of it, a client route started
/// with `client_args`, each on its own atomically published directory.
struct Chain {
    pki: Pki,
    cdir: AtomicDir,
    echo: Echo,
    server: Sidecar,
    client: Sidecar,
    _sdir: AtomicDir,
    _tmp: tempfile::TempDir,
}

async fn client_to_resuming_server(client_args: &[&str]) -> Chain {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("test CA");
    let replica = pki.leaf(REPLICA, Role::Server);
    let controller = pki.leaf(CONTROLLER, Role::Client);
    let ca = &pki.ca.cert_pem;
    let (sdir, echo, server) = resuming_server(tmp.path(), &replica, ca, &[]).await;
    let cdir = AtomicDir::new(&tmp.path().join("controller")).unwrap();
    publish(&cdir, &controller, ca, None);
    let client = start_client(cdir.path(), &server.addr("server"), client_args).await;
    Chain {
        pki,
        cdir,
        echo,
        server,
        client,
        _sdir: sdir,
        _tmp: tmp,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_route_resumes_with_a_server_route_and_forgets_on_its_own_revision() {
    let Chain {
        pki,
        cdir,
        echo,
        server,
        client,
        _sdir,
        _tmp,
    } = client_to_resuming_server(&["--resumption", "--admin", "127.0.0.1:0"]).await;
    let ca = &pki.ca.cert_pem;
    let c = &client;
    let through = move || async move {
        let mut s = connect_plain(c).await;
        assert_eq!(roundtrip(&mut s, b"hello").await, b"hello");
    };
    let resumptions = |sc: &Sidecar, route: &'static str| {
        let admin = sc.admin();
        async move { counter(&admin, RESUMPTIONS, &[("route", route)]).await }
    };
    through().await;
    through().await;
    assert_eq!(resumptions(&client, "client").await, 1.0);
    assert_eq!(resumptions(&server, "server").await, 1.0);
    // A new revision of the client's own credentials (a renewed leaf)
    // empties its session cache: the next handshake is a full one.
    apply(
        &client,
        &cdir,
        &pki.leaf(CONTROLLER, Role::Client),
        ca,
        None,
    )
    .await;
    through().await;
    assert_eq!(resumptions(&client, "client").await, 1.0);
    assert_eq!(resumptions(&server, "server").await, 1.0);
    through().await;
    assert_eq!(resumptions(&client, "client").await, 2.0);
    assert_eq!(resumptions(&server, "server").await, 2.0);
    assert_eq!(echo.accepted(), 4);
}

/// A client route without `--resumption` offers no ticket, even to a
/// server route that issues them: every handshake is a full one. Kills
/// `client_resumption -> Default::default()` (rustls's default keeps
/// sessions, TLS 1.2 ones too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_route_without_resumption_never_resumes() {
    // Every field bound: the directories live as long as the sidecars.
    let Chain {
        echo,
        server,
        client,
        cdir: _cdir,
        _sdir,
        _tmp,
        ..
    } = client_to_resuming_server(&["--admin", "127.0.0.1:0"]).await;
    for _ in 0..3 {
        let mut s = connect_plain(&client).await;
        assert_eq!(roundtrip(&mut s, b"hello").await, b"hello");
    }
    // Read as exposed (a metric renamed or missing fails, not reads 0).
    let page = scrape(&server.admin()).await;
    let labels = [("route", "server")];
    assert_eq!(page.value(HANDSHAKES, &labels), Some(3.0));
    assert_eq!(page.value(RESUMPTIONS, &labels), Some(0.0));
    assert_eq!(echo.accepted(), 3);
}

/// A foreign TLS 1.3 server that issues tickets (rustls's own ticketer)
/// and resumes them whatever its certificate's validity: the client route
/// resumes, and its re-judgement of the stored chain is what refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_route_closes_a_resumed_session_whose_server_certificate_expired() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("test CA");
    let now = SystemTime::now();
    let ends = now + Duration::from_secs(10);
    let spec = LeafSpec::dns(REPLICA, Role::Server, 1).valid(now - Duration::from_secs(60), ends);
    let replica = pki.issue(&spec);
    let controller = pki.leaf(CONTROLLER, Role::Client);
    let cdir = pki.dir(tmp.path(), "controller", &controller);
    let mut sc = (*server_config(&replica, Some(&pki.ca.cert_pem))).clone();
    sc.ticketer = rustls::crypto::aws_lc_rs::Ticketer::new().unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(sc));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let served = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = served.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, count) = (acceptor.clone(), count.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut buf = [0u8; 64];
                while let Ok(n) = tls.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    if tls.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    let client = start_client(&cdir, &addr, &["--resumption", "--admin", "127.0.0.1:0"]).await;
    let mut s = connect_plain(&client).await;
    assert_eq!(roundtrip(&mut s, b"hello").await, b"hello");
    drop(s);
    until_past(ends).await;
    let mut s = connect_plain(&client).await;
    let _ = s.write_all(b"late").await;
    assert!(read_until_closed(&mut s).await.is_empty());
    let admin = client.admin();
    let expired = [("route", "client"), ("reason", "expired")];
    scrape_until(&admin, "an expired refusal", |m| {
        m.value(FAILURES, &expired) == Some(1.0)
    })
    .await;
    assert_eq!(
        counter(&admin, RESUMPTIONS, &[("route", "client")]).await,
        0.0
    );
    let line = client
        .wait_field("handshake refused", "reason", "expired")
        .await;
    assert!(line.contains("resumed session"), "{line}");
    assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// The config file's `resumption` key is the flag's twin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_config_key_turns_resumption_on_for_its_route() {
    let creds = Creds::new();
    let echo = echo_target().await;
    let config = creds.tmp.path().join("sidecar.toml");
    std::fs::write(
        &config,
        format!(
            "tls_dir = \"{}\"\n\n[[route]]\nname = \"replica\"\nmode = \"server\"\n\
             listen = \"127.0.0.1:0\"\ntarget = \"{}\"\nallow_san = [\"{CONTROLLER}\"]\n\
             resumption = true\n",
            creds.server_dir.display(),
            echo.addr
        ),
    )
    .unwrap();
    let sc = Sidecar::start(&["run", "--config", config.to_str().unwrap()], 1).await;
    let addr = sc.addr("replica");
    let cfg = holder(&creds.controller, &creds.pki.ca.cert_pem, false);
    assert_eq!(session(&addr, &cfg).await, FULL);
    assert_eq!(session(&addr, &cfg).await, RESUMED);
}

//! A `client` route keeps judging the server it is connected to, not only at
//! the handshake: when the client's own trust shrinks (the CA that issued the
//! server's certificate leaves its `ca.crt`, after any `--trust-grace`) or
//! the server's certificate expires, the live connection is closed
//! (`revoked` / `expired`), and only that one: a second route of the same
//! sidecar, to a server whose CA stays, keeps flowing.

use crate::common;

use std::time::{Duration, SystemTime};

use common::*;
use mtls_sidecar::pki::{write_secret_dir, Issued, LeafSpec, Role};
use mtls_sidecar::tools::atomic_writer::AtomicDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The client sidecar's route to the server whose certificate CA A issued.
const TO_A: &str = "to_a";
/// Its route to the server whose certificate CA B issued (B always stays).
const TO_B: &str = "to_b";

/// Two servers (certificates from CA A and CA B, both admitting B-issued
/// clients) and one client sidecar with a route to each, trusting A and B,
/// its credentials a kubelet-style directory the test revises.
struct World {
    _tmp: tempfile::TempDir,
    a: Pki,
    b: Pki,
    /// CA A's and CA B's certificates, one bundle.
    both: String,
    /// Server A's credentials (revised by the expiry test).
    server_a_dir: AtomicDir,
    server_a: Sidecar,
    _server_b: Sidecar,
    client_dir: AtomicDir,
    client_leaf: Issued,
    client: Sidecar,
    _echo: (Echo, Echo),
}

/// Writes one kubelet-style revision (`..data` swapped in at once).
fn revise(dir: &AtomicDir, leaf: &Issued, ca: &str) {
    let files: [(&str, &[u8]); 3] = [
        ("tls.crt", leaf.cert_pem.as_bytes()),
        ("tls.key", leaf.key_pem.as_bytes()),
        ("ca.crt", ca.as_bytes()),
    ];
    dir.publish(&files).expect("publish a revision");
}

impl World {
    async fn start(grace: Duration) -> World {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (Pki::new("CA A"), Pki::new("CA B"));
        let both = format!("{}{}", a.ca.cert_pem, b.ca.cert_pem);
        let echo = (echo_target().await, echo_target().await);

        let server_a_dir = AtomicDir::new(&tmp.path().join("server-a")).unwrap();
        revise(&server_a_dir, &a.leaf(REPLICA, Role::Server), &both);
        let fast = ["--reload-interval", "100ms"];
        let server_a = start_server(server_a_dir.path(), &echo.0.addr.to_string(), &fast).await;
        let b_dir = tmp.path().join("server-b");
        write_secret_dir(&b_dir, &b.leaf(REPLICA, Role::Server), &b.ca.cert_pem).unwrap();
        let server_b = start_server(&b_dir, &echo.1.addr.to_string(), &[]).await;

        let client_dir = AtomicDir::new(&tmp.path().join("client")).unwrap();
        let client_leaf = b.leaf(CONTROLLER, Role::Client);
        revise(&client_dir, &client_leaf, &both);
        let mut config = format!(
            "tls_dir = {:?}\nadmin = \"127.0.0.1:0\"\nreload_interval = \"100ms\"\n\
             trust_grace = \"{}ms\"\n",
            client_dir.path(),
            grace.as_millis()
        );
        for (route, server) in [(TO_A, &server_a), (TO_B, &server_b)] {
            config += &format!(
                "[[route]]\nname = \"{route}\"\nmode = \"client\"\nlisten = \"127.0.0.1:0\"\n\
                 target = \"{}\"\nserver_name = \"{REPLICA}\"\n",
                server.addr("server")
            );
        }
        let path = tmp.path().join("client.toml");
        std::fs::write(&path, config).unwrap();
        let client = Sidecar::start(&["run", "--config", path.to_str().unwrap()], 2).await;
        World {
            _tmp: tmp,
            a,
            b,
            both,
            server_a_dir,
            server_a,
            _server_b: server_b,
            client_dir,
            client_leaf,
            client,
            _echo: echo,
        }
    }

    /// An application connection into `route`, shown to be forwarded.
    async fn connect(&self, route: &str) -> TcpStream {
        let mut s = TcpStream::connect(self.client.addr(route)).await.unwrap();
        assert!(echoed(&mut s, route.as_bytes()).await, "{route} forwards");
        s
    }

    /// The client drops CA A from its `ca.crt`; returns the line that
    /// applied it.
    async fn drop_a(&self) -> String {
        revise(&self.client_dir, &self.client_leaf, &self.b.ca.cert_pem);
        self.client
            .wait_log(&["applied credential revision", "anchors="])
            .await
    }

    /// Waits for the line saying `route`'s connection closed for `reason`.
    async fn closed_line(&self, route: &str, reason: &str) -> String {
        let mut found = None;
        eventually(&format!("{route} closed as {reason}"), || {
            found = self.client.logs().into_iter().find(|l| {
                l.contains("connection closed")
                    && has_field(l, "route", route)
                    && has_field(l, "reason", reason)
            });
            found.is_some()
        })
        .await;
        found.unwrap_or_default()
    }

    /// `mtls_sidecar_connections_closed_total` reads 1 for `route` and
    /// `reason`, and nothing for the other route.
    async fn counted_once(&self, route: &str, reason: &str) {
        let m = self.client.wait_closed(route, reason, 1.0).await;
        let other = if route == TO_A { TO_B } else { TO_A };
        let series = [("route", other), ("reason", reason)];
        assert_eq!(m.get(CLOSED, &series), 0.0, "{:#?}", m.samples);
    }

    /// The route to B is untouched: its connection from before still
    /// forwards, and nothing on it was closed.
    async fn b_untouched(&self, mut b_conn: TcpStream) {
        assert!(echoed(&mut b_conn, b"B still flows").await);
        let closed: Vec<String> = self
            .client
            .logs()
            .into_iter()
            .filter(|l| l.contains("connection closed") && has_field(l, "route", TO_B))
            .collect();
        assert!(closed.is_empty(), "{closed:#?}");
    }
}

/// Sends `msg` and reads its echo: false when the connection ends first.
async fn echoed(s: &mut TcpStream, msg: &[u8]) -> bool {
    if s.write_all(msg).await.is_err() {
        return false;
    }
    let mut buf = vec![0u8; msg.len()];
    let got = tokio::time::timeout(DEADLINE, s.read_exact(&mut buf))
        .await
        .expect("an echo or a close");
    got.is_ok() && buf == msg
}

/// The connection is closed on the application, with nothing more sent.
async fn closed_on_app(s: &mut TcpStream) {
    let got = read_until_closed(s).await;
    assert!(got.is_empty(), "{got:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn losing_the_servers_ca_closes_that_connection_as_revoked() {
    let w = World::start(Duration::ZERO).await;
    let mut a_conn = w.connect(TO_A).await;
    let b_conn = w.connect(TO_B).await;

    let applied = w.drop_a().await;
    assert!(has_field(&applied, "trust_shrank", "true"), "{applied}");
    closed_on_app(&mut a_conn).await;
    w.closed_line(TO_A, "revoked").await;
    let why = w
        .client
        .wait_log(&["its peer is no longer trusted", "route=to_a"])
        .await;
    assert!(why.contains(" WARN "), "{why}");
    assert!(why.contains("subject=CN=replica-0.env-1.svc"), "{why}");
    w.counted_once(TO_A, "revoked").await;
    w.b_untouched(b_conn).await;

    // A new connection to A is refused at its handshake now.
    let mut s = TcpStream::connect(w.client.addr(TO_A)).await.unwrap();
    assert!(!echoed(&mut s, b"after the drop").await);
    w.client
        .wait_field("handshake refused", "reason", "unknown_ca")
        .await;
}

/// Drops A under a grace and shows A's connection still forwarding after
/// the drop was applied; `None` when the machine was too slow to show it
/// before the grace ended (the caller retries with a longer one); else
/// when CA A retires.
async fn inside_grace(w: &World, a_conn: &mut TcpStream) -> Option<SystemTime> {
    let applied = w.drop_a().await;
    // The grace started: A is still trusted, with a retirement time.
    assert!(has_field(&applied, "trust_shrank", "false"), "{applied}");
    assert!(has_field(&applied, "anchors", "2"), "{applied}");
    let st = status(&w.client.admin()).await;
    let creds = &st["credentials"][0];
    let a = creds["trust_anchors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["subject"].as_str().unwrap_or("").contains("CA A"))
        .unwrap_or_else(|| panic!("CA A dropped at once: {creds}"))
        .clone();
    let retire_at = a["retire_at"]
        .as_str()
        .and_then(|t| humantime::parse_rfc3339(t).ok())
        .unwrap_or_else(|| panic!("CA A has no retirement time: {a}"));
    let flows = echoed(a_conn, b"inside the grace").await;
    if w.client.log_count("trust grace ended") > 0 {
        return None;
    }
    assert!(flows, "A's connection closed inside the grace");
    let m = scrape(&w.client.admin()).await;
    assert_eq!(
        m.get(CLOSED, &[("route", TO_A), ("reason", "revoked")]),
        0.0
    );
    Some(retire_at)
}

#[tokio::test(flavor = "multi_thread")]
async fn trust_grace_delays_the_close_until_it_ends() {
    // Long enough to show the connection alive after the drop; doubled
    // when a busy machine could not show it in time.
    let mut grace = Duration::from_secs(3);
    let (w, mut a_conn, b_conn, retire_at) = loop {
        assert!(grace < DEADLINE, "could not act inside the grace");
        let w = World::start(grace).await;
        let mut a_conn = w.connect(TO_A).await;
        let b_conn = w.connect(TO_B).await;
        if let Some(g) = inside_grace(&w, &mut a_conn).await {
            break (w, a_conn, b_conn, g);
        }
        grace *= 2;
    };
    let ended = w.client.wait_log(&["trust grace ended"]).await;
    closed_on_app(&mut a_conn).await;
    let line = w.closed_line(TO_A, "revoked").await;
    // Closed when the grace ended, not before. (By the clock: the poller
    // logs the retirement after the swap the route acts on, so the close
    // line may come first.)
    assert!(log_time(&ended) >= retire_at, "{ended}");
    assert!(log_time(&line) >= retire_at, "{line}");
    w.counted_once(TO_A, "revoked").await;
    w.b_untouched(b_conn).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_servers_certificate_expiring_closes_that_connection_as_expired() {
    let w = World::start(Duration::ZERO).await;
    let b_conn = w.connect(TO_B).await;
    // Server A takes a certificate expiring a few seconds ahead; a machine
    // too busy to connect before that gets a longer-lived one.
    let mut left = Duration::from_secs(3);
    let mut revisions = 0;
    let (mut a_conn, not_after) = loop {
        assert!(left < DEADLINE, "could not connect before the expiry");
        let now = SystemTime::now();
        let not_after = now + left;
        left *= 2;
        let spec =
            LeafSpec::dns(REPLICA, Role::Server, 1).valid(now - Duration::from_secs(60), not_after);
        revise(&w.server_a_dir, &w.a.issue(&spec), &w.both);
        revisions += 1;
        eventually("server A applies the short-lived certificate", || {
            w.server_a.log_count("applied credential revision") >= revisions
        })
        .await;
        let mut s = TcpStream::connect(w.client.addr(TO_A)).await.unwrap();
        if echoed(&mut s, b"alive").await {
            break (s, not_after);
        }
    };
    closed_on_app(&mut a_conn).await;
    let line = w.closed_line(TO_A, "expired").await;
    // Not before the certificate's last second (X.509 keeps whole seconds).
    let since_epoch = |t: SystemTime| t.duration_since(SystemTime::UNIX_EPOCH).unwrap();
    let last_second = since_epoch(not_after).as_secs();
    assert!(
        since_epoch(log_time(&line)).as_secs() >= last_second,
        "{line}"
    );
    w.counted_once(TO_A, "expired").await;
    w.b_untouched(b_conn).await;
}

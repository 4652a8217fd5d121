//! Transparent mode against the real kernel: network namespaces of the
//! test's own, the shipped nftables rules (deploy/nftables/) loaded into
//! them, the real binary inside them, and an application that dials
//! `10.77.0.2:2100` or `[fd00:77::2]:2100` as if no sidecar existed.
//!
//! Topology (every address lives inside the two namespaces each test
//! creates; nothing is routed anywhere else):
//!
//! ```text
//!   namespace A (controller host)          namespace B (replica host)
//!   controller ──▶ nft redirect            server sidecar [::]:6877
//!       │                                      │ (inbound rules: 2100 → 6877)
//!       ▼                                      ▼
//!   client sidecar [::]:15001  ══mTLS══▶  replica app [::]:2100
//!   (transparent, --mark)   va 10.77.0.1  vb 10.77.0.2, .3 / fd00:77::1, ::2
//! ```
//!
//! Needs root, `ip` and `nft`. Where they are missing the tests fail,
//! unless `MTLS_SIDECAR_SKIP_NETNS=1` is set: then they print why and pass
//! as skipped. CI installs both (.ci/run).

mod common;

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::*;
use mtls_sidecar::pki::Role;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const MARK: &str = "0x6d74";
const OUTBOUND_NFT: &str = include_str!("../deploy/nftables/outbound.nft");
const INBOUND_NFT: &str = include_str!("../deploy/nftables/inbound.nft");
/// The shipped outbound rules' loop guard.
const MARK_SKIP: &str = "meta mark $SIDECAR_MARK return";

// ---- Namespaces ----

/// Why namespaces cannot be used here, if they cannot.
fn netns_unavailable() -> Option<String> {
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root".into());
    }
    for tool in ["ip", "nft"] {
        let found = Command::new(tool)
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok();
        if !found {
            return Some(format!("no `{tool}` (apt-get install iproute2 nftables)"));
        }
    }
    None
}

/// True when the test must not run (and says so); panics when namespaces
/// are unavailable and skipping was not asked for.
fn skip(test: &str) -> bool {
    let Some(why) = netns_unavailable() else {
        return false;
    };
    if std::env::var("MTLS_SIDECAR_SKIP_NETNS").as_deref() == Ok("1") {
        eprintln!("skipped {test}: cannot create network namespaces ({why})");
        return true;
    }
    panic!(
        "{test}: cannot create network namespaces ({why}); \
         set MTLS_SIDECAR_SKIP_NETNS=1 to skip"
    );
}

/// A network namespace this test created; deleted when dropped.
struct Netns {
    name: String,
}

static SEQ: AtomicUsize = AtomicUsize::new(0);

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl Netns {
    fn new(tag: &str) -> Netns {
        let name = format!(
            "mtls-t-{}-{}{tag}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::SeqCst)
        );
        run(Command::new("ip").args(["netns", "add", &name]));
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    /// `ip -n NAME args...`
    fn ip(&self, args: &[&str]) {
        run(Command::new("ip").arg("-n").arg(&self.name).args(args));
    }

    /// Loads an nftables ruleset into the namespace.
    fn nft(&self, rules: &str) {
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.name, "nft", "-f", "-"])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn nft");
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(rules.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "nft -f failed: {}\n{rules}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn nft_list(&self, what: &[&str]) -> String {
        run(Command::new("ip")
            .args(["netns", "exec", &self.name, "nft", "list"])
            .args(what))
    }

    /// Moves the calling thread into this namespace: sockets it creates
    /// from now on live here (a `#[tokio::test]` runs on its own thread,
    /// current-thread runtime, so the test's sockets follow).
    fn enter(&self) {
        let f = std::fs::File::open(format!("/run/netns/{}", self.name)).expect("open netns");
        let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
    }

    /// The real binary, started inside this namespace.
    async fn sidecar(&self, args: &[&str]) -> Sidecar {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name, &bin()])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let sc = Sidecar::from_command(cmd);
        sc.wait_log(&[" listening ", "route="]).await;
        sc
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// Two namespaces joined by a veth pair: A (the controller's host,
/// 10.77.0.1, fd00:77::1) and B (the replicas' host, 10.77.0.2 and
/// 10.77.0.3, fd00:77::2).
fn two_hosts() -> (Netns, Netns) {
    let a = Netns::new("a");
    let b = Netns::new("b");
    a.ip(&[
        "link", "add", "va", "type", "veth", "peer", "name", "vb", "netns", &b.name,
    ]);
    a.ip(&["addr", "add", "10.77.0.1/24", "dev", "va"]);
    a.ip(&["addr", "add", "fd00:77::1/64", "dev", "va", "nodad"]);
    b.ip(&["addr", "add", "10.77.0.2/24", "dev", "vb"]);
    b.ip(&["addr", "add", "10.77.0.3/24", "dev", "vb"]);
    b.ip(&["addr", "add", "fd00:77::2/64", "dev", "vb", "nodad"]);
    a.ip(&["link", "set", "va", "up"]);
    b.ip(&["link", "set", "vb", "up"]);
    (a, b)
}

// ---- The shipped rules, with this test's values ----

/// `text` with each `define NAME = ...` line set to the given value; every
/// name must be defined there (a renamed variable fails the test).
fn with_defines(text: &str, defs: &[(&str, &str)]) -> String {
    let mut out = text.to_string();
    for (name, value) in defs {
        let prefix = format!("define {name} = ");
        let line = out
            .lines()
            .find(|l| l.starts_with(&prefix))
            .unwrap_or_else(|| panic!("the shipped rules define no {name}"))
            .to_string();
        out = out.replacen(&line, &format!("{prefix}{value}"), 1);
    }
    out
}

/// `text` without the rule line that is exactly `rule` (not a comment).
fn without_rule(text: &str, rule: &str) -> String {
    assert!(
        text.lines().any(|l| l.trim() == rule),
        "the shipped rules have no {rule:?} line"
    );
    text.lines()
        .filter(|l| l.trim() != rule)
        .collect::<Vec<_>>()
        .join("\n")
}

fn outbound_rules(ports: &str) -> String {
    with_defines(
        OUTBOUND_NFT,
        &[
            ("SIDECAR_MARK", MARK),
            ("SIDECAR_PORT", "15001"),
            ("APP_PORTS", ports),
            ("APP_NETS_V4", "{ 10.77.0.0/24 }"),
            ("APP_NETS_V6", "{ fd00:77::/64 }"),
        ],
    )
}

fn inbound_rules() -> String {
    with_defines(
        INBOUND_NFT,
        &[("APP_PORTS", "{ 2100 }"), ("SIDECAR_PORT", "6877")],
    )
}

// ---- The applications ----

/// A plaintext application that echoes and records who connected.
struct App {
    peers: Arc<Mutex<Vec<SocketAddr>>>,
}

impl App {
    /// Listens on every address (as legacy servers do) in the current
    /// namespace.
    async fn listen(addr: &str) -> App {
        let listener = TcpListener::bind(addr).await.expect("app listen");
        let peers = Arc::new(Mutex::new(Vec::new()));
        let seen = peers.clone();
        tokio::spawn(async move {
            while let Ok((mut s, peer)) = listener.accept().await {
                seen.lock().unwrap().push(peer);
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                    let _ = w.shutdown().await;
                });
            }
        });
        App { peers }
    }

    fn peers(&self) -> Vec<SocketAddr> {
        self.peers.lock().unwrap().clone()
    }

    /// Every connection the application saw came from this host's loopback:
    /// the server sidecar's own. A peer that reached the port directly
    /// would show its 10.77/fd00:77 address.
    fn only_local_peers(&self) {
        for p in self.peers() {
            let ip = mtls_sidecar::transparent::unmap(p.ip());
            assert!(
                ip.is_loopback(),
                "the application saw {p}: plaintext crossed"
            );
        }
    }
}

async fn dial(addr: &str) -> TcpStream {
    let s = tokio::time::timeout(DEADLINE, TcpStream::connect(addr))
        .await
        .expect("connect in time")
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_nodelay(true).unwrap();
    s
}

/// What `s` receives before it is closed, after sending `msg`.
async fn closed_after(mut s: TcpStream, msg: &[u8]) -> Vec<u8> {
    let _ = s.write_all(msg).await;
    read_until_closed(&mut s).await
}

/// One sample from the admin endpoint's `/metrics` (0 when absent).
async fn metric(admin: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    let mut s = dial(admin).await;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut body = String::new();
    tokio::time::timeout(DEADLINE, s.read_to_string(&mut body))
        .await
        .expect("metrics in time")
        .unwrap();
    body.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .find(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|l| l.rsplit(' ').next())
        .map(|v| v.parse().unwrap())
        .unwrap_or(0.0)
}

/// Polls a metric until it equals `want`.
async fn metric_reaches(admin: &str, name: &str, labels: &[(&str, &str)], want: f64) {
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let got = metric(admin, name, labels).await;
        if got == want {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{name}{labels:?} is {got}, want {want}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

const CLOSED: &str = "mtls_sidecar_connections_closed_total";
const FAILED: &str = "mtls_sidecar_tls_handshake_failures_total";
const ACCEPTED: &str = "mtls_sidecar_connections_total";

struct Creds {
    _tmp: tempfile::TempDir,
    replica: String,
    controller: String,
    root: std::path::PathBuf,
}

fn creds() -> Creds {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("transparent test CA");
    let replica = pki.dir(tmp.path(), "replica", &pki.leaf(REPLICA, Role::Server));
    let controller = pki.dir(
        tmp.path(),
        "controller",
        &pki.leaf(CONTROLLER, Role::Client),
    );
    Creds {
        root: tmp.path().to_path_buf(),
        replica: replica.to_str().unwrap().to_string(),
        controller: controller.to_str().unwrap().to_string(),
        _tmp: tmp,
    }
}

/// B's server sidecar: TLS on every address, port 6877, forwarding to the
/// application on 127.0.0.1:2100.
async fn server_sidecar(b: &Netns, c: &Creds, extra: &[&str]) -> Sidecar {
    let mut args = vec![
        "server",
        "--listen",
        "[::]:6877",
        "--target",
        "127.0.0.1:2100",
        "--tls-dir",
        &c.replica,
        "--allow-san",
        CONTROLLER,
    ];
    args.extend_from_slice(extra);
    b.sidecar(&args).await
}

/// A's transparent client sidecar from a config file.
async fn client_sidecar(a: &Netns, c: &Creds, config: &str) -> Sidecar {
    let path = c.root.join("client.toml");
    std::fs::write(&path, config).unwrap();
    a.sidecar(&["run", "--config", path.to_str().unwrap()])
        .await
}

fn client_config(c: &Creds, listen: &str, rules: &str) -> String {
    format!(
        "tls_dir = \"{dir}\"\nadmin = \"127.0.0.1:9902\"\nmark = {MARK}\n\
         [[route]]\nname = \"out\"\nmode = \"client\"\nlisten = \"{listen}\"\n\
         unsafe_listen = true\ntransparent = true\n{rules}",
        dir = c.controller
    )
}

// ---- The tests ----

/// The controller dials replicas by their own addresses, IPv4 and IPv6; the
/// shipped outbound rules divert it to the transparent client sidecar,
/// which dials `original_ip:6877` with mTLS and reaches the application;
/// the application only ever sees its server sidecar's local connection.
/// An unmatched destination, a server whose SAN is not the rule's, and a
/// connection straight to the listener (not redirected) are refused.
#[tokio::test]
async fn redirected_connections_reach_the_replica_and_nothing_else_does() {
    if skip("redirected_connections_reach_the_replica_and_nothing_else_does") {
        return;
    }
    let (a, b) = two_hosts();
    let c = creds();

    b.enter();
    let app = App::listen("[::]:2100").await;
    let other_port = App::listen("[::]:2101").await;
    let _server = server_sidecar(&b, &c, &[]).await;

    a.nft(&outbound_rules("{ 2100, 2101 }"));
    let rules = format!(
        r#"
# 10.77.0.3 must be another identity: the replica there is refused.
[[route.destination]]
match = "10.77.0.3:2100"
tls_port = 6877
expect_san = ["other.env-1.svc"]
[[route.destination]]
match = "10.77.0.0/24:2100"
tls_port = 6877
expect_san = ["{REPLICA}"]
server_name = "{REPLICA}"
[[route.destination]]
match = "[fd00:77::/64]:2100"
tls_port = 6877
expect_san = ["{REPLICA}"]
# Covers the listener itself: only the not-redirected check refuses a
# connection made straight to it.
[[route.destination]]
match = "0.0.0.0/0:15001"
tls_port = 6877
expect_san = ["{REPLICA}"]
"#
    );
    // [::]:15001 takes IPv4 (as IPv4-mapped: the IPv4 lookup) and IPv6.
    let client = client_sidecar(&a, &c, &client_config(&c, "[::]:15001", &rules)).await;
    a.enter();
    let admin = "127.0.0.1:9902";

    // IPv4 and IPv6, as the application would dial them.
    for to in ["10.77.0.2:2100", "[fd00:77::2]:2100"] {
        let mut s = dial(to).await;
        assert_eq!(roundtrip(&mut s, b"hello replica").await, b"hello replica");
        drop(s);
    }
    eventually("two connections at the application", || {
        app.peers().len() == 2
    })
    .await;
    app.only_local_peers();
    client
        .wait_log(&["original_dst=[fd00:77::2]:2100", "dial=[fd00:77::2]:6877"])
        .await;

    // No rule for port 2101: closed without a byte, never forwarded.
    let s = dial("10.77.0.2:2101").await;
    assert_eq!(closed_after(s, b"secret").await, b"");
    client
        .wait_field(
            "no destination rule matches 10.77.0.2:2101",
            "reason",
            "no_destination",
        )
        .await;

    // Not redirected: straight to the listener.
    let s = dial("127.0.0.1:15001").await;
    assert_eq!(closed_after(s, b"secret").await, b"");
    client.wait_log(&["not redirected"]).await;
    metric_reaches(
        admin,
        CLOSED,
        &[("route", "out"), ("reason", "no_destination")],
        2.0,
    )
    .await;

    // 10.77.0.3's sidecar presents the replica identity, not other.env-1.svc.
    let s = dial("10.77.0.3:2100").await;
    assert_eq!(closed_after(s, b"secret").await, b"");
    metric_reaches(
        admin,
        FAILED,
        &[("route", "out"), ("reason", "bad_san")],
        1.0,
    )
    .await;

    assert!(other_port.peers().is_empty(), "port 2101 was reached");
    assert_eq!(app.peers().len(), 2, "only the two verified connections");
    app.only_local_peers();
    // The refusals are WARN lines naming the reason, rate-limited: a burst
    // of unmatched connections is counted whole and logged ten times.
    assert_eq!(client.warn_reason("no_destination").len(), 2);
    for _ in 0..10 {
        let s = dial("10.77.0.2:2101").await;
        assert_eq!(closed_after(s, b"").await, b"");
    }
    metric_reaches(
        admin,
        CLOSED,
        &[("route", "out"), ("reason", "no_destination")],
        12.0,
    )
    .await;
    assert_eq!(
        client
            .warn_lines(&["connection refused: no destination"])
            .len(),
        10,
        "at most ten no_destination lines per window"
    );
    assert!(other_port.peers().is_empty(), "port 2101 was reached");
}

/// Inbound capture: peers dial the application's own port on B, the
/// shipped inbound rules hand them to the server sidecar, which admits
/// only authenticated peers and forwards to 127.0.0.1:2100. Then the full
/// chain with the default `tls_port` (the same port, 2100): the client
/// sidecar's own connection to 10.77.0.2:2100 matches its outbound rules
/// too, and only the mark skip keeps it from coming back to the sidecar.
/// Without that rule the loop is recognised and refused at once.
#[tokio::test]
async fn inbound_capture_and_the_mark_that_prevents_a_loop() {
    if skip("inbound_capture_and_the_mark_that_prevents_a_loop") {
        return;
    }
    let (a, b) = two_hosts();
    let c = creds();

    b.enter();
    let app = App::listen("[::]:2100").await;
    b.nft(&inbound_rules());
    // Counts the server sidecar's marked packets to the application.
    b.nft(
        "table inet mtls_t_count {\n chain out {\n  type filter hook output priority 0; policy accept;\n  \
         meta mark 0x6d75 tcp dport 2100 counter\n }\n}\n",
    );
    let _server = server_sidecar(&b, &c, &["--mark", "0x6d75"]).await;

    // A plaintext peer dialing the application's port meets the TLS
    // listener, not the application.
    a.enter();
    let s = dial("10.77.0.2:2100").await;
    let got = closed_after(s, b"plaintext command\n").await;
    assert_eq!(got.first(), Some(&21), "a TLS alert, not the echo: {got:?}");
    assert!(
        app.peers().is_empty(),
        "a plaintext peer reached the application"
    );

    // The transparent client sidecar, tls_port left at its default.
    a.nft(&outbound_rules("{ 2100 }"));
    // This time from the command line: one rule per --destination.
    let client = a
        .sidecar(&[
            "client",
            "--transparent",
            "--listen",
            "127.0.0.1:15001",
            "--destination",
            "10.77.0.0/24:2100",
            "--expect-san",
            REPLICA,
            "--tls-dir",
            &c.controller,
            "--mark",
            MARK,
            "--admin",
            "127.0.0.1:9902",
            "--name",
            "out",
        ])
        .await;
    let admin = "127.0.0.1:9902";
    let mut s = dial("10.77.0.2:2100").await;
    assert_eq!(
        roundtrip(&mut s, b"via both sidecars").await,
        b"via both sidecars"
    );
    drop(s);
    client.wait_log(&["dial=10.77.0.2:2100"]).await;
    assert_eq!(app.peers().len(), 1);
    app.only_local_peers();
    let counted = b.nft_list(&["table", "inet", "mtls_t_count"]);
    assert!(
        !counted.contains("counter packets 0 bytes 0"),
        "the server sidecar's connection to the application carried no mark:\n{counted}"
    );

    // The same rules without the mark skip: the sidecar's connection to
    // 10.77.0.2:2100 is diverted back to its own listener.
    metric_reaches(admin, ACCEPTED, &[("route", "out")], 1.0).await;
    a.nft(&without_rule(&outbound_rules("{ 2100 }"), MARK_SKIP));
    let s = dial("10.77.0.2:2100").await;
    assert_eq!(closed_after(s, b"looping").await, b"");
    client.wait_log(&["redirect loop"]).await;
    // The controller's connection and the one looped copy, nothing more.
    metric_reaches(
        admin,
        CLOSED,
        &[("route", "out"), ("reason", "no_destination")],
        1.0,
    )
    .await;
    assert_eq!(metric(admin, ACCEPTED, &[("route", "out")]).await, 3.0);
    assert_eq!(
        app.peers().len(),
        1,
        "the looped connection reached the application"
    );

    // Restored, traffic flows again.
    a.nft(&outbound_rules("{ 2100 }"));
    let mut s = dial("10.77.0.2:2100").await;
    assert_eq!(roundtrip(&mut s, b"again").await, b"again");
}

/// `--mark` needs CAP_NET_ADMIN (or CAP_NET_RAW): without either, the
/// sidecar exits 2 at start-up saying so, instead of failing every
/// connection later. With them, the same command line starts.
#[tokio::test]
async fn mark_without_the_capability_exits_2_at_start_up() {
    let c = creds();
    let args = [
        "client",
        "--listen",
        "127.0.0.1:0",
        "--target",
        "127.0.0.1:9",
        "--server-name",
        REPLICA,
        "--tls-dir",
        &c.controller,
        "--mark",
        MARK,
    ];
    let root = unsafe { libc::geteuid() } == 0;
    let mut cmd = Command::new(bin());
    cmd.args(args);
    // Drops both capabilities from the bounding set of the child only:
    // root's exec then leaves them out of its permitted set. (Not root:
    // the process has neither to begin with.)
    if root {
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                for cap in [12, 13] {
                    // CAP_NET_ADMIN, CAP_NET_RAW
                    if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run without the capabilities");
    // Bounded: a sidecar that did not check would run on.
    let deadline = std::time::Instant::now() + DEADLINE;
    while child.try_wait().expect("try_wait").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("started without the capability instead of exiting 2");
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let out = child.wait_with_output().expect("output");
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("CAP_NET_ADMIN") && text.contains("--mark"),
        "{text}"
    );

    if root {
        // Positive control: with the capability, it runs.
        let sc = Sidecar::start(&args, 1).await;
        assert!(sc.exited().is_none());
    }
}

/// `run --config` refuses malformed and dead rules before starting: exit 2
/// naming the rule and the problem.
#[test]
fn bad_destination_rules_exit_2() {
    let c = creds();
    let base = format!(
        "tls_dir = \"{}\"\n[[route]]\nmode = \"client\"\nlisten = \"127.0.0.1:0\"\n\
         transparent = true\n",
        c.controller
    );
    let rule =
        |m: &str| format!("[[route.destination]]\nmatch = \"{m}\"\nexpect_san = [\"{REPLICA}\"]\n");
    for (rules, needle) in [
        (
            rule("10.0.0.0/8:2100") + &rule("10.77.0.0/16:2100"),
            "destination[1].match",
        ),
        (rule("10.0.0.1/8:2100"), "host bits"),
        (rule("fd00::/8:2100"), "brackets"),
        (rule("10.0.0.0/8"), "CIDR:PORT"),
        (String::new(), "at least one"),
        (
            "[[route.destination]]\nmatch = \"10.0.0.0/8:1\"\n".to_string(),
            "expect_san",
        ),
    ] {
        let path = c.root.join("bad.toml");
        std::fs::write(&path, format!("{base}{rules}")).unwrap();
        let (code, text) = run_bin_within(&["run", "--config", path.to_str().unwrap()], DEADLINE)
            .expect("exits at start-up");
        assert_eq!(code, 2, "{rules}: {text}");
        assert!(text.contains(needle), "{rules}: want {needle:?} in {text}");
    }
}

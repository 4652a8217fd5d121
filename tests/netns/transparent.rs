//! Transparent mode against the real kernel: network namespaces of the
//! test's own, the shipped nftables and iptables rules (deploy/transparent/) loaded into
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
//! Needs root, `ip` and `nft` (and `iptables`/`ip6tables` for the
//! iptables rules). Where one is missing the tests fail, unless
//! `MTLS_SIDECAR_SKIP` names it (`MTLS_SIDECAR_SKIP=root` skips them all):
//! then they say so on stderr and pass as skipped. CI installs them
//! (.ci/run); `scripts/test.sh` checks for them before it builds.

use crate::common;
use crate::common::spiffe as spiffe_agent;

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
const OUTBOUND_NFT: &str = include_str!("../../deploy/transparent/nftables/outbound.nft");
const INBOUND_NFT: &str = include_str!("../../deploy/transparent/nftables/inbound.nft");
const OUTBOUND_IPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/deploy/transparent/iptables/outbound.sh"
);
const INBOUND_IPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/deploy/transparent/iptables/inbound.sh"
);
/// The Kubernetes example's copy of the outbound rules.
const K8S_OUTBOUND_NFT: &str = include_str!("../../deploy/kubernetes/transparent/outbound.nft");
/// The shipped outbound rules' loop guard.
const MARK_SKIP: &str = "meta mark $SIDECAR_MARK return";

// ---- Namespaces ----

/// True when the test must not run: `MTLS_SIDECAR_SKIP` names root, `ip`
/// or `nft` (it says so). Panics when one is missing and not skipped
/// (`tools::skip_unless`).
fn skip(_test: &str) -> bool {
    skip_without(_test, &["ip", "nft"])
}

/// [`skip`], for a test that needs `programs` (and root, for namespaces).
fn skip_without(_test: &str, programs: &[&str]) -> bool {
    let mut needs = vec!["root"];
    needs.extend_from_slice(programs);
    tools::skip_unless(&needs)
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

    /// Runs a shipped iptables script in the namespace with `env` set.
    fn sh(&self, script: &str, env: &[(&str, &str)], args: &[&str]) {
        run(Command::new("ip")
            .args(["netns", "exec", &self.name, "sh", script])
            .args(args)
            .envs(env.iter().copied()));
    }

    /// `iptables`/`ip6tables ARGS` in the namespace: its output.
    fn ipt(&self, tool: &str, args: &[&str]) -> String {
        run(Command::new("ip")
            .args(["netns", "exec", &self.name, tool])
            .args(args))
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
        // SAFETY: setns(2) on a descriptor this function opened; no memory is touched.
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
    /// namespace. Connections to the capture canary's address are not
    /// counted as peers.
    async fn listen(addr: &str) -> App {
        let listener = TcpListener::bind(addr).await.expect("app listen");
        let peers = Arc::new(Mutex::new(Vec::new()));
        let seen = peers.clone();
        tokio::spawn(async move {
            while let Ok((mut s, peer)) = listener.accept().await {
                // The sidecar's capture canary (sent while the application
                // is exposed and uncovered) reaches an application on every
                // address: not a peer.
                let to = s
                    .local_addr()
                    .map(|a| mtls_sidecar::proxy::transparent::unmap(a.ip()));
                if to.ok() != Some(mtls_sidecar::target_exposure::CANARY_ADDR.into()) {
                    seen.lock().unwrap().push(peer);
                }
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
            let ip = mtls_sidecar::proxy::transparent::unmap(p.ip());
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

/// Binds `addr` once the listener this test just dropped on the same port
/// is gone. Dropping it closes our descriptor, but a process another test
/// thread is spawning at that moment holds a copy of every descriptor
/// until its `exec` (close-on-exec acts only then), and on a loaded
/// machine that window is long enough for the bind to meet the old
/// listener (`AddrInUse`: runs 1 and 3 of a stress-ng loop at 8e68e9c).
async fn rebind(addr: &str) -> std::net::TcpListener {
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        match std::net::TcpListener::bind(addr) {
            Ok(l) => return l,
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => assert!(
                std::time::Instant::now() < deadline,
                "{addr} still in use: {e}"
            ),
            Err(e) => panic!("bind {addr}: {e}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
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
    /// The CA of both identities, to revoke the replica's with a CRL.
    pki: Pki,
    replica_leaf: mtls_sidecar::pki::Issued,
    replica: String,
    controller: String,
    root: std::path::PathBuf,
}

fn creds() -> Creds {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("transparent test CA");
    let replica_leaf = pki.leaf(REPLICA, Role::Server);
    let replica = pki.dir(tmp.path(), "replica", &replica_leaf);
    let controller = pki.dir(
        tmp.path(),
        "controller",
        &pki.leaf(CONTROLLER, Role::Client),
    );
    Creds {
        pki,
        replica_leaf,
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

/// [`two_hosts`], credentials, and on B the application (port 2100) and
/// another plaintext server (2101) that no test may reach; the calling
/// thread is left in B.
async fn hosts_and_apps() -> (Netns, Netns, Creds, App, App) {
    let (a, b) = two_hosts();
    let c = creds();
    b.enter();
    let app = App::listen("[::]:2100").await;
    let other_port = App::listen("[::]:2101").await;
    (a, b, c, app, other_port)
}

/// The destination rules both diversion tests share: the replicas' IPv4
/// and IPv6 networks on port 2100, and a rule that covers the listener
/// itself.
fn replica_rules() -> String {
    format!(
        r#"[[route.destination]]
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
    )
}

/// IPv4 and IPv6, as the application would dial them: each echo comes
/// back, the application sees only its server sidecar's local connections,
/// the client logs the original destination and the address it dialed.
async fn reaches_the_replica(app: &App, client: &Sidecar) {
    for to in ["10.77.0.2:2100", "[fd00:77::2]:2100"] {
        let mut s = dial(to).await;
        assert_eq!(s.peer_addr().unwrap(), to.parse::<SocketAddr>().unwrap());
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
}

/// No rule for port 2101: closed without a byte, never forwarded, logged
/// with its original destination; straight to the listener (not
/// redirected): the same. Two `no_destination` closes, counted.
async fn refuses_unmatched_and_direct(client: &Sidecar, admin: &str) {
    // No rule for port 2101: closed without a byte, never forwarded.
    let s = dial("10.77.0.2:2101").await;
    assert_eq!(closed_after(s, b"secret").await, b"");
    let line = client
        .wait_field(
            "no destination rule matches 10.77.0.2:2101",
            "reason",
            "no_destination",
        )
        .await;
    assert!(has_field(&line, "original_dst", "10.77.0.2:2101"), "{line}");

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
}

/// `n` connections to port 2101 (no rule): each closed without a byte,
/// then the `no_destination` close counter at `total`.
async fn unmatched_burst(admin: &str, n: usize, total: f64) {
    for _ in 0..n {
        let s = dial("10.77.0.2:2101").await;
        assert_eq!(closed_after(s, b"").await, b"");
    }
    metric_reaches(
        admin,
        CLOSED,
        &[("route", "out"), ("reason", "no_destination")],
        total,
    )
    .await;
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
    let (a, b, c, app, other_port) = hosts_and_apps().await;
    let _server = server_sidecar(&b, &c, &[]).await;

    a.nft(&outbound_rules("{ 2100, 2101 }"));
    let rules = format!(
        r#"
# 10.77.0.3 must be another identity: the replica there is refused.
[[route.destination]]
match = "10.77.0.3:2100"
tls_port = 6877
expect_san = ["other.env-1.svc"]
{}"#,
        replica_rules()
    );
    // [::]:15001 takes IPv4 (as IPv4-mapped: the IPv4 lookup) and IPv6.
    let client = client_sidecar(&a, &c, &client_config(&c, "[::]:15001", &rules)).await;
    a.enter();
    let admin = "127.0.0.1:9902";

    reaches_the_replica(&app, &client).await;
    // Every line about a diverted connection names its original
    // destination, the close line included.
    client
        .wait_log(&["connection closed", "original_dst=10.77.0.2:2100"])
        .await;

    // /status lists the rules in force, in order, normalised.
    let st = status(admin).await;
    let dests = st["routes"][0]["destinations"]
        .as_array()
        .unwrap_or_else(|| panic!("no destinations in {st}"));
    assert_eq!(dests.len(), 4, "{st}");
    assert_eq!(dests[0]["match"], "10.77.0.3/32:2100");
    assert_eq!(
        dests[0]["expect_san"],
        serde_json::json!(["other.env-1.svc"])
    );
    assert_eq!(dests[1]["match"], "10.77.0.0/24:2100");
    assert_eq!(dests[1]["tls_port"], 6877);
    assert_eq!(dests[1]["expect_san"], serde_json::json!([REPLICA]));
    assert_eq!(dests[1]["server_name"], REPLICA);
    assert_eq!(dests[2]["match"], "[fd00:77::/64]:2100");
    assert!(dests[2].get("server_name").is_none(), "{st}");

    refuses_unmatched_and_direct(&client, admin).await;

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
    client
        .wait_log(&[
            "handshake refused",
            "bad_san",
            "original_dst=10.77.0.3:2100",
        ])
        .await;

    assert!(other_port.peers().is_empty(), "port 2101 was reached");
    assert_eq!(app.peers().len(), 2, "only the two verified connections");
    app.only_local_peers();
    // The refusals are WARN lines naming the reason, rate-limited: a burst
    // of unmatched connections is counted whole and logged ten times.
    assert_eq!(client.warn_reason("no_destination").len(), 2);
    unmatched_burst(admin, 10, 12.0).await;
    // The counter moves before the line is written, and the lines reach
    // this test through a reader thread: wait for them, then count.
    let lines = || {
        client
            .warn_lines(&["connection refused: no destination"])
            .len()
    };
    eventually("ten no_destination lines", || lines() >= 10).await;
    assert_eq!(lines(), 10, "at most ten no_destination lines per window");
    assert!(other_port.peers().is_empty(), "port 2101 was reached");
    // What the window held back is said once it ends (the route's flush
    // task, every second): the two past the ten.
    let summary = "no_destination refusals suppressed";
    client.wait_log(&[summary, "suppressed=2"]).await;
    // A second burst, then a stop before its window ends: the route's log
    // says what it still holds as the route goes.
    unmatched_burst(admin, 12, 24.0).await;
    client.signal(libc::SIGTERM);
    let (_, logs) = client.wait_exit().await;
    let summaries: Vec<usize> = (0..logs.len())
        .filter(|&i| logs[i].contains(summary))
        .collect();
    assert_eq!(summaries.len(), 2, "{:#?}", logs);
    assert!(
        logs[summaries[1]].contains("suppressed=2"),
        "{}",
        logs[summaries[1]]
    );
    // Written as the route went, not by the flush task before the stop.
    let stop = logs
        .iter()
        .position(|l| l.contains("SIGTERM received"))
        .expect("the stop logged");
    assert!(
        summaries[1] > stop,
        "{:#?}",
        &logs[stop.min(summaries[1])..]
    );
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
    // SAFETY: geteuid(2) takes nothing and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let text = exits_2_without_net_caps(&args).await;
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

/// `run --config` and `check --config` refuse malformed, overlapping and
/// dead rules before starting: exit 2 naming the rule (for an overlap, both
/// rules) and the problem. A good file passes `check --config`.
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
        // Both rules named: the later one and the earlier one covering it.
        (
            rule("10.0.0.0/8:2100") + &rule("10.1.0.0/16:2100"),
            "destination[0] (10.0.0.0/8:2100)",
        ),
        (
            rule("10.1.0.0/16:2100") + &rule("10.1.0.0/16:2100"),
            "destination[1].match: 10.1.0.0/16:2100 overlaps",
        ),
        (rule("[::ffff:10.0.0.0/104]:2100"), "IPv4-mapped"),
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
        let path = path.to_str().unwrap();
        let (code, text) =
            run_bin_within(&["run", "--config", path], DEADLINE).expect("exits at start-up");
        assert_eq!(code, 2, "{rules}: {text}");
        assert!(text.contains(needle), "{rules}: want {needle:?} in {text}");
        let (code, text) = run_bin(&["check", "--config", path]);
        assert_eq!(code, 2, "check --config: {rules}: {text}");
        assert!(
            text.contains(needle),
            "check --config: want {needle:?} in {text}"
        );
    }
    // Positive control: the narrower rule first is an exception, not an
    // overlap error.
    let path = c.root.join("good.toml");
    let good = rule("10.1.2.3:2100") + &rule("10.1.0.0/16:2100") + &rule("[fd00::/8]:2100");
    std::fs::write(&path, format!("{base}{good}")).unwrap();
    let (code, text) = run_bin(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("PASS"), "{text}");
}

/// The shipped iptables rules (deploy/transparent/iptables) do what the
/// nftables ones do: inbound capture hands a peer dialing the application's
/// port to the server sidecar; outbound capture diverts the controller's
/// connections (IPv4 and IPv6) to the transparent client sidecar, whose own
/// connections (marked) are left alone, so they cross B's inbound capture
/// with the default tls_port; an unmatched captured port is refused.
/// Running the scripts again changes nothing; `delete` removes them.
#[tokio::test]
async fn the_iptables_rules_capture_the_same_way() {
    let test = "the_iptables_rules_capture_the_same_way";
    if skip_without(test, &["ip", "nft", "iptables", "ip6tables"]) {
        return;
    }
    let (a, b, c, app, other_port) = hosts_and_apps().await;
    let inbound = [("APP_PORTS", "2100"), ("SIDECAR_PORT", "6877")];
    b.sh(INBOUND_IPT, &inbound, &[]);
    b.sh(INBOUND_IPT, &inbound, &[]);
    let _server = server_sidecar(&b, &c, &[]).await;

    // A plaintext peer dialing the application's port meets the sidecar.
    a.enter();
    let s = dial("10.77.0.2:2100").await;
    let got = closed_after(s, b"plaintext command\n").await;
    assert_eq!(got.first(), Some(&21), "a TLS alert, not the echo: {got:?}");

    let outbound = [
        ("SIDECAR_MARK", MARK),
        ("SIDECAR_PORT", "15001"),
        ("APP_PORTS", "2100,2101"),
        ("APP_NETS_V4", "10.77.0.0/24"),
        ("APP_NETS_V6", "fd00:77::/64"),
    ];
    a.sh(OUTBOUND_IPT, &outbound, &[]);
    a.sh(OUTBOUND_IPT, &outbound, &[]);
    for tool in ["iptables", "ip6tables"] {
        let rules = a.ipt(tool, &["-t", "nat", "-S"]);
        assert_eq!(
            rules
                .matches("-A OUTPUT -p tcp -j MTLS_SIDECAR_OUT")
                .count(),
            1,
            "{tool}: one jump after two runs:\n{rules}"
        );
        assert_eq!(rules.matches("REDIRECT").count(), 1, "{tool}:\n{rules}");
    }
    let rules = format!(
        r#"
[[route.destination]]
match = "10.77.0.0/24:2100"
expect_san = ["{REPLICA}"]
[[route.destination]]
match = "[fd00:77::/64]:2100"
expect_san = ["{REPLICA}"]
"#
    );
    let client = client_sidecar(&a, &c, &client_config(&c, "[::]:15001", &rules)).await;
    for to in ["10.77.0.2:2100", "[fd00:77::2]:2100"] {
        let mut s = dial(to).await;
        assert_eq!(roundtrip(&mut s, b"via iptables").await, b"via iptables");
    }
    client
        .wait_log(&["original_dst=[fd00:77::2]:2100", "dial=[fd00:77::2]:2100"])
        .await;
    eventually("two connections at the application", || {
        app.peers().len() == 2
    })
    .await;
    app.only_local_peers();
    let s = dial("10.77.0.2:2101").await;
    assert_eq!(closed_after(s, b"secret").await, b"");
    client
        .wait_field(
            "no destination rule matches",
            "original_dst",
            "10.77.0.2:2101",
        )
        .await;
    assert!(other_port.peers().is_empty(), "port 2101 was reached");

    // Removed, nothing is diverted: the plaintext dial meets B's TLS port.
    a.sh(OUTBOUND_IPT, &outbound, &["delete"]);
    for tool in ["iptables", "ip6tables"] {
        let rules = a.ipt(tool, &["-t", "nat", "-S"]);
        assert!(!rules.contains("MTLS_SIDECAR_OUT"), "{tool}:\n{rules}");
    }
    let s = dial("10.77.0.2:2100").await;
    let got = closed_after(s, b"plaintext command\n").await;
    assert_eq!(got.first(), Some(&21), "a TLS alert, not the echo: {got:?}");
    assert_eq!(app.peers().len(), 2);
}

/// The Kubernetes example (deploy/kubernetes/transparent) loads the shipped
/// outbound rules, not a drifted copy: the same rule lines and defines,
/// plus only the UID skip its sidecar needs (it has no NET_ADMIN for
/// --mark). Its sidecar config validates and listens where the rules
/// redirect to, and the rules load into a real namespace.
#[test]
fn the_kubernetes_example_loads_the_shipped_rules() {
    let rules = |t: &str| -> Vec<String> {
        t.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with("define "))
            .map(String::from)
            .collect()
    };
    let defines = |t: &str| -> Vec<(String, String)> {
        t.lines()
            .filter_map(|l| l.strip_prefix("define "))
            .map(|l| {
                let (name, value) = l.split_once(" = ").expect("define NAME = VALUE");
                let value = value.split('#').next().unwrap().trim();
                (name.to_string(), value.to_string())
            })
            .collect()
    };
    let mut want = rules(OUTBOUND_NFT);
    let at = want.iter().position(|l| l == MARK_SKIP).expect("mark skip") + 1;
    want.insert(at, "meta skuid 65532 return".to_string());
    assert_eq!(rules(K8S_OUTBOUND_NFT), want);
    let k8s = defines(K8S_OUTBOUND_NFT);
    let names = |d: &[(String, String)]| d.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&k8s), names(&defines(OUTBOUND_NFT)));
    let value = |name: &str| {
        k8s.iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .unwrap()
    };

    let toml_text = include_str!("../../deploy/kubernetes/transparent/controller-sidecar.toml");
    let spec: mtls_sidecar::config::FileSpec = toml::from_str(toml_text).expect("parses");
    let settings = spec.validate().expect("validates");
    assert_eq!(settings.routes.len(), 1);
    let route = &settings.routes[0];
    let dests = route.transparent.as_ref().expect("a transparent route");
    assert_eq!(
        route.listen.to_string(),
        format!("127.0.0.1:{}", value("SIDECAR_PORT"))
    );
    // What the rules capture is what the route has a rule for.
    assert_eq!(
        dests.rules[0].matches.to_string(),
        format!(
            "{}:{}",
            value("APP_NETS_V4").trim_matches(|c| c == '{' || c == '}' || c == ' '),
            value("APP_PORTS").trim_matches(|c| c == '{' || c == '}' || c == ' ')
        )
    );

    if skip("the_kubernetes_example_loads_the_shipped_rules") {
        return;
    }
    let ns = Netns::new("k");
    ns.nft(K8S_OUTBOUND_NFT);
    let loaded = ns.nft_list(&["table", "inet", "mtls_sidecar_out"]);
    assert!(loaded.contains("meta skuid 65532 return"), "{loaded}");
}

/// Runs the binary with `args` without CAP_NET_ADMIN and CAP_NET_RAW and
/// waits (bounded) for it to exit 2: its stderr.
async fn exits_2_without_net_caps(args: &[&str]) -> String {
    // SAFETY: geteuid(2) takes nothing and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let mut cmd = Command::new(bin());
    cmd.args(args);
    // Drops both capabilities from the bounding set of the child only:
    // root's exec then leaves them out of its permitted set. (Not root:
    // the process has neither to begin with.)
    if root {
        // SAFETY: the pre_exec closure only calls prctl(2), which is async-signal-safe and allocates nothing.
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
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{text}");
    text
}

// ---- TPROXY ----

const OUTBOUND_TPROXY_NFT: &str =
    include_str!("../../deploy/transparent/nftables/outbound-tproxy.nft");

/// The controller dials replicas by their own addresses; the shipped
/// TPROXY rules (no NAT) mark its packets, the policy route the rules'
/// header names sends them back in through lo, and TPROXY hands them to the
/// `--tproxy` sidecar, whose accepted socket's local address is the
/// original destination: it dials `original_ip:6877` with mTLS and the echo
/// comes back. An unmatched destination and a connection straight to the
/// listener (not diverted) are closed without a byte.
#[tokio::test]
async fn tproxy_diverted_connections_reach_the_replica() {
    if skip("tproxy_diverted_connections_reach_the_replica") {
        return;
    }
    let (a, b, c, app, other_port) = hosts_and_apps().await;
    let _server = server_sidecar(&b, &c, &[]).await;

    a.nft(&with_defines(
        OUTBOUND_TPROXY_NFT,
        &[
            ("SIDECAR_MARK", MARK),
            ("DIVERT_MARK", "0x1"),
            ("SIDECAR_PORT", "15001"),
            ("APP_PORTS", "{ 2100, 2101 }"),
            ("APP_NETS_V4", "{ 10.77.0.0/24 }"),
            ("APP_NETS_V6", "{ fd00:77::/64 }"),
        ],
    ));
    // The policy route, as the rules' header says.
    for v in ["-4", "-6"] {
        a.ip(&[v, "rule", "add", "fwmark", "0x1", "lookup", "100"]);
    }
    a.ip(&[
        "-4",
        "route",
        "add",
        "local",
        "0.0.0.0/0",
        "dev",
        "lo",
        "table",
        "100",
    ]);
    a.ip(&[
        "-6", "route", "add", "local", "::/0", "dev", "lo", "table", "100",
    ]);

    let rules = format!("tproxy = true\n{}", replica_rules());
    let client = client_sidecar(&a, &c, &client_config(&c, "[::]:15001", &rules)).await;
    a.enter();
    let admin = "127.0.0.1:9902";

    reaches_the_replica(&app, &client).await;
    client
        .wait_log(&["original_dst=10.77.0.2:2100", "dial=10.77.0.2:6877"])
        .await;

    refuses_unmatched_and_direct(&client, admin).await;
    assert!(other_port.peers().is_empty(), "port 2101 was reached");
    assert_eq!(app.peers().len(), 2, "only the two verified connections");
}

/// `--tproxy` needs CAP_NET_ADMIN for IP_TRANSPARENT: without it the
/// sidecar exits 2 at start-up saying so; `--tproxy` without
/// `--transparent` (flag or file key) is a usage error too.
#[tokio::test]
async fn tproxy_without_the_capability_or_transparent_exits_2() {
    let c = creds();
    let args = [
        "client",
        "--listen",
        "127.0.0.1:0",
        "--transparent",
        "--tproxy",
        "--destination",
        "10.77.0.0/24:2100",
        "--expect-san",
        REPLICA,
        "--tls-dir",
        &c.controller,
    ];
    let text = exits_2_without_net_caps(&args).await;
    assert!(
        text.contains("CAP_NET_ADMIN") && text.contains("--tproxy"),
        "{text}"
    );
    // SAFETY: geteuid(2) takes nothing and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        // Positive control: with the capability, it runs.
        let sc = Sidecar::start(&args, 1).await;
        assert!(sc.exited().is_none());
    }

    let plain = Command::new(bin())
        .args([
            "client",
            "--listen",
            "127.0.0.1:0",
            "--target",
            "127.0.0.1:9",
            "--server-name",
            REPLICA,
            "--tls-dir",
            &c.controller,
            "--tproxy",
        ])
        .output()
        .expect("run");
    assert_eq!(plain.status.code(), Some(2));
    let err = String::from_utf8_lossy(&plain.stderr);
    assert!(err.contains("--transparent"), "{err}");

    let path = c.root.join("tproxy.toml");
    std::fs::write(
        &path,
        format!(
            "tls_dir = \"{}\"\n[[route]]\nmode = \"client\"\nlisten = \"127.0.0.1:0\"\n\
             target = \"127.0.0.1:9\"\nserver_name = \"{REPLICA}\"\ntproxy = true\n",
            c.controller
        ),
    )
    .unwrap();
    let file = Command::new(bin())
        .args(["run", "--config", path.to_str().unwrap()])
        .output()
        .expect("run");
    assert_eq!(file.status.code(), Some(2));
    let err = String::from_utf8_lossy(&file.stderr);
    assert!(
        err.contains("tproxy") && err.contains("transparent"),
        "{err}"
    );
}

/// What the live-close tests start from: B's server sidecar, A's
/// transparent client sidecar behind the shipped outbound rules, and one
/// diverted connection forwarding (the calling thread is left in A).
struct LiveDiverted {
    _a: Netns,
    _b: Netns,
    c: Creds,
    app: App,
    _other: App,
    _server: Sidecar,
    client: Sidecar,
    live: TcpStream,
}

impl LiveDiverted {
    async fn start() -> LiveDiverted {
        let (a, b, c, app, _other) = hosts_and_apps().await;
        let _server = server_sidecar(&b, &c, &[]).await;
        a.nft(&outbound_rules("{ 2100 }"));
        let client =
            client_sidecar(&a, &c, &client_config(&c, "[::]:15001", &replica_rules())).await;
        a.enter();
        let mut live = dial("10.77.0.2:2100").await;
        assert_eq!(roundtrip(&mut live, b"before").await, b"before");
        assert_eq!(app.peers().len(), 1);
        LiveDiverted {
            _a: a,
            _b: b,
            c,
            app,
            _other,
            _server,
            client,
            live,
        }
    }
}

/// Live revocation on a transparent client route: a diverted connection
/// that is forwarding is closed `revoked` once a CRL revoking the server's
/// certificate is applied to the client sidecar's trust (SIGHUP: the plain
/// directory is judged at once), and counted so.
#[tokio::test]
async fn a_live_diverted_connection_is_closed_when_the_server_is_revoked() {
    if skip("a_live_diverted_connection_is_closed_when_the_server_is_revoked") {
        return;
    }
    // Bound whole: the namespaces and the server sidecar live as long.
    let mut w = LiveDiverted::start().await;
    let (c, client, live) = (&w.c, &w.client, &mut w.live);
    let admin = "127.0.0.1:9902";

    let serial = mtls_sidecar::pki::serial_of(&c.replica_leaf.cert_der).unwrap();
    let crl = c
        .pki
        .ca
        .crl(&mtls_sidecar::pki::CrlSpec::new(1, vec![serial], 7))
        .unwrap();
    std::fs::write(std::path::Path::new(&c.controller).join("ca.crl"), crl.pem).unwrap();
    client.signal(libc::SIGHUP);
    client.wait_log(&["applied credential revision"]).await;
    assert!(
        read_until_closed(live).await.is_empty(),
        "the revoked server's connection forwarded more"
    );
    client
        .wait_field("connection closed", "reason", "revoked")
        .await;
    metric_reaches(
        admin,
        CLOSED,
        &[("route", "out"), ("reason", "revoked")],
        1.0,
    )
    .await;
}

/// The deny-list on a transparent client route: a `deny` file naming the
/// server's key closes the live diverted connection (close reason
/// `denied`, one WARN naming the entry) and refuses the next one inside
/// the handshake (`denied`); nothing more reaches the application. Seen
/// failing with the deny lookup removed from `Trust::verify_peer`.
#[tokio::test]
async fn a_live_diverted_connection_is_closed_when_the_server_is_denied() {
    if skip("a_live_diverted_connection_is_closed_when_the_server_is_denied") {
        return;
    }
    // Bound whole: the namespaces and the server sidecar live as long.
    let mut w = LiveDiverted::start().await;
    let (c, client, app, live) = (&w.c, &w.client, &w.app, &mut w.live);
    let admin = "127.0.0.1:9902";
    // A trust change that names someone else re-verifies the live
    // connection against its own destination rule, which still admits it.
    let deny_file = std::path::Path::new(&c.controller).join("deny");
    let applied = client.log_count("applied credential revision");
    std::fs::write(&deny_file, "san:someone-else.svc\n").unwrap();
    client.signal(libc::SIGHUP);
    client
        .wait_log_count("applied credential revision", applied + 1)
        .await;
    assert_eq!(roundtrip(live, b"still").await, b"still");
    let pin = mtls_sidecar::identity::pin::spki_sha256(c.replica_leaf.cert_der.as_ref()).unwrap();
    let entry = format!("spki-sha256:{}", mtls_sidecar::identity::pin::encode(&pin));
    std::fs::write(&deny_file, format!("{entry}\n")).unwrap();
    client.signal(libc::SIGHUP);
    client
        .wait_log_count("applied credential revision", applied + 2)
        .await;
    assert!(
        read_until_closed(live).await.is_empty(),
        "the denied server's connection forwarded more"
    );
    client
        .wait_field("its peer is denied", "entry", &entry)
        .await;
    metric_reaches(
        admin,
        CLOSED,
        &[("route", "out"), ("reason", "denied")],
        1.0,
    )
    .await;
    let again = dial("10.77.0.2:2100").await;
    assert!(closed_after(again, b"after").await.is_empty());
    metric_reaches(
        admin,
        "mtls_sidecar_tls_handshake_failures_total",
        &[("route", "out"), ("reason", "denied")],
        1.0,
    )
    .await;
    assert_eq!(app.peers().len(), 1, "a denied server was reached");
}

/// `resumption = true` on a transparent route: its rule's session cache
/// resumes with the replica's server sidecar (`--resumption`), counted on
/// both (tests/e2e/resumption.rs covers what refuses a ticket).
#[tokio::test]
async fn a_transparent_route_resumes_with_its_rules_server() {
    if skip("a_transparent_route_resumes_with_its_rules_server") {
        return;
    }
    let (a, b, c, app, _other) = hosts_and_apps().await;
    let _server = server_sidecar(&b, &c, &["--resumption", "--admin", "127.0.0.1:9901"]).await;
    a.nft(&outbound_rules("{ 2100 }"));
    let rules = format!("resumption = true\n{}", replica_rules());
    let _client = client_sidecar(&a, &c, &client_config(&c, "[::]:15001", &rules)).await;
    a.enter();
    for msg in [&b"first"[..], b"second"] {
        let mut s = dial("10.77.0.2:2100").await;
        assert_eq!(roundtrip(&mut s, msg).await, msg);
    }
    let resumed = "mtls_sidecar_tls_resumptions_total";
    metric_reaches("127.0.0.1:9902", resumed, &[("route", "out")], 1.0).await;
    b.enter();
    metric_reaches("127.0.0.1:9901", resumed, &[("route", "server")], 1.0).await;
    assert_eq!(app.peers().len(), 2);
}

// ---- Firewall reloads: deploy/systemd/nftables.service.d ----

/// The drop-in that keeps the inbound rules across nftables.service's
/// reloads and starts.
const NFT_DROP_IN: &str = include_str!("../../deploy/systemd/nftables.service.d/mtls-sidecar.conf");

/// Debian 12's nftables.service, as the package ships it (fixture): what
/// `systemctl start nftables` (boot) and `systemctl reload nftables` run.
const STOCK_NFT_UNIT: &str = "\
[Unit]
Description=nftables
Wants=network-pre.target
Before=network-pre.target shutdown.target
Conflicts=shutdown.target
DefaultDependencies=no

[Service]
Type=oneshot
RemainAfterExit=yes
StandardInput=null
ProtectSystem=full
ProtectHome=true
ExecStart=/usr/sbin/nft -f /etc/nftables.conf
ExecReload=/usr/sbin/nft -f /etc/nftables.conf
ExecStop=/usr/sbin/nft flush ruleset

[Install]
WantedBy=sysinit.target
";

/// Debian 12's stock /etc/nftables.conf (fixture): it flushes the whole
/// ruleset, then declares an inet filter table whose chains accept
/// everything.
const STOCK_NFT_CONF: &str = "\
#!/usr/sbin/nft -f

flush ruleset

table inet filter {
	chain input {
		type filter hook input priority filter; policy accept;
	}
	chain forward {
		type filter hook forward priority filter; policy accept;
	}
	chain output {
		type filter hook output priority filter; policy accept;
	}
}
";

/// The command lines of a unit file's `key=` settings, in order. Only the
/// plain form is understood: a specifier (`%`), a variable (`$`), quoting,
/// a line continuation or a prefix (`-` would ignore a failure) is refused
/// rather than run differently from systemd; but `+` (full privileges: the
/// test runs as root, so nft runs as systemd would run it). Every command
/// must be `/usr/sbin/nft`: nothing else is run (inside the test's
/// namespace).
fn exec_lines(unit: &str, key: &str) -> Vec<Vec<String>> {
    let prefix = format!("{key}=");
    unit.lines()
        .map(str::trim)
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(|cmd| cmd.strip_prefix('+').unwrap_or(cmd))
        .map(|cmd| {
            assert!(
                !cmd.contains(['%', '$', '"', '\'', '\\'])
                    && !cmd.starts_with(['-', '@', ':', '+', '!']),
                "{key}={cmd}: this test runs only plain command lines"
            );
            let argv: Vec<String> = cmd.split_whitespace().map(String::from).collect();
            assert_eq!(
                argv.first().map(String::as_str),
                Some("/usr/sbin/nft"),
                "{key}={cmd}"
            );
            argv
        })
        .collect()
}

/// What systemd runs for nftables.service made of `units` (the unit, then
/// its drop-ins; a drop-in's lines add to the unit's): `start` runs every
/// `ExecStart=` then every `ExecStartPost=`; a reload every `ExecReload=`.
fn unit_commands(units: &[&str], start: bool) -> Vec<Vec<String>> {
    let keys: &[&str] = if start {
        &["ExecStart", "ExecStartPost"]
    } else {
        &["ExecReload"]
    };
    keys.iter()
        .flat_map(|k| units.iter().flat_map(move |u| exec_lines(u, k)))
        .collect()
}

/// The file the drop-in loads (the `-f` argument of its reload line).
fn drop_in_file() -> String {
    let reload = exec_lines(NFT_DROP_IN, "ExecReload");
    assert_eq!(reload.len(), 1, "one ExecReload= line in the drop-in");
    assert_eq!(
        exec_lines(NFT_DROP_IN, "ExecStartPost"),
        reload,
        "the drop-in loads the same file on start and on reload"
    );
    match &reload[0][..] {
        [_, f, path] if f == "-f" && path.starts_with("/etc/") => path.clone(),
        other => panic!("unexpected ExecReload= {other:?}"),
    }
}

impl Netns {
    /// Runs `commands` in this namespace as systemd runs a unit's, in
    /// order, stopping at the first that fails; `/etc` is the host's with
    /// `files` (absolute path, content) added by an overlay that exists only
    /// in this run's own mount namespace (`ip netns exec` makes one): the
    /// host's `/etc` is never written.
    fn systemd_run(&self, files: &[(&str, &str)], commands: &[Vec<String>]) {
        let tmp = tempfile::tempdir().unwrap();
        let (mnt, src) = (tmp.path().join("mnt"), tmp.path().join("src"));
        std::fs::create_dir_all(&mnt).unwrap();
        std::fs::create_dir_all(&src).unwrap();
        let quote = |s: &str| {
            assert!(!s.contains('\''), "{s}");
            format!("'{s}'")
        };
        let m = quote(mnt.to_str().unwrap());
        let mut script = format!(
            "set -eu\nmount -t tmpfs mtls-t {m}\nmkdir {m}/up {m}/work\n\
             mount -t overlay mtls-t -o lowerdir=/etc,upperdir={m}/up,workdir={m}/work /etc\n"
        );
        for (i, (path, text)) in files.iter().enumerate() {
            assert!(path.starts_with("/etc/"), "{path}");
            let staged = src.join(i.to_string());
            std::fs::write(&staged, text).unwrap();
            let path = quote(path);
            script += &format!(
                "mkdir -p \"$(dirname {path})\"\ncp {} {path}\n",
                quote(staged.to_str().unwrap())
            );
        }
        for argv in commands {
            let line: Vec<String> = argv.iter().map(|a| quote(a)).collect();
            script += &line.join(" ");
            script.push('\n');
        }
        run(Command::new("ip").args(["netns", "exec", &self.name, "sh", "-c", &script]));
    }
}

/// What a plaintext peer on A gets from the application's port on B,
/// 10.77.0.2:2100, after sending a line and half-closing: the echo if it
/// reached the application, the TLS listener's alert if it met the sidecar.
async fn plaintext_from(a: &Netns) -> Vec<u8> {
    a.enter();
    let mut s = dial("10.77.0.2:2100").await;
    s.write_all(b"plaintext command\n").await.unwrap();
    s.shutdown().await.unwrap();
    read_until_closed(&mut s).await
}

/// Debian's `nft -f /etc/nftables.conf` (boot, `systemctl reload
/// nftables`) starts with `flush ruleset` and drops the inbound rules: an
/// application listening on every address is then reachable in plaintext.
/// With the drop-in's lines run after the stock file's, exactly as the unit
/// files have them, the plaintext peer still meets the TLS listener, after
/// a start, after a reload and after loading twice; without them it reaches
/// the application (the test sees the fault). The sidecar meanwhile warns
/// that the application listens outside loopback.
#[tokio::test]
async fn inbound_capture_survives_a_firewall_reload_with_the_drop_in() {
    if skip("inbound_capture_survives_a_firewall_reload_with_the_drop_in") {
        return;
    }
    let (a, b) = two_hosts();
    let c = creds();
    b.enter();
    let app = App::listen("[::]:2100").await;
    let server = server_sidecar(&b, &c, &["--admin", "127.0.0.1:9901"]).await;
    let (table_file, table) = (drop_in_file(), inbound_rules());
    let files = [
        ("/etc/nftables.conf", STOCK_NFT_CONF),
        (table_file.as_str(), table.as_str()),
    ];
    let with_drop_in = [STOCK_NFT_UNIT, NFT_DROP_IN];
    let refused = |got: Vec<u8>, when: &str| {
        assert_eq!(got.first(), Some(&21), "{when}: a TLS alert, not {got:?}");
        assert!(
            app.peers().is_empty(),
            "{when}: plaintext reached the application"
        );
    };

    // Boot: ExecStart= then ExecStartPost=.
    b.systemd_run(&files, &unit_commands(&with_drop_in, true));
    refused(plaintext_from(&a).await, "after start");
    // `systemctl reload nftables`, twice.
    for n in 1..=2 {
        b.systemd_run(&files, &unit_commands(&with_drop_in, false));
        refused(plaintext_from(&a).await, &format!("after reload {n}"));
    }
    // The drop-in's lines alone, on top of a loaded table (no flush
    // first): still one table with one redirect rule.
    b.systemd_run(&files, &unit_commands(&[NFT_DROP_IN], false));
    refused(plaintext_from(&a).await, "after loading twice");
    let tables = b.nft_list(&["tables"]);
    assert_eq!(tables.matches("mtls_sidecar_in").count(), 1, "{tables}");
    let ours = b.nft_list(&["table", "inet", "mtls_sidecar_in"]);
    assert_eq!(ours.matches("redirect to").count(), 1, "{ours}");
    assert!(
        tables.contains("table inet filter"),
        "the stock table: {tables}"
    );

    // The sidecar sees what it can: the application listens on [::].
    server
        .wait_log(&["listens on a non-loopback address", "listening=[::]:2100"])
        .await;

    // The stock unit alone: its reload removes the capture, and the
    // plaintext peer reaches the application.
    b.systemd_run(&files, &unit_commands(&[STOCK_NFT_UNIT], false));
    assert!(!b.nft_list(&["tables"]).contains("mtls_sidecar_in"));
    assert_eq!(
        plaintext_from(&a).await,
        b"plaintext command\n",
        "without the drop-in the application answers in plaintext"
    );
    assert_eq!(app.peers().len(), 1);
    assert_eq!(
        mtls_sidecar::proxy::transparent::unmap(app.peers()[0].ip()),
        "10.77.0.1".parse::<std::net::IpAddr>().unwrap()
    );

    // With it again, the capture is back.
    b.systemd_run(&files, &unit_commands(&with_drop_in, false));
    let got = plaintext_from(&a).await;
    assert_eq!(got.first(), Some(&21), "after the drop-in again: {got:?}");
}

/// The sidecar unit's own drop-in, which loads the capture table at every
/// start of the sidecar.
const CAPTURE_DROP_IN: &str =
    include_str!("../../deploy/systemd/mtls-sidecar.service.d/capture.conf");
/// The sidecar unit.
const SIDECAR_UNIT: &str = include_str!("../../deploy/systemd/mtls-sidecar.service");

/// What systemd runs before the sidecar's `ExecStart=` for `units` (the
/// unit, then its drop-ins): every `ExecStartPre=`, in order.
fn pre_start(units: &[&str]) -> Vec<Vec<String>> {
    units
        .iter()
        .flat_map(|u| exec_lines(u, "ExecStartPre"))
        .collect()
}

/// A reboot of a host where nftables.service is disabled, as Debian ships
/// it: a fresh network namespace, no ruleset at all, and nothing runs but
/// the sidecar unit's start. The unit alone (the old setup) leaves the
/// application on `[::]:2100` answering a plaintext peer (the test sees
/// the fault); with the drop-in, its `ExecStartPre=` lines, run as the unit
/// files have them, load the capture table before the sidecar starts, and
/// the plaintext peer meets the TLS listener; a restart loads it again,
/// still one table.
#[tokio::test]
async fn inbound_capture_loads_with_the_sidecar_unit_after_a_reboot() {
    if skip("inbound_capture_loads_with_the_sidecar_unit_after_a_reboot") {
        return;
    }
    let c = creds();
    let table_file = {
        let lines = pre_start(&[CAPTURE_DROP_IN]);
        assert_eq!(lines.len(), 1, "one ExecStartPre= in the drop-in");
        match &lines[0][..] {
            [_, f, path] if f == "-f" && path.starts_with("/etc/") => path.clone(),
            other => panic!("unexpected ExecStartPre= {other:?}"),
        }
    };
    assert_eq!(table_file, drop_in_file(), "the two drop-ins load one file");
    let table = inbound_rules();
    let files = [(table_file.as_str(), table.as_str())];

    // Booted with the unit alone: nothing loads the table.
    let (a, b) = two_hosts();
    b.enter();
    let app = App::listen("[::]:2100").await;
    assert!(pre_start(&[SIDECAR_UNIT]).is_empty());
    let server = server_sidecar(&b, &c, &[]).await;
    assert!(!b.nft_list(&["tables"]).contains("mtls_sidecar_in"));
    assert_eq!(
        plaintext_from(&a).await,
        b"plaintext command\n",
        "without the drop-in the application answers in plaintext after a reboot"
    );
    drop(server);
    drop((a, b));

    // Booted with the drop-in: a fresh host again.
    let (a, b) = two_hosts();
    b.enter();
    let app2 = App::listen("[::]:2100").await;
    assert_eq!(
        b.nft_list(&["ruleset"]).trim(),
        "",
        "a fresh host has no rules"
    );
    let with_drop_in = [SIDECAR_UNIT, CAPTURE_DROP_IN];
    b.systemd_run(&files, &pre_start(&with_drop_in));
    let server = server_sidecar(&b, &c, &[]).await;
    let got = plaintext_from(&a).await;
    assert_eq!(got.first(), Some(&21), "a TLS alert, not {got:?}");
    assert!(app2.peers().is_empty(), "plaintext reached the application");
    // `systemctl restart mtls-sidecar`: loaded again, one table, one rule.
    drop(server);
    b.systemd_run(&files, &pre_start(&with_drop_in));
    let _server = server_sidecar(&b, &c, &[]).await;
    let tables = b.nft_list(&["tables"]);
    assert_eq!(tables.matches("mtls_sidecar_in").count(), 1, "{tables}");
    let ours = b.nft_list(&["table", "inet", "mtls_sidecar_in"]);
    assert_eq!(ours.matches("redirect to").count(), 1, "{ours}");
    let got = plaintext_from(&a).await;
    assert_eq!(got.first(), Some(&21), "after a restart: {got:?}");
    assert_eq!(app.peers().len(), 1, "only the first boot's plaintext peer");
}

/// `systemd-analyze verify` accepts the sidecar unit with its capture
/// drop-in (scripts/validate-deploy.sh verifies the same).
#[test]
fn the_capture_drop_in_verifies_with_the_sidecar_unit() {
    if tools::skip_unless(&["systemd-analyze"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // verify wants ExecStart='s binary to exist; every other line as written.
    let unit = SIDECAR_UNIT.replace("/usr/local/bin/mtls-sidecar", "/bin/true");
    std::fs::write(dir.path().join("mtls-sidecar.service"), unit).unwrap();
    let d = dir.path().join("mtls-sidecar.service.d");
    std::fs::create_dir(&d).unwrap();
    std::fs::write(d.join("capture.conf"), CAPTURE_DROP_IN).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(dir.path().join("mtls-sidecar.service"))
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(
        !text.contains("capture.conf") && !text.contains("mtls-sidecar.service:"),
        "systemd-analyze verify complains:\n{text}"
    );
}

/// `systemd-analyze verify` accepts the stock unit with the drop-in (it
/// needs no PID 1): a misspelt key would otherwise be ignored by systemd
/// with a log line nobody reads.
#[test]
fn the_drop_in_verifies_with_the_stock_unit() {
    if tools::skip_unless(&["systemd-analyze"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let unit = dir.path().join("nftables.service");
    std::fs::write(&unit, STOCK_NFT_UNIT).unwrap();
    let d = dir.path().join("nftables.service.d");
    std::fs::create_dir(&d).unwrap();
    std::fs::write(d.join("mtls-sidecar.conf"), NFT_DROP_IN).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&unit)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(
        !text.contains("mtls-sidecar.conf"),
        "systemd-analyze verify complains about the drop-in:\n{text}"
    );
}

// ---- The sidecar's own check: is the application listening outside loopback? ----

/// `target_exposure[0]` of the `/status` document.
async fn exposure(admin: &str) -> serde_json::Value {
    let st = status(admin).await;
    let list = st["target_exposure"]
        .as_array()
        .unwrap_or_else(|| panic!("no target_exposure in {st}"));
    assert_eq!(list.len(), 1, "{st}");
    list[0].clone()
}

/// Polls `/status` until the route's exposure state is `want`.
async fn exposure_becomes(admin: &str, want: &str) -> serde_json::Value {
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let e = exposure(admin).await;
        if e["state"] == want {
            return e;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "state is not {want}: {e}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Waits until the credential poller has polled at least `n` more times
/// (its `last_poll` moves on; whole seconds, so each change is at least
/// one second, ten polls at 100 ms): the exposure check runs on the same
/// interval.
async fn polls_pass(admin: &str, n: usize) {
    let mut last = status(admin).await["credentials"][0]["last_poll"].clone();
    for _ in 0..n {
        let deadline = std::time::Instant::now() + DEADLINE;
        loop {
            let now = status(admin).await["credentials"][0]["last_poll"].clone();
            if now != last {
                last = now;
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the poller stopped");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}

/// The sidecar cannot read the firewall's rules without CAP_NET_ADMIN, but
/// it sees the listening sockets of its network namespace: with the
/// application on 127.0.0.1 it says nothing; once the application listens
/// on 0.0.0.0 it warns once per change (not on every poll; once more when it
/// moves to `[::]`), `/status` says `exposed`
/// and names the address, and the gauge reads 1; back on loopback, one INFO
/// line, `not_exposed`, 0. A server route whose target is not on loopback
/// is not judged.
#[tokio::test]
async fn the_sidecar_warns_while_the_application_listens_outside_loopback() {
    if skip_without(
        "the_sidecar_warns_while_the_application_listens_outside_loopback",
        &["ip"],
    ) {
        return;
    }
    let b = Netns::new("x");
    let c = creds();
    b.enter();
    let app = std::net::TcpListener::bind("127.0.0.1:2100").unwrap();
    let admin = "127.0.0.1:9901";
    let server = server_sidecar(&b, &c, &["--admin", admin, "--reload-interval", "100ms"]).await;
    const WARN: &str = "listens on a non-loopback address";
    const GAUGE: &str = "mtls_sidecar_target_exposed";

    // Checked before serving: on loopback only.
    let e = exposure(admin).await;
    assert_eq!(e["state"], "not_exposed", "{e}");
    assert_eq!(e["target"], "127.0.0.1:2100", "{e}");
    // Read over netlink, under the sandbox: not the /proc fallback.
    assert_eq!(e["source"], "netlink", "{e}");
    assert_eq!(metric(admin, GAUGE, &[("route", "server")]).await, 0.0);

    // The application moves to every address.
    drop(app);
    let app = rebind("0.0.0.0:2100").await;
    let e = exposure_becomes(admin, "exposed").await;
    assert_eq!(e["listening"], serde_json::json!(["0.0.0.0:2100"]), "{e}");
    let line = server.wait_log(&[WARN, "route=server"]).await;
    assert!(line.contains(" WARN "), "{line}");
    assert!(line.contains("listening=0.0.0.0:2100"), "{line}");
    metric_reaches(admin, GAUGE, &[("route", "server")], 1.0).await;
    // Once per change of state, not once per poll.
    polls_pass(admin, 2).await;
    assert_eq!(
        server.warn_lines(&[WARN]).len(),
        1,
        "{}",
        server.logs().join("\n")
    );

    // Every IPv6 address (dual-stack where the kernel allows): exposed too,
    // now naming that address. (A namespace without IPv6 skips this step.)
    drop(app);
    let has_v6 = std::net::TcpListener::bind("[::1]:0").is_ok();
    let app = rebind(if has_v6 { "[::]:2100" } else { "0.0.0.0:2100" }).await;
    let want = if has_v6 { "[::]:2100" } else { "0.0.0.0:2100" };
    let want = serde_json::json!([want]);
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let e = exposure(admin).await;
        if e["state"] == "exposed" && e["listening"] == want {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{e}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    // Back on loopback.
    drop(app);
    let _app = rebind("127.0.0.1:2100").await;
    exposure_becomes(admin, "not_exposed").await;
    server
        .wait_log(&["no longer listens on a non-loopback address"])
        .await;
    metric_reaches(admin, GAUGE, &[("route", "server")], 0.0).await;
    // One for 0.0.0.0, one for [::].
    assert_eq!(server.warn_lines(&[WARN]).len(), if has_v6 { 2 } else { 1 });
    drop(server);

    // A target elsewhere is the application's own address: not judged.
    let other = b
        .sidecar(&[
            "server",
            "--listen",
            "127.0.0.1:6877",
            "--target",
            "10.77.0.9:2100",
            "--tls-dir",
            &c.replica,
            "--allow-san",
            CONTROLLER,
            "--admin",
            admin,
        ])
        .await;
    let st = status(admin).await;
    assert_eq!(st["target_exposure"], serde_json::json!([]), "{st}");
    drop(other);
}

/// `/status` `target_exposure[0].captured` (`None` when absent).
async fn captured(admin: &str) -> Option<bool> {
    exposure(admin).await["captured"].as_bool()
}

/// Polls until `captured` is `want`.
async fn captured_becomes(admin: &str, want: Option<bool>) {
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let got = captured(admin).await;
        if got == want {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "captured is {got:?}, not {want:?}: {}",
            exposure(admin).await
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Capture mode exposes the application by design (it listens on every
/// address), so exposure alone cannot tell a covered host from one whose
/// rules are gone. The shipped inbound rules carry a canary the sidecar
/// asks without any capability: with the table loaded, `/status` says
/// `captured: true` and `mtls_sidecar_target_captured` is 1; once the table
/// is deleted (a reboot, a flush), `false`, 0 and one WARN; loaded again,
/// `true`. Without the canary rule in the table, the same table reads as
/// not capturing (the canary, not the exposure, is what is judged).
#[tokio::test]
async fn the_capture_canary_tells_covered_exposure_from_uncovered() {
    if skip("the_capture_canary_tells_covered_exposure_from_uncovered") {
        return;
    }
    let b = Netns::new("k");
    let c = creds();
    b.enter();
    let _app = App::listen("0.0.0.0:2100").await;
    let admin = "127.0.0.1:9901";
    let server = server_sidecar(&b, &c, &["--admin", admin, "--reload-interval", "100ms"]).await;
    const GAUGE: &str = "mtls_sidecar_target_captured";
    const WARN: &str = "no capture rule covers its port";

    exposure_becomes(admin, "exposed").await;
    captured_becomes(admin, Some(false)).await;
    metric_reaches(admin, GAUGE, &[("route", "server")], 0.0).await;
    server.wait_log(&[WARN, "route=server"]).await;

    b.nft(&inbound_rules());
    captured_becomes(admin, Some(true)).await;
    metric_reaches(admin, GAUGE, &[("route", "server")], 1.0).await;
    server
        .wait_log(&["capture rules cover", "route=server"])
        .await;

    run(Command::new("ip").args([
        "netns",
        "exec",
        &b.name,
        "nft",
        "delete",
        "table",
        "inet",
        "mtls_sidecar_in",
    ]));
    captured_becomes(admin, Some(false)).await;
    metric_reaches(admin, GAUGE, &[("route", "server")], 0.0).await;
    assert_eq!(
        server.warn_lines(&[WARN]).len(),
        2,
        "{}",
        server.logs().join("\n")
    );

    // The table without its canary: the redirect alone is not evidence.
    let canary = "ip daddr 127.255.255.254 tcp dport $APP_PORTS reject with icmpx admin-prohibited";
    b.nft(&without_rule(&inbound_rules(), canary));
    polls_pass(admin, 3).await;
    assert_eq!(captured(admin).await, Some(false));
    b.nft(&inbound_rules());
    captured_becomes(admin, Some(true)).await;
}

/// A transparent client route whose identity comes from the SPIFFE
/// Workload API: a diverted connection reaches the replica with the
/// agent's SVID, a rule that names no SPIFFE ID is refused at start-up
/// (the SVID is judged by its SPIFFE ID), and a bundle update dropping the server's
/// CA closes the live diverted connection (`revoked`, re-verified as a
/// `ca.crt` shrink is).
#[tokio::test]
async fn a_workload_api_identity_on_a_transparent_route() {
    if skip_without(
        "a_workload_api_identity_on_a_transparent_route",
        &["ip", "nft", "python3", "grpcio"],
    ) {
        return;
    }
    use spiffe_agent::{svid_leaf, Agent, Svid};
    const CLIENT_ID: &str = "spiffe://prod.test/ns/app/sa/controller";
    const SERVER_ID: &str = "spiffe://prod.test/ns/db/sa/replica";
    let (a, b, c, app, _other) = hosts_and_apps().await;
    // B's server sidecar holds an SVID from files, signed by the same CA.
    let leaf = svid_leaf(&c.pki.ca, &[SERVER_ID]);
    let dir = c.root.join("replica-svid");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("tls.crt"), &leaf.cert_pem).unwrap();
    std::fs::write(dir.join("tls.key"), &leaf.key_pem).unwrap();
    std::fs::write(dir.join("ca.crt"), &c.pki.ca.cert_pem).unwrap();
    let _server = b
        .sidecar(&[
            "server",
            "--listen",
            "[::]:6877",
            "--target",
            "127.0.0.1:2100",
            "--tls-dir",
            dir.to_str().unwrap(),
            "--allow-san",
            CLIENT_ID,
        ])
        .await;
    let agent = Agent::start(&c.root, true);
    agent.push(&[&Svid::new(&c.pki.ca, CLIENT_ID)], &[]).await;
    a.nft(&outbound_rules("{ 2100 }"));
    let config = |expect: &str| {
        format!(
            "workload_api = \"{endpoint}\"\nadmin = \"127.0.0.1:9902\"\nmark = {MARK}\n\
             [[route]]\nname = \"out\"\nmode = \"client\"\nlisten = \"[::]:15001\"\n\
             unsafe_listen = true\ntransparent = true\n\
             [[route.destination]]\nmatch = \"10.77.0.0/24:2100\"\ntls_port = 6877\n\
             expect_san = [\"{expect}\"]\n",
            endpoint = agent.endpoint()
        )
    };

    // A rule expecting a DNS name: exit 2 before anything listens.
    let path = c.root.join("dns.toml");
    std::fs::write(&path, config(REPLICA)).unwrap();
    let (code, out) = run_bin(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("rule 10.77.0.0/24:2100"), "{out}");
    assert!(out.contains("SPIFFE ID"), "{out}");

    let client = client_sidecar(&a, &c, &config(SERVER_ID)).await;
    a.enter();
    let admin = "127.0.0.1:9902";
    get_until(admin, "/readyz", 200).await;
    let mut live = dial("10.77.0.2:2100").await;
    assert_eq!(roundtrip(&mut live, b"before").await, b"before");
    assert_eq!(app.peers().len(), 1);
    let st = status(admin).await;
    assert_eq!(
        st["credentials"][0]["workload_api"]["spiffe_id"], CLIENT_ID,
        "{st}"
    );

    // The agent rotates to another CA: the bundle no longer holds the
    // server's CA, so the live diverted connection is closed now.
    let next = mtls_sidecar::pki::DevCa::new("prod.test CA 2", 30).unwrap();
    agent.push(&[&Svid::new(&next, CLIENT_ID)], &[]).await;
    assert!(
        read_until_closed(&mut live).await.is_empty(),
        "the untrusted server's connection forwarded more"
    );
    client
        .wait_field("connection closed", "reason", "revoked")
        .await;
    metric_reaches(
        admin,
        CLOSED,
        &[("route", "out"), ("reason", "revoked")],
        1.0,
    )
    .await;
    // And a new diverted connection is refused in its handshake.
    let s = dial("10.77.0.2:2100").await;
    assert_eq!(closed_after(s, b"secret").await, b"");
    assert_eq!(app.peers().len(), 1, "nothing more reached the replica");
}

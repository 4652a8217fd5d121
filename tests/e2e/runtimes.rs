//! `--runtime per-core` with several runtimes, each accepting from the same
//! listening socket: the limits stay process-wide, whichever runtime
//! accepted a connection (the connections of these tests are spread over
//! both runtimes: each goes to the one holding fewer), and the model is
//! chosen by flag or config key. `per-core` is the default; `multi`, one
//! work-stealing runtime, stays available and keeps the same limits.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use mtls_sidecar::pki::Role;
use tokio::net::TcpStream;

/// Two runtimes, per-core.
const PER_CORE_2: [&str; 4] = ["--runtime", "per-core", "--worker-threads", "2"];

/// Two threads, one work-stealing runtime.
const MULTI_2: [&str; 4] = ["--runtime", "multi", "--worker-threads", "2"];

/// A server sidecar on two per-core runtimes, with an admin endpoint,
/// handshakes that do not time out during the test, and the limits given.
async fn server_with(limits: &[&str]) -> ServerSide {
    server_on(&PER_CORE_2, limits).await
}

/// [`server_with`] on the runtime model `model` gives.
async fn server_on(model: &[&str], limits: &[&str]) -> ServerSide {
    let mut args = model.to_vec();
    args.extend(["--handshake-timeout", "60s", "--admin", "127.0.0.1:0"]);
    args.extend(limits);
    ServerSide::start(&args).await
}

/// Waits until the echo target has accepted `n` connections, then checks
/// it has accepted no more.
async fn target_saw(echo: &Echo, n: usize) {
    let deadline = Instant::now() + DEADLINE;
    while echo.accepted() < n {
        assert!(Instant::now() < deadline, "the target never saw {n}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(echo.accepted(), n);
}

/// Polls `/status` until the first route satisfies `done`; panics after
/// [`DEADLINE`] naming `what`.
async fn route_until(admin: &str, what: &str, done: impl Fn(&serde_json::Value) -> bool) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let doc = status(admin).await;
        if done(&doc["routes"][0]) {
            return;
        }
        assert!(Instant::now() < deadline, "never {what}: {doc}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `--max-connections 3` over two runtimes, six authenticated controllers:
/// three are forwarded and three wait for a slot (under their handshake
/// tickets), whichever runtime each landed on; closing a forwarded one
/// lets exactly one more through. With a slot count per runtime (seen by
/// giving each runtime its own semaphore) all six were forwarded and the
/// status never showed three waiting.
#[tokio::test]
async fn max_connections_is_one_limit_across_runtimes() {
    let s = server_with(&["--max-connections", "3", "--max-handshakes", "100"]).await;
    let admin = s.sidecar.admin();
    let mut conns = Vec::new();
    for _ in 0..6 {
        conns.push(s.connect_good().await);
    }
    route_until(&admin, "3 forwarded and 3 waiting for a slot", |r| {
        r["live_connections"] == 6 && r["pending_handshakes"] == 3
    })
    .await;
    // The three forwarded ones have dialed the target; nothing else has.
    target_saw(&s.echo, 3).await;
    // Closing one admits one waiting connection (on either runtime).
    drop(conns.remove(0));
    route_until(&admin, "one waiting connection admitted", |r| {
        r["live_connections"] == 5 && r["pending_handshakes"] == 2
    })
    .await;
    target_saw(&s.echo, 4).await;
}

/// `--max-handshakes 3` over two runtimes, six silent sockets: the set
/// stays at three and the three oldest are closed as `overload`, though
/// the sockets were accepted by both runtimes. With a pending set per
/// runtime all six stayed pending and none was evicted.
#[tokio::test]
async fn max_handshakes_is_one_set_across_runtimes() {
    let s = server_with(&["--max-handshakes", "3"]).await;
    let admin = s.sidecar.admin();
    // Each admitted before the next connects: the admission order, which
    // eviction follows, is then the order of `silent` (two loops accepting
    // sockets connected together may admit them in either order).
    let labels = [("route", "server"), ("reason", "overload")];
    let mut silent = Vec::new();
    for i in 1..=6usize {
        silent.push(TcpStream::connect(&s.addr).await.expect("connect"));
        if i <= 3 {
            route_until(&admin, "the socket pending", |r| {
                r["pending_handshakes"] == i
            })
            .await;
        } else {
            let evicted = (i - 3) as f64;
            scrape_until(&admin, "the oldest evicted", |m| {
                m.value("mtls_sidecar_tls_handshake_failures_total", &labels) == Some(evicted)
            })
            .await;
        }
    }
    route_until(&admin, "3 pending handshakes", |r| {
        r["pending_handshakes"] == 3
    })
    .await;
    // The three oldest were closed; a real controller still gets through.
    for old in silent.iter_mut().take(3) {
        assert!(read_until_closed(old).await.is_empty());
    }
    let mut tls = s.connect_good().await;
    assert_eq!(roundtrip(&mut tls, b"through").await, b"through");
}

/// A pair with two runtimes on each side forwards many connections at
/// once, each intact: the placement of connections between runtimes (a
/// socket moved to another runtime's reactor) loses no byte.
#[tokio::test]
async fn per_core_pair_forwards_many_connections() {
    let pair = Pair::start(&PER_CORE_2, &PER_CORE_2).await;
    let mut conns = Vec::new();
    for _ in 0..8 {
        conns.push(pair.connect().await);
    }
    for round in 0..3u8 {
        for (i, c) in conns.iter_mut().enumerate() {
            let msg = format!("round {round} conn {i}");
            assert_eq!(roundtrip(c, msg.as_bytes()).await, msg.as_bytes());
        }
    }
}

/// The names of a process's threads.
fn thread_names(pid: u32) -> Vec<String> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_string())
        .collect()
}

/// Without `--runtime` a sidecar runs per-core: a single-threaded runtime
/// on a thread of its own for each worker past the first (named
/// `mtls-sidecar-N`). `--runtime multi` still gives the work-stealing
/// runtime (`tokio-rt-worker` threads, and no `mtls-sidecar-N`). Whether a
/// per-core process has a `tokio-rt-worker` is not asserted: tokio names
/// its blocking-pool threads the same (the allocator trim runs there).
#[tokio::test]
async fn per_core_is_the_default_and_multi_is_a_flag_away() {
    let default = ServerSide::start(&["--worker-threads", "2"]).await;
    let multi = ServerSide::start(&["--worker-threads", "2", "--runtime", "multi"]).await;
    // Both serve before their threads are looked at.
    for s in [&default, &multi] {
        let mut tls = s.connect_good().await;
        assert_eq!(roundtrip(&mut tls, b"up").await, b"up");
    }
    let names = thread_names(default.sidecar.pid());
    assert!(names.iter().any(|n| n == "mtls-sidecar-1"), "{names:?}");
    let names = thread_names(multi.sidecar.pid());
    assert!(names.iter().any(|n| n == "tokio-rt-worker"), "{names:?}");
    assert!(!names.iter().any(|n| n == "mtls-sidecar-1"), "{names:?}");
}

/// A runtime thread that dies (a hidden fault makes runtime 1 panic as it
/// starts) ends the process with 1 and an ERROR, so the orchestrator
/// restarts it, rather than serving on with one runtime gone, where every
/// connection placed there (the least loaded: about half of them) would be
/// closed unserved. The route's accept loop on that runtime is cancelled,
/// and its end is the route's failure; or, when the runtime is gone before
/// the route registers its listener there, the route cannot start: exit 1
/// either way, with an ERROR saying which.
#[tokio::test]
async fn a_lost_runtime_exits_1() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("lost runtime CA");
    let dir = pki.dir(tmp.path(), "replica", &pki.leaf(REPLICA, Role::Server));
    let echo = echo_target().await;
    let mut cmd = std::process::Command::new(bin());
    cmd.args(["server", "--listen", "127.0.0.1:0", "--target"])
        .arg(echo.addr.to_string())
        .arg("--tls-dir")
        .arg(&dir)
        .args(["--allow-san", CONTROLLER])
        .args(PER_CORE_2)
        .env("MTLS_SIDECAR_TEST_FAULT", "runtime-exit:1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let sc = Sidecar::from_command(cmd);
    let (code, logs) = sc.wait_exit().await;
    assert_eq!(code, Some(1), "{}", logs.join("\n"));
    assert!(
        logs.iter().any(|l| l.contains("ERROR")
            && (l.contains("stopped accepting") || l.contains("cannot listen"))),
        "{}",
        logs.join("\n")
    );
}

/// `--runtime multi` (no longer the default) keeps `--max-connections` a
/// limit and forwards every connection intact.
#[tokio::test]
async fn the_multi_runtime_keeps_the_limit_and_forwards() {
    let s = server_on(
        &MULTI_2,
        &["--max-connections", "2", "--max-handshakes", "100"],
    )
    .await;
    let admin = s.sidecar.admin();
    // The first two are forwarded before the next two connect: which
    // connections hold the slots is then known, not a race between
    // handshakes finishing on two threads.
    let mut conns = Vec::new();
    for _ in 0..2 {
        conns.push(s.connect_good().await);
    }
    target_saw(&s.echo, 2).await;
    for _ in 0..2 {
        conns.push(s.connect_good().await);
    }
    route_until(&admin, "2 forwarded and 2 waiting for a slot", |r| {
        r["live_connections"] == 4 && r["pending_handshakes"] == 2
    })
    .await;
    target_saw(&s.echo, 2).await;
    for (i, c) in conns.iter_mut().take(2).enumerate() {
        let msg = format!("multi conn {i}");
        assert_eq!(roundtrip(c, msg.as_bytes()).await, msg.as_bytes());
    }
}

/// Live revocation and the drain reach every runtime: over two per-core
/// runtimes, a CRL revoking one of two controller certificates closes
/// exactly that certificate's connections, wherever they were accepted,
/// and SIGTERM then stops both runtimes accepting while the other
/// certificate's connections keep forwarding until they end, and the
/// process exits 0 drained.
#[tokio::test]
async fn revocation_and_the_drain_reach_every_runtime() {
    let mut args = PER_CORE_2.to_vec();
    args.extend([
        "--admin",
        "127.0.0.1:0",
        "--reload-interval",
        "200ms",
        "--drain-timeout",
        "1h",
    ]);
    let s = ServerSide::start(&args).await;
    let admin = s.sidecar.admin();
    let other = s.pki.leaf(CONTROLLER, mtls_sidecar::pki::Role::Client);
    // Four connections of each certificate: spread over both runtimes
    // (each accepted by the runtime holding fewer).
    let mut revoked = Vec::new();
    let mut kept = Vec::new();
    for _ in 0..4 {
        revoked.push(s.connect_good().await);
        kept.push(s.connect_as(Some(&other)).await.expect("handshake"));
    }
    for c in revoked.iter_mut().chain(kept.iter_mut()) {
        assert_eq!(roundtrip(c, b"before").await, b"before");
    }
    let crl = s.pki.crl(1, &[&s.controller]);
    std::fs::write(s.server_dir.join("ca.crl"), &crl.pem).unwrap();
    for c in revoked.iter_mut() {
        assert!(
            read_until_closed(c).await.is_empty(),
            "a revoked peer forwarded more"
        );
    }
    s.sidecar.wait_closed("server", "revoked", 4.0).await;
    for c in kept.iter_mut() {
        assert_eq!(roundtrip(c, b"after the CRL").await, b"after the CRL");
    }

    s.sidecar.signal(libc::SIGTERM);
    get_until(&admin, "/readyz", 503).await;
    // Neither runtime accepts any more: a new connection gets no handshake.
    let deadline = Instant::now() + DEADLINE;
    while s.connect_as(Some(&other)).await.is_ok() {
        assert!(Instant::now() < deadline, "still accepting while draining");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for c in kept.iter_mut() {
        assert_eq!(roundtrip(c, b"draining").await, b"draining");
    }
    drop(kept);
    drop(revoked);
    let ServerSide { sidecar, .. } = s;
    let (code, logs) = sidecar.wait_exit().await;
    assert_eq!(code, Some(0), "{}", logs.join("\n"));
    assert!(logs.iter().any(|l| l.contains("drained")), "{logs:#?}");
    assert!(!logs.iter().any(|l| l.contains("drain timeout reached")));
}

/// `--exclusive` across runtimes: the newcomer is accepted by the other
/// runtime (the one holding fewer connections) and still displaces the
/// incumbent, which is closed `displaced`; the newcomer forwards.
#[tokio::test]
async fn exclusive_displaces_across_runtimes() {
    let s = server_with(&["--exclusive"]).await;
    let mut incumbent = s.connect_good().await;
    assert_eq!(roundtrip(&mut incumbent, b"first").await, b"first");
    let mut newcomer = s.connect_good().await;
    assert_eq!(roundtrip(&mut newcomer, b"second").await, b"second");
    assert!(read_until_closed(&mut incumbent).await.is_empty());
    s.sidecar.wait_closed("server", "displaced", 1.0).await;
    assert_eq!(roundtrip(&mut newcomer, b"still").await, b"still");
    assert_eq!(s.echo.accepted(), 2);
}

/// The config key `runtime` takes `multi` or `per-core`; anything else
/// exits 2 naming it (the flag's values are clap's to check).
#[test]
fn an_unknown_runtime_model_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("c.toml");
    let route = "[[route]]\nmode = \"server\"\nlisten = \"127.0.0.1:0\"\ntarget = \"127.0.0.1:1\"";
    let text = format!(
        "tls_dir = {:?}\nruntime = \"threads\"\n{route}\nallow_san = [\"a.example\"]\n",
        tmp.path()
    );
    std::fs::write(&cfg, text).unwrap();
    let (code, out) = run_bin(&["run", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("runtime") && out.contains("threads"), "{out}");
}

//! systemd integration of the real binary, with systemd played by the test:
//! socket activation (a listening socket the test owns, passed as fd 3 with
//! `LISTEN_FDS`/`LISTEN_FDNAMES`/`LISTEN_PID`, as systemd passes it) and
//! the watchdog (`WATCHDOG_USEC`/`WATCHDOG_PID`, pings read from a
//! `NOTIFY_SOCKET` datagram socket the test binds).

mod common;

use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixDatagram;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use mtls_sidecar::pki::Role;

/// `bin args…` as systemd would start it. `fd`, when given, becomes fd 3
/// (`LISTEN_FDS=1`, `LISTEN_FDNAMES=names`); the variables named in
/// `own_pid` are set to the binary's own pid, which only exists once it
/// runs: a shell sets them and `exec`s it, keeping its pid.
fn as_systemd_would(fd: Option<RawFd>, names: &str, own_pid: &[&str], args: &[&str]) -> Command {
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg("for v in $PID_VARS; do export \"$v=$$\"; done; unset PID_VARS; exec \"$@\"")
        .arg("sh")
        .arg(bin())
        .args(args)
        .env("PID_VARS", own_pid.join(" "))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(fd) = fd {
        cmd.env("LISTEN_FDS", "1").env("LISTEN_FDNAMES", names);
        // SAFETY: only async-signal-safe calls (dup2, fcntl) between fork
        // and exec.
        unsafe {
            cmd.pre_exec(move || {
                let r = if fd == 3 {
                    // Already fd 3: just let it survive exec.
                    libc::fcntl(3, libc::F_SETFD, 0)
                } else {
                    libc::dup2(fd, 3)
                };
                if r < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    cmd
}

/// Starts a server sidecar on the passed socket and waits until it listens.
async fn activated(listener: &std::net::TcpListener, tls: &Path, target: &str) -> Sidecar {
    let d = tls.to_str().unwrap();
    let args = [
        "server",
        "--listen",
        "systemd:tls",
        "--target",
        target,
        "--tls-dir",
        d,
        "--allow-san",
        CONTROLLER,
    ];
    let sc = Sidecar::from_command(as_systemd_would(
        Some(listener.as_raw_fd()),
        "tls",
        &["LISTEN_PID"],
        &args,
    ));
    wait_listening(&sc).await;
    sc
}

async fn wait_listening(sc: &Sidecar) {
    let deadline = Instant::now() + DEADLINE;
    while !sc
        .logs()
        .iter()
        .any(|l| l.contains(" listening ") && l.contains("route="))
    {
        if let Some(status) = sc.exited() {
            panic!("sidecar exited early ({status}):\n{}", sc.logs().join("\n"));
        }
        assert!(
            Instant::now() < deadline,
            "not listening:\n{}",
            sc.logs().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

struct Setup {
    _tmp: tempfile::TempDir,
    pki: Pki,
    tls: std::path::PathBuf,
    echo: Echo,
    listener: std::net::TcpListener,
}

impl Setup {
    async fn new() -> Setup {
        let tmp = tempfile::tempdir().unwrap();
        let pki = Pki::new("systemd CA");
        let tls = pki.dir(tmp.path(), "replica", &pki.leaf(REPLICA, Role::Server));
        Setup {
            _tmp: tmp,
            tls,
            echo: echo_target().await,
            listener: std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
            pki,
        }
    }

    fn addr(&self) -> String {
        self.listener.local_addr().unwrap().to_string()
    }

    async fn connect(&self) -> std::io::Result<ClientTls> {
        let cfg = client_config(
            Some(&self.pki.leaf(CONTROLLER, Role::Client)),
            &self.pki.ca.cert_pem,
        );
        tls_connect(&self.addr(), REPLICA, cfg).await
    }
}

#[tokio::test]
async fn a_socket_passed_by_systemd_is_served() {
    let s = Setup::new().await;
    let sc = activated(&s.listener, &s.tls, &s.echo.addr.to_string()).await;
    assert_eq!(
        sc.addr("server"),
        s.addr(),
        "the route serves the passed socket"
    );
    let mut c = s.connect().await.expect("handshake on the passed socket");
    assert_eq!(roundtrip(&mut c, b"activated").await, b"activated");
    // The sandbox still covers a passed socket: its port may be listened on.
    sc.wait_log(&["sandbox applied", "filesystem=\"enforced\""])
        .await;
}

/// systemd keeps the socket while the service restarts: a peer that
/// connects in between is queued in the backlog and served by the next
/// process, not refused.
#[tokio::test]
async fn a_connection_made_while_the_sidecar_restarts_is_queued_and_served() {
    let s = Setup::new().await;
    let first = activated(&s.listener, &s.tls, &s.echo.addr.to_string()).await;
    first.signal(libc::SIGTERM);
    let (code, logs) = first.wait_exit().await;
    assert_eq!(code, Some(0), "{}", logs.join("\n"));

    // Nobody serves the socket now; the connect still completes (backlog)
    // and the ClientHello waits there.
    let pending = tokio::spawn({
        let cfg = client_config(
            Some(&s.pki.leaf(CONTROLLER, Role::Client)),
            &s.pki.ca.cert_pem,
        );
        let addr = s.addr();
        async move { tls_connect(&addr, REPLICA, cfg).await }
    });
    let second = activated(&s.listener, &s.tls, &s.echo.addr.to_string()).await;
    let mut c = tokio::time::timeout(DEADLINE, pending)
        .await
        .expect("the queued handshake completes")
        .expect("join")
        .expect("the queued connection is served, not refused");
    assert_eq!(roundtrip(&mut c, b"queued").await, b"queued");
    drop(second);
}

#[tokio::test]
async fn a_socket_that_was_not_passed_exits_2_naming_it() {
    let s = Setup::new().await;
    let d = s.tls.to_str().unwrap();
    let target = s.echo.addr.to_string();
    let args = |listen: &'static str| {
        vec![
            "server",
            "--listen",
            listen,
            "--target",
            &target,
            "--tls-dir",
            d,
            "--allow-san",
            CONTROLLER,
        ]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>()
    };
    let run = |mut cmd: Command| {
        let out = cmd.output().expect("run");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };

    // Nothing passed at all.
    let a = args("systemd:tls");
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let (code, err) = run(as_systemd_would(None, "", &[], &a));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("\"tls\"") && err.contains("not passed"),
        "{err}"
    );

    // A socket passed under another name: named in the message.
    let (code, err) = run(as_systemd_would(
        Some(s.listener.as_raw_fd()),
        "admin",
        &["LISTEN_PID"],
        &a,
    ));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("\"tls\"") && err.contains("admin"), "{err}");

    // Passed to another process (LISTEN_PID is not ours): not ours to use.
    let mut cmd = as_systemd_would(Some(s.listener.as_raw_fd()), "tls", &[], &a);
    cmd.env("LISTEN_PID", "1");
    let (code, err) = run(cmd);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("not passed"), "{err}");

    // A target can never be a systemd socket.
    let (code, err) = run_bin(&[
        "server",
        "--listen",
        "127.0.0.1:0",
        "--target",
        "systemd:tls",
        "--tls-dir",
        d,
        "--allow-san",
        CONTROLLER,
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--target"), "{err}");
}

/// Reads notify datagrams until `done` says stop; panics at the deadline.
fn read_notifications(sock: &UnixDatagram, mut done: impl FnMut(&[String]) -> bool) -> Vec<String> {
    let deadline = Instant::now() + DEADLINE;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !done(&got) {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "notifications so far: {got:?}");
        sock.set_read_timeout(Some(left)).unwrap();
        match sock.recv(&mut buf) {
            Ok(n) => got.extend(
                String::from_utf8_lossy(&buf[..n])
                    .lines()
                    .map(str::to_string),
            ),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(e) => panic!("recv: {e}"),
        }
    }
    got
}

/// Starts a server sidecar that notifies `sock` with a 200 ms watchdog
/// (pings every 100 ms); `WATCHDOG_PID` is its own pid when `ours`.
fn watched(s: &Setup, notify: &Path, ours: bool) -> Sidecar {
    let target = s.echo.addr.to_string();
    let args = [
        "server",
        "--listen",
        "127.0.0.1:0",
        "--target",
        &target,
        "--tls-dir",
        s.tls.to_str().unwrap(),
        "--allow-san",
        CONTROLLER,
    ];
    let own: &[&str] = if ours { &["WATCHDOG_PID"] } else { &[] };
    let mut cmd = as_systemd_would(None, "", own, &args);
    cmd.env("NOTIFY_SOCKET", notify)
        .env("WATCHDOG_USEC", "200000");
    if !ours {
        cmd.env("WATCHDOG_PID", "1");
    }
    Sidecar::from_command(cmd)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_watchdog_is_pinged_from_the_running_event_loop() {
    let s = Setup::new().await;
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    let sc = watched(&s, &path, true);
    let got = tokio::task::block_in_place(|| {
        read_notifications(&sock, |g| {
            g.iter().filter(|l| *l == "WATCHDOG=1").count() >= 3
        })
    });
    let ready = got.iter().position(|l| l == "READY=1");
    let first_ping = got.iter().position(|l| l == "WATCHDOG=1");
    assert!(
        ready.is_some() && ready < first_ping,
        "READY=1 first, then the pings: {got:?}"
    );
    sc.wait_log(&["systemd watchdog: pinging", "every=100ms"])
        .await;
}

/// A watchdog meant for another process (`WATCHDOG_PID`) is not ours: no
/// pings. There is no event for "nothing was sent", so this one waits: long
/// enough for ten pings at the interval the test above sees honoured.
#[tokio::test(flavor = "multi_thread")]
async fn a_watchdog_for_another_pid_is_ignored() {
    let s = Setup::new().await;
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    let sc = watched(&s, &path, false);
    let ready = tokio::task::block_in_place(|| {
        read_notifications(&sock, |g| g.iter().any(|l| l == "READY=1"))
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    sc.signal(libc::SIGTERM);
    let rest = tokio::task::block_in_place(|| {
        read_notifications(&sock, |g| g.iter().any(|l| l == "STOPPING=1"))
    });
    assert!(
        !ready.iter().chain(&rest).any(|l| l == "WATCHDOG=1"),
        "{ready:?} {rest:?}"
    );
    let (code, _) = sc.wait_exit().await;
    assert_eq!(code, Some(0));
}

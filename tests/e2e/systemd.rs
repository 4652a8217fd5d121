//! systemd integration of the real binary, with systemd played by the test:
//! socket activation (a listening socket the test owns, passed as fd 3 with
//! `LISTEN_FDS`/`LISTEN_FDNAMES`/`LISTEN_PID`, as systemd passes it) and
//! the watchdog (`WATCHDOG_USEC`/`WATCHDOG_PID`, pings read from a
//! `NOTIFY_SOCKET` datagram socket the test binds); and socket activation
//! by systemd's own `systemd-socket-activate`, across a restart.

use crate::common;

use std::io::Write;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixDatagram;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use common::*;
use mtls_sidecar::pki::Role;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;

/// `bin args…` as systemd would start it. `fd`, when given, becomes fd 3
/// (`LISTEN_FDS=1`, `LISTEN_FDNAMES=names`); the variables named in
/// `own_pid` are set to the binary's own pid, which only exists once it
/// runs: a shell sets them and `exec`s it, keeping its pid.
fn as_systemd_would(fd: Option<RawFd>, names: &str, own_pid: &[&str], args: &[&str]) -> Command {
    passing(Path::new(&bin()), fd, Some(names), own_pid, args)
}

/// `program args…` given fd 3 as [`as_systemd_would`] gives it, with
/// `LISTEN_FDNAMES` only when `names` is given.
fn passing(
    program: &Path,
    fd: Option<RawFd>,
    names: Option<&str>,
    own_pid: &[&str],
    args: &[&str],
) -> Command {
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg("for v in $PID_VARS; do export \"$v=$$\"; done; unset PID_VARS; exec \"$@\"")
        .arg("sh")
        .arg(program)
        .args(args)
        .env("PID_VARS", own_pid.join(" "))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(fd) = fd {
        cmd.env("LISTEN_FDS", "1");
        if let Some(names) = names {
            cmd.env("LISTEN_FDNAMES", names);
        }
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

    fn client(&self) -> Arc<rustls::ClientConfig> {
        client_config(
            Some(&self.pki.leaf(CONTROLLER, Role::Client)),
            &self.pki.ca.cert_pem,
        )
    }

    async fn connect(&self) -> std::io::Result<ClientTls> {
        tls_connect(&self.addr(), REPLICA, self.client()).await
    }
}

/// Connects to `addr` now and runs the mTLS handshake in a task. The
/// connect completing proves the connection was taken into the backlog
/// (not refused), whether or not anything serves the socket yet; the
/// ClientHello waits there for whoever accepts it.
async fn queue_handshake(
    addr: &str,
    cfg: Arc<rustls::ClientConfig>,
) -> tokio::task::JoinHandle<std::io::Result<ClientTls>> {
    let tcp = TcpStream::connect(addr)
        .await
        .expect("the connection is queued, not refused");
    tokio::spawn(async move {
        let name = ServerName::try_from(REPLICA).expect("server name");
        tokio_rustls::TlsConnector::from(cfg)
            .connect(name, tcp)
            .await
    })
}

/// Waits for a queued handshake (see [`queue_handshake`]) to complete.
async fn served(pending: tokio::task::JoinHandle<std::io::Result<ClientTls>>) -> ClientTls {
    tokio::time::timeout(DEADLINE, pending)
        .await
        .expect("the queued handshake completes")
        .expect("join")
        .expect("the queued connection is served, not refused")
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
    let pending = queue_handshake(&s.addr(), s.client()).await;
    let second = activated(&s.listener, &s.tls, &s.echo.addr.to_string()).await;
    let mut c = served(pending).await;
    assert_eq!(roundtrip(&mut c, b"queued").await, b"queued");
    drop(second);
}

/// `systemd-socket-activate`'s path (the test has checked it is there:
/// Debian's `systemd` package).
fn socket_activate() -> PathBuf {
    tools::installed("systemd-socket-activate").expect("systemd-socket-activate")
}

/// What `systemd-socket-activate` execs: systemd's `Restart=`, played by a
/// shell that holds the passed socket and, for each line on its stdin,
/// runs one generation of the sidecar on it (`LISTEN_PID` set to that
/// generation's pid) and says when it exits.
const RESTART_LOOP: &str = r#"n=0
while read -r _; do
    n=$((n + 1))
    GENERATION=$n sh -c 'echo "generation $GENERATION pid $$" >&2; export LISTEN_PID=$$; exec "$@" </dev/null' sh "$@"
    echo "generation $n exited $?" >&2
done"#;

/// Kills a process group when dropped, unless disarmed: the sidecar
/// generations are grandchildren of the test, out of [`Sidecar`]'s reach.
struct KillGroup(i32);

impl KillGroup {
    fn disarm(mut self) {
        self.0 = 0;
    }
}

impl Drop for KillGroup {
    fn drop(&mut self) {
        if self.0 > 0 {
            // SAFETY: kill has no memory effects.
            unsafe { libc::kill(-self.0, libc::SIGKILL) };
        }
    }
}

/// The pid from a "generation N pid PID" line.
fn generation_pid(line: &str) -> i32 {
    line.split_whitespace()
        .last()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {line:?}"))
}

/// The real `systemd-socket-activate` holds the listening socket (passed to
/// it, as systemd passes sockets on, since it cannot bind port 0 itself),
/// names it with `--fdname`, and starts the service on the first connection
/// attempt; a restart loop keeps the socket across sidecar generations.
/// Both a connection made before any sidecar runs and one made between two
/// generations are queued and served with mutual TLS, not refused. Once
/// nothing holds the socket any more, a connect is refused (the control:
/// the test kept no copy of it).
#[tokio::test]
async fn systemd_socket_activate_keeps_the_socket_across_a_restart() {
    if tools::skip_unless(&["systemd-socket-activate"]) {
        return;
    }
    let tool = socket_activate();
    let Setup {
        _tmp,
        pki,
        tls,
        echo,
        listener,
    } = Setup::new().await;
    let addr = listener.local_addr().unwrap().to_string();
    let cfg = client_config(Some(&pki.leaf(CONTROLLER, Role::Client)), &pki.ca.cert_pem);
    let (bin, target) = (bin(), echo.addr.to_string());
    let args = [
        "--fdname=tls",
        "sh",
        "-c",
        RESTART_LOOP,
        "restart-loop",
        &bin,
        "server",
        "--listen",
        "systemd:tls",
        "--target",
        &target,
        "--tls-dir",
        tls.to_str().unwrap(),
        "--allow-san",
        CONTROLLER,
    ];
    let (next_generation, mut go) = std::io::pipe().expect("pipe");
    let mut cmd = passing(
        &tool,
        Some(listener.as_raw_fd()),
        None,
        &["LISTEN_PID"],
        &args,
    );
    cmd.stdin(next_generation).process_group(0);
    let sc = Sidecar::from_command(cmd);
    let group = KillGroup(sc.pid() as i32);
    drop(listener);
    sc.wait_log(&["Listening on", &addr]).await;

    // Before any sidecar: the connection attempt makes the tool exec the
    // loop, which starts nothing until told.
    let first = queue_handshake(&addr, cfg.clone()).await;
    sc.wait_log(&["Execing"]).await;
    go.write_all(b"start\n").unwrap();
    let mut c = served(first).await;
    assert_eq!(roundtrip(&mut c, b"before ready").await, b"before ready");
    drop(c);

    // Restart: the first generation drains and exits; the socket stays
    // held, a connection made now waits for the second generation.
    let pid = generation_pid(&sc.wait_log(&["generation 1 pid"]).await);
    // SAFETY: kill has no memory effects.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    sc.wait_log(&["generation 1 exited 0"]).await;
    let second = queue_handshake(&addr, cfg.clone()).await;
    go.write_all(b"start\n").unwrap();
    let mut c = served(second).await;
    assert_eq!(roundtrip(&mut c, b"mid-restart").await, b"mid-restart");
    drop(c);
    // The second generation's "listening" line may still be in the pipe
    // when its connection has been served: wait for it, then count.
    let listening = format!("listen={addr} ");
    eventually("the second generation's listening line", || {
        sc.log_count(&listening) >= 2
    })
    .await;
    assert_eq!(
        sc.log_count(&listening),
        2,
        "both generations served the passed socket"
    );

    let pid = generation_pid(&sc.wait_log(&["generation 2 pid"]).await);
    // SAFETY: kill has no memory effects.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    sc.wait_log(&["generation 2 exited 0"]).await;
    drop(go);
    let (code, logs) = sc.wait_exit().await;
    group.disarm();
    assert_eq!(code, Some(0), "{}", logs.join("\n"));
    let refused = TcpStream::connect(&addr).await;
    assert!(refused.is_err(), "nothing holds the socket any more");
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
        // Polls to count: the event loop's own clock for "nothing sent".
        "--reload-interval",
        "100ms",
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
/// pings. There is no event for "nothing was sent", so this one counts the
/// sidecar's own events instead of sleeping: ten credential polls 100 ms
/// apart on the event loop that would ping, time for five pings at the
/// interval the test above sees honoured.
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
    sc.wait_polls(10).await;
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

/// Two sockets from `systemd-socket-activate`, told apart by name
/// (`--fdname=tls:admin`): the TLS port passed to it, and a unix socket it
/// binds itself for the admin endpoint. The sidecar takes each by name
/// (`--listen systemd:tls --admin systemd:admin`) and serves mutual TLS on
/// one and `/readyz` and `/status` on the other, sandboxed.
#[tokio::test]
async fn systemd_socket_activate_passes_named_sockets_for_route_and_admin() {
    if tools::skip_unless(&["systemd-socket-activate"]) {
        return;
    }
    let tool = socket_activate();
    let s = Setup::new().await;
    let tmp = tempfile::tempdir().unwrap();
    let admin_sock = tmp.path().join("admin.sock");
    let listen_admin = format!("--listen={}", admin_sock.display());
    let (bin, target) = (bin(), s.echo.addr.to_string());
    let args = [
        "--fdname=tls:admin",
        &listen_admin,
        &bin,
        "server",
        "--listen",
        "systemd:tls",
        "--admin",
        "systemd:admin",
        "--target",
        &target,
        "--tls-dir",
        s.tls.to_str().unwrap(),
        "--allow-san",
        CONTROLLER,
    ];
    let cmd = passing(
        &tool,
        Some(s.listener.as_raw_fd()),
        None,
        &["LISTEN_PID"],
        &args,
    );
    // The tool execs the sidecar in place: the child is the sidecar.
    let sc = Sidecar::from_command(cmd);
    let admin_path = admin_sock.display().to_string();
    sc.wait_log(&["Listening on", &admin_path]).await;

    let pending = queue_handshake(&s.addr(), s.client()).await;
    let mut c = served(pending).await;
    assert_eq!(roundtrip(&mut c, b"named").await, b"named");
    let admin = format!("unix:{admin_path}");
    let ready = http::request(&admin, "GET", "/readyz").await;
    assert_eq!(ready.code, 200, "{}", ready.body);
    let status = http::request(&admin, "GET", "/status").await;
    let status: serde_json::Value =
        serde_json::from_str(&status.body).unwrap_or_else(|e| panic!("{e}\n{}", status.body));
    assert_eq!(status["sandbox"]["filesystem"], "enforced", "{status}");
    sc.signal(libc::SIGTERM);
    drop(c);
    let (code, logs) = sc.wait_exit().await;
    assert_eq!(code, Some(0), "{}", logs.join("\n"));
}

/// The shipped unit.
const UNIT: &str = include_str!("../../deploy/systemd/mtls-sidecar.service");

/// The shipped unit runs the sidecar with `ProcSubset=pid`: its `/proc`
/// holds the process directories only, no `/proc/stat` (where the boot time
/// is). `process_start_time_seconds` must be there all the same, and right.
/// The test gives the binary such a `/proc`: a mount namespace of its own
/// with procfs mounted `subset=pid`, as systemd does.
#[tokio::test(flavor = "multi_thread")]
async fn process_start_time_is_exported_under_proc_subset_pid() {
    if tools::skip_unless(&["root"]) {
        return;
    }
    assert!(
        UNIT.lines().any(|l| l.trim() == "ProcSubset=pid"),
        "the unit"
    );
    let s = Setup::new().await;
    let (d, target) = (s.tls.to_str().unwrap(), s.echo.addr.to_string());
    let mut cmd = Command::new(bin());
    cmd.args(["server", "--listen", "127.0.0.1:0", "--target", &target])
        .args(["--tls-dir", d, "--allow-san", CONTROLLER])
        .args(["--admin", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: only async-signal-safe system calls (unshare, mount) between
    // fork and exec, on C string literals.
    unsafe {
        cmd.pre_exec(|| {
            let private = libc::MS_REC | libc::MS_PRIVATE;
            let ok = libc::unshare(libc::CLONE_NEWNS) == 0
                && libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    private,
                    std::ptr::null(),
                ) == 0
                && libc::mount(
                    c"proc".as_ptr(),
                    c"/proc".as_ptr(),
                    c"proc".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    c"subset=pid".as_ptr().cast(),
                ) == 0;
            if ok {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let started = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let sc = Sidecar::from_command(cmd);
    sc.wait_log(&["admin endpoint listening"]).await;
    // The sidecar's /proc really has no stat file.
    let root = format!("/proc/{}/root", sc.pid());
    assert!(Path::new(&root).join("proc/self").exists());
    assert!(
        !Path::new(&root).join("proc/stat").exists(),
        "not subset=pid"
    );

    let m = scrape(&sc.admin()).await;
    let start = m
        .value("process_start_time_seconds", &[])
        .unwrap_or_else(|| panic!("no process_start_time_seconds:\n{m:?}"));
    assert!(
        (started - 2.0..=started + 30.0).contains(&start),
        "start time {start}, spawned at {started}"
    );
}

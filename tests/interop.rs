//! Interop with TLS stacks we did not write: `openssl s_client` and Python's
//! `ssl` module against `server`, and `client` against `openssl s_server`
//! (TLS 1.3, and TLS 1.2 only when `--tls-min-version 1.2` allows it).

mod common;

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use common::*;
use mtls_sidecar::pki::Role;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::{Child, ChildStdin, Command};

/// A foreign TLS peer run as a subprocess: its output collected as it
/// arrives, every wait bounded by [`DEADLINE`], killed when dropped.
struct Proc {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    out: Arc<Mutex<Vec<u8>>>,
    err: Arc<Mutex<Vec<u8>>>,
}

fn collect<R: AsyncRead + Unpin + Send + 'static>(mut r: R) -> Arc<Mutex<Vec<u8>>> {
    let sink = Arc::new(Mutex::new(Vec::new()));
    let s = sink.clone();
    tokio::spawn(async move {
        let mut buf = [0u8; 4096];
        while let Ok(n) = r.read(&mut buf).await {
            if n == 0 {
                break;
            }
            s.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    sink
}

impl Proc {
    fn spawn(program: &str, args: &[&str]) -> Proc {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
        let stdin = child.stdin.take();
        let out = collect(child.stdout.take().unwrap());
        let err = collect(child.stderr.take().unwrap());
        Proc {
            name: program.to_string(),
            child,
            stdin,
            out,
            err,
        }
    }

    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.lock().unwrap()).into_owned()
    }

    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.err.lock().unwrap()).into_owned()
    }

    /// Waits until stdout contains `needle`.
    async fn wait_stdout(&self, needle: &str) -> String {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let out = self.stdout();
            if out.contains(needle) {
                return out;
            }
            assert!(
                Instant::now() < deadline,
                "{} never printed {needle:?}\nstdout:\n{out}\nstderr:\n{}",
                self.name,
                self.stderr()
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    async fn send(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin");
        stdin.write_all(bytes).await.unwrap();
        stdin.flush().await.unwrap();
    }

    /// Waits for the process to exit on its own; returns its exit code.
    async fn wait_exit(&mut self) -> Option<i32> {
        let status = tokio::time::timeout(DEADLINE, self.child.wait())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "{} did not exit\nstdout:\n{}\nstderr:\n{}",
                    self.name,
                    self.stdout(),
                    self.stderr()
                )
            })
            .unwrap();
        // Let the collectors drain the pipes.
        let deadline = Instant::now() + DEADLINE;
        while Arc::strong_count(&self.out) > 1 || Arc::strong_count(&self.err) > 1 {
            assert!(
                Instant::now() < deadline,
                "{} output never closed",
                self.name
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        status.code()
    }
}

fn path(dir: &std::path::Path, file: &str) -> String {
    dir.join(file).to_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn openssl_s_client_with_a_certificate_round_trips() {
    let srv = ServerSide::start(&[]).await;
    let d = &srv.controller_dir;
    let mut p = Proc::spawn(
        "openssl",
        &[
            "s_client",
            "-connect",
            &srv.addr,
            "-servername",
            REPLICA,
            "-verify_hostname",
            REPLICA,
            "-verify_return_error",
            "-CAfile",
            &path(d, "ca.crt"),
            "-cert",
            &path(d, "tls.crt"),
            "-key",
            &path(d, "tls.key"),
            "-quiet",
        ],
    );
    p.send(b"hello from openssl\n").await;
    p.wait_stdout("hello from openssl\n").await;
    assert_eq!(srv.echo.accepted(), 1);
    assert!(srv.sidecar.warn_lines(&["handshake refused"]).is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn openssl_s_client_without_a_certificate_is_refused() {
    let srv = ServerSide::start(&[]).await;
    let d = &srv.controller_dir;
    let mut p = Proc::spawn(
        "openssl",
        &[
            "s_client",
            "-connect",
            &srv.addr,
            "-servername",
            REPLICA,
            "-verify_return_error",
            "-CAfile",
            &path(d, "ca.crt"),
            "-quiet",
        ],
    );
    p.send(b"hello without a certificate\n").await;
    // The server's alert ends the session and s_client exits.
    let code = p.wait_exit().await;
    assert!(!p.stdout().contains("hello"), "echoed: {}", p.stdout());
    assert_ne!(code, Some(0), "stderr:\n{}", p.stderr());
    srv.sidecar
        .wait_field("handshake refused", "reason", "no_client_cert")
        .await;
    assert_eq!(srv.echo.accepted(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn client_sidecar_talks_to_openssl_s_server() {
    let creds = Creds::new();
    let (mut server, target) = s_server(&creds.server_dir, "-tls1_3").await;
    let client = start_client(&creds.client_dir, &target, &[]).await;
    let mut app = TcpStream::connect(client.addr("client")).await.unwrap();
    app.write_all(b"controller says hi\n").await.unwrap();
    server.wait_stdout("controller says hi\n").await;
    server.send(b"replica says hi\n").await;
    let mut buf = vec![0u8; b"replica says hi\n".len()];
    tokio::time::timeout(DEADLINE, app.read_exact(&mut buf))
        .await
        .expect("reply from s_server in time")
        .unwrap();
    assert_eq!(buf, b"replica says hi\n");
    assert!(client.warn_lines(&["handshake refused"]).is_empty());
}

/// `openssl s_server` on an ephemeral port, accepting one connection with
/// `version` (e.g. `-tls1_2`) and requiring a client certificate from the
/// CA in `dir`; returns it with the address it printed.
async fn s_server(dir: &std::path::Path, version: &str) -> (Proc, String) {
    // `-accept 127.0.0.1:0` binds an ephemeral port and prints it on an
    // "ACCEPT host:port" line, so there is no port to race for.
    let server = Proc::spawn(
        "openssl",
        &[
            "s_server",
            "-accept",
            "127.0.0.1:0",
            "-naccept",
            "1",
            version,
            "-Verify",
            "1",
            "-verify_return_error",
            "-cert",
            &path(dir, "tls.crt"),
            "-key",
            &path(dir, "tls.key"),
            "-CAfile",
            &path(dir, "ca.crt"),
        ],
    );
    let out = server.wait_stdout("ACCEPT ").await;
    let target = out
        .lines()
        .find_map(|l| l.strip_prefix("ACCEPT "))
        .filter(|a| a.starts_with("127.0.0.1:"))
        .unwrap_or_else(|| panic!("no ACCEPT line in {out}"))
        .trim()
        .to_string();
    (server, target)
}

/// The client sidecar offers TLS 1.3 only unless told otherwise: a
/// TLS 1.2-only OpenSSL server refuses it (counted and logged as
/// `protocol`), and `--tls-min-version 1.2` makes the same server work.
#[tokio::test(flavor = "multi_thread")]
async fn client_sidecar_speaks_tls12_to_openssl_only_when_allowed() {
    let creds = Creds::new();
    let hello = b"controller over 1.2\n";

    let (strict_server, target) = s_server(&creds.server_dir, "-tls1_2").await;
    let strict = start_client(&creds.client_dir, &target, &["--admin", "127.0.0.1:0"]).await;
    let mut app = TcpStream::connect(strict.addr("client")).await.unwrap();
    app.write_all(hello).await.unwrap();
    assert!(read_until_closed(&mut app).await.is_empty());
    let line = strict
        .wait_field("handshake refused", "reason", "protocol")
        .await;
    assert!(line.contains(" WARN "), "{line}");
    let m = scrape_until(&strict.admin(), "the protocol refusal", |m| {
        m.value(
            "mtls_sidecar_tls_handshake_failures_total",
            &[("route", "client"), ("reason", "protocol")],
        ) == Some(1.0)
    })
    .await;
    assert_eq!(
        m.get("mtls_sidecar_tls_handshakes_total", &[("route", "client")]),
        0.0
    );
    assert!(!strict_server.stdout().contains("controller"));

    let (mut server, target) = s_server(&creds.server_dir, "-tls1_2").await;
    let relaxed = start_client(&creds.client_dir, &target, &["--tls-min-version", "1.2"]).await;
    let mut app = TcpStream::connect(relaxed.addr("client")).await.unwrap();
    app.write_all(hello).await.unwrap();
    server.wait_stdout("controller over 1.2\n").await;
    server.send(b"replica over 1.2\n").await;
    let mut buf = vec![0u8; b"replica over 1.2\n".len()];
    tokio::time::timeout(DEADLINE, app.read_exact(&mut buf))
        .await
        .expect("reply from s_server in time")
        .unwrap();
    assert_eq!(buf, b"replica over 1.2\n");
    assert!(relaxed.warn_lines(&["handshake refused"]).is_empty());
}

const PY_CLIENT: &str = r#"
import socket, ssl, sys
host, port, cert, key, ca, name = sys.argv[1:7]
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.minimum_version = ssl.TLSVersion.TLSv1_3
ctx.load_cert_chain(cert, key)
ctx.load_verify_locations(ca)
with socket.create_connection((host, int(port)), timeout=20) as raw:
    with ctx.wrap_socket(raw, server_hostname=name) as s:
        try:
            s.sendall(b"hello from python")
            got = b""
            while len(got) < len(b"hello from python"):
                chunk = s.recv(64)
                if not chunk:
                    break
                got += chunk
        except (ssl.SSLError, OSError) as e:
            print("REFUSED", repr(e))
            sys.exit(3)
        if not got:
            print("REFUSED eof")
            sys.exit(3)
        print("GOT", got.decode())
"#;

/// Runs the Python client against `srv` presenting the identity in `dir`.
async fn python_client(srv: &ServerSide, dir: &std::path::Path) -> (Option<i32>, String) {
    let (host, port) = srv.addr.rsplit_once(':').unwrap();
    let mut p = Proc::spawn(
        "python3",
        &[
            "-c",
            PY_CLIENT,
            host,
            port,
            &path(dir, "tls.crt"),
            &path(dir, "tls.key"),
            &path(dir, "ca.crt"),
            REPLICA,
        ],
    );
    let code = p.wait_exit().await;
    (code, p.stdout() + &p.stderr())
}

#[tokio::test(flavor = "multi_thread")]
async fn python_ssl_client_is_accepted() {
    let srv = ServerSide::start(&[]).await;
    let (code, out) = python_client(&srv, &srv.controller_dir).await;
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("GOT hello from python"), "{out}");
    assert_eq!(srv.echo.accepted(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn python_ssl_client_with_the_wrong_san_is_refused() {
    let srv = ServerSide::start(&[]).await;
    let replica = srv.pki.leaf(REPLICA, Role::Both);
    let dir = srv.pki.dir(srv.tmp.path(), "wrong-role", &replica);
    let (code, out) = python_client(&srv, &dir).await;
    assert_eq!(code, Some(3), "{out}");
    assert!(out.contains("REFUSED"), "{out}");
    assert!(!out.contains("GOT"), "{out}");
    srv.sidecar
        .wait_field("handshake refused", "reason", "bad_san")
        .await;
    assert_eq!(srv.echo.accepted(), 0);
}

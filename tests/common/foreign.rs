//! Foreign TLS peers (`openssl s_client`/`s_server`, Python, HAProxy) run as
//! subprocesses for the interop tests: their output gathered as it arrives,
//! every wait bounded by [`DEADLINE`], killed when dropped.

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, Command};

use super::DEADLINE;

/// A foreign TLS peer run as a subprocess: its output collected as it
/// arrives, every wait bounded by [`DEADLINE`], killed when dropped.
pub struct Proc {
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
    pub fn spawn(program: &str, args: &[&str]) -> Proc {
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

    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.lock().unwrap()).into_owned()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.err.lock().unwrap()).into_owned()
    }

    /// Stdout then stderr: what a check that does not care which stream
    /// printed a line reads.
    pub fn output(&self) -> String {
        self.stdout() + &self.stderr()
    }

    /// Waits until stdout or stderr contains `needle`; returns both.
    pub async fn wait_output(&self, needle: &str) -> String {
        self.wait_in(Proc::output, needle).await
    }

    /// Waits until stdout contains `needle`.
    pub async fn wait_stdout(&self, needle: &str) -> String {
        self.wait_in(Proc::stdout, needle).await
    }

    /// Waits until `read` (one of the stream readers above) contains
    /// `needle`; returns what it read.
    async fn wait_in(&self, read: fn(&Proc) -> String, needle: &str) -> String {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let out = read(self);
            if out.contains(needle) {
                return out;
            }
            assert!(
                Instant::now() < deadline,
                "{} never printed {needle:?}\nstdout:\n{}\nstderr:\n{}",
                self.name,
                self.stdout(),
                self.stderr()
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin");
        stdin.write_all(bytes).await.unwrap();
        stdin.flush().await.unwrap();
    }

    /// Writes `line` to the process's stdin (what `s_server` sends its
    /// peer) and waits, within [`DEADLINE`], until exactly it arrives at
    /// `app`, the plaintext end the sidecar forwards to.
    pub async fn reply_to(&mut self, app: &mut tokio::net::TcpStream, line: &[u8]) {
        self.send(line).await;
        let mut buf = vec![0u8; line.len()];
        tokio::time::timeout(DEADLINE, app.read_exact(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("no reply from {} in time", self.name))
            .unwrap();
        assert_eq!(buf, line);
    }

    /// Waits for the process to exit on its own; returns its exit code.
    pub async fn wait_exit(&mut self) -> Option<i32> {
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

/// A file in `dir` as a command-line argument.
/// `openssl s_client` to `addr` with the peer credentials in `dir` (its
/// `ca.crt`, `tls.crt` and `tls.key`), sending `server_name` and refusing
/// a server chain that does not verify; `extra` arguments last.
pub fn s_client_with_cert(addr: &str, dir: &Path, server_name: &str, extra: &[&str]) -> Proc {
    let (ca, cert, key) = (
        path(dir, "ca.crt"),
        path(dir, "tls.crt"),
        path(dir, "tls.key"),
    );
    let mut args = vec![
        "s_client",
        "-connect",
        addr,
        "-servername",
        server_name,
        "-verify_return_error",
        "-CAfile",
        &ca,
        "-cert",
        &cert,
        "-key",
        &key,
    ];
    args.extend_from_slice(extra);
    Proc::spawn("openssl", &args)
}

pub fn path(dir: &Path, file: &str) -> String {
    dir.join(file).to_str().unwrap().to_string()
}

/// `openssl s_server` on an ephemeral port with the identity and CA in
/// `dir`, accepting one connection and requiring a client certificate,
/// plus `extra` options; returns it with the address it printed.
pub async fn s_server(dir: &Path, extra: &[&str]) -> (Proc, String) {
    // `-accept 127.0.0.1:0` binds an ephemeral port and prints it on an
    // "ACCEPT host:port" line, so there is no port to race for.
    let (cert, key, ca) = (
        path(dir, "tls.crt"),
        path(dir, "tls.key"),
        path(dir, "ca.crt"),
    );
    let mut args = vec![
        "s_server",
        "-accept",
        "127.0.0.1:0",
        "-naccept",
        "1",
        "-Verify",
        "1",
        "-verify_return_error",
        "-cert",
        &cert,
        "-key",
        &key,
        "-CAfile",
        &ca,
    ];
    args.extend_from_slice(extra);
    let server = Proc::spawn("openssl", &args);
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

//! Shared test fixtures: an in-process PKI, credential directories, the real
//! sidecar binary with its logs, plaintext targets and TLS peers.
#![allow(dead_code)]

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mtls_sidecar::pki::{
    serial_of, write_secret_dir, CrlSpec, DevCa, Issued, IssuedCrl, LeafSpec, Role,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub mod broken_crl;
/// A parser for the `/metrics` page (also used by the admin tests).
pub mod expo;
pub mod foreign;
/// The recording target the hand-off tests read PROXY headers from.
pub mod handoff;
/// An independent HTTP/1.1 client for the admin endpoint.
pub mod http;
/// The HTTP target and raw client of the identity-header tests.
pub mod http_identity;
pub mod openssl_ca;
/// A plain RFC 9110 quoted-string XFCC parser, independent of the encoder
/// (the identity-header tests and the http_identity fuzz target judge with it).
pub mod rfc9110;
/// The independent Workload API agent and the sidecars on it.
pub mod spiffe;
pub mod tap;
pub mod tools;
pub mod waits;

pub const CONTROLLER: &str = "controller.env-1.svc";
pub const REPLICA: &str = "replica-0.env-1.svc";

/// How long any awaited event may take on a loaded 2-core machine.
pub const DEADLINE: Duration = Duration::from_secs(20);

pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    mtls_sidecar::tls::provider::crypto_provider()
}

/// `params` signed by `ca` with a fresh key, for leaves the development
/// PKI's `LeafSpec` cannot describe (odd subjects, no EKU...).
pub fn sign_by(ca: &DevCa, params: rcgen::CertificateParams) -> Issued {
    let ca_key = rcgen::KeyPair::from_pem(&ca.key_pem).expect("CA key");
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca.cert_pem, ca_key).expect("CA issuer");
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = params.signed_by(&key, &issuer).expect("sign");
    Issued {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        cert_der: cert.der().clone(),
    }
}

/// A CA plus helpers to issue role identities.
pub struct Pki {
    pub ca: DevCa,
}

impl Pki {
    pub fn new(name: &str) -> Pki {
        Pki {
            ca: DevCa::new(name, 30).expect("mint CA"),
        }
    }
    pub fn leaf(&self, name: &str, role: Role) -> Issued {
        self.ca
            .issue(&LeafSpec::dns(name, role, 30))
            .expect("issue leaf")
    }
    pub fn issue(&self, spec: &LeafSpec) -> Issued {
        self.ca.issue(spec).expect("issue leaf")
    }
    /// This CA's CRL number `number` revoking `revoked`, next update in a
    /// week.
    pub fn crl(&self, number: u64, revoked: &[&Issued]) -> IssuedCrl {
        let serials = revoked
            .iter()
            .map(|l| serial_of(&l.cert_der).expect("serial"))
            .collect();
        self.ca
            .crl(&CrlSpec::new(number, serials, 7))
            .expect("sign CRL")
    }
    /// A Secret-style directory holding `leaf` and this CA.
    pub fn dir(&self, root: &Path, sub: &str, leaf: &Issued) -> PathBuf {
        let d = root.join(sub);
        write_secret_dir(&d, leaf, &self.ca.cert_pem).expect("write secret dir");
        d
    }
}

/// Publishes `leaf` and `ca` as one kubelet-style revision of `dir`.
pub fn publish_identity(
    dir: &mtls_sidecar::tools::atomic_writer::AtomicDir,
    leaf: &Issued,
    ca: &str,
) {
    dir.publish(&[
        ("tls.crt", leaf.cert_pem.as_bytes()),
        ("tls.key", leaf.key_pem.as_bytes()),
        ("ca.crt", ca.as_bytes()),
    ])
    .expect("publish a revision");
}

/// Raises this test process's soft descriptor limit to its hard one and
/// returns the hard limit: the load tests hold both ends of every
/// connection they make, and the sidecars they start inherit it. Done once
/// per test program (its tests share the process, so a second raise would
/// only race the first); later calls return the same figure.
pub fn raise_nofile() -> u64 {
    static HARD: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *HARD.get_or_init(|| {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit/setrlimit on a local `rlimit` the calls only read and write.
        unsafe {
            assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
            if lim.rlim_cur < lim.rlim_max {
                lim.rlim_cur = lim.rlim_max;
                libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
            }
        }
        lim.rlim_max
    })
}

/// The real binary, its stderr captured.
pub struct Sidecar {
    child: Child,
    logs: Arc<Mutex<Vec<String>>>,
    /// The thread copying stderr into `logs`; it ends at the pipe's EOF.
    reader: Option<std::thread::JoinHandle<()>>,
}

/// The binary under test: the one cargo built for these tests, or the one
/// `MTLS_SIDECAR_BIN` names (CI points it at the shipped build as well).
pub fn bin() -> String {
    std::env::var("MTLS_SIDECAR_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_mtls-sidecar").to_string())
}

impl Sidecar {
    /// Starts the binary and waits until `routes` routes are listening.
    pub async fn start(args: &[&str], routes: usize) -> Sidecar {
        match Sidecar::try_start(args, routes).await {
            Ok(sc) => sc,
            Err((code, logs)) => panic!("sidecar exited early ({code:?}):\n{}", logs.join("\n")),
        }
    }

    /// Like [`start`](Self::start), but a binary that exits before it
    /// listens is no failure: its exit code and logs are returned.
    pub async fn try_start(
        args: &[&str],
        routes: usize,
    ) -> Result<Sidecar, (Option<i32>, Vec<String>)> {
        let sc = Sidecar::spawn(args);
        let deadline = Instant::now() + DEADLINE;
        loop {
            let n = sc
                .logs()
                .iter()
                // Route lines only: "admin endpoint listening" is not a route.
                .filter(|l| l.contains(" listening ") && l.contains("route="))
                .count();
            if n >= routes && (sc.has_admin_flag(args) <= sc.log_count("admin endpoint listening"))
            {
                return Ok(sc);
            }
            if sc.exited().is_some() {
                return Err(sc.wait_exit().await);
            }
            assert!(
                Instant::now() < deadline,
                "sidecar did not start:\n{}",
                sc.logs().join("\n")
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// How many admin endpoints `args` start: `--admin` flags (which win
    /// over a config file's), or the
    /// `admin` key of a `--config` file (whose line otherwise comes after
    /// the routes' and raced a test's first `admin()`).
    fn has_admin_flag(&self, args: &[&str]) -> usize {
        let flags = args.iter().filter(|a| **a == "--admin").count();
        let in_config = args
            .windows(2)
            .filter(|w| w[0] == "--config")
            .filter_map(|w| std::fs::read_to_string(w[1]).ok())
            .filter(|text| text.lines().any(config_sets_admin))
            .count();
        flags.max(in_config)
    }

    /// Starts the binary without waiting.
    pub fn spawn(args: &[&str]) -> Sidecar {
        let mut cmd = Command::new(bin());
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        Sidecar::from_command(cmd)
    }

    /// Starts a prepared command (stderr must be piped) without waiting.
    pub fn from_command(mut cmd: Command) -> Sidecar {
        let mut child = cmd
            .env("RUST_LOG", "info,mtls_sidecar=debug")
            .spawn()
            .expect("spawn sidecar");
        let stderr = child.stderr.take().expect("stderr");
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = logs.clone();
        let reader = std::thread::spawn(move || {
            use std::io::BufRead;
            for line in io::BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Sidecar {
            child,
            logs,
            reader: Some(reader),
        }
    }

    /// The process id (to look at its sockets through `/proc`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn logs(&self) -> Vec<String> {
        self.logs.lock().unwrap().clone()
    }

    pub fn log_count(&self, needle: &str) -> usize {
        self.logs().iter().filter(|l| l.contains(needle)).count()
    }

    /// Waits for a log line containing every needle.
    pub async fn wait_log(&self, needles: &[&str]) -> String {
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(l) = self
                .logs()
                .into_iter()
                .find(|l| needles.iter().all(|n| l.contains(n)))
            {
                return l;
            }
            assert!(
                Instant::now() < deadline,
                "no log line with {needles:?}:\n{}",
                self.logs().join("\n")
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The bound address of route `name` (from its "listening" log line).
    pub fn addr(&self, route: &str) -> String {
        let logs = self.logs();
        let line = logs
            .iter()
            .find(|l| l.contains(" listening ") && l.contains(&format!("route={route} ")))
            .unwrap_or_else(|| panic!("route {route} not listening:\n{}", logs.join("\n")));
        field(line, "listen")
    }

    /// The admin endpoint's bound address.
    pub fn admin(&self) -> String {
        let logs = self.logs();
        let line = logs
            .iter()
            .find(|l| l.contains("admin endpoint listening"))
            .expect("admin not listening");
        field(line, "admin")
    }

    pub fn exited(&self) -> Option<std::process::ExitStatus> {
        // try_wait needs &mut; use a non-blocking probe through /proc.
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).ok()?;
        let state = stat.rsplit(')').next()?.split_whitespace().next()?;
        if state == "Z" {
            Some(std::os::unix::process::ExitStatusExt::from_raw(0))
        } else {
            None
        }
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid; no memory is touched.
        unsafe {
            libc::kill(self.child.id() as i32, sig);
        }
    }

    /// Waits for the process to exit and returns its code.
    pub async fn wait_exit(mut self) -> (Option<i32>, Vec<String>) {
        let deadline = Instant::now() + DEADLINE + DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                // Every line is in once the log thread has read stderr to
                // its end (the pipe closes when the process exits).
                let reader = self.reader.take().expect("log thread");
                while !reader.is_finished() {
                    assert!(Instant::now() < deadline, "stderr never closed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                reader.join().expect("log thread panicked");
                return (status.code(), self.logs());
            }
            assert!(
                Instant::now() < deadline,
                "sidecar did not exit:\n{}",
                self.logs().join("\n")
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Extracts `key=value` from a text log line (value up to whitespace).
pub fn field(line: &str, key: &str) -> String {
    let pat = format!("{key}=");
    line.split_whitespace()
        .find_map(|t| t.strip_prefix(&pat))
        .unwrap_or_else(|| panic!("no {key}= in {line}"))
        .trim_matches('"')
        .to_string()
}

/// Runs the binary to completion (for CLI errors).
pub fn run_bin(args: &[&str]) -> (i32, String) {
    let out = Command::new(bin()).args(args).output().expect("run binary");
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    (out.status.code().unwrap_or(-1), text)
}

/// Runs the binary with `args` and `input` on its stdin (closed after it):
/// (exit code, stdout, stderr).
pub fn run_bin_stdin(args: &[&str], input: &str) -> (i32, String, String) {
    use std::io::Write;
    let mut child = Command::new(bin())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run binary");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(input.as_bytes()).expect("write stdin");
    drop(stdin);
    let out = child.wait_with_output().expect("wait");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// An echo server that counts the connections it accepted.
pub struct Echo {
    pub addr: SocketAddr,
    pub accepted: Arc<AtomicUsize>,
}

impl Echo {
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

pub async fn echo_target() -> Echo {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
    });
    Echo { addr, accepted }
}

/// A rustls client config presenting `ident` (if any) and trusting `ca_pem`.
pub fn client_config(ident: Option<&Issued>, ca_pem: &str) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let cfg = match ident {
        Some(id) => builder
            .with_client_auth_cert(
                vec![id.cert_der.clone()],
                PrivateKeyDer::from_pem_slice(id.key_pem.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    Arc::new(cfg)
}

/// A rustls server config presenting `ident`, requiring client certs from
/// `client_ca` when given.
pub fn server_config(ident: &Issued, client_ca: Option<&str>) -> Arc<rustls::ServerConfig> {
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(ca.as_bytes()) {
                roots.add(c.unwrap()).unwrap();
            }
            builder.with_client_cert_verifier(
                rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider(),
                )
                .build()
                .unwrap(),
            )
        }
        None => builder.with_no_client_auth(),
    };
    Arc::new(
        builder
            .with_single_cert(
                vec![ident.cert_der.clone()],
                PrivateKeyDer::from_pem_slice(ident.key_pem.as_bytes()).unwrap(),
            )
            .unwrap(),
    )
}

pub type ClientTls = tokio_rustls::client::TlsStream<TcpStream>;

/// Connects with TLS as a client.
pub async fn tls_connect(
    addr: &str,
    name: &str,
    cfg: Arc<rustls::ClientConfig>,
) -> io::Result<ClientTls> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let sn = ServerName::try_from(name.to_string()).unwrap();
    tokio_rustls::TlsConnector::from(cfg).connect(sn, tcp).await
}

/// True when the server refused us: in TLS 1.3 a refused client certificate
/// surfaces on the first read after the handshake (an alert or EOF).
pub async fn refused<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(s: &mut S) -> bool {
    let _ = s.write_all(b"ping").await;
    let _ = s.flush().await;
    let mut buf = [0u8; 16];
    match tokio::time::timeout(DEADLINE, s.read(&mut buf)).await {
        Ok(Ok(0)) | Ok(Err(_)) => true,
        Ok(Ok(_)) => false,
        Err(_) => panic!("no answer from server"),
    }
}

/// Sends `msg` and reads exactly its length back.
pub async fn roundtrip<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    s: &mut S,
    msg: &[u8],
) -> Vec<u8> {
    s.write_all(msg).await.unwrap();
    s.flush().await.unwrap();
    let mut buf = vec![0u8; msg.len()];
    tokio::time::timeout(DEADLINE, s.read_exact(&mut buf))
        .await
        .expect("reply in time")
        .expect("reply");
    buf
}

/// The PKI every two-sided fixture stands on: one CA, the replica (server
/// role) and controller (client role) identities, each written as a
/// Secret-style directory. [`Pair`], [`PairTo`] and [`ServerSide`] all
/// mint through this, and deref to it.
pub struct Creds {
    pub tmp: tempfile::TempDir,
    pub pki: Pki,
    /// The server sidecar's identity (SAN [`REPLICA`]).
    pub replica: Issued,
    /// The client sidecar's identity (SAN [`CONTROLLER`]), which the server
    /// sidecar admits.
    pub controller: Issued,
    /// `replica` with the CA (tls.crt, tls.key, ca.crt).
    pub server_dir: PathBuf,
    /// `controller` with the CA.
    pub client_dir: PathBuf,
}

impl Creds {
    pub fn new() -> Creds {
        let tmp = tempfile::tempdir().unwrap();
        let pki = Pki::new("test CA");
        let replica = pki.leaf(REPLICA, Role::Server);
        let controller = pki.leaf(CONTROLLER, Role::Client);
        let server_dir = pki.dir(tmp.path(), "replica", &replica);
        let client_dir = pki.dir(tmp.path(), "controller", &controller);
        Creds {
            tmp,
            pki,
            replica,
            controller,
            server_dir,
            client_dir,
        }
    }

    /// A server sidecar in front of `target` and a client sidecar in front
    /// of it, on these credentials.
    pub async fn pair(
        &self,
        target: &str,
        extra_server: &[&str],
        extra_client: &[&str],
    ) -> (Sidecar, Sidecar) {
        let server = start_server(&self.server_dir, target, extra_server).await;
        let client = start_client(&self.client_dir, &server.addr("server"), extra_client).await;
        (server, client)
    }
}

impl Default for Creds {
    fn default() -> Self {
        Creds::new()
    }
}

/// A plaintext connection into a client sidecar's route `client`.
pub async fn connect_plain(client: &Sidecar) -> TcpStream {
    let s = TcpStream::connect(client.addr("client")).await.unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// A server sidecar + client sidecar pair in front of an echo target.
pub struct Pair {
    pub creds: Creds,
    pub echo: Echo,
    pub server: Sidecar,
    pub client: Sidecar,
}

impl std::ops::Deref for Pair {
    type Target = Creds;
    fn deref(&self) -> &Creds {
        &self.creds
    }
}

impl Pair {
    pub async fn start(extra_server: &[&str], extra_client: &[&str]) -> Pair {
        let creds = Creds::new();
        let echo = echo_target().await;
        let (server, client) = creds
            .pair(&echo.addr.to_string(), extra_server, extra_client)
            .await;
        Pair {
            creds,
            echo,
            server,
            client,
        }
    }

    /// A plaintext connection into the client sidecar.
    pub async fn connect(&self) -> TcpStream {
        connect_plain(&self.client).await
    }
}

// ---- Helpers for the forwarding, refusal, interop and CLI tests. ----

/// A lone `server` sidecar (identity REPLICA, allowing CONTROLLER) in front
/// of an echo target, with a controller identity it accepts.
pub struct ServerSide {
    pub creds: Creds,
    pub echo: Echo,
    pub sidecar: Sidecar,
    /// The TLS listener's bound address.
    pub addr: String,
    /// The controller identity's directory (the same as `client_dir`).
    pub controller_dir: PathBuf,
}

impl std::ops::Deref for ServerSide {
    type Target = Creds;
    fn deref(&self) -> &Creds {
        &self.creds
    }
}

impl ServerSide {
    pub async fn start(extra: &[&str]) -> ServerSide {
        let creds = Creds::new();
        let echo = echo_target().await;
        let sidecar = start_server(&creds.server_dir, &echo.addr.to_string(), extra).await;
        let addr = sidecar.addr("server");
        let controller_dir = creds.client_dir.clone();
        ServerSide {
            creds,
            echo,
            sidecar,
            addr,
            controller_dir,
        }
    }

    /// A TLS connection presenting `ident` (none when `None`), trusting this CA.
    pub async fn connect_as(&self, ident: Option<&Issued>) -> io::Result<ClientTls> {
        tls_connect(
            &self.addr,
            REPLICA,
            client_config(ident, &self.pki.ca.cert_pem),
        )
        .await
    }

    /// A connection as the allowed controller.
    pub async fn connect_good(&self) -> ClientTls {
        self.connect_as(Some(&self.controller))
            .await
            .expect("controller handshake")
    }
}

/// Reads until the peer closes (EOF, reset or TLS alert) and returns what
/// arrived before that; panics when nothing ends within [`DEADLINE`].
pub async fn read_until_closed<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let end = tokio::time::Instant::now() + DEADLINE;
    loop {
        match tokio::time::timeout_at(end, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return got,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => panic!(
                "connection still open after {DEADLINE:?} ({} bytes read)",
                got.len()
            ),
        }
    }
}

/// Polls `cond` every 10 ms until it holds; panics after [`DEADLINE`].
pub async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// True when a text log line has `key=value` (the value possibly quoted).
pub fn has_field(line: &str, key: &str, value: &str) -> bool {
    let pat = format!("{key}=");
    line.split_whitespace()
        .filter_map(|t| t.strip_prefix(&pat))
        .any(|v| v.trim_matches('"') == value)
}

impl Sidecar {
    /// The WARN lines containing every needle.
    pub fn warn_lines(&self, needles: &[&str]) -> Vec<String> {
        self.logs()
            .into_iter()
            .filter(|l| l.contains(" WARN ") && needles.iter().all(|n| l.contains(n)))
            .collect()
    }

    /// The WARN lines whose `reason` field is `reason`.
    pub fn warn_reason(&self, reason: &str) -> Vec<String> {
        self.logs()
            .into_iter()
            .filter(|l| l.contains(" WARN ") && has_field(l, "reason", reason))
            .collect()
    }

    /// Waits for a log line containing `needle` whose `key` field is `value`.
    pub async fn wait_field(&self, needle: &str, key: &str, value: &str) -> String {
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(l) = self
                .logs()
                .into_iter()
                .find(|l| l.contains(needle) && has_field(l, key, value))
            {
                return l;
            }
            assert!(
                Instant::now() < deadline,
                "no {needle:?} log line with {key}={value}:\n{}",
                self.logs().join("\n")
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Like [`run_bin`], but kills the binary if it has not exited within
/// `limit` (a check that was meant to stop it at start-up did not), and
/// returns `None` then.
pub fn run_bin_within(args: &[&str], limit: Duration) -> Option<(i32, String)> {
    let mut child = Command::new(bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run binary");
    let deadline = Instant::now() + limit;
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            let out = child.wait_with_output().expect("collect output");
            let text = String::from_utf8_lossy(&out.stderr).to_string()
                + &String::from_utf8_lossy(&out.stdout);
            return Some((out.status.code().unwrap_or(-1), text));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A client sidecar → server sidecar pair in front of any plaintext target.
pub struct PairTo {
    pub creds: Creds,
    pub server: Sidecar,
    pub client: Sidecar,
}

impl std::ops::Deref for PairTo {
    type Target = Creds;
    fn deref(&self) -> &Creds {
        &self.creds
    }
}

impl PairTo {
    pub async fn start(target: &str, extra_server: &[&str], extra_client: &[&str]) -> PairTo {
        let creds = Creds::new();
        let (server, client) = creds.pair(target, extra_server, extra_client).await;
        PairTo {
            creds,
            server,
            client,
        }
    }

    /// A plaintext connection into the client sidecar.
    pub async fn connect(&self) -> TcpStream {
        connect_plain(&self.client).await
    }
}

/// A `server` sidecar on a free port in front of `target`, admitting the
/// controller identity, with `extra` flags.
pub async fn start_server(tls_dir: &Path, target: &str, extra: &[&str]) -> Sidecar {
    let d = tls_dir.to_str().unwrap();
    let mut args = vec![
        "server",
        "--listen",
        "127.0.0.1:0",
        "--target",
        target,
        "--tls-dir",
        d,
        "--allow-san",
        CONTROLLER,
    ];
    args.extend_from_slice(extra);
    Sidecar::start(&args, 1).await
}

/// A `client` sidecar on a free port originating mTLS to `server_addr`,
/// expecting the replica identity, with `extra` flags.
pub async fn start_client(tls_dir: &Path, server_addr: &str, extra: &[&str]) -> Sidecar {
    let d = tls_dir.to_str().unwrap();
    let mut args = vec![
        "client",
        "--listen",
        "127.0.0.1:0",
        "--target",
        server_addr,
        "--server-name",
        REPLICA,
        "--tls-dir",
        d,
    ];
    args.extend_from_slice(extra);
    Sidecar::start(&args, 1).await
}

// ---- The admin endpoint, logs and sockets, as tests observe them. ----

/// `mtls_sidecar_connections_closed_total`.
pub const CLOSED: &str = "mtls_sidecar_connections_closed_total";

/// One scrape of `/metrics` at `admin` (`host:port` or `unix:/path`),
/// parsed; the page must be Prometheus text.
pub async fn scrape(admin: &str) -> expo::Exposition {
    let a = http::request(admin, "GET", "/metrics").await;
    assert_eq!(a.code, 200, "{}", a.body);
    assert!(
        a.header("content-type")
            .is_some_and(|t| t.starts_with("text/plain")),
        "{:?}",
        a.headers
    );
    expo::Exposition::parse(&a.body).unwrap_or_else(|e| panic!("{e}\n{}", a.body))
}

/// Scrapes `admin` until `done` holds; panics after [`DEADLINE`] naming
/// `what` and showing the last page's samples.
pub async fn scrape_until(
    admin: &str,
    what: &str,
    done: impl Fn(&expo::Exposition) -> bool,
) -> expo::Exposition {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let m = scrape(admin).await;
        if done(&m) {
            return m;
        }
        assert!(
            Instant::now() < deadline,
            "never saw {what}; last scrape:\n{:#?}",
            m.samples
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl Sidecar {
    /// Waits until `mtls_sidecar_connections_closed_total{route, reason}`
    /// reads `n` on this sidecar's admin endpoint (it runs with `--admin`);
    /// returns that page.
    pub async fn wait_closed(&self, route: &str, reason: &str, n: f64) -> expo::Exposition {
        let labels = [("route", route), ("reason", reason)];
        scrape_until(
            &self.admin(),
            &format!("{CLOSED}{{route={route},reason={reason}}} = {n}"),
            |m| m.value(CLOSED, &labels) == Some(n),
        )
        .await
    }
}

/// When a text-format log line was written: its leading RFC 3339 stamp.
pub fn log_time(line: &str) -> std::time::SystemTime {
    let stamp = line
        .split_whitespace()
        .next()
        .unwrap_or_else(|| panic!("empty log line"));
    humantime::parse_rfc3339(stamp).unwrap_or_else(|e| panic!("{stamp:?}: {e} in {line}"))
}

/// A TCP listener on loopback that accepts `accept` connections (handing
/// each to the returned channel) and then stops accepting, with a backlog
/// too short to queue anyone else: once [`Backlogged::fill`] has parked a
/// connection in it, a new connect hangs (the kernel drops the SYN) until
/// the connecting side gives up. An unreachable target that needs no
/// unroutable address.
pub struct Backlogged {
    pub addr: SocketAddr,
    accepted: tokio::sync::mpsc::UnboundedReceiver<std::net::TcpStream>,
    /// Connections parked in the backlog, kept open.
    parked: Vec<std::net::TcpStream>,
    listener: Arc<std::net::TcpListener>,
}

impl Backlogged {
    pub fn new(accept: usize) -> Backlogged {
        use std::os::fd::FromRawFd;
        // std and tokio listen with a long backlog; this one needs 0.
        // SAFETY: plain syscalls on descriptors this block creates and owns.
        let listener = unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
            assert!(fd >= 0, "socket: {}", io::Error::last_os_error());
            let sa = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: 0,
                sin_addr: libc::in_addr {
                    s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be(),
                },
                sin_zero: [0; 8],
            };
            let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            let rc = libc::bind(fd, (&sa as *const libc::sockaddr_in).cast(), len);
            assert_eq!(rc, 0, "bind: {}", io::Error::last_os_error());
            assert_eq!(libc::listen(fd, 0), 0, "{}", io::Error::last_os_error());
            std::net::TcpListener::from_raw_fd(fd)
        };
        let addr = listener.local_addr().unwrap();
        let listener = Arc::new(listener);
        let (tx, accepted) = tokio::sync::mpsc::unbounded_channel();
        let l = listener.clone();
        std::thread::spawn(move || {
            for _ in 0..accept {
                let Ok((s, _)) = l.accept() else { return };
                if tx.send(s).is_err() {
                    return;
                }
            }
        });
        Backlogged {
            addr,
            accepted,
            parked: Vec::new(),
            listener,
        }
    }

    /// The next connection accepted (one of the first `accept`).
    pub async fn accepted(&mut self) -> TcpStream {
        let s = tokio::time::timeout(DEADLINE, self.accepted.recv())
            .await
            .expect("the target accepted a connection")
            .expect("the accept thread ended");
        s.set_nonblocking(true).unwrap();
        TcpStream::from_std(s).unwrap()
    }

    /// Parks connections in the backlog until one more cannot get in: from
    /// then on a connect to `addr` hangs. Call once the `accept` expected
    /// connections were accepted.
    pub fn fill(&mut self) {
        let deadline = Instant::now() + DEADLINE;
        loop {
            // Loopback answers a SYN within the connect call; a second
            // without an answer, even on a busy machine, is the kernel
            // dropping it.
            match std::net::TcpStream::connect_timeout(&self.addr, Duration::from_secs(1)) {
                Ok(s) => self.parked.push(s),
                Err(e)
                    if e.kind() == io::ErrorKind::TimedOut
                        || e.kind() == io::ErrorKind::WouldBlock =>
                {
                    return
                }
                Err(e) => panic!("filling the backlog: {e}"),
            }
            assert!(Instant::now() < deadline, "the backlog never filled");
        }
    }
}

/// `GET path` on an admin endpoint.
pub async fn get(admin: &str, path: &str) -> http::Answer {
    http::request(admin, "GET", path).await
}

/// GETs `path` until it answers `code`; returns that answer.
pub async fn get_until(admin: &str, path: &str, code: u16) -> http::Answer {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let a = get(admin, path).await;
        if a.code == code {
            return a;
        }
        assert!(
            Instant::now() < deadline,
            "{path} never answered {code}; last {}: {}",
            a.code,
            a.body
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs `mtls-sidecar health ARGS`: its exit code and output.
pub async fn health(args: &[&str]) -> (Option<i32>, String) {
    let run = tokio::process::Command::new(bin())
        .arg("health")
        .args(args)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(DEADLINE, run)
        .await
        .unwrap_or_else(|_| panic!("health {args:?} still running after {DEADLINE:?}"))
        .expect("run health");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text)
}

/// The `/status` document of an admin endpoint.
pub async fn status(admin: &str) -> serde_json::Value {
    let a = get(admin, "/status").await;
    assert_eq!(a.code, 200, "{}", a.body);
    assert_eq!(a.header("content-type"), Some("application/json"));
    serde_json::from_str(&a.body).unwrap_or_else(|e| panic!("{e}\n{}", a.body))
}

/// A client config presenting `leaf` with its intermediate, trusting `ca_pem`.
pub fn chain_client(
    leaf: &Issued,
    intermediate_pem: &str,
    ca_pem: &str,
) -> std::sync::Arc<rustls::ClientConfig> {
    chain_client_of(leaf, &[intermediate_pem], ca_pem)
}

/// A client presenting `leaf` and then the CA certificates `cas` (PEM, in
/// issuer order), trusting `ca_pem` for the server.
pub fn chain_client_of(
    leaf: &Issued,
    cas: &[&str],
    ca_pem: &str,
) -> std::sync::Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
        .unwrap();
    let mut chain = vec![leaf.cert_der.clone()];
    chain.extend(
        cas.iter()
            .map(|pem| CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()),
    );
    let cfg = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(
            chain,
            PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap(),
        )
        .unwrap();
    std::sync::Arc::new(cfg)
}

/// Whether a config file line sets the top-level `admin` address.
fn config_sets_admin(line: &str) -> bool {
    line.trim_start()
        .strip_prefix("admin")
        .is_some_and(|rest| rest.trim_start().starts_with('='))
}

/// A target that sends a banner and half-closes at once, then reads the
/// request to EOF: its address, and the request it read.
pub async fn banner_then_listen() -> (String, tokio::task::JoinHandle<Vec<u8>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let task = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        s.write_all(b"banner").await.unwrap();
        s.shutdown().await.unwrap();
        let mut request = Vec::new();
        s.read_to_end(&mut request).await.unwrap();
        request
    });
    (addr, task)
}

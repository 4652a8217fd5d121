//! The identity hand-off against software we did not write: HAProxy 2.6 as
//! the target of `--proxy-protocol v2` (`accept-proxy`) logging the peer it
//! read from the header, `openssl s_client -alpn` against `--alpn`, and the
//! PROXY v2 bytes a target receives parsed field by field by Python's
//! `struct` (tests/common/parse_proxy_v2.py, with the example parser of
//! docs/proxy-protocol.md run on the same bytes), not by the `ppp` crate
//! that encodes them. Cipher and version names are checked against
//! `openssl ciphers -stdname`; unix listeners send `LOCAL`.

use crate::common;
// A server identity unlike the client's: an ECDSA P-384 key certified by
// a P-384 CA (the client's is P-256 under a P-256 CA), so a header naming
// the wrong certificate's algorithms shows.
use super::p384;
use crate::common::handoff as support;

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use mtls_sidecar::pki::{Issued, LeafSpec, Role};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{json, Value};
use support::recording_target;
use tokio::io::AsyncWriteExt;

/// A program we did not write, run as a child: stdout and stderr collected
/// line by line as they arrive, every wait bounded by [`DEADLINE`], killed
/// when dropped.
struct Foreign {
    name: String,
    child: std::process::Child,
    output: Arc<Mutex<Vec<String>>>,
    /// The threads copying stdout and stderr; each ends at its pipe's EOF.
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Foreign {
    fn spawn(mut cmd: Command) -> Foreign {
        let name = cmd.get_program().to_string_lossy().into_owned();
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {name}: {e}"));
        let output = Arc::new(Mutex::new(Vec::new()));
        let out: Box<dyn std::io::Read + Send> = Box::new(child.stdout.take().unwrap());
        let err: Box<dyn std::io::Read + Send> = Box::new(child.stderr.take().unwrap());
        let readers = [out, err]
            .into_iter()
            .map(|pipe| {
                let sink = output.clone();
                std::thread::spawn(move || {
                    for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
                        sink.lock().unwrap().push(line);
                    }
                })
            })
            .collect();
        Foreign {
            name,
            child,
            output,
            readers,
        }
    }

    fn output(&self) -> String {
        self.output.lock().unwrap().join("\n")
    }

    /// Polls `done` every 10 ms until it gives a value; panics naming
    /// `what` with the output so far after [`DEADLINE`].
    async fn until<T>(&mut self, what: &str, mut done: impl FnMut(&mut Self) -> Option<T>) -> T {
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(v) = done(self) {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "{} {what}:\n{}",
                self.name,
                self.output()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits for an output line containing `needle` and returns it.
    async fn wait_line(&mut self, needle: &str) -> String {
        self.until(&format!("never printed {needle:?}"), |me| {
            let lines = me.output.lock().unwrap();
            lines.iter().find(|l| l.contains(needle)).cloned()
        })
        .await
    }

    fn send(&mut self, bytes: &[u8]) {
        let stdin = self.child.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).unwrap();
        stdin.flush().unwrap();
    }

    /// Closes stdin, then waits for the program to exit on its own and
    /// for all it printed to be read (the exit can be seen before its last
    /// lines are through the pipe: it once was, failing an output check).
    async fn wait_exit(&mut self) -> Option<i32> {
        drop(self.child.stdin.take());
        let code = self
            .until("did not exit", |me| {
                me.child.try_wait().unwrap().map(|s| s.code())
            })
            .await;
        self.until("kept its output open", |me| {
            me.readers.iter().all(|r| r.is_finished()).then_some(())
        })
        .await;
        code
    }
}

impl Drop for Foreign {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn file(dir: &Path, name: &str) -> String {
    dir.join(name).to_str().unwrap().to_string()
}

/// HAProxy as a TCP proxy that only takes connections opening with a PROXY
/// header (`accept-proxy`) and logs, per connection, the peer and the
/// destination it read from that header plus two of its TLVs.
const HAPROXY_CFG: &str = "\
global
    log stdout format raw local0
defaults
    mode tcp
    log global
    timeout connect 10s
    timeout client 20s
    timeout server 20s
frontend from_sidecar
    bind fd@3 accept-proxy
    log-format \"peer=%ci:%cp dst=%fi:%fp authority=%[fc_pp_authority] uid=%[fc_pp_unique_id]\"
    default_backend echo
backend echo
    server echo ECHO
";

/// Starts HAProxy (`-db`: in the foreground, its log on stdout) with the
/// config `cfg`, whose one `bind fd@3` is a loopback port the test bound;
/// returns it and that port's address. The test has checked that
/// haproxy is installed (`tools::skip_unless`).
fn haproxy(dir: &Path, cfg: &str) -> (Foreign, String) {
    let haproxy = tools::installed("haproxy").expect("haproxy (apt-get install haproxy)");
    let path = dir.join("haproxy.cfg");
    std::fs::write(&path, cfg).unwrap();
    // The test binds the port (0: any free one) and HAProxy inherits the
    // listening socket as fd 3: no port picked and freed for it to race
    // for, and connections wait in the backlog until it accepts them.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&listener);
    let mut cmd = Command::new(haproxy);
    cmd.arg("-db").arg("-f").arg(&path);
    // SAFETY: dup2 and fcntl are async-signal-safe; the closure touches
    // nothing else between fork and exec. fd 3 must survive exec (dup2
    // clears close-on-exec, unless fd already is 3).
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(fd, 3) < 0 || libc::fcntl(3, libc::F_SETFD, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let hap = Foreign::spawn(cmd);
    drop(listener);
    (hap, addr)
}

/// HAProxy behind a server route: the original peer address and port (the
/// mTLS client's loopback source port), which only the PROXY header carries
/// across the sidecar, come back in HAProxy's own log.
#[tokio::test(flavor = "multi_thread")]
async fn haproxy_accept_proxy_logs_the_original_peer() {
    if tools::skip_unless(&["haproxy"]) {
        return;
    }
    let echo = echo_target().await;
    let tmp = tempfile::tempdir().unwrap();
    let (mut hap, haproxy_addr) = haproxy(
        tmp.path(),
        &HAPROXY_CFG.replace("ECHO", &echo.addr.to_string()),
    );

    let creds = Creds::new();
    let sc = start_server(
        &creds.server_dir,
        &haproxy_addr,
        &["--proxy-protocol", "v2"],
    )
    .await;
    let addr = sc.addr("server");
    let cfg = client_config(Some(&creds.controller), &creds.pki.ca.cert_pem);
    let mut tls = tls_connect(&addr, REPLICA, cfg.clone()).await.unwrap();
    let local = tls.get_ref().0.local_addr().unwrap();
    let reply = tokio::time::timeout(DEADLINE, roundtrip(&mut tls, b"through haproxy"))
        .await
        .unwrap_or_else(|_| panic!("no echo through haproxy:\n{}", hap.output()));
    assert_eq!(reply, b"through haproxy");
    tls.shutdown().await.unwrap();
    let _ = read_until_closed(&mut tls).await;
    let closed = sc
        .wait_field("connection closed", "peer", &local.to_string())
        .await;
    let id = field(&closed, "conn");
    let line = hap.wait_line("peer=").await;
    assert_eq!(
        line,
        format!("peer={local} dst={addr} authority={REPLICA} uid={id}"),
        "haproxy output:\n{}",
        hap.output()
    );
    assert_eq!(echo.accepted(), 1);

    // Negative control: without the header HAProxy's accept-proxy drops
    // the connection, so what passed above passed on the header.
    let plain = start_server(&creds.server_dir, &haproxy_addr, &[]).await;
    let mut tls = tls_connect(&plain.addr("server"), REPLICA, cfg)
        .await
        .unwrap();
    tls.write_all(b"no header").await.unwrap();
    tls.flush().await.unwrap();
    assert_eq!(read_until_closed(&mut tls).await, b"");
    assert_eq!(
        echo.accepted(),
        1,
        "haproxy forwarded a header-less connection"
    );
}

fn s_client(s: &ServerSide, alpn: &str) -> Foreign {
    let d = &s.controller_dir;
    let mut cmd = Command::new("openssl");
    cmd.args([
        "s_client",
        "-connect",
        &s.addr,
        "-servername",
        REPLICA,
        "-verify_return_error",
        "-CAfile",
        &file(d, "ca.crt"),
        "-cert",
        &file(d, "tls.crt"),
        "-key",
        &file(d, "tls.key"),
        "-alpn",
        alpn,
    ]);
    Foreign::spawn(cmd)
}

/// `openssl s_client -alpn`: the route's protocol is negotiated (s_client
/// prints it in its session summary, which `-quiet` and `-brief` leave
/// out) and the connection carries bytes; a protocol not on the list is
/// refused inside the handshake with `no_application_protocol` (alert 120)
/// and counted under reason `protocol`.
#[tokio::test(flavor = "multi_thread")]
async fn openssl_s_client_alpn_negotiated_and_other_refused() {
    if tools::skip_unless(&["openssl"]) {
        return;
    }
    let s = ServerSide::start(&["--alpn", "x-proto", "--admin", "127.0.0.1:0"]).await;
    let mut ok = s_client(&s, "x-proto");
    ok.send(b"hello over x-proto\n");
    ok.wait_line("hello over x-proto").await;
    assert_eq!(
        ok.wait_line("ALPN protocol:").await.trim(),
        "ALPN protocol: x-proto"
    );
    assert_eq!(ok.wait_exit().await, Some(0), "{}", ok.output());
    s.sidecar
        .wait_field("ALPN negotiated", "alpn", "x-proto")
        .await;

    let mut other = s_client(&s, "other");
    other.send(b"hello over other\n");
    let code = other.wait_exit().await;
    let out = other.output();
    assert_ne!(code, Some(0), "{out}");
    assert!(
        out.contains("alert no application protocol") && out.contains("alert number 120"),
        "{out}"
    );
    assert!(!out.contains("ALPN protocol:"), "{out}");
    assert!(!out.contains("hello over other"), "{out}");
    s.sidecar
        .wait_field("handshake refused", "reason", "protocol")
        .await;
    let labels = [("route", "server"), ("reason", "protocol")];
    scrape_until(&s.sidecar.admin(), "one protocol refusal counted", |m| {
        m.value(mtls_sidecar::metrics::HANDSHAKE_FAILURES, &labels) == Some(1.0)
    })
    .await;
    assert_eq!(s.echo.accepted(), 1);
}

/// Runs tests/common/parse_proxy_v2.py on what a target received; it also
/// runs the example parser of docs/proxy-protocol.md on the same bytes.
fn python_parse(bytes: &[u8]) -> Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut child = Command::new("python3")
        .arg(root.join("tests/common/parse_proxy_v2.py"))
        .arg("--docs")
        .arg(root.join("docs/proxy-protocol.md"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run python3");
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the parser refused {bytes:02x?}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// OpenSSL's name and protocol version for each IANA cipher suite name,
/// from `openssl ciphers -stdname`: the names the header must use.
fn openssl_names() -> HashMap<String, (String, String)> {
    let out = Command::new("openssl")
        .args(["ciphers", "-stdname", "ALL"])
        .output()
        .expect("run openssl");
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.len() > 3 && w[1] == "-").then(|| (w[0].into(), (w[2].into(), w[3].into())))
        })
        .collect()
}

/// A client presenting `ident` that can negotiate only `suite` (and so only
/// its TLS version), offering `alpn`.
fn client_with_suite(
    ident: &Issued,
    ca_pem: &str,
    suite: rustls::SupportedCipherSuite,
    alpn: &[&str],
) -> Arc<rustls::ClientConfig> {
    let mut provider = (*provider()).clone();
    provider.cipher_suites = vec![suite];
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[suite.version()])
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(
            vec![ident.cert_der.clone()],
            PrivateKeyDer::from_pem_slice(ident.key_pem.as_bytes()).unwrap(),
        )
        .unwrap();
    cfg.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
    Arc::new(cfg)
}

/// A server route on `listen` admitting `allow`, writing a PROXY v2 header
/// to `target`.
async fn hand_off_route(
    listen: &str,
    target: &str,
    dir: &Path,
    allow: &str,
    extra: &[&str],
) -> Sidecar {
    let d = dir.to_str().unwrap();
    let mut args = vec![
        "server",
        "--listen",
        listen,
        "--target",
        target,
        "--tls-dir",
        d,
        "--allow-san",
        allow,
        "--proxy-protocol",
        "v2",
    ];
    args.extend_from_slice(extra);
    Sidecar::start(&args, 1).await
}

/// Sends `msg` and closes; returns all the target received for it (the
/// header, then `msg`).
async fn deliver<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut tls: tokio_rustls::client::TlsStream<S>,
    msg: &[u8],
    got: &mut tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>,
) -> Vec<u8> {
    tls.write_all(msg).await.unwrap();
    tls.shutdown().await.unwrap();
    let _ = read_until_closed(&mut tls).await;
    tokio::time::timeout(DEADLINE, got.recv())
        .await
        .expect("the target got the connection in time")
        .expect("recording target running")
}

const SPIFFE_PATTERN: &str = "spiffe://td/ns/a/**";
const SPIFFE_ID: &str = "spiffe://td/ns/a/sa/controller";

/// Every field of the header, for every cipher suite an ECDSA certificate
/// can use (TLS 1.3 with ALPN offered, TLS 1.2 without), read by the
/// independent parser: the addresses of this very connection, the TLVs in
/// order with nothing else, the SSL sub-TLVs with OpenSSL's names, the
/// allow-list entry exactly as configured, and the SANs one per line; the
/// documented example parser reads the same.
#[tokio::test(flavor = "multi_thread")]
async fn proxy_v2_bytes_read_field_by_field_by_an_independent_parser() {
    if tools::skip_unless(&["openssl", "python3"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("independent parser CA");
    let dir = pki.dir(tmp.path(), "replica", &pki.leaf(REPLICA, Role::Server));
    let mut spec = LeafSpec::dns(CONTROLLER, Role::Client, 1);
    spec.uris.push(SPIFFE_ID.into());
    let controller = pki.issue(&spec);
    let (target, mut got) = recording_target().await;
    let sc = hand_off_route(
        "127.0.0.1:0",
        &target,
        &dir,
        SPIFFE_PATTERN,
        &["--alpn", "x-proto", "--tls-min-version", "1.2"],
    )
    .await;
    let addr = sc.addr("server");
    let names = openssl_names();
    let suites: Vec<_> = provider()
        .cipher_suites
        .iter()
        .copied()
        // The suites an ECDSA server certificate can serve.
        .filter(|s| !format!("{:?}", s.suite()).contains("_RSA_"))
        .collect();
    assert_eq!(suites.len(), 6, "{suites:?}");
    for suite in suites {
        let tls13 = suite.version().version == rustls::ProtocolVersion::TLSv1_3;
        let alpn: &[&str] = if tls13 { &["x-proto"] } else { &[] };
        let cfg = client_with_suite(&controller, &pki.ca.cert_pem, suite, alpn);
        let tls = tls_connect(&addr, REPLICA, cfg).await.unwrap();
        let local = tls.get_ref().0.local_addr().unwrap();
        let bytes = deliver(tls, b"first bytes", &mut got).await;
        let closed = sc
            .wait_field("connection closed", "peer", &local.to_string())
            .await;
        let id = field(&closed, "conn");
        let iana = format!("{:?}", suite.suite()).replace("TLS13_", "TLS_");
        let (cipher, version) = names
            .get(&iana)
            .unwrap_or_else(|| panic!("openssl does not know {iana}"));
        let p = python_parse(&bytes);
        let what = format!("{iana}: {p:#}");
        assert_eq!(
            (&p["version"], &p["command"], &p["family"], &p["transport"]),
            (&json!(2), &json!("PROXY"), &json!(1), &json!(1)),
            "{what}"
        );
        assert_eq!(p["src"], json!(local.to_string()), "{what}");
        assert_eq!(p["dst"], json!(addr), "{what}");
        assert_eq!(p["payload"], json!("first bytes"), "{what}");
        let types: &[u8] = if tls13 {
            &[0x01, 0x02, 0x05, 0x20, 0xE0, 0xE1]
        } else {
            &[0x02, 0x05, 0x20, 0xE0, 0xE1]
        };
        assert_eq!(p["tlv_types"], json!(types), "{what}");
        if tls13 {
            assert_eq!(p["alpn"], json!("x-proto"), "{what}");
        }
        assert_eq!(p["authority"], json!(REPLICA), "{what}");
        assert_eq!(p["unique_id"], json!(id), "{what}");
        assert_eq!(p["matched"], json!(SPIFFE_PATTERN), "{what}");
        assert_eq!(
            p["sans"],
            json!(format!("{CONTROLLER}\n{SPIFFE_ID}")),
            "{what}"
        );
        assert_eq!(
            p["ssl"],
            json!({
                "client": 7, "verify": 0, "sub_types": [0x21, 0x22, 0x23, 0x24, 0x25],
                "version": version, "cn": CONTROLLER, "cipher": cipher,
                "sig_alg": "ecdsa-with-SHA256", "key_alg": "EC256",
            }),
            "{what}"
        );
        let mut docs = json!({
            "local": false, "peer": ["127.0.0.1", local.port()], "verified": true,
            "sni": REPLICA, "conn": id, "role": SPIFFE_PATTERN,
            "sans": [CONTROLLER, SPIFFE_ID], "version": version, "cn": CONTROLLER,
            "cipher": cipher, "sig_alg": "ecdsa-with-SHA256", "key_alg": "EC256",
        });
        if tls13 {
            docs["alpn"] = json!("x-proto");
        }
        assert_eq!(p["docs"], docs, "the documented parser, {what}");
    }
}

/// A `unix:` listener has no peer address to give: the header is `LOCAL`
/// with no address block (family `AF_UNSPEC`), and still carries the
/// identity TLVs.
#[tokio::test(flavor = "multi_thread")]
async fn unix_listeners_send_local_with_the_identity_tlvs() {
    if tools::skip_unless(&["python3"]) {
        return;
    }
    let creds = Creds::new();
    let sock = creds.tmp.path().join("tls.sock");
    let (target, mut got) = recording_target().await;
    let listen = format!("unix:{}", sock.display());
    let sc = hand_off_route(&listen, &target, &creds.server_dir, CONTROLLER, &[]).await;
    let unix = tokio::net::UnixStream::connect(&sock).await.unwrap();
    let cfg = client_config(Some(&creds.controller), &creds.pki.ca.cert_pem);
    let tls = tokio_rustls::TlsConnector::from(cfg)
        .connect(ServerName::try_from(REPLICA).unwrap(), unix)
        .await
        .unwrap();
    let bytes = deliver(tls, b"over unix", &mut got).await;
    let id = field(&sc.wait_log(&["connection closed"]).await, "conn");
    let p = python_parse(&bytes);
    assert_eq!(
        (&p["command"], &p["family"], &p["transport"]),
        (&json!("LOCAL"), &json!(0), &json!(0)),
        "{p:#}"
    );
    assert!(p.get("src").is_none() && p.get("dst").is_none(), "{p:#}");
    assert_eq!(p["payload"], json!("over unix"), "{p:#}");
    assert_eq!(
        p["tlv_types"],
        json!([0x02, 0x05, 0x20, 0xE0, 0xE1]),
        "{p:#}"
    );
    assert_eq!(p["unique_id"], json!(id), "{p:#}");
    assert_eq!(p["matched"], json!(CONTROLLER), "{p:#}");
    assert_eq!(p["ssl"]["cn"], json!(CONTROLLER), "{p:#}");
    assert_eq!(p["docs"]["local"], json!(true), "{p:#}");
}

/// HAProxy terminating TLS itself (certificate and key in `crt`, clients
/// verified against `ca`) and sending its own PROXY v2 header
/// (`send-proxy-v2` with the SSL options) to `target`.
fn haproxy_tls_cfg(crt: &Path, ca: &Path, target: &str) -> String {
    format!(
        "\
defaults
    mode tcp
    timeout connect 10s
    timeout client 20s
    timeout server 20s
frontend tls
    bind fd@3 ssl crt {} ca-file {} verify required
    default_backend recorder
backend recorder
    server recorder {target} send-proxy-v2 proxy-v2-options ssl,cert-cn,ssl-cipher,cert-sig,cert-key
",
        crt.display(),
        ca.display()
    )
}

/// The `PP2_TYPE_SSL` value is what HAProxy sends for the same handshake:
/// the same client certificate, server certificate and cipher suite (one
/// TLS 1.3, one TLS 1.2), the same flags, verify result and sub-TLV values
/// (order aside). In particular `_SIG_ALG` and `_KEY_ALG` describe the
/// certificate the proxy presented, as the spec says, not the client's.
#[tokio::test(flavor = "multi_thread")]
async fn the_ssl_tlv_is_what_haproxy_sends_for_the_same_handshake() {
    if tools::skip_unless(&["haproxy", "python3"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let clients = Pki::new("client CA");
    let controller = clients.leaf(CONTROLLER, Role::Client);
    let (server, server_ca) = p384::server_identity(REPLICA);
    // The sidecar's bundle holds its own CA (its leaf must chain to it) and
    // the clients' CA.
    let dir = tmp.path().join("replica");
    mtls_sidecar::pki::write_secret_dir(
        &dir,
        &server,
        &format!("{server_ca}{}", clients.ca.cert_pem),
    )
    .unwrap();
    let crt = tmp.path().join("haproxy.pem");
    std::fs::write(&crt, format!("{}{}", server.cert_pem, server.key_pem)).unwrap();
    let client_ca = tmp.path().join("client-ca.crt");
    std::fs::write(&client_ca, &clients.ca.cert_pem).unwrap();
    let (target, mut got) = recording_target().await;
    let cfg = haproxy_tls_cfg(&crt, &client_ca, &target);
    let (hap, haproxy_addr) = haproxy(tmp.path(), &cfg);
    let sc = hand_off_route(
        "127.0.0.1:0",
        &target,
        &dir,
        CONTROLLER,
        &["--tls-min-version", "1.2"],
    )
    .await;
    let sidecar_addr = sc.addr("server");
    let suites = [
        rustls::CipherSuite::TLS13_AES_128_GCM_SHA256,
        rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    ];
    for suite in suites {
        let suite = *provider()
            .cipher_suites
            .iter()
            .find(|s| s.suite() == suite)
            .unwrap();
        let cfg = client_with_suite(&controller, &server_ca, suite, &[]);
        let mut ssl = Vec::new();
        for addr in [&haproxy_addr, &sidecar_addr] {
            let tls = tls_connect(addr, REPLICA, cfg.clone())
                .await
                .unwrap_or_else(|e| {
                    panic!("{addr} (haproxy: {haproxy_addr}): {e}\n{}", hap.output())
                });
            let mut p = python_parse(&deliver(tls, b"ssl", &mut got).await);
            let v = p["ssl"].as_object_mut().unwrap();
            let mut order = v.remove("sub_types").unwrap();
            order.as_array_mut().unwrap().sort_by_key(|t| t.as_u64());
            v.insert("sub_types".into(), order);
            ssl.push(p["ssl"].take());
        }
        assert_eq!(
            ssl[0],
            ssl[1],
            "{:?}: HAProxy's SSL TLV (left) differs from the sidecar's (right)",
            suite.suite()
        );
        assert_eq!(ssl[1]["key_alg"], json!("EC384"), "the server's key");
        assert_eq!(ssl[1]["cn"], json!(CONTROLLER), "the client's CN");
    }
}

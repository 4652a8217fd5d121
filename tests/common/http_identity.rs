//! The HTTP side of the identity-header tests: a Python `http.server`
//! target that answers every request with what it received (its
//! x-forwarded-client-cert headers and trailers, in any spelling a WSGI
//! gateway maps to the same variable), a raw HTTP/1.1 client over TLS that
//! sends exactly the bytes a test writes, and the PKI whose identities the
//! expected header is computed from.
#![allow(dead_code)]

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use mtls_sidecar::pki::{Issued, LeafSpec, Role};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::*;

/// The recording target: one JSON document per request.
const TARGET: &str = r#"
import json, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
XF = "x-forwarded-client-cert"
seen = [0]
lock = threading.Lock()
def norm(n): return n.lower().replace("_", "-")
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def body(self):
        trailers = []
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            n = 0
            while True:
                size = int(self.rfile.readline(65537).split(b";")[0].strip(), 16)
                if size == 0: break
                n += len(self.rfile.read(size)); self.rfile.readline(3)
            while True:
                line = self.rfile.readline(65537)
                if line in (b"\r\n", b"\n", b""): break
                k, _, v = line.decode("latin-1").partition(":")
                trailers.append([k.strip(), v.strip()])
            return n, trailers
        n = int(self.headers.get("Content-Length") or 0)
        return len(self.rfile.read(n)), trailers
    def any(self):
        with lock:
            seen[0] += 1
            count = seen[0]
        n, trailers = self.body()
        out = json.dumps({
            "path": self.path, "seen": count, "body": n, "port": self.client_address[1],
            "xfcc": [v for k, v in self.headers.items() if norm(k) == XF],
            "trailer_xfcc": [v for k, v in trailers if norm(k) == XF],
            "trailers": [k.lower() for k, v in trailers],
            "names": [k.lower() for k in self.headers.keys()],
        }).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        if self.path == "/close":
            self.send_header("Connection", "close")
        if self.path == "/hop":
            self.send_header("Connection", "X-Hop")
            self.send_header("X-Hop", "secret")
            self.send_header("Keep-Alive", "timeout=5")
            self.send_header("X-End", "kept")
        self.end_headers()
        self.wfile.write(out)
    do_GET = do_POST = do_PUT = any
s = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"#;

/// The Python target, killed when dropped.
pub struct PyTarget {
    child: Child,
    pub addr: String,
}

impl PyTarget {
    pub fn start() -> PyTarget {
        let mut child = Command::new("python3")
            .args(["-c", TARGET])
            .stdout(Stdio::piped())
            .stdin(Stdio::null())
            .spawn()
            .expect("start python3");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("the target's port");
        let port: u16 = line.trim().parse().expect("a port");
        PyTarget {
            child,
            addr: format!("127.0.0.1:{port}"),
        }
    }
}

impl Drop for PyTarget {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The bytes the server route has read from its clients
/// (`mtls_sidecar_bytes_total{route="server",direction="to_target"}`).
pub fn server_read(m: &expo::Exposition) -> f64 {
    m.value(
        "mtls_sidecar_bytes_total",
        &[("route", "server"), ("direction", "to_target")],
    )
    .unwrap_or(0.0)
}

/// The forged x-forwarded-client-cert headers a client sends, one request
/// each (name, extra header lines): every spelling the sidecar must drop.
pub const FORGED: &[(&str, &str)] = &[
    ("plain", ""),
    ("exact", "x-forwarded-client-cert: By=evil;Hash=00\r\n"),
    (
        "case",
        "X-FORWARDED-CLIENT-CERT: Hash=00\r\nX-Forwarded-Client-Cert: Hash=01\r\n",
    ),
    (
        "underscore",
        "X_Forwarded_Client_Cert: Hash=00\r\nx_forwarded-client_cert: Hash=01\r\n",
    ),
    (
        "named in Connection",
        "Connection: x-forwarded-client-cert\r\n",
    ),
];

pub const SERVER_URI: &str = "spiffe://test.example/ns/a/sa/replica";
pub const CLIENT_URI: &str = "spiffe://test.example/ns/b/sa/controller";

/// A CA, a server identity with a URI SAN (for `By=`) and a client one
/// whose CN holds a comma (escaped in `Subject=`).
pub struct Ids {
    pub _tmp: tempfile::TempDir,
    pub pki: Pki,
    pub client: Issued,
    pub server_dir: std::path::PathBuf,
}

impl Ids {
    pub fn new() -> Ids {
        let tmp = tempfile::tempdir().unwrap();
        let pki = Pki::new("http CA");
        let mut s = LeafSpec::dns(REPLICA, Role::Server, 30);
        s.uris = vec![SERVER_URI.into()];
        let server = pki.issue(&s);
        let mut c = LeafSpec::dns(CONTROLLER, Role::Client, 30);
        c.common_name = "controller, ops".into();
        c.uris = vec![CLIENT_URI.into()];
        let client = pki.issue(&c);
        let server_dir = pki.dir(tmp.path(), "replica", &server);
        Ids {
            _tmp: tmp,
            pki,
            client,
            server_dir,
        }
    }

    /// The header the target must see for `client`, computed here.
    pub fn expected(&self) -> String {
        let hash: String =
            aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &self.client.cert_der)
                .as_ref()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
        format!(
            "By={SERVER_URI};Hash={hash};Subject=\"CN=controller\\, ops\";URI={CLIENT_URI};DNS={CONTROLLER}"
        )
    }

    /// A client TLS config presenting `client`, offering `alpn`.
    pub fn tls(&self, alpn: &[&str]) -> Arc<rustls::ClientConfig> {
        let mut cfg = (*client_config(Some(&self.client), &self.pki.ca.cert_pem)).clone();
        cfg.alpn_protocols = alpn.iter().map(|a| a.as_bytes().to_vec()).collect();
        Arc::new(cfg)
    }
}

/// One response as the raw client read it.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A raw HTTP/1.1 client over TLS: writes what it is given, reads
/// responses (skipping 1xx) in order.
pub struct Raw {
    pub tls: ClientTls,
    buf: Vec<u8>,
    /// Every byte read from the sidecar so far.
    pub received: usize,
}

impl Raw {
    pub async fn connect(addr: &str, cfg: Arc<rustls::ClientConfig>) -> Raw {
        Raw {
            tls: tls_connect(addr, REPLICA, cfg).await.expect("handshake"),
            buf: Vec::new(),
            received: 0,
        }
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.tls.write_all(bytes).await.unwrap();
        self.tls.flush().await.unwrap();
    }

    /// Reads more; false at EOF.
    async fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 16384];
        match tokio::time::timeout(DEADLINE, self.tls.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => false,
            Ok(Ok(n)) => {
                self.buf.extend_from_slice(&chunk[..n]);
                self.received += n;
                true
            }
            Err(_) => panic!("no response within {DEADLINE:?}"),
        }
    }

    async fn take(&mut self, n: usize) -> Vec<u8> {
        while self.buf.len() < n {
            assert!(self.fill().await, "closed mid-body");
        }
        self.buf.drain(..n).collect()
    }

    /// The next final response.
    pub async fn response(&mut self) -> Resp {
        loop {
            let r = self.head().await;
            if (100..200).contains(&r.status) {
                continue;
            }
            return r;
        }
    }

    /// The next response, 1xx included (its body read when it has a
    /// length).
    pub async fn head(&mut self) -> Resp {
        {
            let end = loop {
                if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break i;
                }
                assert!(
                    self.fill().await,
                    "closed before a response: {:?}",
                    String::from_utf8_lossy(&self.buf)
                );
            };
            let head = String::from_utf8(self.buf.drain(..end + 4).collect()).unwrap();
            let mut lines = head.split("\r\n");
            let status: u16 = lines
                .next()
                .unwrap()
                .split(' ')
                .nth(1)
                .unwrap()
                .parse()
                .unwrap();
            let headers: Vec<(String, String)> = lines
                .filter(|l| !l.is_empty())
                .map(|l| {
                    let (k, v) = l.split_once(':').unwrap();
                    (k.trim().to_string(), v.trim().to_string())
                })
                .collect();
            let mut r = Resp {
                status,
                headers,
                body: Vec::new(),
            };
            if let Some(n) = r.header("content-length") {
                r.body = self.take(n.parse().unwrap()).await;
            }
            r
        }
    }

    /// Exactly `n` more bytes.
    pub async fn bytes(&mut self, n: usize) -> Vec<u8> {
        self.take(n).await
    }

    /// True once the sidecar closed the connection (EOF or error).
    pub async fn closed(&mut self) -> bool {
        self.buf.clear();
        !self.fill().await
    }
}

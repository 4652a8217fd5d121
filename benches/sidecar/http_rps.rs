//! `BENCH_ONLY=http`: HTTP/1.1 keep-alive requests/s through the sidecar
//! pair with `--http-identity xfcc` on the server, against the same pair
//! with a plain (byte-copying) server route, against the same client
//! sidecar in front of nginx `http` doing the server side's job
//! (`proxy_set_header X-Forwarded-Client-Cert` built from `$ssl_client_*`),
//! and against the HTTP target directly: what the identity header costs,
//! and what the same job costs nginx. Never part of a default run.
//!
//! nginx 1.22 has no SHA-256 fingerprint and no SAN variable: its header
//! carries `$ssl_client_fingerprint` (SHA-1) and `$ssl_client_s_dn`, and
//! it checks the client's subject CN with a `map` (as in `peers.sh`), not
//! a SAN. It pools upstream connections (`keepalive`), where the sidecar
//! keeps one target connection per client connection. Skipped, saying so,
//! when `nginx` is not on `PATH`.
//!
//! The target is a tiny hyper HTTP/1.1 server in this process answering
//! every request with `200 ok`; the generator keeps `CONNS` connections,
//! each sending one `GET` and reading its response, for the scale's
//! round-trip time.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mtls_sidecar::pki::{write_secret_dir, DevCa, LeafSpec, Role};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::options::{Opts, Scale};
use crate::scenarios::{aconnect, generator_runtime};
use crate::sidecar_process::{sidecar_bin, Sidecar, CONTROLLER, REPLICA};

/// Concurrent keep-alive connections.
const CONNS: usize = 16;
const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n";

/// True when the run names `http`.
pub fn requested(opts: &Opts) -> bool {
    opts.only
        .as_ref()
        .is_some_and(|l| l.iter().any(|s| s == "http"))
}

/// The HTTP/1.1 target, on its own runtime thread.
fn http_target() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind target");
    l.set_nonblocking(true).unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        generator_runtime().block_on(async move {
            let l = tokio::net::TcpListener::from_std(l).unwrap();
            while let Ok((s, _)) = l.accept().await {
                let _ = s.set_nodelay(true);
                let svc = hyper::service::service_fn(|_req| async {
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(
                        http_body_util::Full::new(hyper::body::Bytes::from_static(b"ok")),
                    ))
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(s), svc),
                );
            }
        });
    });
    addr
}

/// Keep-alive requests/s through `addr` for `time`.
fn requests_per_sec(addr: SocketAddr, time: Duration) -> f64 {
    generator_runtime().block_on(async move {
        let count = Arc::new(AtomicU64::new(0));
        let end = Instant::now() + time;
        let start = Instant::now();
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..CONNS {
            let count = count.clone();
            set.spawn(async move {
                let mut s = aconnect(addr).await.expect("connect");
                let mut buf = vec![0u8; 4096];
                while Instant::now() < end {
                    s.write_all(REQUEST).await.unwrap();
                    let mut got = Vec::new();
                    // The response ends with its 2-byte body "ok".
                    while !(got.ends_with(b"\r\n\r\nok")) {
                        let n = s.read(&mut buf).await.unwrap();
                        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
                        got.extend_from_slice(&buf[..n]);
                    }
                    count.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        while set.join_next().await.is_some() {}
        count.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
    })
}

/// Measures and prints direct, plain-route and `--http-identity`
/// requests/s.
pub fn run(_opts: &Opts, scale: &Scale) {
    let bin = sidecar_bin();
    let tmp = tempfile::tempdir().expect("tempdir");
    let ca = DevCa::new("bench CA", 30).expect("mint CA");
    let server = ca.issue(&LeafSpec::dns(REPLICA, Role::Server, 30)).unwrap();
    let client = ca
        .issue(&LeafSpec::dns(CONTROLLER, Role::Client, 30))
        .unwrap();
    let (sd, cd) = (tmp.path().join("server"), tmp.path().join("client"));
    write_secret_dir(&sd, &server, &ca.cert_pem).unwrap();
    write_secret_dir(&cd, &client, &ca.cert_pem).unwrap();
    let target = http_target().to_string();
    let pair = |extra: &[&str]| {
        let mut args = vec!["server", "--listen", "127.0.0.1:0", "--target", &target];
        args.extend(["--tls-dir", sd.to_str().unwrap(), "--allow-san", CONTROLLER]);
        args.extend_from_slice(extra);
        let s = Sidecar::start(&bin, &args);
        let c = client_to(&bin, &s.listen.to_string(), &cd);
        (s, c)
    };
    let direct = requests_per_sec(target.parse().unwrap(), scale.rt_time);
    let (s, c) = pair(&[]);
    let plain = requests_per_sec(c.listen, scale.rt_time);
    drop((c, s));
    let (s, c) = pair(&["--http-identity", "xfcc"]);
    let xfcc = requests_per_sec(c.listen, scale.rt_time);
    drop((c, s));
    let nginx = Nginx::start(tmp.path(), &sd, &target).map(|n| {
        let c = client_to(&bin, &n.listen.to_string(), &cd);
        let rps = requests_per_sec(c.listen, scale.rt_time);
        drop((c, n));
        rps
    });
    let nginx = match nginx {
        Some(rps) => format!(
            ", nginx http + X-Forwarded-Client-Cert {rps:.0} (--http-identity {:.2}x nginx)",
            xfcc / rps
        ),
        None => ", nginx: not on PATH, skipped".to_string(),
    };
    eprintln!(
        "# http keep-alive requests/s, {CONNS} connections: direct {direct:.0}, \
         plain route {plain:.0}, --http-identity {xfcc:.0} ({:+.1}% against the plain route){nginx}",
        (xfcc / plain - 1.0) * 100.0
    );
}

/// A client sidecar in front of `server` (a TLS listener holding the
/// replica identity).
fn client_to(bin: &Path, server: &str, dir: &Path) -> Sidecar {
    Sidecar::start(
        bin,
        &[
            "client",
            "--listen",
            "127.0.0.1:0",
            "--target",
            server,
            "--server-name",
            REPLICA,
            "--tls-dir",
            dir.to_str().unwrap(),
        ],
    )
}

/// The server side as nginx `http` does it (`@…@` filled in).
const NGINX_CONF: &str = r#"worker_processes auto;
worker_rlimit_nofile 20000;
pid @DIR@/nginx.pid;
error_log @DIR@/error.log warn;
events { worker_connections 20000; }
http {
    access_log off;
    client_body_temp_path @DIR@/body;
    proxy_temp_path @DIR@/proxy;
    fastcgi_temp_path @DIR@/fastcgi;
    uwsgi_temp_path @DIR@/uwsgi;
    scgi_temp_path @DIR@/scgi;
    upstream target { server @TARGET@; keepalive 64; }
    # No SAN variable: the verified subject's CN, as peers.sh's stream map.
    map $ssl_client_s_dn $allowed { "~(^|,)CN=@CN@(,|$)" 1; default 0; }
    server {
        listen @LISTEN@ ssl;
        ssl_certificate @CREDS@/tls.crt;
        ssl_certificate_key @CREDS@/tls.key;
        ssl_client_certificate @CREDS@/ca.crt;
        ssl_verify_client on;
        ssl_verify_depth 2;
        ssl_protocols TLSv1.3;
        ssl_session_tickets off;
        ssl_session_cache off;
        keepalive_requests 1000000;
        location / {
            if ($allowed = 0) { return 403; }
            proxy_pass http://target;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            # No SHA-256 fingerprint variable in nginx 1.22: SHA-1.
            proxy_set_header X-Forwarded-Client-Cert "Hash=$ssl_client_fingerprint;Subject=\"$ssl_client_s_dn\"";
        }
    }
}
"#;

/// nginx `http` as the server side: TLS 1.3 with a required client
/// certificate from the CA, the controller's CN only, and the identity in
/// `X-Forwarded-Client-Cert` to the target. Killed on drop.
struct Nginx {
    child: Child,
    listen: SocketAddr,
}

impl Nginx {
    /// `None` when nginx is not installed.
    fn start(work: &Path, creds: &Path, target: &str) -> Option<Nginx> {
        let found = Command::new("nginx")
            .arg("-v")
            .stderr(Stdio::null())
            .status();
        if !found.is_ok_and(|s| s.success()) {
            return None;
        }
        let d = work.join("nginx");
        std::fs::create_dir_all(&d).expect("nginx dir");
        // A free port for nginx to bind (it cannot report one it chose).
        let listen = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port");
        let conf = NGINX_CONF
            .replace("@DIR@", &d.display().to_string())
            .replace("@TARGET@", target)
            .replace("@LISTEN@", &listen.to_string())
            .replace("@CN@", &CONTROLLER.replace('.', "\\."))
            .replace("@CREDS@", &creds.display().to_string());
        let file = d.join("nginx.conf");
        std::fs::write(&file, conf).expect("write nginx.conf");
        let child = Command::new("nginx")
            .args(["-e", "stderr", "-c"])
            .arg(&file)
            .args(["-g", "daemon off;"])
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start nginx");
        let n = Nginx { child, listen };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(listen).is_err() {
            assert!(
                Instant::now() < deadline,
                "nginx never listened on {listen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(n)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM: nginx's fast shutdown, its workers with it; then reap.
        // SAFETY: signalling our own child by pid.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let _ = self.child.wait();
    }
}

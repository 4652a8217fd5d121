//! `BENCH_ONLY=http`: HTTP/1.1 keep-alive requests/s through the sidecar
//! pair with `--http-identity xfcc` on the server, against the same pair
//! with a plain (byte-copying) server route and against the HTTP target
//! directly: what the identity header costs. Never part of a default run.
//!
//! The target is a tiny hyper HTTP/1.1 server in this process answering
//! every request with `200 ok`; the generator keeps `CONNS` connections,
//! each sending one `GET` and reading its response, for the scale's
//! round-trip time.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mtls_sidecar::ops::pki::{write_secret_dir, DevCa, LeafSpec, Role};
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
        let server_addr = s.listen.to_string();
        let c = Sidecar::start(
            &bin,
            &[
                "client",
                "--listen",
                "127.0.0.1:0",
                "--target",
                &server_addr,
                "--server-name",
                REPLICA,
                "--tls-dir",
                cd.to_str().unwrap(),
            ],
        );
        (s, c)
    };
    let direct = requests_per_sec(target.parse().unwrap(), scale.rt_time);
    let (s, c) = pair(&[]);
    let plain = requests_per_sec(c.listen, scale.rt_time);
    drop((c, s));
    let (s, c) = pair(&["--http-identity", "xfcc"]);
    let xfcc = requests_per_sec(c.listen, scale.rt_time);
    drop((c, s));
    eprintln!(
        "# http keep-alive requests/s, {CONNS} connections: direct {direct:.0}, \
         plain route {plain:.0}, --http-identity {xfcc:.0} ({:+.1}% against the plain route)",
        (xfcc / plain - 1.0) * 100.0
    );
}

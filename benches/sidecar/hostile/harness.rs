//! What every hostile scenario needs around its own load: a warmed-up
//! sidecar pair with fresh credentials, the server's resident set and
//! descriptors, its admin endpoint, many peers connecting at once and
//! background loops; so that each scenario file holds only its load and
//! its figures, and all of them start and watch the sidecars the same way.

use std::future::Future;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mtls_sidecar::pki::{write_secret_dir, DevCa, LeafSpec, Role};

use crate::memory::vm_rss;
use crate::scenarios::{generator_runtime, one_roundtrip, wait_until_serving};
use crate::sidecar_process::{sidecar_bin, Sidecar, Spawn, CONTROLLER, REPLICA};
use crate::target::Target;

/// Within this of the pre-flood RSS counts as "given back" (the hostile-load
/// target, benches/README.md).
pub const RETURN_MARGIN_KIB: u64 = 4 * 1024;

/// A CA, a server directory and a client directory.
struct Creds {
    _tmp: tempfile::TempDir,
    server_dir: String,
    client_dir: String,
}

fn creds() -> Creds {
    let tmp = tempfile::tempdir().expect("tempdir");
    let ca = DevCa::new("hostile bench CA", 30).expect("mint CA");
    let server = ca
        .issue(&LeafSpec::dns(REPLICA, Role::Server, 30))
        .expect("server leaf");
    let client = ca
        .issue(&LeafSpec::dns(CONTROLLER, Role::Client, 30))
        .expect("client leaf");
    let sd = tmp.path().join("server");
    let cd = tmp.path().join("client");
    write_secret_dir(&sd, &server, &ca.cert_pem).expect("server dir");
    write_secret_dir(&cd, &client, &ca.cert_pem).expect("client dir");
    Creds {
        server_dir: sd.to_string_lossy().into_owned(),
        client_dir: cd.to_string_lossy().into_owned(),
        _tmp: tmp,
    }
}

/// A client sidecar → server sidecar pair in front of a fresh target in
/// this process, warmed up. Fields drop in order: the client, the server,
/// then their credentials.
pub struct Pair {
    pub client: Sidecar,
    pub server: Sidecar,
    _creds: Creds,
}

impl Pair {
    /// Starts the pair, `server_args` after the server's own, both sidecars
    /// with `spawn`.
    pub fn start(server_args: &[&str], spawn: &Spawn) -> Pair {
        let creds = creds();
        let target = Target::start("127.0.0.1:0");
        let server = start_server(&creds, target.addr, server_args, spawn);
        let client = start_client(&creds, server.listen, spawn);
        warm_up(client.listen);
        Pair {
            client,
            server,
            _creds: creds,
        }
    }

    /// Where the generator connects: the client sidecar.
    pub fn via(&self) -> SocketAddr {
        self.client.listen
    }
}

/// How most scenarios start their sidecars: default limits, WARN lines
/// not echoed (a flood makes thousands), `env` added.
pub fn quiet(env: &[(String, String)]) -> Spawn {
    Spawn {
        soft_nofile: None,
        quiet: true,
        env: env.to_vec(),
    }
}

fn start_server(c: &Creds, target: SocketAddr, extra: &[&str], spawn: &Spawn) -> Sidecar {
    let target = target.to_string();
    let mut args = vec![
        "server",
        "--listen",
        "127.0.0.1:0",
        "--target",
        &target,
        "--tls-dir",
        &c.server_dir,
        "--allow-san",
        CONTROLLER,
    ];
    args.extend_from_slice(extra);
    Sidecar::start_with(&sidecar_bin(), &args, spawn)
}

fn start_client(c: &Creds, server: SocketAddr, spawn: &Spawn) -> Sidecar {
    let server = server.to_string();
    let args = [
        "client",
        "--listen",
        "127.0.0.1:0",
        "--target",
        &server,
        "--server-name",
        REPLICA,
        "--tls-dir",
        &c.client_dir,
    ];
    Sidecar::start_with(&sidecar_bin(), &args, spawn)
}

/// Warm-up: a few connections through the pair, closed, then a moment for
/// the sidecars to tear them down.
fn warm_up(via: SocketAddr) {
    wait_until_serving(via);
    for _ in 0..5 {
        one_roundtrip(via).expect("warm-up round trip");
    }
    std::thread::sleep(Duration::from_millis(300));
}

/// Open descriptors of `pid`.
pub fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Polls `cond` every 50 ms for at most `limit`; the time it took.
pub fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> Option<Duration> {
    let t = Instant::now();
    loop {
        if cond() {
            return Some(t.elapsed());
        }
        if t.elapsed() >= limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Seconds until `pid`'s RSS is back within [`RETURN_MARGIN_KIB`] of
/// `before_kib`, or None when not within `limit`.
fn rss_back(pid: u32, before_kib: u64, limit: Duration) -> Option<f64> {
    wait_for(limit, || vm_rss(pid) <= before_kib + RETURN_MARGIN_KIB).map(|d| d.as_secs_f64())
}

/// After a load ends: seconds until `pid`'s RSS is back within
/// [`RETURN_MARGIN_KIB`] of `before_kib` (None: not within 15 s), then,
/// after 6 s more for whatever further trimming happens, its RSS.
pub fn given_back(pid: u32, before_kib: u64) -> (Option<f64>, u64) {
    let back = rss_back(pid, before_kib, Duration::from_secs(15));
    std::thread::sleep(Duration::from_secs(6));
    (back, vm_rss(pid))
}

/// Runs `f` every `period` (after each run) on a thread until `stop`.
pub fn every(
    stop: &Arc<AtomicBool>,
    period: Duration,
    mut f: impl FnMut() + Send + 'static,
) -> JoinHandle<()> {
    let stop = stop.clone();
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            f();
            std::thread::sleep(period);
        }
    })
}

/// `n` peers, `peer(i)` each (128 connecting at once); those that connected,
/// still open.
pub fn open_many<P, F>(n: usize, peer: P) -> Vec<tokio::net::TcpStream>
where
    P: Fn(usize) -> F,
    F: Future<Output = Option<tokio::net::TcpStream>> + Send + 'static,
{
    generator_runtime().block_on(async move {
        let mut held = Vec::with_capacity(n);
        let mut set = tokio::task::JoinSet::new();
        for i in 0..n {
            set.spawn(peer(i));
            if set.len() >= 128 {
                if let Some(Ok(Some(s))) = set.join_next().await {
                    held.push(s);
                }
            }
        }
        while let Some(r) = set.join_next().await {
            if let Ok(Some(s)) = r {
                held.push(s);
            }
        }
        held
    })
}

/// A minimal HTTP GET to the admin endpoint; the body.
pub fn admin_get(admin: SocketAddr, path: &str) -> String {
    let Ok(mut s) = TcpStream::connect(admin) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let _ = write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n"
    );
    let mut raw = String::new();
    let _ = s.read_to_string(&mut raw);
    raw.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default()
}

/// A field of the first route in `/status`.
pub fn route_status(admin: SocketAddr, field: &str) -> Option<u64> {
    let body = admin_get(admin, "/status");
    let doc: serde_json::Value = serde_json::from_str(&body).ok()?;
    doc["routes"][0][field].as_u64()
}

/// The server route's pending handshakes.
pub fn pending(admin: SocketAddr) -> Option<u64> {
    route_status(admin, "pending_handshakes")
}

/// Waits (at most 30 s) until no handshake is pending.
pub fn drained(admin: SocketAddr) {
    wait_for(Duration::from_secs(30), || pending(admin) == Some(0));
}

/// KiB as MB, for the tables.
pub fn mb(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// A "back within 4 MB" figure for the tables.
pub fn secs(s: Option<f64>) -> String {
    s.map_or("never (15 s)".to_string(), |s| format!("{s:.1} s"))
}

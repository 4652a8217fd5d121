//! Hostile load at full size (issue 10, PRODUCT.md "Limits under hostile
//! load"): the figures behind the limits' claims, which `tests/hostile.rs`
//! checks at CI size.
//!
//! * `scale`: both sidecars started with a soft fd limit of 1024 (hard
//!   20,000) carry 4,000 concurrent connections, each with a round trip;
//!   RSS per idle connection; descriptors back to the baseline after.
//! * `flood`: 2,000 silent, garbage, or mixed sockets on the server route
//!   (one variant with `--max-connections 4`) while an established
//!   connection ping-pongs and a prober opens a new authenticated
//!   connection every 100 ms through the pair; both measured against a
//!   no-flood phase of the same run. Pending handshakes sampled from
//!   `/status`, overload refusals from `/metrics`, the server's RSS before,
//!   at the flood's peak, and after.
//! * `churn`: 3 rounds of 100,000 garbage handshakes, 16 at a time, on a
//!   server without `--admin`: RSS before and after each round (each
//!   handshake records a histogram sample, which only the exporter's
//!   upkeep frees).
//! * `preauth`: 1,000 peers each send most of a 64 KB ClientHello; then
//!   1,000 send just under the pre-authentication cap and stall (the most a
//!   peer can pin); RSS during and after, and how long it takes to come
//!   back.
//!
//! Only run when named: `BENCH_ONLY=hostile` (all three) or any of
//! `scale`, `flood`, `churn`, `preauth`. `BENCH_TRIM=off` starts the sidecars with
//! allocator trimming off (`MTLS_SIDECAR_MALLOC_TRIM=off`), to see what
//! glibc does alone.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mtls_sidecar::pki::{write_secret_dir, DevCa, LeafSpec, Role};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;

use crate::measure::percentile;
use crate::memory::vm_rss;
use crate::options::{Opts, MSG};
use crate::scenarios::{connect, generator_runtime, one_roundtrip, open_idle, wait_until_serving};
use crate::sidecar_process::{sidecar_bin, Sidecar, Spawn, CONTROLLER, REPLICA};
use crate::target::Target;

/// The scenario names this module answers to.
pub const NAMES: &[&str] = &["hostile", "scale", "flood", "churn", "preauth"];
/// The soft descriptor limit of the scale scenario.
const SOFT_NOFILE: u64 = 1024;
/// Bytes of a ClientHello a "just under the cap" peer sends (the cap is
/// `mtls_sidecar::preauth::PREAUTH_BYTES`, counted with record headers).
const UNDER_CAP: usize = mtls_sidecar::preauth::PREAUTH_BYTES - 1024;
/// Within this of the pre-flood RSS counts as "given back" (PRODUCT.md).
const RETURN_MARGIN_KIB: u64 = 4 * 1024;

/// Sizes of a run.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    pub scale_conns: usize,
    pub flood_sockets: usize,
    pub preauth_peers: usize,
    pub churn_handshakes: usize,
    /// Length of the no-flood phase and of the held flood.
    pub phase: Duration,
    /// (no flood, flood) rounds per flood variant.
    pub rounds: usize,
}

impl Sizes {
    pub fn new(quick: bool) -> Sizes {
        let env = |k: &str, d: usize| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(d)
        };
        if quick {
            Sizes {
                scale_conns: env("BENCH_SCALE_CONNS", 600),
                flood_sockets: env("BENCH_FLOOD_SOCKETS", 500),
                preauth_peers: env("BENCH_PREAUTH_PEERS", 300),
                churn_handshakes: env("BENCH_CHURN", 10_000),
                phase: Duration::from_secs(1),
                rounds: 1,
            }
        } else {
            Sizes {
                scale_conns: env("BENCH_SCALE_CONNS", 4_000),
                flood_sockets: env("BENCH_FLOOD_SOCKETS", 2_000),
                preauth_peers: env("BENCH_PREAUTH_PEERS", 1_000),
                churn_handshakes: env("BENCH_CHURN", 100_000),
                phase: Duration::from_secs(3),
                rounds: 5,
            }
        }
    }
}

/// True when the run names any hostile scenario (they are never part of a
/// default run: together they take a few minutes).
pub fn requested(opts: &Opts) -> bool {
    opts.only
        .as_ref()
        .is_some_and(|l| l.iter().any(|s| NAMES.contains(&s.as_str())))
}

fn named(opts: &Opts, name: &str) -> bool {
    opts.only
        .as_ref()
        .is_some_and(|l| l.iter().any(|s| s == name || s == "hostile"))
}

/// Everything a hostile run measured; one JSON line in an `--out` file.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct HostileRow {
    pub hostile: bool,
    pub quick: bool,
    pub trim: bool,
    pub scale: Option<ScaleFigures>,
    pub flood: Vec<FloodFigures>,
    pub churn: Option<ChurnFigures>,
    pub preauth: Option<PreauthFigures>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct ScaleFigures {
    pub connections: usize,
    /// The soft limit each sidecar found at start (client, server).
    pub soft_nofile_at_start: [String; 2],
    pub open_secs: f64,
    pub fds_before: [usize; 2],
    pub fds_open: [usize; 2],
    pub fds_after: [usize; 2],
    pub fds_back_secs: f64,
    pub rss_before_kib: [u64; 2],
    pub rss_open_kib: [u64; 2],
    pub rss_after_kib: [u64; 2],
    /// (RSS open − RSS before) / connections, both sidecars.
    pub kib_per_conn: f64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct FloodFigures {
    pub variant: String,
    pub sockets: usize,
    pub server_args: Vec<String>,
    pub open_secs: f64,
    pub max_pending: u64,
    pub max_handshakes: u64,
    pub overload: f64,
    pub not_tls: f64,
    pub protocol: f64,
    /// New authenticated connections through the pair (connect, handshake,
    /// one round trip), ms: no-flood median and max, flood median and max.
    pub newconn_base_ms: [f64; 2],
    pub newconn_flood_ms: [f64; 2],
    pub newconn_flood_failed: usize,
    /// The established connection's round trips, µs: no-flood p50/p99,
    /// flood p50/p99, and how many in each phase.
    pub rtt_base_us: [f64; 2],
    pub rtt_flood_us: [f64; 2],
    pub rtt_samples: [usize; 2],
    /// The flood p99 / no-flood p99 of each round alone.
    pub rtt_p99_ratio_rounds: Vec<f64>,
    pub rounds: usize,
    pub rss_before_kib: u64,
    pub rss_peak_kib: u64,
    pub rss_after_kib: u64,
    /// Seconds after the flood ended until RSS was within 4 MB of before
    /// (None: not within the wait).
    pub rss_back_secs: Option<f64>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct ChurnFigures {
    /// Refused handshakes per round (three rounds).
    pub handshakes: usize,
    pub secs: Vec<f64>,
    /// Server RSS before, then 6 s (an upkeep period) after each round.
    pub rss_kib: Vec<u64>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct PreauthFigures {
    pub peers: usize,
    pub rss_before_kib: u64,
    /// 64 KB partial hellos: RSS peak while they were sent, peers the
    /// sidecar closed (at the cap), RSS after they closed, seconds to come
    /// back within 4 MB.
    pub big_peak_kib: u64,
    pub big_closed_by_sidecar: usize,
    pub big_after_kib: u64,
    pub big_back_secs: Option<f64>,
    /// Hellos just under the cap, held: how many, RSS then, per held
    /// handshake, RSS after, seconds to come back.
    pub held: u64,
    pub held_kib: u64,
    pub kib_per_held: f64,
    pub held_after_kib: u64,
    pub held_back_secs: Option<f64>,
}

/// Runs the named hostile scenarios and prints their figures.
pub fn run(opts: &Opts) -> HostileRow {
    let sizes = Sizes::new(opts.quick);
    let trim = std::env::var("BENCH_TRIM").map_or(true, |v| v != "off" && v != "0");
    let mut row = HostileRow {
        hostile: true,
        quick: opts.quick,
        trim,
        ..HostileRow::default()
    };
    let env = if trim {
        Vec::new()
    } else {
        vec![("MTLS_SIDECAR_MALLOC_TRIM".to_string(), "off".to_string())]
    };
    eprintln!(
        "# hostile: {sizes:?}, allocator trimming {}",
        if trim { "on" } else { "off" }
    );
    if named(opts, "scale") {
        row.scale = Some(scale(sizes.scale_conns, &env));
    }
    if named(opts, "flood") {
        let n = sizes.flood_sockets;
        for (variant, kind, extra) in [
            ("silent", Flood::Silent, &[][..]),
            ("garbage", Flood::Garbage, &[][..]),
            (
                "mixed, --max-connections 4",
                Flood::Mixed,
                &["--max-connections", "4"][..],
            ),
        ] {
            row.flood.push(flood(
                variant,
                kind,
                n,
                extra,
                (sizes.phase, sizes.rounds),
                &env,
            ));
        }
    }
    if named(opts, "churn") {
        row.churn = Some(churn(sizes.churn_handshakes, &env));
    }
    if named(opts, "preauth") {
        row.preauth = Some(preauth(sizes.preauth_peers, &env));
    }
    print(&row);
    row
}

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

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Polls `cond` every 50 ms for at most `limit`; the time it took.
fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> Option<Duration> {
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

/// Warm-up: a few connections through the pair, closed, then a moment for
/// the sidecars to tear them down.
fn warm_up(via: SocketAddr) {
    wait_until_serving(via);
    for _ in 0..5 {
        one_roundtrip(via).expect("warm-up round trip");
    }
    std::thread::sleep(Duration::from_millis(300));
}

fn scale(n: usize, env: &[(String, String)]) -> ScaleFigures {
    eprintln!("# scale: {n} connections through a pair started with soft fd limit {SOFT_NOFILE}");
    let c = creds();
    let target = Target::start("127.0.0.1:0");
    let spawn = Spawn {
        soft_nofile: Some(SOFT_NOFILE),
        quiet: false,
        env: env.to_vec(),
    };
    let server = start_server(&c, target.addr, &[], &spawn);
    let client = start_client(&c, server.listen, &spawn);
    let pids = [client.pid(), server.pid()];
    warm_up(client.listen);
    let was = |s: &Sidecar| {
        s.line("file descriptor limit")
            .and_then(|l| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix("was=").map(str::to_string))
            })
            .unwrap_or_else(|| "?".into())
    };
    let mut f = ScaleFigures {
        connections: n,
        soft_nofile_at_start: [was(&client), was(&server)],
        fds_before: pids.map(fds),
        rss_before_kib: pids.map(vm_rss),
        ..ScaleFigures::default()
    };
    let t = Instant::now();
    let conns = open_idle(client.listen, n);
    f.open_secs = t.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(500));
    f.fds_open = pids.map(fds);
    f.rss_open_kib = pids.map(vm_rss);
    let sum = |a: [u64; 2]| a[0] + a[1];
    f.kib_per_conn = sum(f.rss_open_kib).saturating_sub(sum(f.rss_before_kib)) as f64 / n as f64;
    eprintln!(
        "#   {n} connections open in {:.1}s; fds {:?} -> {:?}; RSS {:?} -> {:?} KiB: {:.1} KiB per connection (both sidecars)",
        f.open_secs, f.fds_before, f.fds_open, f.rss_before_kib, f.rss_open_kib, f.kib_per_conn
    );
    drop(conns);
    let before = f.fds_before;
    f.fds_back_secs = wait_for(Duration::from_secs(60), || {
        fds(pids[0]) <= before[0] && fds(pids[1]) <= before[1]
    })
    .map_or(f64::NAN, |d| d.as_secs_f64());
    f.fds_after = pids.map(fds);
    // Long enough for a trim (checked every second, at most every 5 s).
    std::thread::sleep(Duration::from_secs(7));
    f.rss_after_kib = pids.map(vm_rss);
    eprintln!(
        "#   closed: fds {:?} after {:.1}s; RSS {:?} KiB 7 s later",
        f.fds_after, f.fds_back_secs, f.rss_after_kib
    );
    f
}

/// What a flood socket does once connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flood {
    /// Nothing: a pending handshake until evicted or timed out.
    Silent,
    /// Bytes that are not a ClientHello: refused at once.
    Garbage,
    /// Every other socket silent.
    Mixed,
}

fn garbage(i: usize) -> Vec<u8> {
    if i.is_multiple_of(2) {
        format!("GET /{i} HTTP/1.1\r\nHost: replica\r\n\r\n").into_bytes()
    } else {
        let mut v = vec![0x16, 0x03, 0x01, 0x00, 0x40, 0x01, 0x00, 0x00, 0x3c];
        v.extend((0..60).map(|k| (i.wrapping_mul(31).wrapping_add(k) % 251) as u8));
        v
    }
}

/// A minimal HTTP GET to the admin endpoint; the body.
fn admin_get(admin: SocketAddr, path: &str) -> String {
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

fn pending(admin: SocketAddr) -> Option<u64> {
    let body = admin_get(admin, "/status");
    let doc: serde_json::Value = serde_json::from_str(&body).ok()?;
    doc["routes"][0]["pending_handshakes"].as_u64()
}

/// `mtls_sidecar_tls_handshake_failures_total` for `reason`.
fn failures(metrics: &str, reason: &str) -> f64 {
    let label = format!("reason=\"{reason}\"");
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("mtls_sidecar_tls_handshake_failures_total{") && l.contains(&label)
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Samples recorded by the background load of a flood run.
#[derive(Default)]
struct Samples {
    /// (start, round trip µs) of the established connection's pings.
    rtt: Vec<(Instant, f64)>,
    /// (start, ms or None when it failed) of new authenticated connections.
    newconn: Vec<(Instant, Option<f64>)>,
}

fn flood(
    variant: &str,
    kind: Flood,
    n: usize,
    extra: &[&str],
    (phase, rounds): (Duration, usize),
    env: &[(String, String)],
) -> FloodFigures {
    eprintln!("# flood ({variant}): {n} sockets on the server route");
    let c = creds();
    let target = Target::start("127.0.0.1:0");
    let spawn = Spawn {
        soft_nofile: None,
        quiet: true,
        env: env.to_vec(),
    };
    let mut args = vec!["--admin", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let server = start_server(&c, target.addr, &args, &spawn);
    let admin = server.admin();
    let client = start_client(&c, server.listen, &spawn);
    let via = client.listen;
    let spid = server.pid();
    warm_up(via);
    let max_handshakes = admin_get(admin, "/status");
    let max_handshakes = serde_json::from_str::<serde_json::Value>(&max_handshakes)
        .ok()
        .and_then(|d| d["routes"][0]["max_handshakes"].as_u64())
        .unwrap_or(0);

    let stop = Arc::new(AtomicBool::new(false));
    let samples = Arc::new(Mutex::new(Samples::default()));
    // The established connection: a 64-byte ping every millisecond.
    let pinger = {
        let (stop, samples) = (stop.clone(), samples.clone());
        let mut s = connect(via).expect("established connection");
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s.write_all(b"E").unwrap();
        std::thread::spawn(move || {
            let req = [b'p'; MSG];
            let mut resp = [0u8; MSG];
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                s.write_all(&req).expect("ping");
                s.read_exact(&mut resp).expect("pong");
                let us = t.elapsed().as_secs_f64() * 1e6;
                samples.lock().unwrap().rtt.push((t, us));
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    // A new authenticated connection every 100 ms.
    let prober = {
        let (stop, samples) = (stop.clone(), samples.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let ok = one_roundtrip(via).is_ok();
                let ms = ok.then(|| t.elapsed().as_secs_f64() * 1e3);
                samples.lock().unwrap().newconn.push((t, ms));
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    // Pending handshakes and the server's RSS, every 50 ms.
    let peak_pending = Arc::new(AtomicU64::new(0));
    let peak_rss = Arc::new(AtomicU64::new(0));
    let monitor = {
        let (stop, peak_pending, peak_rss) = (stop.clone(), peak_pending.clone(), peak_rss.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Some(p) = pending(admin) {
                    peak_pending.fetch_max(p, Ordering::Relaxed);
                }
                peak_rss.fetch_max(vm_rss(spid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };

    // Rounds of (no flood, flood), so both phases see the same machine;
    // the phases' samples are pooled.
    let mut base_windows = Vec::new();
    let mut flood_windows = Vec::new();
    let mut rss_before = 0;
    let mut open_secs = 0.0f64;
    let addr = server.listen;
    for round in 0..rounds {
        let base_start = Instant::now();
        std::thread::sleep(phase);
        base_windows.push((base_start, Instant::now()));
        if round == 0 {
            rss_before = vm_rss(spid);
            peak_rss.store(rss_before, Ordering::Relaxed);
        }
        let flood_start = Instant::now();
        let sockets = open_flood(addr, kind, n);
        open_secs = open_secs.max(flood_start.elapsed().as_secs_f64());
        std::thread::sleep(phase);
        flood_windows.push((flood_start, Instant::now()));
        drop(sockets);
        wait_for(Duration::from_secs(30), || pending(admin) == Some(0));
        // The machine settles (not counted).
        std::thread::sleep(Duration::from_millis(300));
    }
    let metrics = admin_get(admin, "/metrics");
    stop.store(true, Ordering::Relaxed);
    for t in [pinger, prober, monitor] {
        let _ = t.join();
    }
    let rss_back = wait_for(Duration::from_secs(15), || {
        vm_rss(spid) <= rss_before + RETURN_MARGIN_KIB
    });
    // Then whatever further trimming happens.
    std::thread::sleep(Duration::from_secs(6));
    let samples = samples.lock().unwrap();
    let within = |w: &[(Instant, Instant)], t: &Instant| w.iter().any(|(a, b)| t >= a && t < b);
    let in_base = |t: &Instant| within(&base_windows, t);
    let in_flood = |t: &Instant| within(&flood_windows, t);
    let sorted = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v
    };
    let q = |v: &[f64], p: f64| {
        if v.is_empty() {
            f64::NAN
        } else {
            percentile(v, p)
        }
    };
    let p99_ratio = |b: &(Instant, Instant), f: &(Instant, Instant)| {
        let pick = |w: &(Instant, Instant)| {
            sorted(
                samples
                    .rtt
                    .iter()
                    .filter(|(t, _)| *t >= w.0 && *t < w.1)
                    .map(|x| x.1)
                    .collect(),
            )
        };
        q(&pick(f), 0.99) / q(&pick(b), 0.99)
    };
    let rtt_p99_ratio_rounds = base_windows
        .iter()
        .zip(&flood_windows)
        .map(|(b, f)| p99_ratio(b, f))
        .collect();
    let rb = sorted(
        samples
            .rtt
            .iter()
            .filter(|(t, _)| in_base(t))
            .map(|x| x.1)
            .collect(),
    );
    let rf = sorted(
        samples
            .rtt
            .iter()
            .filter(|(t, _)| in_flood(t))
            .map(|x| x.1)
            .collect(),
    );
    let nb = sorted(
        samples
            .newconn
            .iter()
            .filter(|(t, _)| in_base(t))
            .filter_map(|x| x.1)
            .collect(),
    );
    let nf_all: Vec<_> = samples
        .newconn
        .iter()
        .filter(|(t, _)| in_flood(t))
        .collect();
    let nf = sorted(nf_all.iter().filter_map(|x| x.1).collect());
    let q = |v: &[f64], p: f64| {
        if v.is_empty() {
            f64::NAN
        } else {
            percentile(v, p)
        }
    };
    let f = FloodFigures {
        variant: variant.to_string(),
        sockets: n,
        server_args: extra.iter().map(|s| s.to_string()).collect(),
        open_secs,
        max_pending: peak_pending.load(Ordering::Relaxed),
        max_handshakes,
        overload: failures(&metrics, "overload"),
        not_tls: failures(&metrics, "not_tls"),
        protocol: failures(&metrics, "protocol"),
        newconn_base_ms: [q(&nb, 0.5), q(&nb, 1.0)],
        newconn_flood_ms: [q(&nf, 0.5), q(&nf, 1.0)],
        newconn_flood_failed: nf_all.iter().filter(|x| x.1.is_none()).count(),
        rtt_base_us: [q(&rb, 0.5), q(&rb, 0.99)],
        rtt_flood_us: [q(&rf, 0.5), q(&rf, 0.99)],
        rtt_samples: [rb.len(), rf.len()],
        rtt_p99_ratio_rounds,
        rounds,
        rss_before_kib: rss_before,
        rss_peak_kib: peak_rss.load(Ordering::Relaxed),
        rss_after_kib: vm_rss(spid),
        rss_back_secs: rss_back.map(|d| d.as_secs_f64()),
    };
    eprintln!(
        "#   opened in {:.2}s; pending max {} (limit {}); overload {}, not_tls {}, protocol {}",
        f.open_secs, f.max_pending, f.max_handshakes, f.overload, f.not_tls, f.protocol
    );
    eprintln!(
        "#   new connection ms p50/max: {:.1}/{:.1} -> {:.1}/{:.1} ({} failed); established rtt µs p50/p99: {:.0}/{:.0} -> {:.0}/{:.0} ({} / {} samples)",
        f.newconn_base_ms[0], f.newconn_base_ms[1], f.newconn_flood_ms[0], f.newconn_flood_ms[1],
        f.newconn_flood_failed, f.rtt_base_us[0], f.rtt_base_us[1], f.rtt_flood_us[0], f.rtt_flood_us[1],
        f.rtt_samples[0], f.rtt_samples[1]
    );
    eprintln!("#   p99 ratio per round: {:?}", f.rtt_p99_ratio_rounds);
    eprintln!(
        "#   server RSS {} -> peak {} -> {} KiB; within 4 MB after {:?}",
        f.rss_before_kib, f.rss_peak_kib, f.rss_after_kib, f.rss_back_secs
    );
    f
}

fn churn(n: usize, env: &[(String, String)]) -> ChurnFigures {
    eprintln!("# churn: {n} garbage handshakes on a server without --admin");
    let c = creds();
    let target = Target::start("127.0.0.1:0");
    let spawn = Spawn {
        soft_nofile: None,
        quiet: true,
        env: env.to_vec(),
    };
    let server = start_server(&c, target.addr, &[], &spawn);
    let client = start_client(&c, server.listen, &spawn);
    warm_up(client.listen);
    let spid = server.pid();
    let addr = server.listen;
    let mut f = ChurnFigures {
        handshakes: n,
        rss_kib: vec![vm_rss(spid)],
        ..ChurnFigures::default()
    };
    // Three rounds: a heap that grows with every handshake grows in each,
    // one that is only reused settles after the first.
    for _ in 0..3 {
        let t = Instant::now();
        refuse_many(addr, n);
        f.secs.push(t.elapsed().as_secs_f64());
        // Past an upkeep period (5 s).
        std::thread::sleep(Duration::from_secs(6));
        f.rss_kib.push(vm_rss(spid));
    }
    eprintln!(
        "#   3 x {n} refused in {:?} s; server RSS {:?} KiB",
        f.secs, f.rss_kib
    );
    f
}

/// `n` connections that send bytes which are not TLS and wait until the
/// sidecar closes them, 16 at a time.
fn refuse_many(addr: SocketAddr, n: usize) {
    generator_runtime().block_on(async move {
        use tokio::io::AsyncReadExt;
        let next = Arc::new(AtomicU64::new(0));
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..16 {
            let next = next.clone();
            set.spawn(async move {
                let mut b = [0u8; 64];
                while (next.fetch_add(1, Ordering::Relaxed) as usize) < n {
                    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
                        continue;
                    };
                    let _ = s.write_all(b"GET / HTTP/1.1\r\n\r\n").await;
                    // Until the sidecar closes it: one handshake refused.
                    while let Ok(Ok(k)) =
                        tokio::time::timeout(Duration::from_secs(10), s.read(&mut b)).await
                    {
                        if k == 0 {
                            break;
                        }
                    }
                }
            });
        }
        while set.join_next().await.is_some() {}
    });
}

/// Opens `n` flood sockets (128 connecting at once) and returns them open.
fn open_flood(addr: SocketAddr, kind: Flood, n: usize) -> Vec<tokio::net::TcpStream> {
    generator_runtime().block_on(async move {
        let mut held = Vec::with_capacity(n);
        let mut set = tokio::task::JoinSet::new();
        for i in 0..n {
            let silent = match kind {
                Flood::Silent => true,
                Flood::Garbage => false,
                Flood::Mixed => i.is_multiple_of(2),
            };
            set.spawn(async move {
                let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
                if !silent {
                    let _ = s.write_all(&garbage(i)).await;
                }
                Some(s)
            });
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

/// A ClientHello announcing a 65,000-byte message, `body` bytes of it sent
/// in 16 KiB records, never the end.
fn partial_client_hello(body: usize) -> Vec<u8> {
    let mut msg = vec![0x01, 0x00, 0xfd, 0xe8];
    msg.extend((0..body).map(|k| (k % 251) as u8));
    let mut out = Vec::with_capacity(msg.len() + msg.len() / 16384 * 5 + 5);
    for chunk in msg.chunks(16384) {
        out.extend_from_slice(&[0x16, 0x03, 0x01]);
        out.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
        out.extend_from_slice(chunk);
    }
    out
}

/// `n` peers each sending `hello` (128 at a time), kept open.
fn send_hellos(addr: SocketAddr, n: usize, hello: &[u8]) -> Vec<tokio::net::TcpStream> {
    let hello: Arc<[u8]> = hello.into();
    generator_runtime().block_on(async move {
        let mut out = Vec::with_capacity(n);
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..n {
            let hello = hello.clone();
            set.spawn(async move {
                let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
                let _ = tokio::time::timeout(Duration::from_secs(10), s.write_all(&hello)).await;
                Some(s)
            });
            if set.len() >= 128 {
                if let Some(Ok(Some(s))) = set.join_next().await {
                    out.push(s);
                }
            }
        }
        while let Some(r) = set.join_next().await {
            if let Ok(Some(s)) = r {
                out.push(s);
            }
        }
        out
    })
}

/// How many of `peers` the sidecar closes within `limit` (EOF or reset).
fn closed_by_sidecar(peers: Vec<tokio::net::TcpStream>, limit: Duration) -> usize {
    use tokio::io::AsyncReadExt;
    generator_runtime().block_on(async move {
        let mut set = tokio::task::JoinSet::new();
        for mut p in peers {
            set.spawn(async move {
                let mut b = [0u8; 64];
                loop {
                    match tokio::time::timeout(limit, p.read(&mut b)).await {
                        Ok(Ok(0)) | Ok(Err(_)) => return true,
                        Ok(Ok(_)) => continue,
                        Err(_) => return false,
                    }
                }
            });
        }
        let mut closed = 0;
        while let Some(r) = set.join_next().await {
            closed += usize::from(r.unwrap_or(false));
        }
        closed
    })
}

fn preauth(n: usize, env: &[(String, String)]) -> PreauthFigures {
    eprintln!("# preauth: {n} partial ClientHellos on the server route");
    let c = creds();
    let target = Target::start("127.0.0.1:0");
    let spawn = Spawn {
        soft_nofile: None,
        quiet: true,
        env: env.to_vec(),
    };
    let server = start_server(
        &c,
        target.addr,
        &["--admin", "127.0.0.1:0", "--handshake-timeout", "60s"],
        &spawn,
    );
    let admin = server.admin();
    let client = start_client(&c, server.listen, &spawn);
    warm_up(client.listen);
    let spid = server.pid();
    let mut f = PreauthFigures {
        peers: n,
        rss_before_kib: vm_rss(spid),
        ..PreauthFigures::default()
    };
    let back = |limit| {
        let before = f.rss_before_kib;
        wait_for(limit, || vm_rss(spid) <= before + RETURN_MARGIN_KIB).map(|d| d.as_secs_f64())
    };

    // The issue's attack: most of a 64 KB hello each.
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (stop, peak) = (stop.clone(), peak.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(vm_rss(spid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let peers = send_hellos(server.listen, n, &partial_client_hello(64 * 1024 - 1000));
    f.big_closed_by_sidecar = closed_by_sidecar(peers, Duration::from_secs(15));
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    f.big_peak_kib = peak.load(Ordering::Relaxed);
    f.big_back_secs = back(Duration::from_secs(15));
    std::thread::sleep(Duration::from_secs(6));
    f.big_after_kib = vm_rss(spid);
    eprintln!(
        "#   64 KB hellos: RSS {} -> peak {} KiB; {} of {n} closed by the sidecar; {} KiB after (within 4 MB after {:?} s)",
        f.rss_before_kib, f.big_peak_kib, f.big_closed_by_sidecar, f.big_after_kib, f.big_back_secs
    );

    // The most a peer can pin: just under the cap, then silence.
    let peers = send_hellos(server.listen, n, &partial_client_hello(UNDER_CAP));
    let want = (n as u64).min(1024);
    wait_for(Duration::from_secs(30), || pending(admin) == Some(want));
    std::thread::sleep(Duration::from_millis(500));
    f.held = pending(admin).unwrap_or(0);
    f.held_kib = vm_rss(spid);
    f.kib_per_held = f.held_kib.saturating_sub(f.rss_before_kib) as f64 / f.held.max(1) as f64;
    drop(peers);
    wait_for(Duration::from_secs(30), || pending(admin) == Some(0));
    f.held_back_secs = back(Duration::from_secs(15));
    std::thread::sleep(Duration::from_secs(6));
    f.held_after_kib = vm_rss(spid);
    eprintln!(
        "#   {} hellos of {UNDER_CAP} bytes held: RSS {} KiB, {:.1} KiB each; {} KiB after they closed (within 4 MB after {:?} s)",
        f.held, f.held_kib, f.kib_per_held, f.held_after_kib, f.held_back_secs
    );
    f
}

fn print(row: &HostileRow) {
    let mb = |k: u64| k as f64 / 1024.0;
    let secs = |s: Option<f64>| s.map_or("never (15 s)".to_string(), |s| format!("{s:.1} s"));
    println!(
        "\nhostile load ({}; allocator trimming {})",
        if row.quick {
            "quick sizes"
        } else {
            "full sizes"
        },
        if row.trim { "on" } else { "off" }
    );
    if let Some(s) = &row.scale {
        println!(
            "scale: {} connections through a pair started with soft fd limit {} (client, server): opened in {:.1} s; \
             {:.1} KiB RSS per idle connection (both sidecars); fds {:?} -> {:?} -> {:?} ({:.1} s after close); \
             RSS {:.1}/{:.1} -> {:.1}/{:.1} -> {:.1}/{:.1} MB",
            s.connections,
            s.soft_nofile_at_start.join("/"),
            s.open_secs,
            s.kib_per_conn,
            s.fds_before,
            s.fds_open,
            s.fds_after,
            s.fds_back_secs,
            mb(s.rss_before_kib[0]),
            mb(s.rss_before_kib[1]),
            mb(s.rss_open_kib[0]),
            mb(s.rss_open_kib[1]),
            mb(s.rss_after_kib[0]),
            mb(s.rss_after_kib[1]),
        );
    }
    if !row.flood.is_empty() {
        println!(
            "| flood ({} rounds) | pending max / limit | overload | new conn ms p50 / max: no flood → flood | \
             established p99 µs: no flood → flood (pooled ratio; rounds) | server RSS MB before → peak → after | back within 4 MB |",
            row.flood[0].rounds
        );
        println!("|---|---|---|---|---|---|---|");
    }
    for f in &row.flood {
        println!(
            "| {} × {} | {} / {} | {} | {:.1} / {:.1} → {:.1} / {:.1}{} | {:.0} → {:.0} ({:.2}×; {}) | {:.1} → {:.1} → {:.1} | {} |",
            f.sockets,
            f.variant,
            f.max_pending,
            f.max_handshakes,
            f.overload,
            f.newconn_base_ms[0],
            f.newconn_base_ms[1],
            f.newconn_flood_ms[0],
            f.newconn_flood_ms[1],
            if f.newconn_flood_failed > 0 {
                format!(" ({} failed)", f.newconn_flood_failed)
            } else {
                String::new()
            },
            f.rtt_base_us[1],
            f.rtt_flood_us[1],
            f.rtt_flood_us[1] / f.rtt_base_us[1],
            {
                let mut r = f.rtt_p99_ratio_rounds.clone();
                r.sort_by(f64::total_cmp);
                let median = r.get(r.len() / 2).copied().unwrap_or(f64::NAN);
                format!(
                    "median {median:.2}: {}",
                    f.rtt_p99_ratio_rounds
                        .iter()
                        .map(|r| format!("{r:.2}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            },
            mb(f.rss_before_kib),
            mb(f.rss_peak_kib),
            mb(f.rss_after_kib),
            secs(f.rss_back_secs),
        );
    }
    if let Some(c) = &row.churn {
        println!(
            "churn: 3 × {} garbage handshakes without --admin ({:.0}/s): server RSS {} MB (before, then after each round)",
            c.handshakes,
            c.handshakes as f64 * c.secs.len() as f64 / c.secs.iter().sum::<f64>(),
            c.rss_kib
                .iter()
                .map(|k| format!("{:.1}", mb(*k)))
                .collect::<Vec<_>>()
                .join(" → "),
        );
    }
    if let Some(p) = &row.preauth {
        println!(
            "preauth: {} × 64 KB partial hellos: server RSS {:.1} → peak {:.1} → {:.1} MB ({} closed by the sidecar; back within 4 MB: {}); \
             {} held just under the cap: {:.1} MB ({:.1} KiB each) → {:.1} MB after (back within 4 MB: {})",
            p.peers,
            mb(p.rss_before_kib),
            mb(p.big_peak_kib),
            mb(p.big_after_kib),
            p.big_closed_by_sidecar,
            secs(p.big_back_secs),
            p.held,
            mb(p.held_kib),
            p.kib_per_held,
            mb(p.held_after_kib),
            secs(p.held_back_secs),
        );
    }
}

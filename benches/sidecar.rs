//! Load generator and benchmark scenarios for a TLS proxy pair (issue 6).
//!
//! Default mode spawns the real release binary as a client sidecar → server
//! sidecar pair (TLS 1.3, ECDSA P-256, full mTLS with SAN checks) in front of
//! a plaintext target that lives in this process, and measures every
//! scenario through the pair and directly against the target in the same
//! run. `--external` measures any other pair (stunnel, HAProxy, nginx,
//! socat: see `peers.sh`) with the same generator.
//!
//! ```text
//! cargo bench --bench sidecar                         # full run (a few minutes)
//! BENCH_QUICK=1 cargo bench --bench sidecar           # smoke run (< 1 minute)
//! cargo bench --bench sidecar -- --only bulk,latency  # some scenarios
//! cargo bench --bench sidecar -- --external name=haproxy,listen=127.0.0.1:7001,target=127.0.0.1:7003,pids=11,12 --out rows.jsonl
//! cargo bench --bench sidecar -- --table rows.jsonl   # one table of saved rows
//! ```
//!
//! Environment: `BENCH_QUICK=1` (small sizes), `MTLS_SIDECAR_BIN` (binary to
//! run), `BENCH_WRAP` (a command prefix for the sidecars, e.g.
//! `valgrind --tool=callgrind`), `BENCH_SIDECAR_ARGS` (extra flags for both),
//! `BENCH_VERBOSE=1` (echo the sidecars' logs), `BENCH_ONLY=a,b` (as
//! `--only`); size overrides
//! `BENCH_BULK_MB`, `BENCH_PINGS`, `BENCH_IDLE`, `BENCH_SECS_MS`,
//! `BENCH_RELOAD_INTERVAL` (the server's `--reload-interval`).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mtls_sidecar::atomic_writer::AtomicDir;
use mtls_sidecar::pki::{write_secret_dir, DevCa, LeafSpec, Role};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CONTROLLER: &str = "controller.bench.svc";
const REPLICA: &str = "replica-0.bench.svc";
/// Request and response size of every round trip.
const MSG: usize = 64;
/// Size of the generator's bulk writes and reads.
const IO_BUF: usize = 256 * 1024;
/// Concurrent connections of the round-trip scenario.
const RT_CONNS: usize = 16;
/// Concurrent connectors of the new-connection scenario.
const NEWCONN_CONCURRENCY: usize = 8;

// ---------------------------------------------------------------- sizes

#[derive(Debug, Clone)]
struct Scale {
    bulk_bytes: u64,
    echo_bytes: u64,
    pings: usize,
    rt_time: Duration,
    newconn_time: Duration,
    idle: usize,
    rotations: usize,
    rotation_gap: Duration,
    reload_interval: &'static str,
    /// Alternating direct/system rounds of the throughput scenarios (best kept).
    rounds: usize,
}

impl Scale {
    fn full() -> Scale {
        Scale {
            bulk_bytes: 1 << 30,
            echo_bytes: 1 << 30,
            pings: 20_000,
            rt_time: Duration::from_secs(3),
            newconn_time: Duration::from_secs(3),
            idle: 4_000,
            rotations: 10,
            rotation_gap: Duration::from_millis(500),
            reload_interval: "100ms",
            rounds: 3,
        }
    }
    fn quick() -> Scale {
        Scale {
            bulk_bytes: 128 << 20,
            echo_bytes: 64 << 20,
            pings: 3_000,
            rt_time: Duration::from_millis(1000),
            newconn_time: Duration::from_millis(1000),
            idle: 500,
            rotations: 10,
            rotation_gap: Duration::from_millis(150),
            reload_interval: "50ms",
            rounds: 1,
        }
    }
}

// ---------------------------------------------------------------- results

/// A figure through the system under test and the same figure direct.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Fig {
    sys: f64,
    direct: f64,
}

/// One system's results; one JSON line in an `--out` file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Row {
    system: String,
    quick: bool,
    /// Bulk one way, MB/s (10^6 bytes).
    bulk: Option<Fig>,
    /// Echo both ways: payload MB/s in each direction at once.
    echo: Option<Fig>,
    /// 64-byte ping-pong latency on one connection, µs.
    p50: Option<Fig>,
    p99: Option<Fig>,
    p999: Option<Fig>,
    /// 64-byte round trips/s over 16 connections.
    rt16: Option<Fig>,
    /// New connections/s, each with a full handshake and one round trip.
    newconn: Option<Fig>,
    /// KiB of RSS (all proxy processes) per idle connection.
    idle_kib: Option<f64>,
    /// MB of RSS of all proxy processes after a few connections.
    baseline_mb: Option<f64>,
    rotations: Option<u64>,
    rotation_requests: Option<u64>,
    rotation_failed: Option<u64>,
}

// ---------------------------------------------------------------- options

#[derive(Debug, Default)]
struct Opts {
    quick: bool,
    only: Option<Vec<String>>,
    out: Option<PathBuf>,
    table: Option<PathBuf>,
    external: Option<HashMap<String, String>>,
    name: Option<String>,
}

impl Opts {
    fn parse() -> Opts {
        let mut o = Opts {
            quick: std::env::var("BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0"),
            ..Opts::default()
        };
        if let Ok(only) = std::env::var("BENCH_ONLY") {
            o.only = Some(only.split(',').map(str::to_string).collect());
        }
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            let mut val = || {
                args.next()
                    .unwrap_or_else(|| usage(&format!("{a} needs a value")))
            };
            match a.as_str() {
                // `cargo bench` passes this to every harness = false target.
                "--bench" => {}
                "--quick" => o.quick = true,
                "--only" => o.only = Some(val().split(',').map(str::to_string).collect()),
                "--out" => o.out = Some(val().into()),
                "--table" => o.table = Some(val().into()),
                "--name" => o.name = Some(val()),
                "--external" => {
                    let spec = val();
                    let mut kv: HashMap<String, String> = HashMap::new();
                    let mut last = String::new();
                    for part in spec.split(',') {
                        match part.split_once('=') {
                            Some((k, v)) => {
                                kv.insert(k.to_string(), v.to_string());
                                last = k.to_string();
                            }
                            // pids=1,2: a bare value continues the last key.
                            None if !last.is_empty() => {
                                let e = kv.entry(last.clone()).or_default();
                                e.push(',');
                                e.push_str(part);
                            }
                            None => usage(&format!("--external: {part:?} is not key=value")),
                        }
                    }
                    o.external = Some(kv);
                }
                "-h" | "--help" => usage(""),
                other if other.starts_with("--") => usage(&format!("unknown flag {other}")),
                _ => {}
            }
        }
        o
    }

    fn wants(&self, scenario: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|l| l.iter().any(|s| s == scenario))
    }
}

fn usage(msg: &str) -> ! {
    if !msg.is_empty() {
        eprintln!("error: {msg}");
    }
    eprintln!(
        "usage: sidecar [--quick] [--only memory,bulk,echo,latency,rt16,newconn,rotation] [--out FILE] [--name NAME]\n\
         \x20      sidecar --external name=N,listen=ADDR,target=ADDR[,pids=P1,P2][,idle=N] [--out FILE]\n\
         \x20      sidecar --table FILE"
    );
    std::process::exit(2)
}

// ---------------------------------------------------------------- main

fn main() {
    // `cargo bench` passes --bench; `cargo test --all-targets` runs bench
    // targets with no arguments: do nothing there rather than a long run.
    if std::env::args().len() == 1 {
        eprintln!("benchmarks run with `cargo bench --bench sidecar` (see benches/README.md)");
        return;
    }
    let opts = Opts::parse();
    if let Some(file) = &opts.table {
        let text = std::fs::read_to_string(file)
            .unwrap_or_else(|e| usage(&format!("{}: {e}", file.display())));
        let rows: Vec<Row> = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).expect("a results row"))
            .collect();
        print_table(&rows);
        print_targets(&rows);
        return;
    }
    raise_nofile();
    let mut scale = if opts.quick {
        Scale::quick()
    } else {
        Scale::full()
    };
    // Size overrides, for profiling runs under valgrind.
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    if let Some(mb) = env("BENCH_BULK_MB") {
        scale.bulk_bytes = mb << 20;
        scale.echo_bytes = mb << 20;
    }
    if let Ok(v) = std::env::var("BENCH_RELOAD_INTERVAL") {
        scale.reload_interval = Box::leak(v.into_boxed_str());
    }
    if let Some(n) = env("BENCH_PINGS") {
        scale.pings = n as usize;
    }
    if let Some(n) = env("BENCH_IDLE") {
        scale.idle = n as usize;
    }
    if let Some(ms) = env("BENCH_SECS_MS") {
        scale.rt_time = Duration::from_millis(ms);
        scale.newconn_time = Duration::from_millis(ms);
    }
    let started = Instant::now();
    let row = match &opts.external {
        Some(kv) => run_external(&opts, &scale, kv),
        None => run_sidecar(&opts, &scale),
    };
    eprintln!("# done in {:.1}s", started.elapsed().as_secs_f64());
    if let Some(out) = &opts.out {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(out)
            .expect("open --out file");
        writeln!(f, "{}", serde_json::to_string(&row).unwrap()).expect("write row");
    }
    print_table(std::slice::from_ref(&row));
}

fn raise_nofile() {
    // SAFETY: plain libc calls on a local struct.
    unsafe {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// A system under test: where the generator connects, where the target
/// must listen, and which processes make it up.
struct System {
    name: String,
    listen: SocketAddr,
    pids: Vec<u32>,
    idle: usize,
}

fn run_external(opts: &Opts, scale: &Scale, kv: &HashMap<String, String>) -> Row {
    let get = |k: &str| {
        kv.get(k)
            .cloned()
            .unwrap_or_else(|| usage(&format!("--external needs {k}=")))
    };
    let target = Target::start(&get("target"));
    let sys = System {
        name: get("name"),
        listen: get("listen").parse().expect("listen=HOST:PORT"),
        pids: kv
            .get("pids")
            .map(|p| p.split(',').filter_map(|x| x.trim().parse().ok()).collect())
            .unwrap_or_default(),
        idle: kv
            .get("idle")
            .and_then(|v| v.parse().ok())
            .unwrap_or(scale.idle),
    };
    wait_until_serving(sys.listen);
    measure(opts, scale, &sys, &target, None)
}

fn run_sidecar(opts: &Opts, scale: &Scale) -> Row {
    let bin = sidecar_bin();
    let tmp = tempfile::tempdir().expect("tempdir");
    let ca = DevCa::new("bench CA", 30).expect("mint CA");
    let server_dir = AtomicDir::new(&tmp.path().join("server")).expect("server dir");
    let publish = |dir: &AtomicDir| {
        let leaf = ca
            .issue(&LeafSpec::dns(REPLICA, Role::Server, 30))
            .expect("issue server leaf");
        dir.publish(&[
            ("tls.crt", leaf.cert_pem.as_bytes()),
            ("tls.key", leaf.key_pem.as_bytes()),
            ("ca.crt", ca.cert_pem.as_bytes()),
        ])
        .expect("publish server revision");
    };
    publish(&server_dir);
    let client_leaf = ca
        .issue(&LeafSpec::dns(CONTROLLER, Role::Client, 30))
        .expect("issue client leaf");
    let client_dir = tmp.path().join("client");
    write_secret_dir(&client_dir, &client_leaf, &ca.cert_pem).expect("client dir");

    let target = Target::start("127.0.0.1:0");
    let max = (scale.idle * 2 + 1000).to_string();
    let server = Sidecar::start(
        &bin,
        &[
            "server",
            "--listen",
            "127.0.0.1:0",
            "--target",
            &target.addr.to_string(),
            "--tls-dir",
            server_dir.path().to_str().unwrap(),
            "--allow-san",
            CONTROLLER,
            "--max-connections",
            &max,
            "--reload-interval",
            scale.reload_interval,
        ],
    );
    let client = Sidecar::start(
        &bin,
        &[
            "client",
            "--listen",
            "127.0.0.1:0",
            "--target",
            &server.listen.to_string(),
            "--server-name",
            REPLICA,
            "--tls-dir",
            client_dir.to_str().unwrap(),
            "--max-connections",
            &max,
        ],
    );
    let sys = System {
        name: opts.name.clone().unwrap_or_else(|| "mtls-sidecar".into()),
        listen: client.listen,
        pids: vec![client.pid(), server.pid()],
        idle: scale.idle,
    };
    let rotate = Rotator {
        publish: &|| publish(&server_dir),
        applied: &|| server.count("applied credential revision"),
    };
    let row = measure(opts, scale, &sys, &target, Some(&rotate));
    drop(client);
    drop(server);
    row
}

fn sidecar_bin() -> PathBuf {
    if let Ok(p) = std::env::var("MTLS_SIDECAR_BIN") {
        return p.into();
    }
    if let Some(p) = option_env!("CARGO_BIN_EXE_mtls-sidecar") {
        if Path::new(p).exists() {
            return p.into();
        }
    }
    // target/release/deps/sidecar-HASH → target/release/mtls-sidecar
    let exe = std::env::current_exe().expect("current exe");
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("mtls-sidecar"))
        .expect("target dir");
    if !bin.exists() {
        eprintln!("# building the release binary");
        let ok = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["build", "--release", "--bin", "mtls-sidecar"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok && bin.exists(), "cannot build {}", bin.display());
    }
    bin
}

// ---------------------------------------------------------------- scenarios

struct Rotator<'a> {
    publish: &'a dyn Fn(),
    applied: &'a dyn Fn() -> usize,
}

fn measure(
    opts: &Opts,
    scale: &Scale,
    sys: &System,
    target: &Target,
    rotate: Option<&Rotator>,
) -> Row {
    let direct = target.addr;
    let via = sys.listen;
    let mut row = Row {
        system: sys.name.clone(),
        quick: opts.quick,
        ..Row::default()
    };
    let say = |what: &str| eprintln!("# {}: {what}", sys.name);

    // Memory first, before the heavy scenarios grow any heap.
    if opts.wants("memory") && !sys.pids.is_empty() {
        for _ in 0..5 {
            one_roundtrip(via).expect("warm-up round trip");
        }
        std::thread::sleep(Duration::from_millis(300));
        let base = rss_kib(&sys.pids);
        row.baseline_mb = Some(base as f64 / 1024.0);
        say(&format!("baseline RSS {:.1} MB", base as f64 / 1024.0));
        if sys.idle > 0 {
            let before = rss_kib(&sys.pids);
            let conns = open_idle(via, sys.idle);
            std::thread::sleep(Duration::from_millis(500));
            let after = rss_kib(&sys.pids);
            let per = after.saturating_sub(before) as f64 / sys.idle as f64;
            row.idle_kib = Some(per);
            say(&format!(
                "{} idle connections: RSS {before} → {after} KiB, {per:.1} KiB each",
                conns.len()
            ));
            drop(conns);
            std::thread::sleep(Duration::from_millis(1000));
        }
    }
    if opts.wants("bulk") {
        let f = best_of(
            scale.rounds,
            || bulk(direct, scale.bulk_bytes),
            || bulk(via, scale.bulk_bytes),
        );
        say(&format!("bulk {:.0} MB/s (direct {:.0})", f.sys, f.direct));
        row.bulk = Some(f);
    }
    if opts.wants("echo") {
        let f = best_of(
            scale.rounds,
            || echo(direct, scale.echo_bytes),
            || echo(via, scale.echo_bytes),
        );
        say(&format!(
            "echo {:.0} MB/s each way (direct {:.0})",
            f.sys, f.direct
        ));
        row.echo = Some(f);
    }
    if opts.wants("latency") {
        let (d, s) = pingpong(direct, via, scale.pings);
        let fig = |q: f64| Fig {
            sys: percentile(&s, q),
            direct: percentile(&d, q),
        };
        row.p50 = Some(fig(0.50));
        row.p99 = Some(fig(0.99));
        row.p999 = Some(fig(0.999));
        say(&format!(
            "ping-pong p50 {:.1} p99 {:.1} p99.9 {:.1} µs (direct {:.1} {:.1} {:.1})",
            fig(0.5).sys,
            fig(0.99).sys,
            fig(0.999).sys,
            fig(0.5).direct,
            fig(0.99).direct,
            fig(0.999).direct
        ));
    }
    if opts.wants("rt16") {
        let f = best_of(
            scale.rounds,
            || roundtrips(direct, RT_CONNS, scale.rt_time),
            || roundtrips(via, RT_CONNS, scale.rt_time),
        );
        say(&format!(
            "{RT_CONNS} connections: {:.0} round trips/s (direct {:.0})",
            f.sys, f.direct
        ));
        row.rt16 = Some(f);
    }
    if opts.wants("newconn") {
        let f = best_of(
            scale.rounds,
            || newconns(direct, scale.newconn_time),
            || newconns(via, scale.newconn_time),
        );
        say(&format!(
            "{:.0} new connections/s (direct {:.0})",
            f.sys, f.direct
        ));
        row.newconn = Some(f);
    }
    if let (true, Some(rot)) = (opts.wants("rotation"), rotate) {
        let (n, ok, failed) = rotation(via, scale, rot);
        say(&format!(
            "{n} rotations applied under load: {ok} requests ok, {failed} failed"
        ));
        row.rotations = Some(n as u64);
        row.rotation_requests = Some(ok);
        row.rotation_failed = Some(failed);
    }
    row
}

fn connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    Ok(s)
}

fn wait_until_serving(addr: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if one_roundtrip(addr).is_ok() {
            return;
        }
        assert!(Instant::now() < deadline, "{addr} does not forward");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Connects, asks for echo and does one 64-byte round trip; returns the
/// stream still open.
fn one_roundtrip(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let mut s = connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut req = [b'x'; MSG + 1];
    req[0] = b'E';
    s.write_all(&req)?;
    let mut resp = [0u8; MSG];
    s.read_exact(&mut resp)?;
    if resp != req[1..] {
        return Err(std::io::Error::other("echo mismatch"));
    }
    Ok(s)
}

fn mbs(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e6
}

/// Bulk one way: `bytes` to a sink that acknowledges the count.
fn bulk(addr: SocketAddr, bytes: u64) -> f64 {
    let mut s = connect(addr).expect("connect");
    let buf = vec![0x5au8; IO_BUF];
    let t = Instant::now();
    let mut head = vec![b'S'];
    head.extend_from_slice(&bytes.to_le_bytes());
    s.write_all(&head).unwrap();
    let mut left = bytes;
    while left > 0 {
        let n = left.min(IO_BUF as u64) as usize;
        s.write_all(&buf[..n]).expect("bulk write");
        left -= n as u64;
    }
    let mut ack = [0u8; 8];
    s.read_exact(&mut ack).expect("bulk ack");
    assert_eq!(u64::from_le_bytes(ack), bytes, "sink count");
    mbs(bytes, t.elapsed())
}

/// Echo both ways: one thread writes `bytes`, another reads them back.
fn echo(addr: SocketAddr, bytes: u64) -> f64 {
    let mut w = connect(addr).expect("connect");
    let mut r = w.try_clone().unwrap();
    let t = Instant::now();
    let writer = std::thread::spawn(move || {
        let buf = vec![0xa5u8; IO_BUF];
        w.write_all(b"E").unwrap();
        let mut left = bytes;
        while left > 0 {
            let n = left.min(IO_BUF as u64) as usize;
            w.write_all(&buf[..n]).expect("echo write");
            left -= n as u64;
        }
        w
    });
    let mut buf = vec![0u8; IO_BUF];
    let mut got = 0u64;
    while got < bytes {
        let n = r.read(&mut buf).expect("echo read");
        assert!(n > 0, "echo: early EOF after {got} bytes");
        got += n as u64;
    }
    let took = t.elapsed();
    drop(writer.join());
    mbs(bytes, took)
}

/// Best (highest) of `rounds` alternating measurements direct and through
/// the system: other tenants of the machine only ever slow a run down.
fn best_of(rounds: usize, direct: impl Fn() -> f64, sys: impl Fn() -> f64) -> Fig {
    let mut f = Fig {
        sys: 0.0,
        direct: 0.0,
    };
    for _ in 0..rounds {
        f.direct = f.direct.max(direct());
        f.sys = f.sys.max(sys());
    }
    f
}

/// Round-trip times (µs, sorted) of `n` 64-byte ping-pongs on one
/// connection direct and one through the system, alternating blocks of
/// 500 so both see the same machine; after a warm-up of n/10 each.
fn pingpong(direct: SocketAddr, via: SocketAddr, n: usize) -> (Vec<f64>, Vec<f64>) {
    let open = |addr| {
        let mut s = connect(addr).expect("connect");
        s.write_all(b"E").unwrap();
        s
    };
    let mut conns = [open(direct), open(via)];
    let req = [b'p'; MSG];
    let mut resp = [0u8; MSG];
    let mut out = [Vec::with_capacity(n), Vec::with_capacity(n)];
    let warm = n / 10;
    let ping_block = std::env::var("BENCH_PING_BLOCK")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500usize);
    let mut done = 0;
    while done < warm + n {
        let block = ping_block.min(warm + n - done);
        for (s, out) in conns.iter_mut().zip(out.iter_mut()) {
            for i in done..done + block {
                let t = Instant::now();
                s.write_all(&req).unwrap();
                s.read_exact(&mut resp).unwrap();
                if i >= warm {
                    out.push(t.elapsed().as_secs_f64() * 1e6);
                }
            }
        }
        done += block;
    }
    let [mut d, mut s] = out;
    d.sort_by(f64::total_cmp);
    s.sort_by(f64::total_cmp);
    (d, s)
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn generator_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("generator runtime")
}

async fn aconnect(addr: SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
    let s = tokio::net::TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// Round trips/s with `conns` connections each doing 64-byte ping-pongs.
fn roundtrips(addr: SocketAddr, conns: usize, time: Duration) -> f64 {
    generator_runtime().block_on(async move {
        let mut streams = Vec::new();
        for _ in 0..conns {
            let mut s = aconnect(addr).await.expect("connect");
            s.write_all(b"E").await.unwrap();
            streams.push(s);
        }
        let count = Arc::new(AtomicU64::new(0));
        let start = Instant::now();
        let end = start + time;
        let mut set = tokio::task::JoinSet::new();
        for mut s in streams {
            let count = count.clone();
            set.spawn(async move {
                let req = [b'r'; MSG];
                let mut resp = [0u8; MSG];
                while Instant::now() < end {
                    s.write_all(&req).await.unwrap();
                    s.read_exact(&mut resp).await.unwrap();
                    count.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        while set.join_next().await.is_some() {}
        count.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
    })
}

/// New connections/s, each connect + one 64-byte round trip + close, by a
/// few concurrent connectors.
fn newconns(addr: SocketAddr, time: Duration) -> f64 {
    generator_runtime().block_on(async move {
        let count = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let start = Instant::now();
        let end = start + time;
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..NEWCONN_CONCURRENCY {
            let (count, failed) = (count.clone(), failed.clone());
            set.spawn(async move {
                let mut req = [b'n'; MSG + 1];
                req[0] = b'E';
                let mut resp = [0u8; MSG];
                while Instant::now() < end {
                    let r = async {
                        let mut s = aconnect(addr).await?;
                        s.write_all(&req).await?;
                        s.read_exact(&mut resp).await?;
                        std::io::Result::Ok(())
                    };
                    match tokio::time::timeout(Duration::from_secs(10), r).await {
                        Ok(Ok(())) => count.fetch_add(1, Ordering::Relaxed),
                        _ => failed.fetch_add(1, Ordering::Relaxed),
                    };
                }
            });
        }
        while set.join_next().await.is_some() {}
        let f = failed.load(Ordering::Relaxed);
        if f > 0 {
            eprintln!("#   {f} new connections failed");
        }
        count.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
    })
}

/// Opens `n` connections, each with one round trip done, and leaves them
/// idle (blocking sockets, owned by the caller).
fn open_idle(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    let conns: Vec<tokio::net::TcpStream> = generator_runtime().block_on(async move {
        let mut out = Vec::with_capacity(n);
        let mut set = tokio::task::JoinSet::new();
        let mut launched = 0;
        while out.len() < n {
            while launched < n && set.len() < 32 {
                launched += 1;
                set.spawn(async move {
                    let mut s = aconnect(addr).await?;
                    let mut req = [b'i'; MSG + 1];
                    req[0] = b'E';
                    s.write_all(&req).await?;
                    let mut resp = [0u8; MSG];
                    s.read_exact(&mut resp).await?;
                    std::io::Result::Ok(s)
                });
            }
            match set.join_next().await {
                Some(Ok(Ok(s))) => out.push(s),
                Some(r) => panic!("idle connection {}: {r:?}", out.len()),
                None => break,
            }
        }
        out
    });
    conns
        .into_iter()
        .map(|s| s.into_std().expect("into std"))
        .collect()
}

/// Rotates the server identity `scale.rotations` times while long-lived
/// connections ping-pong and new connections keep arriving; returns
/// (rotations applied, requests ok, requests failed).
fn rotation(addr: SocketAddr, scale: &Scale, rot: &Rotator) -> (usize, u64, u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for i in 0..6 {
        let (stop, ok, failed) = (stop.clone(), ok.clone(), failed.clone());
        // Four long-lived connections, two that reconnect every 5 requests.
        let per_conn = if i < 4 { u64::MAX } else { 5 };
        workers.push(std::thread::spawn(move || {
            let mut conn: Option<(TcpStream, u64)> = None;
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let req = [(n % 251) as u8; MSG];
                match rotation_step(addr, conn.take(), per_conn, &req) {
                    Ok(c) => {
                        conn = Some(c);
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        eprintln!("#   rotation: request failed: {e}");
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }));
    }
    let before = (rot.applied)();
    for _ in 0..scale.rotations {
        std::thread::sleep(scale.rotation_gap);
        (rot.publish)();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while (rot.applied)() < before + scale.rotations && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(scale.rotation_gap);
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.join();
    }
    (
        (rot.applied)() - before,
        ok.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
    )
}

/// One request of the rotation load: on `conn` while it has served fewer
/// than `per_conn` requests, else on a new connection.
fn rotation_step(
    addr: SocketAddr,
    conn: Option<(TcpStream, u64)>,
    per_conn: u64,
    req: &[u8; MSG],
) -> std::io::Result<(TcpStream, u64)> {
    let (mut s, k) = match conn {
        Some((s, k)) if k < per_conn => (s, k),
        _ => {
            let mut s = connect(addr)?;
            s.set_read_timeout(Some(Duration::from_secs(10)))?;
            s.write_all(b"E")?;
            (s, 0)
        }
    };
    s.write_all(req)?;
    let mut resp = [0u8; MSG];
    s.read_exact(&mut resp)?;
    if &resp != req {
        return Err(std::io::Error::other("echo mismatch"));
    }
    Ok((s, k + 1))
}

// ---------------------------------------------------------------- RSS

/// Resident set of `pids` and all their descendants, KiB.
fn rss_kib(pids: &[u32]) -> u64 {
    let mut parent: HashMap<u32, u32> = HashMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
                if let Some(ppid) = stat
                    .rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                    .and_then(|p| p.parse().ok())
                {
                    parent.insert(pid, ppid);
                }
            }
        }
    }
    let in_tree = |mut p: u32| loop {
        if pids.contains(&p) {
            return true;
        }
        match parent.get(&p) {
            Some(&pp) if pp != 0 && pp != p => p = pp,
            _ => return false,
        }
    };
    parent
        .keys()
        .filter(|&&p| in_tree(p))
        .map(|p| vm_rss(*p))
        .sum()
}

fn vm_rss(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

// ---------------------------------------------------------------- target

/// The plaintext target: the first byte of a connection picks `E` (echo
/// everything) or `S` (sink: an 8-byte little-endian length, that many
/// bytes, then the count back).
struct Target {
    addr: SocketAddr,
}

impl Target {
    fn start(addr: &str) -> Target {
        let listener = std::net::TcpListener::bind(addr)
            .unwrap_or_else(|e| panic!("target cannot listen on {addr}: {e}"));
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("target runtime");
            rt.block_on(async move {
                let l = tokio::net::TcpListener::from_std(listener).unwrap();
                loop {
                    let Ok((s, _)) = l.accept().await else {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        continue;
                    };
                    let _ = s.set_nodelay(true);
                    tokio::spawn(serve_target(s));
                }
            });
        });
        Target { addr }
    }
}

async fn serve_target(mut s: tokio::net::TcpStream) -> std::io::Result<()> {
    let mut mode = [0u8; 1];
    s.read_exact(&mut mode).await?;
    match mode[0] {
        b'S' => {
            let mut len = [0u8; 8];
            s.read_exact(&mut len).await?;
            let want = u64::from_le_bytes(len);
            let mut buf = vec![0u8; IO_BUF];
            let mut got = 0u64;
            while got < want {
                let n = s.read(&mut buf).await?;
                if n == 0 {
                    break;
                }
                got += n as u64;
            }
            s.write_all(&got.to_le_bytes()).await?;
            // Wait for the other side to close.
            while s.read(&mut buf).await? > 0 {}
            Ok(())
        }
        _ => {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = s.read(&mut buf).await?;
                if n == 0 {
                    return s.shutdown().await;
                }
                s.write_all(&buf[..n]).await?;
            }
        }
    }
}

// ---------------------------------------------------------------- sidecar processes

/// One spawned sidecar, its stderr collected.
struct Sidecar {
    child: Child,
    logs: Arc<Mutex<Vec<String>>>,
    listen: SocketAddr,
}

impl Sidecar {
    fn start(bin: &Path, args: &[&str]) -> Sidecar {
        let wrap = std::env::var("BENCH_WRAP").unwrap_or_default();
        let extra = std::env::var("BENCH_SIDECAR_ARGS").unwrap_or_default();
        let mut argv: Vec<String> = wrap.split_whitespace().map(str::to_string).collect();
        argv.push(bin.to_string_lossy().into_owned());
        argv.extend(args.iter().map(|a| a.to_string()));
        argv.extend(extra.split_whitespace().map(str::to_string));
        use std::os::unix::process::CommandExt;
        let mut child = Command::new(&argv[0])
            .args(&argv[1..])
            // Its own process group, so a wrapper (valgrind, perf) and the
            // sidecar under it are signalled together.
            .process_group(0)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", argv[0]));
        let stderr = child.stderr.take().unwrap();
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = logs.clone();
        let verbose = std::env::var("BENCH_VERBOSE").is_ok();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if verbose || line.contains("WARN") || line.contains("ERROR") {
                    eprintln!("#   [{}] {line}", args_mode(&line));
                }
                sink.lock().unwrap().push(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(if wrap.is_empty() { 20 } else { 120 });
        let listen = loop {
            let found = logs.lock().unwrap().iter().find_map(|l| {
                l.contains(" listening ")
                    .then(|| {
                        l.split_whitespace()
                            .find_map(|w| w.strip_prefix("listen="))
                            .and_then(|a| a.parse::<SocketAddr>().ok())
                    })
                    .flatten()
            });
            if let Some(a) = found {
                break a;
            }
            if let Ok(Some(st)) = child.try_wait() {
                panic!(
                    "sidecar exited ({st}):\n{}",
                    logs.lock().unwrap().join("\n")
                );
            }
            assert!(Instant::now() < deadline, "sidecar did not start");
            std::thread::sleep(Duration::from_millis(10));
        };
        Sidecar {
            child,
            logs,
            listen,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn count(&self, needle: &str) -> usize {
        self.logs
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(needle))
            .count()
    }
}

fn args_mode(line: &str) -> &str {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("route="))
        .unwrap_or("sidecar")
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        // SIGTERM, so a profiler wrapping the sidecar can write its output.
        // SAFETY: signalling our own child by pid.
        unsafe {
            libc::kill(-(self.child.id() as libc::pid_t), libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: as above.
        unsafe {
            libc::kill(-(self.child.id() as libc::pid_t), libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------- tables

fn ratio(f: &Option<Fig>) -> String {
    match f {
        Some(f) => format!("{:.0} ({:.2}×)", f.sys, f.sys / f.direct),
        None => "-".into(),
    }
}

fn added(f: &Option<Fig>) -> String {
    match f {
        Some(f) => format!("{:.1} (+{:.1})", f.sys, f.sys - f.direct),
        None => "-".into(),
    }
}

fn opt(v: Option<f64>, prec: usize) -> String {
    v.map(|v| format!("{v:.prec$}"))
        .unwrap_or_else(|| "-".into())
}

fn print_table(rows: &[Row]) {
    let header = [
        "system",
        "bulk MB/s",
        "echo MB/s",
        "p50 µs (+added)",
        "p99 µs (+added)",
        "p99.9 µs (+added)",
        "16-conn rt/s",
        "new conn/s",
        "KiB/idle conn",
        "baseline MB",
        "rotation fails",
    ];
    let mut lines: Vec<Vec<String>> = Vec::new();
    // Direct: from the first row that has each figure (every row measured
    // its own; ratios use the row's own).
    let first = |f: fn(&Row) -> Option<Fig>| rows.iter().find_map(f);
    let d = |f: Option<Fig>, p: usize| f.map(|f| format!("{:.p$}", f.direct)).unwrap_or("-".into());
    lines.push(vec![
        "direct".into(),
        d(first(|r| r.bulk), 0),
        d(first(|r| r.echo), 0),
        d(first(|r| r.p50), 1),
        d(first(|r| r.p99), 1),
        d(first(|r| r.p999), 1),
        d(first(|r| r.rt16), 0),
        d(first(|r| r.newconn), 0),
        "-".into(),
        "-".into(),
        "-".into(),
    ]);
    for r in rows {
        lines.push(vec![
            r.system.clone(),
            ratio(&r.bulk),
            ratio(&r.echo),
            added(&r.p50),
            added(&r.p99),
            added(&r.p999),
            ratio(&r.rt16),
            ratio(&r.newconn),
            opt(r.idle_kib, 1),
            opt(r.baseline_mb, 1),
            match (r.rotation_failed, r.rotations) {
                (Some(f), Some(n)) => format!("{f} in {n}"),
                _ => "n/a".into(),
            },
        ]);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            lines
                .iter()
                .map(|l| l[i].chars().count())
                .chain([header[i].chars().count()])
                .max()
                .unwrap()
        })
        .collect();
    let fmt = |cells: &[String]| {
        let parts: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count())))
            .collect();
        format!("| {} |", parts.join(" | "))
    };
    let hdr: Vec<String> = header.iter().map(|s| s.to_string()).collect();
    println!("{}", fmt(&hdr));
    println!(
        "|{}|",
        widths
            .iter()
            .map(|w| "-".repeat(w + 2))
            .collect::<Vec<_>>()
            .join("|")
    );
    for l in &lines {
        println!("{}", fmt(l));
    }
    if rows.iter().any(|r| r.quick) {
        println!("(quick mode: small sizes, figures are indicative only)");
    }
    println!(
        "(ratios: system / direct from the same run; latency: +µs over direct; \
         echo: payload MB/s each way; memory: RSS of all proxy processes)"
    );
}

/// The issue's targets: the sidecar against the best peer (each figure
/// normalised by its own run's direct where it has one).
fn print_targets(rows: &[Row]) {
    let Some(us) = rows.iter().find(|r| r.system == "mtls-sidecar") else {
        return;
    };
    let peers: Vec<&Row> = rows
        .iter()
        .filter(|r| r.system != "mtls-sidecar" && !r.system.starts_with("socat"))
        .collect();
    if peers.is_empty() {
        return;
    }
    println!();
    println!("| target | mtls-sidecar | best peer | ratio | goal | met | absolute ratio |");
    println!("|---|---|---|---|---|---|---|");
    type Get = fn(&Row) -> Option<f64>;
    let checks: [(&str, Get, bool, f64); 8] = [
        (
            "bulk one way (×direct)",
            |r| r.bulk.map(|f| f.sys / f.direct),
            true,
            1.5,
        ),
        (
            "added p50 µs",
            |r| r.p50.map(|f| f.sys - f.direct),
            false,
            0.7,
        ),
        (
            "added p99 µs",
            |r| r.p99.map(|f| f.sys - f.direct),
            false,
            0.7,
        ),
        (
            "new conn/s (×direct)",
            |r| r.newconn.map(|f| f.sys / f.direct),
            true,
            1.5,
        ),
        (
            "16-conn rt/s (×direct)",
            |r| r.rt16.map(|f| f.sys / f.direct),
            true,
            1.5,
        ),
        ("KiB per idle conn", |r| r.idle_kib, false, 0.5),
        ("baseline RSS MB", |r| r.baseline_mb, false, 0.5),
        (
            "rotation failures",
            |r| r.rotation_failed.map(|f| f as f64),
            false,
            0.0,
        ),
    ];
    for (name, get, higher, goal) in checks {
        let Some(mine) = get(us) else { continue };
        if goal == 0.0 {
            println!(
                "| {name} | {mine:.0} | n/a | - | 0 | {} |",
                if mine == 0.0 { "yes" } else { "NO" }
            );
            continue;
        }
        let best = peers
            .iter()
            .filter_map(|r| get(r).map(|v| (v, *r)))
            .reduce(|a, b| if (b.0 > a.0) == higher { b } else { a });
        let Some((best, peer)) = best else { continue };
        let r = mine / best;
        let met = if higher { r >= goal } else { r <= goal };
        // The same comparison on the raw figures, without each run's direct.
        let raw = |row: &Row| match name {
            n if n.starts_with("bulk") => row.bulk.map(|f| f.sys),
            n if n.starts_with("new conn") => row.newconn.map(|f| f.sys),
            n if n.starts_with("16-conn") => row.rt16.map(|f| f.sys),
            _ => None,
        };
        let absolute = match (raw(us), raw(peer)) {
            (Some(a), Some(b)) => format!("{:.2} ({a:.0} / {b:.0})", a / b),
            _ => "-".into(),
        };
        println!(
            "| {name} | {mine:.2} | {best:.2} ({}) | {r:.2} | {}{goal} | {} | {absolute} |",
            peer.system,
            if higher { "≥" } else { "≤" },
            if met { "yes" } else { "NO" }
        );
    }
}

//! The `flood` scenario: many silent, garbage or mixed sockets on the
//! server route, and what they cost the peers that behave (an established
//! connection's round trips, new authenticated connections) against a
//! no-flood phase of the same run, with the server's pending handshakes,
//! refusals and RSS.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;

use super::harness::{
    admin_get, drained, every, given_back, mb, open_many, pending, quiet, route_status, secs, Pair,
};
use crate::measure::percentile;
use crate::memory::vm_rss;
use crate::options::MSG;
use crate::scenarios::{connect, one_roundtrip};

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

/// Every variant, `n` sockets each, on a fresh pair each.
pub fn variants(
    n: usize,
    phases: (Duration, usize),
    env: &[(String, String)],
) -> Vec<FloodFigures> {
    [
        ("silent", Flood::Silent, &[][..]),
        ("garbage", Flood::Garbage, &[][..]),
        (
            "mixed, --max-connections 4",
            Flood::Mixed,
            &["--max-connections", "4"][..],
        ),
    ]
    .into_iter()
    .map(|(variant, kind, extra)| flood(variant, kind, n, extra, phases, env))
    .collect()
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

/// A time window of a phase: [start, end).
type Window = (Instant, Instant);

/// The values of `samples` that started within any of `windows`, in order.
fn in_windows<T: Copy>(samples: &[(Instant, T)], windows: &[Window]) -> Vec<T> {
    samples
        .iter()
        .filter(|(t, _)| windows.iter().any(|(a, b)| t >= a && t < b))
        .map(|x| x.1)
        .collect()
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

/// The `p` quantile of sorted `v`; NaN when there is none.
fn q(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        f64::NAN
    } else {
        percentile(v, p)
    }
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
    let mut args = vec!["--admin", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let pair = Pair::start(&args, &quiet(env));
    let admin = pair.server.admin();
    let via = pair.via();
    let spid = pair.server.pid();
    let max_handshakes = route_status(admin, "max_handshakes").unwrap_or(0);

    let stop = Arc::new(AtomicBool::new(false));
    let samples = Arc::new(Mutex::new(Samples::default()));
    // The established connection: a 64-byte ping every millisecond.
    let pinger = {
        let samples = samples.clone();
        let mut s = connect(via).expect("established connection");
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s.write_all(b"E").unwrap();
        let req = [b'p'; MSG];
        let mut resp = [0u8; MSG];
        every(&stop, Duration::from_millis(1), move || {
            let t = Instant::now();
            s.write_all(&req).expect("ping");
            s.read_exact(&mut resp).expect("pong");
            let us = t.elapsed().as_secs_f64() * 1e6;
            samples.lock().unwrap().rtt.push((t, us));
        })
    };
    // A new authenticated connection every 100 ms.
    let prober = {
        let samples = samples.clone();
        every(&stop, Duration::from_millis(100), move || {
            let t = Instant::now();
            let ok = one_roundtrip(via).is_ok();
            let ms = ok.then(|| t.elapsed().as_secs_f64() * 1e3);
            samples.lock().unwrap().newconn.push((t, ms));
        })
    };
    // Pending handshakes and the server's RSS, every 50 ms.
    let peak_pending = Arc::new(AtomicU64::new(0));
    let peak_rss = Arc::new(AtomicU64::new(0));
    let monitor = {
        let (peak_pending, peak_rss) = (peak_pending.clone(), peak_rss.clone());
        every(&stop, Duration::from_millis(50), move || {
            if let Some(p) = pending(admin) {
                peak_pending.fetch_max(p, Ordering::Relaxed);
            }
            peak_rss.fetch_max(vm_rss(spid), Ordering::Relaxed);
        })
    };

    // Rounds of (no flood, flood), so both phases see the same machine;
    // the phases' samples are pooled.
    let mut base_windows = Vec::new();
    let mut flood_windows = Vec::new();
    let mut rss_before = 0;
    let mut open_secs = 0.0f64;
    let addr = pair.server.listen;
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
        drained(admin);
        // The machine settles (not counted).
        std::thread::sleep(Duration::from_millis(300));
    }
    let metrics = admin_get(admin, "/metrics");
    stop.store(true, Ordering::Relaxed);
    for t in [pinger, prober, monitor] {
        let _ = t.join();
    }
    let (rss_back_secs, rss_after_kib) = given_back(spid, rss_before);
    let samples = samples.lock().unwrap();
    let rtt_p99_ratio_rounds = base_windows
        .iter()
        .zip(&flood_windows)
        .map(|(b, f)| {
            let p99 = |w: &Window| q(&sorted(in_windows(&samples.rtt, &[*w])), 0.99);
            p99(f) / p99(b)
        })
        .collect();
    let rb = sorted(in_windows(&samples.rtt, &base_windows));
    let rf = sorted(in_windows(&samples.rtt, &flood_windows));
    let nb = sorted(
        in_windows(&samples.newconn, &base_windows)
            .into_iter()
            .flatten()
            .collect(),
    );
    let nf_all = in_windows(&samples.newconn, &flood_windows);
    let nf = sorted(nf_all.iter().flatten().copied().collect());
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
        newconn_flood_failed: nf_all.iter().filter(|x| x.is_none()).count(),
        rtt_base_us: [q(&rb, 0.5), q(&rb, 0.99)],
        rtt_flood_us: [q(&rf, 0.5), q(&rf, 0.99)],
        rtt_samples: [rb.len(), rf.len()],
        rtt_p99_ratio_rounds,
        rounds,
        rss_before_kib: rss_before,
        rss_peak_kib: peak_rss.load(Ordering::Relaxed),
        rss_after_kib,
        rss_back_secs,
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

/// Opens `n` flood sockets (128 connecting at once) and returns them open.
fn open_flood(addr: SocketAddr, kind: Flood, n: usize) -> Vec<tokio::net::TcpStream> {
    open_many(n, move |i| {
        let silent = match kind {
            Flood::Silent => true,
            Flood::Garbage => false,
            Flood::Mixed => i.is_multiple_of(2),
        };
        async move {
            let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
            if !silent {
                let _ = s.write_all(&garbage(i)).await;
            }
            Some(s)
        }
    })
}

/// The scenario's table, a row per variant (nothing when none ran).
pub fn print(floods: &[FloodFigures]) {
    let Some(first) = floods.first() else {
        return;
    };
    println!(
        "| flood ({} rounds) | pending max / limit | overload | new conn ms p50 / max: no flood → flood | \
         established p99 µs: no flood → flood (pooled ratio; rounds) | server RSS MB before → peak → after | back within 4 MB |",
        first.rounds
    );
    println!("|---|---|---|---|---|---|---|");
    for f in floods {
        let mut r = f.rtt_p99_ratio_rounds.clone();
        r.sort_by(f64::total_cmp);
        let median = r.get(r.len() / 2).copied().unwrap_or(f64::NAN);
        let rounds = format!(
            "median {median:.2}: {}",
            f.rtt_p99_ratio_rounds
                .iter()
                .map(|r| format!("{r:.2}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
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
            rounds,
            mb(f.rss_before_kib),
            mb(f.rss_peak_kib),
            mb(f.rss_after_kib),
            secs(f.rss_back_secs),
        );
    }
}

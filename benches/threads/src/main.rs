//! The thread-model driver: through one mtls-sidecar pair per MODEL
//! (`--runtime M --worker-threads N` on both sides, all pairs started at
//! once), 16 connections ping-ponging 64 bytes for SECS (round trips/s, and
//! CPU per round trip of both sidecars from /proc/PID/stat), the models
//! interleaved REPS times; then single-connection latency (64 bytes,
//! PINGS round trips in blocks of 500, direct and each pair alternating).
//! The echo target runs on its own 2-worker runtime, the generator on a
//! current-thread one, as in `cargo bench`'s rt16 scenario.
//!
//! usage: rtdrv BIN PKI SECS REPS MODEL...   (MODEL = multi:2, per-core:1, …)
//! PKI holds srv/ and cli/ from `mtls-sidecar certs issue` (SANs
//! replica-0.bench.svc and controller.bench.svc). Run it under `taskset`
//! to give the whole run 1 or 2 cores.
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const MSG: usize = 64;
const CONNS: usize = 16;

fn cpu_ticks(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &s[s.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}
/// Voluntary context switches of every thread of `pid` (each is a thread
/// going to sleep: a wake-up it will need).
fn sleeps(pid: u32) -> u64 {
    let mut n = 0;
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let s = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        for l in s.lines() {
            if let Some(v) = l.strip_prefix("voluntary_ctxt_switches:") {
                n += v.trim().parse::<u64>().unwrap_or(0);
            }
        }
    }
    n
}

fn rss_kb(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find(|l| l.starts_with("VmRSS"))
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Pair {
    name: String,
    server: Child,
    client: Child,
    addr: String,
}

fn start_pair(bin: &str, pki: &str, model: &str, target: &str) -> Pair {
    let (m, n) = model.split_once(':').unwrap();
    let sp = free_port();
    let cp = free_port();
    let common = |extra: Vec<String>| -> Vec<String> {
        let mut v = vec![
            "--runtime".into(),
            m.into(),
            "--worker-threads".into(),
            n.into(),
            "--max-connections".into(),
            "9000".into(),
            "--sandbox".into(),
            "off".into(),
        ];
        v.extend(extra);
        v
    };
    let server = Command::new(bin)
        .arg("server")
        .args(common(vec![
            "--listen".into(),
            format!("127.0.0.1:{sp}"),
            "--target".into(),
            target.into(),
            "--tls-dir".into(),
            format!("{pki}/srv"),
            "--allow-san".into(),
            "controller.bench.svc".into(),
        ]))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let client = Command::new(bin)
        .arg("client")
        .args(common(vec![
            "--listen".into(),
            format!("127.0.0.1:{cp}"),
            "--target".into(),
            format!("127.0.0.1:{sp}"),
            "--tls-dir".into(),
            format!("{pki}/cli"),
            "--server-name".into(),
            "replica-0.bench.svc".into(),
        ]))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Pair {
        name: model.to_string(),
        server,
        client,
        addr: format!("127.0.0.1:{cp}"),
    }
}

async fn connect(addr: &str) -> TcpStream {
    for _ in 0..500 {
        if let Ok(mut s) = TcpStream::connect(addr).await {
            s.set_nodelay(true).unwrap();
            let mut b = [7u8; MSG];
            s.write_all(&b).await.unwrap();
            if s.read_exact(&mut b).await.is_ok() {
                return s;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("cannot reach {addr}");
}

async fn rt16(addr: &str, secs: f64) -> u64 {
    let mut conns = Vec::new();
    for _ in 0..CONNS {
        conns.push(connect(addr).await);
    }
    let until = Instant::now() + Duration::from_secs_f64(secs);
    let mut tasks = Vec::new();
    for mut s in conns {
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            let mut b = [1u8; MSG];
            while Instant::now() < until {
                s.write_all(&b).await.unwrap();
                s.read_exact(&mut b).await.unwrap();
                n += 1;
            }
            n
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    total
}

async fn lat(s: &mut TcpStream, n: usize, out: &mut Vec<u32>) {
    let mut b = [3u8; MSG];
    for _ in 0..n {
        let t = Instant::now();
        s.write_all(&b).await.unwrap();
        s.read_exact(&mut b).await.unwrap();
        out.push(t.elapsed().as_nanos() as u32);
    }
}
fn pct(v: &mut Vec<u32>, p: f64) -> f64 {
    v.sort();
    v[((v.len() as f64 - 1.0) * p) as usize] as f64 / 1000.0
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let (bin, pki, secs, reps) = (
        a[1].clone(),
        a[2].clone(),
        a[3].parse::<f64>().unwrap(),
        a[4].parse::<usize>().unwrap(),
    );
    let models: Vec<String> = a[5..].to_vec();
    // target: echo, its own 2-worker runtime, as the bench's
    let trt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let target = trt.block_on(async {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = l.accept().await.unwrap();
                s.set_nodelay(true).unwrap();
                tokio::spawn(async move {
                    let mut b = vec![0u8; 16384];
                    loop {
                        let n = match s.read(&mut b).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        if s.write_all(&b[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    });
    let mut pairs: Vec<Pair> = models
        .iter()
        .map(|m| start_pair(&bin, &pki, m, &target))
        .collect();
    let gen = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    gen.block_on(async {
        for p in &pairs {
            drop(connect(&p.addr).await);
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    for p in &pairs {
        println!(
            "baseline {} rss server {} kB client {} kB",
            p.name,
            rss_kb(p.server.id()),
            rss_kb(p.client.id())
        );
    }
    let tick = 100.0; // USER_HZ
    let mut results: Vec<Vec<(f64, f64, f64)>> = vec![Vec::new(); pairs.len()];
    for r in 0..reps {
        for (i, p) in pairs.iter().enumerate() {
            let c0 = cpu_ticks(p.server.id()) + cpu_ticks(p.client.id());
            let s0 = sleeps(p.server.id()) + sleeps(p.client.id());
            let t0 = Instant::now();
            let n = gen.block_on(rt16(&p.addr, secs));
            let el = t0.elapsed().as_secs_f64();
            let c1 = cpu_ticks(p.server.id()) + cpu_ticks(p.client.id());
            let s1 = sleeps(p.server.id()) + sleeps(p.client.id());
            let rps = n as f64 / secs;
            let cpu_us = (c1 - c0) as f64 / tick * 1e6 / n as f64;
            let sleeps_per = (s1 - s0) as f64 / n as f64;
            println!(
                "rep {r} {:>12} rt16 {:>8.0} rt/s  cpu/rt {:>5.1} us  sleeps/rt {:.3}  (wall {:.2}s)",
                p.name, rps, cpu_us, sleeps_per, el
            );
            results[i].push((rps, cpu_us, sleeps_per));
        }
    }
    // single-connection latency: direct and each pair in blocks of 500
    let mut direct = Vec::new();
    let mut lats: Vec<Vec<u32>> = vec![Vec::new(); pairs.len()];
    gen.block_on(async {
        let mut d = connect(&target).await;
        let mut cs = Vec::new();
        for p in &pairs {
            cs.push(connect(&p.addr).await);
        }
        let mut sink = Vec::new();
        lat(&mut d, 1000, &mut sink).await;
        for c in cs.iter_mut() {
            lat(c, 1000, &mut sink).await;
        }
        for _ in 0..(std::env::var("PINGS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(10000usize)
            / 500)
        {
            lat(&mut d, 500, &mut direct).await;
            for (i, c) in cs.iter_mut().enumerate() {
                lat(c, 500, &mut lats[i]).await;
            }
        }
    });
    let (d50, d99) = (pct(&mut direct, 0.5), pct(&mut direct, 0.99));
    println!("direct p50 {d50:.1} us p99 {d99:.1} us");
    for (i, p) in pairs.iter().enumerate() {
        let mut v = results[i].clone();
        v.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
        let med = v[v.len() / 2];
        let mut c: Vec<f64> = results[i].iter().map(|x| x.1).collect();
        c.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let mut z: Vec<f64> = results[i].iter().map(|x| x.2).collect();
        z.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let (p50, p99) = (pct(&mut lats[i], 0.5), pct(&mut lats[i], 0.99));
        println!("SUMMARY {:>12}: rt16 median {:>7.0} (all {:?}) cpu/rt median {:.1} us sleeps/rt {:.3} | p50 {:.1} (+{:.1}) p99 {:.1} (+{:.1}) us",
            p.name, med.0, results[i].iter().map(|x| x.0 as u64).collect::<Vec<_>>(), c[c.len() / 2], z[z.len() / 2], p50, p50 - d50, p99, p99 - d99);
    }
    for p in pairs.iter_mut() {
        let _ = p.server.kill();
        let _ = p.client.kill();
    }
}

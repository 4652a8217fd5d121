//! The `churn` scenario: rounds of many refused handshakes on a server
//! without `--admin`, to see whether the heap grows with every handshake
//! (each records a histogram sample that only the exporter's upkeep frees)
//! or settles after the first round.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::harness::{mb, quiet, Pair};
use crate::memory::vm_rss;
use crate::scenarios::generator_runtime;

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct ChurnFigures {
    /// Refused handshakes per round (three rounds).
    pub handshakes: usize,
    pub secs: Vec<f64>,
    /// Server RSS before, then 6 s (an upkeep period) after each round.
    pub rss_kib: Vec<u64>,
}

pub fn churn(n: usize, env: &[(String, String)]) -> ChurnFigures {
    eprintln!("# churn: {n} garbage handshakes on a server without --admin");
    let pair = Pair::start(&[], &quiet(env));
    let spid = pair.server.pid();
    let addr = pair.server.listen;
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

/// The scenario's line of the table.
pub fn print(c: &ChurnFigures) {
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

//! The `preauth` scenario: peers that send a large ClientHello and never
//! finish it. First most of a 64 KB hello each (the sidecar must close them
//! at the pre-authentication cap), then hellos just under the cap, held:
//! the most memory a peer can pin before it authenticates, and how soon the
//! server gives it back.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::harness::{
    drained, every, given_back, mb, open_many, pending, quiet, secs, wait_for, Pair,
};
use crate::memory::vm_rss;
use crate::scenarios::generator_runtime;

/// Bytes of a ClientHello a "just under the cap" peer sends (the cap is
/// `mtls_sidecar::proxy::preauth::PREAUTH_BYTES`, counted with record headers).
const UNDER_CAP: usize = mtls_sidecar::proxy::preauth::PREAUTH_BYTES - 1024;

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

pub fn preauth(n: usize, env: &[(String, String)]) -> PreauthFigures {
    eprintln!("# preauth: {n} partial ClientHellos on the server route");
    let pair = Pair::start(
        &["--admin", "127.0.0.1:0", "--handshake-timeout", "60s"],
        &quiet(env),
    );
    let admin = pair.server.admin();
    let spid = pair.server.pid();
    let addr = pair.server.listen;
    let mut f = PreauthFigures {
        peers: n,
        rss_before_kib: vm_rss(spid),
        ..PreauthFigures::default()
    };

    // The attack: most of a 64 KB hello each.
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(0));
    let sampler = {
        let peak = peak.clone();
        every(&stop, Duration::from_millis(20), move || {
            peak.fetch_max(vm_rss(spid), Ordering::Relaxed);
        })
    };
    let peers = send_hellos(addr, n, &partial_client_hello(64 * 1024 - 1000));
    f.big_closed_by_sidecar = closed_by_sidecar(peers, Duration::from_secs(15));
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    f.big_peak_kib = peak.load(Ordering::Relaxed);
    (f.big_back_secs, f.big_after_kib) = given_back(spid, f.rss_before_kib);
    eprintln!(
        "#   64 KB hellos: RSS {} -> peak {} KiB; {} of {n} closed by the sidecar; {} KiB after (within 4 MB after {:?} s)",
        f.rss_before_kib, f.big_peak_kib, f.big_closed_by_sidecar, f.big_after_kib, f.big_back_secs
    );

    // The most a peer can pin: just under the cap, then silence.
    let peers = send_hellos(addr, n, &partial_client_hello(UNDER_CAP));
    let want = (n as u64).min(1024);
    wait_for(Duration::from_secs(30), || pending(admin) == Some(want));
    std::thread::sleep(Duration::from_millis(500));
    f.held = pending(admin).unwrap_or(0);
    f.held_kib = vm_rss(spid);
    f.kib_per_held = f.held_kib.saturating_sub(f.rss_before_kib) as f64 / f.held.max(1) as f64;
    drop(peers);
    drained(admin);
    (f.held_back_secs, f.held_after_kib) = given_back(spid, f.rss_before_kib);
    eprintln!(
        "#   {} hellos of {UNDER_CAP} bytes held: RSS {} KiB, {:.1} KiB each; {} KiB after they closed (within 4 MB after {:?} s)",
        f.held, f.held_kib, f.kib_per_held, f.held_after_kib, f.held_back_secs
    );
    f
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
    open_many(n, move |_| {
        let hello = hello.clone();
        async move {
            let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
            let _ = tokio::time::timeout(Duration::from_secs(10), s.write_all(&hello)).await;
            Some(s)
        }
    })
}

/// How many of `peers` the sidecar closes within `limit` (EOF or reset).
fn closed_by_sidecar(peers: Vec<tokio::net::TcpStream>, limit: Duration) -> usize {
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

/// The scenario's line of the table.
pub fn print(p: &PreauthFigures) {
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

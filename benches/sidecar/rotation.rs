//! Rotation under load: server identities published while requests run.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::options::{Scale, MSG};
use crate::scenarios::connect;

/// How the rotation scenario changes the system's server identity:
/// `publish` a new one, `applied` counts the revisions taken in so far.
pub struct Rotator<'a> {
    pub publish: &'a dyn Fn(),
    pub applied: &'a dyn Fn() -> usize,
}

/// Rotates the server identity `scale.rotations` times while long-lived
/// connections ping-pong and new connections keep arriving; returns
/// (rotations applied, requests ok, requests failed).
pub fn rotation(addr: SocketAddr, scale: &Scale, rot: &Rotator) -> (usize, u64, u64) {
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
pub fn rotation_step(
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

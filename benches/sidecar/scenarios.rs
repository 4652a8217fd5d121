//! The load of each scenario: bulk, echo, ping-pong, round trips over many
//! connections, new connections, idle connections.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::options::{IO_BUF, MSG, NEWCONN_CONCURRENCY};

pub fn connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    Ok(s)
}

pub fn wait_until_serving(addr: SocketAddr) {
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
pub fn one_roundtrip(addr: SocketAddr) -> std::io::Result<TcpStream> {
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

pub fn mbs(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e6
}

/// Bulk one way: `bytes` to a sink that acknowledges the count.
pub fn bulk(addr: SocketAddr, bytes: u64) -> f64 {
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
pub fn echo(addr: SocketAddr, bytes: u64) -> f64 {
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

/// Round-trip times (µs, sorted) of `n` 64-byte ping-pongs on one
/// connection direct and one through the system, alternating blocks of
/// 500 so both see the same machine; after a warm-up of n/10 each.
pub fn pingpong(direct: SocketAddr, via: SocketAddr, n: usize) -> (Vec<f64>, Vec<f64>) {
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

pub fn generator_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("generator runtime")
}

pub async fn aconnect(addr: SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
    let s = tokio::net::TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// Round trips/s with `conns` connections each doing 64-byte ping-pongs.
pub fn roundtrips(addr: SocketAddr, conns: usize, time: Duration) -> f64 {
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
pub fn newconns(addr: SocketAddr, time: Duration) -> f64 {
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
pub fn open_idle(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
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

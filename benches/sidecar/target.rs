//! The plaintext target every system forwards to, in this process.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::options::IO_BUF;

/// The plaintext target: the first byte of a connection picks `E` (echo
/// everything) or `S` (sink: an 8-byte little-endian length, that many
/// bytes, then the count back).
pub struct Target {
    pub addr: SocketAddr,
}

impl Target {
    pub fn start(addr: &str) -> Target {
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

pub async fn serve_target(mut s: tokio::net::TcpStream) -> std::io::Result<()> {
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

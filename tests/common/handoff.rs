//! What tests/e2e/handoff.rs and tests/foreign/handoff_interop.rs share: a plaintext
//! target that records every byte a connection sends it, so a test can read
//! the PROXY header the sidecar wrote ahead of the peer's bytes.

use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

/// A target that reads everything a connection sends until EOF and hands
/// the bytes back through the returned channel.
pub async fn recording_target() -> (String, tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                let _ = s.read_to_end(&mut got).await;
                let _ = tx.send(got);
            });
        }
    });
    (addr, rx)
}

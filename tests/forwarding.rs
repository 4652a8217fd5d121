//! Forwarding through a client sidecar → server sidecar pair: bulk integrity,
//! per-frame flushing, half-close, stalled handshakes, and the reaping of a
//! half-closed connection that goes quiet.

mod common;

use std::time::{Duration, Instant};

use aws_lc_rs::digest;
use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

const MIB: usize = 1024 * 1024;

#[tokio::test(flavor = "multi_thread")]
async fn sixty_four_mib_each_way_intact() {
    let pair = Pair::start(&[], &[]).await;
    let mut data = vec![0u8; 64 * MIB];
    aws_lc_rs::rand::fill(&mut data).unwrap();
    let sent = digest::digest(&digest::SHA256, &data);

    let (mut r, mut w) = pair.connect().await.into_split();
    // Write and read concurrently: the echo sends everything back, so a
    // writer that waited for the whole upload would deadlock on full buffers.
    let writer = tokio::spawn(async move {
        for chunk in data.chunks(256 * 1024) {
            w.write_all(chunk).await.unwrap();
        }
        w.shutdown().await.unwrap();
    });
    let reader = async {
        let mut ctx = digest::Context::new(&digest::SHA256);
        let mut buf = vec![0u8; 64 * 1024];
        let mut total = 0usize;
        loop {
            let n = r.read(&mut buf).await.expect("read echo");
            if n == 0 {
                break;
            }
            ctx.update(&buf[..n]);
            total += n;
        }
        (total, ctx.finish())
    };
    let (total, received) = tokio::time::timeout(DEADLINE * 6, reader)
        .await
        .expect("64 MiB each way in time");
    writer.await.unwrap();
    assert_eq!(total, 64 * MIB, "bytes echoed back");
    assert_eq!(received.as_ref(), sent.as_ref(), "SHA-256 of the echo");
    assert_eq!(pair.echo.accepted(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_ten_byte_ping_pongs() {
    let pair = Pair::start(&[], &[]).await;
    let mut s = pair.connect().await;
    for i in 0..1000u32 {
        let frame = format!("{i:010}");
        assert_eq!(frame.len(), 10);
        // Nothing more is written until this frame's reply is read: a proxy
        // that strands a small write in a buffer times out here.
        let reply = roundtrip(&mut s, frame.as_bytes()).await;
        assert_eq!(reply, frame.as_bytes(), "frame {i}");
    }
    assert_eq!(pair.echo.accepted(), 1);
}

/// A target that reads the request to EOF, answers at once, then answers
/// again two seconds later and closes. Yields the request it read.
async fn late_responder(late: Vec<u8>) -> (String, JoinHandle<Vec<u8>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let task = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut request = Vec::new();
        s.read_to_end(&mut request).await.unwrap();
        s.write_all(b"early:").await.unwrap();
        s.write_all(&request).await.unwrap();
        // The scenario itself, not synchronisation: a slow backend.
        tokio::time::sleep(Duration::from_secs(2)).await;
        s.write_all(&late).await.unwrap();
        s.shutdown().await.unwrap();
        request
    });
    (addr, task)
}

#[tokio::test(flavor = "multi_thread")]
async fn half_close_still_delivers_the_whole_late_response() {
    let mut late = vec![0u8; 256 * 1024];
    aws_lc_rs::rand::fill(&mut late).unwrap();
    let (target, responder) = late_responder(late.clone()).await;
    let pair = PairTo::start(&target, &[], &[]).await;

    let mut s = pair.connect().await;
    s.write_all(b"GET everything").await.unwrap();
    // The target only answers once it sees EOF: the half-close must travel
    // through both sidecars while the other direction stays open.
    s.shutdown().await.unwrap();
    let started = Instant::now();
    let got = read_until_closed(&mut s).await;

    let request = tokio::time::timeout(DEADLINE, responder)
        .await
        .expect("target done")
        .unwrap();
    assert_eq!(request, b"GET everything");
    let mut want = b"early:GET everything".to_vec();
    want.extend_from_slice(&late);
    assert_eq!(got.len(), want.len(), "response length");
    assert!(got == want, "response bytes differ");
    assert!(started.elapsed() >= Duration::from_secs(2));
}

#[tokio::test(flavor = "multi_thread")]
async fn stalled_handshakes_do_not_delay_a_good_client_and_time_out() {
    const STALLED: usize = 50;
    let timeout = Duration::from_secs(1);
    let pair = Pair::start(&["--handshake-timeout", "1s"], &[]).await;
    let server = pair.server.addr("server");

    let mut stalled = Vec::new();
    for _ in 0..STALLED {
        let s = TcpStream::connect(&server).await.unwrap();
        stalled.push((s, Instant::now()));
    }
    // A good client through the pair: it must not queue behind any of the
    // stalled handshakes, so it completes well inside one handshake timeout.
    let started = Instant::now();
    let mut good = pair.connect().await;
    assert_eq!(roundtrip(&mut good, b"not delayed").await, b"not delayed");
    let took = started.elapsed();
    assert!(
        took < timeout,
        "good client took {took:?}: it waited behind stalled handshakes"
    );

    // Every stalled peer is closed, and only after the handshake timeout.
    for (i, (mut s, connected)) in stalled.into_iter().enumerate() {
        let got = read_until_closed(&mut s).await;
        assert!(got.is_empty(), "stalled peer {i} was sent {got:?}");
        let after = connected.elapsed();
        assert!(
            after >= timeout - Duration::from_millis(100),
            "stalled peer {i} closed after {after:?}, before the handshake timeout"
        );
    }
    eventually("50 timeout refusals logged", || {
        pair.server.warn_reason("timeout").len() >= STALLED
    })
    .await;
    let lines = pair.server.warn_lines(&["handshake refused"]);
    assert_eq!(lines.len(), STALLED, "{lines:#?}");
    assert!(lines
        .iter()
        .all(|l| l.contains("mtls_sidecar") && has_field(l, "reason", "timeout")));
    // The good connection is still served.
    assert_eq!(roundtrip(&mut good, b"still here").await, b"still here");
    assert_eq!(pair.echo.accepted(), 1);
}

/// A target that reads the request to EOF, then sends `ticks` one every
/// `every`, then goes quiet while holding its socket open.
async fn quiet_after_ticks(ticks: usize, every: Duration) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut request = Vec::new();
        s.read_to_end(&mut request).await.unwrap();
        for i in 0..ticks {
            tokio::time::sleep(every).await;
            if s.write_all(format!("tick{i};").as_bytes()).await.is_err() {
                return;
            }
        }
        // Never closes: only the sidecar's linger can end this connection.
        std::future::pending::<()>().await;
        drop(s);
    });
    addr
}

#[tokio::test(flavor = "multi_thread")]
async fn quiet_half_closed_connection_is_reaped_after_the_linger() {
    const TICKS: usize = 6;
    let every = Duration::from_millis(300);
    let linger = Duration::from_secs(1);
    let target = quiet_after_ticks(TICKS, every).await;
    let pair = PairTo::start(&target, &["--half-close-linger", "1s"], &[]).await;

    let mut s = pair.connect().await;
    s.write_all(b"request").await.unwrap();
    s.shutdown().await.unwrap();
    let started = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    let mut last_data = started;
    loop {
        let n = tokio::time::timeout(DEADLINE, s.read(&mut buf))
            .await
            .expect("half-closed quiet connection was never reaped")
            .unwrap_or(0);
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
        last_data = Instant::now();
    }
    let closed = Instant::now();
    // Traffic after the half-close keeps the connection alive (the ticks span
    // longer than the linger); the linger counts from the last activity.
    let want: String = (0..TICKS).map(|i| format!("tick{i};")).collect();
    assert_eq!(String::from_utf8_lossy(&got), want);
    assert!(started.elapsed() > linger);
    let quiet = closed - last_data;
    assert!(
        quiet >= linger - Duration::from_millis(100),
        "reaped after only {quiet:?} of quiet"
    );
    pair.server
        .wait_field("connection closed", "reason", "linger")
        .await;
}

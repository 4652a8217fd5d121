//! Forwarding through a client sidecar → server sidecar pair: bulk integrity,
//! per-frame flushing, half-close, stalled handshakes, and the reaping of a
//! half-closed connection that goes quiet.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_lc_rs::digest;
use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

const MIB: usize = 1024 * 1024;

/// The bulk transfer saturates both cores of a small machine; tests that
/// measure time against a one-second timeout do not run alongside it.
static BULK: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

#[tokio::test(flavor = "multi_thread")]
async fn sixty_four_mib_each_way_intact() {
    let _bulk = BULK.write().await;
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

/// A target that sends a banner and half-closes at once, then reads the
/// request to EOF. Yields the request it read.
async fn banner_then_listen() -> (String, JoinHandle<Vec<u8>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let task = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        s.write_all(b"banner").await.unwrap();
        s.shutdown().await.unwrap();
        let mut request = Vec::new();
        s.read_to_end(&mut request).await.unwrap();
        request
    });
    (addr, task)
}

#[tokio::test(flavor = "multi_thread")]
async fn target_half_close_leaves_the_request_direction_open() {
    let (target, listener) = banner_then_listen().await;
    let pair = PairTo::start(&target, &[], &[]).await;
    let mut s = pair.connect().await;
    // The target's EOF arrives as ours, through close_notify and FIN...
    assert_eq!(read_until_closed(&mut s).await, b"banner");
    // ...while what we send afterwards still reaches it.
    s.write_all(b"sent after the target's EOF").await.unwrap();
    s.shutdown().await.unwrap();
    let request = tokio::time::timeout(DEADLINE, listener)
        .await
        .expect("target got its EOF")
        .unwrap();
    assert_eq!(request, b"sent after the target's EOF");
}

#[tokio::test(flavor = "multi_thread")]
async fn peer_closing_without_close_notify_is_a_normal_disconnect() {
    let srv = ServerSide::start(&[]).await;
    let mut tls = srv.connect_good().await;
    assert_eq!(roundtrip(&mut tls, b"bye").await, b"bye");
    // Drop the TLS stream without close_notify: the TCP socket just closes.
    drop(tls);
    let line = srv
        .sidecar
        .wait_log(&["connection closed", "route=server"])
        .await;
    assert!(
        !line.contains("reason="),
        "an ordinary disconnect was logged as a failure: {line}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn stalled_handshakes_do_not_delay_a_good_client_and_time_out() {
    let _timed = BULK.read().await;
    const STALLED: usize = 50;
    // Two seconds rather than one: the good client must finish inside one
    // timeout even when a loaded 2-core machine starves it for a while.
    let timeout = Duration::from_secs(2);
    let pair = Pair::start(&["--handshake-timeout", "2s"], &[]).await;
    let server = pair.server.addr("server");
    // Warm both sidecars up (first-connection costs are not what we measure).
    let mut warm = pair.connect().await;
    assert_eq!(roundtrip(&mut warm, b"warm").await, b"warm");
    drop(warm);

    let mut stalled = Vec::new();
    for _ in 0..STALLED {
        // Taken before connecting: the sidecar's timer starts after this.
        let before = Instant::now();
        stalled.push((TcpStream::connect(&server).await.unwrap(), before));
    }
    // A good client through the pair: had it queued behind the stalled
    // handshakes it could not finish inside one handshake timeout.
    let started = Instant::now();
    let mut good = pair.connect().await;
    assert_eq!(roundtrip(&mut good, b"not delayed").await, b"not delayed");
    let took = started.elapsed();
    assert!(
        took < timeout,
        "good client took {took:?}: it waited behind stalled handshakes"
    );

    // Every stalled peer is closed, and not before the handshake timeout.
    for (i, (mut s, before)) in stalled.into_iter().enumerate() {
        let got = read_until_closed(&mut s).await;
        assert!(got.is_empty(), "stalled peer {i} was sent {got:?}");
        let after = before.elapsed();
        assert!(
            after >= timeout,
            "stalled peer {i} closed after {after:?}, before the handshake timeout"
        );
    }
    // Refusal lines are rate-limited per reason (docs/logging.md): the
    // lines plus the "suppressed N" summaries account for every one.
    eventually("50 timeout refusals accounted for", || {
        let logged = pair.server.warn_lines(&["handshake refused"]);
        let suppressed: u64 = pair
            .server
            .warn_lines(&["handshake refusals suppressed"])
            .iter()
            .filter(|l| has_field(l, "reason", "timeout"))
            .map(|l| field(l, "suppressed").parse::<u64>().unwrap())
            .sum();
        logged.len() as u64 + suppressed == STALLED as u64
    })
    .await;
    let lines = pair.server.warn_lines(&["handshake refused"]);
    assert!(lines.len() <= 2 * 10, "{lines:#?}");
    assert!(lines
        .iter()
        .all(|l| l.contains("mtls_sidecar") && has_field(l, "reason", "timeout")));
    // The good connection is still served.
    assert_eq!(roundtrip(&mut good, b"still here").await, b"still here");
    assert_eq!(pair.echo.accepted(), 2);
}

/// A target that reads the request to EOF, then sends `ticks` one every
/// `every`, then goes quiet while holding its socket open. `last_write` is
/// set just after the last tick was written.
async fn quiet_after_ticks(
    ticks: usize,
    every: Duration,
    last_write: Arc<Mutex<Option<Instant>>>,
) -> String {
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
        *last_write.lock().unwrap() = Some(Instant::now());
        // Never closes: only the sidecar's linger can end this connection.
        std::future::pending::<()>().await;
        drop(s);
    });
    addr
}

#[tokio::test(flavor = "multi_thread")]
async fn quiet_half_closed_connection_is_reaped_after_the_linger() {
    let _timed = BULK.read().await;
    // The ticks span longer than the linger, each gap far shorter than it.
    const TICKS: usize = 10;
    let every = Duration::from_millis(250);
    let linger = Duration::from_secs(2);
    let last_write = Arc::new(Mutex::new(None));
    let target = quiet_after_ticks(TICKS, every, last_write.clone()).await;
    let pair = PairTo::start(&target, &["--half-close-linger", "2s"], &[]).await;

    let mut s = pair.connect().await;
    s.write_all(b"request").await.unwrap();
    s.shutdown().await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    loop {
        let n = tokio::time::timeout(DEADLINE, s.read(&mut buf))
            .await
            .expect("half-closed quiet connection was never reaped")
            .unwrap_or(0);
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    let closed = Instant::now();
    // Traffic after the half-close keeps the connection alive: the linger
    // counts from the last activity, not from the half-close.
    let want: String = (0..TICKS).map(|i| format!("tick{i};")).collect();
    assert_eq!(String::from_utf8_lossy(&got), want);
    let last = last_write.lock().unwrap().expect("target wrote every tick");
    let quiet = closed - last;
    assert!(quiet >= linger, "reaped after only {quiet:?} of quiet");
    pair.server
        .wait_field("connection closed", "reason", "linger")
        .await;
}

/// Two ends of a loopback TCP connection.
async fn tcp_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (a, b) = tokio::join!(TcpStream::connect(listener.local_addr().unwrap()), async {
        listener.accept().await.unwrap().0
    });
    (a.unwrap(), b)
}

#[tokio::test(flavor = "multi_thread")]
async fn forward_flushes_every_chunk_through_buffering_writers() {
    // Sockets and tokio-rustls write through at once, so the pair above
    // cannot tell whether the proxy flushes. Here both sides of `forward`
    // buffer writes (8 KiB, like a TLS writer holding plaintext): a 10-byte
    // frame only comes out if the chunk is flushed before the next read.
    let (mut app, peer) = tcp_pair().await;
    let (target, mut backend) = tcp_pair().await;
    let totals = Arc::new(mtls_sidecar::forward::Totals::default());
    let t = totals.clone();
    let proxy = tokio::spawn(async move {
        let (up, down) = (metrics::Counter::noop(), metrics::Counter::noop());
        mtls_sidecar::forward::forward(
            tokio::io::BufStream::new(peer),
            tokio::io::BufStream::new(target),
            &up,
            &down,
            &t,
            Duration::from_secs(60),
        )
        .await
    });
    for i in 0..100u32 {
        let frame = format!("{i:010}");
        app.write_all(frame.as_bytes()).await.unwrap();
        let mut got = [0u8; 10];
        tokio::time::timeout(DEADLINE, backend.read_exact(&mut got))
            .await
            .expect("request stranded in the proxy")
            .unwrap();
        assert_eq!(&got, frame.as_bytes());
        backend.write_all(&got).await.unwrap();
        tokio::time::timeout(DEADLINE, app.read_exact(&mut got))
            .await
            .expect("reply stranded in the proxy")
            .unwrap();
        assert_eq!(&got, frame.as_bytes());
    }
    // Bytes are counted as they flow, not only when the connection ends.
    // (A chunk is counted right after its flush, so allow a moment.)
    use std::sync::atomic::Ordering::Relaxed;
    eventually("1000 bytes counted each way", || {
        totals.to_target.load(Relaxed) == 1000 && totals.from_target.load(Relaxed) == 1000
    })
    .await;
    assert!(!proxy.is_finished());
    drop(app);
    drop(backend);
    let reason = tokio::time::timeout(DEADLINE, proxy)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reason.as_str(), "completed");
}

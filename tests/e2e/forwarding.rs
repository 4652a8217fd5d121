//! Forwarding through a client sidecar → server sidecar pair: bulk integrity,
//! per-frame flushing and `TCP_NODELAY`, half-close, stalled handshakes, and
//! the reaping of a half-closed connection that goes quiet.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_lc_rs::digest;
use common::*;
use mtls_sidecar::reason::CloseReason;
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

/// Every connected TCP socket of process `pid`, duplicated into this one
/// (`pidfd_getfd`), so its options can be read.
fn tcp_sockets_of(pid: u32) -> Vec<std::os::fd::OwnedFd> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    // SAFETY: pidfd_open(2) on a child pid; the result is checked before use.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    assert!(
        pidfd >= 0,
        "pidfd_open: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: `pidfd` was just checked to be a new descriptor nobody else owns.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as i32) };
    let mut sockets = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap() {
        let entry = entry.unwrap();
        let Ok(link) = std::fs::read_link(entry.path()) else {
            continue; // closed meanwhile
        };
        if !link.to_string_lossy().starts_with("socket:") {
            continue;
        }
        let target: libc::c_int = entry.file_name().to_str().unwrap().parse().unwrap();
        // SAFETY: pidfd_getfd(2) on a pidfd this function owns; the result is checked before use.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), target, 0) };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            assert_eq!(e.raw_os_error(), Some(libc::EBADF), "pidfd_getfd: {e}");
            continue; // closed meanwhile
        }
        // SAFETY: `fd` was just checked to be a new descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        let domain = sockopt(&fd, libc::SOL_SOCKET, libc::SO_DOMAIN);
        if (domain == libc::AF_INET || domain == libc::AF_INET6)
            && sockopt(&fd, libc::SOL_SOCKET, libc::SO_TYPE) == libc::SOCK_STREAM
            && sockopt(&fd, libc::SOL_SOCKET, libc::SO_ACCEPTCONN) == 0
        {
            sockets.push(fd);
        }
    }
    sockets
}

/// An integer socket option.
fn sockopt(fd: &std::os::fd::OwnedFd, level: libc::c_int, name: libc::c_int) -> libc::c_int {
    use std::os::fd::AsRawFd;
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `v` and `len` are live locals of the sizes passed; `fd` is open.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    assert_eq!(rc, 0, "getsockopt: {}", std::io::Error::last_os_error());
    v
}

/// `n` ten-byte request/reply round trips on `s`; how long they took.
async fn ping_pongs<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    s: &mut S,
    n: u32,
) -> Duration {
    let started = Instant::now();
    for i in 0..n {
        let frame = format!("{i:010}");
        assert_eq!(frame.len(), 10);
        // Nothing more is written until this frame's reply is read: a proxy
        // that strands a small write in a buffer times out here.
        let reply = roundtrip(s, frame.as_bytes()).await;
        assert_eq!(reply, frame.as_bytes(), "frame {i}");
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_ten_byte_ping_pongs() {
    let _timed = BULK.read().await;
    // The same exchange straight to an echo, for scale.
    let direct_echo = echo_target().await;
    let mut direct = TcpStream::connect(direct_echo.addr).await.unwrap();
    direct.set_nodelay(true).unwrap();
    let direct = ping_pongs(&mut direct, 1000).await;

    let pair = Pair::start(&[], &[]).await;
    let mut s = pair.connect().await;
    let took = ping_pongs(&mut s, 1000).await;
    assert_eq!(pair.echo.accepted(), 1);
    // A hop that waited for a delayed ACK (Nagle) would cost ~40 ms a frame,
    // 40 s in all; half of that is far beyond a busy machine's slowest run.
    assert!(
        took < Duration::from_secs(20),
        "1000 round trips took {took:?} through the pair ({direct:?} direct): a stall per frame"
    );

    // Every TCP socket each sidecar holds for this connection (its
    // plaintext side and its TLS side) has TCP_NODELAY set.
    for (sc, name) in [(&pair.client, "client"), (&pair.server, "server")] {
        let sockets = tcp_sockets_of(sc.pid());
        assert_eq!(sockets.len(), 2, "{name} sidecar's connected TCP sockets");
        for fd in &sockets {
            let on = sockopt(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY);
            assert_ne!(on, 0, "a {name} sidecar socket lacks TCP_NODELAY");
        }
    }
    eprintln!("1000 round trips: {took:?} through the pair, {direct:?} direct");
}

/// A target that reads the request to EOF, answers at once, then answers
/// again when `go` fires and closes. Yields the request it read.
async fn late_responder(
    late: Vec<u8>,
    go: tokio::sync::oneshot::Receiver<()>,
) -> (String, JoinHandle<Vec<u8>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let task = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut request = Vec::new();
        s.read_to_end(&mut request).await.unwrap();
        s.write_all(b"early:").await.unwrap();
        s.write_all(&request).await.unwrap();
        // A slow backend: the rest comes only once the test holds the first
        // part, which therefore crossed both sidecars on its own.
        go.await.unwrap();
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
    let (go, gate) = tokio::sync::oneshot::channel();
    let (target, responder) = late_responder(late.clone(), gate).await;
    let pair = PairTo::start(&target, &[], &[]).await;

    let mut s = pair.connect().await;
    s.write_all(b"GET everything").await.unwrap();
    // The target only answers once it sees EOF: the half-close must travel
    // through both sidecars while the other direction stays open.
    s.shutdown().await.unwrap();
    // The first answer arrives while the target still holds its side open
    // (the rest is sent only after this), not when the connection ends.
    let mut early = vec![0u8; b"early:GET everything".len()];
    tokio::time::timeout(DEADLINE, s.read_exact(&mut early))
        .await
        .expect("the early answer is forwarded before the target closes")
        .unwrap();
    assert_eq!(early, b"early:GET everything");
    go.send(()).unwrap();
    let got = read_until_closed(&mut s).await;

    let request = tokio::time::timeout(DEADLINE, responder)
        .await
        .expect("target done")
        .unwrap();
    assert_eq!(request, b"GET everything");
    assert_eq!(got.len(), late.len(), "late response length");
    assert!(got == late, "late response bytes differ");
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
async fn stalled_handshakes_do_not_delay_a_good_client() {
    const STALLED: usize = 50;
    // A handshake timeout beyond the test: the stalled peers are all still
    // pending while the good client is served, so no timing decides this.
    let pair = Pair::start(&["--handshake-timeout", "1h"], &[]).await;
    let server = pair.server.addr("server");
    let mut stalled = Vec::new();
    for _ in 0..STALLED {
        stalled.push(TcpStream::connect(&server).await.unwrap());
    }
    // Had the good client queued behind them, it would wait for the hour.
    let mut good = pair.connect().await;
    assert_eq!(roundtrip(&mut good, b"not delayed").await, b"not delayed");
    assert!(
        pair.server.warn_lines(&["handshake refused"]).is_empty(),
        "{:#?}",
        pair.server.logs()
    );
    // Every stalled peer is still pending: nothing arrived, nothing closed.
    for (i, s) in stalled.iter().enumerate() {
        use std::os::fd::AsRawFd;
        let mut buf = [0u8; 1];
        // Asks the kernel itself: EAGAIN, not EOF (0) nor data.
        // SAFETY: `buf` is a live 1-byte buffer and the length passed is 1; `s` is open.
        let n = unsafe {
            libc::recv(
                s.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                1,
                libc::MSG_DONTWAIT | libc::MSG_PEEK,
            )
        };
        let e = std::io::Error::last_os_error();
        assert!(
            n < 0 && e.kind() == std::io::ErrorKind::WouldBlock,
            "stalled peer {i} was answered or closed: {n} {e}"
        );
    }
    assert_eq!(pair.echo.accepted(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn stalled_handshakes_time_out() {
    const STALLED: usize = 50;
    let timeout = Duration::from_secs(1);
    let srv = ServerSide::start(&["--handshake-timeout", "1s"]).await;
    let mut stalled = Vec::new();
    for _ in 0..STALLED {
        // Taken before connecting: the sidecar's timer starts after this.
        let before = Instant::now();
        stalled.push((TcpStream::connect(&srv.addr).await.unwrap(), before));
    }
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
        let logged: Vec<_> = srv
            .sidecar
            .warn_lines(&["handshake refused"])
            .into_iter()
            .filter(|l| has_field(l, "reason", "timeout"))
            .collect();
        let suppressed: u64 = srv
            .sidecar
            .warn_lines(&["handshake refusals suppressed"])
            .iter()
            .filter(|l| has_field(l, "reason", "timeout"))
            .map(|l| field(l, "suppressed").parse::<u64>().unwrap())
            .sum();
        logged.len() as u64 + suppressed == STALLED as u64
    })
    .await;
    let lines = srv.sidecar.warn_lines(&["handshake refused"]);
    assert!(lines.len() <= 2 * 10, "{lines:#?}");
    assert!(lines
        .iter()
        .all(|l| l.contains("mtls_sidecar") && has_field(l, "reason", "timeout")));
    // The port still serves.
    let mut good = srv.connect_good().await;
    assert_eq!(roundtrip(&mut good, b"still here").await, b"still here");
    assert_eq!(srv.echo.accepted(), 1);
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
            // Taken before the write: the sidecar can only see the bytes
            // after it. (Taken after, a descheduled thread on a loaded
            // machine made the quiet look up to 2 ms shorter than it was.)
            let before = Instant::now();
            if s.write_all(format!("tick{i};").as_bytes()).await.is_err() {
                return;
            }
            *last_write.lock().unwrap() = Some(before);
        }
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
    let pair = PairTo::start(
        &target,
        &["--half-close-linger", "2s", "--admin", "127.0.0.1:0"],
        &[],
    )
    .await;

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
    pair.server.wait_closed("server", "linger", 1.0).await;
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
    let totals = Arc::new(mtls_sidecar::proxy::forward::Totals::default());
    let t = totals.clone();
    let proxy = tokio::spawn(async move {
        let (up, down) = (metrics::Counter::noop(), metrics::Counter::noop());
        mtls_sidecar::proxy::forward::forward(
            tokio::io::BufStream::new(peer),
            tokio::io::BufStream::new(target),
            &up,
            &down,
            &t,
            Duration::from_secs(60),
            None,
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

/// `forward` over in-memory pipes on a paused clock: (what the test keeps
/// of the peer side, of the target side, the forwarding task).
fn timed_forward(
    linger: Duration,
    deadline: Option<mtls_sidecar::proxy::forward::Deadline>,
) -> (
    tokio::io::DuplexStream,
    tokio::io::DuplexStream,
    tokio::task::JoinHandle<mtls_sidecar::reason::CloseReason>,
) {
    let (app, peer) = tokio::io::duplex(1024);
    let (target, backend) = tokio::io::duplex(1024);
    let task = tokio::spawn(async move {
        let totals = mtls_sidecar::proxy::forward::Totals::default();
        let (up, down) = (metrics::Counter::noop(), metrics::Counter::noop());
        mtls_sidecar::proxy::forward::forward(peer, target, &up, &down, &totals, linger, deadline)
            .await
    });
    (app, backend, task)
}

/// How `forward` ended, failing if it has not within a (paused) day.
async fn ended(task: tokio::task::JoinHandle<CloseReason>) -> CloseReason {
    tokio::time::timeout(Duration::from_secs(24 * 3600), task)
        .await
        .expect("forward never ended")
        .unwrap()
}

fn deadline_in(d: Duration, reason: CloseReason) -> Option<mtls_sidecar::proxy::forward::Deadline> {
    Some(mtls_sidecar::proxy::forward::Deadline {
        at: tokio::time::Instant::now() + d,
        reason,
    })
}

#[tokio::test(start_paused = true)]
async fn an_idle_connection_is_closed_at_its_deadline_with_its_reason() {
    let (_app, _backend, task) = timed_forward(
        Duration::from_secs(60),
        deadline_in(Duration::from_secs(5), CloseReason::Expired),
    );
    let started = tokio::time::Instant::now();
    let reason = ended(task).await;
    assert_eq!(reason, CloseReason::Expired);
    assert_eq!(started.elapsed().as_secs(), 5);
}

#[tokio::test(start_paused = true)]
async fn a_busy_connection_is_closed_at_its_deadline_too() {
    let (mut app, mut backend, task) = timed_forward(
        Duration::from_secs(60),
        deadline_in(Duration::from_secs(5), CloseReason::Lifetime),
    );
    let mut buf = [0u8; 4];
    for _ in 0..20 {
        if task.is_finished() {
            break;
        }
        let _ = app.write_all(b"ping").await;
        let _ = backend.read_exact(&mut buf).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(ended(task).await, CloseReason::Lifetime);
}

#[tokio::test(start_paused = true)]
async fn the_deadline_cuts_a_half_close_linger_short() {
    let (mut app, _backend, task) = timed_forward(
        Duration::from_secs(30),
        deadline_in(Duration::from_secs(5), CloseReason::Expired),
    );
    app.shutdown().await.unwrap(); // one direction ends: the linger starts
    let started = tokio::time::Instant::now();
    assert_eq!(ended(task).await, CloseReason::Expired);
    assert_eq!(started.elapsed().as_secs(), 5);
}

#[tokio::test(start_paused = true)]
async fn the_linger_still_ends_a_quiet_half_closed_connection_before_a_later_deadline() {
    let (mut app, _backend, task) = timed_forward(
        Duration::from_secs(2),
        deadline_in(Duration::from_secs(3600), CloseReason::Expired),
    );
    app.shutdown().await.unwrap();
    let started = tokio::time::Instant::now();
    assert_eq!(ended(task).await, CloseReason::Linger);
    assert_eq!(started.elapsed().as_secs(), 2);
}

#[tokio::test(start_paused = true)]
async fn without_a_deadline_an_idle_connection_stays_open() {
    let (_app, _backend, task) = timed_forward(Duration::from_secs(2), None);
    tokio::time::sleep(Duration::from_secs(24 * 3600)).await;
    assert!(!task.is_finished());
    task.abort();
}

//! Moving bytes both ways between the two sides of a connection. Every chunk
//! read is written and flushed before the next read waits (a TLS writer
//! buffers plaintext into records and would otherwise strand a message), EOF
//! on one side half-closes the other, and a half-closed connection that goes
//! quiet is reaped after a linger.

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use metrics::Counter;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::time::Instant;

use crate::reason::CloseReason;

/// Bytes per read: one full TLS record of plaintext.
pub const CHUNK: usize = 16 * 1024;

/// Per-direction byte counters for one connection.
#[derive(Debug, Default)]
pub struct Totals {
    pub to_target: AtomicU64,
    pub from_target: AtomicU64,
}

/// Which side of the proxy an I/O error came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Peer,
    Target,
}

/// A direction's counters: the route metric and the connection total.
struct Tally<'a> {
    metric: &'a Counter,
    total: &'a AtomicU64,
    activity: &'a AtomicU64,
    start: Instant,
}

impl Tally<'_> {
    fn add(&self, n: usize) {
        self.metric.increment(n as u64);
        self.total.fetch_add(n as u64, Ordering::Relaxed);
        self.activity
            .store(self.start.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
}

/// Polls one read into `slot`, allocating the buffer if it is missing and
/// dropping it if the read has to wait.
fn read_lazily<R: AsyncRead + Unpin>(
    src: &mut R,
    slot: &mut Option<Box<[u8]>>,
    cx: &mut Context<'_>,
) -> Poll<io::Result<usize>> {
    let buf = slot.get_or_insert_with(|| vec![0u8; CHUNK].into_boxed_slice());
    let mut rb = ReadBuf::new(buf);
    match Pin::new(src).poll_read(cx, &mut rb) {
        Poll::Ready(r) => Poll::Ready(r.map(|()| rb.filled().len())),
        Poll::Pending => {
            *slot = None;
            Poll::Pending
        }
    }
}

/// Reads `src` until EOF, writing and flushing each chunk to `dst`, then
/// shuts `dst` down. Errors say which side failed.
async fn pump<R, W>(mut src: R, mut dst: W, src_side: Side, tally: Tally<'_>) -> Result<(), Side>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let dst_side = match src_side {
        Side::Peer => Side::Target,
        Side::Target => Side::Peer,
    };
    // The copy buffer exists only while bytes flow: it is allocated for a
    // read and released whenever a read has to wait, so an idle connection
    // holds none.
    let mut slot: Option<Box<[u8]>> = None;
    loop {
        let n = match poll_fn(|cx| read_lazily(&mut src, &mut slot, cx)).await {
            Ok(n) => n,
            // A TLS peer closing without close_notify is an ordinary close
            // for a byte-stream proxy: treat it as EOF.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => 0,
            Err(_) => return Err(src_side),
        };
        if n == 0 {
            // The other side may already be gone; a failed shutdown then
            // changes nothing for the direction still flowing.
            let _ = dst.shutdown().await;
            return Ok(());
        }
        let buf = slot.as_deref().unwrap_or_default();
        dst.write_all(&buf[..n]).await.map_err(|_| dst_side)?;
        dst.flush().await.map_err(|_| dst_side)?;
        tally.add(n);
    }
}

/// Forwards between `peer` (the side that connected to us, or the TLS side)
/// and `target` until both directions end, either side fails, or a
/// half-closed connection stays quiet for `linger`.
pub async fn forward<P, T>(
    peer: P,
    target: T,
    to_target: &Counter,
    from_target: &Counter,
    totals: &Totals,
    linger: Duration,
) -> CloseReason
where
    P: AsyncRead + AsyncWrite + Unpin,
    T: AsyncRead + AsyncWrite + Unpin,
{
    let (peer_r, peer_w) = tokio::io::split(peer);
    let (target_r, target_w) = tokio::io::split(target);
    let activity = AtomicU64::new(0);
    let start = Instant::now();
    let up = pump(
        peer_r,
        target_w,
        Side::Peer,
        Tally {
            metric: to_target,
            total: &totals.to_target,
            activity: &activity,
            start,
        },
    );
    let down = pump(
        target_r,
        peer_w,
        Side::Target,
        Tally {
            metric: from_target,
            total: &totals.from_target,
            activity: &activity,
            start,
        },
    );
    tokio::pin!(up, down);
    let (mut up_done, mut down_done) = (false, false);
    let linger_timer = tokio::time::sleep(linger);
    tokio::pin!(linger_timer);
    let error = |side| match side {
        Side::Peer => CloseReason::PeerError,
        Side::Target => CloseReason::TargetError,
    };
    loop {
        tokio::select! {
            r = &mut up, if !up_done => {
                if let Err(side) = r { return error(side); }
                up_done = true;
                linger_timer.as_mut().reset(Instant::now() + linger);
            }
            r = &mut down, if !down_done => {
                if let Err(side) = r { return error(side); }
                down_done = true;
                linger_timer.as_mut().reset(Instant::now() + linger);
            }
            _ = &mut linger_timer, if up_done != down_done => {
                let last = start + Duration::from_millis(activity.load(Ordering::Relaxed));
                let quiet_until = last.max(linger_timer.deadline() - linger) + linger;
                if quiet_until <= Instant::now() {
                    return CloseReason::Linger;
                }
                linger_timer.as_mut().reset(quiet_until);
            }
        }
        if up_done && down_done {
            return CloseReason::Completed;
        }
    }
}

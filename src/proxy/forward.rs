//! Moving bytes both ways between the two sides of a connection. Every chunk
//! read is written and flushed before the next read waits (a TLS writer
//! buffers plaintext into records and would otherwise strand a message), EOF
//! on one side half-closes the other, and a half-closed connection that goes
//! quiet is reaped after a linger.

use std::future::{poll_fn, Future};
use std::io;
use std::pin::pin;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use metrics::Counter;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::time::Instant;

use crate::reason::CloseReason;

/// Copy buffer size: four full TLS records of plaintext (16 KiB each).
/// What a source has ready at once is gathered up to this and forwarded in
/// one write, so a bulk stream costs one read and one write syscall per
/// 64 KiB on the plaintext side, while a small frame still goes out alone.
pub const CHUNK: usize = 64 * 1024;

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
        // Microseconds since the start (u64 holds 584,000 years of them):
        // in milliseconds the floor made the linger up to 1 ms short.
        let since = u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.activity.store(since, Ordering::Relaxed);
    }
}

/// One direction's copy: read a chunk, write it all, flush, repeat; on EOF
/// shut the writer down. A plain state machine rather than an `async fn`,
/// so both directions are polled by one future over the two streams
/// without splitting them (no shared halves to lock, nothing moved to the
/// heap).
struct Pump {
    src_side: Side,
    /// The copy buffer exists only while bytes flow: it is allocated for a
    /// read and released whenever a read has to wait, so an idle
    /// connection holds none.
    /// Its length is the bytes read and not yet forwarded; reads fill its
    /// spare capacity, so it is never zeroed.
    buf: Vec<u8>,
    /// How many bytes of `buf` are written so far.
    written: usize,
    /// How the source ended, once it has: acted on after the bytes read
    /// before it are written.
    end: Option<End>,
    state: State,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Eof,
    Error,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Reading,
    Writing,
    Flushing,
    ShuttingDown,
    Done,
}

impl Pump {
    fn new(src_side: Side) -> Pump {
        Pump {
            src_side,
            buf: Vec::new(),
            written: 0,
            end: None,
            state: State::Reading,
        }
    }

    /// After a chunk (or an empty read): carry on reading, start the
    /// shutdown on EOF, or fail with the source's error.
    fn after_chunk(&mut self) -> Option<Poll<Result<(), Side>>> {
        match self.end {
            None => self.state = State::Reading,
            Some(End::Eof) => {
                self.buf = Vec::new();
                self.state = State::ShuttingDown;
            }
            Some(End::Error) => return Some(Poll::Ready(Err(self.src_side))),
        }
        None
    }

    fn dst_side(&self) -> Side {
        match self.src_side {
            Side::Peer => Side::Target,
            Side::Target => Side::Peer,
        }
    }

    /// Drives the copy from `src` to `dst` until it has to wait (`Pending`),
    /// reaches EOF and has shut `dst` down (`Ready(Ok)`), or fails
    /// (`Ready(Err(side))`).
    fn poll<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        src: &mut R,
        dst: &mut W,
        tally: &Tally<'_>,
    ) -> Poll<Result<(), Side>>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        loop {
            match self.state {
                State::Reading => {
                    // Gather what the source has ready (up to a full
                    // buffer), then write and flush it before waiting.
                    if self.buf.capacity() == 0 {
                        self.buf = Vec::with_capacity(CHUNK);
                    }
                    while self.buf.len() < CHUNK && self.end.is_none() {
                        match pin!(src.read_buf(&mut self.buf)).poll(cx) {
                            Poll::Ready(Ok(0)) => self.end = Some(End::Eof),
                            Poll::Ready(Ok(_)) => {}
                            // A TLS peer closing without close_notify is an
                            // ordinary close for a byte-stream proxy: EOF.
                            Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => {
                                self.end = Some(End::Eof)
                            }
                            Poll::Ready(Err(_)) => self.end = Some(End::Error),
                            Poll::Pending => break,
                        }
                    }
                    if !self.buf.is_empty() {
                        self.written = 0;
                        self.state = State::Writing;
                        continue;
                    }
                    if self.end.is_some() {
                        if let Some(end) = self.after_chunk() {
                            return end;
                        }
                        continue;
                    }
                    // Nothing to forward: wait without holding the buffer.
                    self.buf = Vec::new();
                    return Poll::Pending;
                }
                State::Writing => {
                    while self.written < self.buf.len() {
                        let chunk = &self.buf[self.written..];
                        match Pin::new(&mut *dst).poll_write(cx, chunk) {
                            Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => {
                                return Poll::Ready(Err(self.dst_side()))
                            }
                            Poll::Ready(Ok(k)) => self.written += k,
                            Poll::Pending => return Poll::Pending,
                        }
                    }
                    self.state = State::Flushing;
                }
                State::Flushing => match Pin::new(&mut *dst).poll_flush(cx) {
                    Poll::Ready(Ok(())) => {
                        tally.add(self.buf.len());
                        self.buf.clear();
                        if let Some(end) = self.after_chunk() {
                            return end;
                        }
                    }
                    Poll::Ready(Err(_)) => return Poll::Ready(Err(self.dst_side())),
                    Poll::Pending => return Poll::Pending,
                },
                State::ShuttingDown => {
                    // The other side may already be gone; a failed shutdown
                    // then changes nothing for the direction still flowing.
                    if Pin::new(&mut *dst).poll_shutdown(cx).is_pending() {
                        return Poll::Pending;
                    }
                    self.state = State::Done;
                }
                State::Done => return Poll::Ready(Ok(())),
            }
        }
    }
}

/// When a connection must end whatever its traffic (its peer
/// certificate's expiry, or `--max-connection-lifetime`), and the reason
/// it is closed with then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    pub at: Instant,
    pub reason: CloseReason,
}

/// Forwards between `peer` (the side that connected to us, or the TLS side)
/// and `target` until both directions end, either side fails, a
/// half-closed connection stays quiet for `linger`, or `deadline` comes.
/// One timer serves both the deadline and the linger: it is laid out in
/// every live connection's task (~110 bytes each), and the earlier of the
/// two is the one that fires.
pub async fn forward<P, T>(
    mut peer: P,
    mut target: T,
    to_target: &Counter,
    from_target: &Counter,
    totals: &Totals,
    linger: Duration,
    deadline: Option<Deadline>,
) -> CloseReason
where
    P: AsyncRead + AsyncWrite + Unpin,
    T: AsyncRead + AsyncWrite + Unpin,
{
    let activity = AtomicU64::new(0);
    let start = Instant::now();
    let up_tally = Tally {
        metric: to_target,
        total: &totals.to_target,
        activity: &activity,
        start,
    };
    let down_tally = Tally {
        metric: from_target,
        total: &totals.from_target,
        activity: &activity,
        start,
    };
    let mut up = Pump::new(Side::Peer);
    let mut down = Pump::new(Side::Target);
    // When one direction finished: from then on the other has `linger` of
    // quiet to live.
    let mut half_closed: Option<Instant> = None;
    // Never later than the deadline.
    let capped = |t: Instant| deadline.map_or(t, |d| d.at.min(t));
    let timer = tokio::time::sleep_until(deadline.map_or(start, |d| d.at));
    tokio::pin!(timer);
    let error = |side| match side {
        Side::Peer => CloseReason::PeerError,
        Side::Target => CloseReason::TargetError,
    };
    poll_fn(|cx| {
        for (pump, src_is_peer) in [(&mut up, true), (&mut down, false)] {
            if pump.state == State::Done {
                continue;
            }
            let r = if src_is_peer {
                pump.poll(cx, &mut peer, &mut target, &up_tally)
            } else {
                pump.poll(cx, &mut target, &mut peer, &down_tally)
            };
            match r {
                Poll::Ready(Err(side)) => return Poll::Ready(error(side)),
                Poll::Ready(Ok(())) => {
                    let now = Instant::now();
                    half_closed = Some(now);
                    timer.as_mut().reset(capped(now + linger));
                }
                Poll::Pending => {}
            }
        }
        if up.state == State::Done && down.state == State::Done {
            return Poll::Ready(CloseReason::Completed);
        }
        if half_closed.is_none() && deadline.is_none() {
            // Nothing to time yet: the timer is not armed.
            return Poll::Pending;
        }
        while timer.as_mut().poll(cx).is_ready() {
            let now = Instant::now();
            if let Some(d) = deadline.filter(|d| d.at <= now) {
                return Poll::Ready(d.reason);
            }
            let next = match half_closed {
                Some(closed) => {
                    let last = start
                        .checked_add(Duration::from_micros(activity.load(Ordering::Relaxed)))
                        .unwrap_or(now);
                    let quiet_until = last.max(closed) + linger;
                    if quiet_until <= now {
                        return Poll::Ready(CloseReason::Linger);
                    }
                    quiet_until
                }
                // Fired before the deadline (a timer never does): wait on.
                None => now + linger,
            };
            timer.as_mut().reset(capped(next));
        }
        Poll::Pending
    })
    .await
}

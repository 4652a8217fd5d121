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
    /// How many bytes of `buf` are written so far (at most [`CHUNK`]: a
    /// `u32` keeps every live connection's task 16 bytes smaller).
    written: u32,
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
                    while (self.written as usize) < self.buf.len() {
                        let chunk = &self.buf[self.written as usize..];
                        match Pin::new(&mut *dst).poll_write(cx, chunk) {
                            Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => {
                                return Poll::Ready(Err(self.dst_side()))
                            }
                            Poll::Ready(Ok(k)) => {
                                let k = u32::try_from(k).unwrap_or(u32::MAX);
                                self.written = self.written.saturating_add(k);
                            }
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
/// half-closed connection stays quiet for `linger`, or `deadline` comes:
/// a [`Forwarder`] driven to its end.
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
    let mut copy = Forwarder::new(deadline);
    let counters = Counters {
        to_target,
        from_target,
        totals,
        linger,
    };
    poll_fn(|cx| copy.poll(cx, &mut peer, &mut target, &counters)).await
}

/// Where a connection's forwarded bytes are counted: the route's metrics
/// and the connection's own totals.
pub struct Counters<'a> {
    pub to_target: &'a Counter,
    pub from_target: &'a Counter,
    pub totals: &'a Totals,
    /// The route's half-close linger, lent with the counters rather than
    /// kept in every connection's [`Forwarder`].
    pub linger: Duration,
}

/// The state of one connection's copy both ways, polled with the two
/// streams and the counters lent to it each time rather than holding them:
/// a connection's task keeps it beside the streams it owns, so the copy
/// adds only its own state to every live connection (an `async fn` over
/// the same work laid its arguments and the references between its locals
/// out again, ~230 bytes more per connection).
///
/// One timer serves both the deadline and the linger, made when first
/// needed and boxed (a timer is ~110 bytes, and pins), and the earlier of
/// the two is the one that fires.
pub struct Forwarder {
    up: Pump,
    down: Pump,
    /// The last forwarded chunk, in microseconds since `start`.
    activity: AtomicU64,
    start: Instant,
    /// One direction finished: from then on the other has the linger of
    /// quiet to live, counted from the last chunk or the half-close,
    /// whichever came later (the half-close is noted in `activity`).
    half_closed: bool,
    deadline: Option<Deadline>,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Forwarder {
    /// A copy not yet started; its clock starts now. Needs the runtime
    /// whose timer it will use only once it is polled.
    pub fn new(deadline: Option<Deadline>) -> Forwarder {
        Forwarder {
            up: Pump::new(Side::Peer),
            down: Pump::new(Side::Target),
            activity: AtomicU64::new(0),
            start: Instant::now(),
            half_closed: false,
            deadline,
            timer: None,
        }
    }

    /// `t`, never later than the deadline.
    fn capped(&self, t: Instant) -> Instant {
        self.deadline.map_or(t, |d| d.at.min(t))
    }

    /// Arms the timer for `at`, making it on first use.
    fn arm(&mut self, at: Instant) {
        match &mut self.timer {
            Some(timer) => timer.as_mut().reset(at),
            None => self.timer = Some(Box::pin(tokio::time::sleep_until(at))),
        }
    }

    /// Drives both directions until the copy ends (`Ready` with the
    /// reason) or has to wait.
    pub fn poll<P, T>(
        &mut self,
        cx: &mut Context<'_>,
        peer: &mut P,
        target: &mut T,
        counters: &Counters<'_>,
    ) -> Poll<CloseReason>
    where
        P: AsyncRead + AsyncWrite + Unpin,
        T: AsyncRead + AsyncWrite + Unpin,
    {
        if self.timer.is_none() {
            if let Some(d) = self.deadline {
                self.arm(d.at);
            }
        }
        let up_tally = Tally {
            metric: counters.to_target,
            total: &counters.totals.to_target,
            activity: &self.activity,
            start: self.start,
        };
        let down_tally = Tally {
            metric: counters.from_target,
            total: &counters.totals.from_target,
            activity: &self.activity,
            start: self.start,
        };
        let mut ended = false;
        for (pump, src_is_peer) in [(&mut self.up, true), (&mut self.down, false)] {
            if pump.state == State::Done {
                continue;
            }
            let r = if src_is_peer {
                pump.poll(cx, peer, target, &up_tally)
            } else {
                pump.poll(cx, target, peer, &down_tally)
            };
            match r {
                Poll::Ready(Err(side)) => return Poll::Ready(error(side)),
                Poll::Ready(Ok(())) => ended = true,
                Poll::Pending => {}
            }
        }
        if ended {
            let now = Instant::now();
            self.half_closed = true;
            let since = u64::try_from(now.saturating_duration_since(self.start).as_micros())
                .unwrap_or(u64::MAX);
            self.activity.fetch_max(since, Ordering::Relaxed);
            let at = self.capped(now + counters.linger);
            self.arm(at);
        }
        if self.up.state == State::Done && self.down.state == State::Done {
            return Poll::Ready(CloseReason::Completed);
        }
        self.poll_timer(cx, counters.linger)
    }

    /// The deadline or the linger, once the timer fires for one of them.
    fn poll_timer(&mut self, cx: &mut Context<'_>, linger: Duration) -> Poll<CloseReason> {
        loop {
            // Nothing to time yet: no timer is armed.
            let Some(timer) = &mut self.timer else {
                return Poll::Pending;
            };
            if timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let now = Instant::now();
            if let Some(d) = self.deadline.filter(|d| d.at <= now) {
                return Poll::Ready(d.reason);
            }
            let next = if self.half_closed {
                let last = self
                    .start
                    .checked_add(Duration::from_micros(self.activity.load(Ordering::Relaxed)))
                    .unwrap_or(now);
                let quiet_until = last + linger;
                if quiet_until <= now {
                    return Poll::Ready(CloseReason::Linger);
                }
                quiet_until
            } else {
                // Fired before the deadline (a timer never does): wait on.
                now + linger
            };
            let at = self.capped(next);
            self.arm(at);
        }
    }
}

/// The close reason of a failed side.
fn error(side: Side) -> CloseReason {
    match side {
        Side::Peer => CloseReason::PeerError,
        Side::Target => CloseReason::TargetError,
    }
}

//! The drivers of one HTTP connection: the server side facing the client
//! (hyper's HTTP/1.1 or h2 server over the TLS stream) and the client side
//! facing the target (hyper's client over this connection's own target
//! socket), polled together in the connection's task.
//!
//! Why everything stays in this one future: the route drops it to close
//! the connection (revocation, expiry, drain), and that must close both
//! sockets and every request in flight. So nothing is spawned where it
//! could outlive it: hyper's h2 stream tasks go to a `Scoped` executor
//! whose tasks are aborted when the future is dropped, and a WebSocket the
//! target accepts is joined to the client here, not in a task of its own.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use http_body_util::BodyExt;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use metrics::Counter;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::blocks::{BlockClock, Blocks};
use super::service::{self, H1, H2};
use super::smuggle::{Scanner, Verdicts};
use super::tap::{Observe, Tap};
use super::{Charge, Identity, MIN_HEADER_BYTES};
use crate::proxy::conn::LiveConn;
use crate::reason::CloseReason;

/// The requests one h2 connection may have open at once (hyper's default
/// is 200): each holds its decoded header list, up to
/// `--http-max-header-bytes`, so this bounds what one connection holds.
const H2_MAX_STREAMS: u32 = 32;

/// Where a connection's bytes are counted, live: the route's metrics and
/// the connection's totals (what `/connections` and the close line show).
#[derive(Debug, Clone)]
pub struct Counters {
    pub to_target: Counter,
    pub from_target: Counter,
    pub conn: Arc<LiveConn>,
}

impl Observe for Counters {
    fn read(&mut self, bytes: &[u8]) {
        let n = bytes.len() as u64;
        self.to_target.increment(n);
        self.conn.totals.to_target.fetch_add(n, Ordering::Relaxed);
    }
    fn wrote(&mut self, n: usize) {
        self.from_target.increment(n as u64);
        self.conn
            .totals
            .from_target
            .fetch_add(n as u64, Ordering::Relaxed);
    }
}

type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

/// hyper's executor for one connection: what it spawns is handed to the
/// connection's future, which runs it in a `JoinSet` it owns.
#[derive(Clone)]
struct Scoped(mpsc::UnboundedSender<Task>);

impl<F: Future<Output = ()> + Send + 'static> hyper::rt::Executor<F> for Scoped {
    fn execute(&self, fut: F) {
        // The receiver lives as long as the connection's future; once
        // that is gone, so is everything this task would serve.
        let _ = self.0.send(Box::pin(fut));
    }
}

/// Carries one connection as HTTP until the client or target ends it:
/// h2 when the client negotiated it, else HTTP/1.1.
pub async fn serve<P, T>(
    peer: P,
    target: T,
    h2: bool,
    identity: Identity,
    counters: Counters,
) -> CloseReason
where
    P: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // Counted as the client sent them (towards the target) and as they
    // are written back (from the target).
    let peer = Tap {
        io: peer,
        observer: counters,
    };
    if h2 {
        serve_h2(peer, target, identity).await
    } else {
        serve_h1(peer, target, identity).await
    }
}

/// How a server-side result ends the connection: `over_budget` when the
/// route's pending-head budget refused its head or h2 header block
/// (`overload`), hyper's
/// header-read timeout and a request body that stopped arriving
/// (`stalled`) as `http_timeout`.
fn ended(r: Result<(), hyper::Error>, over_budget: bool, stalled: bool) -> CloseReason {
    match r {
        _ if over_budget => CloseReason::Overload,
        _ if stalled => CloseReason::HttpTimeout,
        Ok(()) => CloseReason::Completed,
        Err(e) if e.is_timeout() => CloseReason::HttpTimeout,
        Err(_) => CloseReason::PeerError,
    }
}

async fn serve_h1<P, T>(peer: P, target: T, identity: Identity) -> CloseReason
where
    P: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let limits = identity.settings;
    let verdicts = Verdicts::default();
    let over_budget = Arc::new(AtomicBool::new(false));
    let scanner = Scanner::new(
        limits.max_header_bytes,
        limits.max_headers,
        verdicts.clone(),
    )
    .charged(Charge::new(identity.heads.clone(), over_budget.clone()));
    let peer = Tap {
        io: peer,
        observer: scanner,
    };
    let Ok((sender, client)) = hyper::client::conn::http1::handshake(TokioIo::new(target)).await
    else {
        return CloseReason::TargetError;
    };
    let shared = Arc::new(H1 {
        identity,
        sender: tokio::sync::Mutex::new(sender),
        verdicts,
        tunnel: Mutex::new(None),
        upgrading: AtomicBool::new(false),
        stalled: Arc::new(AtomicBool::new(false)),
    });
    let svc = {
        let shared = shared.clone();
        service_fn(move |req| service::h1(req, shared.clone()))
    };
    // The header-read timeout runs from the connection's start, and from
    // the end of each response, to the end of the next request head: it
    // bounds an unfinished head and an idle keep-alive connection alike.
    let server = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(limits.max_header_bytes.max(MIN_HEADER_BYTES))
        .max_headers(limits.max_headers)
        .serve_connection(TokioIo::new(peer), svc)
        .with_upgrades();
    let client = client.without_shutdown();
    tokio::pin!(server, client);
    let mut target_side = None;
    let served = loop {
        tokio::select! {
            r = &mut server => break r,
            r = &mut client, if target_side.is_none() => {
                target_side = Some(r);
                // The target let go: finish the exchange in flight, then
                // close — unless it is switching to a WebSocket.
                if !shared.upgrading.load(Ordering::SeqCst) {
                    server.as_mut().graceful_shutdown();
                }
            }
        }
    };
    let tunnel = shared
        .tunnel
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    match (served, tunnel) {
        (Ok(()), Some(client_side)) => {
            let target_side = match target_side {
                Some(t) => t,
                None => client.await,
            };
            websocket(client_side, target_side).await
        }
        (r, _) => ended(
            r,
            over_budget.load(Ordering::Acquire),
            shared.stalled.load(Ordering::Acquire),
        ),
    }
}

/// Joins the client's upgraded connection to the target's once the target
/// accepted a WebSocket: the target's bytes read past its 101 first.
async fn websocket<T>(
    client_side: hyper::upgrade::OnUpgrade,
    target_side: hyper::Result<hyper::client::conn::http1::Parts<TokioIo<T>>>,
) -> CloseReason
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Ok(parts) = target_side else {
        return CloseReason::TargetError;
    };
    let Ok(upgraded) = client_side.await else {
        return CloseReason::PeerError;
    };
    let mut client_io = TokioIo::new(upgraded);
    let mut target_io = parts.io.into_inner();
    if client_io.write_all(&parts.read_buf).await.is_err() {
        return CloseReason::PeerError;
    }
    match tokio::io::copy_bidirectional(&mut client_io, &mut target_io).await {
        Ok(_) => CloseReason::Completed,
        Err(_) => CloseReason::PeerError,
    }
}

async fn serve_h2<P, T>(peer: P, target: T, identity: Identity) -> CloseReason
where
    P: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (tx, mut spawned) = mpsc::unbounded_channel();
    let exec = Scoped(tx);
    let mut tasks = JoinSet::new();
    let limits = identity.settings;
    let over_budget = Arc::new(AtomicBool::new(false));
    let charge = Charge::new(identity.heads.clone(), over_budget.clone());
    let handshake =
        hyper::client::conn::http2::Builder::new(exec.clone()).handshake(TokioIo::new(target));
    let Ok((sender, client)) = handshake.await else {
        return CloseReason::TargetError;
    };
    let shared = Arc::new(H2 { identity, sender });
    let activity = Arc::new(Activity::default());
    let svc = {
        let (shared, activity) = (shared.clone(), activity.clone());
        service_fn(move |req| {
            let open = activity.open();
            let forwarded = service::h2(req, shared.clone());
            async move {
                let resp = forwarded.await?;
                // The request stays open until its response body is sent
                // (or its stream reset): the body carries the guard.
                Ok::<_, std::convert::Infallible>(resp.map(|body| {
                    body.map_frame(move |frame| {
                        let _open = &open;
                        frame
                    })
                    .boxed()
                }))
            }
        })
    };
    // The header block the client is sending, timed from its frames
    // whatever else is open, its bytes charged to the route's budget.
    let blocks = Arc::new(BlockClock::default());
    let peer = Tap {
        io: peer,
        observer: Blocks::new(blocks.clone()).charged(charge),
    };
    let server = hyper::server::conn::http2::Builder::new(exec)
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX))
        .max_concurrent_streams(H2_MAX_STREAMS)
        .serve_connection(TokioIo::new(peer), svc);
    tokio::pin!(server, client);
    let mut client_done = false;
    // Idle since: no request open (none yet, or all answered). A request
    // opens when its header block is complete, so this bounds a header
    // block that never ends on an otherwise idle connection, and an idle
    // connection; the block clock bounds each header block, requests open
    // or not.
    let mut idle_since = Some(Instant::now());
    let timeout = limits.header_timeout;
    loop {
        let idle_deadline = idle_since.map(|t| t + timeout);
        let deadline = earliest(idle_deadline, block_deadline(blocks.since(), timeout));
        tokio::select! {
            r = &mut server => break ended(r, over_budget.load(Ordering::Acquire), false),
            _ = activity.changed.notified() => {
                idle_since = activity.idle().then(Instant::now);
            }
            _ = blocks.changed.notified() => {}
            _ = sleep_until_some(deadline), if deadline.is_some() => {
                let now = Instant::now();
                if block_expired(blocks.since(), timeout, now) {
                    break CloseReason::HttpTimeout;
                }
                if idle_deadline.is_some_and(|d| d <= now) {
                    if activity.idle() {
                        break CloseReason::HttpTimeout;
                    }
                    idle_since = None;
                }
            }
            _ = &mut client, if !client_done => {
                client_done = true;
                server.as_mut().graceful_shutdown();
            }
            Some(task) = spawned.recv() => {
                tasks.spawn(task);
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
}

/// The earlier of two deadlines, either possibly absent.
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// When the header block begun at `since` (if one is) runs out of time.
fn block_deadline(since: Option<Instant>, timeout: std::time::Duration) -> Option<Instant> {
    since.map(|t| t + timeout)
}

/// True when the header block begun at `since` has taken `timeout` by
/// `now`.
fn block_expired(since: Option<Instant>, timeout: std::time::Duration, now: Instant) -> bool {
    block_deadline(since, timeout).is_some_and(|d| d <= now)
}

/// Sleeps until `deadline` (forever without one).
pub async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// The requests an h2 connection has open: from a complete header block
/// to the end of its response body (also the webhook's, which closes an
/// idle h2 connection the same way).
#[derive(Debug, Default)]
pub struct Activity {
    open: AtomicUsize,
    /// Woken at every open and close.
    pub changed: Notify,
}

/// One open request; closes it when dropped.
pub struct Open(Arc<Activity>);

impl Activity {
    pub fn open(self: &Arc<Self>) -> Open {
        self.open.fetch_add(1, Ordering::AcqRel);
        self.changed.notify_one();
        Open(self.clone())
    }

    /// True when no request is open.
    pub fn idle(&self) -> bool {
        self.open.load(Ordering::Acquire) == 0
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
        self.0.changed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An HTTP connection that ended well is `completed`; only a refused
    /// head makes it `overload`, and only a stall `http_timeout`.
    #[test]
    fn an_ended_connection_is_completed_unless_refused_or_stalled() {
        assert_eq!(ended(Ok(()), false, false), CloseReason::Completed);
        assert_eq!(ended(Ok(()), false, true), CloseReason::HttpTimeout);
        assert_eq!(ended(Ok(()), true, true), CloseReason::Overload);
        assert_eq!(ended(Ok(()), true, false), CloseReason::Overload);
    }

    /// A failure that is not hyper's timeout is the peer's.
    #[tokio::test]
    async fn a_connection_that_failed_is_a_peer_error() {
        use tokio::io::AsyncWriteExt;
        let (a, mut b) = tokio::io::duplex(1024);
        b.write_all(b"NOT HTTP\r\n\r\n").await.unwrap();
        let svc = hyper::service::service_fn(|_req| async {
            Ok::<_, std::convert::Infallible>(hyper::Response::new(String::new()))
        });
        let r = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(a), svc)
            .await;
        assert!(r.as_ref().is_err_and(|e| !e.is_timeout()), "{r:?}");
        assert_eq!(ended(r, false, false), CloseReason::PeerError);
    }

    /// A header block's deadline is `timeout` after it began, and it has
    /// expired from that moment on; with no block there is neither.
    #[test]
    fn a_header_block_expires_timeout_after_it_began() {
        let (now, t) = (Instant::now(), std::time::Duration::from_secs(10));
        assert_eq!(block_deadline(Some(now), t), Some(now + t));
        assert_eq!(block_deadline(None, t), None);
        assert!(!block_expired(None, t, now + t));
        assert!(!block_expired(Some(now), t, now));
        assert!(!block_expired(
            Some(now),
            t,
            now + t - std::time::Duration::from_millis(1)
        ));
        assert!(block_expired(Some(now), t, now + t));
    }
}

//! The live connections of one route: what each was authenticated with, and
//! a handle to close it with a reason. Rotation (revocation), expiry,
//! `--exclusive` displacement and draining all act through this registry,
//! and the admin endpoint's `/connections` reads it. One lock per route,
//! taken when a connection registers, leaves or is listed, never per
//! forwarded chunk: the byte counts are atomics inside each entry.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::Instant;

use futures_util::task::AtomicWaker;

use rustls_pki_types::CertificateDer;
use tokio::sync::{watch, Notify};

use crate::identity::CertInfo;
use crate::proxy::forward::Totals;
use crate::reason::CloseReason;

/// Asks one connection's task to close, with a reason. The first reason wins.
/// Only that connection's own task waits on it, so one waker is kept
/// (24 bytes, where a `Notify` is 48 with its waiter list), and the wait
/// can be polled from a hand-written future that owns the connection
/// ([`CloseSignal::poll_closed`]), which a borrowed `Notified` cannot.
#[derive(Debug, Default)]
pub struct CloseSignal {
    reason: OnceLock<CloseReason>,
    waker: AtomicWaker,
}

impl CloseSignal {
    /// Requests the close; returns false when a reason was already set.
    pub fn close(&self, reason: CloseReason) -> bool {
        let first = self.reason.set(reason).is_ok();
        self.waker.wake();
        first
    }

    /// `Ready` with the reason once a close was requested; else the task
    /// polling is woken when one is. The connection's task is the only one
    /// to poll it: a later poll replaces the waker an earlier one left.
    pub fn poll_closed(&self, cx: &mut Context<'_>) -> Poll<CloseReason> {
        if let Some(r) = self.reason.get() {
            return Poll::Ready(*r);
        }
        self.waker.register(cx.waker());
        // Set between the look above and the registration: seen here.
        match self.reason.get() {
            Some(r) => Poll::Ready(*r),
            None => Poll::Pending,
        }
    }

    /// Resolves once a close was requested.
    pub async fn closed(&self) -> CloseReason {
        std::future::poll_fn(|cx| self.poll_closed(cx)).await
    }
}

/// One authenticated, forwarded connection.
#[derive(Debug)]
pub struct LiveConn {
    pub id: u64,
    pub peer_addr: String,
    pub peer: Option<CertInfo>,
    /// The chain the peer presented, re-verified when the trust shrinks.
    pub chain: Vec<CertificateDer<'static>>,
    pub opened: Instant,
    /// Bytes forwarded each way, counted by the forwarder itself (the
    /// same atomics it always kept), so `/connections` reads them at query
    /// time and the hot path takes no lock.
    pub totals: Totals,
    pub signal: CloseSignal,
    /// Turns true once the connection's task has let go of both sockets
    /// (its registration dropped): an `--exclusive` newcomer waits for it
    /// before dialing the target. A flag and a `Notify` held inline rather
    /// than a watch channel, whose separate allocation (~256 bytes) every
    /// connection paid on both sidecars for what only `--exclusive` uses.
    finished: AtomicBool,
    finished_notify: Notify,
}

impl LiveConn {
    /// The peer certificate's subject, serial and SANs, empty when it had
    /// none that parsed: what every line about the connection names.
    pub fn peer_fields(&self) -> (&str, &str, Vec<String>) {
        self.peer
            .as_ref()
            .map(|c| (c.subject.as_str(), c.serial.as_str(), c.sans()))
            .unwrap_or_default()
    }

    /// Resolves once the connection is gone, both sockets closed.
    pub async fn finished(&self) {
        loop {
            // Registered before the flag is read, so a wake-up between the
            // two is not lost.
            let notified = self.finished_notify.notified();
            if self.finished.load(Ordering::SeqCst) {
                return;
            }
            notified.await;
        }
    }
}

#[derive(Debug, Default)]
struct Inner {
    live: HashMap<u64, Arc<LiveConn>>,
    /// The one connection an `--exclusive` route forwards.
    incumbent: Option<Arc<LiveConn>>,
}

/// All live connections of a route.
#[derive(Debug)]
pub struct Registry {
    inner: Mutex<Inner>,
    next_id: AtomicU64,
    count: watch::Sender<usize>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            inner: Mutex::default(),
            next_id: AtomicU64::new(1),
            count: watch::channel(0).0,
        }
    }
}

/// Removes its connection from the registry when dropped.
#[derive(Debug)]
pub struct Registration {
    registry: Arc<Registry>,
    pub conn: Arc<LiveConn>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut inner = self.registry.lock();
        inner.live.remove(&self.conn.id);
        if inner
            .incumbent
            .as_ref()
            .is_some_and(|c| c.id == self.conn.id)
        {
            inner.incumbent = None;
        }
        let n = inner.live.len();
        drop(inner);
        self.conn.finished.store(true, Ordering::SeqCst);
        self.conn.finished_notify.notify_waiters();
        self.registry.count.send_replace(n);
    }
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Inner holds plain maps; a panic elsewhere cannot corrupt them.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds an authenticated connection, visible from now on to trust
    /// re-verification, expiry and draining.
    pub fn register(
        self: &Arc<Self>,
        peer_addr: String,
        peer: Option<CertInfo>,
        chain: Vec<CertificateDer<'static>>,
    ) -> Registration {
        let conn = Arc::new(LiveConn {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            peer_addr,
            peer,
            chain,
            opened: Instant::now(),
            totals: Totals::default(),
            signal: CloseSignal::default(),
            finished: AtomicBool::new(false),
            finished_notify: Notify::new(),
        });
        let mut inner = self.lock();
        inner.live.insert(conn.id, conn.clone());
        let n = inner.live.len();
        drop(inner);
        self.count.send_replace(n);
        Registration {
            registry: self.clone(),
            conn,
        }
    }

    /// Makes `reg` the one connection an `--exclusive` route forwards. The
    /// previous incumbent is returned, already told to close as `displaced`;
    /// the newcomer must await its [`LiveConn::finished`] before dialing.
    pub fn promote(&self, reg: &Registration) -> Option<Arc<LiveConn>> {
        let displaced = self.lock().incumbent.replace(reg.conn.clone());
        if let Some(old) = &displaced {
            old.signal.close(CloseReason::Displaced);
        }
        displaced
    }

    /// The live connections now.
    pub fn snapshot(&self) -> Vec<Arc<LiveConn>> {
        self.lock().live.values().cloned().collect()
    }

    /// How many connections are live.
    pub fn live(&self) -> usize {
        *self.count.borrow()
    }

    /// Tells every live connection to close.
    pub fn close_all(&self, reason: CloseReason) {
        for c in self.snapshot() {
            c.signal.close(reason);
        }
    }

    /// Resolves once no connection is live.
    pub async fn wait_empty(&self) {
        let mut rx = self.count.subscribe();
        // The sender lives as long as self, so this cannot fail.
        let _ = rx.wait_for(|n| *n == 0).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::task::{Wake, Waker};

    /// A waker that counts its wake-ups.
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counting() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        (count.clone(), Waker::from(count))
    }

    #[test]
    fn a_close_wakes_the_waiting_task_and_the_first_reason_wins() {
        let s = CloseSignal::default();
        let (count, waker) = counting();
        let mut cx = Context::from_waker(&waker);
        assert_eq!(s.poll_closed(&mut cx), Poll::Pending);
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
        assert!(s.close(CloseReason::Revoked));
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            1,
            "the waiting task is woken"
        );
        assert!(
            !s.close(CloseReason::Drain),
            "a second reason is not the first"
        );
        assert_eq!(s.poll_closed(&mut cx), Poll::Ready(CloseReason::Revoked));
    }

    #[test]
    fn a_close_before_any_wait_is_seen_at_once() {
        let s = CloseSignal::default();
        assert!(s.close(CloseReason::Displaced));
        let (count, waker) = counting();
        let mut cx = Context::from_waker(&waker);
        assert_eq!(s.poll_closed(&mut cx), Poll::Ready(CloseReason::Displaced));
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn the_latest_poll_is_the_one_woken() {
        let s = CloseSignal::default();
        let (first, w1) = counting();
        let (second, w2) = counting();
        assert_eq!(s.poll_closed(&mut Context::from_waker(&w1)), Poll::Pending);
        assert_eq!(s.poll_closed(&mut Context::from_waker(&w2)), Poll::Pending);
        s.close(CloseReason::Drain);
        assert_eq!(second.0.load(Ordering::SeqCst), 1);
        assert_eq!(first.0.load(Ordering::SeqCst), 0);
    }
}

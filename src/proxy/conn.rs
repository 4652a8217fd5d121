//! The live connections of one route: what each was authenticated with, and
//! a handle to close it with a reason. Rotation (revocation), expiry,
//! `--exclusive` displacement and draining all act through this registry,
//! and the admin endpoint's `/connections` reads it. One lock per route,
//! taken when a connection registers, leaves or is listed, never per
//! forwarded chunk: the byte counts are atomics inside each entry.
//!
//! What a peer presented (its chain and its leaf's fields) is kept once per
//! distinct chain among a route's live connections and shared by all of
//! them ([`Presented`]): a route's connections mostly come from a handful
//! of peers, and a copy per connection was the largest per-connection item
//! of our own (~0.6 KiB on each side of an idle connection).

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
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

/// What a peer presented in its handshake: the chain as sent (re-verified
/// when the trust shrinks) and its leaf's fields. Shared by every live
/// connection of a route whose peer presented the same chain, byte for
/// byte ([`Registry::register`]); the leaf's fields are derived from the
/// chain alone, so they are the same too.
#[derive(Debug)]
pub struct Presented {
    pub cert: Option<CertInfo>,
    pub chain: Vec<CertificateDer<'static>>,
    /// Its key in the registry's table of shared chains.
    key: u64,
}

/// One authenticated, forwarded connection.
#[derive(Debug)]
pub struct LiveConn {
    pub id: u64,
    pub peer_addr: String,
    /// The peer's chain and leaf, shared with the route's other connections
    /// from the same peer.
    presented: Arc<Presented>,
    pub opened: Instant,
    /// Bytes forwarded each way, counted by the forwarder itself (the
    /// same atomics it always kept), so `/connections` reads them at query
    /// time and the hot path takes no lock.
    pub totals: Totals,
    pub signal: CloseSignal,
    /// A transparent connection's destination rule (its index), which
    /// judges its server at re-verification; `None` on other routes.
    pub rule: Option<usize>,
    /// Turns true once the connection's task has let go of both sockets
    /// (its registration dropped): an `--exclusive` newcomer waits for it
    /// before dialing the target. A flag and a `Notify` held inline rather
    /// than a watch channel, whose separate allocation (~256 bytes) every
    /// connection paid on both sidecars for what only `--exclusive` uses.
    finished: AtomicBool,
    finished_notify: Notify,
}

impl LiveConn {
    /// The peer's leaf, when it sent one that parsed.
    pub fn peer(&self) -> Option<&CertInfo> {
        self.presented.cert.as_ref()
    }

    /// The chain the peer presented, re-verified when the trust shrinks.
    pub fn chain(&self) -> &[CertificateDer<'static>] {
        &self.presented.chain
    }

    /// Which shared chain this connection holds: equal for two live
    /// connections exactly when they share one [`Presented`] (an address,
    /// stable while either connection is held).
    pub fn presented_id(&self) -> usize {
        Arc::as_ptr(&self.presented) as usize
    }

    /// The peer certificate's subject, serial and SANs, empty when it had
    /// none that parsed: what every line about the connection names.
    pub fn peer_fields(&self) -> (&str, &str, Vec<String>) {
        self.peer()
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
    /// The chains live connections presented, by [`Registry::key_of`]:
    /// each distinct chain is held once. An entry goes when the last
    /// connection holding it leaves (or, if that one was still referenced
    /// elsewhere then, at the next sweep: [`needs_sweep`] bounds the table
    /// to twice the live connections).
    presented: HashMap<u64, Weak<Presented>>,
}

/// Whether a chain just presented is the one `held` holds: only then is
/// `held` shared. The table's key is a hash, so two different chains can
/// share a key; sharing on the key alone would re-verify a connection
/// against another peer's chain.
fn same_chain(held: &Presented, chain: &[CertificateDer<'static>]) -> bool {
    held.chain == chain
}

/// Whether the table of shared chains has grown past what the live
/// connections justify (entries left by connections that were still
/// referenced when they left), so its dead entries are swept.
fn needs_sweep(entries: usize, live: usize) -> bool {
    entries > live.saturating_mul(2).saturating_add(16)
}

/// All live connections of a route.
#[derive(Debug)]
pub struct Registry {
    inner: Mutex<Inner>,
    next_id: AtomicU64,
    count: watch::Sender<usize>,
    /// Keys the table of shared chains (seeded per registry).
    hasher: RandomState,
    /// Tests only: every chain gets the same key, as colliding hashes would.
    #[cfg(test)]
    collide: bool,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            inner: Mutex::default(),
            next_id: AtomicU64::new(1),
            count: watch::channel(0).0,
            hasher: RandomState::new(),
            #[cfg(test)]
            collide: false,
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
        let presented = &self.conn.presented;
        // The last connection holding this chain: its entry goes with it.
        if Arc::strong_count(presented) == 1
            && inner
                .presented
                .get(&presented.key)
                .is_some_and(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(presented)))
        {
            inner.presented.remove(&presented.key);
        }
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

    /// The key of `chain` in the table of shared chains.
    fn key_of(&self, chain: &[CertificateDer<'static>]) -> u64 {
        #[cfg(test)]
        if self.collide {
            return 0;
        }
        let mut h = self.hasher.build_hasher();
        for c in chain {
            c.as_ref().hash(&mut h);
        }
        h.finish()
    }

    /// What `chain` (whose leaf's fields are `peer`) is held as: the entry
    /// of a live connection that presented the same chain, else a new one.
    fn presented(
        &self,
        inner: &mut Inner,
        key: u64,
        peer: Option<CertInfo>,
        chain: Vec<CertificateDer<'static>>,
    ) -> Arc<Presented> {
        if let Some(held) = inner.presented.get(&key).and_then(Weak::upgrade) {
            if same_chain(&held, &chain) {
                return held;
            }
        }
        if needs_sweep(inner.presented.len(), inner.live.len()) {
            inner.presented.retain(|_, w| w.strong_count() > 0);
        }
        let p = Arc::new(Presented {
            cert: peer,
            chain,
            key,
        });
        // A different chain under the same key takes the slot; the one it
        // replaces stays with its connections, only no longer shared.
        inner.presented.insert(key, Arc::downgrade(&p));
        p
    }

    /// Adds an authenticated connection, visible from now on to trust
    /// re-verification, expiry and draining.
    pub fn register(
        self: &Arc<Self>,
        peer_addr: String,
        peer: Option<CertInfo>,
        chain: Vec<CertificateDer<'static>>,
    ) -> Registration {
        self.register_for(peer_addr, peer, chain, None)
    }

    /// [`Registry::register`] for a transparent connection admitted under
    /// destination rule `rule`.
    pub fn register_for(
        self: &Arc<Self>,
        peer_addr: String,
        peer: Option<CertInfo>,
        chain: Vec<CertificateDer<'static>>,
        rule: Option<usize>,
    ) -> Registration {
        let key = self.key_of(&chain);
        let mut inner = self.lock();
        let presented = self.presented(&mut inner, key, peer, chain);
        let conn = Arc::new(LiveConn {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            peer_addr,
            presented,
            opened: Instant::now(),
            totals: Totals::default(),
            signal: CloseSignal::default(),
            rule,
            finished: AtomicBool::new(false),
            finished_notify: Notify::new(),
        });
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

    fn chain(bytes: &[u8]) -> Vec<CertificateDer<'static>> {
        vec![CertificateDer::from(bytes.to_vec())]
    }

    fn entries(r: &Registry) -> usize {
        r.lock().presented.len()
    }

    #[test]
    fn connections_presenting_the_same_chain_share_one_copy() {
        let r = Arc::new(Registry::default());
        let a = r.register("a".into(), None, chain(b"leaf-1"));
        let b = r.register("b".into(), None, chain(b"leaf-1"));
        let c = r.register("c".into(), None, chain(b"leaf-2"));
        assert!(Arc::ptr_eq(&a.conn.presented, &b.conn.presented));
        assert!(!Arc::ptr_eq(&a.conn.presented, &c.conn.presented));
        assert_eq!(c.conn.chain(), chain(b"leaf-2").as_slice());
        assert_eq!(entries(&r), 2);
        drop(a);
        assert_eq!(entries(&r), 2, "b still holds leaf-1");
        drop(b);
        assert_eq!(entries(&r), 1, "the last holder of leaf-1 took its entry");
        drop(c);
        assert_eq!(entries(&r), 0);
    }

    #[test]
    fn a_different_chain_under_the_same_key_is_never_shared() {
        let r = Arc::new(Registry {
            collide: true,
            ..Registry::default()
        });
        let a = r.register("a".into(), None, chain(b"leaf-1"));
        let b = r.register("b".into(), None, chain(b"leaf-2"));
        assert!(!Arc::ptr_eq(&a.conn.presented, &b.conn.presented));
        assert_eq!(a.conn.chain(), chain(b"leaf-1").as_slice());
        assert_eq!(b.conn.chain(), chain(b"leaf-2").as_slice());
        // The slot went to leaf-2; leaf-1's connections keep their own.
        let c = r.register("c".into(), None, chain(b"leaf-2"));
        assert!(Arc::ptr_eq(&b.conn.presented, &c.conn.presented));
        drop(a);
        assert_eq!(entries(&r), 1, "leaf-1 did not own the slot");
    }

    #[test]
    fn entries_left_behind_are_swept_within_the_bound_and_live_ones_kept() {
        let r = Arc::new(Registry::default());
        let live = r.register("live".into(), None, chain(b"live"));
        // Two connections sharing a chain, both still referenced when they
        // leave (as a `/connections` listing holds them): neither is the
        // last holder when its registration goes, so the entry stays behind.
        for i in 0..100u32 {
            let a = r.register("p".into(), None, chain(&i.to_be_bytes()));
            let b = r.register("p".into(), None, chain(&i.to_be_bytes()));
            let held = (a.conn.clone(), b.conn.clone());
            drop(a);
            drop(b);
            drop(held);
        }
        assert!(
            entries(&r) <= 2 + 16 + 1,
            "{} entries for one live connection",
            entries(&r)
        );
        // The sweeps kept the live connection's entry: it is still shared.
        let again = r.register("again".into(), None, chain(b"live"));
        assert!(Arc::ptr_eq(&live.conn.presented, &again.conn.presented));
    }

    #[test]
    fn the_sweep_bound_is_twice_the_live_connections_and_sixteen() {
        assert!(!needs_sweep(16, 0));
        assert!(needs_sweep(17, 0));
        assert!(!needs_sweep(36, 10));
        assert!(needs_sweep(37, 10));
        assert!(!needs_sweep(usize::MAX, usize::MAX));
    }
}

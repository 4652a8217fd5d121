//! The unauthenticated handshakes in flight on one route, bounded by
//! `--max-handshakes`. An unauthenticated peer must never take what
//! authenticated peers need: rather than queueing newcomers behind stalled
//! or hostile handshakes (which would let a few idle sockets lock the real
//! controller out), a full set closes its *oldest* pending handshake
//! (reason `overload`) to admit the newcomer. A flood then costs at most
//! `--max-handshakes` handshakes' memory and descriptors, and a real peer,
//! which finishes its handshake in milliseconds, is never the oldest for
//! long.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::{watch, Notify};

use crate::reason::FailureReason;

/// Why a pending handshake was told to stop.
#[derive(Debug, Default)]
struct Stop {
    reason: OnceLock<FailureReason>,
    notify: Notify,
}

/// The bounded set of pending handshakes of one route.
#[derive(Debug)]
pub struct Pending {
    max: usize,
    inner: Mutex<BTreeMap<u64, Arc<Stop>>>,
    next: AtomicU64,
    count: watch::Sender<usize>,
}

/// One admitted handshake; leaves the set when dropped.
#[derive(Debug)]
pub struct Ticket {
    pending: Arc<Pending>,
    id: u64,
    stop: Arc<Stop>,
}

impl Pending {
    /// A set admitting at most `max` (at least one) handshakes at once.
    pub fn new(max: usize) -> Arc<Pending> {
        Arc::new(Pending {
            max: max.max(1),
            inner: Mutex::default(),
            next: AtomicU64::new(0),
            count: watch::channel(0).0,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<Stop>>> {
        // Plain map operations cannot leave it inconsistent on a panic.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admits a new handshake. When the set is full, the oldest pending
    /// handshakes are told to stop (`overload`) and leave it; returns how
    /// many were.
    pub fn admit(self: &Arc<Self>) -> (Ticket, usize) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let stop = Arc::new(Stop::default());
        let mut evicted = 0;
        let mut set = self.lock();
        while set.len() >= self.max {
            let Some((_, oldest)) = set.pop_first() else {
                break;
            };
            signal(&oldest, FailureReason::Overload);
            evicted += 1;
        }
        set.insert(id, stop.clone());
        let n = set.len();
        drop(set);
        self.count.send_replace(n);
        let ticket = Ticket {
            pending: self.clone(),
            id,
            stop,
        };
        (ticket, evicted)
    }

    /// Tells the oldest pending handshake to stop with `reason` and removes
    /// it from the set (its descriptor is wanted now).
    pub fn stop_oldest(&self, reason: FailureReason) -> bool {
        let mut set = self.lock();
        let Some((_, oldest)) = set.pop_first() else {
            return false;
        };
        let n = set.len();
        drop(set);
        self.count.send_replace(n);
        signal(&oldest, reason);
        true
    }

    /// Tells every pending handshake to stop with `reason`.
    pub fn stop_all(&self, reason: FailureReason) {
        let all: Vec<_> = self.lock().values().cloned().collect();
        for s in all {
            signal(&s, reason);
        }
    }

    /// Handshakes in flight now.
    pub fn len(&self) -> usize {
        *self.count.borrow()
    }

    /// True when no handshake is in flight.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Resolves once no handshake is in flight.
    pub async fn wait_empty(&self) {
        let mut rx = self.count.subscribe();
        // The sender lives as long as self.
        let _ = rx.wait_for(|n| *n == 0).await;
    }
}

fn signal(stop: &Stop, reason: FailureReason) {
    let _ = stop.reason.set(reason);
    stop.notify.notify_waiters();
}

impl Ticket {
    /// Resolves when this handshake is told to stop, with the reason.
    pub async fn stopped(&self) -> FailureReason {
        loop {
            let notified = self.stop.notify.notified();
            if let Some(r) = self.stop.reason.get() {
                return *r;
            }
            notified.await;
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut set = self.pending.lock();
        set.remove(&self.id);
        let n = set.len();
        drop(set);
        self.pending.count.send_replace(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn stopped_now(t: &Ticket) -> Option<FailureReason> {
        tokio::time::timeout(Duration::from_millis(1), t.stopped())
            .await
            .ok()
    }

    #[tokio::test]
    async fn full_set_evicts_the_oldest_first() {
        let p = Pending::new(2);
        let (a, ea) = p.admit();
        let (b, eb) = p.admit();
        assert_eq!((ea, eb, p.len()), (0, 0, 2));
        let (c, ec) = p.admit();
        assert_eq!(ec, 1);
        assert_eq!(p.len(), 2);
        assert_eq!(stopped_now(&a).await, Some(FailureReason::Overload));
        assert_eq!(stopped_now(&b).await, None);
        assert_eq!(stopped_now(&c).await, None);
        // The evicted ticket already left the set; dropping it is harmless.
        drop(a);
        assert_eq!(p.len(), 2);
        let (_d, ed) = p.admit();
        assert_eq!(ed, 1);
        assert_eq!(stopped_now(&b).await, Some(FailureReason::Overload));
        assert_eq!(stopped_now(&c).await, None);
    }

    #[tokio::test]
    async fn dropping_frees_a_place_without_evicting() {
        let p = Pending::new(1);
        assert!(p.is_empty());
        let (a, _) = p.admit();
        assert!(!p.is_empty());
        drop(a);
        assert!(p.is_empty());
        let (b, e) = p.admit();
        assert_eq!(e, 0);
        assert_eq!(stopped_now(&b).await, None);
    }

    #[tokio::test]
    async fn stop_all_reaches_every_ticket_and_wait_empty_follows_drops() {
        let p = Pending::new(8);
        let t: Vec<_> = (0..3).map(|_| p.admit().0).collect();
        p.stop_all(FailureReason::Timeout);
        for x in &t {
            assert_eq!(stopped_now(x).await, Some(FailureReason::Timeout));
        }
        let waiter = tokio::spawn({
            let p = p.clone();
            async move { p.wait_empty().await }
        });
        drop(t);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("empty")
            .expect("join");
    }

    #[tokio::test]
    async fn stop_oldest_stops_only_the_oldest() {
        let p = Pending::new(4);
        let (a, _) = p.admit();
        let (b, _) = p.admit();
        assert!(p.stop_oldest(FailureReason::Overload));
        assert_eq!(p.len(), 1);
        assert_eq!(stopped_now(&a).await, Some(FailureReason::Overload));
        assert_eq!(stopped_now(&b).await, None);
        drop((a, b));
        assert!(!p.stop_oldest(FailureReason::Overload));
    }

    #[test]
    fn zero_is_one() {
        let p = Pending::new(0);
        let (_a, _) = p.admit();
        let (_b, e) = p.admit();
        assert_eq!(e, 1);
    }
}

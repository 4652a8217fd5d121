//! Who may hold an admin connection, how long, and who goes when the admin
//! port is full.
//!
//! The admin port is what keeps the pod alive (kubelet liveness and
//! readiness probes) and observable (Prometheus), so an idle or stalled
//! client must never be able to take it. Every admin connection is tracked
//! here: the phase it is in (waiting for a request, being served, idle
//! between keep-alive requests), when that phase began, and whether its
//! response writes are blocked. That gives each connection a deadline
//! (header, idle keep-alive, blocked write) and, when the port is full, a
//! rank: the newcomer is always admitted and the connection that has been
//! stuck longest in the least useful phase is closed instead.
//!
//! What the legitimate clients look like decides the rank. A kubelet probe
//! opens a new connection, sends its request at once and reads the answer:
//! it is young and then busy, so it is ranked last. Prometheus keeps one
//! connection alive and reuses it every scrape interval: it has been served
//! more than once, so it goes only after every connection that never sent a
//! request, is stuck writing, or was served once and left idle.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// How long a client may take to send a complete request head: from accept
/// for the first request, from its first byte for a later one.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a keep-alive connection may sit idle between requests. Longer
/// than Prometheus's default 1m scrape interval, so a scraper keeps its
/// connection.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// How long a response write may make no progress (the client stopped
/// reading). Prometheus's default scrape timeout is 10s as well.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection stuck for less than this is preferred over older ones when
/// choosing whom to evict: it may be a probe that has not been read yet.
const GRACE: Duration = Duration::from_secs(1);

/// Why a connection ran out of time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// No complete request head within [`HEADER_TIMEOUT`].
    Header,
    /// Idle between requests for [`IDLE_TIMEOUT`].
    Idle,
    /// A response write made no progress for [`WRITE_TIMEOUT`].
    Write,
}

impl Expiry {
    pub fn as_str(self) -> &'static str {
        match self {
            Expiry::Header => "header_timeout",
            Expiry::Idle => "idle_timeout",
            Expiry::Write => "write_timeout",
        }
    }
}

/// Where a connection is in its request cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Accepted, no request yet.
    Fresh,
    /// Bytes of a later request's head are arriving.
    Reading,
    /// A request was handed to the service; its response is not flushed.
    Serving,
    /// Between requests, after at least one response was flushed.
    Idle,
}

/// Eviction preference, most evictable first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Class {
    /// Has not sent a complete request: silent or slow.
    Unproven,
    /// Its response writes are blocked: it is not reading.
    Blocked,
    /// Served once, then idle: looks like a one-shot client that left.
    IdleOnce,
    /// Served several requests and idle between them: a keep-alive scraper.
    IdleReused,
    /// Being served right now.
    Busy,
}

impl Class {
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Unproven => "no_request",
            Class::Blocked => "not_reading",
            Class::IdleOnce => "idle",
            Class::IdleReused => "idle_keepalive",
            Class::Busy => "busy",
        }
    }
}

/// A connection's sort key for eviction: the smallest goes first.
///
/// Connections that never sent a request, are not reading, or were served
/// once and left idle go first, the longest stuck first; among them, the
/// ones stuck for less than [`GRACE`] (which may be a probe whose request
/// has not been read yet) only after every older one. A keep-alive client
/// served several times (a scraper) goes only after all of those, and a
/// connection being served right now last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rank {
    tier: u8,
    since: Instant,
    pub class: Class,
}

impl Rank {
    fn new(class: Class, since: Instant, now: Instant) -> Rank {
        let young = now.saturating_duration_since(since) < GRACE;
        let tier = match class {
            Class::Unproven | Class::Blocked | Class::IdleOnce => {
                class as u8 + if young { 3 } else { 0 }
            }
            Class::IdleReused => 6,
            Class::Busy => 7,
        };
        Rank { tier, since, class }
    }

    /// Plainly stuck: no request, or not reading, for longer than [`GRACE`].
    fn stuck_for_long(&self) -> bool {
        self.tier <= Class::Blocked as u8
    }

    /// How long the connection has been stuck as of `now`.
    pub fn stuck(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.since)
    }
}

#[derive(Debug, Clone, Copy)]
struct State {
    phase: Phase,
    /// When the phase began; while serving, the last write progress.
    since: Instant,
    /// Set while the latest write attempt could not make progress.
    blocked_since: Option<Instant>,
    /// Responses flushed on this connection.
    served: u32,
    /// Whether response bytes were written since the current request.
    wrote: bool,
}

impl State {
    fn deadline(&self, accepted: Instant) -> (Instant, Expiry) {
        if let Some(b) = self.blocked_since {
            return (b + WRITE_TIMEOUT, Expiry::Write);
        }
        match self.phase {
            Phase::Fresh => (accepted + HEADER_TIMEOUT, Expiry::Header),
            Phase::Reading => (self.since + HEADER_TIMEOUT, Expiry::Header),
            Phase::Serving => (self.since + WRITE_TIMEOUT, Expiry::Write),
            Phase::Idle => (self.since + IDLE_TIMEOUT, Expiry::Idle),
        }
    }

    fn rank(&self, accepted: Instant, now: Instant) -> Rank {
        let (class, since) = match (self.blocked_since, self.phase) {
            (Some(b), _) => (Class::Blocked, b),
            (None, Phase::Fresh) => (Class::Unproven, accepted),
            (None, Phase::Reading) => (Class::Unproven, self.since),
            (None, Phase::Idle) if self.served > 1 => (Class::IdleReused, self.since),
            (None, Phase::Idle) => (Class::IdleOnce, self.since),
            (None, Phase::Serving) => (Class::Busy, self.since),
        };
        Rank::new(class, since, now)
    }
}

/// One admin connection as the admission registry, its IO wrapper, its
/// service and its watchdog see it.
#[derive(Debug)]
pub struct Track {
    id: u64,
    pub peer: String,
    pub accepted: Instant,
    state: Mutex<State>,
    /// Poked when the deadline may have moved earlier.
    changed: Notify,
    /// Poked once when the registry evicts this connection.
    evicted: Notify,
    /// Close with a reset rather than a FIN (evicted or timed out).
    abort: AtomicBool,
}

impl Track {
    fn new(id: u64, peer: String, now: Instant) -> Track {
        Track {
            id,
            peer,
            accepted: now,
            state: Mutex::new(State {
                phase: Phase::Fresh,
                since: now,
                blocked_since: None,
                served: 0,
                wrote: false,
            }),
            changed: Notify::new(),
            evicted: Notify::new(),
            abort: AtomicBool::new(false),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // The state is plain data updated in single steps: a panic elsewhere
        // cannot leave it half-written, so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Request bytes arrived.
    pub fn on_read(&self) {
        let mut s = self.state();
        if s.phase == Phase::Idle {
            s.phase = Phase::Reading;
            s.since = Instant::now();
            drop(s);
            self.changed.notify_one();
        }
    }

    /// A complete request head reached the service.
    pub fn on_request(&self) {
        let mut s = self.state();
        s.phase = Phase::Serving;
        s.since = Instant::now();
        s.wrote = false;
    }

    /// A write attempt finished: `Some(n)` bytes were written, `None` it
    /// would block.
    pub fn on_write(&self, written: Option<usize>) {
        let mut s = self.state();
        match written {
            None => {
                if s.blocked_since.is_none() {
                    s.blocked_since = Some(Instant::now());
                    drop(s);
                    self.changed.notify_one();
                }
            }
            Some(0) => {}
            Some(_) => {
                s.blocked_since = None;
                if s.phase == Phase::Serving {
                    s.since = Instant::now();
                    s.wrote = true;
                }
            }
        }
    }

    /// Everything buffered so far reached the socket.
    pub fn on_flushed(&self) {
        let mut s = self.state();
        if s.phase == Phase::Serving && s.wrote {
            s.phase = Phase::Idle;
            s.since = Instant::now();
            s.served = s.served.saturating_add(1);
            drop(s);
            self.changed.notify_one();
        }
    }

    /// The next deadline and what it enforces.
    pub fn deadline(&self) -> (Instant, Expiry) {
        self.state().deadline(self.accepted)
    }

    /// What has expired as of `now`, if anything.
    pub fn expired(&self, now: Instant) -> Option<Expiry> {
        let (at, why) = self.deadline();
        (now >= at).then_some(why)
    }

    pub fn rank(&self, now: Instant) -> Rank {
        self.state().rank(self.accepted, now)
    }

    /// Resolves when the deadline may have moved earlier.
    pub async fn changed(&self) {
        self.changed.notified().await
    }

    /// Resolves once this connection has been evicted.
    pub async fn evicted(&self) {
        self.evicted.notified().await
    }

    /// Marks the connection for an abortive close (a reset frees its kernel
    /// buffers at once instead of lingering behind a peer that never reads).
    pub fn set_abort(&self) {
        self.abort.store(true, Ordering::Relaxed);
    }

    pub fn abort(&self) -> bool {
        self.abort.load(Ordering::Relaxed)
    }
}

/// A connection closed to make room.
#[derive(Debug)]
pub struct Eviction {
    pub peer: String,
    pub class: Class,
    pub stuck: Duration,
    pub age: Duration,
}

/// The live admin connections, at most `cap` of them.
#[derive(Debug)]
pub struct Admission {
    cap: usize,
    next_id: AtomicU64,
    live: Mutex<HashMap<u64, Arc<Track>>>,
}

impl Admission {
    pub fn new(cap: usize) -> Admission {
        Admission {
            cap: cap.max(1),
            next_id: AtomicU64::new(0),
            live: Mutex::new(HashMap::new()),
        }
    }

    fn live(&self) -> MutexGuard<'_, HashMap<u64, Arc<Track>>> {
        // Inserts and removes are single steps: a poisoned map is consistent.
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admits a newcomer, evicting the lowest-ranked connection when full.
    pub fn admit(&self, peer: String) -> (Arc<Track>, Option<Eviction>) {
        let now = Instant::now();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let track = Arc::new(Track::new(id, peer, now));
        let mut live = self.live();
        let eviction = if live.len() >= self.cap {
            Self::evict_where(&mut live, now, |_| true)
        } else {
            None
        };
        live.insert(id, track.clone());
        (track, eviction)
    }

    /// Evicts the lowest-ranked connection if it is plainly stuck (no
    /// request or not reading, for longer than the grace period): used
    /// when the process is out of descriptors, to let a probe in.
    pub fn evict_stuck(&self) -> Option<Eviction> {
        let now = Instant::now();
        Self::evict_where(&mut self.live(), now, Rank::stuck_for_long)
    }

    fn evict_where(
        live: &mut HashMap<u64, Arc<Track>>,
        now: Instant,
        ok: impl Fn(&Rank) -> bool,
    ) -> Option<Eviction> {
        let (id, rank) = live
            .iter()
            .map(|(id, t)| (*id, t.rank(now)))
            .min_by_key(|(_, r)| *r)?;
        if !ok(&rank) {
            return None;
        }
        let victim = live.remove(&id)?;
        victim.set_abort();
        victim.evicted.notify_one();
        Some(Eviction {
            peer: victim.peer.clone(),
            class: rank.class,
            stuck: rank.stuck(now),
            age: now.saturating_duration_since(victim.accepted),
        })
    }

    /// Forgets a connection that ended (a no-op if it was evicted).
    pub fn remove(&self, track: &Track) {
        self.live().remove(&track.id);
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.live().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(phase: Phase, since: Instant, served: u32) -> State {
        State {
            phase,
            since,
            blocked_since: None,
            served,
            wrote: false,
        }
    }

    #[test]
    fn deadlines_follow_the_phase() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(3);
        let fresh = state(Phase::Fresh, t0, 0);
        assert_eq!(fresh.deadline(t0), (t0 + HEADER_TIMEOUT, Expiry::Header));
        let reading = state(Phase::Reading, later, 1);
        assert_eq!(
            reading.deadline(t0),
            (later + HEADER_TIMEOUT, Expiry::Header)
        );
        let idle = state(Phase::Idle, later, 1);
        assert_eq!(idle.deadline(t0), (later + IDLE_TIMEOUT, Expiry::Idle));
        let serving = state(Phase::Serving, later, 0);
        assert_eq!(serving.deadline(t0), (later + WRITE_TIMEOUT, Expiry::Write));
        let mut blocked = state(Phase::Idle, t0, 1);
        blocked.blocked_since = Some(later);
        assert_eq!(blocked.deadline(t0), (later + WRITE_TIMEOUT, Expiry::Write));
    }

    #[test]
    fn eviction_prefers_stuck_unproven_then_blocked_then_idle() {
        let t0 = Instant::now();
        let now = t0 + Duration::from_secs(30);
        let old = t0 + Duration::from_secs(10);
        let silent = state(Phase::Fresh, old, 0).rank(old, now);
        let mut nr = state(Phase::Serving, old, 0);
        nr.blocked_since = Some(t0);
        let not_reading = nr.rank(t0, now);
        let once = state(Phase::Idle, t0, 1).rank(t0, now);
        let scraper = state(Phase::Idle, t0, 5).rank(t0, now);
        let busy = state(Phase::Serving, t0, 5).rank(t0, now);
        let probe = state(Phase::Fresh, now, 0).rank(now, now);
        let mut order = [busy, probe, scraper, once, not_reading, silent];
        order.sort();
        assert_eq!(order, [silent, not_reading, once, probe, scraper, busy]);
        // A flood of young connections goes before the scraper.
        let flood = state(Phase::Fresh, now, 0).rank(now, now);
        assert!(flood < scraper);
    }

    #[test]
    fn admit_evicts_the_oldest_when_full_and_never_refuses() {
        let a = Admission::new(2);
        let (first, e) = a.admit("a".into());
        assert!(e.is_none());
        let (_second, e) = a.admit("b".into());
        assert!(e.is_none());
        let (_third, e) = a.admit("c".into());
        let e = e.expect("full: someone goes");
        assert_eq!(e.peer, "a");
        assert_eq!(e.class, Class::Unproven);
        assert!(first.abort());
        assert_eq!(a.len(), 2);
        a.remove(&first);
        assert_eq!(a.len(), 2);
    }

    #[test]
    fn fd_pressure_evicts_only_plainly_stuck_connections() {
        let a = Admission::new(8);
        let (_young, _) = a.admit("young".into());
        assert!(a.evict_stuck().is_none(), "a young connection is kept");
    }
}

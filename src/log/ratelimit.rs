//! Keeping refusal lines from flooding the log: a fixed-window
//! [`RateLimiter`] per key, and the [`RefusalLog`] of a route built on it
//! (at most [`REFUSAL_BURST`] lines per reason per [`REFUSAL_WINDOW`], then
//! one "suppressed N" summary).

use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use crate::reason::FailureReason;

/// At most this many refusal lines per route and reason in one window.
pub const REFUSAL_BURST: u32 = 10;

/// The rate-limit window of refusal lines.
pub const REFUSAL_WINDOW: Duration = Duration::from_secs(10);

/// How often ended windows are checked for a summary to write.
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// What [`RateLimiter::admit`] decided for one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    /// Whether this event's line is written.
    pub log: bool,
    /// Lines suppressed in this key's previous window and not yet reported:
    /// write the summary before this event's line.
    pub summary: Option<u64>,
}

/// One key's window.
#[derive(Debug, Default)]
struct Slot {
    /// When the current window opened (at the first event after the last
    /// one ended); `None` before any event.
    start: Option<Instant>,
    /// Lines written in the current window.
    logged: u32,
    /// Lines suppressed and not yet reported.
    suppressed: u64,
}

/// A fixed-window limiter over a fixed set of keys: at most `burst` events
/// per key per window are let through, the rest counted for a summary. A
/// window opens at the first event after the previous one ended. The state
/// is one small slot per key, chosen at construction: nothing grows with
/// the events. Times are passed in, so the windows can be tested exactly.
#[derive(Debug)]
pub struct RateLimiter<K> {
    burst: u32,
    window: Duration,
    slots: Box<[(K, Mutex<Slot>)]>,
}

fn lock(slot: &Mutex<Slot>) -> MutexGuard<'_, Slot> {
    // No code panics while holding it; a poisoned slot is still consistent.
    slot.lock().unwrap_or_else(|p| p.into_inner())
}

impl<K: Copy + Eq> RateLimiter<K> {
    /// A limiter over `keys` (duplicates are ignored).
    pub fn new(keys: impl IntoIterator<Item = K>, burst: u32, window: Duration) -> Self {
        let mut unique: Vec<K> = Vec::new();
        for k in keys {
            if !unique.contains(&k) {
                unique.push(k);
            }
        }
        RateLimiter {
            burst,
            window,
            slots: unique
                .into_iter()
                .map(|k| (k, Mutex::new(Slot::default())))
                .collect(),
        }
    }

    fn ended(&self, slot: &Slot, now: Instant) -> bool {
        slot.start
            .is_none_or(|s| now.saturating_duration_since(s) >= self.window)
    }

    /// Decides one event of `key` at `now`. A key outside the set is always
    /// let through: a line is never hidden by a limiter not built for it.
    pub fn admit(&self, key: K, now: Instant) -> Admission {
        let Some((_, slot)) = self.slots.iter().find(|(k, _)| *k == key) else {
            return Admission {
                log: true,
                summary: None,
            };
        };
        let mut s = lock(slot);
        let mut summary = None;
        if self.ended(&s, now) {
            if s.suppressed > 0 {
                summary = Some(std::mem::take(&mut s.suppressed));
            }
            s.start = Some(now);
            s.logged = 0;
        }
        let log = s.logged < self.burst;
        if log {
            s.logged += 1;
        } else {
            s.suppressed = s.suppressed.saturating_add(1);
        }
        Admission { log, summary }
    }

    /// Takes the suppressed counts of every window that has ended by `now`.
    pub fn flush(&self, now: Instant) -> Vec<(K, u64)> {
        self.take(|s| self.ended(s, now))
    }

    /// Takes every suppressed count, ended window or not (at shutdown).
    pub fn drain(&self) -> Vec<(K, u64)> {
        self.take(|_| true)
    }

    fn take(&self, due: impl Fn(&Slot) -> bool) -> Vec<(K, u64)> {
        let mut out = Vec::new();
        for (k, slot) in self.slots.iter() {
            let mut s = lock(slot);
            if s.suppressed > 0 && due(&s) {
                out.push((*k, std::mem::take(&mut s.suppressed)));
            }
        }
        out
    }
}

/// One route's refusal lines: [`REFUSAL_BURST`] per reason per
/// [`REFUSAL_WINDOW`], then a WARN summary naming the route, the reason and
/// how many lines were suppressed, written when the window ends (by a task
/// ticking every second, so a short burst is summarised too) or before the
/// next line of that reason, whichever comes first.
#[derive(Debug)]
pub struct RefusalLog {
    route: String,
    limiter: RateLimiter<FailureReason>,
}

impl RefusalLog {
    /// The limiter of route `route`, with its flush task spawned on the
    /// current tokio runtime (the task ends once the log is dropped).
    pub fn new(route: &str) -> Arc<RefusalLog> {
        Arc::new(RefusalLog {
            route: route.to_string(),
            limiter: RateLimiter::new(FailureReason::ALL, REFUSAL_BURST, REFUSAL_WINDOW),
        })
    }

    /// Starts the task that writes due summaries even when no further
    /// refusal arrives (needs a runtime; the route starts it when it starts
    /// serving). It ends when the log is dropped.
    pub fn spawn_flusher(self: &Arc<Self>) {
        let weak: Weak<RefusalLog> = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(FLUSH_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(log) = weak.upgrade() else { return };
                log.flush(Instant::now());
            }
        });
    }

    /// Whether a refusal with `reason` is logged now; writes the summary of
    /// the reason's previous window first when it is still due.
    pub fn admit(&self, reason: FailureReason) -> bool {
        let a = self.limiter.admit(reason, Instant::now());
        if let Some(n) = a.summary {
            self.summary(reason, n);
        }
        a.log
    }

    /// Writes the summaries of every window ended by `now`.
    pub fn flush(&self, now: Instant) {
        for (reason, n) in self.limiter.flush(now) {
            self.summary(reason, n);
        }
    }

    fn summary(&self, reason: FailureReason, suppressed: u64) {
        tracing::warn!(
            target: "mtls_sidecar::route",
            route = %self.route,
            reason = reason.as_str(),
            suppressed,
            window = %humantime::format_duration(REFUSAL_WINDOW),
            "handshake refusals suppressed"
        );
    }
}

impl Drop for RefusalLog {
    /// A route going away still accounts for what it suppressed.
    fn drop(&mut self) {
        for (reason, n) in self.limiter.drain() {
            self.summary(reason, n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: Duration = Duration::from_secs(10);

    fn lim() -> RateLimiter<&'static str> {
        RateLimiter::new(["a", "b", "a"], 3, W)
    }

    const LOG: Admission = Admission {
        log: true,
        summary: None,
    };
    const DROP: Admission = Admission {
        log: false,
        summary: None,
    };

    #[test]
    fn a_window_lets_the_burst_through_then_counts_until_its_exact_end() {
        let l = lim();
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(l.admit("a", t0), LOG);
        }
        assert_eq!(l.admit("a", t0), DROP);
        let last = t0 + W - Duration::from_nanos(1);
        assert_eq!(l.admit("a", last), DROP);
        assert_eq!(l.flush(last), vec![]);
        // The window is [t0, t0 + W): at t0 + W it has ended.
        assert_eq!(l.flush(t0 + W), vec![("a", 2)]);
        assert_eq!(l.flush(t0 + W), vec![], "reported once");
        // The next event opens a new window with a fresh burst.
        let t1 = t0 + W + Duration::from_secs(3);
        for _ in 0..3 {
            assert_eq!(l.admit("a", t1), LOG);
        }
        assert_eq!(l.admit("a", t1 + W - Duration::from_nanos(1)), DROP);
        assert_eq!(l.flush(t1 + W - Duration::from_nanos(1)), vec![]);
        assert_eq!(l.flush(t1 + W), vec![("a", 1)]);
    }

    #[test]
    fn an_event_after_an_unflushed_window_carries_its_summary() {
        let l = lim();
        let t0 = Instant::now();
        for _ in 0..5 {
            l.admit("a", t0);
        }
        assert_eq!(
            l.admit("a", t0 + W),
            Admission {
                log: true,
                summary: Some(2)
            }
        );
        assert_eq!(l.flush(t0 + W + W), vec![], "not reported twice");
        // A window with nothing suppressed has no summary.
        assert_eq!(l.admit("a", t0 + W + W), LOG);
    }

    #[test]
    fn keys_are_limited_independently_and_unknown_keys_always_pass() {
        let l = lim();
        let t0 = Instant::now();
        for _ in 0..10 {
            l.admit("a", t0);
        }
        assert_eq!(l.admit("b", t0), LOG);
        for _ in 0..100 {
            assert_eq!(l.admit("zzz", t0), LOG);
        }
        assert_eq!(l.slots.len(), 2, "state is per known key only");
        assert_eq!(l.flush(t0 + W), vec![("a", 7)]);
    }

    #[test]
    fn a_clock_going_backwards_stays_in_the_window_and_drain_takes_all() {
        let l = lim();
        let t0 = Instant::now() + Duration::from_secs(60);
        for _ in 0..4 {
            l.admit("b", t0);
        }
        assert_eq!(l.admit("b", t0 - Duration::from_secs(30)), DROP);
        assert_eq!(l.flush(t0 - Duration::from_secs(30)), vec![]);
        assert_eq!(l.drain(), vec![("b", 2)]);
        assert_eq!(l.drain(), vec![]);
    }

    #[test]
    fn a_burst_of_zero_suppresses_everything_and_counts_saturate() {
        let l = RateLimiter::new(["k"], 0, W);
        let t0 = Instant::now();
        assert_eq!(l.admit("k", t0), DROP);
        l.slots[0].1.lock().unwrap().suppressed = u64::MAX;
        assert_eq!(l.admit("k", t0), DROP);
        assert_eq!(l.flush(t0 + W), vec![("k", u64::MAX)]);
    }
}

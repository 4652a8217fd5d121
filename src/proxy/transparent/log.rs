//! The `no_destination` refusal lines of one transparent route, escaped
//! and rate-limited like the handshake refusals.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::log::{RateLimiter, REFUSAL_BURST, REFUSAL_WINDOW};

use super::lookup::NoDestination;

/// The `no_destination` WARN lines of one route, rate-limited like the
/// handshake refusals ([`REFUSAL_BURST`] per [`REFUSAL_WINDOW`], then a
/// "suppressed N" summary); the counter still counts every one.
#[derive(Debug)]
pub struct NoDestinationLog {
    route: String,
    limiter: RateLimiter<&'static str>,
}

const KEY: &str = "no_destination";

impl NoDestinationLog {
    /// The log of route `route` (its flush task starts with the route's
    /// serving, [`NoDestinationLog::spawn_flusher`]: binding has no runtime).
    pub fn new(route: &str) -> Arc<NoDestinationLog> {
        Arc::new(NoDestinationLog {
            route: route.to_string(),
            limiter: RateLimiter::new([KEY], REFUSAL_BURST, REFUSAL_WINDOW),
        })
    }

    /// Starts the task that writes due summaries; ends when the log is dropped.
    pub fn spawn_flusher(self: &Arc<Self>) {
        let weak: Weak<NoDestinationLog> = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(log) = weak.upgrade() else { return };
                for (_, n) in log.limiter.flush(Instant::now()) {
                    log.summary(n);
                }
            }
        });
    }

    /// Logs one refusal, unless the window's burst is spent.
    pub fn refused(&self, peer: &str, why: &NoDestination) {
        let a = self.limiter.admit(KEY, Instant::now());
        if let Some(n) = a.summary {
            self.summary(n);
        }
        if !a.log {
            return;
        }
        let error = crate::log::clean_display(why);
        match why.original() {
            Some(original) => tracing::warn!(
                target: "mtls_sidecar::transparent", route = %self.route, peer = %peer, original_dst = %original, reason = KEY,
                error = %error, "connection refused: no destination"
            ),
            None => tracing::warn!(
                target: "mtls_sidecar::transparent", route = %self.route, peer = %peer, reason = KEY, error = %error,
                "connection refused: no destination"
            ),
        }
    }

    fn summary(&self, suppressed: u64) {
        tracing::warn!(
            target: "mtls_sidecar::transparent", route = %self.route, reason = KEY, suppressed,
            window = %humantime::format_duration(REFUSAL_WINDOW),
            "no_destination refusals suppressed"
        );
    }
}

impl Drop for NoDestinationLog {
    fn drop(&mut self) {
        for (_, n) in self.limiter.drain() {
            self.summary(n);
        }
    }
}

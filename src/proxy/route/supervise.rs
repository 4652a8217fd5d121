//! A forwarded connection's life once admitted: forwarding under its
//! deadlines (certificate expiry, `--max-connection-lifetime`), closing it
//! when told to (revocation, displacement, drain), and the close's metrics
//! and log line; plus the trust watcher that closes live connections whose
//! peer no longer verifies.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rustls::AlertDescription;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::Route;
use super::LOG_TARGET;
use crate::proxy::addr::Stream;
use crate::proxy::conn::Registration;
use crate::proxy::forward::{forward, Deadline, Totals};
use crate::reason::CloseReason;

/// `now + d`, or never when that is past what an `Instant` can hold.
fn deadline_after(d: Duration) -> Option<tokio::time::Instant> {
    tokio::time::Instant::now().checked_add(d)
}

/// The end of a forwarded connection's target side.
pub(super) trait Settle {
    /// Called once forwarding has stopped: the alert with which a client
    /// route's server refused our certificate, if it did.
    fn settle(&mut self) -> Option<AlertDescription>;
}

impl Settle for Stream {
    fn settle(&mut self) -> Option<AlertDescription> {
        None
    }
}

impl Route {
    /// Forwards until the connection ends or is told to close. A client
    /// route's server that turns out to have refused our certificate
    /// ([`Settle`]) ends it as a refused handshake instead of a close.
    pub(super) async fn supervise<P, T>(&self, reg: Registration, peer: P, mut target: T)
    where
        P: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
        T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Settle,
    {
        let conn = reg.conn.clone();
        let expiry = conn.peer.as_ref().map(|c| {
            let left = c
                .not_after_time()
                .duration_since(SystemTime::now())
                .unwrap_or_default();
            // X.509 validity is inclusive of its last second.
            deadline_after(left.saturating_add(Duration::from_secs(1)))
        });
        let expiry = expiry.flatten();
        let lifetime = self.cfg.max_connection_lifetime.and_then(deadline_after);
        // One timer for both (and the half-close linger, in `forward`): each
        // is laid out in every live connection's task, and only the earlier
        // can fire first.
        let (deadline, timed_out) = match (expiry, lifetime) {
            (Some(e), Some(l)) if l < e => (Some(l), CloseReason::Lifetime),
            (Some(e), _) => (Some(e), CloseReason::Expired),
            (None, l) => (l, CloseReason::Lifetime),
        };
        let totals = Totals::default();
        self.metrics.active.increment(1.0);
        let deadline = deadline.map(|at| Deadline {
            at,
            reason: timed_out,
        });
        let reason = tokio::select! {
            r = forward(peer, &mut target, &self.metrics.to_target, &self.metrics.from_target, &totals, self.cfg.half_close_linger, deadline) => r,
            r = conn.signal.closed() => r,
        };
        self.metrics.active.decrement(1.0);
        if let Some(alert) = target.settle() {
            return self.refused_by_server(&conn, alert);
        }
        self.metrics.closed(reason);
        let to = totals.to_target.load(std::sync::atomic::Ordering::Relaxed);
        let from = totals
            .from_target
            .load(std::sync::atomic::Ordering::Relaxed);
        let duration = conn.opened.elapsed();
        match reason {
            CloseReason::Completed => {
                debug!(target: LOG_TARGET, route = %self.cfg.name, conn = conn.id, peer = %conn.peer_addr, to_target = to, from_target = from, ?duration, "connection closed")
            }
            CloseReason::Expired
            | CloseReason::Revoked
            | CloseReason::Lifetime
            | CloseReason::Displaced
            | CloseReason::Drain => {
                info!(target: LOG_TARGET, route = %self.cfg.name, conn = conn.id, peer = %conn.peer_addr, reason = reason.as_str(), to_target = to, from_target = from, ?duration, "connection closed")
            }
            _ => {
                debug!(target: LOG_TARGET, route = %self.cfg.name, conn = conn.id, peer = %conn.peer_addr, reason = reason.as_str(), to_target = to, from_target = from, ?duration, "connection closed")
            }
        }
        drop(reg);
    }

    /// Re-verifies every live connection whenever the store's trust shrinks,
    /// closing those whose peer no longer verifies (`revoked`).
    pub async fn watch_trust(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut shrunk = self.store.trust_shrunk();
        loop {
            let shrank = tokio::select! {
                r = shrunk.changed() => r,
                _ = stop.wait_for(|s| *s) => return,
            };
            if shrank.is_err() {
                // The store is gone: nothing will shrink the trust again.
                return;
            }
            self.revoke_untrusted(SystemTime::now());
        }
    }

    /// Closes every live connection whose peer chain fails verification now.
    pub fn revoke_untrusted(&self, now: SystemTime) {
        for conn in self.registry.snapshot() {
            if let Err(e) = self.reverify(&conn.chain, now) {
                if conn.signal.close(CloseReason::Revoked) {
                    use crate::logsafe::{clean, clean_display, clean_list};
                    let (subject, serial, sans) = conn
                        .peer
                        .as_ref()
                        .map(|c| (c.subject.as_str(), c.serial.as_str(), c.sans()))
                        .unwrap_or_default();
                    warn!(
                        target: LOG_TARGET, route = %self.cfg.name, peer = %conn.peer_addr, subject = %clean(subject), serial = %serial,
                        sans = %clean_list(&sans), error = %clean_display(&e),
                        "closing connection: its peer is no longer trusted"
                    );
                }
            }
        }
    }
}

//! A forwarded connection's life once admitted: forwarding under its
//! deadlines (certificate expiry, `--max-connection-lifetime`), closing it
//! when told to (revocation, displacement, drain), and the close's metrics
//! and log line; plus the trust watcher that closes live connections whose
//! peer no longer verifies.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use rustls::AlertDescription;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::Route;
use super::LOG_TARGET;
use crate::proxy::addr::Stream;
use crate::proxy::conn::{LiveConn, Registration};
use crate::proxy::forward::{Counters, Deadline, Forwarder, Totals};
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

/// What carries a forwarded connection's traffic until it ends: the byte
/// copy of [`forward`](crate::proxy::forward) ([`Bytes`]), or HTTP with the peer's identity in
/// each request (`super::http`, a server route with `--http-identity`).
pub(super) trait Carry: Send {
    /// Carries until the traffic ends or `deadline` comes, counting into
    /// `totals`; the reason it ended.
    fn carry<'a>(
        &'a mut self,
        route: &'a Route,
        totals: &'a Totals,
        deadline: Option<Deadline>,
    ) -> impl std::future::Future<Output = CloseReason> + Send + 'a;

    /// Called once carrying stopped (see [`Settle`]).
    fn settle(&mut self) -> Option<AlertDescription>;
}

/// The two sides of a connection whose bytes are copied as they come.
pub(super) struct Bytes<P, T> {
    pub peer: P,
    pub target: T,
}

/// A connection's forwarding phase as one state machine, held inline in
/// its task ([`Phased`]): the route, the registration, the two streams,
/// the copy's state ([`Forwarder`]), and `held`, what must live exactly as
/// long as the connection (its `--max-connections` slot, its load count, a
/// transparent route's dial guard). Written by hand rather than as nested
/// `async fn`s because each of those layers laid its arguments, and the
/// references between its locals, out again in every live connection's
/// task: a server connection's task was 1,336 bytes, ~700 of them such
/// copies.
pub(super) struct Forwarding<P, T, H> {
    /// Declared before `reg`: a task dropped mid-forwarding (its runtime
    /// shut down) closes both sockets before it lets go of the
    /// registration, as a connection that ends does.
    streams: Option<Bytes<P, T>>,
    /// Taken (and so dropped, after both streams) when the copy ends.
    reg: Option<Registration>,
    route: Arc<Route>,
    copy: Forwarder,
    _held: H,
}

impl<P, T, H> Forwarding<P, T, H> {
    /// Starts forwarding `peer` ↔ `target` for the connection `reg`: under
    /// its deadline, counted as active until it ends.
    pub(super) fn new(route: Arc<Route>, reg: Registration, peer: P, target: T, held: H) -> Self {
        let deadline = route.deadline_of(&reg.conn);
        let copy = Forwarder::new(deadline);
        route.metrics.active.increment(1.0);
        Forwarding {
            streams: Some(Bytes { peer, target }),
            reg: Some(reg),
            route,
            copy,
            _held: held,
        }
    }
}

impl<P, T, H> Future for Forwarding<P, T, H>
where
    P: AsyncRead + AsyncWrite + Unpin,
    T: AsyncRead + AsyncWrite + Unpin + Settle,
    H: Unpin,
{
    type Output = ();

    /// Forwards until the copy ends or the connection is told to close
    /// (revocation, displacement, drain: looked at first), then closes.
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let (Some(reg), Some(streams)) = (&this.reg, &mut this.streams) else {
            return Poll::Ready(());
        };
        let reason = match reg.conn.signal.poll_closed(cx) {
            Poll::Ready(reason) => reason,
            Poll::Pending => {
                let m = &this.route.metrics;
                let counters = Counters {
                    to_target: &m.to_target,
                    from_target: &m.from_target,
                    totals: &reg.conn.totals,
                    linger: this.route.cfg.half_close_linger,
                };
                match this
                    .copy
                    .poll(cx, &mut streams.peer, &mut streams.target, &counters)
                {
                    Poll::Ready(reason) => reason,
                    Poll::Pending => return Poll::Pending,
                }
            }
        };
        this.route.metrics.active.decrement(1.0);
        let (Some(reg), Some(mut streams)) = (this.reg.take(), this.streams.take()) else {
            return Poll::Ready(());
        };
        if let Some(alert) = streams.target.settle() {
            drop(streams);
            this.route.refused_by_server(&reg.conn, alert);
            return Poll::Ready(());
        }
        // Both sockets closed before the close is logged.
        drop(streams);
        this.route.closed_after_forwarding(&reg.conn, reason);
        drop(reg);
        Poll::Ready(())
    }
}

/// A connection's task: its establishment (handshake, admission, slot,
/// dial), boxed and let go of once done, then its forwarding held inline,
/// so an idle connection's task holds only the forwarding state. A
/// connection carried otherwise (HTTP) keeps that future boxed instead.
pub(super) enum Phased<F> {
    Establishing(Pin<Box<dyn Future<Output = Established<F>> + Send>>),
    Forwarding(F),
    Other(Pin<Box<dyn Future<Output = ()> + Send>>),
    Done,
}

/// What an establishment ends in.
pub(super) enum Established<F> {
    /// Forwarding bytes ([`Forwarding`]).
    Forward(F),
    /// Carried by another future (HTTP).
    Other(Pin<Box<dyn Future<Output = ()> + Send>>),
    /// Closed before forwarding (refused, unreachable, told to close).
    Closed,
}

impl<F> Phased<F> {
    /// The task of a connection that `establishment` establishes.
    pub(super) fn establishing(
        establishment: impl Future<Output = Established<F>> + Send + 'static,
    ) -> Phased<F> {
        Phased::Establishing(Box::pin(establishment))
    }
}

impl<F: Future<Output = ()> + Unpin> Future for Phased<F> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        loop {
            let done = match this {
                Phased::Establishing(e) => match e.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Established::Forward(f)) => {
                        *this = Phased::Forwarding(f);
                        continue;
                    }
                    Poll::Ready(Established::Other(o)) => {
                        *this = Phased::Other(o);
                        continue;
                    }
                    Poll::Ready(Established::Closed) => true,
                },
                Phased::Forwarding(f) => Pin::new(f).poll(cx).is_ready(),
                Phased::Other(o) => o.as_mut().poll(cx).is_ready(),
                Phased::Done => true,
            };
            if !done {
                return Poll::Pending;
            }
            *this = Phased::Done;
            return Poll::Ready(());
        }
    }
}

impl Route {
    /// When a connection must end whatever its traffic: its peer
    /// certificate's expiry or `--max-connection-lifetime`, the earlier.
    fn deadline_of(&self, conn: &LiveConn) -> Option<Deadline> {
        let expiry = conn.peer().map(|c| {
            let left = c
                .not_after_time()
                .duration_since(SystemTime::now())
                .unwrap_or_default();
            // X.509 validity is inclusive of its last second.
            deadline_after(left.saturating_add(Duration::from_secs(1)))
        });
        let expiry = expiry.flatten();
        let lifetime = self.cfg.max_connection_lifetime.and_then(deadline_after);
        // One timer for both (and the half-close linger, in `forward`): only
        // the earlier can fire first.
        let (at, reason) = match (expiry, lifetime) {
            (Some(e), Some(l)) if l < e => (Some(l), CloseReason::Lifetime),
            (Some(e), _) => (Some(e), CloseReason::Expired),
            (None, l) => (l, CloseReason::Lifetime),
        };
        at.map(|at| Deadline { at, reason })
    }

    /// Forwards until the traffic `carried` ends or the connection is told
    /// to close (the HTTP path; bytes are forwarded by [`Forwarding`]).
    pub(super) async fn supervise_carried<C: Carry>(&self, reg: Registration, mut carried: C) {
        let conn = reg.conn.clone();
        let deadline = self.deadline_of(&conn);
        let totals = &conn.totals;
        self.metrics.active.increment(1.0);
        let reason = tokio::select! {
            r = carried.carry(self, totals, deadline) => r,
            r = conn.signal.closed() => r,
        };
        self.metrics.active.decrement(1.0);
        if let Some(alert) = carried.settle() {
            return self.refused_by_server(&conn, alert);
        }
        // Both sockets closed before the close is logged, as when the copy
        // itself dropped them.
        drop(carried);
        self.closed_after_forwarding(&conn, reason);
        drop(reg);
    }

    /// Counts and logs a forwarded connection's close.
    fn closed_after_forwarding(&self, conn: &LiveConn, reason: CloseReason) {
        self.metrics.closed(reason);
        self.access(conn, reason);
        let totals = &conn.totals;
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
            | CloseReason::Denied
            | CloseReason::Lifetime
            | CloseReason::Displaced
            | CloseReason::Drain => {
                info!(target: LOG_TARGET, route = %self.cfg.name, conn = conn.id, peer = %conn.peer_addr, reason = reason.as_str(), to_target = to, from_target = from, ?duration, "connection closed")
            }
            _ => {
                debug!(target: LOG_TARGET, route = %self.cfg.name, conn = conn.id, peer = %conn.peer_addr, reason = reason.as_str(), to_target = to, from_target = from, ?duration, "connection closed")
            }
        }
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

    /// Closes every live connection whose peer chain fails verification
    /// now: `denied` when a deny-list entry matches it, else `revoked`.
    /// Each distinct chain is judged once (connections from one peer share
    /// it): ten thousand connections from a handful of peers cost a handful
    /// of verifications on the runtime that runs this, not ten thousand.
    pub fn revoke_untrusted(&self, now: SystemTime) {
        let mut judged = std::collections::HashMap::new();
        for conn in self.registry.snapshot() {
            let verdict = judged
                .entry((conn.presented_id(), conn.rule))
                .or_insert_with(|| self.reverify(&conn, now));
            if let Err(e) = verdict {
                let reason = CloseReason::of_lost_trust(e);
                if conn.signal.close(reason) {
                    self.log_lost_trust(&conn, e);
                }
            }
        }
    }

    /// The one WARN line of a live connection closed by the peer
    /// judgement: naming the deny-list entry when one matched.
    fn log_lost_trust(&self, conn: &crate::proxy::conn::LiveConn, e: &rustls::Error) {
        use crate::log::{clean, clean_display, clean_list};
        let (subject, serial, sans) = conn.peer_fields();
        match crate::reason::denied_entry(e) {
            Some(entry) => warn!(
                target: LOG_TARGET, route = %self.cfg.name, peer = %conn.peer_addr, subject = %clean(subject), serial = %serial,
                sans = %clean_list(&sans), entry = %clean(entry),
                "closing connection: its peer is denied"
            ),
            None => warn!(
                target: LOG_TARGET, route = %self.cfg.name, peer = %conn.peer_addr, subject = %clean(subject), serial = %serial,
                sans = %clean_list(&sans), error = %clean_display(e),
                "closing connection: its peer is no longer trusted"
            ),
        }
    }
}

//! How an accepted connection earns its place: the handshake under its
//! timeout and `--max-handshakes` ticket, the re-check of the peer against
//! the trust in force once registered, `--exclusive` displacement, and the
//! wait for one of the `--max-connections` slots.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use rustls_pki_types::CertificateDer;
use tokio::sync::OwnedSemaphorePermit;
use tracing::{debug, info, warn};

use super::LOG_TARGET;
use super::{Route, RouteTls};
use crate::proxy::conn::{LiveConn, Registration};
use crate::proxy::pending::Ticket;
use crate::proxy::settings::Mode;
use crate::reason::{CloseReason, FailureReason};
use crate::tls::stream::{ClientStream, ServerStream};
use crate::tls::verify::{with_report, PeerReport};

/// How long an `--exclusive` newcomer waits, at most, for the incumbent it
/// displaced to let go of the target, on top of the connect timeout (the
/// incumbent may itself be mid-connect).
const DISPLACE_GRACE: Duration = Duration::from_secs(1);

/// Why a connection stopped while it waited for a `--max-connections`
/// slot is closed: its ticket was taken to admit a newer handshake
/// (`overload`), or the drain ran out (`drain`).
fn slot_wait_close(stopped: FailureReason) -> CloseReason {
    match stopped {
        FailureReason::Overload => CloseReason::Overload,
        _ => CloseReason::Drain,
    }
}

/// A handshake stopped before it finished: the reason it is counted under
/// and the error its WARN line gives.
fn handshake_stopped(stopped: FailureReason) -> (FailureReason, String) {
    let error = match stopped {
        FailureReason::Overload => "closed to admit a newer handshake (--max-handshakes reached)",
        _ => "closed: the drain timeout ran out before the handshake finished",
    };
    (stopped, error.to_string())
}

/// A handshake that finished or ran out of `--handshake-timeout`: the
/// stream, or the reason it is counted under and the error its WARN line
/// gives.
fn handshake_ended<S>(
    ended: Result<std::io::Result<S>, tokio::time::error::Elapsed>,
) -> Result<S, (FailureReason, String)> {
    match ended {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(e)) => Err((
            FailureReason::from_io(&e),
            crate::reason::plain_io(&e).to_string(),
        )),
        Err(_) => Err((FailureReason::Timeout, "handshake timed out".to_string())),
    }
}

/// A TLS stream that may have resumed a session.
pub(super) trait Resumable {
    /// The peer chain stored with the session when the handshake resumed
    /// one; `None` after a full handshake.
    fn resumed_chain(&self) -> Option<Vec<CertificateDer<'static>>>;

    /// Keeps what the handshake's report says the stream cannot tell.
    fn note(&mut self, _report: &mut PeerReport) {}
}

/// The chain rustls kept for a resumed session (empty when it kept none,
/// which admission refuses).
fn resumed_chain(conn: &rustls::CommonState) -> Option<Vec<CertificateDer<'static>>> {
    (conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed)).then(|| {
        conn.peer_certificates()
            .map(<[_]>::to_vec)
            .unwrap_or_default()
    })
}

impl<IO> Resumable for ServerStream<IO> {
    fn resumed_chain(&self) -> Option<Vec<CertificateDer<'static>>> {
        resumed_chain(self.get_ref().1)
    }

    /// The SNI, for the PROXY header.
    fn note(&mut self, report: &mut PeerReport) {
        self.note_sni(report.sni.take());
    }
}

impl<IO> Resumable for ClientStream<IO> {
    fn resumed_chain(&self) -> Option<Vec<CertificateDer<'static>>> {
        resumed_chain(self.get_ref().1)
    }
}

impl Route {
    /// Waits for one of the `--max-connections` slots, unless the
    /// connection is told to close first.
    pub(super) async fn take_slot(
        &self,
        reg: &Registration,
        ticket: &Ticket,
    ) -> Option<OwnedSemaphorePermit> {
        if let Ok(p) = self.slots.clone().try_acquire_owned() {
            return Some(p);
        }
        debug!(target: LOG_TARGET, route = %self.cfg.name, peer = %reg.conn.peer_addr, "all --max-connections slots taken; waiting for one");
        tokio::select! {
            biased;
            reason = reg.conn.signal.closed() => {
                self.closed_early(reg, reason);
                None
            }
            reason = ticket.stopped() => {
                self.closed_early(reg, slot_wait_close(reason));
                None
            }
            p = self.slots.clone().acquire_owned() => p.ok(),
        }
    }

    /// An `--exclusive` newcomer waits until the incumbent it displaced has
    /// closed both its sockets, so the target never sees two at once.
    pub(super) async fn await_displaced(&self, old: &LiveConn) {
        let bound = self.cfg.connect_timeout.saturating_add(DISPLACE_GRACE);
        if tokio::time::timeout(bound, old.finished()).await.is_err() {
            warn!(target: LOG_TARGET, route = %self.cfg.name, incumbent = %old.peer_addr, waited = ?bound, "exclusive: the displaced connection did not close in time; dialing the target anyway");
        }
    }

    /// Accounts for a connection closed after authentication but before it
    /// was forwarded (revoked, displaced or drained while it waited).
    pub(super) fn closed_early(&self, reg: &Registration, reason: CloseReason) {
        self.metrics.closed(reason);
        self.access(&reg.conn, reason);
        info!(target: LOG_TARGET, route = %self.cfg.name, peer = %reg.conn.peer_addr, reason = reason.as_str(), "connection closed before forwarding");
    }

    /// Runs one handshake under `--handshake-timeout`, unless its ticket is
    /// stopped first (`--max-handshakes` reached, or the drain ran out). On
    /// success it is counted and the connection registered; on failure it is
    /// counted by reason and logged as one WARN line. A client route's
    /// success is only timed here: it is counted once the server has shown
    /// it accepted us ([`ServerVerdict`](super::verdict::ServerVerdict)), or here if we close it first.
    ///
    /// Callers pass the handshake boxed: inline, its TLS state would be laid
    /// out again at each level of futures wrapping it, and a task keeps the
    /// size of its largest state for the life of the connection.
    pub(super) async fn authenticate<S: Resumable>(
        &self,
        peer: String,
        handshake: impl std::future::Future<Output = std::io::Result<S>>,
        ticket: &Ticket,
        rule: Option<usize>,
    ) -> Option<(Box<S>, Registration, Option<Arc<LiveConn>>)> {
        let started = Instant::now();
        let bounded = async {
            tokio::select! {
                // A stop (overload, or the drain running out) wins over a
                // handshake finishing in the same poll: nothing registers
                // after the drain closed everything.
                biased;
                reason = ticket.stopped() => Err(handshake_stopped(reason)),
                r = tokio::time::timeout(self.cfg.handshake_timeout, handshake) => handshake_ended(r),
            }
        };
        let (result, mut report) = with_report(bounded).await;
        let (reason, error) = match result {
            Ok(mut stream) => {
                stream.note(&mut report);
                let took = started.elapsed();
                // No verifier ran on a resumed session: its stored chain is
                // what admission judges.
                let resumed = stream.resumed_chain();
                let report = match &resumed {
                    Some(chain) => PeerReport::resumed(chain.clone()),
                    None => report,
                };
                let admitted = self.admit(peer, report, resumed.is_some(), rule, took);
                if admitted.is_some() && resumed.is_some() {
                    self.metrics.resumptions.increment(1);
                }
                if resumed.is_some() && admitted.is_none() {
                    // Counted as a refused handshake by `admit`.
                } else if self.cfg.mode == Mode::Server || admitted.is_none() {
                    self.metrics.handshake_ok(took);
                } else {
                    self.metrics.handshake_duration.record(took.as_secs_f64());
                }
                // Boxed once here: the TLS stream (~1.2 KB of rustls state)
                // then moves through supervise and forward as a pointer
                // instead of being laid out again in each of their futures,
                // which every live connection's task would carry.
                return admitted.map(|(reg, old)| (Box::new(stream), reg, old));
            }
            Err(e) => e,
        };
        self.refused(&peer, reason, &error, &report, started);
        None
    }

    /// Admits an authenticated peer: registers it, re-checks its chain, and
    /// only then (for `--exclusive`) lets it displace the incumbent.
    /// A resumed session (`resumed`) is judged here for the first time
    /// since its ticket was issued; its refusal is a refused handshake
    /// (closed without an alert: the handshake is over), not a close.
    /// `rule`: a transparent connection's destination rule, kept with it.
    fn admit(
        &self,
        peer_addr: String,
        report: PeerReport,
        resumed: bool,
        rule: Option<usize>,
        took: Duration,
    ) -> Option<(Registration, Option<Arc<LiveConn>>)> {
        if let Some(c) = &report.cert {
            use crate::log::{clean, clean_list};
            debug!(
                target: LOG_TARGET, route = %self.cfg.name, peer = %peer_addr, subject = %clean(&c.subject),
                serial = %c.serial, sans = %clean_list(&c.sans()), "handshake complete"
            );
        }
        let verified_with = report.verified_with;
        let reg = self
            .registry
            .register_for(peer_addr, report.cert, report.chain, rule);
        // The verifier checked the chain against the trust of its moment,
        // possibly several round trips ago. A trust shrink since then found
        // no registered connection to re-verify; now that this one is
        // visible to the trust watcher, check it once more ourselves.
        // When the trust in force is still the very one the verifier judged
        // against, nothing can have shrunk and the verdict stands: the check
        // (a signature verification) is only repeated when it changed.
        let unchanged = verified_with.is_some_and(|t| Arc::ptr_eq(&t, &self.store.current().trust));
        let verdict = if unchanged {
            Ok(())
        } else {
            self.reverify(&reg.conn, SystemTime::now())
        };
        if let Err(e) = verdict {
            if resumed {
                self.resumption_refused(&reg.conn, &e, took);
                return None;
            }
            self.metrics.closed(CloseReason::of_lost_trust(&e));
            warn!(
                target: LOG_TARGET, route = %self.cfg.name, peer = %reg.conn.peer_addr,
                error = %crate::log::clean_display(&e),
                "closing connection: its peer lost trust during the handshake"
            );
            return None;
        }
        let mut displaced = None;
        if self.cfg.exclusive {
            if let Some(old) = self.registry.promote(&reg) {
                info!(
                    target: LOG_TARGET, route = %self.cfg.name,
                    incumbent = %old.peer_addr,
                    newcomer = %reg.conn.peer_addr,
                    "exclusive: authenticated newcomer displaces the incumbent"
                );
                displaced = Some(old);
            }
        }
        Some((reg, displaced))
    }

    /// Checks a live connection's peer chain against the trust and SAN
    /// policy in force now: a transparent connection's, against its own
    /// destination rule.
    pub(super) fn reverify(&self, conn: &LiveConn, now: SystemTime) -> Result<(), rustls::Error> {
        let chain = conn.chain();
        match &self.tls {
            RouteTls::Server { policy, .. } => policy.reverify(chain, now),
            RouteTls::Client { policy, .. } => policy.reverify(chain, now),
            RouteTls::Transparent(t) => t.reverify(conn.rule, chain, now),
        }
    }
}

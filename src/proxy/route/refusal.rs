//! How a route accounts for a connection it refuses or cannot forward: the
//! failure metrics and the rate-limited WARN line of a refused handshake
//! (ours, or a client route's server refusing us after our handshake
//! finished), and an unreachable target.

use std::time::Instant;

use rustls::AlertDescription;
use tracing::warn;

use super::Route;
use super::LOG_TARGET;
use crate::proxy::conn::LiveConn;
use crate::reason::{CloseReason, FailureReason};
use crate::tls::verify::PeerReport;

impl Route {
    pub(super) fn target_unreachable(&self, peer: &str, e: &std::io::Error) {
        self.target_unreachable_at(peer, &self.cfg.target, e)
    }

    pub(super) fn target_unreachable_at(
        &self,
        peer: &str,
        target: &dyn std::fmt::Display,
        e: &std::io::Error,
    ) {
        self.metrics.target_connect_failures.increment(1);
        self.metrics.closed(CloseReason::TargetError);
        warn!(target: LOG_TARGET, route = %self.cfg.name, peer = %peer, target = %target, error = %e, "cannot connect to target");
    }

    pub(super) fn refused(
        &self,
        peer: &str,
        reason: FailureReason,
        error: &dyn std::fmt::Display,
        report: &PeerReport,
        started: Instant,
    ) {
        self.metrics.handshake_failed(reason, started.elapsed());
        self.log_refusal(peer, reason, error, report.cert.as_ref());
    }

    /// The WARN line of one refusal, unless this route's rate limit for
    /// `reason` holds it back (counted in the "suppressed N" summary).
    fn log_refusal(
        &self,
        peer: &str,
        reason: FailureReason,
        error: &dyn std::fmt::Display,
        cert: Option<&crate::identity::CertInfo>,
    ) {
        use crate::log::{clean, clean_display, clean_list};
        if !self.refusal_log.admit(reason) {
            return;
        }
        let error = clean_display(error);
        match cert {
            Some(c) => warn!(
                target: LOG_TARGET, route = %self.cfg.name, peer = %peer, reason = reason.as_str(),
                subject = %clean(&c.subject), serial = %c.serial, sans = %clean_list(&c.sans()),
                error = %error, "handshake refused"
            ),
            None => warn!(
                target: LOG_TARGET, route = %self.cfg.name, peer = %peer, reason = reason.as_str(), error = %error,
                "handshake refused"
            ),
        }
    }

    /// A resumed session whose stored peer chain no longer passes
    /// admission: counted and logged as a refused handshake with its
    /// reason, though the peer saw its handshake complete and then a
    /// close, with no alert (docs/resumption.md).
    pub(super) fn resumption_refused(
        &self,
        conn: &LiveConn,
        error: &rustls::Error,
        took: std::time::Duration,
    ) {
        let reason = FailureReason::from_tls(error);
        self.metrics.handshake_failed(reason, took);
        let error = format!(
            "{}, in a resumed session: closed after the handshake",
            crate::reason::plain_tls(error)
        );
        self.log_refusal(&conn.peer_addr, reason, &error, conn.peer());
    }

    /// A client route's server refused us with `alert` once our handshake
    /// had finished (TLS 1.3 servers judge the client's certificate after
    /// their own Finished): a failed handshake, never a close. Its duration
    /// was recorded when our side of the handshake ended.
    pub(super) fn refused_by_server(&self, conn: &LiveConn, alert: AlertDescription) {
        let error = rustls::Error::AlertReceived(alert);
        let reason = FailureReason::from_tls(&error);
        metrics::counter!(
            crate::metrics::HANDSHAKE_FAILURES,
            "route" => self.cfg.name.clone(),
            "reason" => reason.as_str()
        )
        .increment(1);
        let error = format!("{error}, after our handshake finished: the server refused us");
        self.log_refusal(&conn.peer_addr, reason, &error, conn.peer());
    }
}

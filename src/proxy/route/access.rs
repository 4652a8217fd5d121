//! The access log: one INFO line per authenticated connection when it
//! closes, naming who it was (SANs, serial, the SHA-256 of its key), how
//! much it moved and why it ended. It is what an incident responder greps
//! for after the fact ("which connections did the leaked key open?"), so it
//! is written for every authenticated connection of a route with
//! `--access-log on` (the default on server routes), whether the peer or the
//! sidecar ended it. Refused handshakes never reach it: they stay on the
//! rate-limited WARN path, so an unauthenticated peer cannot fill the log.
//! Everything the peer chose is escaped and capped ([`crate::log`]).

use tracing::info;

use super::Route;
use crate::proxy::conn::LiveConn;
use crate::reason::CloseReason;

/// The tracing target of access lines, apart from the route's own lines so
/// that a log pipeline (or `RUST_LOG=mtls_sidecar::access=off`) can route
/// or silence them alone.
pub(crate) const ACCESS_TARGET: &str = "mtls_sidecar::access";

/// The base64 SHA-256 of the SubjectPublicKeyInfo of a chain's leaf, or
/// `""` when there is no leaf that parses.
pub fn leaf_spki(conn: &LiveConn) -> String {
    conn.chain()
        .first()
        .and_then(|c| crate::identity::pin::spki_sha256(c.as_ref()))
        .map(|p| crate::identity::pin::encode(&p))
        .unwrap_or_default()
}

impl Route {
    /// Writes `conn`'s access line, if this route keeps an access log.
    pub(super) fn access(&self, conn: &LiveConn, reason: CloseReason) {
        if !self.cfg.access_log {
            return;
        }
        use crate::log::{clean, clean_list};
        use std::sync::atomic::Ordering::Relaxed;
        let (subject, serial, sans) = conn.peer_fields();
        info!(
            target: ACCESS_TARGET,
            route = %self.cfg.name,
            conn = conn.id,
            peer = %conn.peer_addr,
            subject = %clean(subject),
            sans = %clean_list(&sans),
            serial = %clean(serial),
            spki_sha256 = %leaf_spki(conn),
            to_target = conn.totals.to_target.load(Relaxed),
            from_target = conn.totals.from_target.load(Relaxed),
            duration = ?conn.opened.elapsed(),
            reason = reason.as_str(),
            "access"
        );
    }
}

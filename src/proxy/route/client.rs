//! A client route's connection: the slot taken before dialing, the dial of
//! the remote sidecar, the TLS handshake that verifies it, and forwarding
//! the local application's stream to it; for a transparent route, first
//! the rule that its original destination selects.

use std::sync::Arc;
use std::time::Instant;

use rustls_pki_types::ServerName;
use tracing::debug;
use tracing::instrument::{Instrument, Instrumented};

use super::supervise::{Established, Forwarding};
use super::verdict::ServerVerdict;
use super::LOG_TARGET;
use super::{Dial, Local, Route, RouteTls};
use crate::process::memtrim::Live;
use crate::proxy::addr::Stream;
use crate::proxy::pending::Ticket;
use crate::proxy::preauth::Capped;
use crate::proxy::transparent::Outbound;
use crate::reason::{CloseReason, FailureReason};
use crate::tls::verify::PeerReport;

/// A client connection's forwarding: the local application's stream to
/// the remote sidecar's TLS stream, holding its slot, its load count and
/// what its dial returned beside the stream (`K`).
pub(super) type ClientForwarding<K> =
    Forwarding<Stream, ServerVerdict<Capped<Stream>>, (tokio::sync::OwnedSemaphorePermit, Live, K)>;

impl Route {
    /// A connection diverted to a transparent route: where it was going
    /// decides the rule, and so the server identity required there; one
    /// that no rule covers, that was not redirected, or that is our own
    /// connection looping back is closed (`no_destination`), never forwarded.
    /// Resolved in the connection's own task, not on the accept loop. The
    /// span naming the original destination is entered for the whole
    /// connection, its forwarding included.
    pub(super) async fn establish_transparent(
        self: Arc<Self>,
        stream: Stream,
        peer_addr: String,
        ticket: Ticket,
        live: Live,
    ) -> Established<Instrumented<ClientForwarding<Outbound>>> {
        use crate::proxy::transparent::{dial, NoDestination};
        let RouteTls::Transparent(t) = &self.tls else {
            return Established::Closed;
        };
        let decided = match &stream {
            Stream::Tcp(tcp) => t.resolve(tcp),
            Stream::Unix(_) => Err(NoDestination::NotTcp),
        };
        let (rule, original, to) = match decided {
            Ok(decided) => decided,
            Err(why) => {
                drop(ticket);
                drop(stream);
                self.metrics.closed(CloseReason::NoDestination);
                t.log.refused(&peer_addr, &why);
                return Established::Closed;
            }
        };
        // Every line about this connection from here on (dial failure,
        // handshake refused or complete, closed) carries the original
        // destination and rule: a WARN-level span, so the WARN lines have it
        // at any log level that shows them.
        let span = tracing::warn_span!("transparent", original_dst = %original, rule);
        let _entered = span.enter();
        debug!(target: LOG_TARGET, route = %self.cfg.name, peer = %peer_addr, dial = %to, "transparent: dialing the original destination's sidecar");
        drop(_entered);
        let Some(tls) = t.tls.get(rule) else {
            return Established::Closed;
        };
        let server_name = t.server_name(rule, to);
        let connect = dial(to, self.cfg.mark, self.cfg.connect_timeout);
        let connect: Dial<_> =
            Box::pin(async move { connect.await.map(|(s, guard)| (Stream::Tcp(s), guard)) });
        let local = Local {
            stream,
            addr: peer_addr,
            ticket,
            live,
            rule: Some(rule),
        };
        let connector = tls.client.config();
        let established = self
            .clone()
            .establish_client(connector, server_name, connect, to.to_string(), local)
            .instrument(span.clone())
            .await;
        match established {
            Established::Forward(f) => Established::Forward(f.instrument(span)),
            Established::Other(o) => Established::Other(o),
            Established::Closed => Established::Closed,
        }
    }

    /// The slot, dial, handshake and admission of a client connection:
    /// what forwarding it then needs, or how it went otherwise. `connect`
    /// dials the remote sidecar; what it returns beside the stream is held
    /// for as long as the connection lasts. `target` names the remote
    /// sidecar in logs.
    ///
    /// `connect` comes boxed, so its future (its timeout timer included)
    /// is let go of once dialed, not laid out in this future for the rest
    /// of the establishment.
    pub(super) async fn establish_client<K: Send + Unpin + 'static>(
        self: Arc<Self>,
        connector: Arc<rustls::ClientConfig>,
        server_name: ServerName<'static>,
        connect: Dial<K>,
        target: String,
        local: Local,
    ) -> Established<ClientForwarding<K>> {
        let Local {
            stream: local,
            addr: local_addr,
            ticket,
            live,
            rule,
        } = local;
        // A client route's slot is taken before dialing, so a full route
        // holds no remote connection open while it waits; the wait is under
        // the handshake ticket and its bounds.
        let slot = tokio::select! {
            s = self.slots.clone().acquire_owned() => s.ok(),
            reason = ticket.stopped() => {
                self.stopped_before_handshake(&local_addr, reason, "closed while waiting for a connection slot");
                return Established::Closed;
            }
        };
        let Some(slot) = slot else {
            return Established::Closed;
        };
        // Nothing is read from the local application before the remote
        // sidecar is verified: bytes wait in the socket until supervise.
        let remote = tokio::select! {
            r = connect => r,
            reason = ticket.stopped() => {
                self.stopped_before_handshake(&local_addr, reason, "closed while connecting to the target");
                return Established::Closed;
            }
        };
        let (remote, keep) = match remote {
            Ok(r) => r,
            Err(e) => {
                self.target_unreachable_at(&local_addr, &target, &e);
                return Established::Closed;
            }
        };
        let handshake = Box::pin(crate::tls::stream::connect(
            connector,
            server_name,
            Capped::new(remote),
        ));
        if let Some((mut tls, reg, _)) = self.authenticate(target, handshake, &ticket, rule).await {
            drop(ticket);
            tls.get_mut().0.lift();
            if let Some(p) = tls.get_ref().1.alpn_protocol() {
                debug!(target: LOG_TARGET, route = %self.cfg.name, conn = reg.conn.id, alpn = %String::from_utf8_lossy(p), "ALPN negotiated");
            }
            let server = ServerVerdict::new(tls, self.metrics.handshakes.clone());
            let held = (slot, live, keep);
            return Established::Forward(Forwarding::new(self, reg, local, server, held));
        }
        Established::Closed
    }

    /// A client connection whose ticket was stopped (`--max-handshakes`
    /// reached, or the drain ran out) before its handshake began, `when`
    /// saying where it was: counted and logged as a refused handshake.
    fn stopped_before_handshake(&self, local_addr: &str, reason: FailureReason, when: &str) {
        self.refused(
            local_addr,
            reason,
            &when,
            &PeerReport::default(),
            Instant::now(),
        );
    }
}

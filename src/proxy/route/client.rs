//! A client route's connection: the slot taken before dialing, the dial of
//! the remote sidecar, the TLS handshake that verifies it, and forwarding
//! the local application's stream to it; for a transparent route, first
//! the rule that its original destination selects.

use std::sync::Arc;
use std::time::Instant;

use rustls_pki_types::ServerName;
use tracing::debug;

use super::verdict::ServerVerdict;
use super::LOG_TARGET;
use super::{Dial, Local, Route, RouteTls};
use crate::proxy::addr::Stream;
use crate::proxy::pending::Ticket;
use crate::proxy::preauth::Capped;
use crate::reason::{CloseReason, FailureReason};
use crate::tls::verify::PeerReport;

impl Route {
    /// A connection diverted to a transparent route: where it was going
    /// decides the rule, and so the server identity required there; one
    /// that no rule covers, that was not redirected, or that is our own
    /// connection looping back is closed (`no_destination`), never forwarded.
    pub(super) async fn handle_transparent(
        self: Arc<Self>,
        stream: Stream,
        peer_addr: String,
        ticket: Ticket,
        live: crate::process::memtrim::Live,
    ) {
        use crate::proxy::transparent::{dial, NoDestination};
        let RouteTls::Transparent(t) = &self.tls else {
            return;
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
                return;
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
        let Some(tls) = t.tls.get(rule) else { return };
        let server_name = t.server_name(rule, to);
        let connect = dial(to, self.cfg.mark, self.cfg.connect_timeout);
        let connect: Dial<_> =
            Box::pin(async move { connect.await.map(|(s, guard)| (Stream::Tcp(s), guard)) });
        let local = Local {
            stream,
            addr: peer_addr,
            ticket,
            live,
        };
        let connector = tls.client.config();
        use tracing::Instrument;
        self.clone()
            .handle_client(connector, server_name, connect, to.to_string(), local)
            .instrument(span)
            .await
    }

    /// `connect` dials the remote sidecar; what it returns beside the
    /// stream is held for as long as the connection lasts. `target` names
    /// the remote sidecar in logs.
    ///
    /// `connect` comes boxed: an `async fn`'s arguments stay laid out in its
    /// future for its whole life, and a dial's future (its timeout timer
    /// included) would have sat in every live client connection's task.
    pub(super) async fn handle_client<K>(
        self: Arc<Self>,
        connector: Arc<rustls::ClientConfig>,
        server_name: ServerName<'static>,
        connect: Dial<K>,
        target: String,
        local: Local,
    ) {
        let Local {
            stream: local,
            addr: local_addr,
            ticket,
            live: _live,
        } = local;
        // A client route's slot is taken before dialing, so a full route
        // holds no remote connection open while it waits; the wait is under
        // the handshake ticket and its bounds.
        let slot = tokio::select! {
            s = self.slots.clone().acquire_owned() => s.ok(),
            reason = ticket.stopped() => return self.stopped_before_handshake(&local_addr, reason, "closed while waiting for a connection slot"),
        };
        let Some(_slot) = slot else { return };
        // Nothing is read from the local application before the remote
        // sidecar is verified: bytes wait in the socket until supervise.
        let remote = tokio::select! {
            r = connect => r,
            reason = ticket.stopped() => return self.stopped_before_handshake(&local_addr, reason, "closed while connecting to the target"),
        };
        let (remote, _keep) = match remote {
            Ok(r) => r,
            Err(e) => return self.target_unreachable_at(&local_addr, &target, &e),
        };
        let handshake = Box::pin(crate::tls::stream::connect(
            connector,
            server_name,
            Capped::new(remote),
        ));
        if let Some((mut tls, reg, _)) = self.authenticate(target, handshake, &ticket).await {
            drop(ticket);
            tls.get_mut().0.lift();
            if let Some(p) = tls.get_ref().1.alpn_protocol() {
                debug!(target: LOG_TARGET, route = %self.cfg.name, conn = reg.conn.id, alpn = %String::from_utf8_lossy(p), "ALPN negotiated");
            }
            let mut server = ServerVerdict::new(tls, &self.metrics.handshakes);
            self.supervise(reg, local, &mut server).await;
        }
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

//! A server route's connection: the TLS handshake with the remote client,
//! its admission, the dial of the local target, and the PROXY v2 header
//! (`--proxy-protocol`) that hands the peer's identity to the target.

use std::sync::Arc;

use tokio::io::AsyncWriteExt;
use tokio::sync::OwnedSemaphorePermit;
use tracing::debug;

use super::supervise::{Established, Forwarding};
use super::Route;
use super::LOG_TARGET;
use crate::process::memtrim::Live;
use crate::proxy::addr::Stream;
use crate::proxy::conn::Registration;
use crate::proxy::pending::Ticket;
use crate::proxy::preauth::Capped;
use crate::reason::CloseReason;
use crate::tls::stream::ServerStream;

/// A server connection's forwarding: the remote client's TLS stream to
/// the local target, holding its slot and load count.
pub(super) type ServerForwarding =
    Forwarding<Box<ServerStream<Capped<Stream>>>, Stream, (OwnedSemaphorePermit, Live)>;

impl Route {
    /// The handshake, admission, slot, dial and PROXY header of a server
    /// connection: what forwarding it then needs, or how it went otherwise.
    pub(super) async fn establish_server(
        self: Arc<Self>,
        config: Arc<rustls::ServerConfig>,
        stream: Stream,
        peer_addr: String,
        ticket: Ticket,
        live: Live,
    ) -> Established<ServerForwarding> {
        let addresses = match &stream {
            Stream::Tcp(s) => s.peer_addr().ok().zip(s.local_addr().ok()),
            Stream::Unix(_) => None,
        };
        let handshake = Box::pin(crate::tls::stream::accept(config, Capped::new(stream)));
        let Some((mut tls, reg, displaced)) =
            self.authenticate(peer_addr, handshake, &ticket, None).await
        else {
            return Established::Closed;
        };
        tls.get_mut().0.lift();
        if let Some(p) = tls.get_ref().1.alpn_protocol() {
            debug!(target: LOG_TARGET, route = %self.cfg.name, conn = reg.conn.id, alpn = %String::from_utf8_lossy(p), "ALPN negotiated");
        }
        // The ticket is kept while waiting for a slot: authenticated
        // connections queued behind a full route stay bounded by
        // --max-handshakes (the oldest closed as overload), never unbounded.
        let slot = self.take_slot(&reg, &ticket).await;
        drop(ticket);
        let Some(slot) = slot else {
            // Closed before forwarding: let go only after any incumbent this
            // one displaced, so a newcomer waiting on this connection waits
            // on the whole displacement chain.
            if let Some(old) = &displaced {
                self.await_displaced(old).await;
            }
            return Established::Closed;
        };
        if let Some(old) = &displaced {
            self.await_displaced(old).await;
        }
        let connect = self
            .cfg
            .target
            .connect_marked(self.cfg.connect_timeout, self.cfg.mark);
        let target = tokio::select! {
            r = connect => r,
            reason = reg.conn.signal.closed() => {
                self.closed_early(&reg, reason);
                return Established::Closed;
            }
        };
        let mut target = match target {
            Ok(t) => t,
            Err(e) => {
                self.access(&reg.conn, CloseReason::TargetError);
                self.target_unreachable(&reg.conn.peer_addr, &e);
                return Established::Closed;
            }
        };
        if self.cfg.proxy_protocol {
            let header = self.handoff(&reg, tls.get_ref().1, tls.sni(), addresses);
            let sent = match header {
                Ok(h) => tokio::time::timeout(self.cfg.connect_timeout, target.write_all(&h)).await,
                Err(e) => Ok(Err(e)),
            };
            if let Err(e) = sent.unwrap_or_else(|_| {
                Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "writing the PROXY header timed out",
                ))
            }) {
                self.access(&reg.conn, CloseReason::TargetError);
                self.target_unreachable(&reg.conn.peer_addr, &e);
                return Established::Closed;
            }
        }
        if let Some(settings) = self.cfg.http {
            // Boxed: HTTP's serving state (hyper's connection) is several
            // times the byte copy's, and a task keeps the size of its
            // largest state for the life of the connection, so inline it
            // made every server route's idle connection pay for it.
            // The slot and the load count live as long as the HTTP path.
            return Established::Other(Box::pin(async move {
                let _held = (slot, live);
                self.carry_http(reg, tls, target, settings).await
            }));
        }
        drop(displaced);
        Established::Forward(Forwarding::new(self, reg, tls, target, (slot, live)))
    }

    /// The PROXY v2 header for an authenticated server-side connection.
    fn handoff(
        &self,
        reg: &Registration,
        conn: &rustls::CommonState,
        sni: Option<&str>,
        addresses: Option<(std::net::SocketAddr, std::net::SocketAddr)>,
    ) -> std::io::Result<Vec<u8>> {
        let peer = reg.conn.peer();
        let matched = match &self.cfg.peer_sans {
            crate::identity::SanPolicy::Any => Some("*".to_string()),
            policy => peer.and_then(|c| {
                policy
                    .patterns()
                    .iter()
                    .find(|p| p.matches(c))
                    .map(|p| p.to_string())
            }),
        };
        crate::proxy::proxy_protocol::encode(&crate::proxy::proxy_protocol::Handoff {
            addresses,
            version: conn.protocol_version(),
            cipher: conn.negotiated_cipher_suite().map(|c| c.suite()),
            alpn: conn.alpn_protocol().map(<[u8]>::to_vec),
            sni: sni.map(str::to_string),
            unique_id: reg.conn.id.to_string(),
            peer_cert: reg.conn.chain().first().map(|c| c.as_ref().to_vec()),
            // The identity in force now: the one presented in this handshake
            // unless a rotation landed in between (then its successor).
            local_cert: self
                .store
                .current()
                .identity
                .cert
                .first()
                .map(|c| c.as_ref().to_vec()),
            matched,
            sans: peer.map(|c| c.sans()).unwrap_or_default(),
        })
    }
}

//! A server route's connection carried as HTTP (`--http-identity`): the
//! identity header is built once, from the handshake, and the HTTP path
//! ([`crate::proxy::http`]) replaces the byte copy under the same
//! supervision (close signal, deadline, metrics, close log).

use std::sync::Arc;

use rustls::AlertDescription;
use tokio::io::{AsyncRead, AsyncWrite};
use tracing::warn;

use super::supervise::Carry;
use super::{Route, LOG_TARGET};
use crate::proxy::addr::Stream;
use crate::proxy::conn::{LiveConn, Registration};
use crate::proxy::forward::{Deadline, Totals};
use crate::proxy::http::serve::Counters;
use crate::proxy::http::{HttpSettings, Identity};
use crate::reason::CloseReason;

/// Both sides of a connection to carry as HTTP, taken when carrying
/// starts.
pub(super) struct Http<P> {
    sides: Option<(P, Stream)>,
    /// The live connection, whose totals count the bytes.
    conn: Arc<LiveConn>,
    h2: bool,
    identity: Identity,
}

impl<P> Carry for Http<P>
where
    P: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    async fn carry(
        &mut self,
        route: &Route,
        // The connection's own totals, counted through `self.conn`: the
        // counting stream must own what it counts into.
        _totals: &Totals,
        deadline: Option<Deadline>,
    ) -> CloseReason {
        {
            let Some((peer, target)) = self.sides.take() else {
                return CloseReason::Completed;
            };
            let counters = Counters {
                to_target: route.metrics.to_target.clone(),
                from_target: route.metrics.from_target.clone(),
                conn: self.conn.clone(),
            };
            let identity = self.identity.clone();
            let served = crate::proxy::http::serve(peer, target, self.h2, identity, counters);
            let reason = match deadline {
                Some(d) => tokio::select! {
                    r = served => r,
                    _ = tokio::time::sleep_until(d.at) => d.reason,
                },
                None => served.await,
            };
            reason
        }
    }

    fn settle(&mut self) -> Option<AlertDescription> {
        None
    }
}

impl Route {
    /// Carries an admitted server connection as HTTP. A peer whose
    /// identity cannot be put in a header (its verified leaf does not
    /// parse again) is closed, never forwarded without one.
    pub(super) async fn carry_http<P>(
        &self,
        reg: Registration,
        tls: Box<crate::tls::stream::ServerStream<P>>,
        target: Stream,
        settings: HttpSettings,
    ) where
        Box<crate::tls::stream::ServerStream<P>>: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        P: AsyncRead + AsyncWrite + Unpin,
    {
        let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
        let ours = self.store.current();
        let ours = ours.identity.cert.first().map(|c| c.as_ref());
        let peer = reg.conn.chain().first().map(|c| c.as_ref());
        let Some(identity) = peer.and_then(|p| {
            let stalls = self.metrics.http_body_timeouts.clone();
            Identity::new(p, ours, settings, self.http_heads.clone(), stalls)
        }) else {
            warn!(target: LOG_TARGET, route = %self.cfg.name, conn = reg.conn.id, "closing connection: no identity header can be built for its peer");
            return;
        };
        let carried = Http {
            sides: Some((tls, target)),
            conn: reg.conn.clone(),
            h2,
            identity,
        };
        self.supervise_carried(reg, carried).await
    }
}

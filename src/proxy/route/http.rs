//! A server route's connection carried as HTTP (`--http-identity`): the
//! identity header is built once, from the handshake, and the HTTP path
//! ([`crate::proxy::http`]) replaces the byte copy under the same
//! supervision (close signal, deadline, metrics, close log).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rustls::AlertDescription;
use tokio::io::{AsyncRead, AsyncWrite};
use tracing::warn;

use super::supervise::Carry;
use super::{Route, LOG_TARGET};
use crate::proxy::addr::Stream;
use crate::proxy::conn::Registration;
use crate::proxy::forward::{Deadline, Totals};
use crate::proxy::http::serve::Counters;
use crate::proxy::http::{HttpSettings, Identity};
use crate::reason::CloseReason;

/// Both sides of a connection to carry as HTTP, taken when carrying
/// starts.
pub(super) struct Http<P> {
    sides: Option<(P, Stream)>,
    h2: bool,
    identity: Identity,
}

/// Adds a connection's HTTP byte counts to its totals however carrying
/// ends (a close drops the carrying future).
struct AddOnDrop<'a> {
    up: Arc<AtomicU64>,
    down: Arc<AtomicU64>,
    totals: &'a Totals,
}

impl Drop for AddOnDrop<'_> {
    fn drop(&mut self) {
        let t = self.totals;
        t.to_target
            .fetch_add(self.up.load(Ordering::Relaxed), Ordering::Relaxed);
        t.from_target
            .fetch_add(self.down.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}

impl<P> Carry for Http<P>
where
    P: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    async fn carry(
        &mut self,
        route: &Route,
        totals: &Totals,
        deadline: Option<Deadline>,
    ) -> CloseReason {
        {
            let Some((peer, target)) = self.sides.take() else {
                return CloseReason::Completed;
            };
            let counted = AddOnDrop {
                up: Arc::default(),
                down: Arc::default(),
                totals,
            };
            let counters = Counters {
                to_target: route.metrics.to_target.clone(),
                from_target: route.metrics.from_target.clone(),
                up: counted.up.clone(),
                down: counted.down.clone(),
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
            drop(counted);
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
        tls: Box<tokio_rustls::server::TlsStream<P>>,
        target: Stream,
        settings: HttpSettings,
    ) where
        Box<tokio_rustls::server::TlsStream<P>>: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        P: AsyncRead + AsyncWrite + Unpin,
    {
        let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
        let ours = self.store.current();
        let ours = ours.identity.cert.first().map(|c| c.as_ref());
        let peer = reg.conn.chain.first().map(|c| c.as_ref());
        let Some(identity) = peer.and_then(|p| Identity::new(p, ours, settings)) else {
            warn!(target: LOG_TARGET, route = %self.cfg.name, conn = reg.conn.id, "closing connection: no identity header can be built for its peer");
            return;
        };
        let carried = Http {
            sides: Some((tls, target)),
            h2,
            identity,
        };
        self.supervise_carried(reg, carried).await
    }
}

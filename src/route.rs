//! One route: its accept loop, the handshake of each connection in its own
//! task, and the supervision of each forwarded connection (close on
//! revocation, expiry, lifetime, displacement or drain).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use rustls_pki_types::{CertificateDer, ServerName};
use tokio::sync::{watch, Semaphore};
use tokio_rustls::{TlsAcceptor, TlsConnector};
use tracing::{debug, info, warn};

use crate::addr::{Addr, Listener, Stream};
use crate::config::{Mode, RouteConfig};
use crate::conn::{Registration, Registry};
use crate::credentials::CredentialStore;
use crate::forward::{forward, Totals};
use crate::metrics::RouteMetrics;
use crate::reason::{CloseReason, FailureReason};
use crate::tls::verify::{with_report, ClientCertPolicy, PeerReport, ServerCertPolicy};

/// The TLS side of a route.
enum RouteTls {
    Server {
        acceptor: TlsAcceptor,
        policy: Arc<ClientCertPolicy>,
    },
    Client {
        connector: TlsConnector,
        policy: Arc<ServerCertPolicy>,
        server_name: ServerName<'static>,
    },
}

/// A configured route, shared by its accept loop and connection tasks.
pub struct Route {
    pub cfg: RouteConfig,
    /// Where the listener is actually bound (port 0 resolved).
    pub bound: Addr,
    pub registry: Arc<Registry>,
    pub store: Arc<CredentialStore>,
    metrics: RouteMetrics,
    tls: RouteTls,
    /// Rate-limits this route's refusal lines per reason.
    refusal_log: Arc<crate::logsafe::RefusalLog>,
}

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Route")
            .field("name", &self.cfg.name)
            .field("bound", &self.bound)
            .finish()
    }
}

async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl Route {
    /// Builds the route's TLS config and binds its listener.
    pub async fn bind(
        cfg: RouteConfig,
        store: Arc<CredentialStore>,
    ) -> Result<(Arc<Route>, Listener), RouteError> {
        let tls = match cfg.mode {
            Mode::Server => {
                let (config, policy) =
                    crate::tls::server_config(&store, cfg.peer_sans.clone(), cfg.tls_min_version)?;
                RouteTls::Server {
                    acceptor: TlsAcceptor::from(config),
                    policy,
                }
            }
            Mode::Client => {
                let (config, policy) =
                    crate::tls::client_config(&store, cfg.peer_sans.clone(), cfg.tls_min_version)?;
                let name = cfg.server_name.clone().unwrap_or_default();
                let server_name =
                    ServerName::try_from(name.clone()).map_err(|_| RouteError::ServerName(name))?;
                RouteTls::Client {
                    connector: TlsConnector::from(config),
                    policy,
                    server_name,
                }
            }
        };
        let listener = cfg.listen.bind().await.map_err(|source| RouteError::Bind {
            route: cfg.name.clone(),
            addr: cfg.listen.to_string(),
            source,
        })?;
        let bound = listener.local_addr().unwrap_or_else(|_| cfg.listen.clone());
        let route = Route {
            metrics: RouteMetrics::new(&cfg.name),
            refusal_log: crate::logsafe::RefusalLog::start(&cfg.name),
            registry: Arc::new(Registry::default()),
            store,
            bound,
            tls,
            cfg,
        };
        Ok((Arc::new(route), listener))
    }

    /// Accepts until `stop` turns true. Handshakes run in their own tasks; a
    /// semaphore bounds concurrent connections; accept errors (EMFILE…)
    /// back off and recover.
    pub async fn serve(self: Arc<Self>, listener: Listener, mut stop: watch::Receiver<bool>) {
        let slots = Arc::new(Semaphore::new(self.cfg.max_connections));
        let mut backoff = Duration::from_millis(5);
        info!(route = %self.cfg.name, mode = self.cfg.mode.as_str(), listen = %self.bound, target = %self.cfg.target, "listening");
        loop {
            let permit = tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => break,
                p = slots.clone().acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => break,
                },
            };
            let accepted = tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => break,
                r = listener.accept() => r,
            };
            match accepted {
                Ok((stream, peer)) => {
                    backoff = Duration::from_millis(5);
                    self.metrics.connections.increment(1);
                    let route = self.clone();
                    tokio::spawn(async move {
                        route.handle(stream, peer).await;
                        drop(permit);
                    });
                }
                Err(e) => {
                    warn!(route = %self.cfg.name, error = %e, backoff = ?backoff, "accept failed; backing off");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
            }
        }
        info!(route = %self.cfg.name, "stopped accepting");
    }

    async fn handle(&self, stream: Stream, peer_addr: String) {
        match &self.tls {
            RouteTls::Server { acceptor, .. } => {
                self.handle_server(acceptor, stream, peer_addr).await
            }
            RouteTls::Client {
                connector,
                server_name,
                ..
            } => {
                self.handle_client(connector, server_name, stream, peer_addr)
                    .await
            }
        }
    }

    async fn handle_server(&self, acceptor: &TlsAcceptor, stream: Stream, peer_addr: String) {
        let handshake = Box::pin(acceptor.accept(stream));
        let Some((tls, reg)) = self.authenticate(peer_addr, handshake).await else {
            return;
        };
        match self.cfg.target.connect(self.cfg.connect_timeout).await {
            Ok(target) => self.supervise(reg, tls, target).await,
            Err(e) => self.target_unreachable(&reg.conn.peer_addr, &e),
        }
    }

    async fn handle_client(
        &self,
        connector: &TlsConnector,
        server_name: &ServerName<'static>,
        local: Stream,
        local_addr: String,
    ) {
        // Nothing is read from the local application before the remote
        // sidecar is verified: bytes wait in the socket until supervise.
        let remote = match self.cfg.target.connect(self.cfg.connect_timeout).await {
            Ok(r) => r,
            Err(e) => return self.target_unreachable(&local_addr, &e),
        };
        let handshake = Box::pin(connector.connect(server_name.clone(), remote));
        if let Some((tls, reg)) = self
            .authenticate(self.cfg.target.to_string(), handshake)
            .await
        {
            self.supervise(reg, local, tls).await;
        }
    }

    /// Runs one handshake under `--handshake-timeout`. On success it is
    /// counted and the connection registered; on failure it is counted by
    /// reason and logged as one WARN line.
    ///
    /// Callers pass the handshake boxed: inline, its TLS state would be laid
    /// out again at each level of futures wrapping it, and a task keeps the
    /// size of its largest state for the life of the connection.
    async fn authenticate<S>(
        &self,
        peer: String,
        handshake: impl std::future::Future<Output = std::io::Result<S>>,
    ) -> Option<(Box<S>, Registration)> {
        let started = Instant::now();
        let bounded = tokio::time::timeout(self.cfg.handshake_timeout, handshake);
        let (result, report) = with_report(bounded).await;
        let (reason, error) = match result {
            Ok(Ok(stream)) => {
                self.metrics.handshake_ok(started.elapsed());
                // Boxed once here: the TLS stream (~1.2 KB of rustls state)
                // then moves through supervise and forward as a pointer
                // instead of being laid out again in each of their futures,
                // which every live connection's task would carry.
                return self.admit(peer, report).map(|reg| (Box::new(stream), reg));
            }
            Ok(Err(e)) => (FailureReason::from_io(&e), e.to_string()),
            Err(_) => (FailureReason::Timeout, "handshake timed out".to_string()),
        };
        self.refused(&peer, reason, &error, &report, started);
        None
    }

    /// Admits an authenticated peer: registers it, re-checks its chain, and
    /// only then (for `--exclusive`) lets it displace the incumbent.
    fn admit(&self, peer_addr: String, report: PeerReport) -> Option<Registration> {
        if let Some(c) = &report.cert {
            use crate::logsafe::{clean, clean_list};
            debug!(
                route = %self.cfg.name, peer = %peer_addr, subject = %clean(&c.subject),
                serial = %c.serial, sans = %clean_list(&c.sans()), "handshake complete"
            );
        }
        let verified_with = report.verified_with;
        let reg = self.registry.register(peer_addr, report.cert, report.chain);
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
            self.reverify(&reg.conn.chain, SystemTime::now())
        };
        if let Err(e) = verdict {
            self.metrics.closed(CloseReason::Revoked);
            warn!(
                route = %self.cfg.name, peer = %reg.conn.peer_addr, error = %e,
                "closing connection: its peer lost trust during the handshake"
            );
            return None;
        }
        if self.cfg.exclusive {
            if let Some(old) = self.registry.promote(&reg) {
                info!(
                    route = %self.cfg.name,
                    incumbent = %old.peer_addr,
                    newcomer = %reg.conn.peer_addr,
                    "exclusive: authenticated newcomer displaces the incumbent"
                );
            }
        }
        Some(reg)
    }

    /// Checks a peer chain against the trust and SAN policy in force now.
    fn reverify(
        &self,
        chain: &[CertificateDer<'static>],
        now: SystemTime,
    ) -> Result<(), rustls::Error> {
        match &self.tls {
            RouteTls::Server { policy, .. } => policy.reverify(chain, now),
            RouteTls::Client { policy, .. } => policy.reverify(chain, now),
        }
    }

    fn target_unreachable(&self, peer: &str, e: &std::io::Error) {
        self.metrics.target_connect_failures.increment(1);
        self.metrics.closed(CloseReason::TargetError);
        warn!(route = %self.cfg.name, peer = %peer, target = %self.cfg.target, error = %e, "cannot connect to target");
    }

    fn refused(
        &self,
        peer: &str,
        reason: FailureReason,
        error: &dyn std::fmt::Display,
        report: &PeerReport,
        started: Instant,
    ) {
        use crate::logsafe::{clean, clean_display, clean_list};
        self.metrics.handshake_failed(reason, started.elapsed());
        if !self.refusal_log.admit(reason) {
            return;
        }
        let error = clean_display(error);
        match &report.cert {
            Some(c) => warn!(
                route = %self.cfg.name, peer = %peer, reason = reason.as_str(),
                subject = %clean(&c.subject), sans = %clean_list(&c.sans()), error = %error,
                "handshake refused"
            ),
            None => warn!(
                route = %self.cfg.name, peer = %peer, reason = reason.as_str(), error = %error,
                "handshake refused"
            ),
        }
    }

    /// Forwards until the connection ends or is told to close.
    async fn supervise<P, T>(&self, reg: Registration, peer: P, target: T)
    where
        P: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
        T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let conn = reg.conn.clone();
        let expiry = conn.peer.as_ref().map(|c| {
            let left = c
                .not_after_time()
                .duration_since(SystemTime::now())
                .unwrap_or_default();
            // X.509 validity is inclusive of its last second.
            tokio::time::Instant::now() + left + Duration::from_secs(1)
        });
        let lifetime = self
            .cfg
            .max_connection_lifetime
            .map(|d| tokio::time::Instant::now() + d);
        let totals = Totals::default();
        self.metrics.active.increment(1.0);
        let reason = tokio::select! {
            r = forward(peer, target, &self.metrics.to_target, &self.metrics.from_target, &totals, self.cfg.half_close_linger) => r,
            r = conn.signal.closed() => r,
            _ = sleep_until_opt(expiry) => CloseReason::Expired,
            _ = sleep_until_opt(lifetime) => CloseReason::Lifetime,
        };
        self.metrics.active.decrement(1.0);
        self.metrics.closed(reason);
        let to = totals.to_target.load(std::sync::atomic::Ordering::Relaxed);
        let from = totals
            .from_target
            .load(std::sync::atomic::Ordering::Relaxed);
        let duration = conn.opened.elapsed();
        match reason {
            CloseReason::Completed => {
                debug!(route = %self.cfg.name, peer = %conn.peer_addr, to_target = to, from_target = from, ?duration, "connection closed")
            }
            CloseReason::Expired
            | CloseReason::Revoked
            | CloseReason::Lifetime
            | CloseReason::Displaced
            | CloseReason::Drain => {
                info!(route = %self.cfg.name, peer = %conn.peer_addr, reason = reason.as_str(), to_target = to, from_target = from, ?duration, "connection closed")
            }
            _ => {
                debug!(route = %self.cfg.name, peer = %conn.peer_addr, reason = reason.as_str(), to_target = to, from_target = from, ?duration, "connection closed")
            }
        }
        drop(reg);
    }

    /// Re-verifies every live connection whenever the store's trust shrinks,
    /// closing those whose peer no longer verifies (`revoked`).
    pub async fn watch_trust(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut shrunk = self.store.trust_shrunk();
        loop {
            tokio::select! {
                r = shrunk.changed() => if r.is_err() { return },
                _ = stop.wait_for(|s| *s) => return,
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
                    let (subject, sans) = conn
                        .peer
                        .as_ref()
                        .map(|c| (c.subject.as_str(), c.sans()))
                        .unwrap_or_default();
                    warn!(
                        route = %self.cfg.name, peer = %conn.peer_addr, subject = %clean(subject),
                        sans = %clean_list(&sans), error = %clean_display(&e),
                        "closing connection: its peer is no longer trusted"
                    );
                }
            }
        }
    }
}

/// Why a route could not start.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    #[error("invalid server name {0:?}")]
    ServerName(String),
    #[error("route {route:?}: cannot listen on {addr}: {source}")]
    Bind {
        route: String,
        addr: String,
        source: std::io::Error,
    },
}

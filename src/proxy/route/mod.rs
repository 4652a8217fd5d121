//! One route: its accept loop, the handshake of each connection in its own
//! task, and the supervision of each forwarded connection (close on
//! revocation, expiry, lifetime, displacement or drain).
//!
//! Two limits keep unauthenticated peers from taking what authenticated ones
//! need. Handshakes in flight are bounded by `--max-handshakes`, the oldest
//! closed (`overload`) to admit a newcomer, and each may send at most
//! [`crate::proxy::preauth::PREAUTH_BYTES`] before it is authenticated; only then
//! does a connection take one of the `--max-connections` slots (waiting for
//! one if all are taken). Accepting never waits on either.
//!
//! This file holds the route itself: building its TLS side and binding its
//! listener, the accept loop, and the dispatch of each connection to its
//! mode; `loops.rs` counts the accept loops for the drain. A connection's
//! life is in the files below it, in the order it lives it: `server.rs` or
//! `client.rs` (one per mode, a transparent route's connections being
//! client ones), `admission.rs` (the handshake and what admits the peer),
//! `verdict.rs` (a client route's server accepting us), `supervise.rs`
//! (forwarding until the close, and closing on revocation), `http.rs` (a
//! server connection carried as HTTP, `--http-identity`), `access.rs` (the
//! access line at close), and `refusal.rs` (how a refusal or an unreachable
//! target is counted and logged).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustls_pki_types::ServerName;
use tokio::sync::{watch, Semaphore};
use tracing::{debug, info, warn};

use super::settings::{Mode, RouteConfig};
use crate::credentials::CredentialStore;
use crate::metrics::RouteMetrics;
use crate::proxy::addr::{Addr, Listener, StdListener, Stream};
use crate::proxy::conn::Registry;
use crate::proxy::pending::{Pending, Ticket};
use crate::proxy::transparent::Outbound;
use crate::reason::FailureReason;
use crate::tls::verify::{ClientCertPolicy, ServerCertPolicy};
use loops::AcceptLoops;
use runtimes::Runtimes;
use supervise::Phased;
use tracing::instrument::Instrumented;

/// The target of every log line a route writes, whichever file of this
/// folder writes it: the name those lines had before `route.rs` became a
/// folder, so `RUST_LOG=mtls_sidecar::route=debug` and log pipelines that
/// match on it keep working (docs/logging.md).
pub(crate) const LOG_TARGET: &str = "mtls_sidecar::route";

mod access;
pub use access::leaf_spki;
mod admission;
mod client;
mod http;
mod loops;
mod refusal;
pub mod runtimes;
mod server;
mod supervise;
mod verdict;

/// The TLS side of a route.
enum RouteTls {
    Server {
        config: Arc<rustls::ServerConfig>,
        policy: Arc<ClientCertPolicy>,
    },
    Client {
        client: crate::tls::resumption::ClientTls,
        policy: Arc<ServerCertPolicy>,
        server_name: ServerName<'static>,
    },
    /// A transparent client route: a client config per destination rule.
    Transparent(crate::proxy::transparent::Transparent),
}

/// A configured route, shared by its accept loop and connection tasks.
pub struct Route {
    pub cfg: RouteConfig,
    /// Where the listener is actually bound (port 0 resolved).
    pub bound: Addr,
    pub registry: Arc<Registry>,
    pub store: Arc<CredentialStore>,
    /// Unauthenticated handshakes in flight (`--max-handshakes`).
    pub pending: Arc<Pending>,
    /// Authenticated, forwarded connections (`--max-connections`).
    slots: Arc<Semaphore>,
    /// Its accept loops: whether all run, and a wait for none running.
    loops: AcceptLoops,
    /// Connections accepted by all of its loops (the test fault counts
    /// them).
    accepted: std::sync::atomic::AtomicU64,
    metrics: RouteMetrics,
    tls: RouteTls,
    /// Rate-limits this route's refusal lines per reason.
    refusal_log: Arc<crate::log::RefusalLog>,
    /// HTTP routes: what the unfinished request heads of all its
    /// connections hold (`--http-max-pending-head-bytes`).
    http_heads: Arc<crate::proxy::http::HeadBudget>,
}

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Route")
            .field("name", &self.cfg.name)
            .field("bound", &self.bound)
            .finish()
    }
}

/// A client connection's dial of the remote sidecar, boxed: the stream and
/// what must be held beside it for as long as the connection lasts.
type Dial<K> = Pin<Box<dyn Future<Output = std::io::Result<(Stream, K)>> + Send>>;

/// The local side of a client connection: the application's socket, its
/// address for logs, its pending-handshake ticket and its load count.
struct Local {
    stream: Stream,
    addr: String,
    ticket: Ticket,
    live: crate::process::memtrim::Live,
    /// A transparent connection's destination rule (its index): the rule
    /// its server is judged by, at the handshake and at re-verification.
    rule: Option<usize>,
}

impl Route {
    /// Builds the route's TLS config and binds its listener. Synchronous and
    /// runtime-free: the listener is registered with the runtime only when
    /// the route starts serving ([`StdListener::into_tokio`]), so every
    /// listener exists before the sandbox is applied.
    pub fn bind(
        cfg: RouteConfig,
        store: Arc<CredentialStore>,
    ) -> Result<(Arc<Route>, StdListener), RouteError> {
        let peer = crate::tls::PeerOptions {
            alpn: cfg.alpn.clone(),
            spki_pins: cfg.spki_pins.clone(),
            resumption: cfg.resumption,
        };
        let mut tls = match cfg.mode {
            Mode::Server => {
                let (config, policy) = crate::tls::server_config(
                    &store,
                    cfg.peer_sans.clone(),
                    cfg.tls_min_version,
                    &peer,
                )?;
                RouteTls::Server { config, policy }
            }
            Mode::Client if cfg.transparent.is_some() => {
                let rules = cfg.transparent.clone().unwrap_or_default();
                RouteTls::Transparent(crate::proxy::transparent::Transparent::build(
                    &cfg.name,
                    rules,
                    &store,
                    cfg.tls_min_version,
                    &peer,
                )?)
            }
            Mode::Client => {
                let (config, policy) = crate::tls::client_config(
                    &store,
                    cfg.peer_sans.clone(),
                    cfg.tls_min_version,
                    &peer,
                )?;
                let name = cfg.server_name.clone().unwrap_or_default();
                let server_name =
                    ServerName::try_from(name.clone()).map_err(|_| RouteError::ServerName(name))?;
                RouteTls::Client {
                    client: config,
                    policy,
                    server_name,
                }
            }
        };
        let listener = match (&cfg.listen, cfg.tproxy) {
            (Addr::Tcp(a), true) => crate::proxy::transparent::bind_tproxy(a),
            _ => cfg.listen.bind_std(),
        }
        .map_err(|source| RouteError::Bind {
            route: cfg.name.clone(),
            addr: cfg.listen.to_string(),
            source,
        })?;
        let bound = listener.local_addr().unwrap_or_else(|_| cfg.listen.clone());
        if let (RouteTls::Transparent(t), StdListener::Tcp(l), true) =
            (&mut tls, &listener, cfg.tproxy)
        {
            t.tproxy = Some(l.local_addr().map_err(|source| RouteError::Bind {
                route: cfg.name.clone(),
                addr: cfg.listen.to_string(),
                source,
            })?);
        }
        let heads = cfg.http.map_or(0, |h| h.max_pending_head_bytes);
        let route = Route {
            http_heads: Arc::new(crate::proxy::http::HeadBudget::new(heads)),
            metrics: RouteMetrics::new(&cfg.name),
            refusal_log: crate::log::RefusalLog::new(&cfg.name),
            registry: Arc::new(Registry::default()),
            pending: Pending::new(cfg.max_handshakes),
            slots: Arc::new(Semaphore::new(cfg.max_connections)),
            loops: AcceptLoops::new(),
            accepted: std::sync::atomic::AtomicU64::new(0),
            store,
            bound,
            tls,
            cfg,
        };
        Ok((Arc::new(route), listener))
    }

    /// True while every accept loop runs.
    pub fn is_accepting(&self) -> bool {
        self.loops.is_accepting()
    }

    /// Resolves once no accept loop of the route runs (after a stop: each
    /// has written what it writes when it stops, and accepts no more).
    pub async fn stopped_accepting(&self) {
        self.loops.none_running().await;
    }

    /// Starts the tasks that write the route's rate-limited log summaries
    /// (on the current runtime; once per route, whatever the number of
    /// accept loops).
    pub fn spawn_log_flushers(&self) {
        self.refusal_log.spawn_flusher();
        if let RouteTls::Transparent(t) = &self.tls {
            t.log.spawn_flusher();
        }
    }

    /// Accepts until `stop` turns true, as loop `me` of `runtimes` (the
    /// runtime it runs on; loop 0 writes the route's "listening" and
    /// "stopped accepting" lines). Each connection's handshake runs in its
    /// own task, admitted to the bounded pending set (evicting the oldest
    /// when full) and placed by [`Runtimes::dispatch`]; accept errors
    /// (EMFILE…) back off and recover.
    pub async fn serve(
        self: Arc<Self>,
        listener: Listener,
        mut stop: watch::Receiver<bool>,
        runtimes: Arc<Runtimes>,
        me: usize,
    ) {
        let _running = self.loops.start();
        let mut backoff = Duration::from_millis(5);
        if me == 0 {
            info!(
                target: LOG_TARGET, route = %self.cfg.name, mode = self.cfg.mode.as_str(), listen = %self.bound,
                target = %self.cfg.target, max_connections = self.cfg.max_connections,
                max_handshakes = self.cfg.max_handshakes, runtimes = runtimes.len(), "listening"
            );
        }
        let fault = test_fault(&self.cfg.name);
        loop {
            let accepted = tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => break,
                r = listener.accept() => r,
            };
            match accepted {
                Ok((stream, peer)) => {
                    backoff = Duration::from_millis(5);
                    self.take_accepted(stream, peer, &runtimes, me, fault);
                }
                Err(e) => {
                    if evicts_on(&e) {
                        self.pending.stop_oldest(FailureReason::Overload);
                    }
                    warn!(target: LOG_TARGET, route = %self.cfg.name, error = %e, backoff = ?backoff, "accept failed; backing off");
                    tokio::time::sleep(backoff).await;
                    backoff = next_backoff(backoff);
                }
            }
        }
        if me == 0 {
            info!(target: LOG_TARGET, route = %self.cfg.name, "stopped accepting");
        }
    }

    /// An accepted connection: counted, admitted to the pending set, and
    /// handed to the runtime it will live on.
    fn take_accepted(
        self: &Arc<Self>,
        stream: Stream,
        peer: String,
        runtimes: &Arc<Runtimes>,
        me: usize,
        fault: Option<u64>,
    ) {
        let n = self
            .accepted
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1);
        if fault.is_some_and(|f| n >= f) {
            panic!("test fault: route {} accept loop panics", self.cfg.name);
        }
        self.metrics.connections.increment(1);
        let (ticket, evicted) = self.pending.admit();
        if evicted > 0 {
            debug!(target: LOG_TARGET, route = %self.cfg.name, evicted, "--max-handshakes reached: closing the oldest pending handshake");
        }
        let live = crate::process::memtrim::Live::start();
        let route = self.clone();
        runtimes.dispatch(
            me,
            stream,
            move |stream| route.handle(stream, peer, ticket, live),
            lost_in_move,
        );
    }

    /// One connection, from handshake to close, as the future its task
    /// runs, held inline in the task. Each mode's establishment is boxed on
    /// its own and dropped once it ends, so the modes' variants differ only
    /// in their forwarding state, of about the same size: the task holds
    /// its forwarding, not the largest establishment (a server
    /// connection's task was 2.3 times its own size, ~2 KiB more per
    /// connection, once transparent routes existed), nor the arguments a
    /// wrapping `async` block would keep beside it (~250 bytes).
    fn handle(
        self: Arc<Self>,
        stream: Stream,
        peer_addr: String,
        ticket: Ticket,
        live: crate::process::memtrim::Live,
    ) -> Connection {
        match &self.tls {
            RouteTls::Server { config, .. } => {
                let config = config.clone();
                let established = self.establish_server(config, stream, peer_addr, ticket, live);
                Connection::Server(Phased::establishing(established))
            }
            RouteTls::Client {
                client,
                server_name,
                ..
            } => {
                let (connector, server_name) = (client.config(), server_name.clone());
                let route = self.clone();
                let connect: Dial<()> = Box::pin(async move {
                    let cfg = &route.cfg;
                    let s = cfg
                        .target
                        .connect_marked(cfg.connect_timeout, cfg.mark)
                        .await?;
                    Ok((s, ()))
                });
                let target = self.cfg.target.to_string();
                let local = Local {
                    stream,
                    addr: peer_addr,
                    ticket,
                    live,
                    rule: None,
                };
                let established =
                    self.establish_client(connector, server_name, connect, target, local);
                Connection::Client(Phased::establishing(established))
            }
            RouteTls::Transparent(_) => {
                let established = self.establish_transparent(stream, peer_addr, ticket, live);
                Connection::Transparent(Box::new(Phased::establishing(established)))
            }
        }
    }
}

/// A connection's task: its mode's [`Phased`] future. A transparent
/// connection's is boxed: its span and original destination make it the
/// largest, and a task is laid out for its largest variant, in steps of
/// 128 bytes (tokio aligns a task to a cache-line pair): inline, it made
/// every server and client connection's task 512 bytes instead of 384.
enum Connection {
    Server(Phased<server::ServerForwarding>),
    Client(Phased<client::ClientForwarding<()>>),
    Transparent(Box<Phased<Instrumented<client::ClientForwarding<Outbound>>>>),
}

impl Future for Connection {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.get_mut() {
            Connection::Server(p) => Pin::new(p).poll(cx),
            Connection::Client(p) => Pin::new(p).poll(cx),
            Connection::Transparent(p) => Pin::new(&mut **p).poll(cx),
        }
    }
}

/// A connection whose socket could not be moved to the runtime chosen for
/// it: closed before its handshake (it is rare: registering a socket with
/// epoll fails only when the kernel is out of memory or descriptors).
fn lost_in_move(e: std::io::Error) {
    warn!(target: LOG_TARGET, error = %e, "cannot move an accepted connection to another runtime; closed");
}

/// A hidden test hook, read by the shipped binary on purpose:
/// `MTLS_SIDECAR_TEST_FAULT=route-panic:NAME:N` makes route NAME's accept
/// loop panic on its Nth accepted connection, and does nothing else. The
/// test of what happens when a route's loop dies (tests/e2e/limits.rs) also runs
/// against the release build (`MTLS_SIDECAR_BIN` in .ci/run), which a cargo
/// feature or `cfg(test)` gate would strip of the hook. Keeping it grants
/// nothing: whoever can set this process's environment already controls it
/// (`LD_PRELOAD`, its config, its credentials), and all it can do is stop
/// a route, which killing the process does too. Not documented for
/// operators; never set it in production.
fn test_fault(route: &str) -> Option<u64> {
    let spec = std::env::var("MTLS_SIDECAR_TEST_FAULT").ok()?;
    let rest = spec.strip_prefix("route-panic:")?;
    let (name, n) = rest.rsplit_once(':')?;
    (name == route).then(|| n.parse().ok()).flatten()
}

/// The wait after a failed accept that follows a wait of `now`: doubled,
/// at most a second (a run of failures, out of descriptors, must not spin).
fn next_backoff(now: Duration) -> Duration {
    now.saturating_mul(2).min(Duration::from_secs(1))
}

/// Whether an accept loop failing with `e` closes the oldest pending
/// handshake: out of descriptors, it gives its own back so that the next
/// peer can be accepted. Every loop that fails makes room for its own next
/// accept (with several runtimes each sees the failure on the shared
/// socket): tried with loop 0 alone evicting, the others took the freed
/// descriptors while loop 0's back-off grew to its 1 s ceiling, one
/// eviction a second, and 100 silent peers held the route for minutes.
fn evicts_on(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
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

#[cfg(test)]
mod tests {
    use super::evicts_on;
    use std::io::Error;
    use std::time::Duration;

    #[test]
    fn the_accept_back_off_doubles_up_to_a_second() {
        use super::next_backoff;
        let ms = Duration::from_millis;
        assert_eq!(next_backoff(ms(5)), ms(10));
        assert_eq!(next_backoff(ms(320)), ms(640));
        assert_eq!(next_backoff(ms(640)), ms(1000));
        assert_eq!(next_backoff(ms(1000)), ms(1000));
        assert_eq!(next_backoff(Duration::MAX), ms(1000));
        // From the first wait, 1.5 s of unbroken failures is 9 of them.
        let (mut wait, mut spent, mut n) = (ms(5), Duration::ZERO, 0);
        while spent < ms(1500) {
            spent += wait;
            wait = next_backoff(wait);
            n += 1;
        }
        assert_eq!(n, 9);
    }

    /// A server route on loopback port 0 over a fresh development PKI.
    fn route(dir: &std::path::Path) -> (std::sync::Arc<super::Route>, super::StdListener) {
        use crate::pki::{DevCa, LeafSpec, Role};
        let ca = DevCa::new("route test CA", 30).expect("CA");
        let leaf = ca
            .issue(&LeafSpec::dns("replica.test", Role::Server, 1))
            .expect("leaf");
        let store = crate::credentials::CredentialStore::for_test(dir, &leaf, &ca);
        let cfg = super::RouteConfig {
            name: "drained".into(),
            mode: super::Mode::Server,
            listen: super::Addr::Tcp("127.0.0.1:0".into()),
            target: super::Addr::Tcp("127.0.0.1:9".into()),
            peer_sans: crate::identity::SanPolicy::Any,
            server_name: None,
            exclusive: false,
            handshake_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
            max_connections: 4,
            max_handshakes: 4,
            max_connection_lifetime: None,
            tls_min_version: crate::tls::TlsVersion::Tls13,
            half_close_linger: Duration::from_secs(1),
            alpn: Vec::new(),
            spki_pins: Vec::new(),
            proxy_protocol: false,
            credentials: crate::credentials::CredentialSource::Dir(dir.to_path_buf()),
            transparent: None,
            mark: None,
            resumption: false,
            tproxy: false,
            http: None,
            access_log: false,
        };
        super::Route::bind(cfg, store).expect("bind")
    }

    /// The drain counts what is left only once every accept loop has
    /// stopped: waiting for that stays pending while a loop serves, and
    /// resolves once the stop has ended it. Seen failing with the wait
    /// replaced by an immediate return.
    #[tokio::test]
    async fn the_drain_waits_for_a_serving_accept_loop() {
        use std::future::Future;
        use std::task::{Context, Waker};
        let tmp = tempfile::tempdir().expect("tempdir");
        let (route, listener) = route(tmp.path());
        let listener = listener.into_tokio().expect("listener");
        let runtimes = super::Runtimes::new(vec![tokio::runtime::Handle::current()]);
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let mut cx = Context::from_waker(Waker::noop());
        let mut serve = std::pin::pin!(route.clone().serve(listener, stopped, runtimes, 0));
        assert!(
            serve.as_mut().poll(&mut cx).is_pending(),
            "the loop accepts"
        );
        assert!(route.is_accepting());
        let mut drained = std::pin::pin!(route.stopped_accepting());
        assert!(drained.as_mut().poll(&mut cx).is_pending(), "a loop serves");
        stop.send_replace(true);
        assert!(serve.as_mut().poll(&mut cx).is_ready(), "the stop ends it");
        assert!(!route.is_accepting());
        assert!(drained.as_mut().poll(&mut cx).is_ready());
    }

    #[test]
    fn only_running_out_of_descriptors_evicts() {
        assert!(evicts_on(&Error::from_raw_os_error(libc::EMFILE)));
        assert!(evicts_on(&Error::from_raw_os_error(libc::ENFILE)));
        assert!(!evicts_on(&Error::from_raw_os_error(libc::ECONNABORTED)));
        assert!(!evicts_on(&Error::other("no errno")));
    }
}

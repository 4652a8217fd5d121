//! A running sidecar process: credential stores (one per distinct source,
//! shared by its routes), their pollers, the routes, and the admin endpoint;
//! plus the orderly drain on shutdown.
//!
//! Start-up is two steps so that the sandbox can sit between them:
//! [`prepare`] (no runtime: load, build, bind) and [`Prepared::start`]
//! (inside the runtime: serve). Landlock restricts only the thread that
//! applies it and the threads it creates afterwards, so the binary applies
//! it on the main thread after `prepare` and before building the runtime
//! whose workers then inherit it. [`start`] does both steps, unsandboxed,
//! for in-process callers (the demo, tests).

pub mod serve;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusHandle;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::admin::shared::Shared;
use crate::config::Settings;
use crate::credentials::{CredError, CredentialStore};
use crate::process::systemd::SystemdError;
use crate::proxy::addr::{Addr, Listener, StdListener};
use crate::proxy::route::runtimes::Runtimes;
use crate::proxy::route::{Route, RouteError};
use crate::proxy::settings::Mode;
use crate::reason::{CloseReason, FailureReason};
use crate::target_exposure::TargetExposure;

/// Why the process could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Credentials(#[from] CredError),
    #[error("{0}")]
    Route(#[from] RouteError),
    #[error("cannot listen on admin address {addr}: {source}")]
    AdminBind {
        addr: String,
        source: std::io::Error,
    },
}

impl StartError {
    /// 2 for configuration problems (a `systemd:` socket that was not
    /// passed included), 1 for run-time ones (a port in use).
    pub fn exit_code(&self) -> u8 {
        match self {
            StartError::Route(RouteError::Bind { source, .. })
            | StartError::AdminBind { source, .. }
                if SystemdError::is_in(source) =>
            {
                2
            }
            StartError::Credentials(_)
            | StartError::Route(RouteError::Tls(_) | RouteError::ServerName(_)) => 2,
            StartError::Route(RouteError::Bind { .. }) | StartError::AdminBind { .. } => 1,
        }
    }
}

/// A started sidecar.
#[derive(Debug)]
pub struct Running {
    pub shared: Arc<Shared>,
    /// The admin listener's bound address, when enabled.
    pub admin: Option<Addr>,
    /// Stops the accept loops (the drain begins).
    stop: watch::Sender<bool>,
    /// Stops what must keep running through the drain: the credential
    /// pollers and the trust watchers, which revoke live connections.
    halt: watch::Sender<bool>,
    admin_stop: watch::Sender<bool>,
    /// Set when a route's accept loop ended without being asked to.
    failed: watch::Receiver<Option<String>>,
    wakes: Vec<Arc<Notify>>,
    tasks: Vec<JoinHandle<()>>,
    drain_timeout: Duration,
}

/// Everything a sidecar needs before it serves, made without a runtime:
/// credential stores loaded, route TLS configs built, every listener bound
/// (non-blocking, not yet registered with a runtime). What the process will
/// ever read, bind or connect to is known from here on, which is when
/// [`crate::sandbox`] restricts it; [`Prepared::start`] then serves.
#[derive(Debug)]
pub struct Prepared {
    stores: Vec<Arc<CredentialStore>>,
    routes: Vec<(Arc<Route>, StdListener)>,
    admin: Option<StdListener>,
    /// The admin address as configured.
    admin_addr: Option<Addr>,
    /// `--admin-connections on`.
    admin_connections: bool,
    metrics: PrometheusHandle,
    reload_interval: Duration,
    drain_timeout: Duration,
    /// `--workload-api-keepalive`.
    workload_api_keepalive: Duration,
    /// `--app-probe`.
    app_probes: Vec<crate::config::app_probe::AppProbe>,
}

/// Loads credentials and binds every route and the admin endpoint, without
/// a runtime and without serving. Fails before anything is served.
pub fn prepare(settings: Settings) -> Result<Prepared, StartError> {
    let provider = crate::tls::provider::crypto_provider();
    let metrics = crate::metrics::install();
    crate::metrics::build_info(crate::tls::provider::aes_gcm());
    let mut stores: Vec<Arc<CredentialStore>> = Vec::new();
    let mut bound = Vec::new();
    for cfg in settings.routes {
        let store = match stores.iter().find(|s| *s.source() == cfg.credentials) {
            Some(s) => s.clone(),
            None => {
                let s = CredentialStore::load(
                    cfg.credentials.clone(),
                    provider.clone(),
                    settings.trust_grace,
                )?;
                s.set_settle_window(settings.reload_interval);
                s.set_crl_scope(settings.crl_scope)?;
                s.set_crl_prune_age(settings.crl_prune_age);
                stores.push(s.clone());
                s
            }
        };
        let (server, client) = (cfg.mode == Mode::Server, cfg.mode == Mode::Client);
        let (had_server, had_client) = roles_of(&bound, &store);
        store.require_roles(server || had_server, client || had_client)?;
        bound.push(Route::bind(cfg, store)?);
    }
    let admin = match &settings.admin {
        Some(addr) => Some(
            addr.bind_std_private()
                .map_err(|source| StartError::AdminBind {
                    addr: addr.to_string(),
                    source,
                })?,
        ),
        None => None,
    };
    let unused = crate::process::systemd::unused();
    if !unused.is_empty() {
        warn!(sockets = ?unused, "systemd passed sockets that no --listen systemd:NAME uses");
    }
    Ok(Prepared {
        stores,
        routes: bound,
        admin,
        admin_addr: settings.admin,
        admin_connections: settings.admin_connections,
        metrics,
        reload_interval: settings.reload_interval,
        drain_timeout: settings.drain_timeout,
        workload_api_keepalive: settings.workload_api_keepalive,
        app_probes: settings.app_probes,
    })
}

/// Loads credentials, binds every route and the admin endpoint, and starts
/// serving. Nothing is served unless everything started. No sandbox: the
/// binary's `main` uses [`prepare`], the sandbox, then [`Prepared::start`].
pub async fn start(settings: Settings) -> Result<Running, StartError> {
    prepare(settings)?.start()
}

impl Prepared {
    /// The routes, in configuration order.
    pub fn routes(&self) -> impl Iterator<Item = &Arc<Route>> {
        self.routes.iter().map(|(r, _)| r)
    }

    /// The credential stores (one per distinct source).
    pub fn stores(&self) -> &[Arc<CredentialStore>] {
        &self.stores
    }

    /// What the sandbox must still allow this sidecar (see
    /// [`crate::sandbox`]); `config_file` is the file it was configured
    /// from, if any.
    pub fn sandbox_plan(&self, config_file: Option<&Path>) -> crate::sandbox::Plan {
        crate::sandbox::Plan::for_sidecar(
            self.stores.iter().map(|s| s.source()),
            self.listeners(),
            self.listen_addrs(),
            self.routes.iter().map(|(r, _)| &r.cfg),
            config_file,
        )
    }

    /// Every bound listener: the routes' and the admin endpoint's.
    pub fn listeners(&self) -> impl Iterator<Item = &StdListener> {
        self.routes.iter().map(|(_, l)| l).chain(self.admin.iter())
    }

    /// Every listen address as configured: the routes' and the admin
    /// endpoint's.
    pub fn listen_addrs(&self) -> impl Iterator<Item = &Addr> {
        self.routes
            .iter()
            .map(|(r, _)| &r.cfg.listen)
            .chain(self.admin_addr.iter())
    }

    /// Registers the listeners with the current runtime and starts serving
    /// (must be called from inside a tokio runtime).
    pub fn start(self) -> Result<Running, StartError> {
        self.start_on(Runtimes::new(Vec::new()))
    }

    /// Starts serving with an accept loop of every route on each of
    /// `runtimes`, all accepting from the route's one listening socket
    /// (duplicated descriptors, see [`crate::proxy::route::runtimes`]). The
    /// control tasks (credential pollers, trust watchers, admin endpoint,
    /// metrics upkeep, route supervisors) run on the current runtime, which
    /// should be the first of `runtimes`.
    pub fn start_on(self, runtimes: Arc<Runtimes>) -> Result<Running, StartError> {
        let Prepared {
            stores,
            routes: bound,
            admin,
            admin_addr: _,
            admin_connections,
            metrics,
            reload_interval,
            drain_timeout,
            workload_api_keepalive,
            app_probes,
        } = self;
        crate::metrics::spawn_process_refresh();
        let mut listening = Vec::with_capacity(bound.len());
        for (route, listener) in bound {
            let listeners = on_each(&listener, &runtimes).map_err(|source| {
                StartError::Route(RouteError::Bind {
                    route: route.cfg.name.clone(),
                    addr: route.bound.to_string(),
                    source,
                })
            })?;
            listening.push((route, listeners));
        }
        let admin_listener = match admin {
            Some(l) => {
                let addr = l
                    .local_addr()
                    .map(|a| a.to_string())
                    .unwrap_or_else(|_| "admin".into());
                Some(
                    l.into_tokio()
                        .map_err(|source| StartError::AdminBind { addr, source })?,
                )
            }
            None => None,
        };
        let (stop, _) = watch::channel(false);
        let (halt, _) = watch::channel(false);
        let (admin_stop, _) = watch::channel(false);
        let (failed_tx, failed) = watch::channel(None);
        let exposure = TargetExposure::watch(listening.iter().map(|(r, _)| &r.cfg));
        exposure.check();
        let connections = crate::admin::shared::ConnectionsAccess::decide(
            admin_listener.as_ref().and_then(|l| l.local_addr().ok()),
            admin_connections,
        );
        let shared = Arc::new(Shared {
            connections,
            routes: listening.iter().map(|(r, _)| r.clone()).collect(),
            stores: stores.clone(),
            draining: AtomicBool::new(false),
            metrics,
            exposure: exposure.clone(),
            app_probes: crate::admin::app_probe::AppProbes::new(app_probes),
            routeless: false,
        });
        let mut tasks = Vec::new();
        let mut wakes = Vec::new();
        let all: Arc<[Arc<CredentialStore>]> = stores.clone().into();
        crate::credentials::reload::publish_expiry(&all);
        for store in &stores {
            if store.feed().is_some() {
                tasks.push(tokio::spawn(crate::credentials::workload::run(
                    store.clone(),
                    halt.subscribe(),
                    workload_api_keepalive,
                )));
            }
            let hup = Arc::new(Notify::new());
            wakes.push(hup.clone());
            // Armed here, before any route logs `listening`, not in the task.
            let file_wake = crate::credentials::reload::arm(store, reload_interval);
            tasks.push(tokio::spawn(crate::credentials::reload::run(
                store.clone(),
                all.clone(),
                reload_interval,
                hup,
                halt.subscribe(),
                file_wake,
            )));
        }
        for (route, listeners) in listening {
            tasks.push(tokio::spawn(route.clone().watch_trust(halt.subscribe())));
            route.spawn_log_flushers();
            for (me, (listener, rt)) in listeners.into_iter().zip(runtimes.handles()).enumerate() {
                let serving = rt.spawn(route.clone().serve(
                    listener,
                    stop.subscribe(),
                    runtimes.clone(),
                    me,
                ));
                tasks.push(tokio::spawn(supervise_route(
                    route.cfg.name.clone(),
                    serving,
                    stop.subscribe(),
                    failed_tx.clone(),
                )));
            }
        }
        tasks.push(tokio::spawn(
            exposure.run(reload_interval, halt.subscribe()),
        ));
        let routes = shared.routes.clone();
        tasks.push(tokio::spawn(crate::process::memtrim::run(move || {
            routes
                .iter()
                .map(|r| r.pending.len().saturating_add(r.registry.live()))
                .fold(0, usize::saturating_add)
        })));
        // The exporter keeps every histogram sample (one per handshake,
        // failed ones included) until upkeep drains it. The admin endpoint
        // runs that while it serves; without one, a flood of handshakes grew
        // the heap for good (~1 MB per 50,000).
        if admin_listener.is_none() {
            tasks.push(tokio::spawn(crate::admin::upkeep(shared.metrics.clone())));
        }
        let admin = match admin_listener {
            Some(l) => {
                let addr = l.local_addr().ok();
                if let Some(a) = &addr {
                    info!(admin = %a, "admin endpoint listening");
                }
                tasks.push(tokio::spawn(crate::admin::serve(
                    l,
                    shared.clone(),
                    admin_stop.subscribe(),
                )));
                addr
            }
            None => None,
        };
        Ok(Running {
            shared,
            admin,
            stop,
            halt,
            admin_stop,
            failed,
            wakes,
            tasks,
            drain_timeout,
        })
    }
}

/// Waits on a route's accept loop; if it ends while nobody asked it to (a
/// panic, an unexpected return), reports that through `failed` so the
/// process exits 1 and the orchestrator restarts it.
async fn supervise_route(
    name: String,
    serving: JoinHandle<()>,
    stop: watch::Receiver<bool>,
    failed: watch::Sender<Option<String>>,
) {
    let outcome = serving.await;
    if *stop.borrow() {
        return;
    }
    let why = match outcome {
        Ok(()) => "its accept loop returned".to_string(),
        Err(e) if e.is_panic() => {
            let payload = e.into_panic();
            let msg = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)");
            format!("its accept loop panicked: {msg}")
        }
        Err(e) => format!("its accept loop ended: {e}"),
    };
    failed.send_replace(Some(format!("route {name:?} stopped accepting: {why}")));
}

/// `listener` registered with each of `runtimes`, as a duplicate of its
/// descriptor (the same socket; the original is closed by the caller).
fn on_each(listener: &StdListener, runtimes: &Runtimes) -> std::io::Result<Vec<Listener>> {
    let mut out = Vec::with_capacity(runtimes.len());
    for rt in runtimes.handles() {
        let copy = match listener {
            StdListener::Tcp(l) => StdListener::Tcp(l.try_clone()?),
            StdListener::Unix(l) => StdListener::Unix(l.try_clone()?),
        };
        // from_std registers with the runtime whose context is entered.
        let _entered = rt.enter();
        out.push(copy.into_tokio()?);
    }
    Ok(out)
}

/// The roles the already-bound routes of `store` play: (server, client).
fn roles_of(bound: &[(Arc<Route>, StdListener)], store: &Arc<CredentialStore>) -> (bool, bool) {
    bound
        .iter()
        .filter(|(r, _)| Arc::ptr_eq(&r.store, store))
        .fold((false, false), |(s, c), (r, _)| {
            (
                s || r.cfg.mode == Mode::Server,
                c || r.cfg.mode == Mode::Client,
            )
        })
}

impl Running {
    /// The bound address of the named route.
    pub fn listen_addr(&self, route: &str) -> Option<Addr> {
        self.shared
            .routes
            .iter()
            .find(|r| r.cfg.name == route)
            .map(|r| r.bound.clone())
    }

    /// Resolves with a description when a route stops accepting on its own.
    pub async fn failure(&self) -> String {
        let mut rx = self.failed.clone();
        let why = match rx.wait_for(Option::is_some).await {
            Ok(v) => v.clone(),
            Err(_) => None,
        };
        match why {
            Some(why) => why,
            // The senders live in the supervisors; all gone means never.
            None => std::future::pending().await,
        }
    }

    /// Polls every credential source at once (SIGHUP).
    pub fn reload_now(&self) {
        for w in &self.wakes {
            w.notify_one();
        }
    }

    /// Stops accepting, turns `/readyz` to 503, lets live connections and
    /// the handshakes in flight finish for up to the drain timeout, then
    /// closes the rest (`drain`). Revocation, peer expiry and lifetime stay
    /// enforced throughout: the pollers and trust watchers stop last.
    pub async fn drain(self) {
        self.shared.draining.store(true, Ordering::SeqCst);
        let _ = self.stop.send(true);
        let live: usize = self.shared.routes.iter().map(|r| r.registry.live()).sum();
        let handshakes: usize = self.shared.routes.iter().map(|r| r.pending.len()).sum();
        info!(live, handshakes, timeout = ?self.drain_timeout, "draining");
        // The accept loops first: one still admitting a connection after
        // the count below would leave it to be cut off at exit.
        let loops_stopped = async {
            for r in &self.shared.routes {
                r.stopped_accepting().await;
            }
        };
        let _ = tokio::time::timeout(self.drain_timeout, loops_stopped).await;
        let all_done = || wait_all_done(&self.shared.routes);
        if tokio::time::timeout(self.drain_timeout, all_done())
            .await
            .is_err()
        {
            let left: usize = self.shared.routes.iter().map(|r| r.registry.live()).sum();
            let handshakes: usize = self.shared.routes.iter().map(|r| r.pending.len()).sum();
            warn!(
                left,
                handshakes, "drain timeout reached; closing remaining connections"
            );
            for r in &self.shared.routes {
                r.pending.stop_all(FailureReason::Timeout);
                r.registry.close_all(CloseReason::Drain);
            }
            let _ = tokio::time::timeout(Duration::from_secs(2), all_done()).await;
        }
        let _ = self.halt.send(true);
        let _ = self.admin_stop.send(true);
        for t in self.tasks {
            t.abort();
        }
        info!("drained");
    }
}

/// Resolves once no route has a handshake in flight or a live connection.
/// A handshake that completes registers its connection before it leaves the
/// pending set, so once the accept loops have stopped, "no handshakes, then
/// no connections" means nothing is left.
async fn wait_all_done(routes: &[Arc<Route>]) {
    for r in routes {
        r.pending.wait_empty().await;
    }
    for r in routes {
        r.registry.wait_empty().await;
    }
}

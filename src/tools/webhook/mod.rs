//! `mtls-sidecar webhook`: the mutating admission webhook. It serves
//! `POST /inject` over HTTPS (HTTP/2 or HTTP/1.1 by ALPN, no client
//! certificate: the API server presents none) and answers each
//! AdmissionReview with what [`crate::tools::inject::inject`] makes of the pod,
//! as a JSON Patch ([`review`]).
//!
//! Its serving certificate comes from a credential directory read by the
//! sidecar's own [`CredentialStore`] and poller, and every handshake takes
//! the identity in force ([`IdentityResolver`]): a renewal is picked up with
//! no restart and no failed review. `--admin` serves `/livez`, `/readyz`
//! (503 while the certificate is expired or not yet valid) and `/metrics`
//! with the reviews by result and their latency. Its listeners are bound
//! first ([`Bound`]), so the binary sandboxes it (`--sandbox`) before the
//! runtime starts, as it does a sidecar.

pub mod review;

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::ServerConfig;
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify, Semaphore};
use tracing::{debug, info};

use crate::admin::shared::{ConnectionsAccess, Shared};
use crate::cli::WebhookArgs;
use crate::credentials::{CredentialSource, CredentialStore};
use crate::proxy::addr::{Addr, StdListener};
use crate::proxy::http::serve::{sleep_until_some, Activity};
use crate::sandbox::Plan;
use crate::tls::resolve::IdentityResolver;
use crate::tools::inject::{self, Options};
use review::{Answer, Namespace, Outcome};

/// The largest AdmissionReview read: above the API server's own 3 MiB
/// request limit, so any pod it admits fits (413 beyond).
pub const MAX_BODY: usize = 4 * 1024 * 1024;
/// Connections at once; accepting waits for one to end.
const MAX_CONNECTIONS: usize = 1024;
/// Reviews read and judged at once (each may hold a [`MAX_BODY`] body);
/// more wait before their body is read.
const MAX_REVIEWS: usize = 64;
/// HTTP/2 streams per connection.
const MAX_STREAMS: u32 = 64;
/// Bound on the TLS handshake, on a request head, and on reading a body.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long reviews in flight may finish after SIGTERM.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// How long a connection may stay open with no request in it: HTTP/1.1's
/// header-read timeout ([`HEADER_TIMEOUT`]) bounds an idle keep-alive
/// connection; an HTTP/2 one gets a GOAWAY after this long idle. The API
/// server opens a new connection when it needs one.
const IDLE_TIMEOUT: Duration = HEADER_TIMEOUT;

/// What every request handler shares.
struct State {
    opts: Options,
    reviews: Semaphore,
}

/// The webhook's listeners, bound before the sandbox is applied and the
/// runtime started (the sandbox lets the process bind only these ports).
pub struct Bound {
    listener: std::net::TcpListener,
    admin: Option<StdListener>,
}

impl Bound {
    /// Binds `--listen` and `--admin`: 2 for an address that does not
    /// parse, 1 for one that cannot be bound.
    pub fn bind(args: &WebhookArgs) -> Result<Bound, (u8, String)> {
        let listener = std::net::TcpListener::bind(&args.listen)
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|e| (1, format!("cannot listen on {}: {e}", args.listen)))?;
        let admin = match &args.admin {
            Some(a) => Some(bind_admin(a)?),
            None => None,
        };
        Ok(Bound { listener, admin })
    }

    /// What the sandbox allows: `--tls-dir`, and the ports bound here.
    pub fn sandbox_plan(&self, args: &WebhookArgs) -> Plan {
        let webhook = self.listener.local_addr().ok().map(|a| a.port());
        let admin = self.admin.as_ref().and_then(StdListener::tcp_port);
        Plan::for_webhook(&args.tls_dir, webhook.into_iter().chain(admin))
    }
}

/// `mtls-sidecar webhook` as a process: its listeners bound, then the
/// sandbox applied on this thread before the runtime's threads exist
/// (Landlock restricts the threads created afterwards), then served
/// ([`run`]).
pub fn start(args: &WebhookArgs) -> u8 {
    let bound = match Bound::bind(args) {
        Ok(b) => b,
        Err((code, msg)) => {
            eprintln!("error: {msg}");
            return code;
        }
    };
    // Decided before the sandbox, which hides the cgroup files it reads.
    let workers = crate::app::serve::worker_count(None);
    if let Err(e) = crate::sandbox::apply(&bound.sandbox_plan(args), args.sandbox) {
        tracing::error!("{e}");
        return 1;
    }
    crate::app::serve::with_runtime(Some(workers), |rt| rt.block_on(run(args, bound)))
}

/// `mtls-sidecar webhook`: 0 after SIGTERM/SIGINT, 2 for a configuration
/// problem (credentials, addresses), 1 for a run-time one.
pub async fn run(args: &WebhookArgs, bound: Bound) -> u8 {
    match serve(args, bound).await {
        Ok(()) => 0,
        Err((code, msg)) => {
            eprintln!("error: {msg}");
            code
        }
    }
}

/// The store for `--tls-dir`, its leaf required to allow serverAuth.
fn load_store(
    args: &WebhookArgs,
    interval: Duration,
) -> Result<Arc<CredentialStore>, (u8, String)> {
    let store = CredentialStore::load(
        CredentialSource::Dir(args.tls_dir.clone()),
        crate::tls::provider::crypto_provider(),
        Duration::ZERO,
    )
    .map_err(|e| (2, e.to_string()))?;
    store.set_settle_window(interval);
    store
        .require_roles(true, false)
        .map_err(|e| (2, e.to_string()))?;
    Ok(store)
}

/// The TLS config: the store's identity on every handshake, no client
/// certificate asked, HTTP/2 preferred.
fn tls_config(store: &Arc<CredentialStore>) -> Result<Arc<ServerConfig>, rustls::Error> {
    let mut cfg = ServerConfig::builder_with_provider(store.provider().clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(IdentityResolver::new(store.clone())));
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

async fn serve(args: &WebhookArgs, bound: Bound) -> Result<(), (u8, String)> {
    let interval = humantime::parse_duration(&args.reload_interval).map_err(|e| {
        (
            2,
            format!("--reload-interval {:?}: {e}", args.reload_interval),
        )
    })?;
    let store = load_store(args, interval)?;
    let tls = tls_config(&store).map_err(|e| (2, format!("TLS: {e}")))?;
    let metrics = crate::metrics::install();
    crate::metrics::build_info(crate::tls::provider::aes_gcm());
    crate::metrics::webhook_reviews_zero(Outcome::ALL.map(Outcome::as_str));
    let listener = TcpListener::from_std(bound.listener)
        .map_err(|e| (1, format!("cannot listen on {}: {e}", args.listen)))?;
    let admin = match bound.admin {
        Some(l) => Some(
            l.into_tokio()
                .map_err(|e| (1, format!("cannot serve the admin endpoint: {e}")))?,
        ),
        None => None,
    };
    let (halt, _) = watch::channel(false);
    let all: Arc<[Arc<CredentialStore>]> = vec![store.clone()].into();
    crate::credentials::reload::publish_expiry(&all);
    let wake = crate::credentials::reload::arm(&store, interval);
    tokio::spawn(crate::credentials::reload::run(
        store.clone(),
        all,
        interval,
        Arc::new(Notify::new()),
        halt.subscribe(),
        wake,
    ));
    let shared = Arc::new(Shared {
        connections: ConnectionsAccess::Refused,
        routes: Vec::new(),
        stores: vec![store.clone()],
        draining: AtomicBool::new(false),
        metrics: metrics.clone(),
        exposure: Arc::default(),
        app_probes: crate::admin::app_probe::AppProbes::new(Vec::new()),
        routeless: true,
    });
    match admin {
        Some(l) => {
            if let Ok(a) = l.local_addr() {
                info!(admin = %a, "admin endpoint listening");
            }
            tokio::spawn(crate::admin::serve(l, shared.clone(), halt.subscribe()));
        }
        None => {
            tokio::spawn(crate::admin::upkeep(metrics));
        }
    }
    let state = Arc::new(State {
        opts: Options {
            image: args.image.clone().unwrap_or_else(inject::default_image),
            ..Options::default()
        },
        reviews: Semaphore::new(MAX_REVIEWS),
    });
    if let Ok(a) = listener.local_addr() {
        info!(route = "webhook", listen = %a, path = "/inject", "listening");
    }
    accept_until_signal(listener, tls, state.clone()).await?;
    shared.draining.store(true, Ordering::SeqCst);
    info!("stopping: reviews in flight may finish");
    let all_done = state.reviews.acquire_many(MAX_REVIEWS as u32);
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, all_done).await;
    let _ = halt.send(true);
    Ok(())
}

fn bind_admin(addr: &str) -> Result<StdListener, (u8, String)> {
    let parsed: Addr = addr
        .parse()
        .map_err(|e| (2, format!("--admin {addr:?}: {e}")))?;
    parsed
        .bind_std()
        .map_err(|e| (1, format!("cannot listen on admin address {addr}: {e}")))
}

/// Accepts connections until SIGTERM or SIGINT.
async fn accept_until_signal(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    state: Arc<State>,
) -> Result<(), (u8, String)> {
    use tokio::signal::unix::{signal, SignalKind};
    let sig = |k| signal(k).map_err(|e| (1, format!("cannot handle signals: {e}")));
    let (mut term, mut int) = (sig(SignalKind::terminate())?, sig(SignalKind::interrupt())?);
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = tokio::select! {
            _ = term.recv() => return Ok(()),
            _ = int.recv() => return Ok(()),
            p = slots.clone().acquire_owned() => p.map_err(|e| (1, e.to_string()))?,
        };
        let (tcp, peer) = tokio::select! {
            _ = term.recv() => return Ok(()),
            _ = int.recv() => return Ok(()),
            r = listener.accept() => match r {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors or a peer gone before accept: the
                    // next accept may succeed; do not spin on it.
                    debug!(error = %e, "webhook accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let (acceptor, state) = (acceptor.clone(), state.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let _ = tcp.set_nodelay(true);
            let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => return debug!(%peer, error = %e, "webhook TLS handshake failed"),
                Err(_) => return debug!(%peer, "webhook TLS handshake timed out"),
            };
            let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
            let io = TokioIo::new(stream);
            let served = if h2 {
                serve_h2(io, state).await
            } else {
                let svc = service_fn(move |req| handle(req, state.clone()));
                hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_TIMEOUT)
                    .serve_connection(io, svc)
                    .await
            };
            if let Err(e) = served {
                debug!(%peer, error = %e, "webhook connection ended");
            }
        });
    }
}

/// One HTTP/2 connection, closed with a GOAWAY once it has had no request
/// open for [`IDLE_TIMEOUT`] (hyper's HTTP/2 server has no idle bound of
/// its own: without this, idle connections would hold every one of the
/// [`MAX_CONNECTIONS`] slots).
async fn serve_h2<I>(io: TokioIo<I>, state: Arc<State>) -> Result<(), hyper::Error>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let activity = Arc::new(Activity::default());
    let svc = {
        let activity = activity.clone();
        service_fn(move |req| {
            // The answer is one small buffered body: the request is over
            // once it is built.
            let open = activity.open();
            let answered = handle(req, state.clone());
            async move {
                let r = answered.await;
                drop(open);
                r
            }
        })
    };
    let conn = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .max_concurrent_streams(MAX_STREAMS)
        .serve_connection(io, svc);
    tokio::pin!(conn);
    let mut idle_since = Some(tokio::time::Instant::now());
    loop {
        let deadline = idle_deadline(idle_since);
        tokio::select! {
            r = conn.as_mut() => return r,
            _ = activity.changed.notified() => {
                idle_since = activity.idle().then(tokio::time::Instant::now);
            }
            _ = sleep_until_some(deadline), if deadline.is_some() => {
                if !activity.idle() {
                    idle_since = None;
                    continue;
                }
                debug!("webhook h2 connection idle: GOAWAY");
                conn.as_mut().graceful_shutdown();
                // No request is open, so it ends at once; a peer that never
                // reads the GOAWAY is cut off after the handshake bound.
                return tokio::time::timeout(HANDSHAKE_TIMEOUT, conn)
                    .await
                    .unwrap_or(Ok(()));
            }
        }
    }
}

/// When an HTTP/2 connection idle since `since` (none: a request is open)
/// is closed.
fn idle_deadline(since: Option<tokio::time::Instant>) -> Option<tokio::time::Instant> {
    since.map(|t| t + IDLE_TIMEOUT)
}

/// One HTTP request: `POST /inject` or `POST /inject/namespace-enabled`
/// judged, anything else refused.
async fn handle(
    req: Request<Incoming>,
    state: Arc<State>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let Some(namespace) = Namespace::from_path(req.uri().path()) else {
        return Ok(plain(
            StatusCode::NOT_FOUND,
            "not found: use POST /inject or /inject/namespace-enabled\n",
        ));
    };
    if req.method() != Method::POST {
        return Ok(plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed: use POST\n",
        ));
    }
    let started = Instant::now();
    let namespace = review::no_query(req.uri().query()).map(|()| namespace);
    // The permit is taken before the body is read: bodies held at once
    // are at most MAX_REVIEWS of MAX_BODY (256 MiB), whatever the number of
    // connections and streams; a slow body holds its permit at most
    // BODY_TIMEOUT.
    let answer = match (namespace, state.reviews.acquire().await) {
        (Err(e), _) => Answer::malformed(e),
        (Ok(_), Err(_)) => Answer::malformed("shutting down"),
        (Ok(namespace), Ok(_permit)) => match read_body(req).await {
            Ok(body) => review::review(&body, &state.opts, namespace),
            Err(a) => a,
        },
    };
    crate::metrics::webhook_review(answer.outcome.as_str(), started.elapsed());
    debug!(
        result = answer.outcome.as_str(),
        status = answer.status,
        "review"
    );
    Ok(to_response(answer))
}

/// The request body, at most [`MAX_BODY`] bytes (413 beyond), read within
/// [`BODY_TIMEOUT`] (400 after).
async fn read_body(req: Request<Incoming>) -> Result<Bytes, Answer> {
    if declared_length(&req).is_some_and(|n| n > MAX_BODY as u64) {
        return Err(Answer::too_large(MAX_BODY));
    }
    let collect = Limited::new(req.into_body(), MAX_BODY).collect();
    match tokio::time::timeout(BODY_TIMEOUT, collect).await {
        Ok(Ok(c)) => Ok(c.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            Err(Answer::too_large(MAX_BODY))
        }
        Ok(Err(e)) => Err(Answer::malformed(format!("reading the body: {e}"))),
        Err(_) => Err(Answer::malformed(format!(
            "the body took longer than {BODY_TIMEOUT:?}"
        ))),
    }
}

fn declared_length(req: &Request<Incoming>) -> Option<u64> {
    req.headers()
        .get(CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

fn to_response(a: Answer) -> Response<Full<Bytes>> {
    let code = StatusCode::from_u16(a.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let json = code == StatusCode::OK;
    let mut r = Response::new(Full::new(Bytes::from(a.body)));
    *r.status_mut() = code;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static(if json {
            "application/json"
        } else {
            "text/plain; charset=utf-8"
        }),
    );
    r
}

fn plain(code: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *r.status_mut() = code;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

//! The admin HTTP endpoint: `/metrics`, `/livez`, `/readyz`, `/status`.
//!
//! It is how the sidecar is diagnosed from outside (Prometheus, kubelet
//! probes, `curl` from a debug container), so it runs on its own listener
//! and its own tasks: a flood on a data port cannot starve it. Nor can a
//! flood on the admin port itself: a liveness probe that gets a reset
//! restarts the pod, so `/livez` and `/readyz` must answer however many
//! idle or stalled admin connections are open. Every connection is tracked
//! (`admission.rs`) and watched: a header timeout, an idle keep-alive
//! timeout and a bound on how long a response write may block close the
//! stuck ones, and when the connection cap is reached the newcomer is
//! always admitted while the most stuck connection is closed. HTTP/1.1 only
//! (hyper), plain text except `/status` and `/connections` (JSON); the
//! documents themselves are built in [`status`] and [`connections`] from
//! what the app exposes in [`shared`].

mod admission;
pub mod app_probe;
pub(crate) mod connections;
pub mod shared;
pub(crate) mod status;
mod tracked;
pub(crate) mod workload;

use std::convert::Infallible;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ALLOW, CACHE_CONTROL, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tracing::{debug, warn};

use crate::admin::shared::Shared;
use crate::proxy::addr::{Listener, Stream};
use admission::{Admission, Eviction, Expiry, Track};
use tracked::Tracked;

/// How often histogram buckets are drained into their snapshot.
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);
/// Concurrent admin connections; when full, the most stuck one is closed
/// to admit a newcomer. Each idle one costs a task, two 8 KiB buffers and a
/// descriptor.
const MAX_CONNECTIONS: usize = 256;
/// Admin connection tasks alive at once, counting evicted ones that are
/// still closing: a hard bound on the descriptors the admin port holds.
/// When reached, accepting waits for a task to end.
const MAX_TASKS: usize = 2 * MAX_CONNECTIONS;
/// The kernel send buffer of an admin TCP socket (Linux doubles it). Fixed
/// rather than autotuned (up to 4 MiB per socket by default): a client that
/// pipelines requests and never reads then blocks the writes within a few
/// responses, and the write timeout applies, instead of parking megabytes
/// of rendered metrics in the kernel for as long as it idles.
const SEND_BUFFER: u32 = 32 * 1024;
/// Largest request head (and write buffer) hyper keeps for one connection.
const MAX_BUF: usize = 32 * 1024;
/// How long an in-flight admin response may take to finish at shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);
/// Accept failures (out of descriptors) back off between these bounds.
const BACKOFF_MIN: Duration = Duration::from_millis(5);
const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// At most one WARN about evictions per this period.
const EVICTION_REPORT: Duration = Duration::from_secs(10);
/// `errno` values meaning "out of descriptors" (same on Linux and the BSDs).
const EMFILE: i32 = 24;
const ENFILE: i32 = 23;

const TEXT: &str = "text/plain; charset=utf-8";
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
const JSON: &str = "application/json";

/// Serves admin requests until `stop` turns true.
pub async fn serve(listener: Listener, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let upkeep = tokio::spawn(upkeep(shared.metrics.clone()));
    let admission = Arc::new(Admission::new(MAX_CONNECTIONS));
    let tasks = Arc::new(Semaphore::new(MAX_TASKS));
    let http = Arc::new(http_builder());
    let mut report = EvictionReport::default();
    let mut tick = tokio::time::interval(EVICTION_REPORT);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut backoff = BACKOFF_MIN;
    let mut failures = AcceptFailures::default();
    'serve: loop {
        let permit = tokio::select! {
            biased;
            () = stopped(&mut stop) => break,
            p = tasks.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let accepted = loop {
            tokio::select! {
                biased;
                () = stopped(&mut stop) => break 'serve,
                _ = tick.tick() => report.flush(Instant::now()),
                r = listener.accept() => break r,
            }
        };
        match accepted {
            Ok((stream, peer)) => {
                failures.recovered();
                backoff = BACKOFF_MIN;
                cap_send_buffer(&stream);
                let (track, evicted) = admission.admit(peer);
                if let Some(e) = evicted {
                    log_eviction(&e, "admin connection limit reached");
                    report.note(Instant::now());
                }
                tokio::spawn(connection(
                    stream,
                    track,
                    admission.clone(),
                    http.clone(),
                    shared.clone(),
                    stop.clone(),
                    permit,
                ));
                // Let the new connection read its request before the next
                // accept: under a flood, a probe is served while it is young.
                tokio::task::yield_now().await;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionAborted
                        | io::ErrorKind::ConnectionReset
                        | io::ErrorKind::Interrupted
                ) =>
            {
                // One peer gave up before it was accepted: nothing to back
                // off from.
                debug!(error = %e, "admin accept: connection gone before accept");
            }
            Err(e) => {
                drop(permit);
                failures.note(&e, backoff, Instant::now());
                if matches!(e.raw_os_error(), Some(EMFILE | ENFILE)) {
                    // Out of descriptors: give one held by a stuck admin
                    // connection back, so the next probe can be accepted.
                    if let Some(e) = admission.evict_stuck() {
                        log_eviction(&e, "out of file descriptors");
                        report.note(Instant::now());
                    }
                }
                tokio::select! {
                    biased;
                    () = stopped(&mut stop) => break,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = backoff.saturating_mul(2).min(BACKOFF_MAX);
            }
        }
    }
    report.flush(Instant::now());
    upkeep.abort();
}

/// How every admin connection speaks HTTP/1.1 (the fuzz target `admin_http`
/// serves its input with the same settings).
pub fn http_builder() -> http1::Builder {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        // The watchdog enforces header, idle and write deadlines itself;
        // hyper's header timer would also cut idle keep-alive connections.
        .header_read_timeout(None)
        .max_buf_size(MAX_BUF);
    http
}

/// Applies [`SEND_BUFFER`] to a TCP admin connection, through a duplicate
/// descriptor (socket options belong to the socket, not the descriptor).
/// Best effort: out of descriptors, the connection keeps the default.
fn cap_send_buffer(stream: &Stream) {
    use std::os::fd::AsFd;
    if let Stream::Tcp(s) = stream {
        if let Ok(fd) = s.as_fd().try_clone_to_owned() {
            let socket = tokio::net::TcpSocket::from_std_stream(fd.into());
            if let Err(e) = socket.set_send_buffer_size(SEND_BUFFER) {
                debug!(error = %e, "cannot cap an admin socket's send buffer");
            }
        }
    }
}

fn log_eviction(e: &Eviction, why: &str) {
    debug!(
        peer = %e.peer,
        class = e.class.as_str(),
        stuck = ?e.stuck,
        age = ?e.age,
        "{why}; closing the most stuck admin connection"
    );
}

/// Accept failures (typically `EMFILE`): a WARN at most once per
/// [`EVICTION_REPORT`] with the count since the last one, DEBUG otherwise.
#[derive(Debug, Default)]
struct AcceptFailures {
    /// Failures since the last success.
    streak: u64,
    /// Failures not yet counted in a WARN.
    unreported: u64,
    last_warn: Option<Instant>,
}

impl AcceptFailures {
    fn note(&mut self, e: &io::Error, backoff: Duration, now: Instant) {
        self.streak = self.streak.saturating_add(1);
        self.unreported = self.unreported.saturating_add(1);
        let due = self
            .last_warn
            .is_none_or(|t| now.saturating_duration_since(t) >= EVICTION_REPORT);
        if due {
            warn!(
                error = %e,
                failures = self.unreported,
                "admin accept failed; backing off until it recovers"
            );
            self.unreported = 0;
            self.last_warn = Some(now);
        } else {
            debug!(error = %e, backoff = ?backoff, "admin accept failed");
        }
    }

    fn recovered(&mut self) {
        if self.streak > 0 {
            debug!(failures = self.streak, "admin accept recovered");
            self.streak = 0;
        }
    }
}

/// Turns a flood of evictions into at most one WARN per
/// [`EVICTION_REPORT`]: the first eviction of a quiet period is reported at
/// once, the rest as a count when the period ends.
#[derive(Debug, Default)]
struct EvictionReport {
    /// Start of the current reporting period, while evictions happen.
    period: Option<Instant>,
    /// Evictions not yet reported.
    pending: u64,
}

impl EvictionReport {
    fn note(&mut self, now: Instant) {
        match self.period {
            None => {
                warn!(
                    limit = MAX_CONNECTIONS,
                    "admin connection limit reached; closing the most stuck connections \
                     to admit new ones (counts follow every {EVICTION_REPORT:?})"
                );
                self.period = Some(now);
            }
            Some(start) => {
                self.pending = self.pending.saturating_add(1);
                if now.saturating_duration_since(start) >= EVICTION_REPORT {
                    self.flush(now);
                }
            }
        }
    }

    fn flush(&mut self, now: Instant) {
        let Some(start) = self.period else { return };
        if now.saturating_duration_since(start) < EVICTION_REPORT {
            return;
        }
        if self.pending > 0 {
            warn!(
                evicted = self.pending,
                over = ?now.saturating_duration_since(start),
                limit = MAX_CONNECTIONS,
                "admin connections closed to admit new ones"
            );
            self.pending = 0;
            self.period = Some(now);
        } else {
            self.period = None;
        }
    }
}

/// Resolves once `stop` turns true (or its sender is gone), holding no
/// borrow of the channel across the caller's awaits.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Keeps the exporter's histograms drained even when nobody scrapes.
pub(crate) async fn upkeep(handle: PrometheusHandle) {
    let mut tick = tokio::time::interval(UPKEEP_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        handle.run_upkeep();
    }
}

/// How one admin connection ended.
enum End {
    Done(Result<(), hyper::Error>),
    Evicted,
    Expired(Expiry),
    Stopped,
}

/// Serves one connection (keep-alive allowed) until it ends, runs out of
/// time, is evicted, or `stop`.
async fn connection(
    stream: Stream,
    track: Arc<Track>,
    admission: Arc<Admission>,
    http: Arc<http1::Builder>,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
    _permit: OwnedSemaphorePermit,
) {
    let seen = track.clone();
    let service = service_fn(move |req: Request<Incoming>| {
        seen.on_request();
        let shared = shared.clone();
        async move {
            if req.uri().path().starts_with(app_probe::PREFIX) {
                let (code, msg) =
                    app_probe::respond(&shared.app_probes, req.method(), req.uri().path()).await;
                return Ok::<_, Infallible>(text(code, msg));
            }
            Ok(respond_to(&shared, req.method(), req.uri()))
        }
    });
    let io = Tracked::new(stream, track.clone());
    let conn = http.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let end = loop {
        let (due, _) = track.deadline();
        let timer = tokio::time::sleep_until(due.into());
        tokio::select! {
            biased;
            () = track.evicted() => break End::Evicted,
            r = conn.as_mut() => break End::Done(r),
            () = track.changed() => {}
            () = timer => {
                if let Some(why) = track.expired(Instant::now()) {
                    track.set_abort();
                    break End::Expired(why);
                }
            }
            () = stopped(&mut stop) => {
                conn.as_mut().graceful_shutdown();
                let _ = tokio::time::timeout(SHUTDOWN_GRACE, conn.as_mut()).await;
                break End::Stopped;
            }
        }
    };
    admission.remove(&track);
    let peer = &track.peer;
    match end {
        End::Done(Ok(())) | End::Stopped | End::Evicted => {}
        End::Done(Err(e)) => {
            debug!(peer = %peer, error = %e, "admin connection ended with an error")
        }
        End::Expired(why) => debug!(
            peer = %peer,
            reason = why.as_str(),
            age = ?track.accepted.elapsed(),
            "admin connection timed out"
        ),
    }
}

/// Routes one request by its path and, for `/connections`, its query.
pub fn respond_to(shared: &Shared, method: &Method, uri: &hyper::Uri) -> Response<Full<Bytes>> {
    if uri.path() == "/connections" && (method == Method::GET || method == Method::HEAD) {
        return match connections::respond(shared, uri.query()) {
            Ok(json) => body(StatusCode::OK, JSON, json),
            Err((code, msg)) => text(
                StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                msg,
            ),
        };
    }
    respond(shared, method, uri.path())
}

/// Routes one request. Unknown paths are 404 whatever the method; known
/// paths answer GET (and HEAD, which hyper sends without a body) only.
pub fn respond(shared: &Shared, method: &Method, path: &str) -> Response<Full<Bytes>> {
    let known = matches!(
        path,
        "/metrics" | "/livez" | "/readyz" | "/status" | "/connections"
    );
    if !known {
        return text(StatusCode::NOT_FOUND, format!("not found: {path}\n"));
    }
    if method != Method::GET && method != Method::HEAD {
        let mut r = text(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("method {method} not allowed; use GET\n"),
        );
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    let now = SystemTime::now();
    match path {
        "/metrics" => body(
            StatusCode::OK,
            PROMETHEUS_TEXT,
            crate::metrics::render(&shared.metrics),
        ),
        "/livez" => text(StatusCode::OK, "ok\n".to_string()),
        "/readyz" => {
            let r = crate::admin::status::readiness(shared, now);
            let code = if r.ready {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            text(code, format!("{}\n", r.detail))
        }
        "/connections" => text(
            StatusCode::BAD_REQUEST,
            "/connections needs its query: use respond_to\n".to_string(),
        ),
        _ => match serde_json::to_string_pretty(&crate::admin::status::status(shared, now)) {
            Ok(json) => body(StatusCode::OK, JSON, json + "\n"),
            Err(e) => text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot encode status: {e}\n"),
            ),
        },
    }
}

fn text(code: StatusCode, s: String) -> Response<Full<Bytes>> {
    body(code, TEXT, s)
}

fn body(code: StatusCode, content_type: &'static str, s: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(s)));
    *r.status_mut() = code;
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

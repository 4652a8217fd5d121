//! The admin HTTP endpoint: `/metrics`, `/livez`, `/readyz`, `/status`.
//!
//! It is how the sidecar is diagnosed from outside (Prometheus, kubelet
//! probes, `curl` from a debug container), so it runs on its own listener
//! and its own tasks: a flood on a data port cannot starve it, and a slow
//! or hostile admin client costs one task, bounded by a header timeout and
//! a cap on concurrent admin connections. HTTP/1.1 only (hyper), plain text
//! except `/status` (JSON); the documents themselves are built in
//! [`crate::status`].

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ALLOW, CACHE_CONTROL, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::sync::{watch, Semaphore};
use tracing::{debug, warn};

use crate::addr::{Listener, Stream};
use crate::shared::Shared;

/// How often histogram buckets are drained into their snapshot.
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);
/// How long a client may take to send its request headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Concurrent admin connections; more are closed at once.
const MAX_CONNECTIONS: usize = 64;
/// How long an in-flight admin response may take to finish at shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

const TEXT: &str = "text/plain; charset=utf-8";
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
const JSON: &str = "application/json";

/// Serves admin requests until `stop` turns true.
pub async fn serve(listener: Listener, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let upkeep = tokio::spawn(upkeep(shared.metrics.clone()));
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut backoff = Duration::from_millis(5);
    loop {
        let accepted = tokio::select! {
            biased;
            () = stopped(&mut stop) => break,
            r = listener.accept() => r,
        };
        match accepted {
            Ok((stream, peer)) => {
                backoff = Duration::from_millis(5);
                let Ok(permit) = slots.clone().try_acquire_owned() else {
                    warn!(peer = %peer, limit = MAX_CONNECTIONS, "too many admin connections; closing this one");
                    continue;
                };
                let (shared, stop) = (shared.clone(), stop.clone());
                tokio::spawn(async move {
                    connection(stream, &peer, shared, stop).await;
                    drop(permit);
                });
            }
            Err(e) => {
                warn!(error = %e, backoff = ?backoff, "admin accept failed; backing off");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
    }
    upkeep.abort();
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

/// Serves one connection (keep-alive allowed) until it ends or `stop`.
async fn connection(
    stream: Stream,
    peer: &str,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    let service = service_fn(move |req: Request<Incoming>| {
        let response = respond(&shared, req.method(), req.uri().path());
        async move { Ok::<_, Infallible>(response) }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        () = stopped(&mut stop) => {
            conn.as_mut().graceful_shutdown();
            tokio::time::timeout(SHUTDOWN_GRACE, conn).await.unwrap_or(Ok(()))
        }
    };
    if let Err(e) = result {
        debug!(peer = %peer, error = %e, "admin connection ended with an error");
    }
}

/// Routes one request. Unknown paths are 404 whatever the method; known
/// paths answer GET (and HEAD, which hyper sends without a body) only.
pub fn respond(shared: &Shared, method: &Method, path: &str) -> Response<Full<Bytes>> {
    let known = matches!(path, "/metrics" | "/livez" | "/readyz" | "/status");
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
        "/metrics" => body(StatusCode::OK, PROMETHEUS_TEXT, shared.metrics.render()),
        "/livez" => text(StatusCode::OK, "ok\n".to_string()),
        "/readyz" => {
            let r = crate::status::readiness(shared, now);
            let code = if r.ready {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            text(code, format!("{}\n", r.detail))
        }
        _ => match serde_json::to_string_pretty(&crate::status::status(shared, now)) {
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

//! One request's way from the client to the target: its verdict, the
//! limits, the header sanitising, the forward on the connection's own
//! target connection, and the answer when any of it fails (400 for what
//! the client sent, 431 over the limits, 408 when its body stops
//! arriving for `--http-body-timeout`, 502 when the target fails), which
//! always closes the connection (on h2: the stream).

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONNECTION, CONTENT_TYPE};
use hyper::upgrade::OnUpgrade;
use hyper::{Method, Request, Response, StatusCode};

use super::body::Idle;
use super::headers::{sanitize_request, sanitize_response, Sanitized, Upgrade};
use super::smuggle::{next_verdict, Verdicts};
use super::{HttpSettings, Identity};

/// A response body: the target's, or one of ours.
pub type RespBody = BoxBody<Bytes, hyper::Error>;
/// A forwarded request's body: trailers sanitised, each read bounded by
/// `--http-body-timeout`.
pub type ReqBody = Idle<Sanitized<Incoming>>;

/// `req` with its body as forwarded; `stalled` is set when the body stops
/// arriving.
fn bounded(req: Request<Incoming>, id: &Identity, stalled: &Arc<AtomicBool>) -> Request<ReqBody> {
    let timeout = id.settings.body_timeout;
    req.map(|b| {
        Idle::new(
            Sanitized(b),
            timeout,
            stalled.clone(),
            id.body_timeouts.clone(),
        )
    })
}

/// A response of ours that ends the connection.
pub fn refuse(status: StatusCode, why: &str) -> Response<RespBody> {
    let body = Full::new(Bytes::from(format!("{why}\n")))
        .map_err(|never| match never {})
        .boxed();
    let mut r = Response::new(body);
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    r.headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    r
}

/// What refuses a request before it is forwarded, whatever its protocol:
/// `CONNECT` (a tunnel would carry no identity) and more header fields
/// than `--http-max-headers`.
pub fn precheck<B>(req: &Request<B>, limits: &HttpSettings) -> Option<Response<RespBody>> {
    if req.method() == Method::CONNECT {
        return Some(refuse(
            StatusCode::METHOD_NOT_ALLOWED,
            "CONNECT is not forwarded: a tunnel carries no identity",
        ));
    }
    if req.headers().len() > limits.max_headers {
        return Some(refuse(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "too many header fields",
        ));
    }
    None
}

/// The answer when forwarding failed: the client's body stopped arriving
/// (`stalled`), was malformed (a chunk hyper could not decode), or the
/// target failed.
fn failed(e: &hyper::Error, stalled: &AtomicBool) -> Response<RespBody> {
    if stalled.load(Ordering::Acquire) {
        refuse(
            StatusCode::REQUEST_TIMEOUT,
            "the request body stopped arriving",
        )
    } else if e.is_user() {
        refuse(StatusCode::BAD_REQUEST, "malformed request body")
    } else {
        refuse(StatusCode::BAD_GATEWAY, "the target failed")
    }
}

/// An HTTP/1.1 connection's shared state.
pub struct H1 {
    pub identity: Identity,
    pub sender: tokio::sync::Mutex<hyper::client::conn::http1::SendRequest<ReqBody>>,
    pub verdicts: Verdicts,
    /// The client side of a WebSocket the target accepted (101), to be
    /// joined to the target once both connections let go.
    pub tunnel: Mutex<Option<OnUpgrade>>,
    /// Set once a WebSocket upgrade is forwarded: the target's connection
    /// ending then is the switch, not a close.
    pub upgrading: AtomicBool,
    /// Set when a request body stopped arriving (the connection then
    /// closes as `http_timeout`).
    pub stalled: Arc<AtomicBool>,
}

/// Forwards one HTTP/1.1 request.
pub async fn h1(mut req: Request<Incoming>, c: Arc<H1>) -> Result<Response<RespBody>, Infallible> {
    if let Err((status, why)) = next_verdict(&c.verdicts) {
        return Ok(refuse(status, why));
    }
    if let Some(r) = precheck(&req, &c.identity.settings) {
        return Ok(r);
    }
    let upgrade = sanitize_request(req.headers_mut(), &c.identity.xfcc);
    let client_side = (upgrade == Upgrade::Websocket).then(|| hyper::upgrade::on(&mut req));
    if client_side.is_some() {
        c.upgrading.store(true, Ordering::SeqCst);
    }
    let sent = {
        let mut sender = c.sender.lock().await;
        if sender.ready().await.is_err() {
            return Ok(refuse(StatusCode::BAD_GATEWAY, "the target closed"));
        }
        sender.send_request(bounded(req, &c.identity, &c.stalled))
    };
    let resp = match sent.await {
        Ok(r) => r,
        Err(e) => return Ok(failed(&e, &c.stalled)),
    };
    let switching = resp.status() == StatusCode::SWITCHING_PROTOCOLS;
    if switching && upgrade != Upgrade::Websocket {
        return Ok(refuse(
            StatusCode::BAD_GATEWAY,
            "the target switched protocols unasked",
        ));
    }
    let (mut parts, body) = resp.into_parts();
    sanitize_response(&mut parts.headers, switching);
    if switching {
        *c.tunnel.lock().unwrap_or_else(|e| e.into_inner()) = client_side;
    } else if upgrade != Upgrade::None {
        // The framing reader stopped at the upgrade request: nothing after
        // it on this connection would be judged.
        parts
            .headers
            .insert(CONNECTION, HeaderValue::from_static("close"));
    }
    Ok(Response::from_parts(parts, body.boxed()))
}

/// An h2 connection's shared state.
pub struct H2 {
    pub identity: Identity,
    pub sender: hyper::client::conn::http2::SendRequest<ReqBody>,
}

/// Forwards one h2 request (stream).
pub async fn h2(mut req: Request<Incoming>, c: Arc<H2>) -> Result<Response<RespBody>, Infallible> {
    if let Some(r) = precheck(&req, &c.identity.settings) {
        return Ok(r);
    }
    sanitize_request(req.headers_mut(), &c.identity.xfcc);
    let mut sender = c.sender.clone();
    if sender.ready().await.is_err() {
        return Ok(refuse(StatusCode::BAD_GATEWAY, "the target closed"));
    }
    let stalled = Arc::new(AtomicBool::new(false));
    match sender
        .send_request(bounded(req, &c.identity, &stalled))
        .await
    {
        Ok(resp) => {
            let (mut parts, body) = resp.into_parts();
            sanitize_response(&mut parts.headers, false);
            Ok(Response::from_parts(parts, body.boxed()))
        }
        Err(e) => Ok(failed(&e, &stalled)),
    }
}

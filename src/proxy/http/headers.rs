//! What of a request's headers and trailers reaches the target, and what of
//! the target's response headers reaches the client.
//!
//! Why each removal: a client-sent `x-forwarded-client-cert` (in any
//! spelling [`is_xfcc_name`] matches, header or trailer) would be read as
//! a verified identity; a header named in `Connection` is dropped by the
//! next hop, so `Connection: x-forwarded-client-cert` would make a proxying
//! target drop ours; `Upgrade: h2c` and `HTTP2-Settings` would turn the
//! connection into an HTTP/2 tunnel whose requests carry no identity. Only
//! `Upgrade: websocket` is let through: a WebSocket carries one identity
//! for its whole life, the one of the request that opened it.

use std::pin::Pin;
use std::task::{Context, Poll};

use hyper::body::{Body, Frame};
use hyper::header::{HeaderMap, HeaderName, HeaderValue, CONNECTION, TE, UPGRADE};

use super::xfcc::{is_xfcc_name, XFCC};

/// Hop-by-hop headers (RFC 9110 §7.6.1), never forwarded as they came.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "http2-settings",
];

/// What a sanitised request asks beyond an exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upgrade {
    /// A plain request.
    None,
    /// `Upgrade: websocket` (HTTP/1.1): forwarded; a 101 turns the
    /// connection into a tunnel.
    Websocket,
    /// Another protocol (`h2c` among them): the header was removed and the
    /// request goes on as a plain one.
    Removed,
}

/// Makes request headers safe to forward and adds ours: removes every
/// header [`is_xfcc_name`] matches, every hop-by-hop header and every
/// header `Connection` names (all before ours is added, so none can name
/// it), keeps `TE: trailers` alone of `TE`, and re-adds `Upgrade:
/// websocket` with `Connection: upgrade` when that was asked for.
pub fn sanitize_request(headers: &mut HeaderMap, xfcc: &HeaderValue) -> Upgrade {
    let named = connection_tokens(headers);
    let upgrade = requested_upgrade(headers, &named);
    let te_trailers = headers
        .get_all(TE)
        .iter()
        .any(|v| v.as_bytes().eq_ignore_ascii_case(b"trailers"));
    remove_where(headers, |name| {
        is_xfcc_name(name.as_str().as_bytes())
            || HOP_BY_HOP.contains(&name.as_str())
            || name == TE
            || named.iter().any(|n| n == name.as_str())
    });
    if te_trailers {
        headers.insert(TE, HeaderValue::from_static("trailers"));
    }
    if upgrade == Upgrade::Websocket {
        headers.insert(UPGRADE, HeaderValue::from_static("websocket"));
        headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
    }
    headers.insert(HeaderName::from_static(XFCC), xfcc.clone());
    upgrade
}

/// Removes from a response what concerns only the hop it came over; a
/// 101's `Upgrade` and `Connection` are kept (the client needs them).
pub fn sanitize_response(headers: &mut HeaderMap, switching: bool) {
    if switching {
        return;
    }
    let named = connection_tokens(headers);
    remove_where(headers, |name| {
        HOP_BY_HOP.contains(&name.as_str()) || named.iter().any(|n| n == name.as_str())
    });
}

/// Removes every trailer [`is_xfcc_name`] matches.
pub fn sanitize_trailers(trailers: &mut HeaderMap) {
    remove_where(trailers, |name| is_xfcc_name(name.as_str().as_bytes()));
}

/// The upgrade a request asks for: a WebSocket only when `Upgrade` names
/// nothing else and `Connection` says `upgrade`.
fn requested_upgrade(headers: &HeaderMap, connection: &[String]) -> Upgrade {
    let mut protocols = headers
        .get_all(UPGRADE)
        .iter()
        .flat_map(|v| tokens(v.as_bytes()))
        .peekable();
    if protocols.peek().is_none() {
        return Upgrade::None;
    }
    let websocket_only = protocols.all(|p| p == "websocket");
    if websocket_only && connection.iter().any(|t| t == "upgrade") {
        Upgrade::Websocket
    } else {
        Upgrade::Removed
    }
}

/// The lowercase header names `Connection` lists.
fn connection_tokens(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(CONNECTION)
        .iter()
        .flat_map(|v| tokens(v.as_bytes()))
        .collect()
}

/// A comma-separated list's items, trimmed and lowercased, empty ones
/// skipped.
fn tokens(v: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(v)
        .split(',')
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect()
}

/// Removes every header whose name `drop` selects.
fn remove_where(headers: &mut HeaderMap, drop: impl Fn(&HeaderName) -> bool) {
    let doomed: Vec<HeaderName> = headers.keys().filter(|n| drop(n)).cloned().collect();
    for name in doomed {
        headers.remove(&name);
    }
}

/// A request body whose trailers go through [`sanitize_trailers`].
#[derive(Debug)]
pub struct Sanitized<B>(pub B);

impl<B: Body + Unpin> Body for Sanitized<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.0).poll_frame(cx);
        polled.map(|frame| {
            frame.map(|r| {
                r.map(|f| match f.into_trailers() {
                    Ok(mut t) => {
                        sanitize_trailers(&mut t);
                        Frame::trailers(t)
                    }
                    Err(data) => data,
                })
            })
        })
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.0.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn ours_is_the_only_one_and_connection_cannot_name_it() {
        let ours = HeaderValue::from_static("Hash=1");
        let mut h = map(&[
            ("x-forwarded-client-cert", "a"),
            ("X_Forwarded_Client_Cert", "b"),
            ("connection", "x-forwarded-client-cert, x-other"),
            ("x-other", "c"),
            ("upgrade", "h2c"),
            ("http2-settings", "AAA"),
            ("te", "trailers"),
            ("host", "h"),
        ]);
        assert_eq!(sanitize_request(&mut h, &ours), Upgrade::Removed);
        let mut left: Vec<_> = h
            .iter()
            .map(|(k, v)| (k.as_str(), v.to_str().unwrap()))
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                ("host", "h"),
                ("te", "trailers"),
                ("x-forwarded-client-cert", "Hash=1")
            ]
        );
    }

    #[test]
    fn a_websocket_upgrade_goes_through() {
        let ours = HeaderValue::from_static("Hash=1");
        let mut h = map(&[("connection", "Upgrade"), ("upgrade", "WebSocket")]);
        assert_eq!(sanitize_request(&mut h, &ours), Upgrade::Websocket);
        assert_eq!(h["upgrade"], "websocket");
        assert_eq!(h["connection"], "upgrade");
        let mut no_connection = map(&[("upgrade", "websocket")]);
        assert_eq!(
            sanitize_request(&mut no_connection, &ours),
            Upgrade::Removed
        );
    }
}

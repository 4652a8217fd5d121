//! The admin target's checks: the input is served as one connection, with
//! the admin listener's HTTP settings and router, and the output is read
//! back as HTTP/1.1 responses. For the leading requests that a small
//! reference parser understands (a request line and plain headers, no
//! body), each response's status, `Allow` header and 404 body must be the
//! ones the README documents.

use std::convert::Infallible;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use metrics_exporter_prometheus::PrometheusBuilder;
use mtls_sidecar::admin::shared::{ConnectionsAccess, Shared};
use mtls_sidecar::admin::{http_builder, respond_to};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const KNOWN: [&str; 5] = ["/metrics", "/livez", "/readyz", "/status", "/connections"];

fn shared() -> Arc<Shared> {
    static S: OnceLock<Arc<Shared>> = OnceLock::new();
    S.get_or_init(|| {
        Arc::new(Shared {
            connections: ConnectionsAccess::Refused,
            routes: vec![],
            stores: vec![],
            draining: AtomicBool::new(false),
            metrics: PrometheusBuilder::new().build_recorder().handle(),
            exposure: Arc::default(),
            app_probes: mtls_sidecar::admin::app_probe::AppProbes::new(Vec::new()),
            routeless: false,
        })
    })
    .clone()
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static R: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    R.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("a runtime")
    })
}

/// Serves `data` as one connection and returns what was written back.
pub fn serve(data: &[u8]) -> Vec<u8> {
    runtime().block_on(async {
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let shared = shared();
        let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            let r = respond_to(&shared, req.method(), req.uri());
            async move { Ok::<_, Infallible>(r) }
        });
        let conn = tokio::spawn(async move {
            let _ = http_builder()
                .serve_connection(TokioIo::new(server), service)
                .await;
        });
        // The client keeps its side open, as curl and the kubelet do (hyper
        // drops a request whose connection is half-closed). The clock is
        // paused, so "no byte for a second" is reached as soon as
        // everything is idle: that ends the exchange once all is sent.
        let (mut rx, mut tx) = tokio::io::split(&mut client);
        let sent = std::cell::Cell::new(false);
        let send = async {
            let _ = tx.write_all(data).await;
            sent.set(true);
        };
        let recv = async {
            let mut out = Vec::new();
            let mut buf = vec![0u8; 16 * 1024];
            let mut idle = 0;
            loop {
                match tokio::time::timeout(Duration::from_secs(1), rx.read(&mut buf)).await {
                    Ok(Ok(0)) | Ok(Err(_)) => break,
                    Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
                    Err(_) if sent.get() => break,
                    Err(_) => {
                        // Bounded cost: the connection must take its input.
                        idle += 1;
                        assert!(idle < 60, "the admin connection stopped reading");
                    }
                }
            }
            out
        };
        let ((), out) = tokio::join!(send, recv);
        conn.abort();
        out
    })
}

/// A request the reference understands: its method and target.
#[derive(Debug, PartialEq, Eq)]
pub struct Simple {
    pub method: String,
    pub target: String,
}

fn tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn target_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~/!$&'()*+,;=:@?".contains(&b)
}

/// The leading requests of `data` that have a plain shape: `METHOD /path
/// HTTP/1.1`, at most 16 headers of token names and visible-ASCII values,
/// none that implies a body or changes the connection. Stops at the first
/// request of any other shape.
pub fn simple_requests(data: &[u8]) -> Vec<Simple> {
    let mut out = Vec::new();
    let mut rest = data;
    'requests: while let Some(end) = find(rest, b"\r\n\r\n") {
        let head = &rest[..end];
        let mut lines = split_crlf(head).into_iter();
        let Some(line) = lines.next() else {
            break;
        };
        let parts: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        let [method, target, b"HTTP/1.1"] = parts[..] else {
            break;
        };
        if method.is_empty()
            || method.len() > 32
            || !method.iter().all(|&b| tchar(b))
            || !target.starts_with(b"/")
            || target.len() > 1024
            || !target.iter().all(|&b| target_char(b))
        {
            break;
        }
        let mut count = 0;
        for h in lines {
            count += 1;
            let Some(colon) = h.iter().position(|&b| b == b':') else {
                break 'requests;
            };
            let (name, value) = (&h[..colon], &h[colon + 1..]);
            let lower = String::from_utf8_lossy(name).to_ascii_lowercase();
            let plain = !name.is_empty()
                && name.iter().all(|&b| tchar(b))
                && value.iter().all(|&b| b == b' ' || b.is_ascii_graphic())
                && ![
                    "content-length",
                    "transfer-encoding",
                    "connection",
                    "expect",
                    "upgrade",
                    "te",
                ]
                .contains(&lower.as_str());
            if count > 16 || !plain {
                break 'requests;
            }
        }
        out.push(Simple {
            method: String::from_utf8_lossy(method).into_owned(),
            target: String::from_utf8_lossy(target).into_owned(),
        });
        rest = &rest[end + 4..];
    }
    out
}

/// Lines separated by CRLF (a bare CR or LF stays inside its line).
fn split_crlf(head: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = head;
    while let Some(i) = find(rest, b"\r\n") {
        out.push(&rest[..i]);
        rest = &rest[i + 2..];
    }
    out.push(rest);
    out
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// One response as read back.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// Reads one response off the front of `out` (`head`: a response to HEAD,
/// so no body), returning it and the bytes after it.
pub fn read_response(out: &[u8], head: bool) -> Result<(Response, &[u8]), String> {
    let end = find(out, b"\r\n\r\n").ok_or("a response head without its end")?;
    let text = std::str::from_utf8(&out[..end]).map_err(|e| e.to_string())?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .strip_prefix("HTTP/1.1 ")
        .and_then(|s| s.get(..3))
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let mut headers = Vec::new();
    for l in lines {
        let (n, v) = l
            .split_once(':')
            .ok_or_else(|| format!("bad header {l:?}"))?;
        headers.push((n.to_ascii_lowercase(), v.trim().to_string()));
    }
    let len = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map(|(_, v)| v.parse::<usize>().map_err(|e| e.to_string()))
        .transpose()?
        .unwrap_or(0);
    let rest = &out[end + 4..];
    let body_len = if head { 0 } else { len };
    if rest.len() < body_len {
        return Err(format!("body of {len} bytes cut at {}", rest.len()));
    }
    Ok((
        Response {
            status,
            headers,
            body: rest[..body_len].to_vec(),
        },
        &rest[body_len..],
    ))
}

/// The target.
pub fn check(data: &[u8]) {
    let out = serve(data);
    let mut rest = &out[..];
    for req in simple_requests(data) {
        let head = req.method == "HEAD";
        let (resp, after) = read_response(rest, head)
            .unwrap_or_else(|e| panic!("{req:?}: {e}: {:?}", String::from_utf8_lossy(rest)));
        rest = after;
        let path = req.target.split('?').next().unwrap_or_default();
        let header = |n: &str| {
            resp.headers
                .iter()
                .find(|(k, _)| k == n)
                .map(|(_, v)| v.as_str())
        };
        if !KNOWN.contains(&path) {
            assert_eq!(resp.status, 404, "{req:?}");
            if !head {
                assert_eq!(
                    resp.body,
                    format!("not found: {path}\n").into_bytes(),
                    "{req:?}"
                );
            }
        } else if req.method != "GET" && !head {
            assert_eq!(resp.status, 405, "{req:?}");
            assert_eq!(header("allow"), Some("GET, HEAD"), "{req:?}");
        } else if path == "/connections" {
            // The fuzzed endpoint's access is Refused (a wildcard listener
            // without --admin-connections on): 403 whatever the query.
            assert_eq!(resp.status, 403, "{req:?}");
        } else if path == "/readyz" {
            assert!(
                [200, 503].contains(&resp.status),
                "{req:?}: {}",
                resp.status
            );
        } else {
            assert_eq!(resp.status, 200, "{req:?}");
        }
        assert_eq!(header("cache-control"), Some("no-store"), "{req:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_reads_plain_requests_only() {
        let r = simple_requests(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\nPOST /a?b HTTP/1.1\r\n\r\nGET / HTTP/1.0\r\n\r\n");
        assert_eq!(r.len(), 2);
        assert_eq!(
            (r[1].method.as_str(), r[1].target.as_str()),
            ("POST", "/a?b")
        );
        assert!(simple_requests(b"GET /x HTTP/1.1\r\nContent-Length: 1\r\n\r\nx").is_empty());
        let (resp, rest) = read_response(
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 2\r\n\r\nabX",
            false,
        )
        .unwrap();
        assert_eq!(
            (resp.status, resp.body.as_slice(), rest),
            (404, &b"ab"[..], &b"X"[..])
        );
    }
}

//! `/app-probe/NAME`: performs the application probe `--app-probe` named
//! NAME against `127.0.0.1:<its port>` (a server route's target, which the
//! kubelet cannot reach once the application binds loopback) and answers
//! 200 when it passes, 503 when it does not. Nothing of the application's
//! answer is passed on, only whether it passed; only the configured probes
//! run (no path, port or header comes from the request); each is bounded
//! by its timeout, and at most [`MAX_IN_FLIGHT`] run at once (more get 503
//! at once).

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

use crate::config::app_probe::{AppProbe, ProbeCheck};

/// The path prefix.
pub const PREFIX: &str = "/app-probe/";
/// Probes in flight at once, over all names.
pub const MAX_IN_FLIGHT: usize = 16;
/// The most of a gRPC answer read.
const GRPC_MAX_BODY: usize = 4096;

/// The probes a process performs, and the bound on how many run at once.
#[derive(Debug)]
pub struct AppProbes {
    probes: Vec<AppProbe>,
    in_flight: Semaphore,
}

impl AppProbes {
    pub fn new(probes: Vec<AppProbe>) -> AppProbes {
        AppProbes {
            probes,
            in_flight: Semaphore::new(MAX_IN_FLIGHT),
        }
    }

    /// The probe a path names, if it is one of ours.
    pub fn find(&self, path: &str) -> Option<&AppProbe> {
        let name = path.strip_prefix(PREFIX)?;
        self.probes.iter().find(|p| p.name == name)
    }
}

/// The answer to `/app-probe/...`: the status and a line saying why.
pub async fn respond(probes: &AppProbes, method: &Method, path: &str) -> (StatusCode, String) {
    let Some(probe) = probes.find(path) else {
        return (StatusCode::NOT_FOUND, format!("no app probe at {path}\n"));
    };
    if method != Method::GET && method != Method::HEAD {
        return (StatusCode::METHOD_NOT_ALLOWED, "use GET\n".into());
    }
    let Ok(_permit) = probes.in_flight.try_acquire() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "too many app probes in flight\n".into(),
        );
    };
    let outcome = tokio::time::timeout(probe.timeout, perform(probe)).await;
    verdict(
        probe,
        outcome.unwrap_or_else(|_| Err(format!("no answer within {:?}", probe.timeout))),
    )
}

/// 200 for a passed probe, 503 naming why for a failed one.
fn verdict(probe: &AppProbe, outcome: Result<(), String>) -> (StatusCode, String) {
    match outcome {
        Ok(()) => (StatusCode::OK, "ok\n".into()),
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("app probe {} failed: {why}\n", probe.name),
        ),
    }
}

async fn perform(probe: &AppProbe) -> Result<(), String> {
    let stream = TcpStream::connect(("127.0.0.1", probe.port))
        .await
        .map_err(|e| format!("connect 127.0.0.1:{}: {e}", probe.port))?;
    match &probe.check {
        ProbeCheck::Tcp => Ok(()),
        ProbeCheck::Http { path, headers } => http_get(stream, probe.port, path, headers).await,
        ProbeCheck::Grpc { service } => grpc_health(stream, probe.port, service).await,
    }
}

/// Whether an HTTP status passes a kubelet probe.
pub fn http_passes(code: u16) -> bool {
    (200..400).contains(&code)
}

async fn http_get(
    stream: TcpStream,
    port: u16,
    path: &str,
    headers: &[(String, String)],
) -> Result<(), String> {
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    let driver = tokio::spawn(conn);
    let mut req = Request::get(path)
        .header("host", format!("127.0.0.1:{port}"))
        .header("user-agent", "kube-probe/mtls-sidecar")
        .header("accept", "*/*")
        .header("connection", "close");
    for (k, v) in headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let req = req
        .body(Full::new(Bytes::new()))
        .map_err(|e| e.to_string())?;
    let answer = send.send_request(req).await.map_err(|e| e.to_string());
    driver.abort();
    let code = answer?.status().as_u16();
    if http_passes(code) {
        Ok(())
    } else {
        Err(format!("HTTP {code}"))
    }
}

/// The gRPC health check's request: `HealthCheckRequest { service }`,
/// length-prefixed.
pub fn grpc_request(service: &str) -> Vec<u8> {
    let mut msg = Vec::new();
    if !service.is_empty() {
        msg.push(0x0a);
        let mut n = service.len();
        while n >= 0x80 {
            msg.push((n as u8 & 0x7f) | 0x80);
            n >>= 7;
        }
        msg.push(n as u8);
        msg.extend_from_slice(service.as_bytes());
    }
    let mut framed = vec![0u8];
    framed.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    framed.extend_from_slice(&msg);
    framed
}

/// The status a `HealthCheckResponse` frame carries (1 is SERVING; an
/// empty message is 0, UNKNOWN).
pub fn grpc_status(body: &[u8]) -> Option<u64> {
    let (&flag, rest) = body.split_first()?;
    if flag != 0 || rest.len() < 4 {
        return None;
    }
    let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
    let msg = rest.get(4..4 + len)?;
    let mut i = 0;
    let mut status = 0;
    while i < msg.len() {
        let tag = msg[i];
        i += 1;
        let (value, used) = varint(&msg[i..])?;
        i += used;
        match tag {
            0x08 => status = value,
            // Only varint fields are expected in this message.
            t if t & 7 == 0 => {}
            _ => return None,
        }
    }
    Some(status)
}

fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, byte) in b.iter().enumerate().take(10) {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

async fn grpc_health(stream: TcpStream, port: u16, service: &str) -> Result<(), String> {
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
    let driver = tokio::spawn(conn);
    let req = Request::post(format!(
        "http://127.0.0.1:{port}/grpc.health.v1.Health/Check"
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .header("user-agent", "kube-probe/mtls-sidecar")
    .body(Full::new(Bytes::from(grpc_request(service))))
    .map_err(|e| e.to_string())?;
    let result = async {
        let answer = send.send_request(req).await.map_err(|e| e.to_string())?;
        if answer.status() != StatusCode::OK {
            return Err(format!("HTTP {}", answer.status().as_u16()));
        }
        let collected = Limited::new(answer.into_body(), GRPC_MAX_BODY)
            .collect()
            .await
            .map_err(|e| e.to_string())?;
        let grpc = collected
            .trailers()
            .and_then(|t| t.get("grpc-status"))
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        if grpc != "0" {
            return Err(format!("grpc-status {grpc:?}"));
        }
        match grpc_status(&collected.to_bytes()) {
            Some(1) => Ok(()),
            Some(s) => Err(format!("health status {s} (not SERVING)")),
            None => Err("a malformed HealthCheckResponse".into()),
        }
    }
    .await;
    driver.abort();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_messages_are_framed_and_read() {
        assert_eq!(grpc_request(""), vec![0, 0, 0, 0, 0]);
        assert_eq!(grpc_request("a"), vec![0, 0, 0, 0, 3, 0x0a, 1, b'a']);
        assert_eq!(grpc_status(&[0, 0, 0, 0, 2, 0x08, 1]), Some(1));
        assert_eq!(grpc_status(&[0, 0, 0, 0, 2, 0x08, 2]), Some(2));
        assert_eq!(grpc_status(&[0, 0, 0, 0, 0]), Some(0));
        assert_eq!(grpc_status(&[0, 0, 0, 0, 9, 0x08]), None);
        assert_eq!(grpc_status(&[1, 0, 0, 0, 0]), None);
    }

    #[test]
    fn statuses_pass_as_the_kubelet_judges_them() {
        assert!(http_passes(200) && http_passes(302) && http_passes(399));
        assert!(!http_passes(199) && !http_passes(400) && !http_passes(503));
    }
}

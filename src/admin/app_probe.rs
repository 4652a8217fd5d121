//! `/app-probe/NAME`: performs the application probe `--app-probe` named
//! NAME against its server route's loopback target (which the
//! kubelet cannot reach once the application binds loopback) and answers
//! 200 when it passes, 503 when it does not. Nothing of the application's
//! answer is passed on, only whether it passed; only the configured probes
//! run (no path, port or header comes from the request); each is bounded
//! by its timeout. A probe runs once at a time, and callers that arrive
//! while it runs take that run's verdict, so no number of requests makes
//! the kubelet's own probe fail or lets the admin port hammer the
//! application; a caller arriving after a run gets a run of its own.

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

use crate::config::app_probe::{AppProbe, ProbeCheck};

/// The path prefix.
pub const PREFIX: &str = "/app-probe/";

/// The most of a gRPC answer read.
const GRPC_MAX_BODY: usize = 4096;

/// One probe's runs: held while it runs (so runs never overlap), with
/// the number of runs finished and the last one's verdict.
#[derive(Debug)]
struct Runs {
    running: Mutex<()>,
    last: std::sync::Mutex<(u64, Result<(), String>)>,
}

impl Runs {
    fn new() -> Runs {
        Runs {
            running: Mutex::new(()),
            last: std::sync::Mutex::new((0, Err("not run yet".into()))),
        }
    }

    fn last(&self) -> (u64, Result<(), String>) {
        match self.last.lock() {
            Ok(l) => l.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn finish(&self, outcome: Result<(), String>) {
        let mut l = match self.last.lock() {
            Ok(l) => l,
            Err(poisoned) => poisoned.into_inner(),
        };
        *l = (l.0.wrapping_add(1), outcome);
    }
}

/// The probes a process performs, each with its runs.
#[derive(Debug)]
pub struct AppProbes {
    probes: Vec<(AppProbe, Runs)>,
}

impl AppProbes {
    pub fn new(probes: Vec<AppProbe>) -> AppProbes {
        AppProbes {
            probes: probes.into_iter().map(|p| (p, Runs::new())).collect(),
        }
    }

    /// The probe a path names, if it is one of ours, with its runs.
    fn find(&self, path: &str) -> Option<&(AppProbe, Runs)> {
        let name = path.strip_prefix(PREFIX)?;
        self.probes.iter().find(|(p, _)| p.name == name)
    }
}

/// Whether a run finished since the caller looked (`seen` runs then): its
/// verdict is then the caller's, with no run of its own.
fn shared(seen: u64, now: u64) -> bool {
    seen != now
}

/// The answer to `/app-probe/...`: the status and a line saying why.
pub async fn respond(probes: &AppProbes, method: &Method, path: &str) -> (StatusCode, String) {
    let Some((probe, runs)) = probes.find(path) else {
        return (StatusCode::NOT_FOUND, format!("no app probe at {path}\n"));
    };
    if method != Method::GET && method != Method::HEAD {
        return (StatusCode::METHOD_NOT_ALLOWED, "use GET\n".into());
    }
    let (seen, _) = runs.last();
    // Held while the probe runs: a caller arriving meanwhile waits for
    // this run and takes its verdict.
    let _running = runs.running.lock().await;
    let (now, outcome) = runs.last();
    if shared(seen, now) {
        return verdict(probe, outcome);
    }
    let outcome = tokio::time::timeout(probe.timeout, perform(probe))
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {:?}", probe.timeout)));
    runs.finish(outcome.clone());
    verdict(probe, outcome)
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
    let addr = format!("{}:{}", probe.host, probe.port);
    let stream = TcpStream::connect(addr.as_str())
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
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

    /// However many requests arrive at once, a probe runs once and every
    /// caller gets that run's verdict: requests to the admin port cannot
    /// crowd out the kubelet's own probe (a 503 there restarts the
    /// application) nor hammer the application.
    #[tokio::test]
    async fn concurrent_callers_share_one_run() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        // Every accepted peer's port, in the order the kernel queued them.
        let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((s, peer)) = listener.accept().await {
                let _ = seen_tx.send(peer.port());
                drop(s);
            }
        });
        let probes = AppProbes::new(vec![AppProbe {
            name: "app/livenessProbe".into(),
            host: "127.0.0.1".into(),
            port,
            check: ProbeCheck::Tcp,
            timeout: std::time::Duration::from_secs(5),
        }]);
        let calls = (0..40).map(|_| respond(&probes, &Method::GET, "/app-probe/app/livenessProbe"));
        let answers = futures_util::future::join_all(calls).await;
        assert!(
            answers.iter().all(|(code, _)| *code == StatusCode::OK),
            "{answers:?}"
        );
        // A last connection of our own: the probes' connections were all
        // queued before it, so counting up to it counts them all.
        let sentinel = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let mark = sentinel.local_addr().unwrap().port();
        let mut runs = 0;
        while seen.recv().await.unwrap() != mark {
            runs += 1;
        }
        assert_eq!(runs, 1, "one run for all 40 callers");
    }

    #[test]
    fn only_a_run_finished_while_waiting_is_shared() {
        assert!(!shared(3, 3), "nothing finished since: run again");
        assert!(shared(3, 4));
        assert!(shared(u64::MAX, 0), "the count wraps");
    }
}

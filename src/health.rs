//! `mtls-sidecar health`: probe a running sidecar's admin endpoint.
//!
//! The container image has no shell, curl or wget, so a Docker/Podman
//! `HEALTHCHECK` (or a systemd watchdog script) runs the binary itself. It
//! sends one HTTP/1.1 GET with `Connection: close` over TCP or a Unix
//! socket, bounded by a timeout, prints the status line (and the first body
//! line, which for `/readyz` is the reason) and exits 0 on 200, 1 otherwise,
//! 2 on bad usage.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::addr::Addr;
use crate::cli::HealthArgs;

/// The most of an answer read; a probe needs the status line, not a
/// whole `/metrics` page.
const MAX_ANSWER: u64 = 64 * 1024;

/// Why a probe failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("{addr}: {source}")]
    Io {
        addr: String,
        source: std::io::Error,
    },
    #[error("{addr}: no answer within {timeout:?}")]
    Timeout { addr: String, timeout: Duration },
    #[error("{addr}: not an HTTP answer: {line:?}")]
    Malformed { addr: String, line: String },
}

/// A probe's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The status line as sent, e.g. `HTTP/1.1 503 Service Unavailable`.
    pub status_line: String,
    pub code: u16,
    /// The first line of the body, if any.
    pub first_line: String,
}

/// Probes the admin endpoint; returns 0 when it answers 200.
pub async fn run(args: &HealthArgs) -> u8 {
    let addr = match args.admin.parse::<Addr>() {
        Ok(a) => a,
        Err(e) => return usage(&format!("--admin: {e}")),
    };
    if !args.path.starts_with('/') || args.path.chars().any(|c| c.is_whitespace()) {
        return usage(&format!(
            "--path: {:?} must start with '/' and contain no spaces",
            args.path
        ));
    }
    let timeout = match crate::config::parse_duration("--timeout", &args.timeout) {
        Ok(t) => t,
        Err(e) => return usage(&e),
    };
    match probe(&addr, &args.path, timeout).await {
        Ok(a) => {
            if a.first_line.is_empty() {
                println!("{}", a.status_line);
            } else {
                println!("{}: {}", a.status_line, a.first_line);
            }
            u8::from(a.code != 200)
        }
        Err(e) => {
            eprintln!("unhealthy: {e}");
            1
        }
    }
}

fn usage(msg: &dyn std::fmt::Display) -> u8 {
    eprintln!("error: {msg}");
    2
}

/// Sends `GET path` to `addr` and reads the answer, all within `timeout`.
pub async fn probe(addr: &Addr, path: &str, timeout: Duration) -> Result<Answer, ProbeError> {
    match tokio::time::timeout(timeout, exchange(addr, path, timeout)).await {
        Ok(r) => r,
        Err(_) => Err(ProbeError::Timeout {
            addr: addr.to_string(),
            timeout,
        }),
    }
}

async fn exchange(addr: &Addr, path: &str, timeout: Duration) -> Result<Answer, ProbeError> {
    let name = addr.to_string();
    let mut stream = addr
        .connect(timeout)
        .await
        .map_err(|source| ProbeError::Connect {
            addr: name.clone(),
            source,
        })?;
    let host = match addr {
        Addr::Tcp(a) => a.as_str(),
        Addr::Unix(_) | Addr::Systemd(_) => "localhost",
    };
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: mtls-sidecar-health\r\nConnection: close\r\n\r\n"
    );
    let io = |source| ProbeError::Io {
        addr: name.clone(),
        source,
    };
    stream.write_all(request.as_bytes()).await.map_err(io)?;
    let mut raw = Vec::new();
    (&mut stream)
        .take(MAX_ANSWER)
        .read_to_end(&mut raw)
        .await
        .map_err(io)?;
    parse_answer(&raw).ok_or_else(|| ProbeError::Malformed {
        addr: name.clone(),
        line: String::from_utf8_lossy(raw.split(|b| *b == b'\n').next().unwrap_or_default())
            .trim_end()
            .to_string(),
    })
}

/// Reads the status line and the first body line of an HTTP/1.x answer.
pub fn parse_answer(raw: &[u8]) -> Option<Answer> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status_line = head.lines().next()?.trim_end().to_string();
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next()?;
    if !version.starts_with("HTTP/1.") {
        return None;
    }
    let code = parts.next()?.parse::<u16>().ok()?;
    let first_line = body.lines().next().unwrap_or("").trim_end().to_string();
    Some(Answer {
        status_line,
        code,
        first_line,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_status_and_reason() {
        let a = parse_answer(
            b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\n\r\ndraining: x\n",
        )
        .expect("answer");
        assert_eq!(a.code, 503);
        assert_eq!(a.status_line, "HTTP/1.1 503 Service Unavailable");
        assert_eq!(a.first_line, "draining: x");
    }

    #[test]
    fn refuses_non_http() {
        assert_eq!(parse_answer(b"SSH-2.0-OpenSSH\r\n"), None);
        assert_eq!(parse_answer(b"HTTP/1.1 abc\r\n\r\n"), None);
        assert_eq!(parse_answer(b""), None);
    }

    #[test]
    fn headers_without_body() {
        let a = parse_answer(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").expect("answer");
        assert_eq!((a.code, a.first_line.as_str()), (200, ""));
    }
}

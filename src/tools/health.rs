//! `mtls-sidecar health`: probe a running sidecar's admin endpoint.
//!
//! The container image has no shell, curl or wget, so a Docker/Podman
//! `HEALTHCHECK` (or a systemd watchdog script) runs the binary itself. It
//! sends one HTTP/1.1 GET with `Connection: close` over TCP or a Unix
//! socket, bounded by a timeout and a size cap, and exits 0 on 200, 1
//! otherwise, 2 on bad usage. It prints the status line and the whole body:
//! a one-line body (`/readyz`'s reason) on the status line after a colon,
//! anything longer (`/status`, `/metrics`) on the lines after it, so
//! `kubectl exec POD -c mtls-sidecar -- mtls-sidecar health --path /status`
//! shows the whole document. Control characters in the body are escaped
//! before they reach a terminal.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::cli::HealthArgs;
use crate::proxy::addr::Addr;

/// The most of an answer read: a `/metrics` page of many routes fits.
const MAX_ANSWER: u64 = 8 << 20;

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
    /// The whole body (de-chunked when sent chunked).
    pub body: Vec<u8>,
    /// True when the answer was cut at the size cap.
    pub truncated: bool,
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
            print!("{}", render(&a));
            if a.truncated {
                eprintln!("(the answer was cut at {MAX_ANSWER} bytes)");
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

/// What `health` prints: `STATUS: line` for a one-line body, else the
/// status line and then the whole body, control characters escaped.
pub fn render(a: &Answer) -> String {
    let body = escape_controls(&String::from_utf8_lossy(&a.body));
    let trimmed = body.trim_end_matches('\n');
    if trimmed.is_empty() {
        format!("{}\n", a.status_line)
    } else if !trimmed.contains('\n') {
        format!("{}: {trimmed}\n", a.status_line)
    } else {
        format!("{}\n{trimmed}\n", a.status_line)
    }
}

/// Escapes everything a terminal could act on except newlines and tabs.
fn escape_controls(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' | '\t' => out.push(c),
            '\r' => {}
            c if c.is_control()
                || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}') =>
            {
                out.push_str(&c.escape_unicode().to_string())
            }
            c => out.push(c),
        }
    }
    out
}

/// Reads the status line and the body of an HTTP/1.x answer.
pub fn parse_answer(raw: &[u8]) -> Option<Answer> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n");
    let (head, body) = match split {
        Some(i) => (&raw[..i], &raw[i + 4..]),
        None => (raw, &raw[raw.len()..]),
    };
    let head = String::from_utf8_lossy(head);
    let mut lines = head.lines();
    let status_line = lines.next()?.trim_end().to_string();
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next()?;
    if !version.starts_with("HTTP/1.") {
        return None;
    }
    let code = parts.next()?.parse::<u16>().ok()?;
    let chunked = lines.any(|l| {
        l.split_once(':').is_some_and(|(k, v)| {
            k.trim().eq_ignore_ascii_case("transfer-encoding")
                && v.to_ascii_lowercase().contains("chunked")
        })
    });
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_vec()
    };
    let first_line = String::from_utf8_lossy(&body)
        .lines()
        .next()
        .unwrap_or("")
        .trim_end()
        .to_string();
    Some(Answer {
        status_line,
        code,
        first_line,
        body,
        truncated: raw.len() as u64 >= MAX_ANSWER,
    })
}

/// Decodes a chunked body; stops at the last chunk or at anything malformed.
fn dechunk(mut rest: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size_text = String::from_utf8_lossy(&rest[..eol]);
        let size_hex = size_text.split(';').next().unwrap_or("").trim();
        let Ok(size) = usize::from_str_radix(size_hex, 16) else {
            return out;
        };
        rest = &rest[eol + 2..];
        if size == 0 {
            return out;
        }
        let take = size.min(rest.len());
        out.extend_from_slice(&rest[..take]);
        rest = rest.get(take + 2..).unwrap_or(&[]);
        if take < size {
            return out;
        }
    }
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
    fn prints_the_whole_body() {
        let a = parse_answer(b"HTTP/1.1 200 OK\r\n\r\n{\n  \"ready\": true\n}\n").expect("answer");
        assert_eq!(render(&a), "HTTP/1.1 200 OK\n{\n  \"ready\": true\n}\n");
        let a = parse_answer(b"HTTP/1.1 200 OK\r\n\r\nready\n").expect("answer");
        assert_eq!(render(&a), "HTTP/1.1 200 OK: ready\n");
        let a = parse_answer(b"HTTP/1.1 200 OK\r\n\r\nx\x1b[2Jy\n").expect("answer");
        assert_eq!(render(&a), "HTTP/1.1 200 OK: x\\u{1b}[2Jy\n");
    }

    #[test]
    fn chunked_bodies_are_decoded() {
        let a = parse_answer(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n",
        )
        .expect("answer");
        assert_eq!(a.body, b"abcde");
        let a = parse_answer(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n")
            .expect("answer");
        assert!(a.body.is_empty());
        let a = parse_answer(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nffff\r\nab")
            .expect("answer");
        assert_eq!(a.body, b"ab");
    }

    #[test]
    fn headers_without_body() {
        let a = parse_answer(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").expect("answer");
        assert_eq!((a.code, a.first_line.as_str()), (200, ""));
    }
}

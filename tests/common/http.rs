//! A deliberately small HTTP/1.1 client for the admin endpoint, written
//! here rather than borrowed from the crate so the tests check the server
//! against an independent reading of the protocol: one request per
//! connection (`Connection: close`), answer read to EOF, status line,
//! headers and body parsed, `Content-Length` (or chunked framing) checked.

use std::collections::HashMap;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

use super::DEADLINE;

/// One parsed answer.
#[derive(Debug)]
pub struct Answer {
    pub code: u16,
    /// Header names lower-cased.
    pub headers: HashMap<String, String>,
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

/// Sends `method path` to `addr` (`host:port` or `unix:/path`); panics
/// unless a well-formed answer comes back within [`DEADLINE`].
pub async fn request(addr: &str, method: &str, path: &str) -> Answer {
    try_request(addr, method, path)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Like [`request`], but an endpoint that is gone (or answers nonsense) is
/// an error, not a panic.
pub async fn try_request(addr: &str, method: &str, path: &str) -> Result<Answer, String> {
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    );
    let exchange = async {
        match addr.strip_prefix("unix:") {
            Some(p) => send(UnixStream::connect(p).await?, &req).await,
            None => send(TcpStream::connect(addr).await?, &req).await,
        }
    };
    let raw = tokio::time::timeout(DEADLINE, exchange)
        .await
        .map_err(|_| format!("{method} {path}: no answer from {addr}"))?
        .map_err(|e| format!("{method} {path} to {addr}: {e}"))?;
    parse(&raw, method == "HEAD").map_err(|e| {
        format!(
            "{method} {path}: bad answer ({e}):\n{}",
            String::from_utf8_lossy(&raw)
        )
    })
}

async fn send<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, req: &str) -> std::io::Result<Vec<u8>> {
    s.write_all(req.as_bytes()).await?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await?;
    Ok(raw)
}

fn parse(raw: &[u8], head_request: bool) -> Result<Answer, String> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no end of headers")?;
    let head = std::str::from_utf8(&raw[..split]).map_err(|e| e.to_string())?;
    let body = &raw[split + 4..];
    let mut lines = head.split("\r\n");
    let status = lines.next().ok_or("no status line")?;
    let mut parts = status.splitn(3, ' ');
    if parts.next() != Some("HTTP/1.1") {
        return Err(format!("not HTTP/1.1: {status:?}"));
    }
    let code = parts
        .next()
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| format!("bad status line {status:?}"))?;
    let mut headers = HashMap::new();
    for l in lines {
        let (k, v) = l
            .split_once(':')
            .ok_or_else(|| format!("bad header {l:?}"))?;
        headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
    }
    let body = if head_request {
        if !body.is_empty() {
            return Err("a body in the answer to HEAD".into());
        }
        Vec::new()
    } else if headers.get("transfer-encoding").map(String::as_str) == Some("chunked") {
        dechunk(body)?
    } else {
        if let Some(len) = headers.get("content-length") {
            let len: usize = len.parse().map_err(|_| "bad content-length")?;
            if len != body.len() {
                return Err(format!("content-length {len} but {} bytes", body.len()));
            }
        }
        body.to_vec()
    };
    let body = String::from_utf8(body).map_err(|e| e.to_string())?;
    Ok(Answer {
        code,
        headers,
        body,
    })
}

fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let eol = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("unterminated chunk size")?;
        let size = std::str::from_utf8(&rest[..eol]).map_err(|e| e.to_string())?;
        let size = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| format!("bad chunk size {size:?}"))?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        if rest.len() < size + 2 {
            return Err("short chunk".into());
        }
        out.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

//! `--mark`: `SO_MARK` on every outbound socket of a route, so transparent
//! interception rules can leave the sidecar's own connections alone (they
//! would otherwise divert it back into itself), and the start-up probe that
//! turns a missing `CAP_NET_ADMIN` into exit 2 rather than a failure on the
//! first connection.

use std::io;
use std::net::SocketAddr;

use socket2::SockRef;
use tokio::net::{TcpSocket, TcpStream};

/// Parses a mark: decimal or `0x` hexadecimal, 1 to 2^32-1 (0 is no mark,
/// which rules could not tell from other traffic).
pub fn parse_mark(s: &str) -> Result<u32, String> {
    let n = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16),
        None => s.parse::<u32>(),
    }
    .map_err(|_| format!("{s:?} is not a mark (1 to 4294967295, decimal or 0x hex)"))?;
    if n == 0 {
        return Err("0 is not a mark: rules could not tell it from unmarked traffic".into());
    }
    Ok(n)
}

/// A TCP socket for `addr`, with `mark` set when there is one.
pub(crate) fn socket_for(addr: SocketAddr, mark: Option<u32>) -> io::Result<TcpSocket> {
    let sock = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    if let Some(m) = mark {
        SockRef::from(&sock).set_mark(m)?;
    }
    Ok(sock)
}

/// Connects to `host:port` (a name is resolved first; each address is tried
/// in turn) with `SO_MARK` set to `mark` before each attempt: the
/// `--mark` variant of [`super::addr::Addr::connect`]'s TCP case.
pub async fn connect_marked(host_port: &str, mark: u32) -> io::Result<TcpStream> {
    let mut last = None;
    for addr in tokio::net::lookup_host(host_port).await? {
        let sock = socket_for(addr, Some(mark))?;
        match sock.connect(addr).await {
            Ok(s) => {
                s.set_nodelay(true)?;
                return Ok(s);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("{host_port} resolved to no address"),
        )
    }))
}

/// `--mark` cannot be honoured.
#[derive(Debug, thiserror::Error)]
pub enum MarkError {
    #[error(
        "--mark {mark:#x}: setting SO_MARK needs CAP_NET_ADMIN (or CAP_NET_RAW on Linux 5.17+), \
         which this process lacks ({source}); grant it (Kubernetes: securityContext.capabilities.add: \
         [NET_ADMIN]) or drop --mark and skip the sidecar's UID in the rules instead"
    )]
    NoCapability { mark: u32, source: io::Error },
    #[error("--mark {mark:#x}: cannot set SO_MARK on a probe socket: {source}")]
    Other { mark: u32, source: io::Error },
}

/// Sets `mark` on a throw-away socket, so a missing capability is found at
/// start-up rather than on the first connection.
pub fn probe_mark(mark: u32) -> Result<(), MarkError> {
    let probe = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
        .map_err(|source| MarkError::Other { mark, source })?;
    probe.set_mark(mark).map_err(|source| {
        if source.kind() == io::ErrorKind::PermissionDenied {
            MarkError::NoCapability { mark, source }
        } else {
            MarkError::Other { mark, source }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_parse_in_decimal_and_hex() {
        assert_eq!(parse_mark("1"), Ok(1));
        assert_eq!(parse_mark("0x6d74"), Ok(0x6d74));
        assert_eq!(parse_mark("4294967295"), Ok(u32::MAX));
        for bad in ["0", "0x0", "-1", "4294967296", "0x", "x1", ""] {
            assert!(parse_mark(bad).is_err(), "{bad}");
        }
    }
}

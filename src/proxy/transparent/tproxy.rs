//! `--tproxy`: the capability probe at start-up and the listener with
//! `IP_TRANSPARENT` set, which the kernel hands connections addressed to
//! other hosts (no NAT, so the local address is the original destination).

use std::io;
use std::net::SocketAddr;

/// `--tproxy` cannot be honoured.
#[derive(Debug, thiserror::Error)]
pub enum TproxyError {
    #[error(
        "--tproxy: setting IP_TRANSPARENT needs CAP_NET_ADMIN (or CAP_NET_RAW), which this \
         process lacks ({0}); grant it (Kubernetes: securityContext.capabilities.add: \
         [NET_ADMIN]) or use the REDIRECT rules without --tproxy"
    )]
    NoCapability(io::Error),
    #[error("--tproxy: cannot set IP_TRANSPARENT on a probe socket: {0}")]
    Other(io::Error),
}

impl From<io::Error> for TproxyError {
    fn from(e: io::Error) -> TproxyError {
        if e.kind() == io::ErrorKind::PermissionDenied {
            TproxyError::NoCapability(e)
        } else {
            TproxyError::Other(e)
        }
    }
}

/// Sets `IP_TRANSPARENT` on a throw-away socket, so a missing capability is
/// found at start-up (exit 2) rather than as a bind error.
pub fn probe_tproxy() -> Result<(), TproxyError> {
    let probe = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
        .map_err(TproxyError::Other)?;
    probe.set_ip_transparent_v4(true)?;
    Ok(())
}

/// Binds a TPROXY listener on `host_port` (each resolved address in turn):
/// `IP_TRANSPARENT` (`IPV6_TRANSPARENT` for IPv6, which covers IPv4-mapped
/// connections too) set before bind, so the kernel hands it connections
/// addressed to other hosts; non-blocking, like [`crate::proxy::addr::Addr::bind_std`].
pub fn bind_tproxy(host_port: &str) -> io::Result<crate::proxy::addr::StdListener> {
    use socket2::{Domain, Socket, Type};
    let mut last = None;
    for addr in std::net::ToSocketAddrs::to_socket_addrs(host_port)? {
        let bound = (|| {
            let sock = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
            match addr {
                SocketAddr::V4(_) => sock.set_ip_transparent_v4(true)?,
                SocketAddr::V6(_) => sock.set_ip_transparent_v6(true)?,
            }
            // As std's TcpListener::bind does on Unix.
            sock.set_reuse_address(true)?;
            sock.bind(&addr.into())?;
            sock.listen(crate::proxy::addr::BACKLOG)?;
            sock.set_nonblocking(true)?;
            Ok::<_, io::Error>(std::net::TcpListener::from(sock))
        })();
        match bound {
            Ok(l) => return Ok(crate::proxy::addr::StdListener::Tcp(l)),
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

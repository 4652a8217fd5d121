//! The sidecar's own outbound connections from transparent routes: each is
//! bound to a port registered before it connects, so a diverted connection
//! from one of those ports is recognised as the sidecar talking to itself
//! (a redirect loop) rather than forwarded again.

use std::collections::BTreeSet;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::net::{TcpSocket, TcpStream};

/// Local ports of the outbound sockets transparent routes dialed and still
/// hold. Each is bound (port 0, the wildcard address) before it connects,
/// so its port is known and reserved before any SYN leaves: a diverted
/// connection whose source port is in here is the sidecar talking to itself.
fn outbound() -> MutexGuard<'static, BTreeSet<u16>> {
    static OUTBOUND: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    // Plain data; a panic elsewhere cannot leave it inconsistent.
    OUTBOUND.lock().unwrap_or_else(|e| e.into_inner())
}

pub(super) fn is_own_outbound(port: u16) -> bool {
    outbound().contains(&port)
}

/// One registered outbound port; unregistered when dropped.
#[derive(Debug)]
pub struct Outbound(u16);

impl Drop for Outbound {
    fn drop(&mut self) {
        outbound().remove(&self.0);
    }
}

/// Registers `port` as one of the sidecar's own until the guard drops.
pub(super) fn register(port: u16) -> Outbound {
    outbound().insert(port);
    Outbound(port)
}

/// Dials `addr` for a transparent route: bound to an ephemeral port that is
/// registered as ours first (see [`super::resolve`]'s loop check), `SO_MARK` set
/// when `mark` is, `TCP_NODELAY`, within `timeout`. The returned guard
/// keeps the registration for as long as the caller holds it.
pub async fn dial(
    addr: SocketAddr,
    mark: Option<u32>,
    timeout: Duration,
) -> io::Result<(TcpStream, Outbound)> {
    let sock = crate::proxy::mark::socket_for(addr, mark)?;
    let any: IpAddr = match addr {
        SocketAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        SocketAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    };
    sock.bind(SocketAddr::new(any, 0))?;
    let port = sock.local_addr()?.port();
    let guard = register(port);
    let stream = connect_within(sock, addr, timeout).await?;
    Ok((stream, guard))
}

async fn connect_within(
    sock: TcpSocket,
    addr: SocketAddr,
    timeout: Duration,
) -> io::Result<TcpStream> {
    let stream = match tokio::time::timeout(timeout, sock.connect(addr)).await {
        Ok(r) => r?,
        Err(_) => {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("connecting to {addr} timed out after {timeout:?}"),
            ))
        }
    };
    stream.set_nodelay(true)?;
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A port is ours exactly while its guard lives: once the connection
    /// is gone, the kernel may hand the port to an application whose
    /// diverted connection must not be taken for a loop.
    #[test]
    fn a_port_is_ours_only_while_its_guard_lives() {
        // A port the kernel never hands out as an ephemeral one, so no other
        // test's dial can hold it.
        const PORT: u16 = 7;
        assert!(!is_own_outbound(PORT));
        let guard = register(PORT);
        assert!(is_own_outbound(PORT));
        drop(guard);
        assert!(!is_own_outbound(PORT));
    }
}

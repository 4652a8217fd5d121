//! Where a diverted connection was going and which rule applies: the
//! original destination read from the socket (`SO_ORIGINAL_DST` after a
//! REDIRECT, the local address under TPROXY), the loop guard, the
//! not-diverted refusal, then the first matching rule.

use std::io;
use std::net::SocketAddr;

use socket2::SockRef;
use tokio::net::TcpStream;

use super::outbound::is_own_outbound;
use super::rules::{unmap_sock, Destinations};

/// Why a diverted connection is refused (close reason `no_destination`).
#[derive(Debug, thiserror::Error)]
pub enum NoDestination {
    #[error("cannot read the original destination (was the connection redirected?): {0}")]
    Unknown(io::Error),
    #[error("not redirected: the original destination {0} is this listener itself")]
    NotRedirected(SocketAddr),
    #[error("no destination rule matches {0}")]
    NoRule(SocketAddr),
    #[error(
        "redirect loop: this is the sidecar's own connection to {0}, redirected back to it; \
         the rules must skip the sidecar's --mark (or its UID)"
    )]
    Loop(SocketAddr),
    #[error("not a TCP connection")]
    NotTcp,
}

impl NoDestination {
    /// The original destination, when it could be read.
    pub fn original(&self) -> Option<SocketAddr> {
        match self {
            NoDestination::NotRedirected(a) | NoDestination::NoRule(a) | NoDestination::Loop(a) => {
                Some(*a)
            }
            NoDestination::Unknown(_) | NoDestination::NotTcp => None,
        }
    }
}

/// Reads the original destination of a redirected TCP connection: the IPv4
/// call for IPv4 sockets and IPv4-mapped IPv6 ones, the IPv6 call otherwise.
pub fn original_dst(tcp: &TcpStream) -> io::Result<SocketAddr> {
    let local = tcp.local_addr()?;
    let sock = SockRef::from(tcp);
    let v4 = match local {
        SocketAddr::V4(_) => true,
        SocketAddr::V6(a) => a.ip().to_ipv4_mapped().is_some(),
    };
    let raw = if v4 {
        sock.original_dst_v4()?
    } else {
        sock.original_dst_v6()?
    };
    raw.as_socket().map(unmap_sock).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "the original destination is not an IP address",
        )
    })
}

/// Decides a diverted connection: the index of the rule that applies, the
/// original destination and the address to dial (`original_ip:tls_port`),
/// or why it is refused.
pub fn resolve(
    rules: &Destinations,
    original: io::Result<SocketAddr>,
    local: io::Result<SocketAddr>,
    peer: io::Result<SocketAddr>,
) -> Result<(usize, SocketAddr, SocketAddr), NoDestination> {
    let original = original.map_err(NoDestination::Unknown)?;
    // Without a NAT entry the kernel reports the address as dialed, which
    // for a direct connection is this listener.
    let direct = local.map(unmap_sock).ok() == Some(original);
    decide(rules, original, peer, direct)
}

/// [`resolve`] for a route diverted by TPROXY (`--tproxy`): no NAT, so the
/// accepted socket's local address is the original destination. One made
/// straight to `listener` (its own address, or its port on any address
/// when it is bound to the wildcard) was not diverted and is refused.
pub fn resolve_tproxy(
    rules: &Destinations,
    local: io::Result<SocketAddr>,
    listener: SocketAddr,
    peer: io::Result<SocketAddr>,
) -> Result<(usize, SocketAddr, SocketAddr), NoDestination> {
    let original = local.map(unmap_sock).map_err(NoDestination::Unknown)?;
    let listener = unmap_sock(listener);
    let direct = original.port() == listener.port()
        && (listener.ip().is_unspecified() || original.ip() == listener.ip());
    decide(rules, original, peer, direct)
}

/// The part of [`resolve`] both kinds of diversion share: the loop guard,
/// the not-diverted refusal (`direct`), then the first matching rule.
fn decide(
    rules: &Destinations,
    original: SocketAddr,
    peer: io::Result<SocketAddr>,
    direct: bool,
) -> Result<(usize, SocketAddr, SocketAddr), NoDestination> {
    if let Ok(peer) = peer {
        if is_own_outbound(peer.port()) {
            return Err(NoDestination::Loop(original));
        }
    }
    if direct {
        return Err(NoDestination::NotRedirected(original));
    }
    let (i, rule) = rules
        .lookup(original)
        .ok_or(NoDestination::NoRule(original))?;
    Ok((i, original, SocketAddr::new(original.ip(), rule.tls_port)))
}

#[cfg(test)]
mod tests {
    use super::super::outbound::register;
    use super::super::rules::tests::{sa, spec};
    use super::*;

    #[test]
    fn resolve_refuses_what_was_not_redirected_or_matches_nothing() {
        let d = Destinations::validate(
            "",
            &[
                spec("0.0.0.0/0:15001", "a.svc"),
                spec("10.0.0.0/8:2100", "a.svc"),
            ],
        )
        .unwrap();
        let local = || Ok(sa("[::ffff:127.0.0.1]:15001"));
        let peer = || Ok(sa("127.0.0.1:40000"));
        let (i, orig, dial) = resolve(&d, Ok(sa("10.1.2.3:2100")), local(), peer()).unwrap();
        assert_eq!(
            (i, orig, dial),
            (1, sa("10.1.2.3:2100"), sa("10.1.2.3:2100"))
        );
        // Direct to the listener: matched by rule 0, refused all the same.
        assert!(matches!(
            resolve(&d, Ok(sa("127.0.0.1:15001")), local(), peer()),
            Err(NoDestination::NotRedirected(_))
        ));
        assert!(matches!(
            resolve(&d, Ok(sa("10.1.2.3:2101")), local(), peer()),
            Err(NoDestination::NoRule(_))
        ));
        assert!(matches!(
            resolve(
                &d,
                Err(io::Error::from_raw_os_error(libc::ENOENT)),
                local(),
                peer()
            ),
            Err(NoDestination::Unknown(_))
        ));
    }

    /// Under TPROXY the local address is the original destination; only a
    /// connection to the listener's own address counts as not diverted.
    #[test]
    fn resolve_tproxy_reads_the_local_address() {
        let d = Destinations::validate(
            "",
            &[
                spec("0.0.0.0/0:15001", "a.svc"),
                spec("10.0.0.0/8:2100", "a.svc"),
            ],
        )
        .unwrap();
        let lo = sa("127.0.0.1:15001");
        let any = sa("[::]:15001");
        let peer = || Ok(sa("127.0.0.1:40000"));
        let r = |local: &str, listener| resolve_tproxy(&d, Ok(sa(local)), listener, peer());
        assert_eq!(
            r("[::ffff:10.1.2.3]:2100", any).unwrap(),
            (1, sa("10.1.2.3:2100"), sa("10.1.2.3:2100"))
        );
        for (local, listener) in [
            ("127.0.0.1:15001", lo),
            ("[::ffff:127.0.0.1]:15001", lo),
            ("[::ffff:10.0.0.5]:15001", any),
            ("10.0.0.5:15001", sa("0.0.0.0:15001")),
        ] {
            assert!(
                matches!(r(local, listener), Err(NoDestination::NotRedirected(_))),
                "{local} on {listener}"
            );
        }
        // The loop guard holds under TPROXY too.
        let _ours = register(40001);
        assert!(matches!(
            resolve_tproxy(&d, Ok(sa("10.1.2.3:2100")), lo, Ok(sa("127.0.0.1:40001"))),
            Err(NoDestination::Loop(_))
        ));
        // Another host's port 15001, diverted to a listener on 127.0.0.1.
        assert_eq!(r("10.9.9.9:15001", lo).unwrap().0, 0);
        // Same address, another port: diverted.
        assert_eq!(
            r("127.0.0.1:15002", lo).unwrap_err().original(),
            Some(sa("127.0.0.1:15002"))
        );
        assert!(matches!(
            r("10.1.2.3:2101", lo),
            Err(NoDestination::NoRule(_))
        ));
        assert!(matches!(
            resolve_tproxy(
                &d,
                Err(io::Error::from_raw_os_error(libc::ENOTCONN)),
                lo,
                peer()
            ),
            Err(NoDestination::Unknown(_))
        ));
    }

    /// The refusal line's original_dst: there whenever the kernel said.
    #[test]
    fn refusals_carry_the_original_destination_when_known() {
        let a = sa("10.1.2.3:2100");
        for why in [
            NoDestination::NoRule(a),
            NoDestination::NotRedirected(a),
            NoDestination::Loop(a),
        ] {
            assert_eq!(why.original(), Some(a), "{why}");
        }
        assert_eq!(NoDestination::NotTcp.original(), None);
        let unknown = NoDestination::Unknown(io::Error::from_raw_os_error(libc::ENOENT));
        assert_eq!(unknown.original(), None);
    }
}

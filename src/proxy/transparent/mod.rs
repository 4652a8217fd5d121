//! Transparent interception: a `client` route that receives the
//! application's own outbound connections, diverted to it by an nftables or
//! iptables `REDIRECT` (or `TPROXY`, `--tproxy`), so the application keeps
//! dialing `replica-N:2100` and needs no per-replica configuration.
//!
//! For each diverted connection this module reads where the application
//! meant to go (`SO_ORIGINAL_DST`, or `IP6T_SO_ORIGINAL_DST` for IPv6,
//! through socket2; under TPROXY there is no NAT and the accepted socket's
//! local address is the original destination), looks that up in the route's destination rules (first
//! match wins) and says which rule applies: the sidecar then dials
//! `original_ip:tls_port` and verifies the server against that rule's
//! expected SANs exactly as a `client` route does. A connection no rule
//! matches, one that was not redirected at all, and one that is the
//! sidecar's own outbound connection looping back (the rules forgot to skip
//! `--mark`) are refused: never forwarded, in plaintext or otherwise.
//!
//! The rules themselves (parsing, validation, lookup) are in [`rules`];
//! this module is the socket side; `--mark`, which lets the rules leave
//! the sidecar's own connections alone, is in [`super::mark`].

mod rules;

use std::collections::BTreeSet;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use rustls_pki_types::ServerName;
use socket2::SockRef;
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::TlsConnector;

use crate::credentials::CredentialStore;
use crate::identity::SanPolicy;
use crate::logsafe::{RateLimiter, REFUSAL_BURST, REFUSAL_WINDOW};
use crate::tls::verify::ServerCertPolicy;

use rules::unmap_sock;
pub use rules::{
    unmap, Cidr, Destination, DestinationSpec, Destinations, Match, RuleError, MAX_DESTINATIONS,
};

/// What a transparent route shows where other routes show their target.
pub const TARGET_LABEL: &str = "original-destination";

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

// ---- The sidecar's own outbound sockets, to recognise a loop. ----

/// Local ports of the outbound sockets transparent routes dialed and still
/// hold. Each is bound (port 0, the wildcard address) before it connects,
/// so its port is known and reserved before any SYN leaves: a diverted
/// connection whose source port is in here is the sidecar talking to itself.
fn outbound() -> MutexGuard<'static, BTreeSet<u16>> {
    static OUTBOUND: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    // Plain data; a panic elsewhere cannot leave it inconsistent.
    OUTBOUND.lock().unwrap_or_else(|e| e.into_inner())
}

fn is_own_outbound(port: u16) -> bool {
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

/// Dials `addr` for a transparent route: bound to an ephemeral port that is
/// registered as ours first (see [`resolve`]'s loop check), `SO_MARK` set
/// when `mark` is, `TCP_NODELAY`, within `timeout`. The returned guard
/// keeps the registration for as long as the caller holds it.
pub async fn dial(
    addr: SocketAddr,
    mark: Option<u32>,
    timeout: Duration,
) -> io::Result<(TcpStream, Outbound)> {
    let sock = super::mark::socket_for(addr, mark)?;
    let any: IpAddr = match addr {
        SocketAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        SocketAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    };
    sock.bind(SocketAddr::new(any, 0))?;
    let port = sock.local_addr()?.port();
    outbound().insert(port);
    let guard = Outbound(port);
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

// ---- --tproxy ----

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

// ---- Per-rule TLS and the refusal log ----

/// One rule's client TLS: its own verifier (the rule's expected SANs).
pub struct RuleTls {
    pub connector: TlsConnector,
    pub policy: Arc<ServerCertPolicy>,
    pub server_name: Option<ServerName<'static>>,
}

/// A transparent route's TLS side: the rules and one client config each.
pub struct Transparent {
    pub rules: Arc<Destinations>,
    pub tls: Vec<RuleTls>,
    pub log: Arc<NoDestinationLog>,
    /// `--tproxy`: the listener's bound address (set once it is bound);
    /// `None`: diverted by REDIRECT, read `SO_ORIGINAL_DST`.
    pub tproxy: Option<SocketAddr>,
}

impl Transparent {
    /// Builds a client config per rule from the route's shared options.
    pub fn build(
        route: &str,
        rules: Arc<Destinations>,
        store: &Arc<CredentialStore>,
        min: crate::tls::TlsVersion,
        peer: &crate::tls::PeerOptions,
    ) -> Result<Transparent, rustls::Error> {
        let mut tls = Vec::with_capacity(rules.rules.len());
        for r in &rules.rules {
            let (config, policy) = crate::tls::client_config(
                store,
                SanPolicy::OneOf(r.expect_san.clone()),
                min,
                peer,
            )?;
            let server_name =
                match &r.server_name {
                    // Checked when the config was validated.
                    Some(n) => Some(ServerName::try_from(n.clone()).map_err(|_| {
                        rustls::Error::General(format!("invalid server name {n:?}"))
                    })?),
                    None => None,
                };
            tls.push(RuleTls {
                connector: TlsConnector::from(config),
                policy,
                server_name,
            });
        }
        Ok(Transparent {
            rules,
            tls,
            log: NoDestinationLog::new(route),
            tproxy: None,
        })
    }

    /// Decides one accepted connection: by `SO_ORIGINAL_DST` after a
    /// REDIRECT, by its local address under `--tproxy` ([`resolve`],
    /// [`resolve_tproxy`]).
    pub fn resolve(
        &self,
        tcp: &TcpStream,
    ) -> Result<(usize, SocketAddr, SocketAddr), NoDestination> {
        match self.tproxy {
            Some(listener) => {
                resolve_tproxy(&self.rules, tcp.local_addr(), listener, tcp.peer_addr())
            }
            None => resolve(
                &self.rules,
                original_dst(tcp),
                tcp.local_addr(),
                tcp.peer_addr(),
            ),
        }
    }

    /// The SNI for a connection to `dial` under rule `i`: the rule's
    /// `server_name`, else the IP address (rustls then sends no SNI).
    pub fn server_name(&self, i: usize, dial: SocketAddr) -> ServerName<'static> {
        self.tls
            .get(i)
            .and_then(|t| t.server_name.clone())
            .unwrap_or_else(|| ServerName::IpAddress(dial.ip().into()))
    }

    /// Re-checks a live connection's chain. SAN patterns and pins never
    /// change at run time, so the rule whose SANs the peer matches judges
    /// it exactly as the rule that admitted it did; only trust, revocation
    /// and expiry can have changed.
    pub fn reverify(
        &self,
        peer: Option<&crate::identity::CertInfo>,
        chain: &[rustls_pki_types::CertificateDer<'static>],
        now: std::time::SystemTime,
    ) -> Result<(), rustls::Error> {
        let rule = peer.and_then(|c| {
            self.rules
                .rules
                .iter()
                .position(|r| r.expect_san.iter().any(|p| p.matches(c)))
        });
        match rule.and_then(|i| self.tls.get(i)) {
            Some(t) => t.policy.reverify(chain, now),
            None => Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName,
            )),
        }
    }
}

/// The `no_destination` WARN lines of one route, rate-limited like the
/// handshake refusals ([`REFUSAL_BURST`] per [`REFUSAL_WINDOW`], then a
/// "suppressed N" summary); the counter still counts every one.
#[derive(Debug)]
pub struct NoDestinationLog {
    route: String,
    limiter: RateLimiter<&'static str>,
}

const KEY: &str = "no_destination";

impl NoDestinationLog {
    /// The log of route `route` (its flush task starts with the route's
    /// serving, [`NoDestinationLog::spawn_flusher`]: binding has no runtime).
    pub fn new(route: &str) -> Arc<NoDestinationLog> {
        Arc::new(NoDestinationLog {
            route: route.to_string(),
            limiter: RateLimiter::new([KEY], REFUSAL_BURST, REFUSAL_WINDOW),
        })
    }

    /// Starts the task that writes due summaries; ends when the log is dropped.
    pub fn spawn_flusher(self: &Arc<Self>) {
        let weak: Weak<NoDestinationLog> = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(log) = weak.upgrade() else { return };
                for (_, n) in log.limiter.flush(Instant::now()) {
                    log.summary(n);
                }
            }
        });
    }

    /// Logs one refusal, unless the window's burst is spent.
    pub fn refused(&self, peer: &str, why: &NoDestination) {
        let a = self.limiter.admit(KEY, Instant::now());
        if let Some(n) = a.summary {
            self.summary(n);
        }
        if !a.log {
            return;
        }
        let error = crate::logsafe::clean_display(why);
        match why.original() {
            Some(original) => tracing::warn!(
                route = %self.route, peer = %peer, original_dst = %original, reason = KEY,
                error = %error, "connection refused: no destination"
            ),
            None => tracing::warn!(
                route = %self.route, peer = %peer, reason = KEY, error = %error,
                "connection refused: no destination"
            ),
        }
    }

    fn summary(&self, suppressed: u64) {
        tracing::warn!(
            route = %self.route, reason = KEY, suppressed,
            window = %humantime::format_duration(REFUSAL_WINDOW),
            "no_destination refusals suppressed"
        );
    }
}

impl Drop for NoDestinationLog {
    fn drop(&mut self) {
        for (_, n) in self.limiter.drain() {
            self.summary(n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rules::tests::{sa, spec};

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
        outbound().insert(40001);
        let _ours = Outbound(40001);
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

//! Transparent interception: a `client` route that receives the
//! application's own outbound connections, diverted to it by an nftables or
//! iptables `REDIRECT`, so the application keeps dialing `replica-N:2100`
//! and needs no per-replica configuration.
//!
//! For each diverted connection this module reads where the application
//! meant to go (`SO_ORIGINAL_DST`, or `IP6T_SO_ORIGINAL_DST` for IPv6,
//! through socket2), looks that up in the route's destination rules (first
//! match wins) and says which rule applies: the sidecar then dials
//! `original_ip:tls_port` and verifies the server against that rule's
//! expected SANs exactly as a `client` route does. A connection no rule
//! matches, one that was not redirected at all, and one that is the
//! sidecar's own outbound connection looping back (the rules forgot to skip
//! `--mark`) are refused: never forwarded, in plaintext or otherwise.
//!
//! It also holds `--mark`: `SO_MARK` on every outbound socket, so the rules
//! can leave the sidecar's own connections alone, and the start-up probe
//! that turns a missing `CAP_NET_ADMIN` into exit 2.

use std::collections::BTreeSet;
use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use rustls_pki_types::ServerName;
use serde::Deserialize;
use socket2::SockRef;
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::TlsConnector;

use crate::credentials::CredentialStore;
use crate::identity::{SanPattern, SanPolicy};
use crate::logsafe::{RateLimiter, REFUSAL_BURST, REFUSAL_WINDOW};
use crate::tls::verify::ServerCertPolicy;

/// What a transparent route shows where other routes show their target.
pub const TARGET_LABEL: &str = "original-destination";

/// At most this many destination rules per route (each has its own TLS
/// config; lookups scan them in order).
pub const MAX_DESTINATIONS: usize = 1024;

/// An IPv4 or IPv6 network: an address and a prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// True when `ip` lies inside (IPv4-mapped IPv6 addresses count as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, unmap(ip)) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }

    /// True when every address of `other` lies inside `self`.
    pub fn covers(&self, other: &Cidr) -> bool {
        self.addr.is_ipv4() == other.addr.is_ipv4()
            && self.prefix <= other.prefix
            && self.contains(other.addr)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl std::str::FromStr for Cidr {
    type Err = String;

    /// `10.0.0.0/8`, `fd00::/8`, or a bare address (`/32`, `/128`). Host
    /// bits must be zero, so a typo cannot silently widen a rule.
    fn from_str(s: &str) -> Result<Cidr, String> {
        let (ip, prefix) = match s.split_once('/') {
            Some((ip, p)) => (ip, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = ip
            .parse()
            .map_err(|_| format!("{ip:?} is not an IP address"))?;
        let max: u8 = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("{p:?} is not a prefix length (0 to {max})"))?,
        };
        let cidr = Cidr { addr, prefix };
        let base = Cidr { addr, prefix: max };
        if !cidr.contains(addr) || network_of(&cidr) != base.addr {
            return Err(format!(
                "{s:?} has host bits set (the network is {}/{prefix})",
                network_of(&cidr)
            ));
        }
        Ok(cidr)
    }
}

/// The network address of `c` (host bits cleared).
fn network_of(c: &Cidr) -> IpAddr {
    match c.addr {
        IpAddr::V4(a) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(c.prefix)).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask))
        }
        IpAddr::V6(a) => {
            let mask = u128::MAX
                .checked_shl(128 - u32::from(c.prefix))
                .unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask))
        }
    }
}

/// An IPv4-mapped IPv6 address (`::ffff:10.0.0.1`) as the IPv4 address it is.
pub fn unmap(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

fn unmap_sock(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(unmap(a.ip()), a.port())
}

/// `CIDR:PORT`: `10.0.0.0/8:2100` or `[fd00::/8]:2100`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Match {
    pub net: Cidr,
    pub port: u16,
}

impl std::str::FromStr for Match {
    type Err = String;

    fn from_str(s: &str) -> Result<Match, String> {
        let (net, port) = if let Some(rest) = s.strip_prefix('[') {
            let (net, port) = rest
                .split_once("]:")
                .ok_or_else(|| format!("{s:?}: expected [IPv6/PREFIX]:PORT"))?;
            if !net.contains(':') {
                return Err(format!("{s:?}: brackets are for IPv6 networks only"));
            }
            (net, port)
        } else {
            let (net, port) = s
                .rsplit_once(':')
                .ok_or_else(|| format!("{s:?}: expected CIDR:PORT"))?;
            if net.contains(':') {
                return Err(format!(
                    "{s:?}: write an IPv6 network in brackets, like [fd00::/8]:2100"
                ));
            }
            (net, port)
        };
        let port = port
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("{s:?}: {port:?} is not a port (1 to 65535)"))?;
        let net = net.parse::<Cidr>().map_err(|e| format!("{s:?}: {e}"))?;
        Ok(Match { net, port })
    }
}

impl fmt::Display for Match {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.net.addr {
            IpAddr::V4(_) => write!(f, "{}:{}", self.net, self.port),
            IpAddr::V6(_) => write!(f, "[{}]:{}", self.net, self.port),
        }
    }
}

/// One `[[route.destination]]` table as written by a user.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DestinationSpec {
    /// `CIDR:PORT` of the original destination.
    #[serde(rename = "match")]
    pub matches: String,
    /// Where that host's server sidecar listens (default: the same port).
    pub tls_port: Option<u16>,
    /// The SANs the server sidecar must present (at least one).
    #[serde(default)]
    pub expect_san: Vec<String>,
    /// SNI to send (default: none; the destination is an IP address).
    pub server_name: Option<String>,
}

/// A validated destination rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    pub matches: Match,
    pub tls_port: u16,
    pub expect_san: Vec<SanPattern>,
    pub server_name: Option<String>,
}

/// A transparent route's rules, in order; the first match wins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Destinations {
    pub rules: Vec<Destination>,
}

/// Why a destination rule was refused: `field` names it, `why` says how.
#[derive(Debug, thiserror::Error)]
#[error("{field}: {why}")]
pub struct RuleError {
    pub field: String,
    pub why: String,
}

impl Destinations {
    /// Validates `specs`; `prefix` qualifies the field names in errors
    /// (`route "out": destination[2].match`). Besides malformed values it
    /// refuses a rule that can never match because an earlier rule covers
    /// all of it (same port, a network containing its network): with first
    /// match wins, that rule is dead and its SANs would never apply.
    pub fn validate(prefix: &str, specs: &[DestinationSpec]) -> Result<Destinations, RuleError> {
        let err = |i: usize, f: &str, why: String| RuleError {
            field: format!("{prefix}destination[{i}].{f}"),
            why,
        };
        if specs.is_empty() {
            return Err(RuleError {
                field: format!("{prefix}destination"),
                why: "a transparent route needs at least one [[route.destination]] rule \
                      (or --destination on the command line)"
                    .into(),
            });
        }
        if specs.len() > MAX_DESTINATIONS {
            return Err(RuleError {
                field: format!("{prefix}destination"),
                why: format!("at most {MAX_DESTINATIONS} rules"),
            });
        }
        let mut rules: Vec<Destination> = Vec::with_capacity(specs.len());
        for (i, s) in specs.iter().enumerate() {
            let matches: Match = s.matches.parse().map_err(|e| err(i, "match", e))?;
            let tls_port = match s.tls_port {
                Some(0) => return Err(err(i, "tls_port", "must be 1 to 65535".into())),
                Some(p) => p,
                None => matches.port,
            };
            if s.expect_san.is_empty() {
                return Err(err(
                    i,
                    "expect_san",
                    "required: name the server identities this destination must present".into(),
                ));
            }
            let expect_san = s
                .expect_san
                .iter()
                .map(|p| p.parse::<SanPattern>())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| err(i, "expect_san", e.to_string()))?;
            if let Some(n) = &s.server_name {
                ServerName::try_from(n.clone())
                    .map_err(|_| err(i, "server_name", format!("{n:?} is not a server name")))?;
            }
            if let Some((j, earlier)) = rules
                .iter()
                .enumerate()
                .find(|(_, r)| r.matches.port == matches.port && r.matches.net.covers(&matches.net))
            {
                return Err(err(
                    i,
                    "match",
                    format!(
                        "{} can never match: rule {j} ({}) comes first and covers it \
                         (first match wins; put the narrower rule first)",
                        matches, earlier.matches
                    ),
                ));
            }
            rules.push(Destination {
                matches,
                tls_port,
                expect_san,
                server_name: s.server_name.clone(),
            });
        }
        Ok(Destinations { rules })
    }

    /// The first rule matching `dst`, with its index.
    pub fn lookup(&self, dst: SocketAddr) -> Option<(usize, &Destination)> {
        let dst = unmap_sock(dst);
        self.rules
            .iter()
            .enumerate()
            .find(|(_, r)| r.matches.port == dst.port() && r.matches.net.contains(dst.ip()))
    }

    /// Every expected SAN of every rule (for status and logs).
    pub fn all_sans(&self) -> Vec<SanPattern> {
        let mut all: Vec<SanPattern> = Vec::new();
        for p in self.rules.iter().flat_map(|r| &r.expect_san) {
            if !all.contains(p) {
                all.push(p.clone());
            }
        }
        all
    }
}

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
    if let Ok(peer) = peer {
        if is_own_outbound(peer.port()) {
            return Err(NoDestination::Loop(original));
        }
    }
    // Without a NAT entry the kernel reports the address as dialed, which
    // for a direct connection is this listener.
    if local.map(unmap_sock).ok() == Some(original) {
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
    let sock = socket_for(addr, mark)?;
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

fn socket_for(addr: SocketAddr, mark: Option<u32>) -> io::Result<TcpSocket> {
    let sock = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    if let Some(m) = mark {
        SockRef::from(&sock).set_mark(m)?;
    }
    Ok(sock)
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

/// Connects to `host:port` (a name is resolved first; each address is tried
/// in turn) with `SO_MARK` set to `mark` before each attempt: the
/// `--mark` variant of [`crate::addr::Addr::connect`]'s TCP case.
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

// ---- --mark ----

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
}

impl Transparent {
    /// Builds a client config per rule from the route's shared options.
    pub fn build(
        route: &str,
        rules: Arc<Destinations>,
        store: &Arc<CredentialStore>,
        min: crate::config::TlsVersion,
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
        })
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
        if a.log {
            tracing::warn!(
                route = %self.route, peer = %peer, reason = KEY,
                error = %crate::logsafe::clean_display(why),
                "connection refused: no destination"
            );
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

    fn spec(m: &str, san: &str) -> DestinationSpec {
        DestinationSpec {
            matches: m.into(),
            expect_san: vec![san.into()],
            ..Default::default()
        }
    }

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn matches_parse_for_both_families() {
        let m: Match = "10.0.0.0/8:2100".parse().unwrap();
        assert_eq!(m.port, 2100);
        assert!(m.net.contains("10.77.0.2".parse().unwrap()));
        assert!(!m.net.contains("11.0.0.1".parse().unwrap()));
        assert!(m.net.contains("::ffff:10.1.2.3".parse().unwrap()));
        let m: Match = "[fd00::/8]:6877".parse().unwrap();
        assert!(m.net.contains("fd00:77::2".parse().unwrap()));
        assert!(!m.net.contains("fe80::1".parse().unwrap()));
        assert_eq!(m.to_string(), "[fd00::/8]:6877");
        let m: Match = "10.77.0.2:2100".parse().unwrap();
        assert_eq!(m.to_string(), "10.77.0.2/32:2100");
        let all: Match = "0.0.0.0/0:1".parse().unwrap();
        assert!(all.net.contains("255.255.255.255".parse().unwrap()));
        let all6: Match = "[::/0]:1".parse().unwrap();
        assert!(all6.net.contains("::1".parse().unwrap()));
        assert!(!all6.net.contains("127.0.0.1".parse().unwrap()));
    }

    #[test]
    fn malformed_matches_are_refused() {
        for bad in [
            "",
            "10.0.0.0/8",
            "10.0.0.0/8:",
            "10.0.0.0/8:0",
            "10.0.0.0/8:65536",
            "10.0.0.0/33:1",
            "10.0.0.1/8:1",
            "10.0.0.0/-1:1",
            "host.svc:2100",
            "fd00::/8:2100",
            "[10.0.0.0/8]:1",
            "[fd00::/129]:1",
            "[fd00::1/8]:1",
            "[fd00::/8]2100",
            "[fd00::/8]:x",
        ] {
            assert!(bad.parse::<Match>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn first_match_wins_and_shadowed_rules_are_refused() {
        let d = Destinations::validate(
            "",
            &[
                spec("10.77.0.3:2100", "other.svc"),
                spec("10.77.0.0/24:2100", "*.replica.svc"),
                spec("[fd00::/8]:2100", "v6.svc"),
            ],
        )
        .unwrap();
        assert_eq!(d.lookup(sa("10.77.0.3:2100")).unwrap().0, 0);
        assert_eq!(d.lookup(sa("10.77.0.4:2100")).unwrap().0, 1);
        assert_eq!(d.lookup(sa("[::ffff:10.77.0.4]:2100")).unwrap().0, 1);
        assert_eq!(d.lookup(sa("[fd00::5]:2100")).unwrap().0, 2);
        assert!(d.lookup(sa("10.77.0.4:2101")).is_none());
        assert!(d.lookup(sa("10.78.0.4:2100")).is_none());
        assert_eq!(d.rules[1].tls_port, 2100, "tls_port defaults to the port");

        let e = Destinations::validate(
            "route \"t\": ",
            &[
                spec("10.0.0.0/8:2100", "a.svc"),
                spec("10.77.0.0/24:2100", "b.svc"),
            ],
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("destination[1].match") && e.contains("never match"),
            "{e}"
        );
        let dup = Destinations::validate(
            "",
            &[spec("10.0.0.0/8:1", "a.svc"), spec("10.0.0.0/8:1", "a.svc")],
        );
        assert!(dup.is_err());
        // Another port, or the narrower rule first, is fine.
        Destinations::validate(
            "",
            &[spec("10.0.0.0/8:1", "a.svc"), spec("10.0.0.0/8:2", "a.svc")],
        )
        .unwrap();
    }

    #[test]
    fn rules_need_sans_and_good_values() {
        let mut s = spec("10.0.0.0/8:1", "a.svc");
        s.expect_san.clear();
        let e = Destinations::validate("", &[s]).unwrap_err().to_string();
        assert!(e.contains("expect_san") && e.contains("required"), "{e}");
        let mut s = spec("10.0.0.0/8:1", "a.svc");
        s.tls_port = Some(0);
        assert!(Destinations::validate("", &[s]).is_err());
        let mut s = spec("10.0.0.0/8:1", "a.svc");
        s.server_name = Some("not a name".into());
        assert!(Destinations::validate("", &[s]).is_err());
        assert!(Destinations::validate("", &[spec("10.0.0.0/8:1", "*")]).is_err());
        assert!(Destinations::validate("", &[]).is_err());
        let many: Vec<_> = (0..=MAX_DESTINATIONS)
            .map(|i| spec(&format!("10.0.0.1:{}", i + 1), "a.svc"))
            .collect();
        assert!(Destinations::validate("", &many).is_err());
    }

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

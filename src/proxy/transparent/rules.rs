//! Destination rules of a transparent route: `[[route.destination]]`
//! parsed and validated (`CIDR:PORT`, no host bits, no rule shadowed by an
//! earlier one), and the lookup of a connection's original destination in
//! them (first match wins).
//!
//! Split from the socket side ([`super`]) because this is the part that
//! decides which server identity a destination must present: a wrong match
//! here sends the application's bytes to a peer verified against the wrong
//! rule, so it is kept free of I/O and tested (and mutation-tested) alone.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use rustls_pki_types::ServerName;
use serde::Deserialize;

use crate::identity::SanPattern;

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
        if let IpAddr::V6(v6) = addr {
            // Lookups see an IPv4-mapped destination as the IPv4 address it
            // is, so a network inside ::ffff:0:0/96 could never match.
            if prefix >= 96 && v6.to_ipv4_mapped().is_some() {
                return Err(format!(
                    "{s:?} is an IPv4-mapped network: write it as IPv4 (IPv4 connections \
                     accepted on an IPv6 socket are matched as IPv4)"
                ));
            }
        }
        let cidr = Cidr { addr, prefix };
        if network_of(&cidr) != addr {
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

pub(super) fn unmap_sock(a: SocketAddr) -> SocketAddr {
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
    ///
    /// Two CIDR blocks are either disjoint or one contains the other, and a
    /// rule has one port, so two rules overlap only when one covers the
    /// other: a later rule inside an earlier one is the dead rule refused
    /// here (the error names both); an earlier, narrower rule inside a later
    /// one is an exception to it (`10.77.0.5:2100` is the controller, the
    /// rest of `10.77.0.0/24:2100` are replicas) and is allowed.
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
                        "{matches} overlaps {prefix}destination[{j}] ({}), which comes first \
                         and covers all of it, so this rule can never match (first match \
                         wins; put the narrower rule first)",
                        earlier.matches
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

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A rule for `m` expecting `san`, the other keys at their defaults.
    pub(in crate::proxy::transparent) fn spec(m: &str, san: &str) -> DestinationSpec {
        DestinationSpec {
            matches: m.into(),
            expect_san: vec![san.into()],
            ..Default::default()
        }
    }

    pub(in crate::proxy::transparent) fn sa(s: &str) -> SocketAddr {
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
        // A long IPv6 prefix is refused only when the network is IPv4-mapped.
        let m: Match = "[fd00:77::2]:2100".parse().unwrap();
        assert_eq!(m.to_string(), "[fd00:77::2/128]:2100");
        assert!(m.net.contains("fd00:77::2".parse().unwrap()));
        assert!("[fd00:77::/96]:1".parse::<Match>().is_ok());
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
            // IPv4-mapped: lookups see these as IPv4, so they never match.
            "[::ffff:10.0.0.0/104]:1",
            "[::ffff:0:0/96]:1",
            "[::ffff:10.0.0.1]:1",
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
            e.contains("destination[1].match")
                && e.contains("never match")
                && e.contains("route \"t\": destination[0] (10.0.0.0/8:2100)"),
            "names both rules: {e}"
        );
        // Overlap is containment (CIDR blocks nest or are disjoint): any
        // earlier rule that contains a later one is found, not only the
        // first rule or the widest.
        let e = Destinations::validate(
            "",
            &[
                spec("10.1.0.0/16:2100", "a.svc"),
                spec("10.2.0.0/16:2100", "b.svc"),
                spec("10.2.3.0/24:2100", "c.svc"),
            ],
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("destination[2].match") && e.contains("destination[1] (10.2.0.0/16:2100)"),
            "{e}"
        );
        // Disjoint networks on the same port, and the narrower rule first
        // (an exception to the wider one), are fine.
        let d = Destinations::validate(
            "",
            &[
                spec("10.2.3.4:2100", "controller.svc"),
                spec("10.2.0.0/16:2100", "b.svc"),
                spec("10.3.0.0/16:2100", "c.svc"),
                spec("[::/0]:2100", "v6.svc"),
                spec("0.0.0.0/0:2100", "rest.svc"),
            ],
        )
        .unwrap();
        assert_eq!(d.lookup(sa("10.2.3.4:2100")).unwrap().0, 0);
        assert_eq!(d.lookup(sa("10.2.3.5:2100")).unwrap().0, 1);
        assert_eq!(d.lookup(sa("10.3.0.1:2100")).unwrap().0, 2);
        assert_eq!(d.lookup(sa("[fd00::1]:2100")).unwrap().0, 3);
        assert_eq!(d.lookup(sa("[::ffff:10.9.0.1]:2100")).unwrap().0, 4);
        assert_eq!(d.lookup(sa("192.0.2.1:2100")).unwrap().0, 4);
        // IPv4 and IPv6 rules never cover each other, whatever the prefix.
        Destinations::validate(
            "",
            &[spec("[::/0]:1", "a.svc"), spec("0.0.0.0/0:1", "a.svc")],
        )
        .unwrap();
        Destinations::validate(
            "",
            &[spec("0.0.0.0/0:1", "a.svc"), spec("[::/0]:1", "a.svc")],
        )
        .unwrap();
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
        let d = Destinations::validate("", &many[..MAX_DESTINATIONS]).expect("the maximum");
        assert_eq!(d.rules.len(), MAX_DESTINATIONS);
    }

    /// The route's expected SANs (its peer policy, shown in /status): every
    /// rule's, each once, in rule order.
    #[test]
    fn all_sans_lists_each_pattern_once() {
        let d = Destinations::validate(
            "",
            &[
                spec("10.0.0.1:1", "a.svc"),
                spec("10.0.0.2:1", "b.svc"),
                spec("10.0.0.3:1", "a.svc"),
            ],
        )
        .unwrap();
        let sans: Vec<String> = d.all_sans().iter().map(|p| p.to_string()).collect();
        assert_eq!(sans, ["a.svc", "b.svc"]);
    }
}

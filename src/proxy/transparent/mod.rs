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
//! The rules themselves (parsing, validation, lookup) are in `rules.rs`;
//! reading where a connection was going and deciding it, in `lookup.rs`;
//! the sidecar's own outbound sockets (the loop guard), in `outbound.rs`;
//! `--tproxy`'s listener, in `tproxy.rs`; the refusal log, in `log.rs`. This
//! module holds a route's per-rule TLS. `--mark`, which lets the rules
//! leave the sidecar's own connections alone, is in [`super::mark`].

mod log;
mod lookup;
mod outbound;
mod rules;
mod tproxy;

use std::net::SocketAddr;
use std::sync::Arc;

use rustls_pki_types::ServerName;
use tokio::net::TcpStream;

use crate::credentials::CredentialStore;
use crate::identity::SanPolicy;
use crate::tls::verify::ServerCertPolicy;

pub use log::NoDestinationLog;
pub use lookup::{original_dst, resolve, resolve_tproxy, NoDestination};
pub use outbound::{dial, Outbound};
pub use rules::{
    unmap, Cidr, Destination, DestinationSpec, Destinations, Match, RuleError, MAX_DESTINATIONS,
};
pub use tproxy::{bind_tproxy, probe_tproxy, TproxyError};

/// What a transparent route shows where other routes show their target.
pub const TARGET_LABEL: &str = "original-destination";

/// One rule's client TLS: its own verifier (the rule's expected SANs).
pub struct RuleTls {
    pub client: crate::tls::resumption::ClientTls,
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
                client: config,
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

    /// Re-checks a live connection's chain against the rule that admitted
    /// it (`rule`: its destination's, kept with the connection), never
    /// another rule whose SANs the peer happens to match: each rule's
    /// expected SANs decide, with the trust in force now. A connection
    /// without a rule (none recorded, or out of range) is refused.
    pub fn reverify(
        &self,
        rule: Option<usize>,
        chain: &[rustls_pki_types::CertificateDer<'static>],
        now: std::time::SystemTime,
    ) -> Result<(), rustls::Error> {
        match rule.and_then(|i| self.tls.get(i)) {
            Some(t) => t.policy.reverify(chain, now),
            None => Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::{DevCa, LeafSpec, Role};
    use std::time::SystemTime;

    /// A route of two rules over one trust: the first expects any
    /// `*.env-1.svc` server, the second only `replica-1.env-1.svc`.
    fn two_rules(ca: &DevCa, dir: &std::path::Path) -> Transparent {
        let me = ca
            .issue(&LeafSpec::dns("controller.svc", Role::Client, 1))
            .expect("leaf");
        let store = CredentialStore::for_test(dir, &me, ca);
        let spec = |matches: &str, san: &str| DestinationSpec {
            matches: matches.into(),
            expect_san: vec![san.into()],
            ..DestinationSpec::default()
        };
        let rules = Destinations::validate(
            "",
            &[
                spec("10.77.0.0/24:2100", "*.env-1.svc"),
                spec("10.78.0.0/24:2100", "replica-1.env-1.svc"),
            ],
        )
        .expect("rules");
        let peer = crate::tls::PeerOptions::default();
        Transparent::build(
            "out",
            Arc::new(rules),
            &store,
            crate::tls::TlsVersion::Tls13,
            &peer,
        )
        .expect("build")
    }

    /// A live connection is re-judged by its own destination's rule, not
    /// by the first rule whose SANs its server matches: a server the
    /// second rule refuses (`other.env-1.svc`) stays refused there although
    /// the first rule's `*.env-1.svc` would accept it. Seen failing with the rule
    /// chosen by first SAN match.
    #[test]
    fn reverification_judges_by_the_connections_own_rule() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let ca = DevCa::new("transparent CA", 30).expect("CA");
        let t = two_rules(&ca, tmp.path());
        let server = ca
            .issue(&LeafSpec::dns("other.env-1.svc", Role::Server, 1))
            .expect("server");
        let chain = vec![server.cert_der.clone()];
        let now = SystemTime::now();
        assert!(t.reverify(Some(0), &chain, now).is_ok());
        let refused = t.reverify(Some(1), &chain, now);
        assert!(
            matches!(
                refused,
                Err(rustls::Error::InvalidCertificate(
                    rustls::CertificateError::NotValidForName
                ))
            ),
            "{refused:?}"
        );
        // No rule recorded, or one out of range: refused, never a guess.
        assert!(t.reverify(None, &chain, now).is_err());
        assert!(t.reverify(Some(2), &chain, now).is_err());
        // The replica the second rule names passes it.
        let replica = ca
            .issue(&LeafSpec::dns("replica-1.env-1.svc", Role::Server, 1))
            .expect("replica");
        assert!(t.reverify(Some(1), &[replica.cert_der], now).is_ok());
    }
}

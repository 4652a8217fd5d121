//! SPIFFE trust-domain scoping for a Workload API source: which bundle may
//! vouch for a peer, decided before any chain is built, and which allow
//! entries may name a federated peer.

use rustls::{CertificateError, Error};

use crate::credentials::{CredentialSource, CredentialStore, Credentials};
use crate::identity::{CertInfo, SanPattern, SanPolicy};

/// The trust domain of a SPIFFE ID (`spiffe://td/path`), lower-cased.
pub(crate) fn trust_domain_of(id: &str) -> Option<String> {
    let rest = id
        .get(..9)?
        .eq_ignore_ascii_case("spiffe://")
        .then(|| &id[9..])?;
    let td = rest.split('/').next().filter(|td| !td.is_empty())?;
    Some(td.to_ascii_lowercase())
}

/// The peer's one SPIFFE ID: a certificate with none, or with several URI
/// SANs of which one is a SPIFFE ID (the SPIFFE X.509-SVID rule: exactly
/// one URI SAN), is no SVID; nor is a malformed one (an upper-case scheme
/// or trust domain, an empty segment, a query): the strict parser URI
/// allow entries match against decides, so what XFCC and the PROXY header
/// carry is a well-formed ID.
fn peer_spiffe_id(info: &CertInfo) -> Option<&str> {
    match info.uri_sans.as_slice() {
        [one] if is_spiffe_id(one) => Some(one),
        _ => None,
    }
}

/// A well-formed SPIFFE ID: the scheme `spiffe` and a trust domain of
/// lower-case letters, digits, `.`, `-` and `_` only (the SPIFFE ID
/// spec), and a path the strict URI parser accepts.
fn is_spiffe_id(uri: &str) -> bool {
    let Some(rest) = uri.strip_prefix("spiffe://") else {
        return false;
    };
    let td = rest.split('/').next().unwrap_or_default();
    !td.is_empty()
        && td
            .bytes()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'.' | b'-' | b'_'))
        && crate::identity::Uri::parse(uri).is_ok()
}

/// Which root store may vouch for a peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerDomain {
    /// The source's own bundle: a directory or file source's `ca.crt`, or
    /// the Workload API SVID's trust domain. Every allow entry applies.
    Local,
    /// A federated trust domain's bundle: only `spiffe://` allow entries
    /// may name the peer.
    Federated(String),
}

impl PeerDomain {
    /// The trust domain whose root store builds the chain (`None`: ours).
    pub fn roots(&self) -> Option<&str> {
        match self {
            PeerDomain::Local => None,
            PeerDomain::Federated(td) => Some(td),
        }
    }
}

/// For a Workload API source, judged before any chain is built: the peer
/// must carry exactly one SPIFFE ID (else `bad_san`), and its trust domain
/// picks the bundle that may vouch for it: ours, or a federated bundle of
/// exactly that trust domain. A peer of a trust domain with no bundle is
/// refused as `unknown_ca` even when one of our CAs signed it: a CA
/// vouches for its own trust domain's IDs only. Directory and file sources
/// are not SPIFFE-scoped (always [`PeerDomain::Local`]).
pub fn check_trust_domain(
    store: &CredentialStore,
    creds: &Credentials,
    info: Option<&CertInfo>,
) -> Result<PeerDomain, Error> {
    if !matches!(store.source(), CredentialSource::WorkloadApi { .. }) {
        return Ok(PeerDomain::Local);
    }
    let peer = info
        .and_then(peer_spiffe_id)
        .ok_or(Error::InvalidCertificate(CertificateError::NotValidForName))?;
    let ours = creds.leaf.uri_sans.iter().find_map(|u| trust_domain_of(u));
    pick_domain(trust_domain_of(peer), ours, |td| creds.trust.has_domain(td))
}

/// The rule of [`check_trust_domain`] once the two trust domains are
/// known: ours is local, one with a federated bundle is federated, any
/// other (or none) is an unknown issuer.
fn pick_domain(
    theirs: Option<String>,
    ours: Option<String>,
    federated: impl Fn(&str) -> bool,
) -> Result<PeerDomain, Error> {
    match (theirs, ours) {
        (Some(theirs), Some(ours)) if theirs == ours => Ok(PeerDomain::Local),
        (Some(theirs), Some(_)) if federated(&theirs) => Ok(PeerDomain::Federated(theirs)),
        _ => Err(Error::InvalidCertificate(CertificateError::UnknownIssuer)),
    }
}

/// True when a federated peer is named by an allow entry: only `spiffe://`
/// (URI) patterns count. DNS entries name peers of our own trust domain
/// only (a federated CA could otherwise mint any DNS name), and
/// `--allow-any-san` admits any peer of our own trust domain, never a
/// federated one.
pub fn federated_peer_allowed(policy: &SanPolicy, info: &CertInfo) -> bool {
    policy
        .patterns()
        .iter()
        .any(|p| matches!(p, SanPattern::Uri(_)) && p.matches(info))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(uris: &[&str]) -> CertInfo {
        CertInfo {
            subject: String::new(),
            serial: String::new(),
            dns_sans: Vec::new(),
            uri_sans: uris.iter().map(|u| u.to_string()).collect(),
            not_before: 0,
            not_after: 0,
            server_auth: true,
            client_auth: true,
            any_usage: false,
        }
    }

    #[test]
    fn trust_domain_is_the_lower_cased_authority() {
        assert_eq!(
            trust_domain_of("spiffe://Prod.Test/ns/a").as_deref(),
            Some("prod.test")
        );
        assert_eq!(trust_domain_of("SPIFFE://td").as_deref(), Some("td"));
        assert_eq!(trust_domain_of("spiffe:///path"), None);
        assert_eq!(trust_domain_of("https://td/x"), None);
        assert_eq!(trust_domain_of("spiffe:/"), None);
    }

    #[test]
    fn a_peer_has_exactly_one_uri_san_and_it_is_a_spiffe_id() {
        assert_eq!(
            peer_spiffe_id(&info(&["spiffe://td/a"])),
            Some("spiffe://td/a")
        );
        assert_eq!(peer_spiffe_id(&info(&[])), None);
        assert_eq!(
            peer_spiffe_id(&info(&["spiffe://td/a", "spiffe://td/b"])),
            None
        );
        assert_eq!(peer_spiffe_id(&info(&["https://td/a"])), None);
        assert_eq!(peer_spiffe_id(&info(&["https://x", "spiffe://td/a"])), None);
        for bad in [
            "spiffe://td/",
            "spiffe://td/a//b",
            "spiffe://td/a?q",
            "SPIFFE://td/a",
            "spiffe://TD/a",
        ] {
            assert_eq!(peer_spiffe_id(&info(&[bad])), None, "{bad}");
        }
    }

    #[test]
    fn ours_is_local_a_federated_one_is_federated_any_other_is_unknown() {
        let fed = |td: &str| td == "partner.test";
        let some = |s: &str| Some(s.to_string());
        assert_eq!(
            pick_domain(some("prod.test"), some("prod.test"), fed),
            Ok(PeerDomain::Local)
        );
        assert_eq!(
            pick_domain(some("partner.test"), some("prod.test"), fed),
            Ok(PeerDomain::Federated("partner.test".into()))
        );
        let unknown = Err(Error::InvalidCertificate(CertificateError::UnknownIssuer));
        assert_eq!(
            pick_domain(some("stranger.test"), some("prod.test"), fed),
            unknown
        );
        // Without an SVID of our own, nothing is ours (the placeholder).
        assert_eq!(pick_domain(some("partner.test"), None, fed), unknown);
        assert_eq!(pick_domain(None, some("prod.test"), fed), unknown);
        assert_eq!(PeerDomain::Local.roots(), None);
        assert_eq!(PeerDomain::Federated("p.td".into()).roots(), Some("p.td"));
    }

    #[test]
    fn only_uri_entries_name_a_federated_peer() {
        let mut peer = info(&["spiffe://partner.test/app"]);
        peer.dns_sans = vec!["controller.env-1.svc".into()];
        let policy = |entries: &[&str]| {
            SanPolicy::OneOf(entries.iter().map(|e| e.parse().unwrap()).collect())
        };
        assert!(federated_peer_allowed(
            &policy(&["spiffe://partner.test/app"]),
            &peer
        ));
        assert!(!federated_peer_allowed(
            &policy(&["controller.env-1.svc", "*.env-1.svc"]),
            &peer
        ));
        assert!(!federated_peer_allowed(
            &policy(&["spiffe://partner.test/other"]),
            &peer
        ));
        assert!(!federated_peer_allowed(&SanPolicy::Any, &peer));
    }
}

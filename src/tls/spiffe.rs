//! SPIFFE trust-domain scoping for a Workload API source: which peers a
//! bundle may vouch for, decided before any chain is built.

use rustls::{CertificateError, Error};

use crate::credentials::{CredentialSource, CredentialStore, Credentials};
use crate::identity::CertInfo;

/// The trust domain of a SPIFFE ID (`spiffe://td/path`), lower-cased.
fn trust_domain_of(id: &str) -> Option<String> {
    let rest = id
        .get(..9)?
        .eq_ignore_ascii_case("spiffe://")
        .then(|| &id[9..])?;
    let td = rest.split('/').next().filter(|td| !td.is_empty())?;
    Some(td.to_ascii_lowercase())
}

/// The peer's one SPIFFE ID: a certificate with none, or with several URI
/// SANs of which one is a SPIFFE ID (the SPIFFE X.509-SVID rule: exactly
/// one URI SAN), is no SVID.
fn peer_spiffe_id(info: &CertInfo) -> Option<&str> {
    match info.uri_sans.as_slice() {
        [one] if trust_domain_of(one).is_some() => Some(one),
        _ => None,
    }
}

/// For a Workload API source, judged before any chain is built: the peer
/// must carry exactly one SPIFFE ID, and the bundle that may vouch for it
/// is its trust domain's. Only our own trust domain's bundle is trusted
/// (federated bundles are not), so a peer of another trust domain is
/// refused as `unknown_ca` even when our CA signed it: a CA vouches for
/// its own trust domain's IDs only. DNS allow-list entries thereby only
/// ever match peers of our own trust domain. Directory and file sources
/// are not SPIFFE-scoped.
pub fn check_trust_domain(
    store: &CredentialStore,
    creds: &Credentials,
    info: Option<&CertInfo>,
) -> Result<(), Error> {
    if !matches!(store.source(), CredentialSource::WorkloadApi { .. }) {
        return Ok(());
    }
    let peer = info
        .and_then(peer_spiffe_id)
        .ok_or(Error::InvalidCertificate(CertificateError::NotValidForName))?;
    let ours = creds.leaf.uri_sans.iter().find_map(|u| trust_domain_of(u));
    match (trust_domain_of(peer), ours) {
        (Some(theirs), Some(ours)) if theirs == ours => Ok(()),
        _ => Err(Error::InvalidCertificate(CertificateError::UnknownIssuer)),
    }
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
    }
}

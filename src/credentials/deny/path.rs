//! The facts a deny-list is matched against, read from the path webpki
//! built (the `verify_path` callback of
//! [`Trust::verify_peer`](crate::credentials::Trust::verify_peer)): each
//! certificate's key, serial and issuer key, the anchor's key, and the
//! leaf's SANs when an entry names one.

use webpki::VerifiedPath;

use super::{CertFacts, PeerFacts};
use crate::credentials::revocation::{key_hash, wrap_sequence};

/// A serial's octets without the leading zero octets DER may carry.
pub(super) fn strip_zeros(serial: &[u8]) -> Vec<u8> {
    let start = serial.iter().position(|b| *b != 0).unwrap_or(serial.len());
    serial[start..].to_vec()
}

/// The facts of a built path: leaf, intermediates, anchor; the leaf's
/// SANs only when `sans` (parsing them costs an X.509 parse).
pub(crate) fn path_facts(path: &VerifiedPath<'_>, sans: bool) -> PeerFacts {
    let anchor_spki = key_hash(&wrap_sequence(
        path.anchor().subject_public_key_info.as_ref(),
    ));
    let below: Vec<&webpki::Cert<'_>> = std::iter::once(&**path.end_entity())
        .chain(path.intermediate_certificates())
        .collect();
    let spkis: Vec<[u8; 32]> = below
        .iter()
        .map(|c| key_hash(c.subject_public_key_info().as_ref()))
        .collect();
    let mut facts = PeerFacts::default();
    for (i, cert) in below.iter().enumerate() {
        facts.certs.push(CertFacts {
            spki: spkis[i],
            serial: Some(strip_zeros(cert.serial())),
            issuer_spki: Some(spkis.get(i + 1).copied().unwrap_or(anchor_spki)),
        });
    }
    facts.certs.push(CertFacts {
        spki: anchor_spki,
        serial: None,
        issuer_spki: None,
    });
    if sans {
        if let Ok(info) = crate::identity::CertInfo::parse(&path.end_entity().der()) {
            facts.dns = info.dns_sans;
            facts.uris = info.uri_sans;
        }
    }
    facts
}

//! The facts a deny-list is matched against, read from the path webpki
//! built (the `verify_path` callback of
//! [`Trust::verify_peer`](crate::credentials::Trust::verify_peer)): each
//! certificate's key, serial and issuer key, the anchor's key, and the
//! leaf's SANs when an entry names one.

use webpki::VerifiedPath;

use super::{CertFacts, PeerFacts};

/// SHA-256 of a whole (SEQUENCE-wrapped) SPKI.
fn spki_hash(spki_der: &[u8]) -> [u8; 32] {
    let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, spki_der);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// A serial's octets without the leading zero octets DER may carry.
pub(super) fn strip_zeros(serial: &[u8]) -> Vec<u8> {
    let start = serial.iter().position(|b| *b != 0).unwrap_or(serial.len());
    serial[start..].to_vec()
}

/// The facts of a built path: leaf, intermediates, and the anchor (whose
/// SPKI hash the caller gives: webpki holds an anchor's SPKI unwrapped);
/// the leaf's SANs only when `sans` (parsing them costs an X.509 parse).
pub(crate) fn path_facts(path: &VerifiedPath<'_>, anchor_spki: [u8; 32], sans: bool) -> PeerFacts {
    let below: Vec<&webpki::Cert<'_>> = std::iter::once(&**path.end_entity())
        .chain(path.intermediate_certificates())
        .collect();
    let spkis: Vec<[u8; 32]> = below
        .iter()
        .map(|c| spki_hash(c.subject_public_key_info().as_ref()))
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
        match crate::identity::CertInfo::parse(&path.end_entity().der()) {
            Ok(info) => {
                facts.dns = info.dns_sans;
                facts.uris = info.uri_sans;
            }
            Err(_) => facts.sans_unreadable = true,
        }
    }
    facts
}

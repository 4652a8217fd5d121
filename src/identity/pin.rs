//! Public-key pinning (`--allow-spki-sha256`, `--expect-spki-sha256`): the
//! SHA-256 of a certificate's SubjectPublicKeyInfo, base64-encoded as
//! ghostunnel, HPKP and `openssl … | openssl dgst -sha256 -binary | base64`
//! write it. A pin is checked in addition to the chain and the SAN, inside
//! the handshake, so a peer whose key is not pinned gets a TLS alert.

use std::sync::Arc;

use base64::Engine;
use x509_parser::prelude::{FromDer, X509Certificate};

/// The error a pin mismatch raises inside the handshake, classified as the
/// failure reason `pin_mismatch`.
#[derive(Debug, thiserror::Error)]
#[error("the peer's public key (SPKI sha256 {got}) matches no pinned key")]
pub struct PinMismatch {
    pub got: String,
}

/// Decodes a base64 pin (standard or URL-safe alphabet, padding optional).
pub fn parse(s: &str) -> Option<[u8; 32]> {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    let s = s.trim();
    [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD]
        .iter()
        .find_map(|e| e.decode(s).ok())
        .and_then(|v| <[u8; 32]>::try_from(v).ok())
}

/// The SHA-256 of a DER certificate's SubjectPublicKeyInfo.
pub fn spki_sha256(cert_der: &[u8]) -> Option<[u8; 32]> {
    let (_, cert) = X509Certificate::from_der(cert_der).ok()?;
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, cert.public_key().raw);
    digest.as_ref().try_into().ok()
}

/// The pin of a DER certificate, base64 (standard alphabet, padded).
pub fn encode(pin: &[u8; 32]) -> String {
    base64::engine::general_purpose::STANDARD.encode(pin)
}

/// Checks a certificate against the pins; no pins means no pinning.
pub fn check(pins: &[[u8; 32]], cert_der: &[u8]) -> Result<(), rustls::Error> {
    if pins.is_empty() {
        return Ok(());
    }
    let got = spki_sha256(cert_der);
    if got.is_some_and(|g| pins.contains(&g)) {
        return Ok(());
    }
    Err(rustls::Error::InvalidCertificate(
        rustls::CertificateError::Other(rustls::OtherError(Arc::new(PinMismatch {
            got: got
                .map(|g| encode(&g))
                .unwrap_or_else(|| "unparseable".into()),
        }))),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::{DevCa, LeafSpec, Role};

    #[test]
    fn pins_parse_in_every_base64_spelling() {
        let pin = [7u8; 32];
        let std = encode(&pin);
        assert_eq!(std.len(), 44);
        assert_eq!(parse(&std), Some(pin));
        assert_eq!(parse(std.trim_end_matches('=')), Some(pin));
        assert_eq!(parse("not base64!"), None);
        assert_eq!(
            parse(&base64::engine::general_purpose::STANDARD.encode([1u8; 31])),
            None
        );
    }

    #[test]
    fn a_certificate_matches_only_its_own_key() {
        let ca = DevCa::new("pin CA", 1).unwrap();
        let a = ca.issue(&LeafSpec::dns("a.svc", Role::Client, 1)).unwrap();
        let b = ca.issue(&LeafSpec::dns("b.svc", Role::Client, 1)).unwrap();
        let pa = spki_sha256(a.cert_der.as_ref()).unwrap();
        let pb = spki_sha256(b.cert_der.as_ref()).unwrap();
        assert_ne!(pa, pb);
        assert!(check(&[], b.cert_der.as_ref()).is_ok());
        assert!(check(&[pa], a.cert_der.as_ref()).is_ok());
        assert!(check(&[pb, pa], a.cert_der.as_ref()).is_ok());
        let e = check(&[pa], b.cert_der.as_ref()).unwrap_err();
        assert_eq!(
            crate::reason::FailureReason::from_tls(&e),
            crate::reason::FailureReason::PinMismatch
        );
        assert!(check(&[pa], b"garbage").is_err());
    }
}

//! Which key signed a CRL. A CRL is matched to its issuer by name AND key:
//! two CAs may share a name (a CA re-keyed under the same name), and a
//! CRL judges only the certificates its own key signed.
//!
//! The known issuers are the trust anchors (in force, or in their
//! `--trust-grace`), the known intermediates (the `intermediates` file and
//! the chain of our own `tls.crt`; never anchors), and a bounded history of
//! retired anchors (a CRL that only they verify is ignored, not rejected).

use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls_pki_types::{CertificateDer, SignatureVerificationAlgorithm};
use x509_parser::asn1_rs::Any;
use x509_parser::certificate::X509Certificate;
use x509_parser::prelude::FromDer;
use x509_parser::x509::SubjectPublicKeyInfo;

use super::crl::Crl;

/// SHA-256 of a DER SubjectPublicKeyInfo: a key's identity.
pub type KeyHash = [u8; 32];

/// The SHA-256 of a whole (SEQUENCE-wrapped) SPKI.
pub fn key_hash(spki_der: &[u8]) -> KeyHash {
    let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, spki_der);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// How trusted the key that signed a CRL is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SignerKind {
    /// A trust anchor of the `ca.crt` in force.
    Anchor,
    /// A trust anchor dropped from `ca.crt`, inside its `--trust-grace`.
    Graced,
    /// A known intermediate CA (never an anchor).
    Intermediate,
    /// A trust anchor no longer trusted at all.
    Retired,
}

impl SignerKind {
    /// True for a signer whose CRLs are enforced.
    pub fn trusted(self) -> bool {
        self != SignerKind::Retired
    }
}

/// The key that signed a CRL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signer {
    /// The signer's subject, for messages.
    pub subject: String,
    pub key: KeyHash,
    pub kind: SignerKind,
    /// The whole SPKI, to verify a later CRL against this same key.
    pub(crate) spki: Arc<[u8]>,
}

/// One CA certificate a CRL may be signed by.
#[derive(Debug, Clone)]
pub(crate) struct KnownIssuer {
    /// The subject Name's contents (how webpki holds names).
    name: Vec<u8>,
    /// False when the certificate's keyUsage is present without cRLSign.
    crl_sign: bool,
    signer: Signer,
}

/// Every CA certificate a CRL may be signed by, trusted first.
#[derive(Debug, Clone, Default)]
pub(crate) struct Known {
    issuers: Vec<KnownIssuer>,
    /// Set for a view that cannot tell a broken CRL from one of a CA that
    /// left the trust (a revision's own files, without the history of the
    /// trust in force): [`Known::refusal`] then refuses nothing.
    partial: bool,
}

impl Known {
    /// The same issuers, known to be only part of the history: no CRL is
    /// refused for its signature (the store, which knows the graced and
    /// retired CAs, judges that).
    pub(crate) fn partial(mut self) -> Known {
        self.partial = true;
        self
    }

    /// Adds the certificates of one kind (those that do not parse are
    /// skipped: they were reported where they were loaded).
    pub(crate) fn add(&mut self, certs: &[CertificateDer<'_>], kind: SignerKind) {
        for der in certs {
            if let Some(issuer) = known_issuer(der.as_ref(), kind) {
                if !self
                    .issuers
                    .iter()
                    .any(|k| k.signer.key == issuer.signer.key && k.name == issuer.name)
                {
                    self.issuers.push(issuer);
                }
            }
        }
    }

    /// The first known key of the CRL's issuer name that verifies its
    /// signature (trusted kinds before retired ones), or why none did.
    pub(crate) fn signer_of(&self, crl: &Crl, provider: &CryptoProvider) -> Option<&Signer> {
        let mut order: Vec<&KnownIssuer> = self
            .issuers
            .iter()
            .filter(|k| k.name == crl.issuer())
            .collect();
        order.sort_by_key(|k| !k.signer.kind.trusted());
        order
            .into_iter()
            .find(|k| k.crl_sign && verify_crl(crl, &k.signer.spki, provider))
            .map(|k| &k.signer)
    }

    /// Why a CRL that no known key verifies may not load, when it names an
    /// issuer we trust (an anchor in force or graced, or an intermediate we
    /// hold): `None` when it names no such issuer (it is then judged at a
    /// handshake against a peer-sent intermediate's key, or never).
    pub(crate) fn refusal(&self, crl: &Crl, provider: &CryptoProvider) -> Option<String> {
        if self.partial {
            return None;
        }
        let trusted: Vec<&KnownIssuer> = self
            .issuers
            .iter()
            .filter(|k| k.name == crl.issuer() && k.signer.kind.trusted())
            .collect();
        let first = trusted.first()?;
        if let Some(k) = trusted
            .iter()
            .find(|k| !k.crl_sign && verify_crl(crl, &k.signer.spki, provider))
        {
            return Some(format!(
                "it is signed by {}, whose keyUsage lacks cRLSign: that CA may not sign CRLs",
                describe_signer(&k.signer)
            ));
        }
        let names = if trusted.len() == 1 {
            format!("the key of {}", describe_signer(&first.signer))
        } else {
            format!("any of the {} keys of that name we trust", trusted.len())
        };
        Some(format!(
            "its signature does not verify with {names} (a corrupted signature, or \
             another key under that name)"
        ))
    }

    /// The signer of this key, when it is known.
    pub(crate) fn by_key(&self, key: &KeyHash) -> Option<&Signer> {
        self.issuers
            .iter()
            .map(|k| &k.signer)
            .find(|s| &s.key == key)
    }
}

/// A trusted signer in a message: its subject and where it comes from.
fn describe_signer(s: &Signer) -> String {
    match s.kind {
        SignerKind::Anchor => format!("{} in ca.crt", s.subject),
        SignerKind::Graced => format!("{} (in its trust grace)", s.subject),
        SignerKind::Intermediate => format!("the intermediate {}", s.subject),
        SignerKind::Retired => format!("{} (no longer trusted)", s.subject),
    }
}

fn known_issuer(der: &[u8], kind: SignerKind) -> Option<KnownIssuer> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let spki: Arc<[u8]> = Arc::from(cert.tbs_certificate.subject_pki.raw);
    Some(KnownIssuer {
        name: contents(cert.subject().as_raw()).to_vec(),
        crl_sign: may_sign_crls(&cert),
        signer: Signer {
            subject: cert.subject().to_string(),
            key: key_hash(&spki),
            kind,
            spki,
        },
    })
}

/// False when the certificate's keyUsage is present without cRLSign (a
/// certificate without keyUsage may sign anything).
pub(crate) fn may_sign_crls(cert: &X509Certificate<'_>) -> bool {
    match cert.key_usage() {
        Ok(Some(ku)) => ku.value.crl_sign(),
        Ok(None) => true,
        Err(_) => false,
    }
}

/// True when the DER certificate may sign CRLs (see [`may_sign_crls`]).
pub(crate) fn der_may_sign_crls(der: &[u8]) -> bool {
    X509Certificate::from_der(der).is_ok_and(|(_, c)| may_sign_crls(&c))
}

/// The contents of a DER TLV (a Name's RDNs without the SEQUENCE header).
pub(crate) fn contents(tlv: &[u8]) -> &[u8] {
    Any::from_der(tlv).map(|(_, any)| any.data).unwrap_or(tlv)
}

/// A DER SEQUENCE around `contents` (webpki holds a trust anchor's SPKI
/// without its header).
pub(crate) fn wrap_sequence(contents: &[u8]) -> Vec<u8> {
    let n = contents.len();
    let mut out = vec![0x30];
    if n < 0x80 {
        out.push(n as u8);
    } else {
        let bytes = n.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(contents);
    out
}

/// Whether the CRL's signature verifies with the key `spki_der`, using
/// the provider's certificate signature algorithms (the same set, and the
/// same algorithm identifiers, webpki uses for chains). An algorithm is
/// tried only when it matches both the CRL's signature algorithm and the
/// key's: a signature made with another digest than the one the CRL names
/// does not verify. Malformed input does not verify.
pub(crate) fn verify_crl(crl: &Crl, spki_der: &[u8], provider: &CryptoProvider) -> bool {
    use x509_parser::revocation_list::CertificateRevocationList;
    let verdict = || -> Option<bool> {
        let (_, parsed) = CertificateRevocationList::from_der(crl.der()).ok()?;
        // CertificateList ::= SEQUENCE { tbsCertList, signatureAlgorithm, signatureValue }
        let (_, outer) = Any::from_der(crl.der()).ok()?;
        let (after_tbs, _) = Any::from_der(outer.data).ok()?;
        let (_, sig_alg) = Any::from_der(after_tbs).ok()?;
        let (_, spki) = SubjectPublicKeyInfo::from_der(spki_der).ok()?;
        let (_, spki_seq) = Any::from_der(spki_der).ok()?;
        let (_, key_alg) = Any::from_der(spki_seq.data).ok()?;
        Some(
            provider
                .signature_verification_algorithms
                .all
                .iter()
                .filter(|alg| algorithm_matches(**alg, sig_alg.data, key_alg.data))
                .any(|alg| {
                    alg.verify_signature(
                        &spki.subject_public_key.data,
                        parsed.tbs_cert_list.as_ref(),
                        &parsed.signature_value.data,
                    )
                    .is_ok()
                }),
        )
    };
    verdict().unwrap_or(false)
}

/// Whether `alg` is the one for a signature named `sig_alg` by a key of
/// the algorithm `key_alg` (both the AlgorithmIdentifiers' contents).
fn algorithm_matches(
    alg: &dyn SignatureVerificationAlgorithm,
    sig_alg: &[u8],
    key_alg: &[u8],
) -> bool {
    alg.signature_alg_id().as_ref() == sig_alg && alg.public_key_alg_id().as_ref() == key_alg
}

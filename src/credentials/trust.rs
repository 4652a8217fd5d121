//! The set of trust anchors in force, including anchors removed from
//! `ca.crt` that are still inside their `--trust-grace`, the CRLs in force,
//! and the verifiers built from them (rustls's for client certificates,
//! webpki's for server certificates).

use std::sync::Arc;
use std::time::SystemTime;

use rustls::crypto::CryptoProvider;
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::{CertificateError, RootCertStore};
use rustls_pki_types::{CertificateDer, UnixTime};
use webpki::{RevocationCheckDepth, RevocationOptionsBuilder, UnknownStatusPolicy};

use super::{CredError, CrlScope, CrlSet};
use crate::identity::CertInfo;

/// One trusted CA certificate.
#[derive(Debug, Clone)]
pub struct Anchor {
    pub der: CertificateDer<'static>,
    pub info: CertInfo,
    /// Set when the anchor was dropped from `ca.crt` and is only trusted
    /// until this moment.
    pub retire_at: Option<SystemTime>,
}

impl Anchor {
    /// The anchors of a `ca.crt` bundle, none of them retiring.
    pub fn bundle(bundle: &[(CertificateDer<'static>, CertInfo)]) -> Vec<Anchor> {
        bundle
            .iter()
            .map(|(der, info)| Anchor {
                der: der.clone(),
                info: info.clone(),
                retire_at: None,
            })
            .collect()
    }
}

/// The effective trust: what peers are verified against right now.
#[derive(Debug)]
pub struct Trust {
    pub anchors: Vec<Anchor>,
    pub roots: Arc<RootCertStore>,
    /// rustls's own client verifier over `roots` and `crls`; route
    /// verifiers wrap it.
    pub client_verifier: Arc<dyn ClientCertVerifier>,
    /// The CRLs in force (part of the trust: a changed CRL is a new trust).
    pub crls: Arc<CrlSet>,
    /// Which certificates of a chain the CRLs judge.
    pub scope: CrlScope,
}

impl Trust {
    /// Builds the verifiers over these anchors and CRLs. A certificate whose
    /// issuer has no CRL is not judged revoked (unknown status is allowed),
    /// and a CRL past its nextUpdate is still enforced.
    pub fn build(
        anchors: Vec<Anchor>,
        crls: Arc<CrlSet>,
        scope: CrlScope,
        provider: &Arc<CryptoProvider>,
    ) -> Result<Trust, CredError> {
        let ders: Vec<_> = anchors.iter().map(|a| a.der.clone()).collect();
        let roots = Arc::new(super::root_store(std::path::Path::new("ca.crt"), &ders)?);
        let mut builder =
            WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone());
        if !crls.is_empty() {
            builder = builder
                .with_crls(crls.ders().iter().cloned())
                .allow_unknown_revocation_status();
            if scope == CrlScope::Leaf {
                builder = builder.only_check_end_entity_revocation();
            }
        }
        let client_verifier = builder.build().map_err(|e| CredError::Parse {
            path: "ca.crt".into(),
            detail: format!("cannot build a verifier: {e}"),
        })?;
        Ok(Trust {
            anchors,
            roots,
            client_verifier,
            crls,
            scope,
        })
    }

    /// The same anchors and CRLs judged with another scope.
    pub fn with_scope(
        &self,
        scope: CrlScope,
        provider: &Arc<CryptoProvider>,
    ) -> Result<Trust, CredError> {
        Trust::build(self.anchors.clone(), self.crls.clone(), scope, provider)
    }

    /// Verifies a server's chain for serverAuth against the anchors and the
    /// CRLs (the client side's counterpart of `client_verifier`; the name
    /// is checked by the caller's SAN policy).
    pub fn verify_server_chain(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
        provider: &CryptoProvider,
    ) -> Result<(), rustls::Error> {
        let ee = webpki::EndEntityCert::try_from(end_entity).map_err(pki_error)?;
        let lists: Vec<&webpki::CertRevocationList<'_>> = self.crls.lists.iter().collect();
        let revocation = RevocationOptionsBuilder::new(&lists).ok().map(|b| {
            b.with_depth(match self.scope {
                CrlScope::Leaf => RevocationCheckDepth::EndEntity,
                CrlScope::Chain => RevocationCheckDepth::Chain,
            })
            .with_status_policy(UnknownStatusPolicy::Allow)
            .build()
        });
        ee.verify_for_usage(
            provider.signature_verification_algorithms.all,
            &self.roots.roots,
            intermediates,
            now,
            webpki::KeyUsage::server_auth(),
            revocation,
            None,
        )
        .map(|_| ())
        .map_err(pki_error)
    }

    /// The anchors for a new `ca.crt` bundle: all of the bundle, plus every
    /// current anchor the bundle dropped, kept until `now + grace` (or its
    /// earlier retirement). Returns the list and whether trust shrank.
    pub fn merge(
        &self,
        bundle: &[(CertificateDer<'static>, CertInfo)],
        grace: std::time::Duration,
        now: SystemTime,
    ) -> (Vec<Anchor>, bool) {
        let mut next = Anchor::bundle(bundle);
        let mut shrank = false;
        for old in &self.anchors {
            if next.iter().any(|a| a.der == old.der) {
                continue;
            }
            let retire_at = old.retire_at.unwrap_or(now + grace);
            if retire_at > now {
                next.push(Anchor {
                    retire_at: Some(retire_at),
                    ..old.clone()
                });
            } else {
                shrank = true;
            }
        }
        (next, shrank)
    }

    /// The anchors left once every retirement due by `now` has happened, or
    /// `None` when nothing is due.
    pub fn expire(&self, now: SystemTime) -> Option<Vec<Anchor>> {
        if !self
            .anchors
            .iter()
            .any(|a| a.retire_at.is_some_and(|t| t <= now))
        {
            return None;
        }
        Some(
            self.anchors
                .iter()
                .filter(|a| a.retire_at.is_none_or(|t| t > now))
                .cloned()
                .collect(),
        )
    }

    /// The earliest pending retirement, so a poller can wake for it.
    pub fn next_retirement(&self) -> Option<SystemTime> {
        self.anchors.iter().filter_map(|a| a.retire_at).min()
    }

    /// True when `other` holds different CRLs.
    pub fn crls_differ(&self, other: &Trust) -> bool {
        !self.crls.same_as(&other.crls)
    }

    /// The earliest expiry among the anchors (for the `trust` expiry gauge).
    pub fn earliest_not_after(&self) -> Option<i64> {
        self.anchors.iter().map(|a| a.info.not_after).min()
    }
}

/// Maps a webpki chain error to the rustls error a handshake reports (so
/// `reason` classifies it), as rustls's own verifiers do.
fn pki_error(error: webpki::Error) -> rustls::Error {
    use webpki::Error as E;
    let cert = match error {
        E::CertRevoked => CertificateError::Revoked,
        E::UnknownIssuer => CertificateError::UnknownIssuer,
        E::CertNotValidYet { time, not_before } => {
            CertificateError::NotValidYetContext { time, not_before }
        }
        E::CertExpired { time, not_after } => CertificateError::ExpiredContext { time, not_after },
        E::InvalidCertValidity => CertificateError::Expired,
        E::BadDer | E::BadDerTime | E::TrailingData(_) => CertificateError::BadEncoding,
        E::InvalidSignatureForPublicKey => CertificateError::BadSignature,
        #[allow(deprecated)]
        E::UnsupportedSignatureAlgorithm | E::UnsupportedSignatureAlgorithmForPublicKey => {
            CertificateError::UnsupportedSignatureAlgorithm
        }
        E::UnsupportedSignatureAlgorithmContext(cx) => {
            CertificateError::UnsupportedSignatureAlgorithmContext {
                signature_algorithm_id: cx.signature_algorithm_id,
                supported_algorithms: cx.supported_algorithms,
            }
        }
        E::UnsupportedSignatureAlgorithmForPublicKeyContext(cx) => {
            CertificateError::UnsupportedSignatureAlgorithmForPublicKeyContext {
                signature_algorithm_id: cx.signature_algorithm_id,
                public_key_algorithm_id: cx.public_key_algorithm_id,
            }
        }
        E::UnknownRevocationStatus => CertificateError::UnknownRevocationStatus,
        #[allow(deprecated)]
        E::RequiredEkuNotFound | E::RequiredEkuNotFoundContext(_) => {
            CertificateError::InvalidPurpose
        }
        other => CertificateError::Other(rustls::OtherError(Arc::new(other))),
    };
    rustls::Error::InvalidCertificate(cert)
}

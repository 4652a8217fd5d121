//! The set of trust anchors in force, including anchors removed from
//! `ca.crt` that are still inside their `--trust-grace`, and the rustls
//! verifier built from them.

use std::sync::Arc;
use std::time::SystemTime;

use rustls::crypto::CryptoProvider;
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;
use rustls_pki_types::CertificateDer;

use super::CredError;
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
    /// rustls's own client verifier over `roots`; route verifiers wrap it.
    pub client_verifier: Arc<dyn ClientCertVerifier>,
}

impl Trust {
    /// Builds the verifier over these anchors.
    pub fn build(anchors: Vec<Anchor>, provider: &Arc<CryptoProvider>) -> Result<Trust, CredError> {
        let ders: Vec<_> = anchors.iter().map(|a| a.der.clone()).collect();
        let roots = Arc::new(super::root_store(std::path::Path::new("ca.crt"), &ders)?);
        let client_verifier =
            WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
                .build()
                .map_err(|e| CredError::Parse {
                    path: "ca.crt".into(),
                    detail: format!("cannot build a verifier: {e}"),
                })?;
        Ok(Trust {
            anchors,
            roots,
            client_verifier,
        })
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

    /// The earliest expiry among the anchors (for the `trust` expiry gauge).
    pub fn earliest_not_after(&self) -> Option<i64> {
        self.anchors.iter().map(|a| a.info.not_after).min()
    }
}

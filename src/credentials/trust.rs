//! The set of trust anchors in force, including anchors removed from
//! `ca.crt` that are still inside their `--trust-grace`, the known
//! intermediates and recently retired anchors (which CRLs are judged
//! against), the CRLs and the deny-list in force, and the one peer
//! judgement built on them ([`Trust::verify_peer`]): webpki builds the
//! path, then the deny-list ([`super::deny`]) and the revocation judgement
//! ([`super::revocation`]) look at that path.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use rustls::crypto::CryptoProvider;
use rustls::{CertificateError, RootCertStore};
use rustls_pki_types::{CertificateDer, UnixTime};

use super::revocation::{self, Known, SigMemo, SignerKind, Usage};
use super::{deny, CredError, CrlScope, CrlSet, DenyEntry, DenyList};
use crate::identity::CertInfo;

/// How many retired anchors a trust remembers, so that a CRL only they
/// verify is recognised (and ignored) rather than taken for an unknown
/// issuer's.
pub const MAX_RETIRED: usize = 16;

/// One trusted CA certificate.
#[derive(Debug, Clone)]
pub struct Anchor {
    pub der: CertificateDer<'static>,
    pub info: CertInfo,
    /// Set when the anchor was dropped from `ca.crt` and is only trusted
    /// until this moment.
    pub retire_at: Option<SystemTime>,
    /// `None` for the source's own bundle (`ca.crt`, or the Workload API
    /// SVID's trust domain); the trust domain of a federated bundle
    /// (Workload API `federated_bundles`) otherwise. A federated anchor
    /// vouches only for peers whose SPIFFE ID is of its trust domain.
    pub domain: Option<String>,
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
                domain: None,
            })
            .collect()
    }

    /// The anchors of trust domain `domain`'s federated bundle (the name
    /// lower-cased, as peers' SPIFFE IDs are read), none of them retiring.
    pub fn federated(domain: &str, bundle: &[(CertificateDer<'static>, CertInfo)]) -> Vec<Anchor> {
        Anchor::bundle(bundle)
            .into_iter()
            .map(|a| Anchor {
                domain: Some(domain.to_ascii_lowercase()),
                ..a
            })
            .collect()
    }

    /// True for an anchor of the source's own bundle.
    pub fn is_local(&self) -> bool {
        self.domain.is_none()
    }

    /// The same certificate in the same trust domain's bundle.
    pub(super) fn same_as(&self, other: &Anchor) -> bool {
        self.der == other.der && self.domain == other.domain
    }
}

/// The effective trust: what peers are verified against right now.
#[derive(Debug)]
pub struct Trust {
    pub anchors: Vec<Anchor>,
    /// The root store of the source's own anchors.
    pub roots: Arc<RootCertStore>,
    /// One root store per federated trust domain (Workload API
    /// `federated_bundles`), so that one domain's CA never vouches for
    /// another's IDs. Empty for directory and file sources.
    pub federated: Arc<BTreeMap<String, RootCertStore>>,
    /// The CRLs in force (part of the trust: a changed CRL is a new trust).
    pub crls: Arc<CrlSet>,
    /// Which certificates of a chain the CRLs judge.
    pub scope: CrlScope,
    /// The known intermediate CAs (the `intermediates` file and our own
    /// `tls.crt` chain): CRL signers, never anchors.
    pub intermediates: Arc<[CertificateDer<'static>]>,
    /// Anchors no longer trusted at all, newest last, at most
    /// `MAX_RETIRED` (with the intermediates held before that expired).
    pub retired: Arc<[CertificateDer<'static>]>,
    /// Intermediates held before (an `intermediates` file or `tls.crt`
    /// chain of an earlier revision) that the one in force no longer
    /// lists and that have not expired: still CRL signers, since their
    /// certificates still chain to a root (an intermediate re-keyed under
    /// its own name), at most `MAX_RETIRED`.
    pub former: Arc<[CertificateDer<'static>]>,
    /// The deny-list in force (part of the trust: a changed list is a new
    /// trust, so nothing verified under the old one is reused).
    pub deny: Arc<DenyList>,
    provider: Arc<CryptoProvider>,
    memo: SigMemo,
}

impl Trust {
    /// The trust over these anchors and CRLs (no known intermediate, no
    /// retired anchor: see [`Trust::with_issuers`]).
    pub fn build(
        anchors: Vec<Anchor>,
        crls: Arc<CrlSet>,
        scope: CrlScope,
        provider: &Arc<CryptoProvider>,
    ) -> Result<Trust, CredError> {
        let local: Vec<_> = anchors
            .iter()
            .filter(|a| a.is_local())
            .map(|a| a.der.clone())
            .collect();
        let roots = Arc::new(super::root_store(std::path::Path::new("ca.crt"), &local)?);
        let federated = Arc::new(federated_roots(&anchors)?);
        Ok(Trust {
            anchors,
            roots,
            federated,
            crls,
            scope,
            intermediates: Arc::from(Vec::new()),
            retired: Arc::from(Vec::new()),
            former: Arc::from(Vec::new()),
            deny: Arc::new(DenyList::default()),
            provider: provider.clone(),
            memo: SigMemo::default(),
        })
    }

    /// The same trust knowing these intermediates and retired anchors.
    pub fn with_issuers(
        mut self,
        intermediates: Arc<[CertificateDer<'static>]>,
        retired: Arc<[CertificateDer<'static>]>,
    ) -> Trust {
        self.intermediates = intermediates;
        self.retired = retired;
        self
    }

    /// The same trust knowing these intermediates held before.
    pub fn with_former(mut self, former: Arc<[CertificateDer<'static>]>) -> Trust {
        self.former = former;
        self
    }

    /// The same trust with this deny-list.
    pub fn with_deny(mut self, deny: Arc<DenyList>) -> Trust {
        self.deny = deny;
        self
    }

    /// True when `other` holds a different deny-list.
    pub fn deny_differs(&self, other: &Trust) -> bool {
        self.deny != other.deny
    }

    /// The same anchors and CRLs judged with another scope.
    pub fn with_scope(
        &self,
        scope: CrlScope,
        provider: &Arc<CryptoProvider>,
    ) -> Result<Trust, CredError> {
        Ok(
            Trust::build(self.anchors.clone(), self.crls.clone(), scope, provider)?
                .with_issuers(self.intermediates.clone(), self.retired.clone())
                .with_former(self.former.clone())
                .with_deny(self.deny.clone()),
        )
    }

    /// The same trust with other CRLs.
    pub fn with_crls(&self, crls: Arc<CrlSet>) -> Result<Trust, CredError> {
        Ok(
            Trust::build(self.anchors.clone(), crls, self.scope, &self.provider)?
                .with_issuers(self.intermediates.clone(), self.retired.clone())
                .with_former(self.former.clone())
                .with_deny(self.deny.clone()),
        )
    }

    /// Every key a CRL may be signed by, with how trusted it is.
    pub(crate) fn known(&self) -> Known {
        let mut known = Known::default();
        // Only the source's own anchors sign its CRLs.
        let (graced, in_force): (Vec<&Anchor>, Vec<&Anchor>) = self
            .anchors
            .iter()
            .filter(|a| a.is_local())
            .partition(|a| a.retire_at.is_some());
        let ders = |v: Vec<&Anchor>| v.into_iter().map(|a| a.der.clone()).collect::<Vec<_>>();
        known.add(&ders(in_force), SignerKind::Anchor);
        known.add(&ders(graced), SignerKind::Graced);
        known.add(&self.intermediates, SignerKind::Intermediate);
        known.add(&self.former, SignerKind::Intermediate);
        known.add(&self.retired, SignerKind::Retired);
        known
    }

    /// THE peer judgement: `end_entity` (with the `intermediates` the peer
    /// sent) chains to an anchor for `usage` at `now`, no deny-list entry
    /// matches the path built (the failure is then [`crate::reason::Denied`],
    /// naming the entry), and the revocation judgement passes on it. The
    /// handshake in both directions, live re-verification, `check`,
    /// `/status` and `publish` all come here. The name is checked by the
    /// caller's SAN policy.
    pub fn verify_peer(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
        usage: Usage,
    ) -> Result<(), rustls::Error> {
        self.verify_peer_in(None, end_entity, intermediates, now, usage)
    }

    /// The root store that may vouch for a peer of `domain`: the source's
    /// own for `None`, that federated trust domain's otherwise (none for a
    /// trust domain without a bundle).
    pub fn roots_for(&self, domain: Option<&str>) -> Option<&RootCertStore> {
        match domain {
            None => Some(&self.roots),
            Some(td) => self.federated.get(td),
        }
    }

    /// True when a federated bundle of `domain` is in force (graced
    /// anchors included).
    pub fn has_domain(&self, domain: &str) -> bool {
        self.federated.contains_key(domain)
    }

    /// [`verify_peer`](Self::verify_peer) with the chain built only
    /// against `domain`'s root store (see [`roots_for`](Self::roots_for)):
    /// a trust domain without a bundle is an unknown issuer.
    pub fn verify_peer_in(
        &self,
        domain: Option<&str>,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
        usage: Usage,
    ) -> Result<(), rustls::Error> {
        let roots = self
            .roots_for(domain)
            .ok_or(rustls::Error::InvalidCertificate(
                CertificateError::UnknownIssuer,
            ))?;
        let ee = webpki::EndEntityCert::try_from(end_entity).map_err(pki_error)?;
        let denied: std::cell::RefCell<Option<DenyEntry>> = Default::default();
        let judge = |path: &webpki::VerifiedPath<'_>| {
            if let Some(entry) = self.denied_path(path) {
                *denied.borrow_mut() = Some(entry);
                // webpki then tries any other path the peer's
                // certificates allow; one without the entry is admitted.
                return Err(webpki::Error::CertDistrusted);
            }
            revocation::judge_path(&self.crls, self.scope, path, &self.memo, &self.provider)
        };
        let verdict = ee.verify_for_usage(
            self.provider.signature_verification_algorithms.all,
            &roots.roots,
            intermediates,
            now,
            usage.key_usage(),
            None,
            Some(&judge),
        );
        match verdict {
            Ok(_) => Ok(()),
            Err(webpki::Error::CertDistrusted) => match denied.into_inner() {
                Some(entry) => Err(denied_error(&entry)),
                None => Err(pki_error(webpki::Error::CertDistrusted)),
            },
            Err(e) => Err(pki_error(e)),
        }
    }

    /// The deny-list entry that matches a built path, if any.
    fn denied_path(&self, path: &webpki::VerifiedPath<'_>) -> Option<DenyEntry> {
        if self.deny.is_empty() {
            return None;
        }
        let anchor = revocation::key_hash(&revocation::wrap_sequence(
            path.anchor().subject_public_key_info.as_ref(),
        ));
        let facts = deny::path_facts(path, anchor, self.deny.has_sans());
        self.deny.first_match(&facts).cloned()
    }

    /// Our own certificate chain (leaf first) judged as a peer holding
    /// this trust would judge it (for serverAuth when the leaf allows it,
    /// else clientAuth), for `check` and `/status`.
    pub fn judge_own(
        &self,
        chain: &[CertificateDer<'static>],
        now: SystemTime,
    ) -> Result<(), rustls::Error> {
        let (ee, rest) = chain
            .split_first()
            .ok_or(rustls::Error::NoCertificatesPresented)?;
        let usage = match CertInfo::parse(ee) {
            Ok(info) if !info.server_auth => Usage::ClientAuth,
            _ => Usage::ServerAuth,
        };
        let now = UnixTime::since_unix_epoch(
            now.duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default(),
        );
        self.verify_peer(ee, rest, now, usage)
    }

    /// True when `other` holds different CRLs.
    pub fn crls_differ(&self, other: &Trust) -> bool {
        !self.crls.same_as(&other.crls)
    }

    /// The trust domains of the federated bundles in force, each with its
    /// anchors (graced ones included), in name order.
    pub fn federated_domains(&self) -> Vec<(&str, Vec<&Anchor>)> {
        self.federated
            .keys()
            .map(|td| {
                let anchors = self
                    .anchors
                    .iter()
                    .filter(|a| a.domain.as_deref() == Some(td))
                    .collect();
                (td.as_str(), anchors)
            })
            .collect()
    }

    /// The earliest expiry among the anchors (for the `trust` expiry gauge).
    pub fn earliest_not_after(&self) -> Option<i64> {
        self.anchors.iter().map(|a| a.info.not_after).min()
    }
}

/// One root store per trust domain of the federated anchors.
fn federated_roots(anchors: &[Anchor]) -> Result<BTreeMap<String, RootCertStore>, CredError> {
    let mut by_domain: BTreeMap<String, Vec<CertificateDer<'static>>> = BTreeMap::new();
    for a in anchors {
        if let Some(td) = &a.domain {
            by_domain.entry(td.clone()).or_default().push(a.der.clone());
        }
    }
    by_domain
        .into_iter()
        .map(|(td, ders)| {
            let path = std::path::PathBuf::from(format!("federated bundle of {td}"));
            Ok((td, super::root_store(&path, &ders)?))
        })
        .collect()
}

/// The handshake error of a denied peer (failure and close reason
/// `denied`).
fn denied_error(entry: &DenyEntry) -> rustls::Error {
    rustls::Error::InvalidCertificate(CertificateError::Other(rustls::OtherError(Arc::new(
        crate::reason::Denied {
            entry: entry.to_string(),
        },
    ))))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::{parse_deny, RawFile};
    use crate::pki::{CrlSpec, DevCa, LeafSpec, Role};
    use rustls_pki_types::pem::PemObject;

    fn trust(ca: &DevCa) -> Trust {
        let der = CertificateDer::from_pem_slice(ca.cert_pem.as_bytes()).unwrap();
        let info = CertInfo::parse(&der).unwrap();
        let anchors = Anchor::bundle(&[(der, info)]);
        let empty = Arc::new(CrlSet::empty());
        Trust::build(
            anchors,
            empty,
            CrlScope::Leaf,
            &crate::tls::provider::crypto_provider(),
        )
        .unwrap()
    }

    fn leaf(ca: &DevCa, name: &str, role: Role) -> Vec<CertificateDer<'static>> {
        vec![ca.issue(&LeafSpec::dns(name, role, 1)).unwrap().cert_der]
    }

    /// Our own chain is judged for the usage its leaf allows: a
    /// client-only leaf as a client, any other as a server; a chain to
    /// another CA, or none, is refused.
    #[test]
    fn our_own_chain_is_judged_for_the_usage_its_leaf_allows() {
        let ca = DevCa::new("own", 1).unwrap();
        let t = trust(&ca);
        let now = SystemTime::now();
        assert_eq!(t.judge_own(&leaf(&ca, "c.test", Role::Client), now), Ok(()));
        assert_eq!(t.judge_own(&leaf(&ca, "s.test", Role::Server), now), Ok(()));
        let other = DevCa::new("other", 1).unwrap();
        assert!(t
            .judge_own(&leaf(&other, "s.test", Role::Server), now)
            .is_err());
        assert!(t.judge_own(&[], now).is_err());
    }

    /// A deny entry refuses the path it matches, and a trust with another
    /// deny-list is a different trust.
    #[test]
    fn a_deny_entry_refuses_its_path_and_makes_a_different_trust() {
        let ca = DevCa::new("deny", 1).unwrap();
        let denied = trust(&ca).with_deny(Arc::new(parse_deny("san:bad.test\n").unwrap()));
        let now = UnixTime::now();
        let judge = |name: &str| {
            let chain = leaf(&ca, name, Role::Client);
            denied.verify_peer(&chain[0], &[], now, Usage::ClientAuth)
        };
        assert_eq!(judge("good.test"), Ok(()));
        assert!(judge("bad.test").is_err());
        assert!(denied.deny_differs(&trust(&ca)));
        assert!(!trust(&ca).deny_differs(&trust(&ca)));
    }

    /// The keys a CRL may be signed by include the anchors in force: a CRL
    /// of our CA is verified, not unknown.
    #[test]
    fn a_crl_of_an_anchor_in_force_is_verified() {
        let ca = DevCa::new("crl", 1).unwrap();
        let pem = ca.crl(&CrlSpec::new(1, Vec::new(), 7)).unwrap().pem;
        let file = RawFile {
            path: "ca.crl".into(),
            bytes: pem.into_bytes(),
        };
        let crls = revocation::parse_file(&file).unwrap();
        let t = trust(&ca);
        let c = revocation::classify(&crls, &t.known(), SystemTime::now(), &t.provider).unwrap();
        assert_eq!(c.set.entries()[0].state.label(), "verified");
    }
}

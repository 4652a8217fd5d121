//! Turning a raw revision into usable credentials, or a precise reason why
//! not: every file parses, the key matches the certificate, the certificate
//! is valid now and chains to the revision's own CA bundle. Parsing and
//! judging against a clock are separate steps, because only the second can
//! change its verdict while the files stay the same.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, UnixTime};

use super::revocation::{classify, parse_file, Crl};
use super::source::{RawFile, RawRevision};
use super::{Anchor, CredError, CrlSet, DenyList, Trust};
use crate::identity::{time_to_epoch, CertInfo};

/// A revision that passed validation: ready to be swapped in.
#[derive(Debug, Clone)]
pub struct ValidRevision {
    pub hash: String,
    pub identity: Arc<CertifiedKey>,
    pub leaf: CertInfo,
    /// The CA bundle's certificates with their parsed facts, in file order.
    pub anchors: Vec<(CertificateDer<'static>, CertInfo)>,
    /// The revision's CRLs, classified against its own anchors and
    /// intermediates alone (empty without a CRL file). The store
    /// classifies [`crl_list`](Self::crl_list) again against the trust in
    /// force.
    pub crls: Arc<CrlSet>,
    /// The revision's CRLs as parsed.
    pub crl_list: Arc<[Arc<Crl>]>,
    /// The known intermediate CAs: the `intermediates` file and the chain
    /// of `tls.crt` (never an anchor).
    pub intermediates: Arc<[CertificateDer<'static>]>,
    /// The CRL file, when there is one.
    pub crl_path: Option<PathBuf>,
    /// The deny-list (empty without a deny file).
    pub deny: Arc<DenyList>,
    /// Federated bundles: each trust domain with its anchors.
    pub federated: Arc<[FederatedBundle]>,
}

/// One federated trust domain's bundle, parsed (it may hold no anchor).
pub type FederatedBundle = (String, Vec<(CertificateDer<'static>, CertInfo)>);

/// Parses every PEM certificate in a file.
pub fn parse_certs(file: &RawFile) -> Result<Vec<CertificateDer<'static>>, CredError> {
    let certs = CertificateDer::pem_slice_iter(&file.bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CredError::Pem {
            path: file.path.clone(),
            detail: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(CredError::Pem {
            path: file.path.clone(),
            detail: "no PEM CERTIFICATE block found".into(),
        });
    }
    Ok(certs)
}

/// Parses the PEM private key (PKCS#8, SEC1 or PKCS#1).
pub fn parse_key(file: &RawFile) -> Result<PrivateKeyDer<'static>, CredError> {
    PrivateKeyDer::from_pem_slice(&file.bytes).map_err(|e| CredError::Pem {
        path: file.path.clone(),
        detail: format!("no usable private key: {e}"),
    })
}

fn parse_info(file: &RawFile, der: &CertificateDer<'_>) -> Result<CertInfo, CredError> {
    CertInfo::parse(der).map_err(|e| CredError::Parse {
        path: file.path.clone(),
        detail: e.to_string(),
    })
}

/// Builds a root store from the bundle, naming the file on failure.
pub fn root_store(
    file_path: &std::path::Path,
    anchors: &[CertificateDer<'static>],
) -> Result<RootCertStore, CredError> {
    let mut roots = RootCertStore::empty();
    for (i, der) in anchors.iter().enumerate() {
        roots.add(der.clone()).map_err(|e| CredError::Parse {
            path: file_path.to_path_buf(),
            detail: format!("certificate #{} is not a usable trust anchor: {e}", i + 1),
        })?;
    }
    Ok(roots)
}

/// A revision that parsed and hangs together (every file parses, the key
/// matches the certificate, the bundle is usable) but has not been judged
/// against a clock yet. Everything here is independent of time, so the
/// store parses a revision once and re-judges only the time-dependent part
/// on later polls.
#[derive(Debug, Clone)]
pub struct ParsedRevision {
    pub hash: String,
    pub identity: Arc<CertifiedKey>,
    pub leaf: CertInfo,
    pub anchors: Vec<(CertificateDer<'static>, CertInfo)>,
    pub crl_list: Arc<[Arc<Crl>]>,
    pub intermediates: Arc<[CertificateDer<'static>]>,
    pub deny: Arc<DenyList>,
    pub federated: Arc<[FederatedBundle]>,
    crl_path: Option<PathBuf>,
    chain: Vec<CertificateDer<'static>>,
    roots: RootCertStore,
    cert_path: PathBuf,
    ca_path: PathBuf,
}

/// Parses a whole revision: everything validation checks except time.
pub fn parse(raw: &RawRevision, provider: &CryptoProvider) -> Result<ParsedRevision, CredError> {
    let chain = parse_certs(&raw.cert)?;
    let key = parse_key(&raw.key)?;
    let ca = parse_certs(&raw.ca)?;
    let leaf = parse_info(&raw.cert, &chain[0])?;
    let mut anchors = Vec::with_capacity(ca.len());
    for der in &ca {
        anchors.push((der.clone(), parse_info(&raw.ca, der)?));
    }
    let identity = CertifiedKey::from_der(chain.clone(), key, provider).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => CredError::KeyMismatch {
            cert: raw.cert.path.clone(),
            key: raw.key.path.clone(),
        },
        other => CredError::Pem {
            path: raw.key.path.clone(),
            detail: format!("unusable private key: {other}"),
        },
    })?;
    let roots = root_store(&raw.ca.path, &ca)?;
    let crl_list = match &raw.crl {
        Some(file) => parse_file(file)?,
        None => Vec::new(),
    };
    let intermediates = known_intermediates(raw.intermediates.as_ref(), &chain, &ca)?;
    let deny = match &raw.deny {
        Some(file) => parse_deny_file(file)?,
        None => DenyList::default(),
    };
    let federated = parse_federated(&raw.federated)?;
    Ok(ParsedRevision {
        hash: raw.hash.clone(),
        identity: Arc::new(identity),
        leaf,
        anchors,
        crl_list: Arc::from(crl_list),
        intermediates,
        deny: Arc::new(deny),
        federated,
        crl_path: raw.crl.as_ref().map(|f| f.path.clone()),
        chain,
        roots,
        cert_path: raw.cert.path.clone(),
        ca_path: raw.ca.path.clone(),
    })
}

/// Parses the federated bundles: every certificate parses and is a usable
/// trust anchor (one that is not rejects the whole revision, naming its
/// trust domain); a bundle may be empty (the trust domain then vouches for
/// nobody).
fn parse_federated(files: &[(String, RawFile)]) -> Result<Arc<[FederatedBundle]>, CredError> {
    let mut out = Vec::with_capacity(files.len());
    for (td, file) in files {
        let ders = CertificateDer::pem_slice_iter(&file.bytes)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| CredError::Pem {
                path: file.path.clone(),
                detail: e.to_string(),
            })?;
        let mut anchors = Vec::with_capacity(ders.len());
        for der in &ders {
            anchors.push((der.clone(), parse_info(file, der)?));
        }
        root_store(&file.path, &ders)?;
        out.push((td.clone(), anchors));
    }
    Ok(Arc::from(out))
}

/// Parses a deny file (UTF-8, validated whole), naming the file and the
/// line on failure.
pub fn parse_deny_file(file: &RawFile) -> Result<DenyList, CredError> {
    let fail = |error| CredError::Deny {
        path: file.path.clone(),
        error,
    };
    let text = std::str::from_utf8(&file.bytes).map_err(|e| {
        let line = 1 + file.bytes[..e.valid_up_to()]
            .iter()
            .filter(|b| **b == b'\n')
            .count();
        fail(super::DenyError {
            line,
            detail: "not UTF-8 text".into(),
        })
    })?;
    super::parse_deny(text).map_err(fail)
}

/// The intermediates file's certificates and our own chain's (past the
/// leaf), without any that is also an anchor, without duplicates.
fn known_intermediates(
    file: Option<&RawFile>,
    chain: &[CertificateDer<'static>],
    anchors: &[CertificateDer<'static>],
) -> Result<Arc<[CertificateDer<'static>]>, CredError> {
    let listed = match file {
        Some(f) => {
            let certs = parse_certs(f)?;
            for der in &certs {
                parse_info(f, der)?;
            }
            certs
        }
        None => Vec::new(),
    };
    let mut out: Vec<CertificateDer<'static>> = Vec::new();
    for der in listed.into_iter().chain(chain.iter().skip(1).cloned()) {
        if !anchors.contains(&der) && !out.contains(&der) {
            out.push(der);
        }
    }
    Ok(Arc::from(out))
}

impl ParsedRevision {
    /// The revision's CRLs classified against its own anchors and
    /// intermediates at `now` (no earlier revision). This view knows no
    /// CA that left the trust, so it refuses no CRL for its signature (a
    /// CRL of a previous key of a CA is `unverified` here): the store, and
    /// [`ValidRevision::starting_trust`], judge that.
    pub fn own_crls(
        &self,
        provider: &Arc<CryptoProvider>,
        now: SystemTime,
    ) -> Result<CrlSet, CredError> {
        if self.crl_list.is_empty() {
            return Ok(CrlSet::empty());
        }
        let trust = bare_trust(&self.anchors, &self.intermediates, provider)?;
        let known = trust.known().partial();
        Ok(classify(&self.crl_list, &known, now, provider)?.set)
    }

    /// Judges the revision at `now`: the leaf's validity window, then the
    /// chain to the bundle (which also judges any intermediate's window).
    /// Costs one chain verification (a signature check or two); nothing is
    /// parsed again.
    pub fn judge(
        &self,
        provider: &Arc<CryptoProvider>,
        now: SystemTime,
    ) -> Result<ValidRevision, CredError> {
        let now_secs = time_to_epoch(now);
        if now_secs < self.leaf.not_before {
            return Err(CredError::NotYetValid {
                path: self.cert_path.clone(),
                not_before: self.leaf.not_before,
            });
        }
        if now_secs > self.leaf.not_after {
            return Err(CredError::Expired {
                path: self.cert_path.clone(),
                not_after: self.leaf.not_after,
            });
        }
        chain_error(&self.chain, &self.roots, provider, now).map_err(|e| match e {
            webpki::Error::CertNotValidYet { not_before, .. } => CredError::ChainNotYetValid {
                cert: self.cert_path.clone(),
                not_before: secs(not_before),
            },
            webpki::Error::CertExpired { not_after, .. } => CredError::ChainExpired {
                cert: self.cert_path.clone(),
                not_after: secs(not_after),
            },
            other => CredError::Chain {
                cert: self.cert_path.clone(),
                ca: self.ca_path.clone(),
                detail: describe(other),
            },
        })?;
        let crls = self.own_crls(provider, now)?;
        Ok(ValidRevision {
            hash: self.hash.clone(),
            identity: self.identity.clone(),
            leaf: self.leaf.clone(),
            anchors: self.anchors.clone(),
            crls: Arc::new(crls),
            crl_list: self.crl_list.clone(),
            intermediates: self.intermediates.clone(),
            crl_path: self.crl_path.clone(),
            deny: self.deny.clone(),
            federated: self.federated.clone(),
        })
    }
}

impl ValidRevision {
    /// The trust a sidecar starting on this revision holds at `now` (no
    /// earlier revision, no CA in its grace): its anchors, intermediates
    /// and CRLs. `Err` when a CRL may not load, e.g. one that names a CA
    /// of the revision but that no key of that name verifies.
    pub fn starting_trust(
        &self,
        provider: &Arc<CryptoProvider>,
        now: SystemTime,
    ) -> Result<Trust, CredError> {
        let bare = bare_trust(&self.anchors, &self.intermediates, provider)?;
        let crls = classify(&self.crl_list, &bare.known(), now, provider)?;
        bare.with_crls(Arc::new(crls.set))
            .map(|t| t.with_deny(self.deny.clone()))
    }
}

/// The trust over a revision's own anchors and intermediates, without
/// CRLs (no CA in its grace, none retired).
fn bare_trust(
    anchors: &[(CertificateDer<'static>, CertInfo)],
    intermediates: &Arc<[CertificateDer<'static>]>,
    provider: &Arc<CryptoProvider>,
) -> Result<Trust, CredError> {
    Ok(Trust::build(
        Anchor::bundle(anchors),
        Arc::new(CrlSet::empty()),
        super::CrlScope::default(),
        provider,
    )?
    .with_issuers(intermediates.clone(), Arc::from(Vec::new())))
}

fn secs(t: UnixTime) -> i64 {
    i64::try_from(t.as_secs()).unwrap_or(i64::MAX)
}

/// Validates a whole revision against `now`.
pub fn validate(
    raw: &RawRevision,
    provider: &Arc<CryptoProvider>,
    now: SystemTime,
) -> Result<ValidRevision, CredError> {
    parse(raw, provider)?.judge(provider, now)
}

/// Checks that `chain[0]` chains to `roots` for server or client use.
pub fn verify_chain(
    chain: &[CertificateDer<'static>],
    roots: &RootCertStore,
    provider: &CryptoProvider,
    now: SystemTime,
) -> Result<(), String> {
    chain_error(chain, roots, provider, now).map_err(describe)
}

/// Like [`verify_chain`], keeping webpki's error so a caller can tell a
/// time-dependent failure from a permanent one.
fn chain_error(
    chain: &[CertificateDer<'static>],
    roots: &RootCertStore,
    provider: &CryptoProvider,
    now: SystemTime,
) -> Result<(), webpki::Error> {
    let first = chain.first().ok_or(webpki::Error::BadDer)?;
    let ee = webpki::EndEntityCert::try_from(first)?;
    let now = UnixTime::since_unix_epoch(
        now.duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default(),
    );
    let algs = provider.signature_verification_algorithms.all;
    let try_usage = |usage| {
        ee.verify_for_usage(algs, &roots.roots, &chain[1..], now, usage, None, None)
            .map(|_| ())
    };
    let server_err = match try_usage(webpki::KeyUsage::server_auth()) {
        Ok(()) => return Ok(()),
        Err(e) => e,
    };
    let client_err = match try_usage(webpki::KeyUsage::client_auth()) {
        Ok(()) => return Ok(()),
        Err(e) => e,
    };
    // Report the attempt that got further: an EKU mismatch only says the
    // certificate is meant for the other usage, not why that one failed.
    Err(match client_err {
        webpki::Error::RequiredEkuNotFoundContext(_) => server_err,
        other => other,
    })
}

fn describe(e: webpki::Error) -> String {
    match e {
        webpki::Error::UnknownIssuer => {
            "not issued by any certificate in the CA bundle".to_string()
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::{CrlSpec, DevCa, LeafSpec, Role};

    fn file(name: &str, bytes: impl Into<Vec<u8>>) -> RawFile {
        RawFile {
            path: name.into(),
            bytes: bytes.into(),
        }
    }

    fn der(ca: &DevCa) -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(ca.cert_pem.as_bytes()).unwrap()
    }

    /// A deny file's entries are parsed; bytes that are not UTF-8 are
    /// refused naming their line.
    #[test]
    fn a_deny_file_is_parsed_and_bad_bytes_are_named_by_line() {
        let list = parse_deny_file(&file("deny", "san:spiffe://td/x\n")).unwrap();
        assert_eq!(list.entries().len(), 1);
        let err = parse_deny_file(&file("deny", b"# a\n# b\n\xff\n".to_vec())).unwrap_err();
        assert!(err.to_string().contains("line 3"), "{err}");
        assert!(err.to_string().contains("not UTF-8"), "{err}");
    }

    /// Known intermediates: the file's and our chain's past the leaf, in
    /// that order, without an anchor and without repeats.
    #[test]
    fn known_intermediates_leave_out_anchors_and_repeats() {
        let root = DevCa::new("root", 1).unwrap();
        let (one, two) = (
            root.intermediate("one", 1).unwrap(),
            root.intermediate("two", 1).unwrap(),
        );
        let pem = format!("{}{}{}", one.cert_pem, root.cert_pem, one.cert_pem);
        let leaf = two
            .issue(&LeafSpec::dns("x.test", Role::Server, 1))
            .unwrap();
        let chain = [leaf.cert_der, der(&two), der(&root)];
        let got =
            known_intermediates(Some(&file("intermediates", pem)), &chain, &[der(&root)]).unwrap();
        assert_eq!(&*got, &[der(&one), der(&two)]);
    }

    /// A revision with a CRL classifies it against its own anchors.
    #[test]
    fn a_revisions_own_crls_are_classified() {
        let ca = DevCa::new("ca", 1).unwrap();
        let leaf = ca.issue(&LeafSpec::dns("x.test", Role::Server, 1)).unwrap();
        let crl = ca.crl(&CrlSpec::new(1, Vec::new(), 7)).unwrap().pem;
        let raw = RawRevision::with_crl(
            file("tls.crt", leaf.cert_pem),
            file("tls.key", leaf.key_pem),
            file("ca.crt", ca.cert_pem.clone()),
            Some(file("ca.crl", crl)),
        );
        let provider = crate::tls::provider::crypto_provider();
        let parsed = parse(&raw, &provider).unwrap();
        let crls = parsed.own_crls(&provider, SystemTime::now()).unwrap();
        assert_eq!(crls.entries().len(), 1);
        assert_eq!(crls.entries()[0].state.label(), "verified");
    }
}

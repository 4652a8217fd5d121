//! Turning a raw revision into usable credentials, or a precise reason why
//! not: every file parses, the key matches the certificate, the certificate
//! is valid now and chains to the revision's own CA bundle.

use std::sync::Arc;
use std::time::SystemTime;

use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, UnixTime};

use super::source::{RawFile, RawRevision};
use super::CredError;
use crate::identity::{time_to_epoch, CertInfo};

/// A revision that passed validation: ready to be swapped in.
#[derive(Debug, Clone)]
pub struct ValidRevision {
    pub hash: String,
    pub identity: Arc<CertifiedKey>,
    pub leaf: CertInfo,
    /// The CA bundle's certificates with their parsed facts, in file order.
    pub anchors: Vec<(CertificateDer<'static>, CertInfo)>,
}

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

/// Validates a whole revision against `now`.
pub fn validate(
    raw: &RawRevision,
    provider: &CryptoProvider,
    now: SystemTime,
) -> Result<ValidRevision, CredError> {
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
    let now_secs = time_to_epoch(now);
    if now_secs < leaf.not_before {
        return Err(CredError::NotYetValid {
            path: raw.cert.path.clone(),
            not_before: leaf.not_before,
        });
    }
    if now_secs > leaf.not_after {
        return Err(CredError::Expired {
            path: raw.cert.path.clone(),
            not_after: leaf.not_after,
        });
    }
    let roots = root_store(&raw.ca.path, &ca)?;
    verify_chain(&chain, &roots, provider, now).map_err(|detail| CredError::Chain {
        cert: raw.cert.path.clone(),
        ca: raw.ca.path.clone(),
        detail,
    })?;
    Ok(ValidRevision {
        hash: raw.hash.clone(),
        identity: Arc::new(identity),
        leaf,
        anchors,
    })
}

/// Checks that `chain[0]` chains to `roots` for server or client use.
pub fn verify_chain(
    chain: &[CertificateDer<'static>],
    roots: &RootCertStore,
    provider: &CryptoProvider,
    now: SystemTime,
) -> Result<(), String> {
    let ee = webpki::EndEntityCert::try_from(&chain[0]).map_err(|e| e.to_string())?;
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
    let e = match client_err {
        webpki::Error::RequiredEkuNotFoundContext(_) => server_err,
        other => other,
    };
    Err(match e {
        webpki::Error::UnknownIssuer => {
            "not issued by any certificate in the CA bundle".to_string()
        }
        other => other.to_string(),
    })
}

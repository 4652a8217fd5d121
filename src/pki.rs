//! A development PKI in process (rcgen): an ECDSA P-256 CA and leaves with
//! role SANs and explicit usages. Backs `mtls-sidecar certs`, the demo, and
//! the tests, so nobody needs openssl or a script.

use std::path::Path;
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, CertificateRevocationListParams, DistinguishedName,
    DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyIdMethod, KeyPair, KeyUsagePurpose,
    RevokedCertParams, SanType, SerialNumber,
};

/// The role a leaf is issued for lives with the other identity facts.
pub use crate::identity::Role;

/// A certificate authority whose key is in memory.
pub struct DevCa {
    issuer: Issuer<'static, KeyPair>,
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for DevCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevCa").finish_non_exhaustive()
    }
}

/// What to put in a leaf certificate.
#[derive(Debug, Clone)]
pub struct LeafSpec {
    pub common_name: String,
    pub dns: Vec<String>,
    pub uris: Vec<String>,
    pub role: Role,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
}

impl LeafSpec {
    /// A leaf valid from a minute ago for `days`, with one DNS SAN.
    pub fn dns(name: &str, role: Role, days: u32) -> LeafSpec {
        let now = SystemTime::now();
        LeafSpec {
            common_name: name.to_string(),
            dns: vec![name.to_string()],
            uris: Vec::new(),
            role,
            not_before: now - Duration::from_secs(60),
            not_after: now + Duration::from_secs(u64::from(days) * 86_400),
        }
    }

    /// The same leaf with another validity window.
    pub fn valid(mut self, not_before: SystemTime, not_after: SystemTime) -> LeafSpec {
        self.not_before = not_before;
        self.not_after = not_after;
        self
    }
}

/// An issued leaf: PEM for files, DER for in-process use.
#[derive(Debug, Clone)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
    pub cert_der: rustls_pki_types::CertificateDer<'static>,
}

fn random_serial() -> SerialNumber {
    let mut bytes = [0u8; 16];
    // The system RNG failing is not recoverable; an all-zero-but-one serial
    // would still be a valid (if unlucky) certificate, so fall back quietly.
    let _ = aws_lc_rs::rand::fill(&mut bytes);
    bytes[0] &= 0x7f;
    bytes[0] |= 0x01;
    SerialNumber::from_slice(&bytes)
}

fn offset(t: SystemTime) -> time::OffsetDateTime {
    time::OffsetDateTime::from(t)
}

impl DevCa {
    /// Mints a self-signed CA valid from a minute ago for `days`.
    pub fn new(name: &str, days: u32) -> Result<DevCa, rcgen::Error> {
        let now = SystemTime::now();
        DevCa::with_validity(
            name,
            now - Duration::from_secs(60),
            now + Duration::from_secs(u64::from(days) * 86_400),
        )
    }

    /// Mints a self-signed CA with an explicit validity window.
    pub fn with_validity(
        name: &str,
        not_before: SystemTime,
        not_after: SystemTime,
    ) -> Result<DevCa, rcgen::Error> {
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name);
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.not_before = offset(not_before);
        params.not_after = offset(not_after);
        params.serial_number = Some(random_serial());
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        let key_pem = key.serialize_pem();
        Ok(DevCa {
            cert_pem: cert.pem(),
            key_pem,
            issuer: Issuer::new(params, key),
        })
    }

    /// Mints an intermediate CA signed by this one, valid from a minute ago
    /// for `days`. Its leaves chain to this CA when the intermediate is sent
    /// along.
    pub fn intermediate(&self, name: &str, days: u32) -> Result<DevCa, rcgen::Error> {
        let now = SystemTime::now();
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name);
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.use_authority_key_identifier_extension = true;
        params.not_before = offset(now - Duration::from_secs(60));
        params.not_after = offset(now + Duration::from_secs(u64::from(days) * 86_400));
        params.serial_number = Some(random_serial());
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        let key_pem = key.serialize_pem();
        Ok(DevCa {
            cert_pem: cert.pem(),
            key_pem,
            issuer: Issuer::new(params, key),
        })
    }

    /// Loads a CA written by `certs init` (or any CA cert and PKCS#8 key).
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<DevCa, rcgen::Error> {
        let key = KeyPair::from_pem(key_pem)?;
        let issuer = Issuer::from_ca_cert_pem(cert_pem, key)?;
        Ok(DevCa {
            issuer,
            cert_pem: cert_pem.to_string(),
            key_pem: key_pem.to_string(),
        })
    }

    /// Issues a leaf with a fresh ECDSA P-256 key.
    pub fn issue(&self, spec: &LeafSpec) -> Result<Issued, rcgen::Error> {
        self.issue_with_crl_urls(spec, &[])
    }

    /// Issues a leaf whose CRL Distribution Points extension names
    /// `crl_urls` (none: no extension).
    pub fn issue_with_crl_urls(
        &self,
        spec: &LeafSpec,
        crl_urls: &[&str],
    ) -> Result<Issued, rcgen::Error> {
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, spec.common_name.as_str());
        params.distinguished_name = dn;
        let mut sans = Vec::new();
        for d in &spec.dns {
            sans.push(SanType::DnsName(d.as_str().try_into()?));
        }
        for u in &spec.uris {
            sans.push(SanType::URI(u.as_str().try_into()?));
        }
        params.subject_alt_names = sans;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = match spec.role {
            Role::Server => vec![ExtendedKeyUsagePurpose::ServerAuth],
            Role::Client => vec![ExtendedKeyUsagePurpose::ClientAuth],
            Role::Both => vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        };
        if !crl_urls.is_empty() {
            params.crl_distribution_points = vec![rcgen::CrlDistributionPoint {
                uris: crl_urls.iter().map(|u| u.to_string()).collect(),
            }];
        }
        params.use_authority_key_identifier_extension = true;
        params.not_before = offset(spec.not_before);
        params.not_after = offset(spec.not_after);
        params.serial_number = Some(random_serial());
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert_der: cert.der().clone(),
        })
    }
}

/// What to put in a CRL.
#[derive(Debug, Clone)]
pub struct CrlSpec {
    /// The CRL number (big-endian, unsigned).
    pub number: Vec<u8>,
    /// The serials revoked now, at `this_update` (big-endian bytes, as in
    /// the certificates).
    pub serials: Vec<Vec<u8>>,
    /// Serials revoked earlier, with their revocation time (an extended CRL
    /// keeps its entries).
    pub kept: Vec<(Vec<u8>, SystemTime)>,
    pub this_update: SystemTime,
    pub next_update: SystemTime,
    /// An Issuing Distribution Point (scope), when set.
    pub idp: Option<CrlIdp>,
}

/// A CRL's Issuing Distribution Point: its full-name URIs and whether it
/// covers only end entities or only CAs.
#[derive(Debug, Clone, Default)]
pub struct CrlIdp {
    pub urls: Vec<String>,
    pub only_user: bool,
    pub only_ca: bool,
}

impl CrlSpec {
    /// CRL number `number` revoking `serials`, issued a minute ago, next
    /// update in `days`.
    pub fn new(number: u64, serials: Vec<Vec<u8>>, days: u32) -> CrlSpec {
        let now = SystemTime::now();
        CrlSpec {
            number: number.to_be_bytes().to_vec(),
            serials,
            kept: Vec::new(),
            this_update: now - Duration::from_secs(60),
            next_update: now + Duration::from_secs(u64::from(days) * 86_400),
            idp: None,
        }
    }
}

/// A signed CRL.
#[derive(Debug, Clone)]
pub struct IssuedCrl {
    pub pem: String,
    pub der: Vec<u8>,
}

/// A certificate's serial number as its big-endian bytes (what a CRL
/// lists), or `None` when the certificate does not parse.
pub fn serial_of(cert: &rustls_pki_types::CertificateDer<'_>) -> Option<Vec<u8>> {
    use x509_parser::prelude::FromDer;
    let (_, c) = x509_parser::certificate::X509Certificate::from_der(cert.as_ref()).ok()?;
    Some(c.raw_serial().to_vec())
}

impl DevCa {
    /// Signs a CRL (v2, with a CRL number) with this CA's key.
    pub fn crl(&self, spec: &CrlSpec) -> Result<IssuedCrl, rcgen::Error> {
        let revoked_certs = spec
            .kept
            .iter()
            .map(|(s, at)| (s, *at))
            .chain(spec.serials.iter().map(|s| (s, spec.this_update)))
            .map(|(s, at)| RevokedCertParams {
                serial_number: SerialNumber::from_slice(s),
                revocation_time: offset(at),
                reason_code: None,
                invalidity_date: None,
            })
            .collect();
        let params = CertificateRevocationListParams {
            this_update: offset(spec.this_update),
            next_update: offset(spec.next_update),
            crl_number: SerialNumber::from_slice(&spec.number),
            issuing_distribution_point: spec.idp.as_ref().map(|idp| {
                rcgen::CrlIssuingDistributionPoint {
                    distribution_point: rcgen::CrlDistributionPoint {
                        uris: idp.urls.clone(),
                    },
                    scope: match (idp.only_user, idp.only_ca) {
                        (true, _) => Some(rcgen::CrlScope::UserCertsOnly),
                        (_, true) => Some(rcgen::CrlScope::CaCertsOnly),
                        _ => None,
                    },
                }
            }),
            revoked_certs,
            key_identifier_method: KeyIdMethod::Sha256,
        };
        let crl = params.signed_by(&self.issuer)?;
        Ok(IssuedCrl {
            pem: crl.pem()?,
            der: crl.der().to_vec(),
        })
    }
}

/// Writes `tls.crt`, `tls.key` (mode 0600) and `ca.crt` into `dir` — the
/// layout of a `kubernetes.io/tls` Secret with its CA.
pub fn write_secret_dir(dir: &Path, leaf: &Issued, ca_pem: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("tls.crt"), &leaf.cert_pem)?;
    write_private(&dir.join("tls.key"), leaf.key_pem.as_bytes())?;
    std::fs::write(dir.join("ca.crt"), ca_pem)
}

/// Writes a file readable by its owner only.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)
}

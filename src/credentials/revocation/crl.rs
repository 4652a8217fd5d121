//! Reading a CRL file (`ca.crl`, or `--crl FILE`) into parsed CRLs: every
//! PEM `X509 CRL` block, or DER back to back; each parsed by rustls-webpki
//! (the parser that enforces it) and described for people by x509-parser.
//!
//! webpki refuses, at parse, the CRLs this product does not support:
//! indirect CRLs, CRLs partitioned by revocation reason
//! (onlySomeReasons), attribute-certificate CRLs, and Issuing Distribution
//! Points without a full name. Such a file is an error naming the file and
//! the CRL, never a CRL silently ignored.

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateRevocationListDer;
use serde::Serialize;
use webpki::{CertRevocationList, OwnedCertRevocationList};
use x509_parser::asn1_rs::Any;
use x509_parser::num_bigint::BigUint;
use x509_parser::prelude::FromDer;
use x509_parser::revocation_list::CertificateRevocationList;

use super::scope::Idp;
use crate::credentials::source::RawFile;
use crate::credentials::CredError;

/// How many CRLs one file may hold: far more than any deployment needs
/// (one per issuing CA key), and a bound on the work a revision costs.
pub const MAX_CRLS: usize = 64;

/// What `/status` and the logs say about one CRL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CrlInfo {
    /// The issuer's distinguished name.
    pub issuer: String,
    /// The CRL number, in decimal, when the CRL has one.
    pub number: Option<String>,
    /// thisUpdate, epoch seconds.
    pub this_update: i64,
    /// nextUpdate, epoch seconds (webpki requires it).
    pub next_update: Option<i64>,
    /// How many serials it revokes.
    pub revoked: usize,
    #[serde(skip)]
    number_value: Option<BigUint>,
}

impl CrlInfo {
    /// True when its nextUpdate is at or before `now_secs`.
    pub fn is_stale(&self, now_secs: i64) -> bool {
        self.next_update.is_some_and(|n| n <= now_secs)
    }

    /// The CRL number as big-endian bytes, when there is one.
    pub fn number_bytes(&self) -> Option<Vec<u8>> {
        self.number_value.as_ref().map(BigUint::to_bytes_be)
    }

    /// The CRL number, when there is one.
    pub(crate) fn number_value(&self) -> Option<&BigUint> {
        self.number_value.as_ref()
    }

    /// How a CRL is named in a message: its number, else its thisUpdate.
    pub fn version(&self) -> String {
        match &self.number {
            Some(n) => format!("CRL number {n}"),
            None => format!(
                "thisUpdate {}",
                crate::credentials::fmt_time(self.this_update)
            ),
        }
    }
}

/// One parsed CRL: what webpki looks serials up in, its scope, and its
/// description. Immutable; shared between the trusts that hold it.
#[derive(Debug)]
pub struct Crl {
    pub info: CrlInfo,
    pub(crate) list: CertRevocationList<'static>,
    pub(crate) der: CertificateRevocationListDer<'static>,
    /// The Issuing Distribution Point; `None`: the CRL covers every
    /// certificate of its issuer.
    pub(crate) idp: Option<Idp>,
    /// The serials it lists, big-endian, sorted.
    pub(crate) serials: Vec<Vec<u8>>,
    /// The file it came from.
    pub(crate) path: std::path::PathBuf,
}

impl Crl {
    /// The issuer's name as webpki holds it (the Name's contents).
    pub(crate) fn issuer(&self) -> &[u8] {
        self.list.issuer()
    }

    /// The CRL's DER.
    pub fn der(&self) -> &[u8] {
        self.der.as_ref()
    }

    /// Every revoked entry: (serial bytes, revocation time in epoch
    /// seconds).
    pub fn revoked_entries(&self) -> Vec<(Vec<u8>, i64)> {
        CertificateRevocationList::from_der(self.der.as_ref())
            .map(|(_, crl)| {
                crl.iter_revoked_certificates()
                    .map(|r| (r.raw_serial().to_vec(), r.revocation_date.timestamp()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// True when it lists `serial`. A malformed entry (webpki checked them
    /// all at parse, so none should remain) counts as listed: fail closed.
    pub(crate) fn lists(&self, serial: &[u8]) -> bool {
        !matches!(self.list.find_serial(serial), Ok(None))
    }
}

/// Parses every CRL of a file. Errors name the file and the CRL.
pub fn parse_file(file: &RawFile) -> Result<Vec<Arc<Crl>>, CredError> {
    let ders = split(file)?;
    if ders.len() > MAX_CRLS {
        return Err(crl_parse(
            &file.path,
            format!("{} CRLs; at most {MAX_CRLS}", ders.len()),
        ));
    }
    ders.into_iter()
        .enumerate()
        .map(|(i, der)| {
            let at = |detail: String| crl_parse(&file.path, format!("CRL #{}: {detail}", i + 1));
            let owned = OwnedCertRevocationList::from_der(der.as_ref())
                .map_err(|e| at(format!("not a usable CRL: {e:?}")))?;
            let (_, parsed) = CertificateRevocationList::from_der(der.as_ref())
                .map_err(|e| at(format!("not a usable CRL: {e}")))?;
            let idp = super::scope::idp_of(&parsed)
                .map_err(|e| at(format!("from {}: {e}", parsed.issuer())))?;
            let mut serials: Vec<Vec<u8>> = parsed
                .iter_revoked_certificates()
                .map(|r| r.raw_serial().to_vec())
                .collect();
            serials.sort();
            Ok(Arc::new(Crl {
                info: describe(&parsed),
                list: owned.into(),
                der,
                idp,
                serials,
                path: file.path.clone(),
            }))
        })
        .collect()
}

pub(crate) fn crl_parse(path: &Path, detail: String) -> CredError {
    CredError::CrlParse {
        path: path.to_path_buf(),
        detail,
    }
}

/// The CRLs of a file: every PEM `X509 CRL` block, or DER (one CRL, or
/// several back to back).
fn split(file: &RawFile) -> Result<Vec<CertificateRevocationListDer<'static>>, CredError> {
    let bytes = &file.bytes;
    if bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        let crls = CertificateRevocationListDer::pem_slice_iter(bytes)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| CredError::Pem {
                path: file.path.clone(),
                detail: e.to_string(),
            })?;
        if crls.is_empty() {
            return Err(CredError::Pem {
                path: file.path.clone(),
                detail: "no PEM X509 CRL block found".into(),
            });
        }
        return Ok(crls);
    }
    let mut out = Vec::new();
    let mut rest: &[u8] = bytes;
    while !rest.is_empty() && out.len() <= MAX_CRLS {
        let (after, _) = Any::from_der(rest).map_err(|e| {
            crl_parse(
                &file.path,
                format!("neither PEM nor DER (CRL #{}): {e}", out.len() + 1),
            )
        })?;
        let len = rest.len() - after.len();
        out.push(CertificateRevocationListDer::from(rest[..len].to_vec()));
        rest = after;
    }
    Ok(out)
}

fn describe(crl: &CertificateRevocationList<'_>) -> CrlInfo {
    let number_value = crl.crl_number().cloned();
    CrlInfo {
        issuer: crl.issuer().to_string(),
        number: number_value.as_ref().map(BigUint::to_string),
        this_update: crl.last_update().timestamp(),
        next_update: crl.next_update().map(|t| t.timestamp()),
        revoked: crl.iter_revoked_certificates().count(),
        number_value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::{CrlSpec, DevCa};

    fn file(bytes: Vec<u8>) -> RawFile {
        RawFile {
            path: "dir/ca.crl".into(),
            bytes,
        }
    }

    fn crl(ca: &DevCa, number: u64, serials: Vec<Vec<u8>>) -> crate::pki::IssuedCrl {
        ca.crl(&CrlSpec::new(number, serials, 7)).unwrap()
    }

    #[test]
    fn pem_der_and_back_to_back_der_all_parse() {
        let a = DevCa::new("A", 1).unwrap();
        let b = DevCa::new("B", 1).unwrap();
        let (ca, cb) = (crl(&a, 1, vec![vec![1]]), crl(&b, 5, Vec::new()));
        let pem = parse_file(&file(format!("{}{}", ca.pem, cb.pem).into_bytes())).unwrap();
        assert_eq!(pem.len(), 2);
        assert_eq!(pem[0].info.issuer, "CN=A");
        assert_eq!(pem[0].info.number.as_deref(), Some("1"));
        assert_eq!(pem[0].info.revoked, 1);
        assert_eq!(pem[0].serials, [vec![1u8]]);
        assert!(pem[0].lists(&[1]) && !pem[0].lists(&[2]));
        assert_eq!(pem[1].info.number.as_deref(), Some("5"));
        assert_eq!(parse_file(&file(ca.der.clone())).unwrap().len(), 1);
        let both = parse_file(&file([ca.der.clone(), cb.der.clone()].concat())).unwrap();
        assert_eq!(both.len(), 2);
        assert_eq!(both[0].der(), pem[0].der());
        assert_eq!(both[1].der(), pem[1].der());
    }

    #[test]
    fn bad_files_are_errors_naming_the_file() {
        let a = DevCa::new("A", 1).unwrap();
        let der = crl(&a, 1, Vec::new()).der;
        for bytes in [
            der[..der.len() / 2].to_vec(),
            b"hello".to_vec(),
            a.cert_pem.clone().into_bytes(),
            [der.clone(), vec![0x30]].concat(),
        ] {
            let e = parse_file(&file(bytes)).unwrap_err().to_string();
            assert!(e.starts_with("dir/ca.crl: "), "{e}");
        }
    }

    #[test]
    fn the_count_is_bounded() {
        let a = DevCa::new("A", 1).unwrap();
        let one = crl(&a, 1, Vec::new()).pem;
        assert_eq!(
            parse_file(&file(one.repeat(MAX_CRLS).into_bytes()))
                .unwrap()
                .len(),
            MAX_CRLS
        );
        let e = parse_file(&file(one.repeat(MAX_CRLS + 1).into_bytes())).unwrap_err();
        assert!(e.to_string().contains("at most"), "{e}");
    }

    #[test]
    fn versions_name_the_number_else_the_time() {
        let a = DevCa::new("A", 1).unwrap();
        let c = parse_file(&file(crl(&a, 7, Vec::new()).pem.into_bytes())).unwrap();
        assert_eq!(c[0].info.version(), "CRL number 7");
        assert_eq!(c[0].info.number_bytes(), Some(vec![7]));
    }
}

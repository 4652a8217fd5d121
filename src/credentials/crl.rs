//! Certificate revocation lists (`ca.crl`, or `--crl FILE`): one leaked
//! identity can be refused without rotating its CA. A revision's CRL file is
//! validated whole with the rest of the revision: every CRL in it parses
//! (rustls-webpki's own parser, the one that enforces it), is signed by a CA
//! of the revision's `ca.crt` (with the signature algorithms the crypto
//! provider verifies certificates with), and is not older than the CRL in
//! force for the same issuer. The parsed lists then live in the effective
//! [`Trust`](super::Trust), so a CRL change is a trust change.

use std::collections::HashSet;
use std::path::Path;

use rustls::crypto::CryptoProvider;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, CertificateRevocationListDer};
use serde::Serialize;
use webpki::{CertRevocationList, OwnedCertRevocationList};
use x509_parser::asn1_rs::Any;
use x509_parser::certificate::X509Certificate;
use x509_parser::num_bigint::BigUint;
use x509_parser::prelude::FromDer;
use x509_parser::revocation_list::CertificateRevocationList;

use super::source::RawFile;
use super::CredError;
use crate::identity::CertInfo;

/// How many CRLs one file may hold: far more than any deployment needs
/// (one per issuing CA), and a bound on the work a revision costs.
pub const MAX_CRLS: usize = 64;

/// Which certificates of a peer's chain are looked up in the CRLs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CrlScope {
    /// The peer's own certificate only.
    #[default]
    Leaf,
    /// Every certificate of the chain below the trust anchor.
    Chain,
}

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
    issuer_raw: Vec<u8>,
    #[serde(skip)]
    number_value: Option<BigUint>,
}

/// The CRLs of one revision: parsed for webpki, described for people.
#[derive(Debug, Default)]
pub struct CrlSet {
    pub infos: Vec<CrlInfo>,
    /// What the verifiers consult.
    pub lists: Vec<CertRevocationList<'static>>,
    ders: Vec<CertificateRevocationListDer<'static>>,
}

impl CrlSet {
    /// No CRL at all.
    pub fn empty() -> CrlSet {
        CrlSet::default()
    }

    /// True when there is no CRL.
    pub fn is_empty(&self) -> bool {
        self.ders.is_empty()
    }

    /// The CRLs as DER, for rustls's verifier builder.
    pub fn ders(&self) -> &[CertificateRevocationListDer<'static>] {
        &self.ders
    }

    /// True when both hold the very same CRLs.
    pub fn same_as(&self, other: &CrlSet) -> bool {
        self.ders == other.ders
    }

    /// Parses and checks a CRL file against the revision's CA bundle.
    pub fn parse(
        file: &RawFile,
        anchors: &[(CertificateDer<'static>, CertInfo)],
        provider: &CryptoProvider,
    ) -> Result<CrlSet, CredError> {
        let ders = split(file)?;
        if ders.len() > MAX_CRLS {
            return Err(crl_parse(
                &file.path,
                format!("{} CRLs; at most {MAX_CRLS}", ders.len()),
            ));
        }
        let mut set = CrlSet::default();
        let mut issuers = HashSet::new();
        for (i, der) in ders.into_iter().enumerate() {
            let at = |detail: String| crl_parse(&file.path, format!("CRL #{}: {detail}", i + 1));
            let owned = OwnedCertRevocationList::from_der(der.as_ref())
                .map_err(|e| at(format!("not a usable CRL: {e:?}")))?;
            let (_, parsed) = CertificateRevocationList::from_der(der.as_ref())
                .map_err(|e| at(format!("not a usable CRL: {e}")))?;
            let info = describe(&parsed);
            if !issuers.insert(info.issuer_raw.clone()) {
                return Err(at(format!(
                    "a second CRL from {}; give one CRL per issuer",
                    info.issuer
                )));
            }
            check_signed_by_anchor(&file.path, &parsed, &info, anchors, provider)?;
            set.infos.push(info);
            set.lists.push(owned.into());
            set.ders.push(der);
        }
        Ok(set)
    }

    /// Refuses to go back: for every issuer that has a CRL both here and in
    /// `in_force`, this one's CRL number (else its thisUpdate) must not be
    /// lower.
    pub fn check_not_older(&self, in_force: &CrlSet, path: &Path) -> Result<(), CredError> {
        for new in &self.infos {
            let Some(old) = in_force
                .infos
                .iter()
                .find(|o| o.issuer_raw == new.issuer_raw)
            else {
                continue;
            };
            let older = match (&new.number_value, &old.number_value) {
                (Some(n), Some(o)) => n < o,
                _ => new.this_update < old.this_update,
            };
            if older {
                return Err(CredError::CrlOlder {
                    path: path.to_path_buf(),
                    issuer: new.issuer.clone(),
                    this: version(new),
                    current: version(old),
                });
            }
        }
        Ok(())
    }

    /// The earliest nextUpdate, epoch seconds.
    pub fn earliest_next_update(&self) -> Option<i64> {
        self.infos.iter().filter_map(|i| i.next_update).min()
    }

    /// The CRLs whose nextUpdate is at or before `now_secs`.
    pub fn stale(&self, now_secs: i64) -> impl Iterator<Item = &CrlInfo> {
        self.infos.iter().filter(move |i| i.is_stale(now_secs))
    }

    /// Every revoked entry of every CRL: (serial bytes, revocation time in
    /// epoch seconds). `certs revoke` keeps them when it extends a CRL.
    pub fn revoked_entries(&self) -> Vec<(Vec<u8>, i64)> {
        self.ders
            .iter()
            .filter_map(|der| CertificateRevocationList::from_der(der.as_ref()).ok())
            .flat_map(|(_, crl)| {
                crl.iter_revoked_certificates()
                    .map(|r| (r.raw_serial().to_vec(), r.revocation_date.timestamp()))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// When a CRL of this set revokes `cert`: that CRL.
    pub fn revoking(&self, cert: &CertificateDer<'_>) -> Option<&CrlInfo> {
        let (_, parsed) = X509Certificate::from_der(cert.as_ref()).ok()?;
        let issuer = parsed.issuer().as_raw();
        let serial = parsed.raw_serial();
        self.infos
            .iter()
            .zip(&self.lists)
            .find(|(info, list)| {
                info.issuer_raw == issuer && matches!(list.find_serial(serial), Ok(Some(_)))
            })
            .map(|(info, _)| info)
    }
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
}

fn crl_parse(path: &Path, detail: String) -> CredError {
    CredError::CrlParse {
        path: path.to_path_buf(),
        detail,
    }
}

/// How a CRL is named in a message: its number, else its thisUpdate.
fn version(info: &CrlInfo) -> String {
    match &info.number {
        Some(n) => format!("CRL number {n}"),
        None => format!("thisUpdate {}", super::fmt_time(info.this_update)),
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
        issuer_raw: crl.issuer().as_raw().to_vec(),
        number_value,
    }
}

/// Finds the CRL's issuer among the anchors (by distinguished name) and
/// checks the signature with one of it.
fn check_signed_by_anchor(
    path: &Path,
    crl: &CertificateRevocationList<'_>,
    info: &CrlInfo,
    anchors: &[(CertificateDer<'static>, CertInfo)],
    provider: &CryptoProvider,
) -> Result<(), CredError> {
    // Why the last CA with the CRL's issuer name did not sign it; None while
    // no CA has that name.
    let mut last_problem: Option<String> = None;
    for (der, _) in anchors {
        let Ok((_, ca)) = X509Certificate::from_der(der.as_ref()) else {
            continue;
        };
        if ca.subject().as_raw() != info.issuer_raw.as_slice() {
            continue;
        }
        if let Ok(Some(ku)) = ca.key_usage() {
            if !ku.value.crl_sign() {
                last_problem = Some("its key usage does not allow signing CRLs".to_string());
                continue;
            }
        }
        match verify_signature(crl, &ca, provider) {
            Ok(()) => return Ok(()),
            Err(problem) => last_problem = Some(problem),
        }
    }
    Err(CredError::CrlSignature {
        path: path.to_path_buf(),
        issuer: info.issuer.clone(),
        detail: last_problem.unwrap_or_else(|| "no CA in ca.crt has this name".to_string()),
    })
}

/// Verifies the CRL's signature with the issuer's key, using the provider's
/// certificate signature algorithms (the same set, and the same algorithm
/// identifiers, webpki uses for chains).
fn verify_signature(
    crl: &CertificateRevocationList<'_>,
    issuer: &X509Certificate<'_>,
    provider: &CryptoProvider,
) -> Result<(), String> {
    const MALFORMED: &str = "malformed signature algorithm";
    // CertificateList ::= SEQUENCE { tbsCertList, signatureAlgorithm, signatureValue }
    let (_, outer) = Any::from_der(crl.as_raw()).map_err(|_| MALFORMED.to_string())?;
    let (after_tbs, _) = Any::from_der(outer.data).map_err(|_| MALFORMED.to_string())?;
    let (_, sig_alg) = Any::from_der(after_tbs).map_err(|_| MALFORMED.to_string())?;
    let spki = &issuer.tbs_certificate.subject_pki;
    let (_, spki_seq) = Any::from_der(spki.raw).map_err(|_| MALFORMED.to_string())?;
    let (_, key_alg) = Any::from_der(spki_seq.data).map_err(|_| MALFORMED.to_string())?;
    let mut supported = false;
    for alg in provider.signature_verification_algorithms.all {
        if alg.signature_alg_id().as_ref() != sig_alg.data
            || alg.public_key_alg_id().as_ref() != key_alg.data
        {
            continue;
        }
        supported = true;
        if alg
            .verify_signature(
                &spki.subject_public_key.data,
                crl.tbs_cert_list.as_ref(),
                &crl.signature_value.data,
            )
            .is_ok()
        {
            return Ok(());
        }
    }
    Err(if supported {
        "the signature does not verify with its key".to_string()
    } else {
        "its signature algorithm is not supported for its key".to_string()
    })
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::ops::pki::{serial_of, CrlSpec, DevCa, LeafSpec, Role};

    fn anchors(cas: &[&DevCa]) -> Vec<(CertificateDer<'static>, CertInfo)> {
        cas.iter()
            .map(|ca| {
                let der = CertificateDer::from_pem_slice(ca.cert_pem.as_bytes()).unwrap();
                let info = CertInfo::parse(&der).unwrap();
                (der, info)
            })
            .collect()
    }

    fn file(bytes: Vec<u8>) -> RawFile {
        RawFile {
            path: "dir/ca.crl".into(),
            bytes,
        }
    }

    fn parse(bytes: Vec<u8>, cas: &[&DevCa]) -> Result<CrlSet, CredError> {
        CrlSet::parse(&file(bytes), &anchors(cas), &crate::crypto_provider())
    }

    fn crl(ca: &DevCa, number: u64, serials: Vec<Vec<u8>>) -> crate::ops::pki::IssuedCrl {
        ca.crl(&CrlSpec::new(number, serials, 7)).unwrap()
    }

    #[test]
    fn pem_der_and_back_to_back_der_all_parse() {
        let a = DevCa::new("A", 1).unwrap();
        let b = DevCa::new("B", 1).unwrap();
        let (ca, cb) = (crl(&a, 1, vec![vec![1]]), crl(&b, 5, Vec::new()));
        let pem = format!("{}{}", ca.pem, cb.pem).into_bytes();
        let set = parse(pem, &[&a, &b]).unwrap();
        assert_eq!(set.infos.len(), 2);
        assert_eq!(set.infos[0].issuer, "CN=A");
        assert_eq!(set.infos[0].number.as_deref(), Some("1"));
        assert_eq!(set.infos[0].revoked, 1);
        assert_eq!(set.infos[1].number.as_deref(), Some("5"));
        assert_eq!(parse(ca.der.clone(), &[&a]).unwrap().infos.len(), 1);
        let both = [ca.der.clone(), cb.der.clone()].concat();
        let set = parse(both, &[&a, &b]).unwrap();
        assert_eq!(set.infos.len(), 2);
        assert!(
            set.same_as(&parse(format!("{}{}", ca.pem, cb.pem).into_bytes(), &[&a, &b]).unwrap())
        );
        assert!(!set.same_as(&CrlSet::empty()));
    }

    #[test]
    fn bad_files_are_errors_naming_the_file() {
        let a = DevCa::new("A", 1).unwrap();
        let der = crl(&a, 1, Vec::new()).der;
        let cert_pem = a.cert_pem.clone().into_bytes();
        for bytes in [
            der[..der.len() / 2].to_vec(),
            b"hello".to_vec(),
            cert_pem,
            [der.clone(), vec![0x30]].concat(),
        ] {
            let e = parse(bytes, &[&a]).unwrap_err().to_string();
            assert!(e.starts_with("dir/ca.crl: "), "{e}");
        }
    }

    #[test]
    fn a_crl_must_be_signed_by_a_ca_of_the_bundle() {
        let a = DevCa::new("A", 1).unwrap();
        let impostor = DevCa::new("A", 1).unwrap();
        let other = DevCa::new("B", 1).unwrap();
        let forged = crl(&impostor, 1, Vec::new()).pem.into_bytes();
        let e = parse(forged.clone(), &[&a]).unwrap_err();
        assert!(
            matches!(&e, CredError::CrlSignature { detail, .. } if detail.contains("does not verify")),
            "{e}"
        );
        // The impostor's own CA in the bundle, beside the real one, signs it.
        assert!(parse(forged, &[&a, &impostor]).is_ok());
        let e = parse(crl(&other, 1, Vec::new()).pem.into_bytes(), &[&a]).unwrap_err();
        assert!(
            matches!(&e, CredError::CrlSignature { detail, .. } if detail.contains("no CA")),
            "{e}"
        );
    }

    #[test]
    fn one_crl_per_issuer_and_a_bounded_count() {
        let a = DevCa::new("A", 1).unwrap();
        let one = crl(&a, 1, Vec::new()).pem;
        let e = parse(format!("{one}{one}").into_bytes(), &[&a]).unwrap_err();
        assert!(e.to_string().contains("a second CRL"), "{e}");
        // Exactly the bound parses (one CRL from each of MAX_CRLS CAs).
        let cas: Vec<DevCa> = (0..MAX_CRLS)
            .map(|i| DevCa::new(&format!("CA {i}"), 1).unwrap())
            .collect();
        let pem: String = cas.iter().map(|ca| crl(ca, 1, Vec::new()).pem).collect();
        let refs: Vec<&DevCa> = cas.iter().collect();
        assert_eq!(
            parse(pem.into_bytes(), &refs).unwrap().infos.len(),
            MAX_CRLS
        );
        let many = one.repeat(MAX_CRLS + 1).into_bytes();
        let e = parse(many, &[&a]).unwrap_err();
        assert!(e.to_string().contains("at most"), "{e}");
    }

    #[test]
    fn an_older_crl_number_is_refused_an_equal_or_newer_one_is_not() {
        let a = DevCa::new("A", 1).unwrap();
        let b = DevCa::new("B", 1).unwrap();
        let in_force = parse(crl(&a, 2, Vec::new()).pem.into_bytes(), &[&a]).unwrap();
        let path = Path::new("dir/ca.crl");
        let older = parse(crl(&a, 1, Vec::new()).pem.into_bytes(), &[&a]).unwrap();
        let e = older.check_not_older(&in_force, path).unwrap_err();
        assert!(
            matches!(&e, CredError::CrlOlder { this, current, .. }
                if this == "CRL number 1" && current == "CRL number 2"),
            "{e}"
        );
        for n in [2, 3] {
            let newer = parse(crl(&a, n, Vec::new()).pem.into_bytes(), &[&a]).unwrap();
            assert!(newer.check_not_older(&in_force, path).is_ok());
        }
        // Another issuer's CRL is not compared with this one.
        let other = parse(crl(&b, 1, Vec::new()).pem.into_bytes(), &[&b]).unwrap();
        assert!(other.check_not_older(&in_force, path).is_ok());
        assert!(CrlSet::empty().check_not_older(&in_force, path).is_ok());
    }

    /// A DER TLV (lengths below 64 KiB).
    fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
        let n = content.len();
        let mut out = vec![tag];
        match n {
            0..=127 => out.push(n as u8),
            128..=255 => out.extend([0x81, n as u8]),
            _ => out.extend([0x82, (n >> 8) as u8, n as u8]),
        }
        out.extend_from_slice(content);
        out
    }

    /// A v2 CRL from `ca`, built by hand because rcgen always writes a CRL
    /// number: its only extension is an authority key identifier (webpki
    /// wants at least one), thisUpdate `this_update`, revoking `serials`.
    fn crl_without_number(ca: &DevCa, this_update: SystemTime, serials: &[Vec<u8>]) -> Vec<u8> {
        hand_made_crl(ca, this_update, serials, ECDSA_SHA256)
    }

    /// ecdsa-with-SHA256 (1.2.840.10045.4.3.2): what DevCa's P-256 key signs with.
    const ECDSA_SHA256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];
    /// Ed25519 (1.3.101.112): a signature algorithm with no P-256 variant.
    const ED25519: &[u8] = &[0x2b, 0x65, 0x70];

    /// The same, its signature algorithm field saying `alg_oid` (the
    /// signature itself is always ECDSA P-256 with SHA-256).
    fn hand_made_crl(
        ca: &DevCa,
        this_update: SystemTime,
        serials: &[Vec<u8>],
        alg_oid: &[u8],
    ) -> Vec<u8> {
        use aws_lc_rs::signature::{EcdsaKeyPair, ECDSA_P256_SHA256_ASN1_SIGNING};
        use rustls_pki_types::PrivatePkcs8KeyDer;
        let alg = tlv(0x30, &tlv(0x06, alg_oid));
        let time = |t: SystemTime| {
            let s = humantime::format_rfc3339_seconds(t)
                .to_string()
                .replace(['-', 'T', ':'], "");
            tlv(0x18, s.as_bytes()) // GeneralizedTime
        };
        let ca_der = CertificateDer::from_pem_slice(ca.cert_pem.as_bytes()).unwrap();
        let (_, ca_cert) = X509Certificate::from_der(ca_der.as_ref()).unwrap();
        let mut tbs = tlv(0x02, &[1]); // v2
        tbs.extend(&alg);
        tbs.extend(ca_cert.subject().as_raw());
        tbs.extend(time(this_update));
        tbs.extend(time(this_update + Duration::from_secs(7 * 86_400)));
        if !serials.is_empty() {
            let entries: Vec<u8> = serials
                .iter()
                .flat_map(|s| tlv(0x30, &[tlv(0x02, s), time(this_update)].concat()))
                .collect();
            tbs.extend(tlv(0x30, &entries));
        }
        // authorityKeyIdentifier (2.5.29.35) { keyIdentifier [0] }: webpki
        // and we ignore its value.
        let aki = tlv(0x04, &tlv(0x30, &tlv(0x80, &[7; 20])));
        let ext = tlv(0x30, &[tlv(0x06, &[0x55, 0x1d, 0x23]), aki].concat());
        tbs.extend(tlv(0xa0, &tlv(0x30, &ext)));
        let tbs = tlv(0x30, &tbs);
        let key = PrivatePkcs8KeyDer::from_pem_slice(ca.key_pem.as_bytes()).unwrap();
        let signer =
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, key.secret_pkcs8_der())
                .unwrap();
        let sig = signer
            .sign(&aws_lc_rs::rand::SystemRandom::new(), &tbs)
            .unwrap();
        let bits = tlv(0x03, &[&[0u8][..], sig.as_ref()].concat());
        tlv(0x30, &[tbs, alg, bits].concat())
    }

    #[test]
    fn without_a_crl_number_this_update_decides_what_is_older() {
        let a = DevCa::new("A", 1).unwrap();
        let path = Path::new("dir/ca.crl");
        let now = SystemTime::now();
        let hour = Duration::from_secs(3600);
        let at = |t: SystemTime| parse(crl_without_number(&a, t, &[vec![9]]), &[&a]).unwrap();
        let in_force = at(now - 2 * hour);
        let info = &in_force.infos[0];
        assert_eq!((info.number.as_deref(), info.revoked), (None, 1));
        assert!(info.number_bytes().is_none());

        let e = at(now - 3 * hour)
            .check_not_older(&in_force, path)
            .unwrap_err();
        assert!(
            matches!(&e, CredError::CrlOlder { this, current, .. }
                if this.starts_with("thisUpdate ") && current.starts_with("thisUpdate ")),
            "{e}"
        );
        for t in [now - 2 * hour, now - hour] {
            assert!(at(t).check_not_older(&in_force, path).is_ok());
        }

        // One side numbered, the other not: thisUpdate decides as well.
        let numbered = parse(crl(&a, 5, Vec::new()).pem.into_bytes(), &[&a]).unwrap();
        assert!(at(now - hour).check_not_older(&numbered, path).is_err());
        assert!(at(now).check_not_older(&numbered, path).is_ok());
        assert!(numbered.check_not_older(&in_force, path).is_ok());
        assert!(in_force.check_not_older(&numbered, path).is_err());
    }

    #[test]
    fn a_signature_algorithm_the_provider_lacks_for_that_key_is_named() {
        let a = DevCa::new("A", 1).unwrap();
        let now = SystemTime::now();
        // Positive control: the same CRL saying ecdsa-with-SHA256 is accepted.
        assert!(parse(hand_made_crl(&a, now, &[], ECDSA_SHA256), &[&a]).is_ok());
        // Ed25519 is a signature algorithm the provider has, but never for
        // a P-256 key: no verifier is tried, and the reason says so.
        let e = parse(hand_made_crl(&a, now, &[], ED25519), &[&a]).unwrap_err();
        assert!(
            matches!(&e, CredError::CrlSignature { detail, .. } if detail.contains("not supported for its key")),
            "{e}"
        );
    }

    #[test]
    fn revoking_finds_the_listed_serial_of_that_issuer_only() {
        let a = DevCa::new("A", 1).unwrap();
        let b = DevCa::new("B", 1).unwrap();
        let leaf = |ca: &DevCa| ca.issue(&LeafSpec::dns("x.svc", Role::Client, 1)).unwrap();
        let (bad, good, foreign) = (leaf(&a), leaf(&a), leaf(&b));
        let serial = serial_of(&bad.cert_der).unwrap();
        let set = parse(crl(&a, 1, vec![serial.clone()]).pem.into_bytes(), &[&a]).unwrap();
        assert_eq!(
            set.revoking(&bad.cert_der).map(|c| c.issuer.as_str()),
            Some("CN=A")
        );
        assert!(set.revoking(&good.cert_der).is_none());
        assert!(set.revoking(&foreign.cert_der).is_none());
        let entries = set.revoked_entries();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].0, serial);
    }

    #[test]
    fn staleness_and_the_earliest_next_update() {
        let a = DevCa::new("A", 1).unwrap();
        let b = DevCa::new("B", 1).unwrap();
        let now = SystemTime::now();
        let mut spec = CrlSpec::new(1, Vec::new(), 1);
        spec.this_update = now - Duration::from_secs(7200);
        spec.next_update = now - Duration::from_secs(3600);
        let stale = a.crl(&spec).unwrap().pem;
        let fresh = crl(&b, 1, Vec::new()).pem;
        let set = parse(format!("{fresh}{stale}").into_bytes(), &[&a, &b]).unwrap();
        let now_secs = crate::identity::time_to_epoch(now);
        let stale: Vec<_> = set.stale(now_secs).map(|c| c.issuer.as_str()).collect();
        assert_eq!(stale, ["CN=A"]);
        assert_eq!(
            set.earliest_next_update(),
            Some(crate::identity::time_to_epoch(spec.next_update))
        );
        assert_eq!(
            set.stale(now_secs - 3600).count(),
            1,
            "at nextUpdate it is stale"
        );
        assert_eq!(set.stale(now_secs - 3601).count(), 0);
    }
}

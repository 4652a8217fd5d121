//! A CRL encoder for the differential test: rcgen always writes a CRL
//! number and only URI-bearing Issuing Distribution Points, and the test
//! needs CRLs without a number, IDPs that carry only scope flags, and CRLs
//! signed by a key other than their issuer's. DER is built by hand here and
//! signed with an rcgen key (ECDSA P-256, SHA-256).

use std::time::SystemTime;

use rcgen::SigningKey;

/// A DER TLV.
pub fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let n = content.len();
    let mut out = vec![tag];
    if n < 0x80 {
        out.push(n as u8);
    } else {
        let len = n.to_be_bytes();
        let skip = len.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (len.len() - skip) as u8);
        out.extend_from_slice(&len[skip..]);
    }
    out.extend_from_slice(content);
    out
}

/// A DER INTEGER from unsigned big-endian bytes.
fn uint(bytes: &[u8]) -> Vec<u8> {
    let trimmed: Vec<u8> = bytes
        .iter()
        .copied()
        .skip_while(|b| *b == 0)
        .collect::<Vec<_>>();
    let mut v = if trimmed.is_empty() { vec![0] } else { trimmed };
    if v[0] & 0x80 != 0 {
        v.insert(0, 0);
    }
    tlv(0x02, &v)
}

/// UTCTime (every date here is before 2050).
fn time(t: SystemTime) -> Vec<u8> {
    let s = humantime::format_rfc3339_seconds(t)
        .to_string()
        .replace(['-', 'T', ':'], "");
    // "YYYYMMDDHHMMSSZ" → "YYMMDDHHMMSSZ"
    tlv(0x17, &s.as_bytes()[2..])
}

/// ecdsa-with-SHA256.
const ECDSA_SHA256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];

fn extension(oid: &[u8], critical: bool, value: &[u8]) -> Vec<u8> {
    let mut ext = tlv(0x06, oid);
    if critical {
        ext.extend(tlv(0x01, &[0xff]));
    }
    ext.extend(tlv(0x04, value));
    tlv(0x30, &ext)
}

/// What an Issuing Distribution Point says.
#[derive(Debug, Clone, Default)]
pub struct Idp {
    /// fullName URIs; empty: no distributionPoint field.
    pub uris: Vec<String>,
    pub only_user: bool,
    pub only_ca: bool,
}

impl Idp {
    fn der(&self) -> Vec<u8> {
        let mut body = Vec::new();
        if !self.uris.is_empty() {
            let names: Vec<u8> = self
                .uris
                .iter()
                .flat_map(|u| tlv(0x86, u.as_bytes()))
                .collect();
            // distributionPoint [0] { fullName [0] GeneralNames }
            body.extend(tlv(0xa0, &tlv(0xa0, &names)));
        }
        if self.only_user {
            body.extend(tlv(0x81, &[0xff]));
        }
        if self.only_ca {
            body.extend(tlv(0x82, &[0xff]));
        }
        tlv(0x30, &body)
    }
}

/// A CRL to encode.
pub struct Crl<'a> {
    /// The issuer's subject, as encoded in its certificate.
    pub issuer: &'a [u8],
    /// The authority key identifier to write (the signer's).
    pub aki: Vec<u8>,
    pub number: Option<u64>,
    pub idp: Option<Idp>,
    pub this_update: SystemTime,
    pub next_update: SystemTime,
    /// Revoked serials (the certificates' raw INTEGER contents).
    pub revoked: Vec<Vec<u8>>,
}

impl Crl<'_> {
    /// The signed CRL, DER.
    pub fn sign(&self, key: &impl SigningKey) -> Vec<u8> {
        let alg = tlv(0x30, &tlv(0x06, ECDSA_SHA256));
        let mut tbs = tlv(0x02, &[1]); // v2
        tbs.extend(&alg);
        tbs.extend(self.issuer);
        tbs.extend(time(self.this_update));
        tbs.extend(time(self.next_update));
        if !self.revoked.is_empty() {
            let entries: Vec<u8> = self
                .revoked
                .iter()
                .flat_map(|s| tlv(0x30, &[tlv(0x02, s), time(self.this_update)].concat()))
                .collect();
            tbs.extend(tlv(0x30, &entries));
        }
        // authorityKeyIdentifier (2.5.29.35) { keyIdentifier [0] }
        let mut exts = extension(
            &[0x55, 0x1d, 0x23],
            false,
            &tlv(0x30, &tlv(0x80, &self.aki)),
        );
        if let Some(n) = self.number {
            exts.extend(extension(
                &[0x55, 0x1d, 0x14],
                false,
                &uint(&n.to_be_bytes()),
            ));
        }
        if let Some(idp) = &self.idp {
            exts.extend(extension(&[0x55, 0x1d, 0x1c], true, &idp.der()));
        }
        tbs.extend(tlv(0xa0, &tlv(0x30, &exts)));
        let tbs = tlv(0x30, &tbs);
        let sig = key.sign(&tbs).expect("sign the CRL");
        let bits = tlv(0x03, &[&[0u8][..], &sig].concat());
        tlv(0x30, &[tbs, alg, bits].concat())
    }
}

/// PEM for a DER blob.
pub fn pem(label: &str, der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = b64
        .as_bytes()
        .chunks(64)
        .map(|l| std::str::from_utf8(l).unwrap_or_default())
        .collect();
    format!(
        "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
        lines.join("\n")
    )
}

//! CRLs that no trusted key verifies, the three ways one is met: a
//! corrupted signature, a CA whose keyUsage lacks cRLSign, another key
//! under the CA's name.

use mtls_sidecar::pki::DevCa;

/// A CA certificate without cRLSign in its keyUsage (self-signed, or
/// signed by `parent`), and a [`DevCa`] of the same name and key whose own
/// certificate allows cRLSign: rcgen signs CRLs and leaves only as a CA
/// that may, and what is judged is the certificate without it.
pub fn ca_without_crl_sign(name: &str, parent: Option<&DevCa>) -> (String, DevCa) {
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = |usages: Vec<rcgen::KeyUsagePurpose>| {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.key_usages = usages;
        match parent {
            None => params.self_signed(&key).expect("self-signed").pem(),
            Some(p) => {
                let issuer = rcgen::Issuer::from_ca_cert_pem(
                    &p.cert_pem,
                    rcgen::KeyPair::from_pem(&p.key_pem).expect("parent key"),
                )
                .expect("issuer");
                params.signed_by(&key, &issuer).expect("signed").pem()
            }
        }
    };
    use rcgen::KeyUsagePurpose::{CrlSign, DigitalSignature, KeyCertSign};
    let without = cert(vec![KeyCertSign, DigitalSignature]);
    let signer = DevCa::from_pem(
        &cert(vec![KeyCertSign, CrlSign, DigitalSignature]),
        &key.serialize_pem(),
    )
    .expect("CA");
    (without, signer)
}

/// The CRL (DER) with the last byte of its signature flipped: it still
/// parses, and no key verifies it.
pub fn corrupt_signature(der: &[u8]) -> Vec<u8> {
    let mut out = der.to_vec();
    if let Some(last) = out.last_mut() {
        *last ^= 0x01;
    }
    out
}

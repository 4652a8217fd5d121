//! An ECDSA P-384 server identity minted in process, for tests that need a
//! certificate unlike the shared PKI's (which issues P-256 only): OpenSSL's
//! TLS 1.2 curve check, and PROXY v2 TLVs naming the server's algorithms.

use mtls_sidecar::pki::Issued;

/// A P-384 CA and, under it, a P-384 `name` leaf for server auth. Returns
/// the leaf and the CA's PEM.
pub fn server_identity(name: &str) -> (Issued, String) {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose, PKCS_ECDSA_P384_SHA384,
    };
    let ca_key = KeyPair::generate_for(&PKCS_ECDSA_P384_SHA384).unwrap();
    let mut ca = CertificateParams::default();
    ca.distinguished_name
        .push(DnType::CommonName, "P-384 server CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate_for(&PKCS_ECDSA_P384_SHA384).unwrap();
    let mut leaf = CertificateParams::new(vec![name.to_string()]).unwrap();
    leaf.distinguished_name.push(DnType::CommonName, name);
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = leaf.signed_by(&key, &issuer).unwrap();
    let issued = Issued {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        cert_der: cert.der().clone(),
    };
    (issued, ca_pem)
}

//! The identity hand-off: a PROXY protocol v2 header written to the target
//! before any byte of the peer's (`--proxy-protocol v2`), so the application
//! behind a server sidecar learns who it is talking to instead of seeing
//! every connection come from 127.0.0.1. The framing, addresses and TLVs are
//! encoded by the `ppp` crate (2.3: its `PP2_TYPE_SSL` is the spec's 0x20,
//! which releases before 2.2 got wrong; it has no helper for the SSL TLV's
//! nested sub-TLVs, so that one value is laid out here by the spec). Values
//! are named as OpenSSL and HAProxy name them, so existing parsers read them.
//! `docs/proxy-protocol.md` documents the TLVs for application authors.

use std::io;
use std::net::SocketAddr;

use ppp::v2::{AddressFamily, Builder, Command, Protocol, Version};
use rustls::{CipherSuite, ProtocolVersion};
use x509_parser::prelude::{FromDer, X509Certificate};

/// `PP2_TYPE_ALPN`.
pub const TYPE_ALPN: u8 = 0x01;
/// `PP2_TYPE_AUTHORITY`: the SNI the peer sent.
pub const TYPE_AUTHORITY: u8 = 0x02;
/// `PP2_TYPE_UNIQUE_ID`: the connection id the sidecar's logs use.
pub const TYPE_UNIQUE_ID: u8 = 0x05;
/// `PP2_TYPE_SSL`.
pub const TYPE_SSL: u8 = 0x20;
pub const SUBTYPE_SSL_VERSION: u8 = 0x21;
pub const SUBTYPE_SSL_CN: u8 = 0x22;
pub const SUBTYPE_SSL_CIPHER: u8 = 0x23;
pub const SUBTYPE_SSL_SIG_ALG: u8 = 0x24;
pub const SUBTYPE_SSL_KEY_ALG: u8 = 0x25;
/// Application range: the allow-list entry that matched.
pub const TYPE_MATCHED: u8 = 0xE0;
/// Application range: the peer's SANs, UTF-8, one per line.
pub const TYPE_SANS: u8 = 0xE1;

/// `PP2_CLIENT_SSL | PP2_CLIENT_CERT_CONN | PP2_CLIENT_CERT_SESS`: the
/// connection is TLS and the client presented a certificate on it.
pub const CLIENT_FLAGS: u8 = 0x01 | 0x02 | 0x04;

/// What one authenticated connection tells its target.
#[derive(Debug, Clone, Default)]
pub struct Handoff {
    /// The peer and the address it connected to; `None` (a unix listener)
    /// sends `LOCAL`.
    pub addresses: Option<(SocketAddr, SocketAddr)>,
    pub version: Option<ProtocolVersion>,
    pub cipher: Option<CipherSuite>,
    pub alpn: Option<Vec<u8>>,
    pub sni: Option<String>,
    pub unique_id: String,
    /// The peer's leaf certificate (DER): `_CN` is its subject CN.
    pub peer_cert: Option<Vec<u8>>,
    /// The sidecar's own leaf certificate (DER), the one it presents:
    /// `_SIG_ALG` and `_KEY_ALG` describe it, as the spec defines them
    /// ("the certificate presented by the frontend") and HAProxy sends them.
    pub local_cert: Option<Vec<u8>>,
    /// The allow-list entry that matched (`*` for `--allow-any-san`).
    pub matched: Option<String>,
    pub sans: Vec<String>,
}

/// Appends one TLV (type, 16-bit big-endian length, value) to `out`;
/// values longer than a TLV can hold are cut at 65535 bytes.
fn push_tlv(out: &mut Vec<u8>, kind: u8, value: &[u8]) {
    let value = &value[..value.len().min(usize::from(u16::MAX))];
    out.push(kind);
    // Cannot fail after the cut above.
    out.extend_from_slice(&u16::try_from(value.len()).unwrap_or(u16::MAX).to_be_bytes());
    out.extend_from_slice(value);
}

/// Encodes the header.
pub fn encode(h: &Handoff) -> io::Result<Vec<u8>> {
    // An IPv4 peer on a dual-stack listener is written as IPv4.
    let addresses = h.addresses.map(|(src, dst)| {
        let canon = |a: SocketAddr| SocketAddr::new(a.ip().to_canonical(), a.port());
        (canon(src), canon(dst))
    });
    let mut b = match addresses {
        // Mixed families cannot be expressed; say nothing rather than
        // something wrong.
        Some((src, dst)) if src.is_ipv4() == dst.is_ipv4() => {
            Builder::with_addresses(Version::Two | Command::Proxy, Protocol::Stream, (src, dst))
        }
        _ => local(),
    };
    if let Some(alpn) = &h.alpn {
        b = b.write_tlv(TYPE_ALPN, alpn)?;
    }
    if let Some(sni) = &h.sni {
        b = b.write_tlv(TYPE_AUTHORITY, sni.as_bytes())?;
    }
    b = b.write_tlv(TYPE_UNIQUE_ID, unique_id(&h.unique_id).as_bytes())?;
    b = b.write_tlv(TYPE_SSL, &ssl_value(h))?;
    if let Some(m) = &h.matched {
        b = b.write_tlv(TYPE_MATCHED, m.as_bytes())?;
    }
    // One SAN per line: a SAN holding a control character (IA5 allows
    // them) could forge a second line, so such a SAN is left out.
    let sans: Vec<&str> = h
        .sans
        .iter()
        .map(String::as_str)
        .filter(|s| !s.chars().any(char::is_control))
        .collect();
    b = b.write_tlv(TYPE_SANS, sans.join("\n").as_bytes())?;
    b.build()
}

/// The spec's `PP2_TYPE_UNIQUE_ID` holds at most 128 bytes: the id cut
/// there, back to a character boundary so the value stays UTF-8.
fn unique_id(id: &str) -> &str {
    let mut cut = id.len().min(128);
    while !id.is_char_boundary(cut) {
        cut -= 1;
    }
    &id[..cut]
}

fn local() -> Builder {
    Builder::new(
        Version::Two | Command::Local,
        AddressFamily::Unspecified | Protocol::Unspecified,
    )
}

/// The `PP2_TYPE_SSL` value: client flags, verify (0: the certificate was
/// verified), then the sub-TLVs: the version, the peer's CN, the cipher,
/// and the signature and key algorithms of the sidecar's own certificate.
fn ssl_value(h: &Handoff) -> Vec<u8> {
    let mut v = vec![CLIENT_FLAGS];
    v.extend_from_slice(&0u32.to_be_bytes());
    if let Some(ver) = h.version.and_then(version_name) {
        push_tlv(&mut v, SUBTYPE_SSL_VERSION, ver.as_bytes());
    }
    if let Some(cn) = parse(&h.peer_cert).and_then(|c| {
        c.subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok().map(str::to_string))
    }) {
        push_tlv(&mut v, SUBTYPE_SSL_CN, cn.as_bytes());
    }
    if let Some(c) = h.cipher.and_then(cipher_name) {
        push_tlv(&mut v, SUBTYPE_SSL_CIPHER, c.as_bytes());
    }
    if let Some(c) = parse(&h.local_cert) {
        if let Some(sig) = sig_alg_name(&c.signature_algorithm.algorithm.to_id_string()) {
            push_tlv(&mut v, SUBTYPE_SSL_SIG_ALG, sig.as_bytes());
        }
        if let Some(key) = key_alg_name(&c) {
            push_tlv(&mut v, SUBTYPE_SSL_KEY_ALG, key.as_bytes());
        }
    }
    v
}

fn parse(der: &Option<Vec<u8>>) -> Option<X509Certificate<'_>> {
    der.as_deref()
        .and_then(|der| X509Certificate::from_der(der).ok().map(|(_, c)| c))
}

/// OpenSSL's `SSL_get_version` names.
fn version_name(v: ProtocolVersion) -> Option<&'static str> {
    match v {
        ProtocolVersion::TLSv1_3 => Some("TLSv1.3"),
        ProtocolVersion::TLSv1_2 => Some("TLSv1.2"),
        _ => None,
    }
}

/// OpenSSL's names for the suites rustls offers.
fn cipher_name(c: CipherSuite) -> Option<&'static str> {
    Some(match c {
        CipherSuite::TLS13_AES_128_GCM_SHA256 => "TLS_AES_128_GCM_SHA256",
        CipherSuite::TLS13_AES_256_GCM_SHA384 => "TLS_AES_256_GCM_SHA384",
        CipherSuite::TLS13_CHACHA20_POLY1305_SHA256 => "TLS_CHACHA20_POLY1305_SHA256",
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 => "ECDHE-ECDSA-AES128-GCM-SHA256",
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384 => "ECDHE-ECDSA-AES256-GCM-SHA384",
        CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256 => {
            "ECDHE-ECDSA-CHACHA20-POLY1305"
        }
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => "ECDHE-RSA-AES128-GCM-SHA256",
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 => "ECDHE-RSA-AES256-GCM-SHA384",
        CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256 => "ECDHE-RSA-CHACHA20-POLY1305",
        _ => return None,
    })
}

/// OpenSSL's short names (`OBJ_nid2sn`) of the certificate signature
/// algorithms, as HAProxy sends them.
fn sig_alg_name(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "1.2.840.10045.4.3.2" => "ecdsa-with-SHA256",
        "1.2.840.10045.4.3.3" => "ecdsa-with-SHA384",
        "1.2.840.10045.4.3.4" => "ecdsa-with-SHA512",
        "1.2.840.113549.1.1.11" => "RSA-SHA256",
        "1.2.840.113549.1.1.12" => "RSA-SHA384",
        "1.2.840.113549.1.1.13" => "RSA-SHA512",
        "1.2.840.113549.1.1.10" => "RSASSA-PSS",
        "1.3.101.112" => "ED25519",
        _ => return None,
    })
}

/// HAProxy's key algorithm names, the type and OpenSSL's `EVP_PKEY_bits`:
/// `RSA2048`, `EC256`, `EC521`; and `ED25519` (for which HAProxy 2.6 sends
/// no `_KEY_ALG`).
fn key_alg_name(c: &X509Certificate<'_>) -> Option<String> {
    use x509_parser::public_key::PublicKey;
    let spki = c.public_key();
    match spki.parsed().ok()? {
        PublicKey::RSA(rsa) => Some(format!("RSA{}", rsa.key_size())),
        // OpenSSL counts the bits of the curve's order: 521 for P-521,
        // whose coordinates take 66 bytes (x509-parser's size: 528).
        PublicKey::EC(ec) => {
            let bits = match ec.key_size() {
                528 => 521,
                n => n,
            };
            Some(format!("EC{bits}"))
        }
        _ => match spki.algorithm.algorithm.to_id_string().as_str() {
            "1.3.101.112" => Some("ED25519".to_string()),
            _ => None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ppp::v2::{Addresses, Header};

    fn tlvs(h: &Header<'_>) -> Vec<(u8, Vec<u8>)> {
        h.tlvs()
            .map(|t| {
                let t = t.expect("tlv parses");
                (t.kind, t.value.to_vec())
            })
            .collect()
    }

    #[test]
    fn header_carries_addresses_and_tlvs() {
        let h = Handoff {
            addresses: Some((
                "10.0.0.7:51144".parse().unwrap(),
                "10.0.0.2:6877".parse().unwrap(),
            )),
            version: Some(ProtocolVersion::TLSv1_3),
            cipher: Some(CipherSuite::TLS13_AES_128_GCM_SHA256),
            alpn: Some(b"postgresql".to_vec()),
            sni: Some("replica-0.env-1.svc".into()),
            unique_id: "42".into(),
            peer_cert: None,
            local_cert: None,
            matched: Some("controller.env-1.svc".into()),
            sans: vec!["controller.env-1.svc".into(), "spiffe://td/c".into()],
        };
        let bytes = encode(&h).unwrap();
        let parsed = Header::try_from(bytes.as_slice()).expect("ppp parses our header");
        assert_eq!(parsed.command, Command::Proxy);
        match parsed.addresses {
            Addresses::IPv4(a) => {
                assert_eq!(a.source_address.to_string(), "10.0.0.7");
                assert_eq!(a.source_port, 51144);
                assert_eq!(a.destination_port, 6877);
            }
            other => panic!("{other:?}"),
        }
        let t = tlvs(&parsed);
        let get = |k: u8| {
            t.iter()
                .find(|(kind, _)| *kind == k)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(get(TYPE_ALPN).unwrap(), b"postgresql");
        assert_eq!(get(TYPE_AUTHORITY).unwrap(), b"replica-0.env-1.svc");
        assert_eq!(get(TYPE_UNIQUE_ID).unwrap(), b"42");
        assert_eq!(get(TYPE_MATCHED).unwrap(), b"controller.env-1.svc");
        assert_eq!(
            get(TYPE_SANS).unwrap(),
            b"controller.env-1.svc\nspiffe://td/c"
        );
        let ssl = get(TYPE_SSL).unwrap();
        // The spec's bits, not the constant: SSL, CERT_CONN, CERT_SESS.
        assert_eq!(ssl[0], 0x01 + 0x02 + 0x04);
        assert_eq!(&ssl[1..5], &[0, 0, 0, 0], "verified");
        // Sub-TLVs: version then cipher (no certificate given here).
        assert_eq!(&ssl[5..8], &[SUBTYPE_SSL_VERSION, 0, 7]);
        assert_eq!(&ssl[8..15], b"TLSv1.3");
        assert_eq!(&ssl[15..18], &[SUBTYPE_SSL_CIPHER, 0, 22]);
        assert_eq!(&ssl[18..], b"TLS_AES_128_GCM_SHA256");
    }

    #[test]
    fn unix_listeners_send_local_and_mixed_families_too() {
        for addresses in [
            None,
            Some(("10.0.0.1:1".parse().unwrap(), "[::1]:2".parse().unwrap())),
        ] {
            let h = Handoff {
                addresses,
                unique_id: "1".into(),
                ..Default::default()
            };
            let bytes = encode(&h).unwrap();
            let parsed = Header::try_from(bytes.as_slice()).unwrap();
            assert_eq!(parsed.command, Command::Local);
            assert!(matches!(parsed.addresses, Addresses::Unspecified));
        }
    }

    #[test]
    fn mapped_addresses_are_ipv4_and_control_characters_cannot_forge_a_san() {
        let h = Handoff {
            addresses: Some((
                "[::ffff:10.0.0.7]:1".parse().unwrap(),
                "[::ffff:10.0.0.2]:2".parse().unwrap(),
            )),
            unique_id: "1".into(),
            sans: vec![
                "controller.env-1.svc".into(),
                "spiffe://td/a\nspiffe://td/admin".into(),
            ],
            ..Default::default()
        };
        let bytes = encode(&h).unwrap();
        let parsed = Header::try_from(bytes.as_slice()).unwrap();
        assert!(
            matches!(parsed.addresses, Addresses::IPv4(_)),
            "{:?}",
            parsed.addresses
        );
        let t = tlvs(&parsed);
        let sans = t.iter().find(|(k, _)| *k == TYPE_SANS).unwrap();
        assert_eq!(sans.1, b"controller.env-1.svc");
    }

    #[test]
    fn oversized_values_are_cut_not_failed() {
        let h = Handoff {
            unique_id: "x".repeat(500),
            sans: vec!["a".repeat(70_000)],
            ..Default::default()
        };
        // The SANs TLV alone would overflow the 16-bit header length: an
        // error, never a panic or a corrupt header.
        if let Ok(bytes) = encode(&h) {
            assert!(Header::try_from(bytes.as_slice()).is_ok());
        }
    }

    /// Found by the proxy_header fuzz target: a 129-byte id of three-byte
    /// characters was cut inside one, and the TLV was not UTF-8. The header
    /// carries addresses: for a `LOCAL` header (no addresses) `ppp` reads
    /// the whole payload as the unspecified address block and yields no
    /// TLV, so a default `Handoff` would show nothing to check.
    #[test]
    fn the_unique_id_is_cut_at_a_character_boundary() {
        let h = Handoff {
            addresses: Some((
                "10.0.0.7:51144".parse().unwrap(),
                "10.0.0.2:6877".parse().unwrap(),
            )),
            unique_id: "\u{FFFD}".repeat(43),
            ..Default::default()
        };
        let bytes = encode(&h).unwrap();
        let parsed = Header::try_from(bytes.as_slice()).unwrap();
        let t = tlvs(&parsed);
        let id = &t
            .iter()
            .find(|(k, _)| *k == TYPE_UNIQUE_ID)
            .expect("the unique-id TLV")
            .1;
        assert_eq!(id.len(), 126);
        assert_eq!(std::str::from_utf8(id).unwrap(), "\u{FFFD}".repeat(42));
        assert_eq!(unique_id(&"x".repeat(200)).len(), 128);
        assert_eq!(unique_id("42"), "42");
    }

    /// The sub-TLVs of an SSL value, by type.
    fn subs(ssl: &[u8]) -> Vec<(u8, String)> {
        let mut b = &ssl[5..];
        let mut out = Vec::new();
        while !b.is_empty() {
            let len = usize::from(u16::from_be_bytes([b[1], b[2]]));
            out.push((b[0], String::from_utf8(b[3..3 + len].to_vec()).unwrap()));
            b = &b[3 + len..];
        }
        out
    }

    /// A self-signed certificate whose key and signature use `alg`.
    fn self_signed(alg: &'static rcgen::SignatureAlgorithm) -> Vec<u8> {
        let key = rcgen::KeyPair::generate_for(alg).unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["x.test".to_string()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "local");
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn cn_is_the_peers_and_the_algorithms_are_the_local_certificates() {
        let ca = crate::pki::DevCa::new("peer CA", 1).unwrap();
        let peer = ca
            .issue(&crate::pki::LeafSpec::dns(
                "peer.svc",
                crate::pki::Role::Client,
                1,
            ))
            .unwrap();
        use rcgen::{
            PKCS_ECDSA_P256_SHA256, PKCS_ECDSA_P384_SHA384, PKCS_ECDSA_P521_SHA512, PKCS_ED25519,
            PKCS_RSA_SHA256, PKCS_RSA_SHA384, PKCS_RSA_SHA512,
        };
        // HAProxy's names: OpenSSL's short name of the signature, and the
        // key type with its size in bits.
        for (alg, sig, key) in [
            (&PKCS_ECDSA_P256_SHA256, "ecdsa-with-SHA256", "EC256"),
            (&PKCS_ECDSA_P384_SHA384, "ecdsa-with-SHA384", "EC384"),
            (&PKCS_ECDSA_P521_SHA512, "ecdsa-with-SHA512", "EC521"),
            (&PKCS_ED25519, "ED25519", "ED25519"),
            (&PKCS_RSA_SHA256, "RSA-SHA256", "RSA2048"),
            (&PKCS_RSA_SHA384, "RSA-SHA384", "RSA2048"),
            (&PKCS_RSA_SHA512, "RSA-SHA512", "RSA2048"),
        ] {
            let h = Handoff {
                peer_cert: Some(peer.cert_der.to_vec()),
                local_cert: Some(self_signed(alg)),
                ..Default::default()
            };
            assert_eq!(
                subs(&ssl_value(&h)),
                [
                    (SUBTYPE_SSL_CN, "peer.svc".to_string()),
                    (SUBTYPE_SSL_SIG_ALG, sig.to_string()),
                    (SUBTYPE_SSL_KEY_ALG, key.to_string()),
                ],
                "{sig}"
            );
        }
        // rcgen cannot sign with RSASSA-PSS; its OID by itself.
        assert_eq!(sig_alg_name("1.2.840.113549.1.1.10"), Some("RSASSA-PSS"));
        assert_eq!(sig_alg_name("1.2.840.10040.4.3"), None, "DSA-SHA1");
        // Without certificates (or with unparseable ones) nothing is said.
        let h = Handoff {
            peer_cert: Some(b"junk".to_vec()),
            local_cert: Some(b"junk".to_vec()),
            ..Default::default()
        };
        assert_eq!(ssl_value(&h), [CLIENT_FLAGS, 0, 0, 0, 0]);
    }

    /// Every suite the sidecar negotiates is named as `openssl ciphers
    /// -stdname` names it (an independent table), and so is its version.
    #[test]
    fn cipher_and_version_names_are_openssls() {
        let out = std::process::Command::new("openssl")
            .args(["ciphers", "-stdname", "ALL"])
            .output()
            .expect("openssl (the CI machine has it) to name the suites");
        let table = String::from_utf8(out.stdout).unwrap();
        let openssl = |iana: &str| {
            table.lines().find_map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                (w.len() > 3 && w[0] == iana).then(|| (w[2].to_string(), w[3].to_string()))
            })
        };
        let suites = crate::tls::provider::crypto_provider()
            .cipher_suites
            .clone();
        assert_eq!(suites.len(), 9, "{suites:?}");
        for s in suites {
            let iana = format!("{:?}", s.suite()).replace("TLS13_", "TLS_");
            let (name, version) = openssl(&iana).unwrap_or_else(|| panic!("{iana}"));
            assert_eq!(cipher_name(s.suite()), Some(name.as_str()), "{iana}");
            assert_eq!(
                version_name(s.version().version),
                Some(version.as_str()),
                "{iana}"
            );
        }
        assert_eq!(
            cipher_name(CipherSuite::TLS_RSA_WITH_AES_128_GCM_SHA256),
            None
        );
        assert_eq!(version_name(ProtocolVersion::TLSv1_1), None);
    }
}

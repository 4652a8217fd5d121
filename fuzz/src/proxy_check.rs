//! The PROXY v2 target's checks: a hand-off built from the input, encoded
//! by the sidecar, decoded by [`crate::proxy_v2`], field by field.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use mtls_sidecar::proxy::proxy_protocol::{encode, Handoff};
use rustls::{CipherSuite, ProtocolVersion};

use crate::frames::Reader;
use crate::proxy_v2::{decode, ssl};

/// The suites the sidecar negotiates, by IANA code, with OpenSSL's names.
const SUITES: [(u16, &str); 9] = [
    (0x1301, "TLS_AES_128_GCM_SHA256"),
    (0x1302, "TLS_AES_256_GCM_SHA384"),
    (0x1303, "TLS_CHACHA20_POLY1305_SHA256"),
    (0xC02B, "ECDHE-ECDSA-AES128-GCM-SHA256"),
    (0xC02C, "ECDHE-ECDSA-AES256-GCM-SHA384"),
    (0xCCA9, "ECDHE-ECDSA-CHACHA20-POLY1305"),
    (0xC02F, "ECDHE-RSA-AES128-GCM-SHA256"),
    (0xC030, "ECDHE-RSA-AES256-GCM-SHA384"),
    (0xCCA8, "ECDHE-RSA-CHACHA20-POLY1305"),
];

fn addr(r: &mut Reader<'_>, v6: bool) -> SocketAddr {
    let ip: IpAddr = if v6 {
        let mut b = [0u8; 16];
        let got = r.bytes(16);
        b[..got.len()].copy_from_slice(got);
        // Often an IPv4-mapped address, which must go out as IPv4.
        if b[0] & 1 == 1 {
            b[..10].fill(0);
            b[10..12].fill(0xff);
        }
        Ipv6Addr::from(b).into()
    } else {
        let mut b = [0u8; 4];
        let got = r.bytes(4);
        b[..got.len()].copy_from_slice(got);
        Ipv4Addr::from(b).into()
    };
    SocketAddr::new(ip, r.u16())
}

fn opt<T>(r: &mut Reader<'_>, f: impl FnOnce(&mut Reader<'_>) -> T) -> Option<T> {
    (r.u8() & 1 == 1).then(|| f(r))
}

/// Builds a hand-off from the input.
pub fn handoff(data: &[u8]) -> Handoff {
    let mut r = Reader::new(data);
    let addresses = match r.u8() % 4 {
        0 => None,
        1 => Some((addr(&mut r, false), addr(&mut r, false))),
        2 => Some((addr(&mut r, true), addr(&mut r, true))),
        _ => Some((addr(&mut r, false), addr(&mut r, true))),
    };
    let version = match r.u8() % 4 {
        0 => None,
        1 => Some(ProtocolVersion::TLSv1_3),
        2 => Some(ProtocolVersion::TLSv1_2),
        _ => Some(ProtocolVersion::from(r.u16())),
    };
    let cipher = opt(&mut r, |r| match r.u8() as usize {
        i if i < SUITES.len() => CipherSuite::from(SUITES[i].0),
        _ => CipherSuite::from(r.u16()),
    });
    let text = |r: &mut Reader<'_>| String::from_utf8_lossy(r.long()).into_owned();
    Handoff {
        addresses,
        version,
        cipher,
        alpn: opt(&mut r, |r| r.short().to_vec()),
        sni: opt(&mut r, text),
        unique_id: r.string(),
        peer_cert: opt(&mut r, |r| r.long().to_vec()),
        local_cert: opt(&mut r, |r| r.long().to_vec()),
        matched: opt(&mut r, text),
        sans: (0..r.u8() % 8).map(|_| text(&mut r)).collect(),
    }
}

/// Encodes, decodes and compares.
pub fn check(data: &[u8]) {
    let h = handoff(data);
    let canon = |a: SocketAddr| SocketAddr::new(a.ip().to_canonical(), a.port());
    let addresses = h
        .addresses
        .map(|(s, d)| (canon(s), canon(d)))
        .filter(|(s, d)| s.is_ipv4() == d.is_ipv4());
    let sans: Vec<&str> = h
        .sans
        .iter()
        .map(String::as_str)
        .filter(|s| !s.chars().any(char::is_control))
        .collect();
    let mut want: Vec<(u8, Option<Vec<u8>>)> = Vec::new();
    if let Some(a) = &h.alpn {
        want.push((0x01, Some(a.clone())));
    }
    if let Some(s) = &h.sni {
        want.push((0x02, Some(s.as_bytes().to_vec())));
    }
    // At most 128 bytes, whole characters.
    let id: String = h
        .unique_id
        .chars()
        .scan(0, |len, c| {
            *len += c.len_utf8();
            (*len <= 128).then_some(c)
        })
        .collect();
    want.push((0x05, Some(id.into_bytes())));
    want.push((0x20, None));
    if let Some(m) = &h.matched {
        want.push((0xE0, Some(m.as_bytes().to_vec())));
    }
    want.push((0xE1, Some(sans.join("\n").into_bytes())));

    let encoded = match encode(&h) {
        Ok(b) => b,
        Err(e) => {
            // Only a header too long for its 16-bit length may fail.
            let addr_len = match addresses {
                Some((s, _)) if s.is_ipv4() => 12,
                Some(_) => 36,
                None => 0,
            };
            let tlv_len: usize = want
                .iter()
                .map(|(_, v)| 3 + v.as_ref().map_or(5, Vec::len))
                .sum();
            assert!(
                addr_len + tlv_len > 65535 - 300,
                "refused a {tlv_len}-byte header: {e}"
            );
            return;
        }
    };
    let mut stream = encoded.clone();
    stream.extend_from_slice(b"payload");
    let got = decode(&stream).unwrap_or_else(|e| panic!("{e}: {encoded:?}"));
    assert_eq!(
        got.len,
        encoded.len(),
        "the header ends where the payload starts"
    );
    assert_eq!(got.version, 2);
    match addresses {
        Some((s, d)) => {
            assert_eq!(got.command, 1);
            assert_eq!(got.family, if s.is_ipv4() { 0x11 } else { 0x21 });
            assert_eq!(got.addresses, Some((s, d)));
        }
        None => {
            assert_eq!((got.command, got.family, got.addresses), (0, 0, None));
        }
    }
    let kinds: Vec<u8> = got.tlvs.iter().map(|(k, _)| *k).collect();
    let want_kinds: Vec<u8> = want.iter().map(|(k, _)| *k).collect();
    assert_eq!(kinds, want_kinds);
    for ((kind, value), (_, expected)) in got.tlvs.iter().zip(&want) {
        if let Some(expected) = expected {
            assert_eq!(value, expected, "TLV 0x{kind:02x}");
        }
        if *kind != 0x01 && *kind != 0x20 {
            assert!(
                std::str::from_utf8(value).is_ok(),
                "TLV 0x{kind:02x} is not UTF-8: {value:?}"
            );
        }
        if *kind == 0x20 {
            check_ssl(&h, value);
        }
        if *kind == 0xE1 && !value.is_empty() {
            // One SAN per line: no line that is not one of the SANs.
            let text = String::from_utf8_lossy(value);
            for line in text.split('\n') {
                assert!(h.sans.iter().any(|s| s == line), "forged SAN line {line:?}");
            }
        }
    }
}

fn check_ssl(h: &Handoff, value: &[u8]) {
    let s = ssl(value).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((s.client, s.verify), (0x07, 0));
    let kinds: Vec<u8> = s.subs.iter().map(|(k, _)| *k).collect();
    assert!(kinds.windows(2).all(|w| w[0] < w[1]), "{kinds:?}");
    assert!(kinds.iter().all(|k| (0x21..=0x25).contains(k)), "{kinds:?}");
    let sub = |k: u8| {
        s.subs
            .iter()
            .find(|(kind, _)| *kind == k)
            .map(|(_, v)| v.as_slice())
    };
    let version = match h.version {
        Some(ProtocolVersion::TLSv1_3) => Some(&b"TLSv1.3"[..]),
        Some(ProtocolVersion::TLSv1_2) => Some(&b"TLSv1.2"[..]),
        _ => None,
    };
    assert_eq!(sub(0x21), version);
    let cipher = h.cipher.and_then(|c| {
        SUITES
            .iter()
            .find(|(code, _)| *code == u16::from(c))
            .map(|(_, n)| n.as_bytes())
    });
    assert_eq!(sub(0x23), cipher);
    if h.peer_cert.is_none() {
        assert_eq!(sub(0x22), None);
    }
    if h.local_cert.is_none() {
        assert_eq!((sub(0x24), sub(0x25)), (None, None));
    }
    for (k, v) in &s.subs {
        // A certificate's CN may be empty (a CA issued it so): `_CN` then
        // says so; every other sub-TLV names something.
        assert!(
            (*k == 0x22 || !v.is_empty()) && std::str::from_utf8(v).is_ok(),
            "sub-TLV 0x{k:02x}: {v:?}"
        );
    }
}

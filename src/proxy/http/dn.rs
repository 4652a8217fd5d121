//! A certificate's subject as an RFC 4514 string, the form Envoy's
//! `Subject=` carries (OpenSSL's `XN_FLAG_RFC2253`): RDNs last to first,
//! joined by `,`, multi-valued ones by `+` (their values last to first
//! too: OpenSSL reverses the whole list of values), the usual attribute
//! types by their short names and any other by its dotted OID with the
//! value's DER in uppercase hex (`#…`, as OpenSSL and BoringSSL write it).
//! Escaping is RFC 4514 §2.4's, plus `\XX` for every byte outside visible
//! ASCII so the string always fits in a header value, and for `\` so it
//! never ends in one (XFCC quotes it; `\"` is a quote there).

use x509_parser::der_parser::asn1_rs::{Any, Class};
use x509_parser::x509::X509Name;

/// The short names RFC 4514 §3 lists (and UID), by OID.
const SHORT_NAMES: &[(&str, &str)] = &[
    ("2.5.4.3", "CN"),
    ("2.5.4.7", "L"),
    ("2.5.4.8", "ST"),
    ("2.5.4.10", "O"),
    ("2.5.4.11", "OU"),
    ("2.5.4.6", "C"),
    ("2.5.4.9", "STREET"),
    ("0.9.2342.19200300.100.1.25", "DC"),
    ("0.9.2342.19200300.100.1.1", "UID"),
];

/// The RFC 4514 string of `name`.
pub fn rfc4514(name: &X509Name<'_>) -> String {
    let rdns: Vec<String> = name
        .iter_rdn()
        .map(|rdn| {
            let values: Vec<_> = rdn.iter().collect();
            values
                .into_iter()
                .rev()
                .map(|atv| {
                    let oid = atv.attr_type().to_id_string();
                    let short = SHORT_NAMES.iter().find(|(o, _)| *o == oid);
                    match (short, atv.as_str()) {
                        (Some((_, short)), Ok(s)) => format!("{short}={}", escape_value(s)),
                        _ => format!(
                            "{oid}=#{}",
                            hex(&der_of(atv.attr_value())).to_ascii_uppercase()
                        ),
                    }
                })
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    rdns.into_iter().rev().collect::<Vec<_>>().join(",")
}

/// One attribute value escaped per RFC 4514 §2.4, with every byte outside
/// visible ASCII (and space where it must be) written as `\XX`. A `\` is
/// written `\5C`, never `\\`: the subject travels in XFCC's quotes, where
/// `\"` is an escaped quote, so it must never end in a bare `\`.
pub fn escape_value(v: &str) -> String {
    let bytes = v.as_bytes();
    let last = bytes.len().saturating_sub(1);
    let mut out = String::with_capacity(v.len());
    for (i, &b) in bytes.iter().enumerate() {
        let edge_space = b == b' ' && (i == 0 || i == last);
        if matches!(b, b'"' | b'+' | b',' | b';' | b'<' | b'>') || (b == b'#' && i == 0) {
            out.push('\\');
            out.push(char::from(b));
        } else if edge_space || b == b'\\' || !(b.is_ascii_graphic() || b == b' ') {
            out.push_str(&format!("\\{b:02X}"));
        } else {
            out.push(char::from(b));
        }
    }
    out
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The DER encoding of a parsed value: its identifier and length octets
/// rebuilt in front of its content.
fn der_of(any: &Any<'_>) -> Vec<u8> {
    let class: u8 = match any.class() {
        Class::Universal => 0,
        Class::Application => 1,
        Class::ContextSpecific => 2,
        Class::Private => 3,
    };
    let mut out = Vec::with_capacity(any.data.len() + 8);
    let first = (class << 6) | (u8::from(any.header.is_constructed()) << 5);
    let tag = any.tag().0;
    if tag < 31 {
        // Below 31: fits the identifier octet (checked just above).
        out.push(first | tag as u8);
    } else {
        out.push(first | 0x1f);
        let mut groups = Vec::new();
        let mut t = tag;
        loop {
            groups.push((t & 0x7f) as u8);
            t >>= 7;
            if t == 0 {
                break;
            }
        }
        let n = groups.len();
        for (i, g) in groups.into_iter().rev().enumerate() {
            out.push(if i + 1 < n { g | 0x80 } else { g });
        }
    }
    let len = any.data.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let be = len.to_be_bytes();
        let skip = be.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (be.len() - skip) as u8);
        out.extend_from_slice(&be[skip..]);
    }
    out.extend_from_slice(any.data);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_escape_as_rfc_4514_says() {
        assert_eq!(escape_value("plain"), "plain");
        assert_eq!(escape_value("a,b+c"), r"a\,b\+c");
        assert_eq!(escape_value("#x"), r"\#x");
        assert_eq!(escape_value(" x "), r"\20x\20");
        assert_eq!(escape_value("é\n"), r"\C3\A9\0A");
        assert_eq!(escape_value(r#"q"\"#), r#"q\"\5C"#);
    }

    /// `tag` (identifier octets), a definite length, `content`.
    fn tlv(tag: &[u8], content: &[u8]) -> Vec<u8> {
        let mut out = tag.to_vec();
        let len = content.len();
        if len < 0x80 {
            out.push(len as u8);
        } else {
            let be = (len as u32).to_be_bytes();
            let skip = be.iter().take_while(|b| **b == 0).count();
            out.push(0x80 | (4 - skip) as u8);
            out.extend_from_slice(&be[skip..]);
        }
        out.extend_from_slice(content);
        out
    }

    /// A value with no short name is its DER, rebuilt byte for byte from
    /// the parsed value: constructed, of every class, with a tag of one,
    /// two and three identifier octets, and lengths in short and long
    /// form (one and two length octets).
    #[test]
    fn an_unnamed_value_is_dumped_as_its_exact_der() {
        use x509_parser::prelude::FromDer;
        let values: Vec<Vec<u8>> = vec![
            tlv(&[0x0c], b"x"),
            tlv(&[0x30], &tlv(&[0x02], &[5])),
            tlv(&[0x5f, 0x28], b"A"),
            tlv(&[0xdf, 0x81, 0x48], b"B"),
            tlv(&[0xbf, 0x1f], &tlv(&[0x04], b"C")),
            tlv(&[0x0c], &[b'l'; 200]),
            tlv(&[0x0c], &[b'm'; 300]),
        ];
        for value in values {
            let oid = [0x06, 0x03, 0x2a, 0x03, 0x04]; // 1.2.3.4
            let atv = tlv(&[0x30], &[&oid[..], &value].concat());
            let name = tlv(&[0x30], &tlv(&[0x31], &atv));
            let (_, parsed) = X509Name::from_der(&name).expect("a Name");
            let want = format!("1.2.3.4=#{}", hex(&value).to_ascii_uppercase());
            assert_eq!(rfc4514(&parsed), want);
        }
    }
}

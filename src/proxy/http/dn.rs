//! A certificate's subject exactly as `openssl x509 -noout -subject
//! -nameopt RFC2253` prints it (OpenSSL's `XN_FLAG_RFC2253`), the form
//! Envoy's `Subject=` carries: RDNs last to first, joined by `,`,
//! multi-valued ones by `+` (their values last to first too: OpenSSL
//! reverses the whole list of values), attribute types by OpenSSL's short
//! names ([`super::dn_names`]) and any other by its dotted OID with the
//! value's DER in uppercase hex (`#…`), as is a named type whose value is
//! not a string type.
//!
//! Values (OpenSSL's `ASN1_STRFLGS_RFC2253`): a UTF8String byte for byte,
//! the one-byte string types (Printable, IA5, T61, Numeric, Visible, the
//! time types) as Latin-1 and BMPString/UniversalString as UCS-2/UCS-4,
//! each converted to UTF-8; then every byte above 0x7F and every control
//! (0x00-0x1F, 0x7F) is written `\XX` (uppercase hex); `,` `+` `"` `\`
//! `<` `>` `;` are written with a `\` before them; a space at either end,
//! and a `#` first (unless it is also the last character, as OpenSSL
//! does), are too. The result is visible ASCII and space only, and every
//! `"` and `\` in it begins a backslash pair, so it sits inside an RFC
//! 9110 quoted-string as it is. A BMPString or UniversalString OpenSSL
//! cannot decode (a length that is not a multiple of the width, a code
//! point above U+10FFFF) makes OpenSSL fail; it is dumped as `#DER` here.

use x509_parser::der_parser::asn1_rs::{Any, Class};
use x509_parser::x509::X509Name;

use super::dn_names::NAMES;

/// The OpenSSL RFC 2253 string of `name`.
pub fn rfc2253(name: &X509Name<'_>) -> String {
    let rdns: Vec<String> = name
        .iter_rdn()
        .map(|rdn| {
            let values: Vec<_> = rdn.iter().collect();
            values
                .into_iter()
                .rev()
                .map(|atv| attribute(&atv.attr_type().to_id_string(), atv.attr_value()))
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    rdns.into_iter().rev().collect::<Vec<_>>().join(",")
}

/// One `type=value`: a named type with a string value rendered, anything
/// else dumped as `#` and its DER in uppercase hex.
fn attribute(oid: &str, value: &Any<'_>) -> String {
    let short = NAMES.iter().find(|(o, _)| *o == oid).map(|(_, s)| *s);
    let text = short.and_then(|_| string_value(value));
    match (short, text) {
        (Some(short), Some(text)) => format!("{short}={text}"),
        (name, _) => format!(
            "{}=#{}",
            name.unwrap_or(oid),
            hex(&der_of(value)).to_ascii_uppercase()
        ),
    }
}

/// How OpenSSL reads a string type's content octets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Width {
    /// UTF8String: each byte as it is (OpenSSL does not decode it).
    Raw,
    /// The one-byte types: each byte a Latin-1 character.
    Latin1,
    /// BMPString: big-endian UCS-2.
    Ucs2,
    /// UniversalString: big-endian UCS-4.
    Ucs4,
}

/// The width OpenSSL reads a universal `tag`'s content with; `None` for a
/// type it dumps (not a string type).
fn width_of(class: Class, tag: u32) -> Option<Width> {
    if class != Class::Universal {
        return None;
    }
    match tag {
        12 => Some(Width::Raw),
        18 | 19 | 20 | 22 | 23 | 24 | 26 => Some(Width::Latin1),
        30 => Some(Width::Ucs2),
        28 => Some(Width::Ucs4),
        _ => None,
    }
}

/// A string value's escaped bytes; `None` for a value OpenSSL dumps or
/// cannot decode.
fn string_value(value: &Any<'_>) -> Option<String> {
    if value.header.is_constructed() {
        return None;
    }
    let bytes = utf8_bytes(width_of(value.class(), value.tag().0)?, value.data)?;
    Some(escape_bytes(&bytes))
}

/// The value's bytes as OpenSSL escapes them: a UTF8String's own bytes,
/// every other type's characters converted to UTF-8.
fn utf8_bytes(width: Width, data: &[u8]) -> Option<Vec<u8>> {
    let chars: Vec<u32> = match width {
        Width::Raw => return Some(data.to_vec()),
        Width::Latin1 => data.iter().map(|&b| u32::from(b)).collect(),
        Width::Ucs2 => units(data, 2)?,
        Width::Ucs4 => units(data, 4)?,
    };
    let mut out = Vec::with_capacity(chars.len());
    for c in chars {
        out.extend_from_slice(&utf8_put(c)?);
    }
    Some(out)
}

/// `data` as big-endian units of `n` bytes; `None` when it does not
/// divide evenly.
fn units(data: &[u8], n: usize) -> Option<Vec<u32>> {
    if !data.len().is_multiple_of(n) {
        return None;
    }
    Some(
        data.chunks(n)
            .map(|c| c.iter().fold(0u32, |acc, &b| (acc << 8) | u32::from(b)))
            .collect(),
    )
}

/// OpenSSL's `UTF8_putc`: code points up to U+10FFFF, surrogates
/// included (it does not refuse them); `None` above.
fn utf8_put(c: u32) -> Option<Vec<u8>> {
    // Each arm keeps the bits it shifts out below 0x40 by the masks.
    let cont = |shift: u32| 0x80 | ((c >> shift) & 0x3f) as u8;
    Some(match c {
        0..=0x7f => vec![c as u8],
        0x80..=0x7ff => vec![0xc0 | (c >> 6) as u8, cont(0)],
        0x800..=0xffff => vec![0xe0 | (c >> 12) as u8, cont(6), cont(0)],
        0x1_0000..=0x10_ffff => vec![0xf0 | (c >> 18) as u8, cont(12), cont(6), cont(0)],
        _ => return None,
    })
}

/// The value's bytes escaped as OpenSSL's RFC 2253 flags do. A byte
/// above 0x7F is never first- or last-escaped, so judging edges by byte
/// equals OpenSSL judging them by character.
pub fn escape_bytes(bytes: &[u8]) -> String {
    let last = bytes.len().saturating_sub(1);
    let mut out = String::with_capacity(bytes.len());
    for (i, &b) in bytes.iter().enumerate() {
        match escape_kind(b, i == 0, i == last) {
            Escape::None => out.push(char::from(b)),
            Escape::Backslash => {
                out.push('\\');
                out.push(char::from(b));
            }
            Escape::Hex => out.push_str(&format!("\\{b:02X}")),
        }
    }
    out
}

/// How one byte of a value is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Escape {
    /// As it is.
    None,
    /// After a `\`.
    Backslash,
    /// As `\XX`.
    Hex,
}

/// OpenSSL's rule for one byte: `first`/`last` say where it stands. For a
/// one-character value OpenSSL applies only the last-position rule, so a
/// lone `#` stays bare (a lone space is escaped either way).
pub fn escape_kind(b: u8, first: bool, last: bool) -> Escape {
    let edge_space = b == b' ' && (first || last);
    let leading_hash = b == b'#' && first && !last;
    if !(0x20..=0x7e).contains(&b) {
        Escape::Hex
    } else if matches!(b, b',' | b'+' | b'"' | b'\\' | b'<' | b'>' | b';')
        || edge_space
        || leading_hash
    {
        Escape::Backslash
    } else {
        Escape::None
    }
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
    fn values_escape_as_openssl_rfc2253_does() {
        let e = |s: &str| escape_bytes(s.as_bytes());
        assert_eq!(e("plain"), "plain");
        assert_eq!(e("a,b+c;d<e>f=g"), r"a\,b\+c\;d\<e\>f=g");
        assert_eq!(e("#x#"), r"\#x#");
        assert_eq!(e("#"), "#");
        assert_eq!(e(" "), r"\ ");
        assert_eq!(e(" x y "), r"\ x y\ ");
        assert_eq!(e("é\n\u{7f}"), r"\C3\A9\0A\7F");
        assert_eq!(e(r#"q"\"#), r#"q\"\\"#);
    }

    #[test]
    fn other_string_types_convert_to_utf8_first() {
        assert_eq!(utf8_bytes(Width::Latin1, &[0xe9]), Some(vec![0xc3, 0xa9]));
        assert_eq!(utf8_bytes(Width::Ucs2, &[0x26, 0x03]), Some("☃".into()));
        assert_eq!(
            utf8_bytes(Width::Ucs4, &[0, 1, 0xd1, 0x1e]),
            Some("𝄞".into())
        );
        assert_eq!(utf8_bytes(Width::Ucs2, &[0x26]), None);
        assert_eq!(utf8_bytes(Width::Ucs4, &[0, 0x11, 0, 0]), None);
        assert_eq!(utf8_bytes(Width::Raw, &[0xff]), Some(vec![0xff]));
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

    /// A BMPString and a UniversalString CN are decoded (UCS-2, UCS-4) and
    /// escaped as OpenSSL prints them, not dumped as their DER.
    #[test]
    fn bmp_and_universal_strings_are_decoded_not_dumped() {
        use x509_parser::prelude::FromDer;
        for (value, want) in [
            (tlv(&[0x1e], &[0x26, 0x03]), r"CN=\E2\98\83"),
            (tlv(&[0x1c], &[0, 1, 0xd1, 0x1e]), r"CN=\F0\9D\84\9E"),
        ] {
            let oid = [0x06, 0x03, 0x55, 0x04, 0x03]; // 2.5.4.3, CN
            let atv = tlv(&[0x30], &[&oid[..], &value].concat());
            let name = tlv(&[0x30], &tlv(&[0x31], &atv));
            let (_, parsed) = X509Name::from_der(&name).expect("a Name");
            assert_eq!(rfc2253(&parsed), want);
        }
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
            assert_eq!(rfc2253(&parsed), want);
        }
    }
}

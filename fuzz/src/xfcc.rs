//! The `http_identity` target's references (`fuzz_targets/http_identity.rs`):
//! the XFCC header-name rule, an RFC 4514 value unescaper and the SAN
//! percent-encoding, each written from the docs of `proxy/http/xfcc.rs`
//! and `dn.rs`, not from their code. The header's value is read with the
//! tests' plain RFC 9110 parser ([`crate::rfc9110`]).

/// The name rule: lowercase with `_` as `-` equals the header's name.
pub fn is_xfcc_name(name: &[u8]) -> bool {
    let folded: Vec<u8> = name
        .iter()
        .map(|b| {
            if *b == b'_' {
                b'-'
            } else {
                b.to_ascii_lowercase()
            }
        })
        .collect();
    folded == b"x-forwarded-client-cert"
}

/// RFC 4514 §2.4 unescaping of one attribute value: `\XX` a byte, `\c`
/// the character; `None` for a bare special or a dangling `\`.
pub fn unescape_value(v: &str) -> Option<Vec<u8>> {
    let b = v.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => {
                let hex = b.get(i + 1..i + 3).and_then(|h| {
                    let h = std::str::from_utf8(h).ok()?;
                    h.bytes()
                        .all(|c| c.is_ascii_hexdigit())
                        .then(|| u8::from_str_radix(h, 16).ok())?
                });
                if let Some(byte) = hex {
                    out.push(byte);
                    i += 3;
                } else {
                    out.push(*b.get(i + 1)?);
                    i += 2;
                }
            }
            b'"' | b'+' | b',' | b';' | b'<' | b'>' => return None,
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Some(out)
}

/// Splits a DN string at its unescaped `,`.
pub fn split_rdns(dn: &str) -> Vec<&str> {
    let b = dn.as_bytes();
    let (mut parts, mut start, mut i) = (Vec::new(), 0, 0);
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b',' => {
                parts.push(&dn[start..i]);
                start = i + 1;
                i += 1;
            }
            _ => i += 1,
        }
    }
    parts.push(&dn[start.min(dn.len())..]);
    parts
}

/// A SAN as the header carries it: visible ASCII except `"` `\` `%`
/// kept, every other byte `%XX`.
pub fn percent(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'%' => format!("%{b:02X}"),
            0x21..=0x7e => char::from(b).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_pieces() {
        assert!(is_xfcc_name(b"X_Forwarded-CLIENT_cert"));
        assert!(!is_xfcc_name(b"x-forwarded-client-cer"));
        assert_eq!(unescape_value(r"\ a\,\C3\A9\\").unwrap(), " a,é\\".as_bytes());
        assert_eq!(split_rdns(r"CN=a\,b,O=c"), [r"CN=a\,b", "O=c"]);
        assert_eq!(percent("a\"%é"), "a%22%25%C3%A9");
    }
}

//! The `http_identity` target's references (`fuzz_targets/http_identity.rs`):
//! the XFCC header-name rule, a parser of the header's value (Envoy's
//! quoting: a quoted value with each `"` inside written `\"`, read left
//! to right; any other `\` is itself), an RFC 4514 value
//! unescaper and the SAN percent-encoding, each written from the docs of
//! `proxy/http/xfcc.rs` and `dn.rs`, not from their code.

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

/// One element's `key=value` pairs, values unquoted; `None` when the
/// value is not one well-formed element (a bare value holding `,` `;`
/// `=` `"` or `\`, an unterminated quote, text after a closing quote).
pub fn parse_element(v: &str) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut rest = v;
    loop {
        let (key, after) = rest.split_once('=')?;
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return None;
        }
        let (value, after) = if let Some(q) = after.strip_prefix('"') {
            let mut value = String::new();
            let mut chars = q.char_indices().peekable();
            let end = loop {
                match chars.next()? {
                    (_, '\\') if chars.peek().is_some_and(|(_, c)| *c == '"') => {
                        chars.next();
                        value.push('"');
                    }
                    (i, '"') => break i + 1,
                    (_, c) => value.push(c),
                }
            };
            (value, &q[end..])
        } else {
            let end = after.find([';', ',']).unwrap_or(after.len());
            let bare = &after[..end];
            if bare.contains(['=', '"', '\\']) {
                return None;
            }
            (bare.to_string(), &after[end..])
        };
        out.push((key.to_string(), value));
        match after.strip_prefix(';') {
            Some(next) => rest = next,
            None if after.is_empty() => return Some(out),
            None => return None,
        }
    }
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
        assert_eq!(
            parse_element(r#"Hash=ab;Subject="CN=a\,b\"";DNS=x"#).unwrap(),
            [
                ("Hash".into(), "ab".into()),
                ("Subject".into(), r#"CN=a\,b""#.into()),
                ("DNS".into(), "x".into())
            ]
        );
        assert_eq!(parse_element("DNS=a=b"), None);
        assert_eq!(parse_element(r#"Subject="x"#), None);
        assert_eq!(unescape_value(r"\20a\,\C3\A9").unwrap(), " a,é".as_bytes());
        assert_eq!(split_rdns(r"CN=a\,b,O=c"), [r"CN=a\,b", "O=c"]);
        assert_eq!(percent("a\"%é"), "a%22%25%C3%A9");
    }
}

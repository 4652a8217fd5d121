//! A plain reader of an `x-forwarded-client-cert` value, written from RFC
//! 9110 §5.6.4 (quoted-string) and Envoy's description of the header, not
//! from the sidecar's encoder: elements split at `,`, pairs at `;`, each
//! pair `key=value`, a value either bare or a quoted-string whose
//! quoted-pairs (`\` and one character) stand for that character. Strict:
//! a bare value holding `"`, `\`, `=`, a space or a control, a key that is
//! not a token, an unterminated quote or text after one is an error, so a
//! header it accepts cannot be read two ways. Shared by the tests and the
//! fuzz crate (`fuzz/src/lib.rs` includes this file).
#![allow(dead_code)]

/// One `key=value` of an element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pair {
    pub key: String,
    /// The value with its quotes removed and its quoted-pairs resolved.
    pub value: Vec<u8>,
    /// The value's bytes between its quotes (or the bare value) as sent.
    pub raw: String,
    pub quoted: bool,
}

/// The header's elements (one per certificate), each its pairs in order.
pub fn parse(header: &str) -> Result<Vec<Vec<Pair>>, String> {
    let b = header.as_bytes();
    let mut elements = vec![Vec::new()];
    let mut i = 0;
    loop {
        let (pair, next) = parse_pair(b, i)?;
        elements.last_mut().ok_or("no element")?.push(pair);
        match b.get(next) {
            None => return Ok(elements),
            Some(b';') => {}
            Some(b',') => elements.push(Vec::new()),
            Some(other) => return Err(format!("{:?} at {next} after a value", char::from(*other))),
        }
        i = next + 1;
    }
}

/// RFC 9110 `tchar`.
fn is_tchar(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c)
}

/// A bare value's byte: visible ASCII but the separators, quote,
/// backslash and `=`.
fn is_bare(c: u8) -> bool {
    c.is_ascii_graphic() && !b",;\"\\=".contains(&c)
}

/// RFC 9110 `qdtext`.
fn is_qdtext(c: u8) -> bool {
    matches!(c, b'\t' | b' ' | 0x21 | 0x23..=0x5b | 0x5d..=0x7e | 0x80..=0xff)
}

/// The byte a quoted-pair may escape: HTAB, SP, VCHAR, obs-text.
fn is_pair_char(c: u8) -> bool {
    matches!(c, b'\t' | b' ' | 0x21..=0x7e | 0x80..=0xff)
}

/// One pair from `i`; the index after it.
fn parse_pair(b: &[u8], i: usize) -> Result<(Pair, usize), String> {
    let eq = i + b[i..]
        .iter()
        .position(|&c| c == b'=')
        .ok_or("a pair without `=`")?;
    let key = &b[i..eq];
    if key.is_empty() || !key.iter().all(|&c| is_tchar(c)) {
        return Err(format!("bad key {:?}", String::from_utf8_lossy(key)));
    }
    let key = String::from_utf8_lossy(key).into_owned();
    let start = eq + 1;
    if b.get(start) != Some(&b'"') {
        let end = start + b[start..].iter().take_while(|&&c| is_bare(c)).count();
        let raw = String::from_utf8_lossy(&b[start..end]).into_owned();
        let pair = Pair {
            key,
            value: b[start..end].to_vec(),
            raw,
            quoted: false,
        };
        return Ok((pair, end));
    }
    let mut value = Vec::new();
    let mut j = start + 1;
    loop {
        match b.get(j) {
            None => return Err("an unterminated quoted-string".into()),
            Some(b'"') => break,
            Some(b'\\') => {
                let c = *b.get(j + 1).ok_or("a `\\` ending the header")?;
                if !is_pair_char(c) {
                    return Err(format!("quoted-pair of byte {c:#04x}"));
                }
                value.push(c);
                j += 2;
            }
            Some(&c) if is_qdtext(c) => {
                value.push(c);
                j += 1;
            }
            Some(c) => return Err(format!("byte {c:#04x} in a quoted-string")),
        }
    }
    let raw = String::from_utf8_lossy(&b[start + 1..j]).into_owned();
    let pair = Pair {
        key,
        value,
        raw,
        quoted: true,
    };
    Ok((pair, j + 1))
}

/// The values of every pair keyed `key` in `element`, resolved.
pub fn values(element: &[Pair], key: &str) -> Vec<String> {
    element
        .iter()
        .filter(|p| p.key == key)
        .map(|p| String::from_utf8_lossy(&p.value).into_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_as_rfc_9110_says() {
        let e = parse(r#"Hash=ab;Subject="CN=a\,b\"\\";DNS=x,By=y"#).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[0][1].raw, r#"CN=a\,b\"\\"#);
        assert_eq!(e[0][1].value, br#"CN=a,b"\"#);
        assert_eq!(values(&e[0], "DNS"), ["x"]);
        // `\\"` is an escaped backslash, then the closing quote.
        let forged = parse(r#"Subject="O=q\\";URI=spiffe://td/x""#);
        assert!(forged.is_err(), "{forged:?}");
        let forged = parse(r#"Subject="O=q\\";URI=spiffe://td/x;DNS=a"#).unwrap();
        assert_eq!(values(&forged[0], "URI"), ["spiffe://td/x"]);
        for bad in [r#"Subject="x"#, "DNS=a=b", "DNS=a b", "=x", r#"S="a"b"#] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}

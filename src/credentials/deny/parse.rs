//! Reading a deny file: one entry a line, `#` comments, exact formats,
//! validated whole. The first bad line rejects the file with an error
//! naming it; every size is bounded by a named constant, so a hostile or
//! runaway file costs a bounded amount of work.

use super::{DenyEntry, DenyList};
use crate::identity::{shorten, SanPattern};

/// The longest line a deny file may hold, in bytes (an entry is at most
/// a few hundred bytes; a URI SAN is the longest).
pub const MAX_DENY_LINE: usize = 4096;
/// The most entries a deny file may hold. A deny-list is for incidents
/// (a leaked key, a compromised workload); thousands of entries mean a CRL
/// is the right tool.
pub const MAX_DENY_ENTRIES: usize = 10_000;
/// The largest deny file, in bytes (entries and comments).
pub const MAX_DENY_BYTES: usize = 1024 * 1024;
/// The longest serial number an entry may name, in octets once leading
/// zeros are dropped (RFC 5280 §4.1.2.2: at most 20).
pub const MAX_SERIAL_OCTETS: usize = 20;

/// Why a deny file was refused: the line (1-based, 0 for the file as a
/// whole) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{detail}", line_prefix(*.line))]
pub struct DenyError {
    pub line: usize,
    pub detail: String,
}

fn line_prefix(line: usize) -> String {
    match line {
        0 => String::new(),
        n => format!("line {n}: "),
    }
}

fn at(line: usize, detail: impl Into<String>) -> DenyError {
    DenyError {
        line,
        detail: detail.into(),
    }
}

/// Parses a whole deny file. Blank lines and lines starting with `#` are
/// skipped; an entry may be followed by whitespace and a `#` comment.
pub fn parse_deny(text: &str) -> Result<DenyList, DenyError> {
    if text.len() > MAX_DENY_BYTES {
        return Err(at(
            0,
            format!(
                "{} bytes, more than the {MAX_DENY_BYTES} a deny file may hold",
                text.len()
            ),
        ));
    }
    let mut entries = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        if raw.len() > MAX_DENY_LINE {
            return Err(at(n, format!("longer than {MAX_DENY_LINE} bytes")));
        }
        let Some(entry) = parse_line(raw).map_err(|detail| at(n, detail))? else {
            continue;
        };
        if entries.len() >= MAX_DENY_ENTRIES {
            return Err(at(
                n,
                format!("more than {MAX_DENY_ENTRIES} entries; use a CRL for lists this long"),
            ));
        }
        entries.push(entry);
    }
    Ok(DenyList::new(entries))
}

/// One line: `None` for a blank or comment line.
pub(super) fn parse_line(raw: &str) -> Result<Option<DenyEntry>, String> {
    let line = raw.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    let (entry, rest) = match line.split_once(char::is_whitespace) {
        Some((e, rest)) => (e, rest.trim_start()),
        None => (line, ""),
    };
    if !rest.is_empty() && !rest.starts_with('#') {
        return Err(format!(
            "unexpected {:?} after the entry (one entry a line; a comment starts with #)",
            shorten(rest)
        ));
    }
    parse_entry(entry).map(Some)
}

/// One entry, without comment or surrounding blanks.
pub fn parse_entry(entry: &str) -> Result<DenyEntry, String> {
    if let Some(b64) = entry.strip_prefix("spki-sha256:") {
        return spki(b64).map(DenyEntry::Spki);
    }
    if let Some(rest) = entry.strip_prefix("serial:") {
        let (issuer, hex) = rest.split_once(':').ok_or_else(|| {
            "serial: expects serial:<issuer spki-sha256 base64>:<hex serial>".to_string()
        })?;
        return Ok(DenyEntry::Serial {
            issuer: spki(issuer).map_err(|e| format!("serial: the issuer {e}"))?,
            serial: serial(hex)?,
        });
    }
    if let Some(san) = entry.strip_prefix("san:") {
        return parse_san(san);
    }
    Err(format!(
        "{:?} is not an entry: expected spki-sha256:<base64>, serial:<issuer base64>:<hex> or san:<name>",
        shorten(entry)
    ))
}

/// A base64 SHA-256 (standard or URL-safe alphabet, padding optional).
fn spki(b64: &str) -> Result<[u8; 32], String> {
    crate::identity::pin::parse(b64).ok_or_else(|| {
        format!(
            "{:?} is not the base64 of a SHA-256 (32 bytes) over a SubjectPublicKeyInfo",
            shorten(b64)
        )
    })
}

/// A hex serial: colons ignored, leading zeros ignored, case-insensitive.
pub fn serial(hex: &str) -> Result<Vec<u8>, String> {
    let digits: Vec<u8> = hex.bytes().filter(|b| *b != b':').collect();
    if digits.is_empty() {
        return Err("serial: the serial number is empty".into());
    }
    if let Some(bad) = digits.iter().find(|b| !b.is_ascii_hexdigit()) {
        return Err(format!(
            "serial: {:?} is not hexadecimal (found {:?})",
            shorten(hex),
            char::from(*bad)
        ));
    }
    let start = digits
        .iter()
        .position(|b| *b != b'0')
        .unwrap_or(digits.len());
    let digits = &digits[start..];
    if digits.len() > 2 * MAX_SERIAL_OCTETS {
        return Err(format!(
            "serial: longer than {MAX_SERIAL_OCTETS} octets (RFC 5280 serials are at most 20)"
        ));
    }
    // An odd count of digits: the first octet has one.
    let mut out = Vec::with_capacity(digits.len().div_ceil(2));
    let (head, tail) = digits.split_at(digits.len() % 2);
    if let Some(d) = head.first() {
        out.push(nibble(*d));
    }
    for pair in tail.chunks_exact(2) {
        out.push(nibble(pair[0]) << 4 | nibble(pair[1]));
    }
    Ok(out)
}

fn nibble(d: u8) -> u8 {
    // Only hex digits reach here.
    char::from(d).to_digit(16).unwrap_or(0) as u8
}

/// `san:`: a pattern as `--allow-san` reads it ([`SanPattern`]), in its
/// normal form: an exact name or URI is looked up, a wildcard matched.
/// What `--allow-san` refuses is refused here with its reason, so no
/// entry is accepted that could never match.
fn parse_san(san: &str) -> Result<DenyEntry, String> {
    if san.is_empty() {
        return Err("san: the name is empty".into());
    }
    if let Some(c) = san.chars().find(|c| !c.is_ascii_graphic()) {
        return Err(format!(
            "san: {:?} holds {c:?}; a SAN entry is printable ASCII",
            shorten(san)
        ));
    }
    let pattern: SanPattern = san.parse().map_err(|e| format!("san: {e}"))?;
    Ok(match pattern {
        SanPattern::Dns(name) => DenyEntry::Dns(name),
        SanPattern::Uri(uri) if uri.is_exact() => DenyEntry::Uri(uri.to_string()),
        wildcard => DenyEntry::Pattern(wildcard),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PIN: &str = "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=";

    /// An exact URI is kept in its normal form to be looked up; only one
    /// with a wildcard is kept as a pattern to match.
    #[test]
    fn an_exact_uri_is_looked_up_and_a_wildcard_matched() {
        assert!(matches!(
            parse_san("SPIFFE://TD/ns/a/sa/b"),
            Ok(DenyEntry::Uri(u)) if u == "spiffe://td/ns/a/sa/b"
        ));
        for wild in ["spiffe://td/ns/*/sa/b", "spiffe://td/ns/a/**"] {
            assert!(
                matches!(parse_san(wild), Ok(DenyEntry::Pattern(_))),
                "{wild}"
            );
        }
    }

    #[test]
    fn every_format_parses_and_prints_canonically() {
        let text = format!(
            "# incident 42\n\
             spki-sha256:{PIN}\n\
             \n  serial:{PIN}:00:0A:bc  # the leaked one\n\
             san:Controller.ENV-1.svc\n\
             san:SPIFFE://TD/ns/Prod/sa/x\r\n\
             san:*.Env-1.svc\n\
             san:spiffe://td/ns/*/sa/**\n"
        );
        let list = parse_deny(&text).unwrap();
        let shown: Vec<String> = list.entries().iter().map(|e| e.to_string()).collect();
        assert_eq!(
            shown,
            [
                format!("spki-sha256:{PIN}"),
                format!("serial:{PIN}:abc"),
                "san:controller.env-1.svc".to_string(),
                "san:spiffe://td/ns/Prod/sa/x".to_string(),
                "san:*.env-1.svc".to_string(),
                "san:spiffe://td/ns/*/sa/**".to_string(),
            ]
        );
        let c = list.counts();
        assert_eq!((c.spki, c.serial, c.san, c.total()), (1, 1, 4, 6));
    }

    #[test]
    fn serials_ignore_colons_leading_zeros_and_case() {
        assert_eq!(serial("0A:BC").unwrap(), vec![0x0a, 0xbc]);
        assert_eq!(serial("000abc").unwrap(), vec![0x0a, 0xbc]);
        assert_eq!(serial("ABC").unwrap(), serial("0a:bc").unwrap());
        assert_eq!(serial("00").unwrap(), Vec::<u8>::new());
        assert_eq!(serial(&"f".repeat(40)).unwrap().len(), 20);
        assert!(serial(&"f".repeat(41)).unwrap_err().contains("20 octets"));
        assert!(serial(&format!("0000{}", "f".repeat(40))).is_ok());
        assert!(serial("0x12").unwrap_err().contains("not hexadecimal"));
        assert!(serial(":").unwrap_err().contains("empty"));
    }

    #[test]
    fn a_bad_line_is_named() {
        let cases = [
            ("spki-sha256:nope", 1, "not the base64"),
            ("# ok\nserial:nokey", 2, "serial:<issuer"),
            (&format!("\n\nserial:{PIN}:xyz"), 3, "not hexadecimal"),
            ("serial:abc:12", 1, "the issuer"),
            ("san:", 1, "empty"),
            ("san:a b", 1, "unexpected"),
            ("san:bad/name", 1, "neither a DNS name"),
            ("san:*.svc", 1, "at least two labels"),
            ("san:a.*.svc", 1, "whole leftmost label"),
            ("san:spiffe://td/ns/**/x", 1, "last path segment"),
            ("san:spiffe://td/ns/a/", 1, "san: invalid SAN pattern"),
            ("san:spiffe://td/a?b", 1, "query"),
            ("san:urn:x", 1, "neither a DNS name nor a URI"),
            ("san:caf\u{e9}.svc", 1, "printable ASCII"),
            ("SAN:x.svc", 1, "is not an entry"),
            ("x.svc", 1, "is not an entry"),
            (&format!("spki-sha256:{PIN} trailing"), 1, "unexpected"),
        ];
        for (text, line, what) in cases {
            let e = parse_deny(text).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.to_string().contains(what), "{text:?}: {e}");
            assert!(e.to_string().starts_with(&format!("line {line}: ")), "{e}");
        }
    }

    #[test]
    fn sizes_are_bounded() {
        let long = format!("san:{}", "a".repeat(MAX_DENY_LINE));
        assert!(parse_deny(&long)
            .unwrap_err()
            .to_string()
            .contains("longer than 4096 bytes"));
        let many = "san:a.svc\n".repeat(MAX_DENY_ENTRIES + 1);
        let e = parse_deny(&many).unwrap_err();
        assert_eq!(e.line, MAX_DENY_ENTRIES + 1);
        assert!(e.detail.contains("more than 10000 entries"), "{e}");
        assert!(parse_deny(&"san:a.svc\n".repeat(MAX_DENY_ENTRIES)).is_ok());
        let huge = "#".repeat(MAX_DENY_BYTES + 1);
        assert!(parse_deny(&huge).unwrap_err().to_string().contains("bytes"));
    }

    #[test]
    fn empty_and_comment_only_files_deny_nothing() {
        for text in ["", "\n\n", "# nothing yet\n   # still nothing"] {
            assert!(parse_deny(text).unwrap().is_empty());
        }
    }
}

//! The deny-list target's checks (`fuzz_targets/deny.rs`): a small
//! reference for what docs/deny.md says an accepted file means, written
//! apart from `credentials::deny::parse`.

use crate::frames::base64;
use mtls_sidecar::credentials::deny::{parse_deny, DenyEntry, MAX_DENY_ENTRIES};
use mtls_sidecar::identity::SanPattern;

/// The entry lines of a file as the doc describes them: each line
/// trimmed, blank and `#` lines skipped, the entry the first
/// whitespace-free word.
pub fn entry_words(text: &str) -> Vec<&str> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.split(char::is_whitespace).next().unwrap_or(""))
        .collect()
}

/// A hex serial as the doc normalises it: colons, letter case and leading
/// zeros ignored; zero is `0`.
pub fn normal_serial(hex: &str) -> String {
    let s: String = hex
        .chars()
        .filter(|c| *c != ':')
        .map(|c| c.to_ascii_lowercase())
        .collect();
    match s.trim_start_matches('0') {
        "" => "0".to_string(),
        t => t.to_string(),
    }
}

/// What the doc says of the entry read from `word`: for `san:` the
/// pattern as `--allow-san` reads it, in its normal form (`None` when
/// `--allow-san` refuses it: deny must refuse it too), for `serial:` the
/// normalised serial its line ends with; `None` for `spki-sha256:`
/// (checked by encoding instead).
pub fn expected_line(word: &str) -> Option<String> {
    if let Some(name) = word.strip_prefix("san:") {
        let pattern: SanPattern = name.parse().ok()?;
        return Some(format!("san:{pattern}"));
    }
    let rest = word.strip_prefix("serial:")?;
    let (_issuer, hex) = rest.split_once(':')?;
    Some(normal_serial(hex))
}

/// Parses `text`; for an accepted list checks it against the reference
/// and that its canonical lines parse back to the same entries.
pub fn check(text: &str) {
    let list = match parse_deny(text) {
        Ok(list) => list,
        Err(e) => {
            assert!(e.line <= text.lines().count(), "{e}");
            assert!(!e.detail.is_empty());
            return;
        }
    };
    let words = entry_words(text);
    let entries = list.entries();
    assert_eq!(words.len(), entries.len(), "one entry per entry line");
    assert!(entries.len() <= MAX_DENY_ENTRIES);
    for (word, entry) in words.iter().zip(entries) {
        let line = entry.to_string();
        match (entry, expected_line(word)) {
            (DenyEntry::Serial { .. }, Some(serial)) => {
                assert!(line.ends_with(&format!(":{serial}")), "{word} -> {line}");
                assert!(serial.len() <= 40, "{word}: over 20 octets");
            }
            (DenyEntry::Dns(_) | DenyEntry::Uri(_) | DenyEntry::Pattern(_), Some(want)) => {
                assert_eq!(line, want, "{word}");
                assert!(want[4..].bytes().all(|b| b.is_ascii_graphic()));
            }
            (DenyEntry::Spki(k), None) => {
                assert!(word.starts_with("spki-sha256:"), "{word}");
                assert_eq!(line, format!("spki-sha256:{}", base64(k)));
            }
            (e, want) => panic!("{word:?} read as {e:?}, reference {want:?}"),
        }
    }
    let canonical: String = entries.iter().map(|e| format!("{e}\n")).collect();
    let again = parse_deny(&canonical).expect("canonical lines parse");
    assert_eq!(again.entries(), entries, "canonical lines read back");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_pieces() {
        assert_eq!(normal_serial("00:0A:bc"), "abc");
        assert_eq!(normal_serial("00"), "0");
        assert_eq!(entry_words("# x\n  san:a  # c\n\n"), ["san:a"]);
        check("spki-sha256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\nsan:A.b\n");
    }
}

//! DNS names as role identities: the RFC 1123 host-name rules a `--allow-san`
//! or `--expect-san` name must pass at start-up, and the one-label wildcard
//! match. A name that could never equal a certificate's DNS SAN (a trailing
//! dot, an underscore, a U-label) is refused loudly here instead of silently
//! refusing every peer later.

/// Longest DNS name, in its text form without a trailing dot.
pub const MAX_NAME: usize = 253;
/// Longest label.
pub const MAX_LABEL: usize = 63;

/// Checks one label: 1 to 63 letters, digits and hyphens (A-labels only),
/// neither starting nor ending with a hyphen.
pub fn check_label(label: &[u8]) -> Result<(), String> {
    let shown = || super::shorten(&String::from_utf8_lossy(label));
    if label.is_empty() {
        return Err("empty label (\"..\" or a leading '.')".into());
    }
    if label.len() > MAX_LABEL {
        return Err(format!(
            "label {:?} is longer than {MAX_LABEL} characters",
            shown()
        ));
    }
    if !label
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || *b == b'-')
    {
        return Err(format!(
            "label {:?} has a character other than a-z, 0-9 and '-' \
             (internationalised names must be given as A-labels, xn--...)",
            shown()
        ));
    }
    if label.starts_with(b"-") || label.ends_with(b"-") {
        return Err(format!("label {:?} starts or ends with '-'", shown()));
    }
    Ok(())
}

/// Checks a whole name: labels as [`check_label`], at most 253 characters,
/// no trailing dot, and a last label that is not all digits (that would be
/// an IPv4 address, and IP SANs are not identities here).
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("empty name".into());
    }
    if name.ends_with('.') {
        return Err("a trailing '.' is not allowed (certificate DNS SANs never carry one)".into());
    }
    if name.len() > MAX_NAME {
        return Err(format!("longer than {MAX_NAME} characters"));
    }
    let mut last = "";
    for label in name.split('.') {
        check_label(label.as_bytes())?;
        last = label;
    }
    if last.bytes().all(|b| b.is_ascii_digit()) {
        return Err("the last label is all digits: an IP address is not a DNS name".into());
    }
    Ok(())
}

/// True when `name` is one valid label followed by `suffix` (which holds its
/// leading dot), ignoring ASCII case. Works on bytes: `name` comes from a
/// peer's certificate and may hold anything.
pub fn wildcard_matches(suffix: &str, name: &str) -> bool {
    let (name, suffix) = (name.as_bytes(), suffix.as_bytes());
    let Some(cut) = name.len().checked_sub(suffix.len()) else {
        return false;
    };
    name[cut..].eq_ignore_ascii_case(suffix) && check_label(&name[..cut]).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn why(name: &str) -> String {
        check_name(name).expect_err(name)
    }

    #[test]
    fn accepts_ldh_names() {
        for ok in [
            "a",
            "localhost",
            "controller.env-1.svc",
            "Replica-0.ENV-1.svc",
            "xn--bcher-kva.example",
            "0a.1b.9c",
            "123.example",
            "a-b.c",
        ] {
            assert_eq!(check_name(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn label_length_boundary_is_63() {
        let l63 = "a".repeat(63);
        let l64 = "a".repeat(64);
        assert_eq!(check_name(&format!("{l63}.svc")), Ok(()));
        assert!(why(&format!("{l64}.svc")).contains("longer than 63"));
    }

    #[test]
    fn name_length_boundary_is_253() {
        // 63+1+63+1+63+1+61 = 253
        let l63 = "a".repeat(63);
        let name = format!("{l63}.{l63}.{l63}.{}", "b".repeat(61));
        assert_eq!(name.len(), 253);
        assert_eq!(check_name(&name), Ok(()));
        let long = format!("{name}b");
        assert!(why(&long).contains("longer than 253"), "{}", why(&long));
    }

    #[test]
    fn refuses_what_no_certificate_san_can_equal() {
        assert!(why("x.svc.").contains("trailing '.'"));
        assert!(why("name.").contains("trailing '.'"));
        assert!(why("").contains("empty name"));
        assert!(why("a..b").contains("empty label"));
        assert!(why(".a.b").contains("empty label"));
        assert!(why("a_b.svc").contains("a-z, 0-9 and '-'"));
        assert!(why("bad name").contains("a-z, 0-9 and '-'"));
        assert!(why("bücher.example").contains("A-labels"));
        assert!(why("-a.svc").contains("starts or ends with '-'"));
        assert!(why("a-.svc").contains("starts or ends with '-'"));
        assert!(why("127.0.0.1").contains("all digits"));
        assert!(why("a.123").contains("all digits"));
    }

    #[test]
    fn label_checks_each_rule() {
        assert_eq!(check_label(b"a"), Ok(()));
        assert_eq!(check_label(b"a-1"), Ok(()));
        assert!(check_label(b"").is_err());
        assert!(check_label(b"-").is_err());
        assert!(check_label(b"a.b").is_err());
        assert!(check_label(b"*").is_err());
        assert!(check_label(&[0xff, b'a']).is_err());
        assert!(check_label("a".repeat(64).as_bytes()).is_err());
    }

    #[test]
    fn wildcard_takes_exactly_one_valid_label() {
        let s = ".env-1.svc";
        assert!(wildcard_matches(s, "replica-0.env-1.svc"));
        assert!(wildcard_matches(s, "R.ENV-1.SVC"));
        assert!(!wildcard_matches(s, "env-1.svc"));
        assert!(!wildcard_matches(s, ".env-1.svc"));
        assert!(!wildcard_matches(s, "a.b.env-1.svc"));
        assert!(!wildcard_matches(s, "*.env-1.svc"));
        assert!(!wildcard_matches(s, "a_b.env-1.svc"));
        assert!(!wildcard_matches(s, "xenv-1.svc"));
        assert!(!wildcard_matches(s, "a.env-1.svc.evil"));
        assert!(!wildcard_matches(s, "svc"));
        // Bytes that are not a char boundary never panic.
        assert!(!wildcard_matches(s, "\u{e9}.env-1.svc"));
        assert!(!wildcard_matches(".b", "\u{e9}"));
    }
}

//! A reference SAN matcher, written from the README's and the module docs'
//! rules rather than from `identity/`'s code: a pattern is an exact DNS
//! name, `*.suffix` (exactly one leftmost label), or a URI with an
//! authority whose path segments may be `*` (one segment) and end in `/**`
//! (one or more); certificate URIs obey the same rules without wildcards.
//! It works on whole strings with a character table per part, where the
//! sidecar splits into typed parts first, so a shared mistake is unlikely.

/// A parsed reference pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// Lowercased name.
    Name(String),
    /// Lowercased suffix, without the `*.`.
    Wild(String),
    /// Lowercased `scheme://authority`, then the path segments; `None`
    /// stands for `*`; `rest`: a final `/**`.
    Uri {
        head: String,
        segs: Vec<Option<String>>,
        rest: bool,
    },
}

const LDH: &str = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-";
const ALNUM: &str = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

fn all_in(s: &str, set: &str) -> bool {
    s.chars().all(|c| set.contains(c))
}

fn label_ok(l: &str) -> bool {
    (1..=63).contains(&l.len()) && all_in(l, LDH) && !l.starts_with('-') && !l.ends_with('-')
}

fn name_ok(n: &str) -> bool {
    let labels: Vec<&str> = n.split('.').collect();
    let last = labels[labels.len() - 1];
    (1..=253).contains(&n.len())
        && labels.iter().all(|l| label_ok(l))
        && !last.chars().all(|c| c.is_ascii_digit())
}

/// Parses a pattern, or `None` where the sidecar must refuse it.
pub fn parse_pattern(p: &str) -> Option<Pattern> {
    if p.contains("://") {
        return parse_uri(p, true).map(|(head, segs, rest)| Pattern::Uri { head, segs, rest });
    }
    if p.contains(':') || p.contains('/') {
        return None;
    }
    if let Some(suffix) = p.strip_prefix("*.") {
        return (name_ok(suffix) && suffix.contains('.') && p.len() <= 253)
            .then(|| Pattern::Wild(suffix.to_ascii_lowercase()));
    }
    name_ok(p).then(|| Pattern::Name(p.to_ascii_lowercase()))
}

type UriParts = (String, Vec<Option<String>>, bool);

/// `scheme://authority[/seg...]`; wildcards only when `pattern`.
fn parse_uri(u: &str, pattern: bool) -> Option<UriParts> {
    if u.len() > 2048 || !u.is_ascii() || u.contains('#') || u.contains('?') {
        return None;
    }
    let at = u.find("://")?;
    let scheme = &u[..at];
    let after = &u[at + 3..];
    let first = scheme.chars().next()?;
    if !first.is_ascii_alphabetic() || !all_in(scheme, &format!("{ALNUM}+-.")) {
        return None;
    }
    let (authority, path) = match after.find('/') {
        Some(i) => (&after[..i], Some(&after[i + 1..])),
        None => (after, None),
    };
    let spiffe = scheme.eq_ignore_ascii_case("spiffe");
    let authority_ok = if spiffe {
        !authority.is_empty() && all_in(authority, &format!("{ALNUM}._-"))
    } else {
        host_port_ok(authority)
    };
    if !authority_ok {
        return None;
    }
    let mut segs = Vec::new();
    let mut rest = false;
    if let Some(path) = path {
        let parts: Vec<&str> = path.split('/').collect();
        for (i, s) in parts.iter().enumerate() {
            if pattern && *s == "**" && i + 1 == parts.len() {
                rest = true;
            } else if pattern && *s == "*" {
                segs.push(None);
            } else if segment_ok(s, spiffe) {
                segs.push(Some(s.to_string()));
            } else {
                return None;
            }
        }
    }
    Some((
        format!(
            "{}://{}",
            scheme.to_ascii_lowercase(),
            authority.to_ascii_lowercase()
        ),
        segs,
        rest,
    ))
}

fn host_port_ok(a: &str) -> bool {
    let (host_ok, port) = if let Some(lit) = a.strip_prefix('[') {
        let Some(close) = lit.find(']') else {
            return false;
        };
        let ip = &lit[..close];
        let after = &lit[close + 1..];
        let port = match after {
            "" => None,
            _ => match after.strip_prefix(':') {
                Some(p) => Some(p),
                None => return false,
            },
        };
        (
            !ip.is_empty() && all_in(ip, "0123456789abcdefABCDEF:."),
            port,
        )
    } else {
        let (host, port) = match a.find(':') {
            Some(i) => (&a[..i], Some(&a[i + 1..])),
            None => (a, None),
        };
        (
            !host.is_empty() && all_in(host, &format!("{ALNUM}-._~")),
            port,
        )
    };
    host_ok
        && port.is_none_or(|p| {
            let digits = p.trim_start_matches('0');
            !p.is_empty()
                && all_in(p, "0123456789")
                && (digits.is_empty()
                    || digits.len() <= 5 && digits.parse::<u32>().is_ok_and(|n| n <= 65535))
        })
}

fn segment_ok(s: &str, spiffe: bool) -> bool {
    if s.is_empty() || s == "." || s == ".." || s.contains('*') {
        return false;
    }
    if spiffe {
        return all_in(s, &format!("{ALNUM}._-"));
    }
    // pchar without '*', escapes well formed.
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            if !(b.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
            {
                return false;
            }
            i += 3;
        } else {
            if !format!("{ALNUM}-._~!$&'()+,;=:@").contains(char::from(b[i])) {
                return false;
            }
            i += 1;
        }
    }
    true
}

/// True when a certificate with these SANs matches the pattern.
pub fn matches(p: &Pattern, dns: &[String], uris: &[String]) -> bool {
    match p {
        Pattern::Name(n) => dns.iter().any(|d| d.to_ascii_lowercase() == *n),
        Pattern::Wild(suffix) => dns.iter().any(|d| {
            let d = d.to_ascii_lowercase();
            match d.split_once('.') {
                Some((first, tail)) => tail == suffix && label_ok(first),
                None => false,
            }
        }),
        Pattern::Uri { head, segs, rest } => uris.iter().any(|u| {
            let Some((h, got, _)) = parse_uri(u, false) else {
                return false;
            };
            let got: Vec<String> = got.into_iter().flatten().collect();
            let fits = |want: &Option<String>, g: &String| match want {
                Some(w) => w == g,
                None => !g.contains('%'),
            };
            let count_ok = if *rest {
                got.len() > segs.len()
            } else {
                got.len() == segs.len()
            };
            h == *head
                && count_ok
                && segs.iter().zip(&got).all(|(w, g)| fits(w, g))
                && got[segs.len().min(got.len())..]
                    .iter()
                    .all(|g| !g.contains('%'))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, dns: &[&str], uris: &[&str]) -> bool {
        let p = parse_pattern(p).expect(p);
        let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        matches(&p, &own(dns), &own(uris))
    }

    #[test]
    fn reference_follows_the_documented_rules() {
        assert!(m("A.svc", &["a.SVC"], &[]));
        assert!(m("*.env.svc", &["x.env.svc"], &[]));
        assert!(!m("*.env.svc", &["x.y.env.svc"], &[]));
        assert!(!m("*.env.svc", &["*.env.svc"], &[]));
        assert!(m(
            "spiffe://TD/ns/*/sa/**",
            &[],
            &["spiffe://td/ns/a/sa/b/c"]
        ));
        assert!(!m("spiffe://td/ns/*/sa/**", &[], &["spiffe://td/ns/a/sa"]));
        assert!(!m("https://h/*", &[], &["https://h/%2e%2e"]));
        assert!(m("https://h:443/a%2F", &[], &["HTTPS://H:443/a%2F"]));
        assert!(m("x://h/a@b", &[], &["x://h/a@b"]));
        for bad in [
            "",
            "a.",
            "*.a",
            "a*.b.c",
            "h:1",
            "spiffe://td/",
            "spiffe://td:1/a",
            "x://u@h",
        ] {
            assert_eq!(parse_pattern(bad), None, "{bad}");
        }
    }
}

/// The target: parse the pattern both ways, then match both ways.
pub fn check(text: &str) {
    use mtls_sidecar::identity::{CertInfo, SanPattern, SanPolicy};
    let mut lines = text.split('\n');
    let pattern = lines.next().unwrap_or_default();
    let (mut dns, mut uris) = (Vec::new(), Vec::new());
    for line in lines.take(16) {
        if let Some(d) = line.strip_prefix('d') {
            dns.push(d.to_string());
        } else if let Some(fill) = line.strip_prefix('=') {
            let filled = pattern.replace('*', fill);
            dns.push(filled.clone());
            uris.push(filled);
        } else {
            uris.push(line.to_string());
        }
    }
    let sidecar = pattern.parse::<SanPattern>();
    let reference = parse_pattern(pattern);
    let (sidecar, reference) = match (sidecar, reference) {
        (Ok(s), Some(r)) => (s, r),
        (Err(e), None) => {
            let shown = e.to_string();
            assert!(names_pattern(&shown, pattern), "{shown}");
            return;
        }
        (s, r) => panic!("{pattern:?}: sidecar {s:?}, reference {r:?}"),
    };
    // What a pattern shows (status, logs) parses back to itself.
    assert_eq!(
        sidecar.to_string().parse::<SanPattern>().ok(),
        Some(sidecar.clone())
    );
    let cert = CertInfo {
        subject: String::new(),
        serial: String::new(),
        dns_sans: dns.clone(),
        uri_sans: uris.clone(),
        not_before: 0,
        not_after: 0,
        server_auth: true,
        client_auth: true,
        any_usage: false,
    };
    let want = matches(&reference, &dns, &uris);
    assert_eq!(
        sidecar.matches(&cert),
        want,
        "{pattern:?} against dns {dns:?} uri {uris:?}"
    );
    assert_eq!(SanPolicy::OneOf(vec![sidecar]).allows(&cert), want);
}

/// Whether an error message names `pattern`: quoted whole, or (a long one)
/// cut short with `…` after a prefix of its quoted form.
fn names_pattern(shown: &str, pattern: &str) -> bool {
    let quoted = format!("{pattern:?}");
    if shown.contains(&quoted) {
        return true;
    }
    let Some(start) = shown.find('"') else {
        return false;
    };
    let Some(cut) = shown[start..].find('…') else {
        return false;
    };
    let prefix = &shown[start..start + cut];
    prefix.len() > 1 && quoted.starts_with(prefix)
}

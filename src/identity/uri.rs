//! URI identities (SPIFFE IDs and other URIs with an authority) and the
//! patterns matched against them.
//!
//! One strict parser reads both the operator's patterns and the peer's URI
//! SANs, so that matching compares parsed parts, never raw text: the scheme
//! and the authority are compared without regard to ASCII case, the path
//! segment by segment and exactly (no percent-decoding, no dot-segment
//! removal). Whatever could make two readers disagree about a path (empty
//! or dot segments, a query, a fragment, userinfo) is refused in a pattern
//! at start-up and makes a certificate's URI never match. `spiffe` URIs
//! follow the SPIFFE ID rules on top of that. In a pattern, a path segment
//! `*` stands for exactly one segment and a final `/**` for one or more;
//! neither matches a segment holding a percent-escape (`%2F`, `%2E%2E`), so
//! a wildcard cannot be stretched across what a decoding reader would see
//! as a separator or a step up.

/// Longest URI accepted (the SPIFFE interoperability limit).
pub const MAX_URI: usize = 2048;

/// A certificate's URI SAN, parsed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Uri {
    scheme: String,
    authority: String,
    segments: Vec<String>,
}

/// One path segment of a pattern.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Segment {
    Exact(String),
    /// `*`: any one segment.
    One,
}

/// A URI pattern: an exact URI, or one with `*` segments and/or a final
/// `/**`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UriPattern {
    scheme: String,
    authority: String,
    segments: Vec<Segment>,
    /// A final `/**`: one or more further segments.
    rest: bool,
}

/// Scheme and authority (both lowercased) and the raw path segments.
struct Parts<'a> {
    scheme: String,
    authority: String,
    spiffe: bool,
    segments: Vec<&'a str>,
}

fn parts(s: &str) -> Result<Parts<'_>, String> {
    if s.len() > MAX_URI {
        return Err(format!("longer than {MAX_URI} bytes"));
    }
    if !s.is_ascii() {
        return Err("non-ASCII characters must be percent-encoded".into());
    }
    let (scheme, rest) = s
        .split_once("://")
        .ok_or("not a URI with an authority (scheme://authority/path)")?;
    check_scheme(scheme)?;
    if rest.contains('#') {
        return Err("a fragment ('#') is not part of an identity".into());
    }
    if rest.contains('?') {
        return Err("a query ('?') is not part of an identity".into());
    }
    let scheme = scheme.to_ascii_lowercase();
    let spiffe = scheme == "spiffe";
    let (authority, segments) = match rest.split_once('/') {
        Some((a, path)) => (a, path.split('/').collect()),
        None => (rest, Vec::new()),
    };
    let authority = if spiffe {
        trust_domain(authority)?
    } else {
        check_authority(authority)?
    };
    Ok(Parts {
        scheme,
        authority,
        spiffe,
        segments,
    })
}

/// RFC 3986: `ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )`.
fn check_scheme(scheme: &str) -> Result<(), String> {
    let mut bytes = scheme.bytes();
    let first_ok = bytes.next().is_some_and(|b| b.is_ascii_alphabetic());
    if first_ok && bytes.all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b)) {
        Ok(())
    } else {
        Err(format!("{scheme:?} is not a URI scheme"))
    }
}

fn no_userinfo(authority: &str) -> Result<(), String> {
    if authority.contains('@') {
        return Err("userinfo ('user@') is not allowed in the authority".into());
    }
    Ok(())
}

/// A SPIFFE trust domain: lowercase letters, digits, `.`, `-`, `_`; no
/// port, no userinfo. Upper case is folded first: the authority is
/// case-insensitive.
fn trust_domain(authority: &str) -> Result<String, String> {
    no_userinfo(authority)?;
    let td = authority.to_ascii_lowercase();
    if td.is_empty() {
        return Err("a SPIFFE ID needs a trust domain (spiffe://TRUST-DOMAIN/...)".into());
    }
    if !td
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
    {
        return Err(format!(
            "SPIFFE trust domain {td:?} may hold only letters, digits, '.', '-' and '_' \
             (no port, no userinfo)"
        ));
    }
    Ok(td)
}

/// A generic authority: `host[:port]`, the host a name of unreserved
/// characters or a bracketed IP literal; lowercased.
fn check_authority(authority: &str) -> Result<String, String> {
    no_userinfo(authority)?;
    let a = authority.to_ascii_lowercase();
    let (host_ok, port) = match a.strip_prefix('[') {
        Some(lit) => {
            let (ip, after) = lit.split_once(']').ok_or("unclosed '[' in the authority")?;
            let ip_ok = !ip.is_empty()
                && ip
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() || b":.".contains(&b));
            match after {
                "" => (ip_ok, None),
                _ => (
                    ip_ok,
                    Some(
                        after
                            .strip_prefix(':')
                            .ok_or("junk after ']' in the authority")?,
                    ),
                ),
            }
        }
        None => {
            let (host, port) = match a.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (a.as_str(), None),
            };
            let host_ok = !host.is_empty()
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b));
            (host_ok, port)
        }
    };
    if !host_ok {
        return Err(format!(
            "authority {a:?}: the host must be letters, digits, '-', '.', '_', '~' \
             or a bracketed IP literal"
        ));
    }
    if let Some(p) = port {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) || p.parse::<u16>().is_err() {
            return Err(format!(
                "authority {a:?}: the port must be a number up to 65535"
            ));
        }
    }
    Ok(a)
}

/// RFC 3986 `pchar` without `*`: unreserved, sub-delims, `:`, `@`, and
/// well-formed percent-escapes.
fn pchars_ok(seg: &[u8]) -> bool {
    let hex = |h: Option<&u8>| h.is_some_and(u8::is_ascii_hexdigit);
    let mut bytes = seg.iter();
    while let Some(&b) = bytes.next() {
        let ok = if b == b'%' {
            hex(bytes.next()) && hex(bytes.next())
        } else {
            b.is_ascii_alphanumeric() || b"-._~!$&'()+,;=:@".contains(&b)
        };
        if !ok {
            return false;
        }
    }
    true
}

/// One literal path segment, in a pattern or a certificate.
fn check_segment(seg: &str, spiffe: bool) -> Result<(), String> {
    if seg.is_empty() {
        return Err("empty path segment (\"//\" or a trailing '/')".into());
    }
    if seg == "." || seg == ".." {
        return Err(format!("dot segment {seg:?} in the path"));
    }
    if seg.contains('*') {
        return Err(format!(
            "path segment {seg:?}: '*' is only allowed as a whole segment ('*', or '**' last)"
        ));
    }
    let ok = if spiffe {
        seg.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    } else {
        pchars_ok(seg.as_bytes())
    };
    if ok {
        Ok(())
    } else if spiffe {
        Err(format!(
            "SPIFFE path segment {seg:?} may hold only letters, digits, '.', '-' and '_'"
        ))
    } else {
        Err(format!(
            "path segment {seg:?} has a character a URI path does not allow"
        ))
    }
}

/// True when a wildcard may stand for `seg`: no percent-escape in it.
fn plain(seg: &str) -> bool {
    !seg.contains('%')
}

impl Uri {
    /// Parses a certificate's URI SAN. `Err` means it never matches.
    pub fn parse(s: &str) -> Result<Uri, String> {
        let p = parts(s)?;
        let mut segments = Vec::with_capacity(p.segments.len());
        for seg in p.segments {
            check_segment(seg, p.spiffe)?;
            segments.push(seg.to_string());
        }
        Ok(Uri {
            scheme: p.scheme,
            authority: p.authority,
            segments,
        })
    }
}

impl UriPattern {
    /// Parses and validates a pattern.
    pub fn parse(s: &str) -> Result<UriPattern, String> {
        let p = parts(s)?;
        let mut segments = Vec::with_capacity(p.segments.len());
        let mut rest = false;
        let last = p.segments.len().saturating_sub(1);
        for (i, seg) in p.segments.into_iter().enumerate() {
            match seg {
                "**" if i == last => rest = true,
                "**" => return Err("'**' is only allowed as the last path segment".into()),
                "*" => segments.push(Segment::One),
                _ => {
                    check_segment(seg, p.spiffe)?;
                    segments.push(Segment::Exact(seg.to_string()));
                }
            }
        }
        Ok(UriPattern {
            scheme: p.scheme,
            authority: p.authority,
            segments,
            rest,
        })
    }

    /// True when the pattern names one URI: no `*` segment, no `/**`.
    pub fn is_exact(&self) -> bool {
        !self.rest && self.segments.iter().all(|s| matches!(s, Segment::Exact(_)))
    }

    /// True when `uri` is this URI, or fits its wildcards.
    pub fn matches(&self, uri: &Uri) -> bool {
        let n = self.segments.len();
        let count_ok = if self.rest {
            uri.segments.len() > n
        } else {
            uri.segments.len() == n
        };
        count_ok
            && self.scheme == uri.scheme
            && self.authority == uri.authority
            && self
                .segments
                .iter()
                .zip(&uri.segments)
                .all(|(want, got)| match want {
                    Segment::Exact(w) => w == got,
                    Segment::One => plain(got),
                })
            && uri.segments[n..].iter().all(|s| plain(s))
    }
}

/// The normal form: scheme and authority lowercase, the path as it is.
impl std::fmt::Display for Uri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}", self.scheme, self.authority)?;
        for seg in &self.segments {
            write!(f, "/{seg}")?;
        }
        Ok(())
    }
}

impl std::fmt::Display for UriPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}", self.scheme, self.authority)?;
        for seg in &self.segments {
            match seg {
                Segment::Exact(s) => write!(f, "/{s}")?,
                Segment::One => f.write_str("/*")?,
            }
        }
        if self.rest {
            f.write_str("/**")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pat(s: &str) -> UriPattern {
        UriPattern::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn why(s: &str) -> String {
        UriPattern::parse(s).expect_err(s)
    }

    /// Does pattern `p` match certificate URI `u`? (`false` when `u` does
    /// not parse.)
    fn m(p: &str, u: &str) -> bool {
        Uri::parse(u).is_ok_and(|u| pat(p).matches(&u))
    }

    /// Only a pattern with no `*` segment and no `/**` names one URI (the
    /// deny-list looks those up rather than matching them).
    #[test]
    fn only_a_pattern_without_wildcards_is_exact() {
        assert!(pat("spiffe://td/ns/a/sa/b").is_exact());
        assert!(!pat("spiffe://td/ns/*/sa/b").is_exact());
        assert!(!pat("spiffe://td/ns/a/**").is_exact());
    }

    #[test]
    fn exact_spiffe_ids() {
        assert!(m("spiffe://td/ns/a/sa/b", "spiffe://td/ns/a/sa/b"));
        assert!(!m("spiffe://td/ns/a/sa/b", "spiffe://td/ns/a/sa/bb"));
        assert!(!m("spiffe://td/ns/a/sa/b", "spiffe://td/ns/a/sa"));
        assert!(!m("spiffe://td/ns/a/sa/b", "spiffe://td/ns/a/sa/b/c"));
        assert!(!m("spiffe://td/ns/a/sa/b", "spiffe://td2/ns/a/sa/b"));
        assert!(!m("spiffe://td/ns/a/sa/b", "https://td/ns/a/sa/b"));
        assert!(m("spiffe://td", "spiffe://td"));
        assert!(!m("spiffe://td", "spiffe://td/a"));
    }

    #[test]
    fn scheme_and_authority_ignore_case_the_path_does_not() {
        assert!(m("spiffe://td/a", "spiffe://TD/a"));
        assert!(m("spiffe://TD/a", "spiffe://td/a"));
        assert!(m("SPIFFE://td/a", "spiffe://td/a"));
        assert!(m("spiffe://td/a", "Spiffe://Td/a"));
        assert!(!m("spiffe://td/a", "spiffe://td/A"));
        assert!(m(
            "https://Example.COM:8443/x",
            "HTTPS://example.com:8443/x"
        ));
        assert!(!m("https://example.com/X", "https://example.com/x"));
        assert!(!m("https://example.com:8443/x", "https://example.com/x"));
    }

    #[test]
    fn one_star_is_exactly_one_segment() {
        let p = "spiffe://td/ns/*/sa/x";
        assert!(m(p, "spiffe://td/ns/a/sa/x"));
        assert!(m(p, "spiffe://td/ns/a.b-c_d/sa/x"));
        assert!(!m(p, "spiffe://td/ns/a/b/sa/x"));
        assert!(!m(p, "spiffe://td/ns/sa/x"));
        assert!(!m(p, "spiffe://td/ns//sa/x"));
        assert!(!m(p, "spiffe://td/ns/a/sa/y"));
        assert!(!m(p, "spiffe://td/ns/a/sa/x/y"));
        assert!(!m(p, "spiffe://td/ns/*/sa/x"));
        assert!(m("spiffe://td/*", "spiffe://td/a"));
        assert!(!m("spiffe://td/*", "spiffe://td"));
        assert!(!m("spiffe://td/*", "spiffe://td/"));
        assert!(!m("spiffe://td/*", "spiffe://td/a/b"));
    }

    #[test]
    fn double_star_is_one_or_more_segments_under_the_prefix() {
        let p = "spiffe://td/**";
        assert!(m(p, "spiffe://td/a"));
        assert!(m(p, "spiffe://td/a/b/c"));
        assert!(!m(p, "spiffe://td"));
        assert!(!m(p, "spiffe://td/"));
        assert!(!m(p, "spiffe://td2/a"));
        assert!(!m(p, "spiffe://td.evil/a"));
        let p = "spiffe://td/ns/prod/**";
        assert!(m(p, "spiffe://td/ns/prod/sa/x"));
        assert!(!m(p, "spiffe://td/ns/prod"));
        assert!(!m(p, "spiffe://td/ns/prodx/sa"));
        assert!(!m(p, "spiffe://td/ns/dev/sa/x"));
        assert!(m("spiffe://td/*/x/**", "spiffe://td/a/x/b"));
        assert!(!m("spiffe://td/*/x/**", "spiffe://td/a/y/b"));
        assert!(!m("spiffe://td/*/x/**", "spiffe://td/a/x"));
    }

    #[test]
    fn percent_escapes_never_stretch_a_wildcard() {
        // In SPIFFE IDs '%' is not allowed at all.
        assert!(!m("spiffe://td/ns/*/sa/x", "spiffe://td/ns/a%2Fb/sa/x"));
        assert!(!m("spiffe://td/**", "spiffe://td/a%2Fb"));
        // Elsewhere an escape is data inside one segment: exact segments
        // compare it byte for byte, wildcards refuse it.
        assert!(!m("https://h/a/*/c", "https://h/a/x%2Fy/c"));
        assert!(!m("https://h/a/*/c", "https://h/a/%2E%2E/c"));
        assert!(!m("https://h/a/**", "https://h/a/%2E%2E/admin"));
        assert!(!m("https://h/a/**", "https://h/a/b/%2e%2e"));
        assert!(m("https://h/a%2Fb", "https://h/a%2Fb"));
        assert!(!m("https://h/a%2Fb", "https://h/a%2fb"));
        assert!(!m("https://h/a/b", "https://h/a%2Fb"));
        assert!(!m("https://h/a%2Fb", "https://h/a/b"));
        assert!(m("https://h/a/*/c", "https://h/a/x~y/c"));
        assert!(m("https://h/a/**", "https://h/a/x/y"));
    }

    #[test]
    fn certificate_uris_that_do_not_parse_never_match() {
        for bad in [
            "spiffe://td/a/",
            "spiffe://td//a",
            "spiffe://td/./a",
            "spiffe://td/a/..",
            "spiffe://td/a?x",
            "spiffe://td/a#x",
            "spiffe://td:443/a",
            "spiffe://u@td/a",
            "spiffe:///a",
            "spiffe:td/a",
            "spiffe://td/a b",
            "spiffe://td/*",
            "https://h/*",
            "https://h/a*",
            "https://h/%zz",
            "https://h/%2",
            "https://h/\u{e9}",
            "https://h/a\\b",
        ] {
            assert!(Uri::parse(bad).is_err(), "{bad}");
        }
        assert!(!m("spiffe://td/**", "spiffe://td/a/"));
        assert!(!m("https://h/**", "https://h/*"));
        assert!(!m("https://h/*", "https://h/*"));
    }

    #[test]
    fn patterns_are_validated() {
        assert!(why("spiffe://td/a/").contains("empty path segment"));
        assert!(why("spiffe://td/").contains("empty path segment"));
        assert!(why("spiffe://td//a").contains("empty path segment"));
        assert!(why("spiffe://td/a/../b").contains("dot segment"));
        assert!(why("spiffe://td/./b").contains("dot segment"));
        assert!(why("spiffe://td/a?b=c").contains("query"));
        assert!(why("spiffe://td/a#f").contains("fragment"));
        assert!(why("spiffe://td?x").contains("query"));
        assert!(why("spiffe://td:443/a").contains("trust domain"));
        assert!(why("spiffe://user@td/a").contains("userinfo"));
        assert!(why("spiffe:///a").contains("needs a trust domain"));
        assert!(why("spiffe://").contains("needs a trust domain"));
        assert!(why("spiffe://t d/a").contains("trust domain"));
        assert!(why("spiffe://td/a%2Fb").contains("SPIFFE path segment"));
        assert!(why("spiffe://td/a:b").contains("SPIFFE path segment"));
        assert!(why("spiffe://td/sa-*").contains("whole segment"));
        assert!(why("spiffe://td/**/a").contains("last path segment"));
        assert!(why("spiffe://td/***").contains("whole segment"));
        assert!(why("spiffe://*.td/a").contains("trust domain"));
        assert!(why("://td/a").contains("not a URI scheme"));
        assert!(why("1x://td/a").contains("not a URI scheme"));
        assert!(why("a_b://td/a").contains("not a URI scheme"));
        assert!(why("https://").contains("authority"));
        assert!(why("https:///a").contains("authority"));
        assert!(why("https://h:/a").contains("port"));
        assert!(why("https://h:65536/a").contains("port"));
        assert!(why("https://h:+80/a").contains("port"));
        assert!(why("https://h:8x/a").contains("port"));
        assert!(why("https://u:p@h/a").contains("userinfo"));
        assert!(why("https://h%41/a").contains("authority"));
        assert!(why("https://*.h/a").contains("authority"));
        assert!(why("https://[::1/a").contains("unclosed"));
        assert!(why("https://[::1]x/a").contains("junk"));
        assert!(why("https://[]/a").contains("authority"));
        assert!(why("https://[g::1]/a").contains("authority"));
        assert!(why("https://h/a b").contains("does not allow"));
        assert!(why("https://h/%4").contains("does not allow"));
        assert!(why("https://h/a%").contains("does not allow"));
        assert!(why("https://h/\u{e9}").contains("non-ASCII"));
        assert!(why(&format!("spiffe://td/{}", "a".repeat(MAX_URI))).contains("longer"));
    }

    #[test]
    fn pattern_boundaries_that_are_accepted() {
        let max = format!("spiffe://td/{}", "a".repeat(MAX_URI - 12));
        assert_eq!(max.len(), MAX_URI);
        assert!(m(&max, &max));
        assert!(Uri::parse(&format!("{max}a")).is_err());
        for ok in [
            "spiffe://td",
            "spiffe://a.b-c_d/e.f-g_H/0",
            "https://h",
            "https://h:0/a",
            "https://h:65535/a",
            "https://[::1]/a",
            "https://[fe80::1]:8443/a",
            "https://h/%41a/!$&'()+,;=:@-._~",
            "a+b-c.d://h/x",
        ] {
            let p = pat(ok);
            assert!(m(ok, ok), "{ok} does not match itself");
            assert_eq!(pat(&p.to_string()), p, "{ok}");
        }
    }

    #[test]
    fn display_is_the_normalised_pattern() {
        assert_eq!(
            pat("SPIFFE://TD/ns/*/sa/**").to_string(),
            "spiffe://td/ns/*/sa/**"
        );
        assert_eq!(pat("https://H:1/A").to_string(), "https://h:1/A");
        assert_eq!(pat("spiffe://td").to_string(), "spiffe://td");
        assert_eq!(pat("spiffe://td/**").to_string(), "spiffe://td/**");
    }
}

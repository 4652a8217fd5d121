//! Who a certificate says its holder is: the DNS and URI SANs read from it,
//! and the role patterns (`--allow-san`, `--expect-san`) they are matched
//! against. Principle: identity is the role SAN, never the CN. A route may also pin the
//! peer's public key ([`pin`]).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls_pki_types::CertificateDer;
use serde::Serialize;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

mod dns;
pub(crate) mod pem;
pub mod pin;
mod uri;

pub use uri::{Uri, UriPattern};

/// Which extended key usage a certificate carries, and so which side of a
/// connection it may authenticate: a server route's own certificate needs
/// serverAuth, a client route's clientAuth (`certs issue --role` mints it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    Server,
    Client,
    Both,
}

/// The facts about one certificate that logs, metrics, status and the SAN
/// checks need, parsed once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CertInfo {
    pub subject: String,
    pub serial: String,
    pub dns_sans: Vec<String>,
    pub uri_sans: Vec<String>,
    /// Seconds since the Unix epoch.
    pub not_before: i64,
    /// Seconds since the Unix epoch.
    pub not_after: i64,
    pub server_auth: bool,
    pub client_auth: bool,
    /// True when the certificate has no extended key usage extension at all,
    /// which X.509 reads as "any usage".
    pub any_usage: bool,
}

/// A DER blob that did not parse as an X.509 certificate.
#[derive(Debug, thiserror::Error)]
#[error("not a valid X.509 certificate: {0}")]
pub struct CertParseError(String);

impl CertInfo {
    /// Parses the fields we use from a DER certificate.
    pub fn parse(der: &CertificateDer<'_>) -> Result<CertInfo, CertParseError> {
        let (_, cert) =
            X509Certificate::from_der(der.as_ref()).map_err(|e| CertParseError(e.to_string()))?;
        let mut dns_sans = Vec::new();
        let mut uri_sans = Vec::new();
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for name in &san.value.general_names {
                match name {
                    GeneralName::DNSName(d) => dns_sans.push(normal_dns(d)),
                    GeneralName::URI(u) => uri_sans.push(u.to_string()),
                    _ => {}
                }
            }
        }
        let (server_auth, client_auth, any_usage) = match cert.extended_key_usage() {
            Ok(Some(eku)) => (eku.value.server_auth, eku.value.client_auth, eku.value.any),
            _ => (true, true, true),
        };
        Ok(CertInfo {
            subject: cert.subject().to_string(),
            serial: cert.raw_serial_as_string(),
            dns_sans,
            uri_sans,
            not_before: cert.validity().not_before.timestamp(),
            not_after: cert.validity().not_after.timestamp(),
            server_auth,
            client_auth,
            any_usage,
        })
    }

    /// All SANs, DNS then URI, for logs: each in its normal form
    /// ([`normal_dns`], [`normal_uri`]), the form allow and deny compared.
    pub fn sans(&self) -> Vec<String> {
        let dns = self.dns_sans.iter().map(|d| normal_dns(d));
        dns.chain(self.uri_sans.iter().map(|u| normal_uri(u)))
            .collect()
    }

    /// The expiry as a `SystemTime`.
    pub fn not_after_time(&self) -> SystemTime {
        epoch_to_time(self.not_after)
    }

    /// True when `now` lies inside the validity window.
    pub fn valid_at(&self, now: SystemTime) -> bool {
        let now = time_to_epoch(now);
        self.not_before <= now && now <= self.not_after
    }
}

/// Seconds since the epoch as a `SystemTime` (clamped at the epoch).
pub fn epoch_to_time(secs: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs.max(0) as u64)
}

/// A `SystemTime` as whole seconds since the epoch.
pub fn time_to_epoch(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// THE normal form of a DNS SAN, the one every comparison and report of
/// an identity uses (allow, deny, XFCC, logs): ASCII lowercase.
pub fn normal_dns(name: &str) -> String {
    name.to_ascii_lowercase()
}

/// THE normal form of a URI SAN, the one every comparison and report of
/// an identity uses (allow, deny, XFCC, logs): as the strict parser reads
/// it, scheme and authority lowercase and the path exactly as written
/// (`SPIFFE://TD/ns/a` is `spiffe://td/ns/a`). A URI the parser refuses
/// is kept as it is: no pattern or entry, all of which parse, equals it.
pub fn normal_uri(uri: &str) -> String {
    Uri::parse(uri).map_or_else(|_| uri.to_string(), |u| u.to_string())
}

/// One allowed identity: an exact DNS name, `*.suffix` (exactly one leftmost
/// label), or a URI such as a SPIFFE ID, exact or with `*` (one path
/// segment) and a final `/**` (one or more). Every form is validated when
/// parsed, so a pattern that could never match is refused at start-up.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SanPattern {
    /// Lowercase.
    Dns(String),
    /// Holds the suffix with its leading dot: `*.env-1.svc` → `.env-1.svc`.
    WildcardDns(String),
    Uri(UriPattern),
}

/// At most 64 characters of operator- or peer-written text, for a
/// message (a runaway line must not flood a log).
pub fn shorten(s: &str) -> String {
    const MAX: usize = 64;
    match s.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// Why a SAN pattern was refused.
#[derive(Debug, thiserror::Error)]
#[error("invalid SAN pattern {:?}: {why}", shorten(input))]
pub struct SanPatternError {
    input: String,
    why: String,
}

impl std::str::FromStr for SanPattern {
    type Err = SanPatternError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |why: String| SanPatternError {
            input: s.to_string(),
            why,
        };
        if s.contains("://") {
            return UriPattern::parse(s).map(SanPattern::Uri).map_err(err);
        }
        if s.contains([':', '/']) {
            return Err(err(
                "neither a DNS name nor a URI with an authority (scheme://authority/path)".into(),
            ));
        }
        let (wild, name) = match s.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        if name.contains('*') {
            return Err(err(
                "'*' is only allowed as the whole leftmost label (*.suffix)".into(),
            ));
        }
        dns::check_name(name).map_err(err)?;
        if wild {
            // The label the '*' stands for counts towards the length bound.
            if s.len() > dns::MAX_NAME {
                return Err(err(format!(
                    "longer than {} characters with the label '*' stands for",
                    dns::MAX_NAME
                )));
            }
            if !name.contains('.') {
                return Err(err("a wildcard needs at least two labels after '*.'".into()));
            }
            Ok(SanPattern::WildcardDns(format!(
                ".{}",
                name.to_ascii_lowercase()
            )))
        } else {
            Ok(SanPattern::Dns(name.to_ascii_lowercase()))
        }
    }
}

impl std::fmt::Display for SanPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SanPattern::Dns(d) => f.write_str(d),
            SanPattern::WildcardDns(s) => write!(f, "*{s}"),
            SanPattern::Uri(u) => u.fmt(f),
        }
    }
}

impl Serialize for SanPattern {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A certificate's names as the patterns read them: its DNS SANs, and those
/// of its URI SANs that parse (one that does not never matches).
pub struct SanNames<'a> {
    dns: &'a [String],
    uris: Vec<Uri>,
}

impl<'a> SanNames<'a> {
    /// The names of a certificate's DNS SANs (`dns`, lowercase as
    /// [`CertInfo`] holds them) and URI SANs.
    pub fn new(dns: &'a [String], uris: &[String]) -> SanNames<'a> {
        SanNames {
            dns,
            uris: uris.iter().filter_map(|u| Uri::parse(u).ok()).collect(),
        }
    }

    fn of(cert: &'a CertInfo) -> SanNames<'a> {
        SanNames::new(&cert.dns_sans, &cert.uri_sans)
    }
}

impl SanPattern {
    /// True when one of the certificate's SANs matches. Certificate SANs that
    /// themselves hold a wildcard never match: a wildcard is not an identity.
    pub fn matches(&self, cert: &CertInfo) -> bool {
        self.matches_names(&SanNames::of(cert))
    }

    /// True when one of `names` matches.
    pub fn matches_names(&self, names: &SanNames<'_>) -> bool {
        match self {
            // The pattern is a valid name, so no SAN holding a '*' equals it.
            SanPattern::Dns(want) => names.dns.iter().any(|d| d.eq_ignore_ascii_case(want)),
            SanPattern::WildcardDns(suffix) => {
                names.dns.iter().any(|d| dns::wildcard_matches(suffix, d))
            }
            SanPattern::Uri(want) => names.uris.iter().any(|u| want.matches(u)),
        }
    }
}

/// Which peer identities a route accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SanPolicy {
    /// Any certificate from the trusted CA (`--allow-any-san`).
    Any,
    /// At least one SAN must match one of these patterns.
    OneOf(Vec<SanPattern>),
}

impl SanPolicy {
    /// True when the certificate carries an allowed identity.
    pub fn allows(&self, cert: &CertInfo) -> bool {
        match self {
            SanPolicy::Any => true,
            SanPolicy::OneOf(p) => {
                let names = SanNames::of(cert);
                p.iter().any(|p| p.matches_names(&names))
            }
        }
    }

    /// The patterns, for status output (empty for `Any`).
    pub fn patterns(&self) -> &[SanPattern] {
        match self {
            SanPolicy::Any => &[],
            SanPolicy::OneOf(p) => p,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::{DevCa, LeafSpec, Role};

    fn cert(dns: &[&str], uri: &[&str]) -> CertInfo {
        CertInfo {
            subject: String::new(),
            serial: String::new(),
            dns_sans: dns.iter().map(|s| s.to_string()).collect(),
            uri_sans: uri.iter().map(|s| s.to_string()).collect(),
            not_before: 0,
            not_after: 0,
            server_auth: true,
            client_auth: true,
            any_usage: false,
        }
    }

    fn pat(s: &str) -> SanPattern {
        s.parse().unwrap()
    }

    fn issue(role: Role, uris: &[&str], from: i64, to: i64) -> CertInfo {
        let ca = DevCa::new("unit CA", 1).unwrap();
        let mut spec =
            LeafSpec::dns("Ctl.Env-1.svc", role, 1).valid(epoch_to_time(from), epoch_to_time(to));
        spec.uris = uris.iter().map(|u| u.to_string()).collect();
        CertInfo::parse(&ca.issue(&spec).unwrap().cert_der).unwrap()
    }

    #[test]
    fn parse_reads_names_usage_and_validity() {
        let info = issue(
            Role::Server,
            &["spiffe://td/a"],
            1_700_000_000,
            1_800_000_000,
        );
        assert_eq!(info.dns_sans, ["ctl.env-1.svc"]);
        assert_eq!(info.uri_sans, ["spiffe://td/a"]);
        assert_eq!(info.sans(), ["ctl.env-1.svc", "spiffe://td/a"]);
        assert_eq!(info.subject, "CN=Ctl.Env-1.svc");
        assert!(info.serial.len() >= 16, "{}", info.serial);
        assert_eq!(info.not_before, 1_700_000_000);
        assert_eq!(info.not_after, 1_800_000_000);
        assert_eq!(info.not_after_time(), epoch_to_time(1_800_000_000));
        assert!((info.server_auth, info.client_auth, info.any_usage) == (true, false, false));
        let info = issue(Role::Client, &[], 0, 1);
        assert!((info.server_auth, info.client_auth, info.any_usage) == (false, true, false));
        assert!(info.uri_sans.is_empty());
        let garbage = CertificateDer::from(vec![0x30, 0x03, 0x02, 0x01, 0x01]);
        assert!(CertInfo::parse(&garbage).is_err());
    }

    /// The one normal form: what logs report is what allow and deny
    /// compare.
    #[test]
    fn sans_are_reported_in_their_normal_form() {
        let c = cert(&["Ctl.Svc"], &["SPIFFE://TD/ns/A", "urn:Not-Parsed"]);
        assert_eq!(c.sans(), ["ctl.svc", "spiffe://td/ns/A", "urn:Not-Parsed"]);
        assert_eq!(
            normal_uri("HTTPS://Host.Example:8443/P/Q"),
            "https://host.example:8443/P/Q"
        );
        assert_eq!(normal_dns("A.B"), "a.b");
        assert!(pat("spiffe://td/ns/A").matches(&c));
        assert!(!pat("spiffe://td/ns/a").matches(&c));
    }

    #[test]
    fn validity_window_includes_both_ends() {
        let info = issue(Role::Client, &[], 1_000, 2_000);
        assert!(!info.valid_at(epoch_to_time(999)));
        assert!(info.valid_at(epoch_to_time(1_000)));
        assert!(info.valid_at(epoch_to_time(2_000)));
        assert!(!info.valid_at(epoch_to_time(2_001)));
    }

    #[test]
    fn epoch_conversions_clamp_at_the_epoch() {
        assert_eq!(epoch_to_time(7), UNIX_EPOCH + Duration::from_secs(7));
        assert_eq!(epoch_to_time(-7), UNIX_EPOCH);
        assert_eq!(time_to_epoch(UNIX_EPOCH + Duration::from_secs(7)), 7);
        assert_eq!(time_to_epoch(UNIX_EPOCH - Duration::from_secs(7)), 0);
    }

    #[test]
    fn exact_dns_is_case_insensitive_and_exact() {
        let p = pat("Controller.env-1.svc");
        assert!(p.matches(&cert(&["controller.env-1.svc"], &[])));
        assert!(!p.matches(&cert(&["replica-0.env-1.svc"], &[])));
        assert!(!p.matches(&cert(&["controller.env-1.svc.evil"], &[])));
    }

    #[test]
    fn wildcard_matches_exactly_one_label() {
        let p = pat("*.env-1.svc");
        assert!(p.matches(&cert(&["replica-0.env-1.svc"], &[])));
        assert!(!p.matches(&cert(&["a.b.env-1.svc"], &[])));
        assert!(!p.matches(&cert(&["env-1.svc"], &[])));
        assert!(!p.matches(&cert(&["*.env-1.svc"], &[])));
        assert!(!p.matches(&cert(&["xenv-1.svc"], &[])));
    }

    #[test]
    fn uri_is_exact() {
        let p = pat("spiffe://td/ns/a/sa/b");
        assert!(p.matches(&cert(&[], &["spiffe://td/ns/a/sa/b"])));
        assert!(!p.matches(&cert(&[], &["spiffe://td/ns/a/sa/bb"])));
        assert!(!p.matches(&cert(&["spiffe://td/ns/a/sa/b"], &[])));
    }

    fn refusal(s: &str) -> String {
        s.parse::<SanPattern>().expect_err(s).to_string()
    }

    #[test]
    fn bad_patterns_are_refused_naming_the_pattern_and_the_reason() {
        for (input, why) in [
            ("x.svc.", "trailing '.'"),
            ("name.", "trailing '.'"),
            ("*.svc.", "trailing '.'"),
            ("*.env-1.svc.", "trailing '.'"),
            ("a*.b.c", "whole leftmost label"),
            ("a.*.c", "whole leftmost label"),
            ("*", "whole leftmost label"),
            ("**.b.c", "whole leftmost label"),
            ("*.*.c", "whole leftmost label"),
            ("*.single", "at least two labels"),
            ("*.", "empty name"),
            ("*..b", "empty label"),
            ("bad name", "a-z, 0-9 and '-'"),
            ("a_b.svc", "a-z, 0-9 and '-'"),
            ("", "empty name"),
            ("host.svc:6877", "neither a DNS name nor a URI"),
            ("urn:spiffe:td", "neither a DNS name nor a URI"),
            ("td/ns/a", "neither a DNS name nor a URI"),
            ("spiffe:/td/a", "neither a DNS name nor a URI"),
            ("spiffe://td/a/", "empty path segment"),
            ("https://", "authority"),
            ("spiffe://td:80/a", "trust domain"),
        ] {
            let msg = refusal(input);
            assert!(
                msg.contains(&format!("{input:?}")) && msg.contains(why),
                "{input}: {msg}"
            );
        }
    }

    #[test]
    fn wildcard_length_counts_the_label_it_stands_for() {
        // "x." + 251 characters is the longest name the wildcard can match.
        let l63 = "a".repeat(63);
        let suffix = format!("{l63}.{l63}.{l63}.{}", "b".repeat(59));
        assert_eq!(suffix.len(), 251);
        let p = pat(&format!("*.{suffix}"));
        assert!(p.matches(&cert(&[&format!("x.{suffix}")], &[])));
        assert!(refusal(&format!("*.{suffix}b")).contains("longer than 253"));
        assert!(format!("{suffix}b").parse::<SanPattern>().is_ok());
    }

    #[test]
    fn patterns_are_normalised() {
        assert_eq!(
            pat("Controller.ENV-1.svc"),
            SanPattern::Dns("controller.env-1.svc".into())
        );
        assert_eq!(
            pat("*.ENV-1.svc"),
            SanPattern::WildcardDns(".env-1.svc".into())
        );
        assert_eq!(pat("*.ENV-1.svc").to_string(), "*.env-1.svc");
        assert_eq!(
            pat("Controller.ENV-1.svc").to_string(),
            "controller.env-1.svc"
        );
        assert_eq!(
            pat("SPIFFE://TD/ns/*/**").to_string(),
            "spiffe://td/ns/*/**"
        );
        assert_eq!(
            serde_json::to_string(&pat("*.Svc.local")).unwrap(),
            "\"*.svc.local\""
        );
    }

    #[test]
    fn dns_and_uri_sans_never_cross() {
        assert!(!pat("td.example").matches(&cert(&[], &["spiffe://td.example"])));
        assert!(!pat("spiffe://td.example").matches(&cert(&["td.example"], &[])));
        assert!(!pat("*.example.com").matches(&cert(&[], &["https://a.example.com"])));
    }

    #[test]
    fn uri_patterns_match_through_the_certificate() {
        let p = pat("spiffe://td/ns/*/sa/x");
        assert!(p.matches(&cert(&[], &["spiffe://td/ns/a/sa/x"])));
        assert!(!p.matches(&cert(&[], &["spiffe://td/ns/a/b/sa/x"])));
        // One unparsable URI SAN does not hide a good one beside it.
        assert!(p.matches(&cert(
            &[],
            &["spiffe://td/ns//sa/x", "spiffe://td/ns/b/sa/x"]
        )));
        assert!(!p.matches(&cert(&[], &["spiffe://td/ns/%61/sa/x"])));
    }

    #[test]
    fn policy_any_of_its_patterns() {
        let policy = SanPolicy::OneOf(vec![pat("a.svc"), pat("spiffe://td/**")]);
        assert!(policy.allows(&cert(&["a.svc"], &[])));
        assert!(policy.allows(&cert(&["b.svc"], &["spiffe://td/x"])));
        assert!(!policy.allows(&cert(&["b.svc"], &["spiffe://td"])));
        assert!(!policy.allows(&cert(&[], &[])));
        assert_eq!(policy.patterns().len(), 2);
        assert!(!SanPolicy::OneOf(vec![]).allows(&cert(&["a.svc"], &[])));
        assert!(SanPolicy::Any.allows(&cert(&[], &[])));
        assert!(SanPolicy::Any.patterns().is_empty());
    }
}

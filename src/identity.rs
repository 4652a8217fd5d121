//! Who a certificate says its holder is: the DNS and URI SANs read from it,
//! and the role patterns (`--allow-san`, `--expect-san`) they are matched
//! against. Principle: identity is the role SAN, never the CN.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls_pki_types::CertificateDer;
use serde::Serialize;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

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
                    GeneralName::DNSName(d) => dns_sans.push(d.to_ascii_lowercase()),
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

    /// All SANs, DNS then URI, for logs.
    pub fn sans(&self) -> Vec<String> {
        self.dns_sans
            .iter()
            .chain(&self.uri_sans)
            .cloned()
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

/// One allowed identity: an exact DNS name, `*.suffix` (exactly one leftmost
/// label), or an exact URI such as a SPIFFE ID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SanPattern {
    Dns(String),
    /// Holds the suffix with its leading dot: `*.env-1.svc` → `.env-1.svc`.
    WildcardDns(String),
    Uri(String),
}

/// Why a SAN pattern was refused.
#[derive(Debug, thiserror::Error)]
#[error("invalid SAN pattern {input:?}: {why}")]
pub struct SanPatternError {
    input: String,
    why: &'static str,
}

impl std::str::FromStr for SanPattern {
    type Err = SanPatternError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |why| SanPatternError {
            input: s.to_string(),
            why,
        };
        if s.contains("://") {
            return Ok(SanPattern::Uri(s.to_string()));
        }
        let (wild, name) = match s.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        if name.contains('*') {
            return Err(err("'*' is only allowed as the whole leftmost label"));
        }
        rustls_pki_types::DnsName::try_from(name.to_string())
            .map_err(|_| err("not a valid DNS name"))?;
        if wild && !name.contains('.') {
            return Err(err("a wildcard needs at least two labels after '*.'"));
        }
        let name = name.to_ascii_lowercase();
        Ok(if wild {
            SanPattern::WildcardDns(format!(".{name}"))
        } else {
            SanPattern::Dns(name)
        })
    }
}

impl std::fmt::Display for SanPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SanPattern::Dns(d) => f.write_str(d),
            SanPattern::WildcardDns(s) => write!(f, "*{s}"),
            SanPattern::Uri(u) => f.write_str(u),
        }
    }
}

impl Serialize for SanPattern {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl SanPattern {
    /// True when one of the certificate's SANs matches. Certificate SANs that
    /// themselves hold a wildcard never match: a wildcard is not an identity.
    pub fn matches(&self, cert: &CertInfo) -> bool {
        match self {
            SanPattern::Dns(want) => cert
                .dns_sans
                .iter()
                .any(|d| !d.contains('*') && d.eq_ignore_ascii_case(want)),
            SanPattern::WildcardDns(suffix) => cert.dns_sans.iter().any(|d| {
                let d = d.to_ascii_lowercase();
                match d.strip_suffix(suffix.as_str()) {
                    Some(label) => {
                        !label.is_empty() && !label.contains('.') && !label.contains('*')
                    }
                    None => false,
                }
            }),
            SanPattern::Uri(want) => cert.uri_sans.iter().any(|u| u == want),
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
            SanPolicy::OneOf(p) => p.iter().any(|p| p.matches(cert)),
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

    #[test]
    fn bad_patterns_are_refused() {
        assert!("a*.b.c".parse::<SanPattern>().is_err());
        assert!("*.single".parse::<SanPattern>().is_err());
        assert!("bad name".parse::<SanPattern>().is_err());
    }
}

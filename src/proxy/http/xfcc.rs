//! The `x-forwarded-client-cert` header in Envoy's format, and the one
//! predicate that says which header names are that header.
//!
//! Why a predicate of our own: CGI, WSGI and PHP hand a header to the
//! application as an environment variable whose name upper-cases the
//! header's and turns `-` into `_`, so `X_Forwarded_Client_Cert: forged`
//! reaches a WSGI application exactly as our header would. Every name that
//! maps to the same variable is the same header to us ([`is_xfcc_name`]).
//!
//! Why our own quoting: every value the header carries comes from the
//! peer's certificate, which the peer chose. The builder ([`xfcc_value`])
//! keeps the result one element under RFC 9110's quoted-string rules
//! (the reading Envoy's own parser has) whatever the certificate holds:
//! `Subject` is OpenSSL's RFC 2253 string in double quotes with no second
//! escape (that string already writes every `"` and `\` as a backslash
//! pair and every control or non-ASCII byte as `\XX`, see [`super::dn`]);
//! a SAN's bytes outside visible ASCII, and `"`, `\` and `%`, are
//! percent-encoded, and a SAN holding `,` `;` or `=` is put in double
//! quotes.

use x509_parser::prelude::{FromDer, X509Certificate};

use crate::identity::{normal_dns, normal_uri};

/// The header's name, lowercase as HTTP/2 sends it.
pub const XFCC: &str = "x-forwarded-client-cert";

/// True when `name` is `x-forwarded-client-cert` compared ASCII
/// case-insensitively with `_` equal to `-`.
pub fn is_xfcc_name(name: &[u8]) -> bool {
    name.len() == XFCC.len()
        && name
            .iter()
            .zip(XFCC.bytes())
            .all(|(&got, want)| fold_name_byte(got) == want)
}

/// One byte of a header name as [`is_xfcc_name`] compares it.
fn fold_name_byte(b: u8) -> u8 {
    match b {
        b'_' => b'-',
        other => other.to_ascii_lowercase(),
    }
}

/// What the header says about one peer, in Envoy's element order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct XfccParts {
    /// Our own certificate's first URI SAN (`By=`); none: omitted.
    pub by: Option<String>,
    /// SHA-256 of the peer's DER leaf (`Hash=`, lowercase hex).
    pub hash: [u8; 32],
    /// The peer's subject, OpenSSL's RFC 2253 form (`Subject=`, always
    /// quoted).
    pub subject: String,
    /// The peer's URI SANs, in certificate order, normal form (`URI=` each).
    pub uris: Vec<String>,
    /// The peer's DNS SANs, in certificate order, lowercase (`DNS=` each).
    pub dns: Vec<String>,
}

impl XfccParts {
    /// The parts for a peer leaf (DER) seen by a sidecar whose own leaf is
    /// `ours` (for `By=`); `None` when the peer's DER does not parse.
    pub fn from_certs(peer: &[u8], ours: Option<&[u8]>) -> Option<XfccParts> {
        let (_, cert) = X509Certificate::from_der(peer).ok()?;
        let (uris, dns) = sans(&cert);
        let by = ours
            .and_then(|der| X509Certificate::from_der(der).ok())
            .and_then(|(_, c)| sans(&c).0.into_iter().next());
        let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, peer);
        Some(XfccParts {
            by,
            hash: digest.as_ref().try_into().ok()?,
            subject: super::dn::rfc2253(cert.subject()),
            uris,
            dns,
        })
    }
}

/// A certificate's URI and DNS SANs, each in certificate order and in the
/// normal form allow and deny compared ([`normal_uri`], [`normal_dns`]):
/// the application reads the identity the sidecar judged.
fn sans(cert: &X509Certificate<'_>) -> (Vec<String>, Vec<String>) {
    use x509_parser::extensions::GeneralName;
    let (mut uris, mut dns) = (Vec::new(), Vec::new());
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::URI(u) => uris.push(normal_uri(u)),
                GeneralName::DNSName(d) => dns.push(normal_dns(d)),
                _ => {}
            }
        }
    }
    (uris, dns)
}

/// The header's value: `By=…;Hash=…;Subject="…";URI=…;DNS=…`, visible
/// ASCII only, so it is always a valid header value.
pub fn xfcc_value(p: &XfccParts) -> String {
    let mut out = String::new();
    let mut push = |key: &str, value: String| {
        if !out.is_empty() {
            out.push(';');
        }
        out.push_str(key);
        out.push('=');
        out.push_str(&value);
    };
    if let Some(by) = &p.by {
        push("By", element(&header_safe_san(by)));
    }
    push("Hash", super::dn::hex(&p.hash));
    push("Subject", quoted(&p.subject));
    for u in &p.uris {
        push("URI", element(&header_safe_san(u)));
    }
    for d in &p.dns {
        push("DNS", element(&header_safe_san(d)));
    }
    out
}

/// A header-safe SAN as one element: quoted when it holds a character
/// that would end or split the element (`,` `;` `=`).
fn element(v: &str) -> String {
    if needs_quotes(v) {
        quoted(v)
    } else {
        v.to_string()
    }
}

/// True when a bare value would be read as more than one value.
fn needs_quotes(v: &str) -> bool {
    v.contains([',', ';', '='])
}

/// `v` as an RFC 9110 quoted-string with no second escape: a backslash
/// pair in `v` is kept as it is (the RFC 2253 subject writes every `"`
/// and `\` as one), and only what would end the string early is escaped
/// (a bare `"`, a `\` with nothing after it), which no caller's value
/// holds: a header-safe SAN has neither, the subject none bare.
fn quoted(v: &str) -> String {
    let mut out = String::with_capacity(v.len() + 2);
    out.push('"');
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                out.push('\\');
                out.push(chars.next().unwrap_or('\\'));
            }
            '"' => out.push_str("\\\""),
            other => out.push(other),
        }
    }
    out.push('"');
    out
}

/// A SAN made of visible ASCII: every other byte, and `"`, `\` and `%`
/// themselves, percent-encoded (a URI or DNS SAN holds none of them
/// legitimately; a crafted one cannot break the header or its quoting).
fn header_safe_san(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for &b in v.as_bytes() {
        if b.is_ascii_graphic() && !matches!(b, b'"' | b'\\' | b'%') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_matches_in_every_spelling_a_gateway_maps_to_it() {
        for n in [
            "x-forwarded-client-cert",
            "X-Forwarded-Client-Cert",
            "X_FORWARDED_CLIENT_CERT",
            "x_forwarded-client_cert",
        ] {
            assert!(is_xfcc_name(n.as_bytes()), "{n}");
        }
        for n in [
            "x-forwarded-client-cer",
            "x-forwarded-client-certs",
            "x-forwarded-client.cert",
            "",
        ] {
            assert!(!is_xfcc_name(n.as_bytes()), "{n}");
        }
    }

    #[test]
    fn values_are_quoted_and_escaped_when_they_would_split() {
        let p = XfccParts {
            by: Some("spiffe://td/ns/a".into()),
            hash: [0xab; 32],
            subject: r#"CN=a\,b,O=x"y"#.into(),
            uris: vec!["spiffe://td/x;y=z".into()],
            dns: vec!["plain.example".into(), "bad\"\r\nname".into()],
        };
        assert_eq!(
            xfcc_value(&p),
            format!(
                "By=spiffe://td/ns/a;Hash={};Subject=\"CN=a\\,b,O=x\\\"y\";\
                 URI=\"spiffe://td/x;y=z\";DNS=plain.example;DNS=bad%22%0D%0Aname",
                "ab".repeat(32)
            )
        );
        // The subject's backslash pairs are kept, never escaped again
        // (`\"` would become `\\"`, which closes the quoted-string); a
        // `\` written `\\` stays so, and a bare `"` or a dangling `\` in
        // a hand-made subject is escaped.
        for (subject, want) in [
            (
                r#"CN=evil\";URI=x,O=q\""#,
                r#"Subject="CN=evil\";URI=x,O=q\"""#,
            ),
            (r"CN=q\\", r#"Subject="CN=q\\""#),
            (r#"CN=a"b\"#, r#"Subject="CN=a\"b\\""#),
        ] {
            let p = XfccParts {
                subject: subject.into(),
                ..Default::default()
            };
            assert!(xfcc_value(&p).ends_with(want), "{}", xfcc_value(&p));
        }
        let bare = XfccParts {
            subject: String::new(),
            ..Default::default()
        };
        assert_eq!(
            xfcc_value(&bare),
            format!("Hash={};Subject=\"\"", "00".repeat(32))
        );
    }
}

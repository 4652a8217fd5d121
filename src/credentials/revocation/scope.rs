//! Which certificates a CRL speaks for (RFC 5280 §5.2.5, Issuing
//! Distribution Point), judged the way rustls-webpki judges it, because
//! webpki keeps that judgement private:
//!
//! - a CRL without an IDP covers every certificate of its issuer;
//! - `onlyContainsUserCerts` covers end entities only, `onlyContainsCACerts`
//!   CA certificates only;
//! - a certificate without a CRL Distribution Points extension is covered;
//! - a certificate with one is covered only when one of its distribution
//!   points' full-name URIs equals, byte for byte (no case folding, as
//!   webpki and OpenSSL compare), one of the IDP's full-name URIs; a
//!   distribution point with a cRLIssuer or reasons never matches.
//!
//! Indirect CRLs, reason-partitioned CRLs and IDPs without a full name are
//! refused when the CRL is parsed (by webpki), so they never get here.

use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::{DistributionPointName, GeneralName, ParsedExtension};
use x509_parser::revocation_list::CertificateRevocationList;

/// A CRL's Issuing Distribution Point, as far as scope needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Idp {
    only_user: bool,
    only_ca: bool,
    /// The full-name URIs, as bytes.
    uris: Vec<Vec<u8>>,
}

/// What a node of a peer's path is: the end entity or a CA below the anchor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NodeRole {
    EndEntity,
    Ca,
}

/// The CRL's IDP, if it has one. webpki parsed the same extension first
/// and refused the forms we do not support; an IDP x509-parser cannot read
/// is an error too.
pub(crate) fn idp_of(crl: &CertificateRevocationList<'_>) -> Result<Option<Idp>, String> {
    for ext in crl.extensions() {
        match ext.parsed_extension() {
            ParsedExtension::IssuingDistributionPoint(idp) => {
                let uris = match &idp.distribution_point {
                    Some(DistributionPointName::FullName(names)) => uri_bytes(names),
                    _ => Vec::new(),
                };
                return Ok(Some(Idp {
                    only_user: idp.only_contains_user_certs,
                    only_ca: idp.only_contains_ca_certs,
                    uris,
                }));
            }
            ParsedExtension::ParseError { error } if is_idp(ext) => {
                return Err(format!("unreadable issuing distribution point: {error}"));
            }
            _ => {}
        }
    }
    Ok(None)
}

fn is_idp(ext: &x509_parser::extensions::X509Extension<'_>) -> bool {
    ext.oid == x509_parser::oid_registry::OID_X509_EXT_ISSUER_DISTRIBUTION_POINT
}

fn uri_bytes(names: &[GeneralName<'_>]) -> Vec<Vec<u8>> {
    names
        .iter()
        .filter_map(|n| match n {
            GeneralName::URI(u) => Some(u.as_bytes().to_vec()),
            _ => None,
        })
        .collect()
}

/// True when a CRL with this IDP (`None`: no IDP) speaks for `cert` in
/// `role`. `cert` is parsed only when the IDP needs it (`None`: the
/// certificate did not parse, which covers nothing an IDP restricts).
pub(crate) fn covers(
    idp: Option<&Idp>,
    role: NodeRole,
    cert: impl FnOnce() -> Option<Vec<Vec<u8>>>,
) -> bool {
    let Some(idp) = idp else {
        return true;
    };
    if role_excluded(idp, role) {
        return false;
    }
    match cert() {
        // No CRL Distribution Points extension: only a CRL whose IDP names
        // no distribution point covers it. A CRL that names one is one
        // partition of the issuer's CRLs, and a certificate that names none
        // is in no partition (RFC 5280 6.3.3 (b)(2)(i); OpenSSL: error 44,
        // "different CRL scope"). webpki would say covered; that is looser.
        Some(dps) if dps.is_empty() => idp.uris.is_empty(),
        Some(dps) => dps.iter().any(|dp| idp.uris.contains(dp)),
        None => false,
    }
}

/// True when the IDP's onlyContains* flag excludes this role.
fn role_excluded(idp: &Idp, role: NodeRole) -> bool {
    (idp.only_ca && role != NodeRole::Ca) || (idp.only_user && role != NodeRole::EndEntity)
}

/// The full-name URIs of a certificate's usable CRL distribution points
/// (empty: no CRL Distribution Points extension), or `None` when the
/// certificate does not parse. A distribution point with a cRLIssuer or
/// reasons contributes nothing; a CDP extension that has no usable URI
/// yields a list with one empty entry, so it is "has CDPs, none match".
pub(crate) fn distribution_points(der: &[u8]) -> Option<Vec<Vec<u8>>> {
    use x509_parser::prelude::FromDer;
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let mut present = false;
    let mut uris = Vec::new();
    for ext in cert.extensions() {
        if ext.oid != x509_parser::oid_registry::OID_X509_EXT_CRL_DISTRIBUTION_POINTS {
            continue;
        }
        present = true;
        let ParsedExtension::CRLDistributionPoints(points) = ext.parsed_extension() else {
            continue;
        };
        for dp in points.iter() {
            if dp.crl_issuer.is_some() || dp.reasons.is_some() {
                continue;
            }
            if let Some(DistributionPointName::FullName(names)) = &dp.distribution_point {
                uris.extend(uri_bytes(names));
            }
        }
    }
    if present && uris.is_empty() {
        // An extension with nothing usable: never matches an IDP URI.
        uris.push(Vec::new());
    }
    Some(uris)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idp(only_user: bool, only_ca: bool, uris: &[&str]) -> Idp {
        Idp {
            only_user,
            only_ca,
            uris: uris.iter().map(|u| u.as_bytes().to_vec()).collect(),
        }
    }

    fn dps<'a>(uris: &'a [&'a str]) -> impl FnOnce() -> Option<Vec<Vec<u8>>> + 'a {
        move || Some(uris.iter().map(|u| u.as_bytes().to_vec()).collect())
    }

    #[test]
    fn no_idp_covers_everything_and_never_parses_the_certificate() {
        let never = || -> Option<Vec<Vec<u8>>> { panic!("parsed") };
        assert!(covers(None, NodeRole::EndEntity, never));
    }

    #[test]
    fn uris_match_byte_for_byte_and_roles_are_respected() {
        let i = idp(false, false, &["http://crl/a"]);
        assert!(covers(
            Some(&i),
            NodeRole::EndEntity,
            dps(&["http://crl/a"])
        ));
        // A certificate naming no distribution point is in no partition.
        assert!(!covers(Some(&i), NodeRole::EndEntity, dps(&[])));
        assert!(!covers(
            Some(&i),
            NodeRole::EndEntity,
            dps(&["HTTP://crl/a"])
        ));
        assert!(!covers(Some(&i), NodeRole::EndEntity, dps(&[""])));
        assert!(!covers(Some(&i), NodeRole::EndEntity, || None));
        let a = || dps(&["http://crl/a"]);
        let users = idp(true, false, &["http://crl/a"]);
        assert!(covers(Some(&users), NodeRole::EndEntity, a()));
        assert!(!covers(Some(&users), NodeRole::Ca, a()));
        let cas = idp(false, true, &["http://crl/a"]);
        assert!(covers(Some(&cas), NodeRole::Ca, a()));
        assert!(!covers(Some(&cas), NodeRole::EndEntity, a()));
        // An IDP that names no distribution point (scope flags only)
        // covers a certificate that names none.
        let unnamed = idp(true, false, &[]);
        assert!(covers(Some(&unnamed), NodeRole::EndEntity, dps(&[])));
    }
}

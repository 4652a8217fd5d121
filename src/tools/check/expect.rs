//! The operator's expectations of an identity, which the sidecar itself
//! cannot know at start-up: validity left (`--min-validity`), the extended
//! key usage for a role (`--role`), and the SANs peers will pin
//! (`--require-san`, matched with the same patterns as `--allow-san`).

use std::time::SystemTime;

use super::report::Report;
use super::steps::{show, step};
use super::{Request, Role};
use crate::credentials::{fmt_time, CredError};
use crate::identity::{time_to_epoch, CertInfo};

/// Validity now and ahead, role, and required SANs: what the operator
/// expects of this identity.
pub(super) fn expectations(
    r: &mut Report,
    leaf: Option<&CertInfo>,
    req: &Request,
    now: SystemTime,
    cert_path: &std::path::Path,
) {
    let why = "tls.crt did not parse";
    let now_secs = time_to_epoch(now);
    let valid = step(r, "validity", None, leaf, why, |leaf| {
        if now_secs < leaf.not_before {
            return Err(CredError::NotYetValid {
                path: cert_path.to_path_buf(),
                not_before: leaf.not_before,
            }
            .to_string());
        }
        if now_secs > leaf.not_after {
            return Err(CredError::Expired {
                path: cert_path.to_path_buf(),
                not_after: leaf.not_after,
            }
            .to_string());
        }
        let left = leaf.not_after - now_secs;
        let d = format!(
            "valid from {} until {} ({} left)",
            fmt_time(leaf.not_before),
            fmt_time(leaf.not_after),
            span(left)
        );
        Ok((left, d))
    });
    if let Some(min) = req.min_validity {
        let why = "tls.crt is not valid now";
        step(r, "min_validity", None, valid, why, |left| {
            let want = i64::try_from(min.as_secs()).unwrap_or(i64::MAX);
            let min_text = span(want);
            if left < want {
                return Err(format!(
                    "{}: only {} of validity left (expires {}); --min-validity asks for {min_text}",
                    show(cert_path),
                    span(left),
                    fmt_time(now_secs.saturating_add(left))
                ));
            }
            Ok((
                (),
                format!("{} left, at least {min_text} required", span(left)),
            ))
        });
    }
    if let Some(role) = req.role {
        step(r, "role", None, leaf, why, |leaf| {
            let eku = describe_eku(leaf);
            let fits = match role {
                Role::Server => leaf.server_auth || leaf.any_usage,
                Role::Client => leaf.client_auth || leaf.any_usage,
                Role::Both => (leaf.server_auth && leaf.client_auth) || leaf.any_usage,
            };
            let role_name = match role {
                Role::Server => "server (TLS server authentication)",
                Role::Client => "client (TLS client authentication)",
                Role::Both => "both (TLS server and client authentication)",
            };
            if fits {
                Ok(((), format!("{eku} allows --role {role_name}")))
            } else {
                Err(format!(
                    "{}: {eku} does not allow --role {role_name}",
                    show(cert_path)
                ))
            }
        });
    }
    for pattern in &req.require_sans {
        let name = pattern.to_string();
        step(r, "san", Some(&name), leaf, why, |leaf| {
            if pattern.matches(leaf) {
                Ok(((), format!("{name} is among the certificate's SANs")))
            } else {
                Err(format!(
                    "{}: no SAN matches {name}; the certificate has [{}]",
                    show(cert_path),
                    leaf.sans().join(", ")
                ))
            }
        });
    }
}

fn describe_eku(leaf: &CertInfo) -> String {
    if leaf.any_usage && leaf.server_auth && leaf.client_auth {
        return "no extended key usage extension (any usage)".into();
    }
    let mut u = Vec::new();
    if leaf.server_auth {
        u.push("serverAuth");
    }
    if leaf.client_auth {
        u.push("clientAuth");
    }
    if leaf.any_usage {
        u.push("anyExtendedKeyUsage");
    }
    if u.is_empty() {
        "extended key usage without serverAuth or clientAuth".into()
    } else {
        format!("extended key usage {}", u.join(", "))
    }
}

/// A span of seconds for people: `29d 23h`, `5h 12m`, `3m 20s`, `40s`.
pub(super) fn span(secs: i64) -> String {
    let s = secs.max(0);
    let (d, h, m) = (s / 86_400, s % 86_400 / 3600, s % 3600 / 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, m) => format!("{m}m {}s", s % 60),
        (0, h, m) => format!("{h}h {m}m"),
        (d, 0, _) => format!("{d}d"),
        (d, h, _) => format!("{d}d {h}h"),
    }
}

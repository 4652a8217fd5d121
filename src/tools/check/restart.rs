//! `check --config CANDIDATE.toml --against ADMIN_URL`: what a candidate
//! *configuration* would cut. A configuration is read once, at start (no
//! live reload), so nothing in it reaches a live connection before the
//! sidecar restarts (or hands off) with it; every cut it makes is `at
//! restart`: the peer's next handshake with the restarted sidecar is
//! refused (a live connection keeps the process that accepted it).
//!
//! Each running route is matched by name with a candidate route. One the
//! candidate drops (or turns from a server into a client route, or back) is
//! reported as such: none of its peers can reach it after a restart. For
//! the others, each live connection is judged as the restarted sidecar
//! would judge its next handshake:
//! - its credentials: the candidate route's credential source, loaded and
//!   validated by the sidecar's own loader, with its `--crl-scope`, and
//!   the chain judged by the handshake's judgement ([`super::preview`]'s)
//!   with the candidate's anchors alone (a restarted process keeps no
//!   anchor in a trust grace: it never held the dropped ones);
//! - then its route policy: the SAN policy (`allow_san`, `expect_san`,
//!   `allow_any_san`) and SPKI pins, by the very function every handshake
//!   runs ([`check_route_policy`]).

use std::time::SystemTime;

use super::preview::{self, label, Cut, RevisionFiles, When};
use crate::admin::connections::{ConnView, RouteView};
use crate::config::FileSpec;
use crate::credentials::revocation::Verdict;
use crate::credentials::{CredError, CrlScope};
use crate::identity::SanPolicy;
use crate::proxy::settings::{Mode, RouteConfig};
use crate::reason::FailureReason;
use crate::tls::verify::check_route_policy;

/// One route of a candidate configuration.
#[derive(Debug, Clone)]
pub struct RouteCandidate {
    pub name: String,
    pub mode: Mode,
    /// A transparent route (per-destination SANs; not judged).
    pub per_destination: bool,
    pub sans: SanPolicy,
    pub pins: Vec<[u8; 32]>,
    /// Its credential source's revision.
    pub credentials: RevisionFiles,
}

/// A candidate configuration, validated.
#[derive(Debug, Clone)]
pub struct ConfigCandidate {
    pub routes: Vec<RouteCandidate>,
    pub crl_scope: CrlScope,
}

/// Why a running route cannot be judged against the candidate's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gone {
    /// The candidate has no route of that name.
    Dropped,
    /// The candidate's route of that name is of the other mode.
    OtherMode(Mode),
    /// The candidate's route of that name is transparent: each live
    /// connection is held to its own destination rule's SANs, which
    /// `/connections` does not name, so the preview cannot judge it (and
    /// says so rather than report nothing cut).
    PerDestination,
}

/// Loads `path` with the config loader `run --config` uses (its error as
/// is when invalid), then each route's credential source with the
/// sidecar's revision loader.
pub fn load(path: &std::path::Path, now: SystemTime) -> Result<ConfigCandidate, String> {
    let settings = FileSpec::load(path).map_err(|e| e.to_string())?;
    let mut loaded: Vec<(String, RevisionFiles)> = Vec::new();
    let mut routes = Vec::with_capacity(settings.routes.len());
    for r in &settings.routes {
        let source = r.credentials.to_string();
        let credentials = match loaded.iter().find(|(s, _)| *s == source) {
            Some((_, c)) => c.clone(),
            None => {
                let raw = super::fetch::read(&r.credentials).map_err(|e| route_error(r, &e))?;
                let c = RevisionFiles::of(&raw, now).map_err(|e| route_error(r, &e))?;
                loaded.push((source, c.clone()));
                c
            }
        };
        routes.push(RouteCandidate {
            name: r.name.clone(),
            mode: r.mode,
            per_destination: r.transparent.is_some(),
            sans: r.peer_sans.clone(),
            pins: r.spki_pins.clone(),
            credentials,
        });
    }
    Ok(ConfigCandidate {
        routes,
        crl_scope: settings.crl_scope,
    })
}

fn route_error(r: &RouteConfig, e: &dyn std::fmt::Display) -> String {
    format!("route {}: credentials {}: {e}", r.name, r.credentials)
}

/// The candidate's route matching a running one, or why there is none.
pub fn matching<'a>(
    candidate: &'a ConfigCandidate,
    route: &RouteView,
) -> Result<&'a RouteCandidate, Gone> {
    match candidate.routes.iter().find(|r| r.name == route.name) {
        None => Err(Gone::Dropped),
        Some(r) if r.mode != route.mode => Err(Gone::OtherMode(r.mode)),
        Some(r) if r.per_destination => Err(Gone::PerDestination),
        Some(r) => Ok(r),
    }
}

/// The route policy's verdict on a live connection's leaf.
fn policy_verdict(c: &RouteCandidate, conn: &ConnView) -> Verdict {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::CertificateDer;
    let leaf = CertificateDer::pem_slice_iter(conn.chain_pem.as_bytes()).next();
    let Some(Ok(leaf)) = leaf else {
        return Verdict::Refused {
            reason: FailureReason::NoClientCert,
            detail: "the connection's peer chain is missing".to_string(),
        };
    };
    let info = crate::identity::CertInfo::parse(&leaf).ok();
    match check_route_policy(&c.sans, &c.pins, &leaf, info.as_ref()) {
        Ok(()) => Verdict::Admitted,
        Err(e) => Verdict::Refused {
            reason: FailureReason::from_tls(&e),
            detail: crate::reason::plain_tls(&e).to_string(),
        },
    }
}

/// Judges one running route's connections against its candidate route:
/// the credentials first, then the route policy; every cut is at restart.
/// `Err`: the candidate's trust files are unusable for this route.
pub fn judge(
    route: &RouteView,
    c: &RouteCandidate,
    scope: CrlScope,
    conns: &[ConnView],
    now: SystemTime,
) -> Result<Vec<Cut>, CredError> {
    let files = preview::alone(route, &c.credentials);
    let how = (scope, preview::usage(c.mode));
    let mut cuts = Vec::new();
    for conn in conns.iter().filter(|x| x.route == route.name) {
        let verdict = match preview::judge_with(&files, conn, how, now)? {
            Verdict::Admitted => policy_verdict(c, conn),
            refused => refused,
        };
        if let Verdict::Refused { reason, detail } = verdict {
            cuts.push(Cut {
                conn: conn.clone(),
                reason: label(reason),
                detail,
                when: When::Restart,
            });
        }
    }
    Ok(cuts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(name: &str, mode: Mode) -> RouteCandidate {
        RouteCandidate {
            name: name.to_string(),
            mode,
            per_destination: false,
            sans: SanPolicy::Any,
            pins: Vec::new(),
            credentials: RevisionFiles {
                ca: Vec::new(),
                intermediates: Vec::new(),
                crl: None,
                deny: Default::default(),
            },
        }
    }

    fn running(name: &str, mode: Mode) -> RouteView {
        RouteView {
            name: name.to_string(),
            mode,
            usage: String::new(),
            crl_scope: "leaf".to_string(),
            trust_grace_seconds: 0,
            trust_anchors_pem: String::new(),
            intermediates_pem: String::new(),
            crls_pem: String::new(),
            deny: Vec::new(),
            live: 0,
        }
    }

    #[test]
    fn a_transparent_candidate_route_is_not_judged() {
        let mut t = route("t", Mode::Client);
        t.per_destination = true;
        let cfg = ConfigCandidate {
            routes: vec![t],
            crl_scope: CrlScope::Leaf,
        };
        assert_eq!(
            matching(&cfg, &running("t", Mode::Client)).map(|r| r.name.as_str()),
            Err(Gone::PerDestination)
        );
    }

    #[test]
    fn routes_match_by_name_and_mode() {
        let cfg = ConfigCandidate {
            routes: vec![route("a", Mode::Server), route("b", Mode::Client)],
            crl_scope: CrlScope::Leaf,
        };
        assert_eq!(
            matching(&cfg, &running("a", Mode::Server)).map(|r| r.name.as_str()),
            Ok("a")
        );
        assert_eq!(
            matching(&cfg, &running("b", Mode::Server)).map(|r| r.name.as_str()),
            Err(Gone::OtherMode(Mode::Client))
        );
        assert_eq!(
            matching(&cfg, &running("c", Mode::Server)).map(|r| r.name.as_str()),
            Err(Gone::Dropped)
        );
    }
}

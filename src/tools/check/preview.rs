//! The judgement of `check --against`: which live connection a candidate
//! revision would close, why and when. Pure: it reads a `/connections`
//! page and the candidate's trust files and returns verdicts; fetching and
//! printing are in `against.rs`.
//!
//! Each connection is re-judged with the judgement every handshake runs
//! ([`judge_chain`](crate::credentials::revocation::judge_chain), which is [`crate::credentials::Trust::verify_peer`]
//! over file bytes), on the chain the peer presented, for its route's usage
//! and `--crl-scope`, twice:
//! - **now**, with the candidate's anchors plus the running anchors it
//!   drops (the store keeps those for `--trust-grace`), and the
//!   candidate's CRLs: a refusal here closes the connection within one
//!   reload interval of the candidate landing;
//! - **at the end of the trust grace**, with the candidate's anchors alone
//!   (the dropped ones retired): a refusal here only, when the grace is not
//!   zero, closes the connection when the grace ends.
//!
//! A connection cut only at the end of the grace whose presented chain (the
//! leaf or an intermediate) reaches its notAfter before the grace ends is
//! listed as `expired` at that notAfter instead: it does not live to see
//! the grace end (a leaf's expiry closes it at that second; an
//! intermediate's at the next re-verification, the grace's end at the
//! latest). Connections the candidate does not cut are never listed, even
//! when they expire within the grace: their expiry is not the candidate's.
//!
//! The route's SAN policy and SPKI pins are not part of a credential
//! revision and do not change with it, so they are not re-judged here:
//! every live connection already passed them. A candidate configuration
//! changes them; [`super::restart`] judges those, at restart. A deny-list
//! (a revision's `deny` file, or a deny file alone) joins the same
//! judgement: a matching entry refuses the chain as `denied`, "now" (an
//! entry takes effect within one reload interval; no grace applies to it).
//! A CRL file alone keeps the running deny-list in force, and a deny file
//! alone the running CRLs (both read from `/connections`), as the sidecar
//! would.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::admin::connections::{ConnView, RouteView};
use crate::credentials::revocation::{judge_chain_denying, TrustInputs, Verdict};
use crate::credentials::{parse_deny, validate, CredError, CrlScope, DenyList, RawRevision, Usage};
use crate::proxy::settings::Mode;
use crate::reason::FailureReason;

/// What a candidate brings to the trust.
#[derive(Debug, Clone)]
pub enum Candidate {
    /// A whole revision (a directory, files or a Secret), validated by the
    /// sidecar's loader.
    Revision(RevisionFiles),
    /// A CRL file alone: the running trust (its deny-list included) with
    /// these CRLs in force.
    Crl(Vec<u8>),
    /// A deny file alone: the running trust (its CRLs included) with this
    /// deny-list in force.
    Deny(Arc<DenyList>),
}

/// The trust side of a validated revision: its anchors, known
/// intermediates (its `intermediates` file and its own chain) and CRLs,
/// PEM, and its deny-list.
#[derive(Debug, Clone)]
pub struct RevisionFiles {
    pub ca: Vec<u8>,
    pub intermediates: Vec<u8>,
    pub crl: Option<Vec<u8>>,
    /// Its deny-list (empty without a `deny` file).
    pub deny: Arc<DenyList>,
}

impl RevisionFiles {
    /// The trust side of `raw` once the sidecar's own loader validated it.
    pub fn of(raw: &RawRevision, now: SystemTime) -> Result<RevisionFiles, CredError> {
        let rev = validate(raw, &crate::tls::provider::crypto_provider(), now)?;
        let anchors: Vec<_> = rev.anchors.iter().map(|(der, _)| der.clone()).collect();
        Ok(RevisionFiles {
            ca: crate::identity::pem::certificates(&anchors).into_bytes(),
            intermediates: crate::identity::pem::certificates(&rev.intermediates).into_bytes(),
            crl: raw.crl.as_ref().map(|f| f.bytes.clone()),
            deny: rev.deny.clone(),
        })
    }
}

/// When a refused connection would be closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// Within one reload interval of the candidate landing.
    Now,
    /// When the `--trust-grace` of the anchors it drops ends.
    GraceEnd(SystemTime),
    /// At the first handshake after a restart (or hand-off) with the
    /// candidate configuration: a live connection keeps its process.
    Restart,
    /// At this notAfter of its own chain, before the candidate's cut.
    Expires(SystemTime),
}

/// One connection the candidate would close.
#[derive(Debug, Clone)]
pub struct Cut {
    pub conn: ConnView,
    /// `revoked`, `revoked_status_unknown`, `untrusted`, `expired`,
    /// `pin_mismatch`, `bad_san`...
    pub reason: &'static str,
    pub detail: String,
    pub when: When,
}

/// The preview's name for a handshake failure reason: an unknown issuer is
/// "untrusted" (the candidate no longer trusts the peer's CA).
pub fn label(reason: FailureReason) -> &'static str {
    match reason {
        FailureReason::UnknownCa => "untrusted",
        other => other.as_str(),
    }
}

/// What a route's peers' certificates are judged for.
pub(super) fn usage(mode: Mode) -> Usage {
    match mode {
        Mode::Server => Usage::ClientAuth,
        Mode::Client => Usage::ServerAuth,
    }
}

fn scope(route: &RouteView) -> CrlScope {
    match route.crl_scope.as_str() {
        "chain" => CrlScope::Chain,
        _ => CrlScope::Leaf,
    }
}

/// The earliest notAfter of the certificates a peer presented (leaf and
/// intermediates); `None` when none parses.
pub fn chain_expiry(chain_pem: &str) -> Option<SystemTime> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::CertificateDer;
    CertificateDer::pem_slice_iter(chain_pem.as_bytes())
        .filter_map(Result::ok)
        .filter_map(|c| crate::identity::CertInfo::parse(&c).ok())
        .map(|i| i.not_after_time())
        .min()
}

/// When a connection the candidate cuts at `grace_end` closes, and why: its
/// own chain's expiry when that comes first, else the candidate's reason.
fn at_grace_end(
    conn: &ConnView,
    reason: FailureReason,
    detail: String,
    grace_end: SystemTime,
) -> (&'static str, String, When) {
    match chain_expiry(&conn.chain_pem) {
        Some(t) if t < grace_end => (
            "expired",
            format!(
                "its chain expires before the end of --trust-grace, when it would be cut ({}: {detail})",
                label(reason)
            ),
            When::Expires(t),
        ),
        _ => (label(reason), detail, When::GraceEnd(grace_end)),
    }
}

/// The PEM blocks of `running` whose certificate `candidate` lacks.
fn dropped(running: &str, candidate: &[u8]) -> Vec<u8> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::CertificateDer;
    let keep: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(candidate)
        .filter_map(Result::ok)
        .collect();
    let gone: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(running.as_bytes())
        .filter_map(Result::ok)
        .filter(|c| !keep.contains(c))
        .collect();
    crate::identity::pem::certificates(&gone).into_bytes()
}

/// The trust files of one judgement (PEM, as [`TrustInputs`] reads them).
#[derive(Debug, Clone)]
pub(super) struct TrustFiles {
    pub(super) ca: Vec<u8>,
    pub(super) intermediates: Vec<u8>,
    pub(super) crl: Option<Vec<u8>>,
    /// Anchors no longer trusted (CRLs only they sign are ignored).
    pub(super) retired: Vec<u8>,
    pub(super) deny: Arc<DenyList>,
}

/// The trust files a route would judge with, now and once the grace ends
/// (`None`: nothing changes when it ends).
struct Inputs {
    now: TrustFiles,
    after: Option<TrustFiles>,
}

/// The trust of `rev` alone, the running anchors it drops retired (CRLs
/// only they sign ignored).
pub(super) fn alone(route: &RouteView, rev: &RevisionFiles) -> TrustFiles {
    TrustFiles {
        ca: rev.ca.clone(),
        intermediates: rev.intermediates.clone(),
        crl: rev.crl.clone(),
        retired: dropped(&route.trust_anchors_pem, &rev.ca),
        deny: rev.deny.clone(),
    }
}

/// The CRLs the running sidecar consults for `route` (`None`: none).
fn running_crls(route: &RouteView) -> Option<Vec<u8>> {
    (!route.crls_pem.is_empty()).then(|| route.crls_pem.clone().into_bytes())
}

/// The deny-list the running sidecar holds for `route`. `Err`: a line of
/// the page is not a deny entry (not a page this sidecar wrote).
fn running_deny(route: &RouteView) -> Result<Arc<DenyList>, CredError> {
    let text = route.deny.join("\n");
    parse_deny(&text)
        .map(Arc::new)
        .map_err(|error| CredError::Deny {
            path: format!("/connections route {}: deny", route.name).into(),
            error,
        })
}

/// A CRL or a deny file alone replaces only its own part: the candidate is
/// judged with everything else the running sidecar holds in force (its
/// anchors, intermediates, and its deny-list or CRLs), as it would be.
fn inputs(route: &RouteView, candidate: &Candidate, grace: Duration) -> Result<Inputs, CredError> {
    Ok(match candidate {
        Candidate::Crl(crl) => Inputs {
            now: TrustFiles {
                ca: route.trust_anchors_pem.clone().into_bytes(),
                intermediates: route.intermediates_pem.clone().into_bytes(),
                crl: Some(crl.clone()),
                retired: Vec::new(),
                deny: running_deny(route)?,
            },
            after: None,
        },
        Candidate::Deny(deny) => Inputs {
            now: TrustFiles {
                ca: route.trust_anchors_pem.clone().into_bytes(),
                intermediates: route.intermediates_pem.clone().into_bytes(),
                crl: running_crls(route),
                retired: Vec::new(),
                deny: deny.clone(),
            },
            after: None,
        },
        Candidate::Revision(rev) => {
            let alone = alone(route, rev);
            let gone = alone.retired.clone();
            if grace.is_zero() || gone.is_empty() {
                return Ok(Inputs {
                    now: alone,
                    after: None,
                });
            }
            let mut graced = rev.ca.clone();
            graced.extend_from_slice(&gone);
            Inputs {
                now: TrustFiles {
                    ca: graced,
                    retired: Vec::new(),
                    ..alone.clone()
                },
                after: Some(alone),
            }
        }
    })
}

pub(super) fn judge_with(
    files: &TrustFiles,
    conn: &ConnView,
    (scope, usage): (CrlScope, Usage),
    now: SystemTime,
) -> Result<Verdict, CredError> {
    let inputs = TrustInputs {
        ca: &files.ca,
        intermediates: (!files.intermediates.is_empty()).then_some(files.intermediates.as_slice()),
        crl: files.crl.as_deref(),
        retired_ca: (!files.retired.is_empty()).then_some(files.retired.as_slice()),
    };
    judge_chain_denying(
        &inputs,
        files.deny.clone(),
        conn.chain_pem.as_bytes(),
        scope,
        usage,
        now,
    )
}

/// Judges one route's connections. `Err`: the candidate's trust files are
/// unusable for this route (a CRL no anchor signs and the like): the
/// candidate itself is invalid.
pub fn judge(
    route: &RouteView,
    conns: &[ConnView],
    candidate: &Candidate,
    grace: Duration,
    now: SystemTime,
) -> Result<Vec<Cut>, CredError> {
    let files = inputs(route, candidate, grace)?;
    let grace_end = now.checked_add(grace).unwrap_or(now);
    let how = (scope(route), usage(route.mode));
    let mut cuts = Vec::new();
    for conn in conns.iter().filter(|c| c.route == route.name) {
        let cut = match judge_with(&files.now, conn, how, now)? {
            Verdict::Refused { reason, detail } => Some((label(reason), detail, When::Now)),
            Verdict::Admitted => match &files.after {
                Some(after) => match judge_with(after, conn, how, now)? {
                    Verdict::Refused { reason, detail } => {
                        Some(at_grace_end(conn, reason, detail, grace_end))
                    }
                    Verdict::Admitted => None,
                },
                None => None,
            },
        };
        if let Some((reason, detail, when)) = cut {
            cuts.push(Cut {
                conn: conn.clone(),
                reason,
                detail,
                when,
            });
        }
    }
    Ok(cuts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_issuer_reads_untrusted_and_others_keep_their_label() {
        assert_eq!(label(FailureReason::UnknownCa), "untrusted");
        assert_eq!(label(FailureReason::Revoked), "revoked");
        assert_eq!(label(FailureReason::PinMismatch), "pin_mismatch");
        assert_eq!(label(FailureReason::Expired), "expired");
    }

    #[test]
    fn a_chain_expires_with_its_earliest_certificate() {
        use crate::pki::{DevCa, LeafSpec, Role};
        use std::time::Duration;
        let ca = DevCa::new("expiry CA", 30).unwrap();
        let now = SystemTime::now();
        let leaf = |secs: u64| {
            let spec = LeafSpec::dns("a.svc", Role::Client, 1).valid(
                now - Duration::from_secs(60),
                now + Duration::from_secs(secs),
            );
            ca.issue(&spec).unwrap().cert_pem
        };
        let (soon, later) = (leaf(600), leaf(7200));
        let at = |pem: &str| chain_expiry(pem).map(crate::identity::time_to_epoch);
        let secs = |d: u64| crate::identity::time_to_epoch(now + Duration::from_secs(d));
        // Either position: a leaf, or a certificate after it in the chain.
        assert_eq!(at(&format!("{later}{soon}")), Some(secs(600)));
        assert_eq!(at(&format!("{soon}{later}")), Some(secs(600)));
        assert_eq!(at(&later), Some(secs(7200)));
        assert_eq!(at("not a chain"), None);
    }

    /// A server route whose running trust is `ca` with these CRLs and
    /// deny entries, and one live connection presenting `peer`.
    fn running(
        ca: &crate::pki::DevCa,
        crls_pem: String,
        deny: &[String],
        peer: &str,
    ) -> (RouteView, ConnView) {
        let route = RouteView {
            name: "server".into(),
            mode: Mode::Server,
            usage: "client_auth".into(),
            crl_scope: "leaf".into(),
            trust_grace_seconds: 0,
            trust_anchors_pem: ca.cert_pem.clone(),
            intermediates_pem: String::new(),
            crls_pem,
            deny: deny.to_vec(),
            live: 1,
        };
        let conn = ConnView {
            route: "server".into(),
            id: 1,
            peer: "127.0.0.1:1".into(),
            subject: String::new(),
            sans: Vec::new(),
            serial: String::new(),
            spki_sha256: String::new(),
            not_after: 0,
            age_seconds: 0.0,
            bytes_to_target: 0,
            bytes_from_target: 0,
            chain_pem: peer.to_string(),
        };
        (route, conn)
    }

    fn reasons(route: &RouteView, conn: &ConnView, candidate: &Candidate) -> Vec<&'static str> {
        let now = SystemTime::now();
        judge(
            route,
            std::slice::from_ref(conn),
            candidate,
            Duration::ZERO,
            now,
        )
        .expect("judged")
        .iter()
        .map(|c| c.reason)
        .collect()
    }

    #[test]
    fn a_deny_or_crl_alone_is_judged_with_the_running_other_half() {
        use crate::pki::{serial_of, CrlSpec, DevCa, LeafSpec, Role};
        let ca = DevCa::new("preview CA", 30).unwrap();
        let peer = ca
            .issue(&LeafSpec::dns("peer.svc", Role::Client, 1))
            .unwrap();
        let serial = serial_of(&peer.cert_der).unwrap();
        let revoking = ca.crl(&CrlSpec::new(1, vec![serial], 7)).unwrap();
        let unrelated = Candidate::Deny(Arc::new(parse_deny("san:other.svc\n").unwrap()));
        // The running CRL revokes the peer: a deny file naming someone else
        // still leaves it refused, as the sidecar holding both would.
        let (route, conn) = running(&ca, revoking.pem.clone(), &[], &peer.cert_pem);
        assert_eq!(reasons(&route, &conn, &unrelated), ["revoked"]);
        // The running deny-list names the peer: a CRL revoking nothing
        // still leaves it refused.
        let empty_crl = ca.crl(&CrlSpec::new(2, Vec::new(), 7)).unwrap();
        let crl_only = Candidate::Crl(empty_crl.pem.into_bytes());
        let denied = ["san:peer.svc".to_string()];
        let (route, conn) = running(&ca, String::new(), &denied, &peer.cert_pem);
        assert_eq!(reasons(&route, &conn, &crl_only), ["denied"]);
        // Neither in force: neither candidate refuses it.
        let (route, conn) = running(&ca, String::new(), &[], &peer.cert_pem);
        assert!(reasons(&route, &conn, &unrelated).is_empty());
        assert!(reasons(&route, &conn, &crl_only).is_empty());
        // A page line that is no deny entry is an error, not "deny nothing".
        let (route, conn) = running(&ca, String::new(), &["bogus".into()], &peer.cert_pem);
        let now = SystemTime::now();
        assert!(judge(&route, &[conn], &crl_only, Duration::ZERO, now).is_err());
    }

    #[test]
    fn dropped_anchors_are_those_the_candidate_lacks() {
        let a = crate::identity::pem::certificates(&[vec![0x30, 1, 1]]);
        let b = crate::identity::pem::certificates(&[vec![0x30, 1, 2]]);
        let both = format!("{a}{b}");
        assert_eq!(dropped(&both, a.as_bytes()), b.clone().into_bytes());
        assert!(dropped(&a, both.as_bytes()).is_empty());
    }
}

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
//! The route's SAN policy and SPKI pins are not part of a credential
//! revision and do not change with it, so they are not re-judged: every
//! live connection already passed them. A deny-list (a revision's `deny`
//! file, or a deny file alone) joins the same judgement: a matching entry
//! refuses the chain as `denied`, "now" (an entry takes effect within one
//! reload interval; no grace applies to it).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::admin::connections::{ConnView, RouteView};
use crate::credentials::revocation::{judge_chain_denying, TrustInputs, Verdict};
use crate::credentials::{CredError, CrlScope, DenyList, Usage};
use crate::reason::FailureReason;

/// What a candidate brings to the trust.
#[derive(Debug, Clone)]
pub enum Candidate {
    /// A whole revision (a directory, files or a Secret), validated by the
    /// sidecar's loader: its anchors, known intermediates (its
    /// `intermediates` file and its own chain) and CRLs, PEM.
    Revision {
        ca: Vec<u8>,
        intermediates: Vec<u8>,
        crl: Option<Vec<u8>>,
        /// Its deny-list (empty without a `deny` file).
        deny: Arc<DenyList>,
    },
    /// A CRL file alone: the running trust with these CRLs in force.
    Crl(Vec<u8>),
    /// A deny file alone: the running anchors with this deny-list in force.
    Deny(Arc<DenyList>),
}

/// When a refused connection would be closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// Within one reload interval of the candidate landing.
    Now,
    /// When the `--trust-grace` of the anchors it drops ends.
    GraceEnd(SystemTime),
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

fn usage(route: &RouteView) -> Usage {
    match route.usage.as_str() {
        "server_auth" => Usage::ServerAuth,
        _ => Usage::ClientAuth,
    }
}

fn scope(route: &RouteView) -> CrlScope {
    match route.crl_scope.as_str() {
        "chain" => CrlScope::Chain,
        _ => CrlScope::Leaf,
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
struct TrustFiles {
    ca: Vec<u8>,
    intermediates: Vec<u8>,
    crl: Option<Vec<u8>>,
    /// Anchors no longer trusted (CRLs only they sign are ignored).
    retired: Vec<u8>,
    deny: Arc<DenyList>,
}

/// The trust files a route would judge with, now and once the grace ends
/// (`None`: nothing changes when it ends).
struct Inputs {
    now: TrustFiles,
    after: Option<TrustFiles>,
}

fn inputs(route: &RouteView, candidate: &Candidate, grace: Duration) -> Inputs {
    match candidate {
        Candidate::Crl(crl) => Inputs {
            now: TrustFiles {
                ca: route.trust_anchors_pem.clone().into_bytes(),
                intermediates: route.intermediates_pem.clone().into_bytes(),
                crl: Some(crl.clone()),
                retired: Vec::new(),
                deny: Arc::default(),
            },
            after: None,
        },
        Candidate::Deny(deny) => Inputs {
            now: TrustFiles {
                ca: route.trust_anchors_pem.clone().into_bytes(),
                intermediates: route.intermediates_pem.clone().into_bytes(),
                crl: None,
                retired: Vec::new(),
                deny: deny.clone(),
            },
            after: None,
        },
        Candidate::Revision {
            ca,
            intermediates,
            crl,
            deny,
        } => {
            let gone = dropped(&route.trust_anchors_pem, ca);
            let alone = TrustFiles {
                ca: ca.clone(),
                intermediates: intermediates.clone(),
                crl: crl.clone(),
                retired: gone.clone(),
                deny: deny.clone(),
            };
            if grace.is_zero() || gone.is_empty() {
                return Inputs {
                    now: alone,
                    after: None,
                };
            }
            let mut graced = ca.clone();
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
    }
}

fn judge_with(
    files: &TrustFiles,
    conn: &ConnView,
    route: &RouteView,
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
        scope(route),
        usage(route),
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
    let files = inputs(route, candidate, grace);
    let grace_end = now.checked_add(grace).unwrap_or(now);
    let mut cuts = Vec::new();
    for conn in conns.iter().filter(|c| c.route == route.name) {
        let mut verdict = (judge_with(&files.now, conn, route, now)?, When::Now);
        if verdict.0 == Verdict::Admitted {
            if let Some(after) = &files.after {
                verdict = (
                    judge_with(after, conn, route, now)?,
                    When::GraceEnd(grace_end),
                );
            }
        }
        if let (Verdict::Refused { reason, detail }, when) = verdict {
            cuts.push(Cut {
                conn: conn.clone(),
                reason: label(reason),
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
    fn dropped_anchors_are_those_the_candidate_lacks() {
        let a = crate::identity::pem::certificates(&[vec![0x30, 1, 1]]);
        let b = crate::identity::pem::certificates(&[vec![0x30, 1, 2]]);
        let both = format!("{a}{b}");
        assert_eq!(dropped(&both, a.as_bytes()), b.clone().into_bytes());
        assert!(dropped(&a, both.as_bytes()).is_empty());
    }
}

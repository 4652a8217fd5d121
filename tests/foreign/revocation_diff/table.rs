//! The verdict table: OpenSSL's outcome (plus two facts about the scenario)
//! → the sidecar's expected verdict, the two deliberate looser divergences
//! folded in and named; the stricter divergences the sidecar is allowed,
//! each with its reason; and the disagreements today's code is known to
//! have (tolerated only while `judge::PATH_AWARE` is false).
//! docs/revocation.md is this file in prose: change both together.

use mtls_sidecar::credentials::CrlScope;

use super::gen::{CrlTime, IdpKind, Shape};
use super::judge::REJECTED;
use super::openssl::Outcome;

/// Deliberate and looser: the issuer (by name and key) has no CRL in force,
/// OpenSSL says 3 "unable to get certificate CRL" (or 8/33/11 about a CRL
/// that is not that key's, or not valid yet), the sidecar admits.
pub const NO_CRL: &str = "no CRL for this issuer: admitted";
/// Deliberate and looser: the CRL is past its nextUpdate, OpenSSL says 12,
/// the sidecar still enforces it (and admits what it does not list).
pub const STALE: &str = "stale CRL still enforced";

/// How one OpenSSL error code reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// 2, 20, 21, 7, 24: no path to a trusted CA.
    UnknownCa,
    /// 25 path length, 47/48 name constraints: a CA's constraint broken.
    BadChain,
    /// 9, 10: a certificate outside its validity.
    Expired,
    /// 26: the leaf's usage.
    Purpose,
    /// 23.
    Revoked,
    /// 3 unable to get certificate CRL, 44 different CRL scope.
    NoCrlInScope,
    /// 12 CRL has expired.
    CrlExpired,
    /// 8 CRL signature failure, 11 CRL not yet valid, 33 unable to get
    /// CRL issuer, 35 no cRLSign, 54 CRL path validation error: about a
    /// CRL that is not the issuer's usable one.
    CrlUnusable,
}

fn class(code: u32) -> Option<Class> {
    Some(match code {
        2 | 20 | 21 | 7 | 24 => Class::UnknownCa,
        25 | 47 | 48 => Class::BadChain,
        9 | 10 => Class::Expired,
        26 => Class::Purpose,
        23 => Class::Revoked,
        3 | 44 => Class::NoCrlInScope,
        12 => Class::CrlExpired,
        8 | 11 | 33 | 35 | 54 => Class::CrlUnusable,
        _ => return None,
    })
}

/// What the sidecar must answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    pub verdict: &'static str,
    /// Set when the verdict admits where OpenSSL refuses: which of the two
    /// deliberate divergences it is.
    pub looser: Option<&'static str>,
}

/// The table. `below` is the number of certificates under the anchor (the
/// anchor's depth in OpenSSL's numbering); `has_crl[d]`: the issuer of the
/// certificate at depth `d` has a CRL in force (right name, right key,
/// already valid); `held_broken[d]`: that issuer is a CA the sidecar holds
/// (the root, or an intermediate of the `intermediates` file) and its CRL
/// verifies with no trusted key (a corrupted signature, no cRLSign,
/// another key): OpenSSL refusing on that CRL (8, 35, 33, 54) agrees with
/// the sidecar rejecting the revision. Errors about the anchor itself are not compared: the
/// sidecar never looks an anchor up in a CRL (an anchor is withdrawn by
/// removing it from ca.crt), `-crl_check_all` does.
pub fn expected(
    o: &Outcome,
    scope: CrlScope,
    below: usize,
    has_crl: &[bool],
    held_broken: &[bool],
) -> Result<Expected, String> {
    let in_scope = |d: usize| match scope {
        CrlScope::Leaf => d == 0,
        CrlScope::Chain => d < below,
    };
    let mut classes = Vec::new();
    for &(code, depth) in &o.errors {
        let c = class(code).ok_or_else(|| format!("unmapped OpenSSL error {code}"))?;
        let about_crls = !matches!(
            c,
            Class::UnknownCa | Class::BadChain | Class::Expired | Class::Purpose
        );
        if about_crls && !in_scope(depth) {
            continue;
        }
        classes.push((c, depth));
    }
    let any = |c: Class| classes.iter().any(|(k, _)| *k == c);
    let refuse = |verdict| {
        Ok(Expected {
            verdict,
            looser: None,
        })
    };
    if classes
        .iter()
        .any(|&(c, d)| c == Class::CrlUnusable && held_broken.get(d).copied().unwrap_or(false))
    {
        return refuse(REJECTED);
    }
    if any(Class::UnknownCa) {
        return refuse("unknown_ca");
    }
    if any(Class::BadChain) {
        return refuse("bad_chain");
    }
    if any(Class::Expired) {
        return refuse("expired");
    }
    if any(Class::Purpose) {
        return refuse("bad_san");
    }
    if any(Class::Revoked) {
        return refuse("revoked");
    }
    let mut looser = None;
    for &(c, d) in &classes {
        let has = has_crl.get(d).copied().unwrap_or(false);
        match c {
            _ if !has => looser = Some(NO_CRL),
            Class::NoCrlInScope => return refuse("revoked_status_unknown"),
            Class::CrlExpired => looser = looser.or(Some(STALE)),
            _ => {
                return Err(format!(
                    "OpenSSL finds the CRL of depth {d}'s issuer unusable ({c:?}) though it is in force"
                ))
            }
        }
    }
    // OpenSSL was given an empty CRL for every issuer without one in force
    // (see `Minted::reference_crl_pem`): without it, it would refuse (3).
    if (0..below).any(|d| in_scope(d) && !has_crl.get(d).copied().unwrap_or(false)) {
        looser = looser.or(Some(NO_CRL));
    }
    Ok(Expected {
        verdict: "ok",
        looser,
    })
}

/// A disagreement the table allows (stricter than OpenSSL), or one today's
/// code is known to have.
pub struct Divergence {
    pub name: &'static str,
    pub reason: &'static str,
    /// Which scenarios it concerns.
    pub applies: fn(&Shape, CrlScope) -> bool,
    /// The sidecar's verdict there (`None`: any refusal, for today's list).
    pub verdict: Option<&'static str>,
}

fn any_crl(s: &Shape, f: impl Fn(&super::gen::CrlShape) -> bool) -> bool {
    s.crls.iter().flatten().any(f)
}

/// Stricter than OpenSSL, on purpose.
pub const STRICTER: &[Divergence] = &[
    Divergence {
        name: "IDP without a distribution point name",
        reason: "a CRL whose Issuing Distribution Point names no distribution point is refused \
                 when the revision loads (webpki cannot tell what it covers): the revision is \
                 rejected whole and the last good one stays in force, where OpenSSL uses the CRL",
        applies: |s, _| any_crl(s, |c| c.idp == IdpKind::FlagsOnly),
        verdict: Some(REJECTED),
    },
    Divergence {
        name: "CRL of a CA we hold that no trusted key verifies",
        reason: "a CRL naming the root or a held intermediate that no trusted key of that name \
                 verifies (corrupted signature, no cRLSign, another key) rejects the revision \
                 whole, whatever the peer; OpenSSL refuses (8, 35, 33, 54) only a chain whose \
                 check reaches that CRL (in scope, after the path and times passed)",
        applies: |s, _| s.held_broken(),
        verdict: Some(REJECTED),
    },
];

/// Where today's code (before the path-aware judgement) disagrees with the
/// table. The regression evidence for the rewrite: with `PATH_AWARE` set,
/// none of these is tolerated.
pub const TODAY: &[Divergence] = &[
    Divergence {
        name: "intermediate's CRL",
        reason: "only CRLs signed by a ca.crt anchor load: a CRL from an intermediate rejects \
                 the revision",
        applies: |s, _| s.crls.iter().take(s.below - 1).any(Option::is_some),
        verdict: None,
    },
    Divergence {
        name: "IDP scope",
        reason: "a CRL in force that does not cover the certificate (IDP URI or \
                 onlyContains* mismatch) leaves its status unknown, which is admitted",
        applies: |s, _| {
            any_crl(s, |c| {
                matches!(
                    c.idp,
                    IdpKind::Mismatched
                        | IdpKind::CaseMismatched
                        | IdpKind::OnlyUser
                        | IdpKind::OnlyCa
                        | IdpKind::Matching
                )
            })
        },
        verdict: None,
    },
    Divergence {
        name: "same-name CAs",
        reason: "a second CRL for one issuer name is refused ('give one CRL per issuer'), and \
                 the other CA's CRL is checked against this CA's key (BadSignature)",
        applies: |s, _| s.twin.is_some_and(|t| t.crl),
        verdict: None,
    },
    Divergence {
        name: "CRL signed by a same-name key",
        reason: "a CRL no anchor's key verifies rejects the revision",
        applies: |s, _| any_crl(s, |c| c.broken == Some(super::gen::Broken::WrongKey)),
        verdict: None,
    },
    Divergence {
        name: "CRL not yet valid",
        reason: "a CRL whose thisUpdate is ahead is enforced at once",
        applies: |s, _| any_crl(s, |c| c.time == CrlTime::Future),
        verdict: None,
    },
];

/// How one judged scenario compares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Comparison {
    Agree,
    /// Agrees through a deliberate looser divergence.
    Looser(&'static str),
    Stricter(&'static str),
    /// Disagrees in a way today's code is known to.
    Today(&'static str),
    Fail(String),
}

/// Compares the sidecar's `actual` verdict with the table's.
pub fn compare(
    shape: &Shape,
    scope: CrlScope,
    expected: &Result<Expected, String>,
    actual: &str,
    path_aware: bool,
) -> Comparison {
    let e = match expected {
        Ok(e) => e,
        Err(why) => return Comparison::Fail(why.clone()),
    };
    if actual == e.verdict {
        return match e.looser {
            Some(l) => Comparison::Looser(l),
            None => Comparison::Agree,
        };
    }
    // Only a refusal can be stricter; an admission where the table refuses
    // is never listed.
    if actual != "ok" {
        if let Some(d) = STRICTER
            .iter()
            .find(|d| (d.applies)(shape, scope) && d.verdict == Some(actual))
        {
            return Comparison::Stricter(d.name);
        }
    }
    if !path_aware {
        if let Some(d) = TODAY.iter().find(|d| (d.applies)(shape, scope)) {
            return Comparison::Today(d.name);
        }
    }
    Comparison::Fail(format!(
        "expected {} (table), the sidecar says {actual}",
        e.verdict
    ))
}

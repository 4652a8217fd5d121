//! `check`'s deny-list step: the revision's `deny` file (or `--deny-file`)
//! has already been validated whole by the sidecar's loader; this step says
//! what it holds and which of the configured identities it denies: our
//! own certificate chain (judged by the handshake's own judgement, as a
//! peer holding this list would: a FAIL), and the trust anchors of
//! `ca.crt` whose key is on it (every peer chaining to them is refused:
//! said in the PASS line).

use std::sync::Arc;
use std::time::SystemTime;

use rustls::crypto::CryptoProvider;

use super::report::Report;
use super::steps::step;
use crate::credentials::{Anchor, CrlScope, PeerFacts, Trust, ValidRevision, CERT_FILE};

/// The `deny` step, when the revision has a deny-list.
pub(super) fn deny_step(
    r: &mut Report,
    rev: &ValidRevision,
    provider: &Arc<CryptoProvider>,
    now: SystemTime,
) {
    if rev.deny.is_empty() {
        return;
    }
    step(r, "deny", None, Some(rev), "", |rev| {
        verdict(rev, provider, now)
    });
}

fn verdict(
    rev: &ValidRevision,
    provider: &Arc<CryptoProvider>,
    now: SystemTime,
) -> Result<((), String), String> {
    let trust = revision_trust(rev, provider)?.with_deny(rev.deny.clone());
    if let Err(e) = trust.judge_own(&rev.identity.cert, now) {
        if let Some(entry) = crate::reason::denied_entry(&e) {
            return Err(format!(
                "{CERT_FILE} (subject {:?}, serial {}) is denied by the entry {entry}: peers with this list refuse it",
                rev.leaf.subject, rev.leaf.serial
            ));
        }
    }
    let c = rev.deny.counts();
    let mut detail = format!(
        "{} entries (spki-sha256 {}, serial {}, san {}); {CERT_FILE} is not denied",
        c.total(),
        c.spki,
        c.serial,
        c.san
    );
    for (der, info) in &rev.anchors {
        let entry = PeerFacts::of_anchor(der).and_then(|f| rev.deny.first_match(&f).cloned());
        if let Some(entry) = entry {
            detail.push_str(&format!(
                "; every peer chaining to the anchor {:?} is denied ({entry})",
                info.subject
            ));
        }
    }
    Ok(((), detail))
}

/// The trust a revision alone makes (its anchors, intermediates and
/// CRLs, every CRL judging the whole chain), as a peer holding it judges.
pub(super) fn revision_trust(
    rev: &ValidRevision,
    provider: &Arc<CryptoProvider>,
) -> Result<Trust, String> {
    Ok(Trust::build(
        Anchor::bundle(&rev.anchors),
        rev.crls.clone(),
        CrlScope::Chain,
        provider,
    )
    .map_err(|e| e.to_string())?
    .with_issuers(rev.intermediates.clone(), Arc::from(Vec::new())))
}

//! What the CRLs of a new trust say that an operator must hear once: a
//! CRL newly ignored (its CA is no longer trusted), a CRL newly held
//! pending (dated in the future), and revoked serials made admissible
//! again (a CRL in force removed or shrunk).

use super::super::revocation::{CrlState, Dropped};
use super::super::{CrlInfo, CrlSet};

/// One thing to WARN about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CrlNotice {
    /// A CRL verified only by an anchor no longer trusted: not enforced.
    Ignored { crl: CrlInfo, signer: String },
    /// A CRL dated in the future: held, the previous one stays in force.
    Pending { crl: CrlInfo },
    /// One applied revision made these serials admissible again.
    Unrevoked(Vec<Dropped>),
}

/// The notices `next` raises over `previous` (a CRL already ignored or
/// pending in `previous` is not reported again).
pub(super) fn between(previous: &CrlSet, next: &CrlSet, dropped: Vec<Dropped>) -> Vec<CrlNotice> {
    let was = |der: &[u8], label: &str| {
        previous
            .entries()
            .iter()
            .any(|e| e.crl.der() == der && e.state.label() == label)
    };
    let mut out = Vec::new();
    for e in next.entries() {
        if was(e.crl.der(), e.state.label()) {
            continue;
        }
        match &e.state {
            CrlState::Ignored(s) => out.push(CrlNotice::Ignored {
                crl: e.crl.info.clone(),
                signer: s.subject.clone(),
            }),
            CrlState::Pending(_) => out.push(CrlNotice::Pending {
                crl: e.crl.info.clone(),
            }),
            CrlState::Verified(_) | CrlState::Unverified => {}
        }
    }
    if !dropped.is_empty() {
        out.push(CrlNotice::Unrevoked(dropped));
    }
    out
}

//! Certificate revocation: ONE judgement, on the path webpki built, used by
//! the handshake (both directions), live re-verification, `check`,
//! `/status` and `publish` ([`judge_chain`]).
//!
//! For each certificate of the built path that `--crl-scope` covers (the
//! end entity; with `chain`, every intermediate too; never the anchor),
//! with its issuer the next certificate of the path (or the anchor):
//!
//! - the candidates are the CRLs whose issuer name is the certificate's
//!   issuer name AND whose signature verifies with that issuer's key
//!   (CRLs verified at load carry their signer's key; an unverified CRL is
//!   verified now against the path's issuer, memoised);
//! - no candidate: the status is unknown and the certificate is admitted
//!   (an issuer without a CRL is not judged revoked);
//! - a candidate whose scope covers the certificate lists its serial:
//!   refused, `revoked`;
//! - candidates exist, none covers it (Issuing Distribution Point):
//!   refused, `revoked_status_unknown`.
//!
//! A stale CRL (past nextUpdate) is still enforced; a CRL held pending
//! (thisUpdate beyond now + [`CLOCK_SKEW`]) or ignored (its signer is no
//! longer trusted) is never a candidate.
//!
//! `path` is that judgement, `crl` parses files, `scope` judges IDPs, `signer` finds the key
//! that signed a CRL, `order` applies the lifecycle rules between the
//! CRLs in force and a new revision's, `judge` is the public entry point
//! for tools.

mod crl;
mod judge;
mod order;
mod path;
mod scope;
mod signer;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rustls::crypto::CryptoProvider;
use serde::Serialize;

pub use crl::{parse_file, Crl, CrlInfo, MAX_CRLS};
pub use judge::{
    classify_crl_file, describe_state, judge_chain, judge_chain_denying, CrlReport, TrustInputs,
    Verdict,
};
pub(crate) use order::{classify, classify_over};
pub use order::{Classified, Dropped, DEFAULT_CRL_PRUNE_AGE};
pub(crate) use path::{judge_path, SigMemo};
pub(crate) use signer::wrap_sequence;
pub(crate) use signer::Known;
pub use signer::{key_hash, KeyHash};
pub use signer::{Signer, SignerKind};

/// How far a clock may be off before a date is judged to be in the future:
/// five minutes. A CRL whose thisUpdate is after `now + CLOCK_SKEW` is held
/// pending (not enforced, never the reference for "older") until it is
/// not; one dated within it is enforced at once.
///
/// Our own certificate is deliberately NOT served before its notBefore
/// (a revision whose leaf is not valid yet stays pending, as before): peers
/// (webpki, OpenSSL) judge validity without tolerance, so serving it early
/// would make peers with a correct clock refuse us, while serving it up to
/// this much late only keeps the previous, still valid, certificate in
/// use a little longer.
pub const CLOCK_SKEW: Duration = Duration::from_secs(300);

/// Which certificates of a peer's chain are looked up in the CRLs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CrlScope {
    /// The peer's own certificate only.
    #[default]
    Leaf,
    /// Every certificate of the chain below the trust anchor.
    Chain,
}

/// What a peer's certificate is judged for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Usage {
    /// A server's certificate (the client side of a connection).
    ServerAuth,
    /// A client's certificate (the server side of a connection).
    ClientAuth,
}

impl Usage {
    pub(crate) fn key_usage(self) -> webpki::KeyUsage {
        match self {
            Usage::ServerAuth => webpki::KeyUsage::server_auth(),
            Usage::ClientAuth => webpki::KeyUsage::client_auth(),
        }
    }
}

/// What is known of one CRL's signer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CrlState {
    /// Signed by a trusted key (an anchor in force or graced, or a known
    /// intermediate): enforced against that key's certificates.
    Verified(Signer),
    /// Its issuer is no CA we hold (no anchor, graced anchor or known
    /// intermediate of that name; a CRL that names one and that none
    /// verifies never loads): enforced at a handshake only against a path
    /// whose intermediate issuer (sent by the peer) verifies it.
    Unverified,
    /// Verified only by an anchor no longer trusted: not enforced.
    Ignored(Signer),
    /// thisUpdate is beyond now + [`CLOCK_SKEW`]: not enforced yet; the
    /// previous CRL of its key (if any) stays in force.
    Pending(Option<Signer>),
}

impl CrlState {
    /// The label `/status` and `check` show.
    pub fn label(&self) -> &'static str {
        match self {
            CrlState::Verified(_) => "verified",
            CrlState::Unverified => "unverified",
            CrlState::Ignored(_) => "ignored",
            CrlState::Pending(_) => "pending",
        }
    }

    /// The key that signed it, when known.
    pub fn signer(&self) -> Option<&Signer> {
        match self {
            CrlState::Verified(s) | CrlState::Ignored(s) | CrlState::Pending(Some(s)) => Some(s),
            CrlState::Unverified | CrlState::Pending(None) => None,
        }
    }
}

/// Why a CRL no longer in the revision is still in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kept {
    /// The revision's CRL of this key is pending.
    NewerPending,
    /// The revision dropped it while its CA is in its trust grace.
    IssuerGraced,
}

/// One CRL of the effective set.
#[derive(Debug, Clone)]
pub struct Entry {
    pub crl: Arc<Crl>,
    pub state: CrlState,
    /// Set when the CRL comes from an earlier revision.
    pub kept: Option<Kept>,
}

impl Entry {
    /// True when it is consulted at handshakes (verified or unverified).
    pub fn enforced(&self) -> bool {
        matches!(self.state, CrlState::Verified(_) | CrlState::Unverified)
    }
}

/// The CRLs of the trust in force, each with what is known of its signer.
#[derive(Debug, Default)]
pub struct CrlSet {
    entries: Vec<Entry>,
}

impl CrlSet {
    /// No CRL at all.
    pub fn empty() -> CrlSet {
        CrlSet::default()
    }

    pub(crate) fn from_entries(entries: Vec<Entry>) -> CrlSet {
        CrlSet { entries }
    }

    /// Parses a CRL file and classifies it against `anchors` alone, at the
    /// current time (what `certs revoke` and in-process tests need).
    pub fn parse(
        file: &crate::credentials::RawFile,
        anchors: &[(
            rustls_pki_types::CertificateDer<'static>,
            crate::identity::CertInfo,
        )],
        provider: &CryptoProvider,
    ) -> Result<CrlSet, crate::credentials::CredError> {
        let crls = parse_file(file)?;
        let mut known = Known::default();
        let ders: Vec<_> = anchors.iter().map(|(d, _)| d.clone()).collect();
        known.add(&ders, SignerKind::Anchor);
        Ok(classify(&crls, &known, SystemTime::now(), provider)?.set)
    }

    /// True when `ca`'s key verifies `crl` and `ca` may sign CRLs (what
    /// `certs revoke` needs to find its own CRL among other CAs').
    pub fn signed_by(
        crl: &Crl,
        ca: &rustls_pki_types::CertificateDer<'_>,
        provider: &CryptoProvider,
    ) -> bool {
        let mut known = Known::default();
        known.add(std::slice::from_ref(ca), SignerKind::Anchor);
        known.signer_of(crl, provider).is_some()
    }

    /// True when there is no CRL.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every CRL, with its state.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Every CRL's description.
    pub fn infos(&self) -> impl Iterator<Item = &CrlInfo> {
        self.entries.iter().map(|e| &e.crl.info)
    }

    /// The CRLs the revision itself supplied (not kept from an earlier one).
    pub(crate) fn supplied(&self) -> Vec<Arc<Crl>> {
        self.entries
            .iter()
            .filter(|e| e.kept.is_none())
            .map(|e| e.crl.clone())
            .collect()
    }

    /// True when both hold the very same CRLs in the same states.
    pub fn same_as(&self, other: &CrlSet) -> bool {
        self.entries.len() == other.entries.len()
            && self
                .entries
                .iter()
                .zip(&other.entries)
                .all(|(a, b)| a.crl.der() == b.crl.der() && a.state == b.state && a.kept == b.kept)
    }

    /// The earliest nextUpdate among the enforced CRLs, epoch seconds.
    pub fn earliest_next_update(&self) -> Option<i64> {
        self.enforced().filter_map(|e| e.crl.info.next_update).min()
    }

    /// The enforced CRLs whose nextUpdate is at or before `now_secs`.
    pub fn stale(&self, now_secs: i64) -> impl Iterator<Item = &CrlInfo> {
        self.enforced()
            .map(|e| &e.crl.info)
            .filter(move |i| i.is_stale(now_secs))
    }

    fn enforced(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(|e| e.enforced())
    }

    /// How many CRLs are held pending.
    pub fn pending(&self) -> usize {
        self.entries
            .iter()
            .filter(|e| matches!(e.state, CrlState::Pending(_)))
            .count()
    }

    /// When the earliest pending CRL stops being in the future (its
    /// thisUpdate minus [`CLOCK_SKEW`]).
    pub fn next_pending(&self) -> Option<SystemTime> {
        self.entries
            .iter()
            .filter(|e| matches!(e.state, CrlState::Pending(_)))
            .map(|e| crate::identity::epoch_to_time(e.crl.info.this_update))
            .min()
            .map(|t| t.checked_sub(CLOCK_SKEW).unwrap_or(t))
    }

    /// Every revoked entry of every CRL: (serial bytes, revocation time in
    /// epoch seconds). `certs revoke` keeps them when it extends a CRL.
    pub fn revoked_entries(&self) -> Vec<(Vec<u8>, i64)> {
        self.entries
            .iter()
            .flat_map(|e| e.crl.revoked_entries())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::RawFile;
    use crate::pki::{CrlSpec, DevCa};

    fn crl(ca: &DevCa, number: u64) -> Arc<Crl> {
        let pem = ca.crl(&CrlSpec::new(number, Vec::new(), 7)).unwrap().pem;
        let file = RawFile {
            path: "ca.crl".into(),
            bytes: pem.into_bytes(),
        };
        parse_file(&file).unwrap().remove(0)
    }

    fn set(entries: &[(&Arc<Crl>, CrlState, Option<Kept>)]) -> CrlSet {
        CrlSet::from_entries(
            entries
                .iter()
                .map(|(crl, state, kept)| Entry {
                    crl: Arc::clone(crl),
                    state: state.clone(),
                    kept: *kept,
                })
                .collect(),
        )
    }

    /// `certs revoke` finds its CA's CRL by key: a CRL under the same name
    /// from another key is not the CA's.
    #[test]
    fn signed_by_is_true_only_for_the_cas_own_key() {
        use rustls_pki_types::pem::PemObject;
        let (a, twin) = (DevCa::new("A", 1).unwrap(), DevCa::new("A", 1).unwrap());
        let der = rustls_pki_types::CertificateDer::from_pem_slice(a.cert_pem.as_bytes()).unwrap();
        let p = crate::tls::provider::crypto_provider();
        assert!(CrlSet::signed_by(&crl(&a, 1), &der, &p));
        assert!(!CrlSet::signed_by(&crl(&twin, 1), &der, &p));
    }

    /// Whether the trust changed hangs on this: a CRL added, removed or
    /// replaced, a change of what is known of its signer, or of why it is
    /// kept, each makes a different set.
    #[test]
    fn same_as_tells_every_crl_its_state_and_why_it_is_kept() {
        let a = DevCa::new("A", 1).unwrap();
        let (one, two) = (crl(&a, 1), crl(&a, 2));
        let base = || set(&[(&one, CrlState::Unverified, None)]);
        assert!(base().same_as(&base()));
        assert!(!base().same_as(&CrlSet::empty()));
        assert!(!CrlSet::empty().same_as(&base()));
        assert!(!base().same_as(&set(&[(&two, CrlState::Unverified, None)])));
        assert!(!base().same_as(&set(&[(&one, CrlState::Pending(None), None)])));
        let kept = set(&[(&one, CrlState::Unverified, Some(Kept::IssuerGraced))]);
        assert!(!base().same_as(&kept));
    }

    /// Only enforced CRLs (verified or unverified) have a nextUpdate that
    /// matters: a pending one is not consulted yet.
    #[test]
    fn only_enforced_crls_count_for_next_update_and_staleness() {
        let a = DevCa::new("A", 1).unwrap();
        let one = crl(&a, 1);
        let next = one.info.next_update.expect("a nextUpdate");
        let pending = set(&[(&one, CrlState::Pending(None), None)]);
        assert_eq!(pending.earliest_next_update(), None);
        assert_eq!(pending.stale(next + 1).count(), 0);
        let enforced = set(&[(&one, CrlState::Unverified, None)]);
        assert_eq!(enforced.earliest_next_update(), Some(next));
        assert_eq!(enforced.stale(next + 1).count(), 1);
    }
}

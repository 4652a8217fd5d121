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
//! [`crl`] parses files, [`scope`] judges IDPs, [`signer`] finds the key
//! that signed a CRL, [`order`] applies the lifecycle rules between the
//! CRLs in force and a new revision's, [`judge`] is the public entry point
//! for tools.

mod crl;
mod judge;
mod order;
mod scope;
mod signer;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use rustls::crypto::CryptoProvider;
use serde::Serialize;
use webpki::VerifiedPath;

pub use crl::{parse_file, Crl, CrlInfo, MAX_CRLS};
pub use judge::{classify_crl_file, describe_state, judge_chain, CrlReport, TrustInputs, Verdict};
pub(crate) use order::classify;
pub use order::{Classified, Dropped};
pub use signer::{key_hash, KeyHash};
pub(crate) use signer::{Known, Signer, SignerKind};

use scope::NodeRole;

/// How far a clock may be off before a date is judged to be in the future:
/// five minutes. Our own revision's certificate is judged valid from
/// `notBefore - CLOCK_SKEW`, and a CRL whose thisUpdate is after
/// `now + CLOCK_SKEW` is held pending (not enforced, never the reference
/// for "older") until it is not.
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
    /// No known key verifies it: enforced at a handshake only against a
    /// path whose issuer's key verifies it.
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
        Ok(classify(&crls, &known, SystemTime::now(), &CrlSet::empty(), provider)?.set)
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

/// One node of a built path, as the judgement sees it.
struct Node<'a> {
    cert: &'a webpki::Cert<'a>,
    role: NodeRole,
    /// The issuer's whole SPKI.
    issuer_spki: Vec<u8>,
    /// The issuer's certificate when it is an intermediate of the path
    /// (its keyUsage decides whether it may sign CRLs); `None`: the anchor.
    issuer_der: Option<rustls_pki_types::CertificateDer<'a>>,
}

/// Remembers, per CRL of one trust and issuer key, whether an unverified
/// CRL's signature verifies with that key: a handshake pays for it once.
#[derive(Debug, Default)]
pub(crate) struct SigMemo(Mutex<HashMap<(usize, KeyHash), bool>>);

/// How many (CRL, key) verdicts one trust remembers; past it, the memo
/// starts over (a bound on memory, not on correctness).
const MEMO_LIMIT: usize = 1024;

impl SigMemo {
    fn verifies(&self, index: usize, key: KeyHash, verify: impl FnOnce() -> bool) -> bool {
        if let Some(v) = self
            .0
            .lock()
            .ok()
            .and_then(|m| m.get(&(index, key)).copied())
        {
            return v;
        }
        let v = verify();
        if let Ok(mut m) = self.0.lock() {
            if m.len() >= MEMO_LIMIT {
                m.clear();
            }
            m.insert((index, key), v);
        }
        v
    }
}

/// The judgement on a built path (webpki's `verify_path` callback): `Err`
/// with `CertRevoked` or `UnknownRevocationStatus` refuses this path (webpki
/// then tries any other path the peer's certificates allow).
pub(crate) fn judge_path(
    crls: &CrlSet,
    scope: CrlScope,
    path: &VerifiedPath<'_>,
    memo: &SigMemo,
    provider: &CryptoProvider,
) -> Result<(), webpki::Error> {
    if crls.is_empty() {
        return Ok(());
    }
    let intermediates: Vec<&webpki::Cert<'_>> = path.intermediate_certificates().collect();
    let anchor = path.anchor();
    let anchor_spki = signer::wrap_sequence(anchor.subject_public_key_info.as_ref());
    let judged = match scope {
        CrlScope::Leaf => 1,
        CrlScope::Chain => 1 + intermediates.len(),
    };
    for i in 0..judged {
        let cert: &webpki::Cert<'_> = match i {
            0 => path.end_entity(),
            _ => intermediates[i - 1],
        };
        let (issuer_spki, issuer_der) = match intermediates.get(i) {
            Some(issuer) => (
                issuer.subject_public_key_info().as_ref().to_vec(),
                Some(issuer.der()),
            ),
            None => (anchor_spki.clone(), None),
        };
        let node = Node {
            cert,
            role: if i == 0 {
                NodeRole::EndEntity
            } else {
                NodeRole::Ca
            },
            issuer_spki,
            issuer_der,
        };
        judge_node(crls, &node, memo, provider)?;
    }
    Ok(())
}

/// One certificate against the CRLs of its issuer's key.
fn judge_node(
    crls: &CrlSet,
    node: &Node<'_>,
    memo: &SigMemo,
    provider: &CryptoProvider,
) -> Result<(), webpki::Error> {
    let key = key_hash(&node.issuer_spki);
    let mut dps: Option<Option<Vec<Vec<u8>>>> = None;
    let mut candidates = 0usize;
    let mut covered = false;
    for (index, entry) in crls.entries.iter().enumerate() {
        if entry.crl.issuer() != node.cert.issuer()
            || !signed_by(entry, index, node, key, memo, provider)
        {
            continue;
        }
        candidates += 1;
        let der = node.cert.der();
        let in_scope = scope::covers(entry.crl.idp.as_ref(), node.role, || {
            dps.get_or_insert_with(|| scope::distribution_points(der.as_ref()))
                .clone()
        });
        if !in_scope {
            continue;
        }
        if entry.crl.lists(node.cert.serial()) {
            return Err(webpki::Error::CertRevoked);
        }
        covered = true;
    }
    unknown_status(candidates, covered)
}

/// The verdict once no CRL revoked the certificate: admitted when its
/// issuer has no CRL or a CRL covering it; refused when the issuer's CRLs
/// all exclude it by scope.
fn unknown_status(candidates: usize, covered: bool) -> Result<(), webpki::Error> {
    if candidates == 0 || covered {
        Ok(())
    } else {
        Err(webpki::Error::UnknownRevocationStatus)
    }
}

/// True when this CRL is one of the issuer key's: verified at load with
/// that key, or unverified and verifying with it now (and the issuer may
/// sign CRLs).
fn signed_by(
    entry: &Entry,
    index: usize,
    node: &Node<'_>,
    key: KeyHash,
    memo: &SigMemo,
    provider: &CryptoProvider,
) -> bool {
    match &entry.state {
        CrlState::Verified(s) => s.key == key,
        CrlState::Unverified => {
            let Some(issuer_der) = &node.issuer_der else {
                // The anchors' keys were all tried at load.
                return false;
            };
            memo.verifies(index, key, || {
                signer::der_may_sign_crls(issuer_der.as_ref())
                    && signer::verify_crl(&entry.crl, &node.issuer_spki, provider).is_ok()
            })
        }
        CrlState::Ignored(_) | CrlState::Pending(_) => false,
    }
}

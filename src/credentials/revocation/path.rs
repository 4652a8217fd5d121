//! The revocation judgement on one path webpki built (the `verify_path`
//! callback of [`Trust::verify_peer`](crate::credentials::Trust::verify_peer)):
//! each certificate `--crl-scope` covers, against the CRLs of its issuer's
//! name AND key. The rules are in the parent module's doc.

use std::collections::HashMap;
use std::sync::Mutex;

use rustls::crypto::CryptoProvider;
use webpki::VerifiedPath;

use super::scope::{self, NodeRole};
use super::signer;
use super::{key_hash, CrlScope, CrlSet, CrlState, Entry, KeyHash};

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
    for (index, entry) in crls.entries().iter().enumerate() {
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
                    && signer::verify_crl(&entry.crl, &node.issuer_spki, provider)
            })
        }
        CrlState::Ignored(_) | CrlState::Pending(_) => false,
    }
}

//! The lifecycle rules between the CRLs in force and a new revision's:
//!
//! - a CRL that names an issuer we trust (an anchor in force or graced, or
//!   an intermediate we hold) but that no trusted key of that name
//!   verifies (a corrupted signature, a CA whose keyUsage lacks cRLSign,
//!   another key under that name) rejects the revision
//!   ([`CredError::CrlSignature`]): it never loads, so it never replaces
//!   the CRL in force and never un-revokes;
//! - a CRL dated beyond now + [`CLOCK_SKEW`] is held
//!   pending; the previous CRL of its key stays in force;
//! - one CRL per issuer KEY (two CAs of one name each have theirs);
//! - "older" is judged per key against the VERIFIED CRL in force only: CRL
//!   number first, thisUpdate only when a number is missing (both CRLs are
//!   then valid now: neither is pending); an unverified or pending CRL is
//!   never the reference;
//! - a CRL whose CA is in its trust grace stays in force for the grace,
//!   even when the revision drops it (the grace never re-admits a revoked
//!   peer);
//! - removing a CRL in force, or listing fewer serials without a higher CRL
//!   number, is allowed but reported ([`Dropped`]): the caller WARNs and
//!   counts it; serials its issuer drops at a higher CRL number (pruned
//!   once their certificates expired), or a CRL listing nothing removed,
//!   are reported as pruned and counted apart.

use std::sync::Arc;
use std::time::SystemTime;

use rustls::crypto::CryptoProvider;

use super::crl::{crl_parse, Crl};
use super::signer::{verify_crl, Known, SignerKind};
use super::{CrlSet, CrlState, Entry, Kept, CLOCK_SKEW};
use crate::credentials::CredError;
use crate::identity::time_to_epoch;

/// Serials that a new revision makes admissible again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    /// The CRL's issuer name.
    pub issuer: String,
    /// The serials the CRL in force lists and the new one does not
    /// (big-endian bytes).
    pub serials: Vec<Vec<u8>>,
    /// True when the CRL was removed, false when it lists fewer serials.
    pub removed: bool,
    /// True when its issuer pruned them (a CRL of the same key at a higher
    /// CRL number without them, e.g. `certs revoke --prune-expired` once
    /// their certificates expired) or the CRL removed listed nothing:
    /// counted apart, no alert. False: an un-revocation (a CRL removed, or
    /// one listing fewer serials at a CRL number not higher).
    pub pruned: bool,
}

/// A revision's CRLs judged against what is in force.
#[derive(Debug)]
pub struct Classified {
    pub set: CrlSet,
    /// What becomes admissible again (empty almost always).
    pub dropped: Vec<Dropped>,
}

/// Classifies `revision`'s CRLs against the known issuers at `now`, keeps
/// what must stay in force from `previous`, and reports un-revocations.
pub(crate) fn classify(
    revision: &[Arc<Crl>],
    known: &Known,
    now: SystemTime,
    previous: &CrlSet,
    provider: &CryptoProvider,
) -> Result<Classified, CredError> {
    let horizon = time_to_epoch(now).saturating_add(CLOCK_SKEW.as_secs() as i64);
    let mut entries: Vec<Entry> = revision
        .iter()
        .map(|crl| {
            Ok(Entry {
                crl: crl.clone(),
                state: state_of(crl, known, horizon, provider)?,
                kept: None,
            })
        })
        .collect::<Result<_, CredError>>()?;
    one_per_key(&entries)?;
    for new in &entries {
        not_older(new, previous)?;
    }
    let dropped = dropped(previous, &entries, known, provider);
    entries.extend(kept(previous, &entries, known));
    Ok(Classified {
        set: CrlSet::from_entries(entries),
        dropped,
    })
}

/// A CRL's state: pending when dated beyond the horizon, else by its
/// signer. `Err` when it names an issuer we trust and no key verifies it
/// (pending or not: a CRL that can never verify is refused at once).
fn state_of(
    crl: &Crl,
    known: &Known,
    horizon: i64,
    provider: &CryptoProvider,
) -> Result<CrlState, CredError> {
    let signer = known.signer_of(crl, provider).cloned();
    if signer.is_none() {
        unsigned_refusal(crl, known, provider)?;
    }
    if crl.info.this_update > horizon {
        return Ok(CrlState::Pending(signer));
    }
    Ok(match signer {
        Some(s) if s.kind.trusted() => CrlState::Verified(s),
        Some(s) => CrlState::Ignored(s),
        None => CrlState::Unverified,
    })
}

/// Refuses a CRL no known key verifies when it names an issuer we trust.
fn unsigned_refusal(crl: &Crl, known: &Known, provider: &CryptoProvider) -> Result<(), CredError> {
    match known.refusal(crl, provider) {
        None => Ok(()),
        Some(detail) => Err(CredError::CrlSignature {
            path: crl.path.clone(),
            issuer: crl.info.issuer.clone(),
            this: crl.info.version(),
            detail,
        }),
    }
}

fn verified_key(e: &Entry) -> Option<super::KeyHash> {
    match &e.state {
        CrlState::Verified(s) => Some(s.key),
        _ => None,
    }
}

/// Refuses two verified CRLs of one key.
fn one_per_key(entries: &[Entry]) -> Result<(), CredError> {
    for (i, e) in entries.iter().enumerate() {
        let Some(key) = verified_key(e) else { continue };
        if entries[..i].iter().any(|o| verified_key(o) == Some(key)) {
            return Err(crl_parse(
                &e.crl.path,
                format!(
                    "a second CRL from {} signed by the same key; give one CRL per issuer key",
                    e.crl.info.issuer
                ),
            ));
        }
    }
    Ok(())
}

/// Refuses a verified CRL older than the verified CRL in force for the
/// same key.
fn not_older(new: &Entry, previous: &CrlSet) -> Result<(), CredError> {
    let Some(key) = verified_key(new) else {
        return Ok(());
    };
    let Some(old) = previous
        .entries
        .iter()
        .find(|o| verified_key(o) == Some(key))
    else {
        return Ok(());
    };
    if is_older(&new.crl, &old.crl) {
        return Err(CredError::CrlOlder {
            path: new.crl.path.clone(),
            issuer: new.crl.info.issuer.clone(),
            this: new.crl.info.version(),
            current: old.crl.info.version(),
        });
    }
    Ok(())
}

/// CRL number first; thisUpdate when either has none.
fn is_older(new: &Crl, old: &Crl) -> bool {
    match (new.info.number_value(), old.info.number_value()) {
        (Some(n), Some(o)) => n < o,
        _ => new.info.this_update < old.info.this_update,
    }
}

/// True when `new`'s CRL number is higher than `old`'s.
fn higher_number(new: &Crl, old: &Crl) -> bool {
    matches!((new.info.number_value(), old.info.number_value()), (Some(n), Some(o)) if n > o)
}

/// The verified CRLs in force that stay: their key's new CRL is pending,
/// or their CA is graced and the revision dropped them.
fn kept(previous: &CrlSet, entries: &[Entry], known: &Known) -> Vec<Entry> {
    let mut out = Vec::new();
    for old in &previous.entries {
        let CrlState::Verified(signer) = &old.state else {
            continue;
        };
        if entries.iter().any(|e| verified_key(e) == Some(signer.key)) {
            continue;
        }
        let Some(now_signer) = known.by_key(&signer.key).filter(|s| s.kind.trusted()) else {
            continue;
        };
        let pending = entries
            .iter()
            .any(|e| matches!(&e.state, CrlState::Pending(Some(s)) if s.key == signer.key));
        let why = if pending {
            Kept::NewerPending
        } else if now_signer.kind == SignerKind::Graced {
            Kept::IssuerGraced
        } else {
            continue;
        };
        out.push(Entry {
            crl: old.crl.clone(),
            state: CrlState::Verified(now_signer.clone()),
            kept: Some(why),
        });
    }
    out
}

/// The un-revocations `entries` makes, compared with the verified CRLs in
/// force whose signer is still trusted.
fn dropped(
    previous: &CrlSet,
    entries: &[Entry],
    known: &Known,
    provider: &CryptoProvider,
) -> Vec<Dropped> {
    let mut out = Vec::new();
    for old in &previous.entries {
        let CrlState::Verified(signer) = &old.state else {
            continue;
        };
        let still_trusted = match known.by_key(&signer.key) {
            Some(s) => s.kind.trusted(),
            // An intermediate no longer listed is still trusted through
            // its root.
            None => signer.kind == SignerKind::Intermediate,
        };
        if !still_trusted {
            continue;
        }
        let successor = entries.iter().find(|e| {
            e.crl.issuer() == old.crl.issuer()
                && match &e.state {
                    CrlState::Verified(s) | CrlState::Pending(Some(s)) => s.key == signer.key,
                    CrlState::Unverified | CrlState::Pending(None) => {
                        verify_crl(&e.crl, &signer.spki, provider)
                    }
                    CrlState::Ignored(_) => false,
                }
        });
        let drop = match successor {
            // Pending: the CRL in force is kept meanwhile.
            Some(e) if matches!(e.state, CrlState::Pending(_)) => None,
            Some(e) => Some((missing(&old.crl, &e.crl), false)),
            // Graced: the CRL in force is kept meanwhile.
            None if known
                .by_key(&signer.key)
                .is_some_and(|s| s.kind == SignerKind::Graced) =>
            {
                None
            }
            None => Some((old.crl.serials.clone(), true)),
        };
        if let Some((serials, removed)) = drop.filter(|(s, removed)| *removed || !s.is_empty()) {
            let pruned = is_pruned(&old.crl, successor.map(|e| &*e.crl));
            out.push(Dropped {
                issuer: old.crl.info.issuer.clone(),
                serials,
                removed,
                pruned,
            });
        }
    }
    out
}

/// True when dropping what `old` lists is its issuer's pruning, not an
/// un-revocation: the successor has a higher CRL number, or there is none
/// and `old` listed nothing.
fn is_pruned(old: &Crl, successor: Option<&Crl>) -> bool {
    match successor {
        Some(new) => higher_number(new, old),
        None => old.serials.is_empty(),
    }
}

/// The serials `old` lists and `new` does not.
fn missing(old: &Crl, new: &Crl) -> Vec<Vec<u8>> {
    old.serials
        .iter()
        .filter(|s| new.serials.binary_search(s).is_err())
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::RawFile;
    use crate::pki::{CrlSpec, DevCa};
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::CertificateDer;

    fn known(cas: &[&DevCa]) -> Known {
        let mut k = Known::default();
        let ders: Vec<_> = cas
            .iter()
            .map(|c| CertificateDer::from_pem_slice(c.cert_pem.as_bytes()).unwrap())
            .collect();
        k.add(&ders, SignerKind::Anchor);
        k
    }

    fn crls(ca: &DevCa, number: u64, this_update: SystemTime) -> Vec<Arc<Crl>> {
        let mut spec = CrlSpec::new(number, Vec::new(), 7);
        spec.this_update = this_update;
        let pem = ca.crl(&spec).unwrap().pem;
        super::super::parse_file(&RawFile {
            path: "ca.crl".into(),
            bytes: pem.into_bytes(),
        })
        .unwrap()
    }

    /// The pending boundary is exactly now + CLOCK_SKEW (whole seconds).
    #[test]
    fn pending_starts_just_past_the_skew() {
        let a = DevCa::new("A", 1).unwrap();
        let k = known(&[&a]);
        let now = crate::identity::epoch_to_time(crate::identity::time_to_epoch(SystemTime::now()));
        let p = crate::tls::provider::crypto_provider();
        let at = |t| {
            let c = classify(&crls(&a, 1, t), &k, now, &CrlSet::empty(), &p).unwrap();
            c.set.entries()[0].state.label()
        };
        assert_eq!(at(now + CLOCK_SKEW), "verified");
        assert_eq!(
            at(now + CLOCK_SKEW + std::time::Duration::from_secs(1)),
            "pending"
        );
    }

    /// Older is judged by number when both have one, else by thisUpdate;
    /// another key's CRL is never compared.
    #[test]
    fn older_is_per_key() {
        let a = DevCa::new("A", 1).unwrap();
        let b = DevCa::new("A", 1).unwrap();
        let k = known(&[&a, &b]);
        let now = SystemTime::now();
        let p = crate::tls::provider::crypto_provider();
        let in_force = classify(&crls(&a, 5, now), &k, now, &CrlSet::empty(), &p)
            .unwrap()
            .set;
        let next = |ca: &DevCa, n| classify(&crls(ca, n, now), &k, now, &in_force, &p);
        assert!(matches!(next(&a, 4), Err(CredError::CrlOlder { .. })));
        assert!(next(&a, 5).is_ok());
        assert!(next(&b, 1).is_ok(), "a same-name CA's CRL is not compared");
    }
}

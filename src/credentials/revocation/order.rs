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
//!   counts it; serials its issuer drops at a higher CRL number are
//!   pruned, counted apart, only when their entry in the CRL in force was
//!   revoked more than the prune age ago (`--crl-prune-age`, judged as
//!   `certs revoke --prune-expired` judges: the certificate was issued
//!   before its revocation and lived at most that long, so it has
//!   expired); a serial revoked more recently that a higher-numbered CRL
//!   omits is an un-revocation. A CRL listing nothing removed is pruned.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

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
    /// True when the CRL that lists fewer serials has a higher CRL number.
    pub higher: bool,
    /// True when its issuer pruned them (a CRL of the same key at a higher
    /// CRL number without them, each revoked more than the prune age ago,
    /// e.g. `certs revoke --prune-expired` once their certificates
    /// expired) or the CRL removed listed nothing: counted apart, no
    /// alert. False: an un-revocation (a CRL removed, one listing fewer
    /// serials at a CRL number not higher, or serials revoked within the
    /// prune age that a higher CRL number omits).
    pub pruned: bool,
}

impl Dropped {
    /// How the revision dropped them, for the log and `publish`.
    pub fn how(&self) -> &'static str {
        match (self.removed, self.higher, self.pruned) {
            (true, _, true) => "a CRL listing nothing removed",
            (true, _, false) => "CRL removed",
            (false, true, true) => {
                "CRL re-issued at a higher CRL number without them, revoked longer ago than --crl-prune-age: their certificates expired"
            }
            (false, true, false) => {
                "CRL re-issued at a higher CRL number without them, revoked within --crl-prune-age: their certificates may still be valid"
            }
            (false, false, _) => "CRL lists fewer serials without a higher CRL number",
        }
    }
}

/// The default `--crl-prune-age`: the shipped CRL CronJob's
/// `--prune-expired=720h` (the leaves' cert-manager `duration`).
pub const DEFAULT_CRL_PRUNE_AGE: Duration = Duration::from_secs(720 * 3600);

/// A revision's CRLs judged against what is in force.
#[derive(Debug)]
pub struct Classified {
    pub set: CrlSet,
    /// What becomes admissible again (empty almost always).
    pub dropped: Vec<Dropped>,
}

/// Classifies `revision`'s CRLs against the known issuers at `now` with
/// no CRL in force (a first load: nothing can be un-revoked).
pub(crate) fn classify(
    revision: &[Arc<Crl>],
    known: &Known,
    now: SystemTime,
    provider: &CryptoProvider,
) -> Result<Classified, CredError> {
    classify_over(
        revision,
        known,
        now,
        &CrlSet::empty(),
        DEFAULT_CRL_PRUNE_AGE,
        provider,
    )
}

/// Classifies `revision`'s CRLs against the known issuers at `now`, keeps
/// what must stay in force from `previous`, and reports un-revocations;
/// serials dropped at a higher CRL number count as pruned only when
/// revoked more than `prune_age` ago.
pub(crate) fn classify_over(
    revision: &[Arc<Crl>],
    known: &Known,
    now: SystemTime,
    previous: &CrlSet,
    prune_age: Duration,
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
    let pruning = Pruning {
        now: time_to_epoch(now),
        age: prune_age,
    };
    let dropped = dropped(previous, &entries, known, pruning, provider);
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

/// When serials count as pruned: revoked `age` before the moment judged
/// from (epoch seconds `now`, or a successor's later thisUpdate).
#[derive(Debug, Clone, Copy)]
struct Pruning {
    now: i64,
    age: Duration,
}

/// The un-revocations `entries` makes, compared with the verified CRLs in
/// force whose signer is still trusted; serials revoked longer than the
/// prune age ago that a higher CRL number omits are reported as pruned.
fn dropped(
    previous: &CrlSet,
    entries: &[Entry],
    known: &Known,
    pruning: Pruning,
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
        let Some((serials, removed)) = drop.filter(|(s, removed)| *removed || !s.is_empty()) else {
            continue;
        };
        let higher = successor.is_some_and(|e| higher_number(&e.crl, &old.crl));
        let cutoff = prune_cutoff(pruning, successor.map(|e| e.crl.info.this_update));
        out.extend(reports(&old.crl, serials, removed, higher, cutoff));
    }
    out
}

/// What dropping `serials` from `old` reports: the un-revoked ones and the
/// pruned ones apart (a CRL listing nothing removed: pruned, no serial).
fn reports(
    old: &Crl,
    serials: Vec<Vec<u8>>,
    removed: bool,
    higher: bool,
    cutoff: i64,
) -> Vec<Dropped> {
    let report = |serials: Vec<Vec<u8>>, pruned: bool| Dropped {
        issuer: old.info.issuer.clone(),
        serials,
        removed,
        higher,
        pruned,
    };
    let listed_nothing = removed && old.serials.is_empty();
    let (pruned, unrevoked) = split_pruned(old, serials, higher, cutoff);
    let mut out = Vec::new();
    if !unrevoked.is_empty() {
        out.push(report(unrevoked, false));
    }
    if !pruned.is_empty() || listed_nothing {
        out.push(report(pruned, true));
    }
    out
}

/// The revocation time before which an entry's certificate has expired,
/// in epoch seconds: the prune age before the later of now and the
/// successor's thisUpdate (`certs revoke --prune-expired` judges from the
/// moment it signs, its thisUpdate: a signer's clock ahead of ours, by at
/// most the clock-skew tolerance since a CRL dated later is held pending,
/// must not turn its pruning into an un-revocation). Saturating: a prune
/// age out of range prunes nothing.
fn prune_cutoff(p: Pruning, successor_this_update: Option<i64>) -> i64 {
    let age = i64::try_from(p.age.as_secs()).unwrap_or(i64::MAX);
    let from = successor_this_update.map_or(p.now, |t| t.max(p.now));
    from.saturating_sub(age)
}

/// Splits the serials a revision drops from `old` into (pruned,
/// un-revoked): pruned only when the successor has a higher CRL number
/// (`higher`: the issuer re-signed it without them) and `old` dates the
/// entry's revocation before `cutoff` (its certificate has expired, as
/// `certs revoke --prune-expired` judges). Everything else is an
/// un-revocation.
fn split_pruned(
    old: &Crl,
    serials: Vec<Vec<u8>>,
    higher: bool,
    cutoff: i64,
) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    if !higher {
        return (Vec::new(), serials);
    }
    let latest = latest_revocations(old.revoked_entries());
    serials
        .into_iter()
        .partition(|s| latest.get(s.as_slice()).is_some_and(|at| *at < cutoff))
}

/// Each serial's latest revocation time among `entries` (a serial listed
/// twice counts by its later date, so an old duplicate cannot make a recent
/// revocation look expired). A map: a prune of tens of thousands of
/// entries stays O(n log n).
fn latest_revocations(entries: Vec<(Vec<u8>, i64)>) -> std::collections::BTreeMap<Vec<u8>, i64> {
    let mut latest = std::collections::BTreeMap::new();
    for (serial, at) in entries {
        latest
            .entry(serial)
            .and_modify(|t: &mut i64| *t = (*t).max(at))
            .or_insert(at);
    }
    latest
}

/// The serials `old` lists and `new` does not.
/// (once each: a CRL may list a serial twice).
fn missing(old: &Crl, new: &Crl) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = old
        .serials
        .iter()
        .filter(|s| new.serials.binary_search(s).is_err())
        .cloned()
        .collect();
    out.dedup();
    out
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
        revoking(ca, number, this_update, &[])
    }

    /// CRL `number` of `ca` listing `revoked` (serial, revocation time).
    fn revoking(
        ca: &DevCa,
        number: u64,
        this_update: SystemTime,
        revoked: &[(u8, SystemTime)],
    ) -> Vec<Arc<Crl>> {
        let mut spec = CrlSpec::new(number, Vec::new(), 7);
        spec.this_update = this_update;
        spec.kept = revoked.iter().map(|(s, at)| (vec![*s], *at)).collect();
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
            let c = classify(&crls(&a, 1, t), &k, now, &p).unwrap();
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
        let in_force = classify(&crls(&a, 5, now), &k, now, &p).unwrap().set;
        let next = |ca: &DevCa, n| {
            classify_over(
                &crls(ca, n, now),
                &k,
                now,
                &in_force,
                DEFAULT_CRL_PRUNE_AGE,
                &p,
            )
        };
        assert!(matches!(next(&a, 4), Err(CredError::CrlOlder { .. })));
        assert!(next(&a, 5).is_ok());
        assert!(next(&b, 1).is_ok(), "a same-name CA's CRL is not compared");
    }

    const DAY: Duration = Duration::from_secs(86_400);

    /// What a revision of `ca`'s CRL at `number` listing `next` drops from
    /// CRL 5 listing `first`, with a 30-day prune age: (pruned, un-revoked)
    /// serials and how many reports.
    fn drops(
        first: &[(u8, SystemTime)],
        number: u64,
        next: Option<&[(u8, SystemTime)]>,
        now: SystemTime,
    ) -> (Vec<Vec<u8>>, Vec<Vec<u8>>, usize) {
        drops_dated(first, number, next, now, now)
    }

    /// [`drops`] with the revision's CRL dated `next_at`.
    fn drops_dated(
        first: &[(u8, SystemTime)],
        number: u64,
        next: Option<&[(u8, SystemTime)]>,
        now: SystemTime,
        next_at: SystemTime,
    ) -> (Vec<Vec<u8>>, Vec<Vec<u8>>, usize) {
        let a = DevCa::new("A", 1).unwrap();
        let k = known(&[&a]);
        let p = crate::tls::provider::crypto_provider();
        let age = 30 * DAY;
        let in_force = classify(&revoking(&a, 5, now - DAY, first), &k, now, &p)
            .unwrap()
            .set;
        let revision = next.map_or_else(Vec::new, |n| revoking(&a, number, next_at, n));
        let c = classify_over(&revision, &k, now, &in_force, age, &p).unwrap();
        let of = |pruned: bool| -> Vec<Vec<u8>> {
            c.dropped
                .iter()
                .filter(|d| d.pruned == pruned)
                .flat_map(|d| d.serials.clone())
                .collect()
        };
        (of(true), of(false), c.dropped.len())
    }

    /// A higher CRL number that omits a serial revoked within the prune
    /// age un-revokes it: the issuer's key may re-sign, but only expired
    /// certificates may leave quietly.
    #[test]
    fn a_recent_serial_a_higher_number_omits_is_unrevoked() {
        let now = SystemTime::now();
        let (pruned, unrevoked, n) = drops(&[(7, now - 2 * DAY)], 6, Some(&[]), now);
        assert_eq!((pruned, unrevoked, n), (vec![], vec![vec![7]], 1));
    }

    /// A serial the CRL in force lists twice, once revoked long ago and
    /// once recently, is judged by its recent revocation: omitting it
    /// un-revokes.
    #[test]
    fn a_serial_listed_twice_is_pruned_only_by_its_later_date() {
        let now = SystemTime::now();
        let first = [(7, now - 40 * DAY), (7, now - 2 * DAY)];
        let (pruned, unrevoked, n) = drops(&first, 6, Some(&[]), now);
        assert_eq!((pruned, unrevoked, n), (vec![], vec![vec![7]], 1));
    }

    /// One revoked longer ago than the prune age is pruned.
    #[test]
    fn an_old_serial_a_higher_number_omits_is_pruned() {
        let now = SystemTime::now();
        let (pruned, unrevoked, n) = drops(&[(7, now - 31 * DAY)], 6, Some(&[]), now);
        assert_eq!((pruned, unrevoked, n), (vec![vec![7]], vec![], 1));
    }

    /// Mixed drops split: the old serial pruned, the recent one un-revoked,
    /// the serial still listed neither.
    #[test]
    fn mixed_drops_split_into_pruned_and_unrevoked() {
        let now = SystemTime::now();
        let first = [(1, now - 40 * DAY), (2, now - DAY), (3, now - 50 * DAY)];
        let (pruned, unrevoked, n) = drops(&first, 6, Some(&first[2..]), now);
        assert_eq!((pruned, unrevoked, n), (vec![vec![1]], vec![vec![2]], 2));
    }

    /// The prune age boundary: revoked exactly the prune age ago is not yet
    /// pruned (one second more is).
    #[test]
    fn pruning_starts_past_the_prune_age() {
        let now = crate::identity::epoch_to_time(crate::identity::time_to_epoch(SystemTime::now()));
        let at = |t| drops(&[(7, t)], 6, Some(&[]), now).0.len();
        assert_eq!(at(now - 30 * DAY), 0);
        assert_eq!(at(now - 30 * DAY - Duration::from_secs(1)), 1);
    }

    /// Without a higher number, or with the CRL removed, even an old serial
    /// is un-revoked; a removed CRL listing nothing is pruned.
    #[test]
    fn only_a_higher_number_prunes() {
        let now = SystemTime::now();
        let old = [(7, now - 90 * DAY)];
        assert_eq!(drops(&old, 5, Some(&[]), now).1, vec![vec![7]]);
        assert_eq!(drops(&old, 5, None, now).1, vec![vec![7]]);
        assert_eq!(drops(&[], 5, None, now), (vec![], vec![], 1));
    }

    /// A successor dated ahead of our clock (within the skew) is judged
    /// from its thisUpdate, as `certs revoke` pruned it; one dated earlier
    /// from now.
    #[test]
    fn pruning_is_judged_from_the_later_of_now_and_the_successors_date() {
        let now = crate::identity::epoch_to_time(crate::identity::time_to_epoch(SystemTime::now()));
        let ahead = now + Duration::from_secs(60);
        let entry = [(7, now - 30 * DAY + Duration::from_secs(30))];
        assert_eq!(
            drops_dated(&entry, 6, Some(&[]), now, ahead).0,
            vec![vec![7]]
        );
        assert_eq!(drops(&entry, 6, Some(&[]), now).0, Vec::<Vec<u8>>::new());
        let behind = now - Duration::from_secs(3600);
        let old = [(7, now - 30 * DAY - Duration::from_secs(1))];
        assert_eq!(
            drops_dated(&old, 6, Some(&[]), now, behind).0,
            vec![vec![7]]
        );
    }

    #[test]
    fn the_cutoff_saturates() {
        let p = |age| Pruning {
            now: 1_000_000,
            age,
        };
        assert!(prune_cutoff(p(Duration::MAX), None) < -(1 << 62));
        assert_eq!(prune_cutoff(p(DAY), None), 1_000_000 - 86_400);
        assert_eq!(prune_cutoff(p(DAY), Some(1_000_060)), 1_000_060 - 86_400);
        assert_eq!(prune_cutoff(p(DAY), Some(999_000)), 1_000_000 - 86_400);
    }

    /// A serial listed twice counts by its later revocation: an old
    /// duplicate cannot make a recent revocation look expired.
    #[test]
    fn a_serial_listed_twice_counts_by_its_later_date() {
        let latest = latest_revocations(vec![
            (vec![1], 100),
            (vec![2], 50),
            (vec![1], 10),
            (vec![1], 300),
        ]);
        assert_eq!(latest.get(&[1u8][..]), Some(&300));
        assert_eq!(latest.get(&[2u8][..]), Some(&50));
        assert_eq!(latest.len(), 2);
    }
}

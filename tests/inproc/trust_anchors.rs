//! The effective trust, judged in process at exact instants
//! (`credentials::Trust`): an anchor dropped from `ca.crt` is kept exactly
//! until its grace ends and a later bundle never extends that grace; a
//! retirement happens at its moment, not a second early or late; the CRLs
//! in force are applied to client and server chains with the configured
//! scope. Each test names the cargo-mutants mutants of
//! `src/credentials/trust.rs` it kills.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::*;
use mtls_sidecar::credentials::{Anchor, CrlScope, CrlSet, RawFile, Trust, Usage};
use mtls_sidecar::identity::CertInfo;
use mtls_sidecar::pki::{serial_of, CrlSpec, DevCa, LeafSpec, Role};
use rustls::CertificateError;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, UnixTime};

const GRACE: Duration = Duration::from_secs(60);

fn ca(name: &str, days: u32) -> DevCa {
    DevCa::new(name, days).expect("mint CA")
}

fn der(pem: &str) -> CertificateDer<'static> {
    CertificateDer::from_pem_slice(pem.as_bytes()).expect("PEM certificate")
}

fn anchor(ca: &DevCa) -> (CertificateDer<'static>, CertInfo) {
    let der = der(&ca.cert_pem);
    let info = CertInfo::parse(&der).expect("CA certificate");
    (der, info)
}

fn build(anchors: Vec<Anchor>, crls: CrlSet, scope: CrlScope) -> Trust {
    Trust::build(anchors, Arc::new(crls), scope, &provider()).expect("trust")
}

fn plain(anchors: Vec<Anchor>) -> Trust {
    build(anchors, CrlSet::empty(), CrlScope::Leaf)
}

/// Each anchor's subject and retirement, in order.
fn summary(anchors: &[Anchor]) -> Vec<(String, Option<SystemTime>)> {
    anchors
        .iter()
        .map(|a| (a.info.subject.clone(), a.retire_at))
        .collect()
}

fn subject(ca: &DevCa) -> String {
    anchor(ca).1.subject
}

fn crls(issuer: &DevCa, revoked: Vec<Vec<u8>>) -> CrlSet {
    let crl = issuer.crl(&CrlSpec::new(1, revoked, 7)).expect("sign CRL");
    let file = RawFile {
        path: "ca.crl".into(),
        bytes: crl.pem.into_bytes(),
    };
    CrlSet::parse(&file, &[anchor(issuer)], &provider()).expect("CRL")
}

/// Kills in `Trust::merge`: every `replace merge -> (Vec<Anchor>, bool)`,
/// `replace == with !=`, `replace + with -`, `replace > with ==` / `<` /
/// `>=`, and `delete field retire_at`. In `Trust::expire`: `replace expire
/// with None` / `Some(vec![])` / `Some(vec![Default::default()])`, `delete
/// !`, `replace <= with >`, `replace > with ==` / `<` / `>=`. In
/// `Trust::next_retirement`: `with None` / `Some(Default::default())`. And
/// `replace Anchor::bundle -> Vec<Anchor> with vec![]`.
#[test]
fn a_dropped_anchor_is_kept_exactly_until_its_grace_ends() {
    let (a, b, c) = (ca("A", 30), ca("B", 30), ca("C", 30));
    let t0 = SystemTime::now();
    let all = plain(Anchor::bundle(&[anchor(&a), anchor(&b), anchor(&c)]));
    assert_eq!(
        summary(&all.anchors),
        vec![
            (subject(&a), None),
            (subject(&b), None),
            (subject(&c), None)
        ]
    );
    assert_eq!(all.next_retirement(), None);
    assert!(all.expire(t0 + 365 * GRACE).is_none(), "nothing retires");

    // The same bundle again: nothing retires, trust did not shrink.
    let (same, shrank) = all.merge(&[anchor(&a), anchor(&b), anchor(&c)], GRACE, t0);
    assert!(!shrank);
    assert_eq!(summary(&same), summary(&all.anchors));

    // A dropped at t0: kept until t0 + grace.
    let (next, shrank) = all.merge(&[anchor(&b), anchor(&c)], GRACE, t0);
    assert!(!shrank);
    let a_ends = t0 + GRACE;
    assert_eq!(
        summary(&next),
        vec![
            (subject(&b), None),
            (subject(&c), None),
            (subject(&a), Some(a_ends))
        ]
    );
    let graced = plain(next);

    // C dropped 30 s later: its own grace; A's grace is not extended.
    let t1 = t0 + Duration::from_secs(30);
    let (next, shrank) = graced.merge(&[anchor(&b)], GRACE, t1);
    assert!(!shrank);
    let c_ends = t1 + GRACE;
    assert_eq!(
        summary(&next),
        vec![
            (subject(&b), None),
            (subject(&c), Some(c_ends)),
            (subject(&a), Some(a_ends))
        ]
    );
    let both_graced = plain(next);
    assert_eq!(both_graced.next_retirement(), Some(a_ends));

    // A retires at its moment, not a second earlier; C stays.
    assert!(both_graced
        .expire(a_ends - Duration::from_secs(1))
        .is_none());
    let left = both_graced
        .expire(a_ends)
        .expect("A retires at the end of its grace");
    assert_eq!(
        summary(&left),
        vec![(subject(&b), None), (subject(&c), Some(c_ends))]
    );
    let after_a = both_graced
        .expire(a_ends + Duration::from_secs(1))
        .expect("A is due");
    assert_eq!(summary(&after_a), summary(&left));

    // A bundle read at the very end of A's grace drops it: trust shrank.
    let (next, shrank) = both_graced.merge(&[anchor(&b)], GRACE, a_ends);
    assert!(shrank);
    assert_eq!(
        summary(&next),
        vec![(subject(&b), None), (subject(&c), Some(c_ends))]
    );

    // Without grace a dropped anchor goes at once.
    let (next, shrank) = all.merge(&[anchor(&b), anchor(&c)], Duration::ZERO, t0);
    assert!(shrank);
    assert_eq!(
        summary(&next),
        vec![(subject(&b), None), (subject(&c), None)]
    );
}

/// Kills `replace Trust::earliest_not_after -> Option<i64> with None` /
/// `Some(0)` / `Some(1)` / `Some(-1)`: the trust expiry gauge reports the
/// first anchor to expire, wherever it is in the bundle.
#[test]
fn the_earliest_anchor_expiry_is_the_first_to_expire() {
    let (long, short) = (ca("long", 30), ca("short", 10));
    let trust = plain(Anchor::bundle(&[anchor(&long), anchor(&short)]));
    assert_eq!(trust.earliest_not_after(), Some(anchor(&short).1.not_after));
}

/// Kills `replace Trust::crls_differ -> bool with true` / `false` and
/// `delete !`: only a changed CRL set counts as a new trust (which makes
/// every route re-verify its live connections).
#[test]
fn only_changed_crls_differ() {
    let a = ca("A", 30);
    let bundle = Anchor::bundle(&[anchor(&a)]);
    let crl = a.crl(&CrlSpec::new(1, vec![vec![7]], 7)).expect("sign CRL");
    let parse = || {
        let file = RawFile {
            path: "ca.crl".into(),
            bytes: crl.pem.clone().into_bytes(),
        };
        CrlSet::parse(&file, &[anchor(&a)], &provider()).expect("CRL")
    };
    let with = build(bundle.clone(), parse(), CrlScope::Leaf);
    let same = build(bundle.clone(), parse(), CrlScope::Leaf);
    let without = plain(bundle);
    assert!(!with.crls_differ(&same));
    assert!(with.crls_differ(&without));
    assert!(without.crls_differ(&with));
    assert!(!without.crls_differ(&plain(Anchor::bundle(&[anchor(&a)]))));
}

#[derive(Debug, Clone, Copy)]
enum Side {
    Client,
    Server,
}

/// How `trust` judges `leaf` (with `intermediates`) presented by a client
/// or by a server (both through `Trust::verify_peer`).
fn verdict(
    side: Side,
    trust: &Trust,
    leaf: &CertificateDer<'static>,
    intermediates: &[CertificateDer<'static>],
) -> Result<(), rustls::Error> {
    let now = UnixTime::now();
    match side {
        Side::Client => trust.verify_peer(leaf, intermediates, now, Usage::ClientAuth),
        Side::Server => trust.verify_peer(leaf, intermediates, now, Usage::ServerAuth),
    }
}

/// Kills `delete !` and `replace == with !=` in `Trust::build`, and
/// `replace Trust::verify_peer -> Result<(), rustls::Error> with
/// Ok(())`: a client's and a server's chain are judged against the anchors
/// and the CRLs, the intermediate's revocation only with the `chain` scope.
#[test]
fn chains_are_judged_against_the_anchors_and_the_crls_with_their_scope() {
    let root = ca("root", 30);
    let inter = root.intermediate("intermediate", 30).expect("intermediate");
    let foreign = ca("foreign", 30);
    let spec = || LeafSpec::dns(REPLICA, Role::Both, 1);
    let direct = root.issue(&spec()).expect("leaf");
    let revoked = root.issue(&spec()).expect("leaf");
    let below = inter.issue(&spec()).expect("leaf");
    let stranger = foreign.issue(&spec()).expect("leaf");
    let inter_der = der(&inter.cert_pem);
    let list = || {
        crls(
            &root,
            vec![
                serial_of(&revoked.cert_der).expect("serial"),
                serial_of(&inter_der).expect("serial"),
            ],
        )
    };
    let bundle = Anchor::bundle(&[anchor(&root)]);
    let leaf_scope = build(bundle.clone(), list(), CrlScope::Leaf);
    let chain_scope = leaf_scope
        .with_scope(CrlScope::Chain, &provider())
        .expect("trust");
    assert_eq!(chain_scope.scope, CrlScope::Chain);
    let no_crl = plain(bundle);
    let none: &[CertificateDer<'static>] = &[];
    let inters = std::slice::from_ref(&inter_der);
    let revoked_err = Err(rustls::Error::InvalidCertificate(CertificateError::Revoked));
    let unknown = Err(rustls::Error::InvalidCertificate(
        CertificateError::UnknownIssuer,
    ));
    for side in [Side::Client, Side::Server] {
        let judge = |t: &Trust, leaf: &CertificateDer<'static>, i: &[CertificateDer<'static>]| {
            verdict(side, t, leaf, i)
        };
        for t in [&leaf_scope, &chain_scope, &no_crl] {
            assert_eq!(judge(t, &direct.cert_der, none), Ok(()));
            assert_eq!(judge(t, &stranger.cert_der, none), unknown);
        }
        assert_eq!(judge(&leaf_scope, &revoked.cert_der, none), revoked_err);
        assert_eq!(judge(&chain_scope, &revoked.cert_der, none), revoked_err);
        assert_eq!(judge(&no_crl, &revoked.cert_der, none), Ok(()));
        // The intermediate is revoked: only the chain scope looks at it.
        assert_eq!(judge(&leaf_scope, &below.cert_der, inters), Ok(()));
        assert_eq!(judge(&chain_scope, &below.cert_der, inters), revoked_err);
        assert_eq!(judge(&no_crl, &below.cert_der, inters), Ok(()));
    }
}

/// Per-trust-domain root stores (Workload API federation): a federated
/// anchor vouches only in its own trust domain's store, ours only in the
/// local one, a domain without a bundle has no store; an anchor moved from
/// one domain's bundle to another's counts as dropped (graced), and a
/// federated anchor past its grace retires. Kills `Anchor::same_as`
/// comparing the certificate alone, `Trust::build` putting federated
/// anchors in the local store (or `federated_roots` returning nothing),
/// `roots_for` ignoring its domain, and `has_domain -> true`.
#[test]
fn each_trust_domain_has_its_own_root_store_and_its_own_grace() {
    let (ours, partner) = (ca("prod.test CA", 30), ca("partner.test CA", 30));
    let leaf = |ca: &DevCa| {
        ca.issue(&LeafSpec::dns("x.test", Role::Both, 1))
            .expect("leaf")
            .cert_der
    };
    let (our_leaf, partner_leaf) = (leaf(&ours), leaf(&partner));
    let mut anchors = Anchor::bundle(&[anchor(&ours)]);
    anchors.extend(Anchor::federated("Partner.Test", &[anchor(&partner)]));
    let trust = plain(anchors);
    let judge = |domain: Option<&str>, leaf: &CertificateDer<'static>| {
        trust.verify_peer_in(domain, leaf, &[], UnixTime::now(), Usage::ClientAuth)
    };
    let unknown = Err(rustls::Error::InvalidCertificate(
        CertificateError::UnknownIssuer,
    ));
    assert_eq!(judge(None, &our_leaf), Ok(()));
    assert_eq!(judge(Some("partner.test"), &partner_leaf), Ok(()));
    assert_eq!(
        judge(None, &partner_leaf),
        unknown,
        "federated CA vouched locally"
    );
    assert_eq!(
        judge(Some("partner.test"), &our_leaf),
        unknown,
        "our CA vouched for partner"
    );
    assert_eq!(judge(Some("stranger.test"), &our_leaf), unknown);
    assert!(trust.has_domain("partner.test"));
    assert!(!trust.has_domain("stranger.test"));
    let domains: Vec<(&str, usize)> = trust
        .federated_domains()
        .into_iter()
        .map(|(td, a)| (td, a.len()))
        .collect();
    assert_eq!(domains, vec![("partner.test", 1)]);

    // The partner's CA now in our own bundle and no longer federated:
    // dropped from partner.test (graced), not kept.
    let t0 = SystemTime::now();
    let moved = Anchor::bundle(&[anchor(&ours), anchor(&partner)]);
    let (next, shrank) = trust.merge_anchors(moved, GRACE, t0);
    assert!(!shrank);
    let graced: Vec<_> = next
        .iter()
        .filter(|a| a.domain.as_deref() == Some("partner.test"))
        .map(|a| a.retire_at)
        .collect();
    assert_eq!(graced, vec![Some(t0 + GRACE)]);
    // Without a grace, the federated bundle's removal shrinks the trust.
    let (next, shrank) = trust.merge_anchors(Anchor::bundle(&[anchor(&ours)]), Duration::ZERO, t0);
    assert!(
        shrank,
        "a removed federated bundle did not shrink the trust"
    );
    assert!(next.iter().all(|a| a.is_local()));
}

/// The retired history CRLs are recognised against (a CRL only a retired
/// anchor verifies is ignored, not refused), across several trust changes:
/// an anchor once retired stays in it through later changes, an anchor
/// back in the bundle leaves it, no anchor is in it twice, and past its
/// bound (16) the oldest leave first. Kills in `Trust::retired_after`:
/// `delete !` and `==` to `!=` in the filter, and in the loop adding the
/// dropped anchors `delete !` (both), `==` to `!=` and `&&` to `||`.
#[test]
fn the_retired_history_survives_later_changes_and_is_bounded() {
    let cas: Vec<DevCa> = (0..20).map(|i| ca(&format!("R{i}"), 30)).collect();
    let ders: Vec<CertificateDer<'static>> = cas.iter().map(|c| anchor(c).0).collect();
    let bundle = |idx: &[usize]| -> Vec<Anchor> {
        let list: Vec<_> = idx.iter().map(|&i| anchor(&cas[i])).collect();
        Anchor::bundle(&list)
    };
    let trust_of = |idx: &[usize], retired: &[CertificateDer<'static>]| {
        plain(bundle(idx)).with_issuers(Arc::from(Vec::new()), Arc::from(retired.to_vec()))
    };
    let names = |r: &[CertificateDer<'static>]| -> Vec<usize> {
        r.iter()
            .map(|d| ders.iter().position(|x| x == d).expect("a known CA"))
            .collect()
    };

    // A and B trusted; A dropped: A retires.
    let t0 = trust_of(&[0, 1], &[]);
    let r1 = t0.retired_after(&bundle(&[1]));
    assert_eq!(names(&r1), vec![0]);

    // A later change that does not bring A back keeps A in the history.
    let t1 = trust_of(&[1], &r1);
    let r2 = t1.retired_after(&bundle(&[1, 2]));
    assert_eq!(names(&r2), vec![0], "a retired anchor was forgotten");
    // Nothing changing keeps it too, and never lists it twice.
    assert_eq!(names(&t1.retired_after(&bundle(&[1]))), vec![0]);
    let both = trust_of(&[0, 1], &r1);
    assert_eq!(
        names(&both.retired_after(&bundle(&[1]))),
        vec![0],
        "an anchor both retired and dropped again is listed twice"
    );

    // A back in the bundle: it leaves the history; B dropped joins it.
    let r3 = t1.retired_after(&bundle(&[0, 2]));
    assert_eq!(names(&r3), vec![1]);

    // Bounded: 19 anchors dropped one by one keep the newest 16.
    let mut retired: Vec<CertificateDer<'static>> = Vec::new();
    for i in 0..19 {
        let t = trust_of(&[i, 19], &retired);
        retired = t.retired_after(&bundle(&[i + 1, 19])).to_vec();
        assert_eq!(retired.len(), (i + 1).min(16));
    }
    assert_eq!(names(&retired), (3..19).collect::<Vec<_>>());
}

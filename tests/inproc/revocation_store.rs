//! The CRL lifecycle rules of the credential store, driven in process with
//! an injected clock: CRLs follow trust (a CA leaving `ca.crt` keeps its
//! CRL enforced for its grace, then the CRL is ignored, never rejecting a
//! revision), a future-dated CRL is held pending while the previous one
//! stays in force, "older" is judged per key against verified CRLs in
//! force only, and un-revocations are applied but reported.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::*;
use mtls_sidecar::credentials::revocation::Kept;
use mtls_sidecar::credentials::{
    Applied, CredError, CredentialSource, CredentialStore, CrlNotice, Usage, CLOCK_SKEW,
};
use mtls_sidecar::pki::{serial_of, CrlSpec, DevCa, Issued, LeafSpec, Role};
use mtls_sidecar::tools::atomic_writer::AtomicDir;
use rustls::CertificateError;
use rustls_pki_types::UnixTime;

const GRACE: Duration = Duration::from_secs(600);

fn ca(name: &str) -> DevCa {
    DevCa::new(name, 30).expect("CA")
}

fn leaf(ca: &DevCa) -> Issued {
    ca.issue(&LeafSpec::dns(REPLICA, Role::Both, 1))
        .expect("leaf")
}

fn serial(l: &Issued) -> Vec<u8> {
    serial_of(&l.cert_der).expect("serial")
}

fn crl_at(ca: &DevCa, number: u64, revoked: &[&Issued], this_update: SystemTime) -> String {
    let mut spec = CrlSpec::new(number, revoked.iter().map(|l| serial(l)).collect(), 7);
    spec.this_update = this_update;
    spec.next_update = this_update + Duration::from_secs(7 * 86_400);
    ca.crl(&spec).expect("CRL").pem
}

fn crl(ca: &DevCa, number: u64, revoked: &[&Issued]) -> String {
    crl_at(
        ca,
        number,
        revoked,
        SystemTime::now() - Duration::from_secs(60),
    )
}

fn publish(dir: &AtomicDir, me: &Issued, ca_pem: &str, crl: Option<&str>) {
    let mut files: Vec<(&str, &[u8])> = vec![
        ("tls.crt", me.cert_pem.as_bytes()),
        ("tls.key", me.key_pem.as_bytes()),
        ("ca.crt", ca_pem.as_bytes()),
    ];
    if let Some(c) = crl {
        files.push(("ca.crl", c.as_bytes()));
    }
    dir.publish(&files).expect("publish");
}

fn load(path: &std::path::Path) -> Arc<CredentialStore> {
    CredentialStore::load(CredentialSource::Dir(path.to_path_buf()), provider(), GRACE)
        .expect("load")
}

/// How the trust in force judges a client presenting `l`.
fn verdict(store: &CredentialStore, l: &Issued) -> Result<(), rustls::Error> {
    store
        .current()
        .trust
        .verify_peer(&l.cert_der, &[], UnixTime::now(), Usage::ClientAuth)
}

const REVOKED: Result<(), rustls::Error> =
    Err(rustls::Error::InvalidCertificate(CertificateError::Revoked));

fn states(store: &CredentialStore) -> Vec<(String, &'static str, Option<Kept>)> {
    store
        .current()
        .trust
        .crls
        .entries()
        .iter()
        .map(|e| (e.crl.info.issuer.clone(), e.state.label(), e.kept))
        .collect()
}

/// What `check`, `/status` and `publish` say of each CRL in force.
fn details(store: &CredentialStore) -> Vec<String> {
    store
        .current()
        .trust
        .crls
        .entries()
        .iter()
        .map(|e| mtls_sidecar::credentials::revocation::describe_state(&e.state))
        .collect()
}

fn applied(outcome: Applied) {
    assert!(matches!(outcome, Applied::Applied { .. }), "{outcome:?}");
}

/// `ca.crt` loses A while A's CRL is still delivered: the revision applies
/// (before: rejected, "no CA in ca.crt has this name"), A's CRL keeps
/// refusing A's revoked peer for the whole grace, then is ignored (one
/// notice) once A retires.
#[test]
fn a_crl_follows_its_ca_through_the_grace() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (ca("A"), ca("B"));
    let (me, revoked, good) = (leaf(&b), leaf(&a), leaf(&a));
    let dir = AtomicDir::new(tmp.path()).unwrap();
    let crl_a = crl(&a, 1, &[&revoked]);
    publish(
        &dir,
        &me,
        &format!("{}{}", a.cert_pem, b.cert_pem),
        Some(&crl_a),
    );
    let store = load(tmp.path());
    assert_eq!(verdict(&store, &revoked), REVOKED);
    assert_eq!(details(&store), ["signed by CN=A in ca.crt"]);
    let t0 = SystemTime::now();
    publish(&dir, &me, &b.cert_pem, Some(&crl_a));
    applied(store.poll(t0));
    assert_eq!(
        verdict(&store, &revoked),
        REVOKED,
        "the grace re-admits no one"
    );
    assert_eq!(verdict(&store, &good), Ok(()));
    assert_eq!(states(&store), [("CN=A".into(), "verified", None)]);
    assert_eq!(details(&store), ["signed by CN=A (in its trust grace)"]);
    store.take_crl_notices();
    assert_eq!(
        store.poll(t0 + GRACE + Duration::from_secs(1)),
        Applied::TrustRetired
    );
    assert_eq!(states(&store), [("CN=A".into(), "ignored", None)]);
    assert_eq!(details(&store), ["ignored: CN=A is no longer trusted"]);
    assert!(matches!(
        store.take_crl_notices().as_slice(),
        [CrlNotice::Ignored { crl, .. }] if crl.issuer == "CN=A"
    ));
    assert_eq!(
        verdict(&store, &good),
        Err(rustls::Error::InvalidCertificate(
            CertificateError::UnknownIssuer
        ))
    );
    // A later renewal carrying the same CRL still applies, and the CRL
    // already ignored is not reported again (kills `==` to `!=` on the
    // DER in `notices::between`).
    publish(&dir, &leaf(&b), &b.cert_pem, Some(&crl_a));
    applied(store.poll(t0 + GRACE + Duration::from_secs(2)));
    assert_eq!(states(&store), [("CN=A".into(), "ignored", None)]);
    let again = store.take_crl_notices();
    assert!(again.is_empty(), "reported twice: {again:?}");
}

/// The same with a CA re-keyed under its own name: A leaves `ca.crt`, A'
/// (same name, another key) stays, and A's CRL is still delivered. Nothing
/// in the revision's own files verifies that CRL under a trusted name, but
/// the store knows A (graced, then retired): the revision applies, the CRL
/// is enforced through the grace, then ignored, and later renewals still
/// apply. A sidecar started on those files alone refuses the CRL (it
/// cannot tell it from one another key signed). Kills `Known::partial`
/// as a no-op (the revision's own view then refused the renewal).
#[test]
fn a_same_name_rekeyed_cas_crl_follows_it_through_the_grace() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, a2) = (ca("A"), ca("A"));
    let (me, revoked) = (leaf(&a2), leaf(&a));
    let dir = AtomicDir::new(tmp.path()).unwrap();
    let crl_a = crl(&a, 1, &[&revoked]);
    publish(
        &dir,
        &me,
        &format!("{}{}", a.cert_pem, a2.cert_pem),
        Some(&crl_a),
    );
    let store = load(tmp.path());
    assert_eq!(verdict(&store, &revoked), REVOKED);
    let t0 = SystemTime::now();
    publish(&dir, &me, &a2.cert_pem, Some(&crl_a));
    applied(store.poll(t0));
    assert_eq!(
        verdict(&store, &revoked),
        REVOKED,
        "the grace re-admits no one"
    );
    assert_eq!(details(&store), ["signed by CN=A (in its trust grace)"]);
    assert_eq!(
        store.poll(t0 + GRACE + Duration::from_secs(1)),
        Applied::TrustRetired
    );
    assert_eq!(states(&store), [("CN=A".into(), "ignored", None)]);
    publish(&dir, &leaf(&a2), &a2.cert_pem, Some(&crl_a));
    applied(store.poll(t0 + GRACE + Duration::from_secs(2)));
    assert_eq!(states(&store), [("CN=A".into(), "ignored", None)]);
    let fresh = CredentialStore::load(
        CredentialSource::Dir(tmp.path().to_path_buf()),
        provider(),
        GRACE,
    );
    assert!(
        matches!(&fresh, Err(CredError::CrlSignature { issuer, .. }) if issuer == "CN=A"),
        "{:?}",
        fresh.as_ref().map(|_| ())
    );
}

/// A revision that drops A's CRL while A is graced keeps A's CRL in force
/// for the grace (no notice: nothing becomes admissible); removing a CRL
/// whose CA is still in `ca.crt` applies with one notice naming the serials.
#[test]
fn dropping_a_crl_never_silently_readmits() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (ca("A"), ca("B"));
    let (me, revoked_a, revoked_b) = (leaf(&b), leaf(&a), leaf(&b));
    let dir = AtomicDir::new(tmp.path()).unwrap();
    let both = format!("{}{}", crl(&a, 1, &[&revoked_a]), crl(&b, 1, &[&revoked_b]));
    publish(
        &dir,
        &me,
        &format!("{}{}", a.cert_pem, b.cert_pem),
        Some(&both),
    );
    let store = load(tmp.path());
    store.take_crl_notices();
    let t0 = SystemTime::now();
    // ca.crt = B, no ca.crl at all: A (graced) keeps its CRL; B's removal
    // is reported.
    publish(&dir, &me, &b.cert_pem, None);
    applied(store.poll(t0));
    assert_eq!(verdict(&store, &revoked_a), REVOKED);
    assert_eq!(verdict(&store, &revoked_b), Ok(()));
    assert_eq!(
        states(&store),
        [("CN=A".into(), "verified", Some(Kept::IssuerGraced))]
    );
    let notices = store.take_crl_notices();
    let [CrlNotice::Unrevoked(dropped)] = notices.as_slice() else {
        panic!("{notices:?}");
    };
    assert_eq!(dropped.len(), 1, "{dropped:?}");
    assert_eq!(
        (
            dropped[0].issuer.as_str(),
            dropped[0].removed,
            dropped[0].pruned
        ),
        ("CN=B", true, false)
    );
    assert_eq!(dropped[0].serials, [serial(&revoked_b)]);
    // Once A retires, its kept CRL goes with it.
    store.poll(t0 + GRACE + Duration::from_secs(1));
    assert!(states(&store).is_empty());
}

/// Listing fewer serials at a CRL number not higher than the one in force
/// applies with a notice naming what became admissible; at a higher number
/// too when they were revoked within the prune age, and the notice says
/// the issuer pruned them (counted apart, no alert) when revoked longer
/// ago; a lower number is refused as older.
#[test]
fn a_shrinking_crl_is_reported_and_an_older_one_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let a = ca("A");
    let (me, r1, r2) = (leaf(&a), leaf(&a), leaf(&a));
    let dir = AtomicDir::new(tmp.path()).unwrap();
    publish(&dir, &me, &a.cert_pem, Some(&crl(&a, 5, &[&r1, &r2])));
    let store = load(tmp.path());
    store.take_crl_notices();
    let now = SystemTime::now();
    publish(&dir, &me, &a.cert_pem, Some(&crl(&a, 5, &[&r1])));
    applied(store.poll(now));
    let notices = store.take_crl_notices();
    assert!(
        matches!(notices.as_slice(), [CrlNotice::Unrevoked(d)]
            if d.len() == 1 && !d[0].removed && !d[0].pruned && d[0].serials == [serial(&r2)]),
        "{notices:?}"
    );
    // r1 was revoked a minute ago (the CRL's thisUpdate): within the
    // default prune age, so a higher number without it un-revokes it.
    publish(&dir, &me, &a.cert_pem, Some(&crl(&a, 6, &[])));
    applied(store.poll(now));
    let notices = store.take_crl_notices();
    assert!(
        matches!(notices.as_slice(), [CrlNotice::Unrevoked(d)]
            if d.len() == 1 && !d[0].removed && d[0].higher && !d[0].pruned && d[0].serials == [serial(&r1)]),
        "{notices:?}"
    );
    publish(&dir, &me, &a.cert_pem, Some(&crl(&a, 7, &[&r1])));
    applied(store.poll(now));
    store.take_crl_notices();
    store.set_crl_prune_age(Duration::from_secs(1));
    publish(&dir, &me, &a.cert_pem, Some(&crl(&a, 8, &[])));
    applied(store.poll(now));
    let notices = store.take_crl_notices();
    assert!(
        matches!(notices.as_slice(), [CrlNotice::Unrevoked(d)]
            if d.len() == 1 && !d[0].removed && d[0].pruned && d[0].serials == [serial(&r1)]),
        "{notices:?}"
    );
    publish(&dir, &me, &a.cert_pem, Some(&crl(&a, 9, &[])));
    applied(store.poll(now));
    assert!(store.take_crl_notices().is_empty());
    publish(&dir, &me, &a.cert_pem, Some(&crl(&a, 4, &[&r1])));
    let outcome = store.poll(now);
    assert!(
        matches!(&outcome, Applied::Rejected { error: CredError::CrlOlder { issuer, .. }, .. } if issuer == "CN=A"),
        "{outcome:?}"
    );
}

/// An intermediate's CRL removed together with the `intermediates` file
/// that made it known: the intermediate is still trusted through its root
/// (its leaves still chain), so the serials its CRL revoked are reported
/// as admissible again, like any CRL removed. Kills `==` to `!=` in
/// `dropped`'s "an intermediate no longer listed" case (which counted it
/// untrusted and said nothing).
#[test]
fn an_intermediates_crl_removed_with_the_file_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let a = ca("A");
    let inter = a.intermediate("I", 30).expect("intermediate");
    let (me, revoked) = (leaf(&a), leaf(&inter));
    let dir = AtomicDir::new(tmp.path()).unwrap();
    let base: Vec<(&str, &[u8])> = vec![
        ("tls.crt", me.cert_pem.as_bytes()),
        ("tls.key", me.key_pem.as_bytes()),
        ("ca.crt", a.cert_pem.as_bytes()),
    ];
    let crl_i = crl(&inter, 1, &[&revoked]);
    let mut with = base.clone();
    with.push(("intermediates", inter.cert_pem.as_bytes()));
    with.push(("ca.crl", crl_i.as_bytes()));
    dir.publish(&with).expect("publish");
    let store = load(tmp.path());
    assert_eq!(states(&store), [("CN=I".into(), "verified", None)]);
    store.take_crl_notices();

    dir.publish(&base).expect("publish");
    applied(store.poll(SystemTime::now()));
    let notices = store.take_crl_notices();
    let [CrlNotice::Unrevoked(dropped)] = notices.as_slice() else {
        panic!("the intermediate's revocations went silently: {notices:?}");
    };
    assert_eq!(
        (dropped[0].issuer.as_str(), dropped[0].removed),
        ("CN=I", true)
    );
    assert_eq!(dropped[0].serials, [serial(&revoked)]);
}

/// How the trust in force judges a client presenting `l` with `via`'s
/// certificate as its chain.
fn verdict_via(store: &CredentialStore, l: &Issued, via: &DevCa) -> Result<(), rustls::Error> {
    use rustls_pki_types::pem::PemObject;
    let inter = rustls_pki_types::CertificateDer::from_pem_slice(via.cert_pem.as_bytes()).unwrap();
    store
        .current()
        .trust
        .verify_peer(&l.cert_der, &[inter], UnixTime::now(), Usage::ClientAuth)
}

/// An intermediate re-keyed under its own name: the `intermediates` file
/// moves from I to I' (same name, another key) while I's CRL is still
/// shipped. The store held I, so it knows that CRL's key: the renewal
/// applies (it used to be refused: no key of I's name in the revision
/// verifies that CRL) and I's CRL stays enforced, since I's certificate
/// still chains to the root and a peer that sends it is still judged by
/// it; later renewals apply too. A CRL under I's name that no key the store
/// ever held verifies is still refused, and an older CRL of I is refused
/// as older (no rollback).
#[test]
fn a_rekeyed_intermediates_crl_stays_enforced_across_renewals() {
    let tmp = tempfile::tempdir().unwrap();
    let a = ca("A");
    let (i, i2, stranger) = (
        a.intermediate("I", 30).expect("intermediate"),
        a.intermediate("I", 30).expect("intermediate"),
        a.intermediate("I", 30).expect("intermediate"),
    );
    let (me, revoked) = (leaf(&a), leaf(&i));
    let dir = AtomicDir::new(tmp.path()).unwrap();
    let files = |me: &Issued, inter: &DevCa, crl: &str| {
        let files: Vec<(&str, Vec<u8>)> = vec![
            ("tls.crt", me.cert_pem.clone().into_bytes()),
            ("tls.key", me.key_pem.clone().into_bytes()),
            ("ca.crt", a.cert_pem.clone().into_bytes()),
            ("intermediates", inter.cert_pem.clone().into_bytes()),
            ("ca.crl", crl.as_bytes().to_vec()),
        ];
        let borrowed: Vec<(&str, &[u8])> = files.iter().map(|(n, b)| (*n, b.as_slice())).collect();
        dir.publish(&borrowed).expect("publish");
    };
    let crl_i = crl(&i, 2, &[&revoked]);
    files(&me, &i, &crl_i);
    let store = load(tmp.path());
    assert_eq!(verdict_via(&store, &revoked, &i), REVOKED);
    let now = SystemTime::now();
    // `publish` judges the renewal as the store does.
    let staged = tempfile::tempdir().unwrap();
    for (name, bytes) in [
        ("tls.crt", &me.cert_pem),
        ("tls.key", &me.key_pem),
        ("ca.crt", &a.cert_pem),
        ("intermediates", &i2.cert_pem),
        ("ca.crl", &crl_i),
    ] {
        std::fs::write(staged.path().join(name), bytes).unwrap();
    }
    let judged = mtls_sidecar::tools::publish::verdict::judge(
        tmp.path(),
        staged.path(),
        now,
        Duration::from_secs(3600),
    )
    .expect("publish accepts the renewal");
    assert!(
        judged
            .lines
            .iter()
            .any(|l| l.starts_with("ca.crl: CRL from CN=I") && l.contains("verified")),
        "{judged:?}"
    );
    files(&me, &i2, &crl_i);
    applied(store.poll(now));
    assert_eq!(states(&store), [("CN=I".into(), "verified", None)]);
    assert_eq!(
        verdict_via(&store, &revoked, &i),
        REVOKED,
        "the re-key re-admits no one"
    );
    // From here on the renewed leaf: going back to `me`, issued a second
    // earlier under load, is refused as an older identity before its CRL
    // is looked at.
    let renewed = leaf(&a);
    files(&renewed, &i2, &crl_i);
    applied(store.poll(now));
    assert_eq!(verdict_via(&store, &revoked, &i), REVOKED);
    files(&renewed, &i2, &crl(&i, 1, &[]));
    assert!(
        matches!(
            store.poll(now),
            Applied::Rejected {
                error: CredError::CrlOlder { .. },
                ..
            }
        ),
        "an older CRL of the key held before"
    );
    files(&renewed, &i2, &crl(&stranger, 3, &[]));
    assert!(
        matches!(
            store.poll(now),
            Applied::Rejected {
                error: CredError::CrlSignature { .. },
                ..
            }
        ),
        "a CRL no key ever held verifies"
    );
}

/// CRLs without a CRL number (`openssl ca` with no `crlnumber` file) are
/// ordered by thisUpdate: an earlier one is refused as older, one of the
/// same thisUpdate (a serial added) or a later one applies. Kills `<` to
/// `==` / `>` / `<=` in `is_older`'s thisUpdate arm.
#[test]
fn crls_without_a_number_are_ordered_by_this_update() {
    if tools::skip_unless(&["openssl"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("A");
    let (me, r1, r2) = (
        pki.leaf(REPLICA, Role::Both),
        pki.leaf(CONTROLLER, Role::Client),
        pki.leaf(CONTROLLER, Role::Client),
    );
    let ca = common::openssl_ca::OpensslCa::new(tmp.path(), &pki, false);
    // openssl's YYYYMMDDHHMMSSZ, `secs_ago` seconds before `t0`.
    let t0 = SystemTime::now();
    let at = |secs_ago: u64| {
        humantime::format_rfc3339_seconds(t0 - Duration::from_secs(secs_ago))
            .to_string()
            .replace(['-', 'T', ':'], "")
    };
    let creds = tmp.path().join("creds");
    let dir = AtomicDir::new(&creds).unwrap();
    publish(
        &dir,
        &me,
        &pki.ca.cert_pem,
        Some(&ca.gencrl(Some(&at(7200)))),
    );
    let store = load(&creds);
    assert_eq!(verdict(&store, &r1), Ok(()));

    ca.revoke(&r1);
    publish(
        &dir,
        &me,
        &pki.ca.cert_pem,
        Some(&ca.gencrl(Some(&at(3 * 3600)))),
    );
    let outcome = store.poll(SystemTime::now());
    assert!(
        matches!(&outcome, Applied::Rejected { error: CredError::CrlOlder { issuer, .. }, .. } if issuer == "CN=A"),
        "an earlier thisUpdate: {outcome:?}"
    );
    assert_eq!(verdict(&store, &r1), Ok(()));

    publish(
        &dir,
        &me,
        &pki.ca.cert_pem,
        Some(&ca.gencrl(Some(&at(7200)))),
    );
    applied(store.poll(SystemTime::now()));
    assert_eq!(verdict(&store, &r1), REVOKED, "the same thisUpdate applies");

    ca.revoke(&r2);
    publish(
        &dir,
        &me,
        &pki.ca.cert_pem,
        Some(&ca.gencrl(Some(&at(3600)))),
    );
    applied(store.poll(SystemTime::now()));
    assert_eq!(verdict(&store, &r2), REVOKED, "a later thisUpdate applies");
}

/// A CRL dated beyond now + the skew tolerance does not reject the
/// revision: it is held pending (one notice), the CRL in force for its key
/// stays enforced, the poller is due when it comes due, and it is then
/// enforced. It is never the reference for "older": a correct CRL after a
/// far-future one applies (before: refused as older, forever).
#[test]
fn a_future_crl_is_held_pending_and_never_blocks_a_correct_one() {
    let tmp = tempfile::tempdir().unwrap();
    let a = ca("A");
    let (me, r1, r2) = (leaf(&a), leaf(&a), leaf(&a));
    let dir = AtomicDir::new(tmp.path()).unwrap();
    publish(&dir, &me, &a.cert_pem, Some(&crl(&a, 1, &[&r1])));
    let store = load(tmp.path());
    store.take_crl_notices();
    let t0 = SystemTime::now();
    let due = t0 + Duration::from_secs(3600);
    publish(
        &dir,
        &me,
        &a.cert_pem,
        Some(&crl_at(&a, 2, &[&r1, &r2], due)),
    );
    applied(store.poll(t0));
    assert_eq!(store.current().trust.crls.pending(), 1);
    assert_eq!(
        states(&store),
        [
            ("CN=A".into(), "pending", None),
            ("CN=A".into(), "verified", Some(Kept::NewerPending))
        ]
    );
    assert!(matches!(
        store.take_crl_notices().as_slice(),
        [CrlNotice::Pending { .. }]
    ));
    assert_eq!(verdict(&store, &r1), REVOKED);
    assert_eq!(verdict(&store, &r2), Ok(()));
    let wake = store.next_due().expect("due for the pending CRL");
    // thisUpdate has whole seconds.
    let exact = due - CLOCK_SKEW;
    assert!(
        wake <= exact && wake + Duration::from_secs(1) > exact,
        "{wake:?}"
    );
    assert_eq!(
        store.poll(wake - Duration::from_secs(1)),
        Applied::Unchanged
    );
    assert_eq!(store.poll(wake), Applied::TrustRetired);
    assert_eq!(states(&store), [("CN=A".into(), "verified", None)]);
    assert_eq!(verdict(&store, &r2), REVOKED);

    // Far in the future with a high number: pending, never the reference.
    let years = t0 + Duration::from_secs(3 * 365 * 86_400);
    publish(&dir, &me, &a.cert_pem, Some(&crl_at(&a, 99, &[], years)));
    applied(store.poll(wake));
    publish(&dir, &me, &a.cert_pem, Some(&crl(&a, 3, &[&r1, &r2])));
    applied(store.poll(wake));
    assert_eq!(states(&store), [("CN=A".into(), "verified", None)]);
    assert_eq!(store.current().trust.crls.pending(), 0);

    // A pending CRL listing fewer serials at a number not higher is no
    // un-revocation while it is held: one Pending notice, no Unrevoked
    // one (kills the `Pending` match guard in `dropped`), and the CRL in
    // force still refuses.
    store.take_crl_notices();
    publish(&dir, &me, &a.cert_pem, Some(&crl_at(&a, 3, &[], years)));
    applied(store.poll(wake));
    let notices = store.take_crl_notices();
    assert!(
        matches!(notices.as_slice(), [CrlNotice::Pending { .. }]),
        "{notices:?}"
    );
    assert_eq!(verdict(&store, &r1), REVOKED);
}

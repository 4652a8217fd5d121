//! What the credential store tells the rest of the sidecar, driven in
//! process, each poll given the time it judges at: `trust_shrunk` (routes re-verify their
//! live connections) fires when an anchor goes or the CRLs change and not on
//! a plain rotation; a revision that keeps the leaf and grows the bundle is
//! applied; a stale CRL is reported once; the CRL scope is set once for
//! every later trust; a refusal names the certificate file. Each test names
//! the cargo-mutants mutants of `src/credentials/store/` it kills.

use crate::common;

use std::time::{Duration, SystemTime};

use common::*;
use mtls_sidecar::credentials::{Applied, CredError, CredentialSource, CredentialStore, CrlScope};
use mtls_sidecar::identity::{epoch_to_time, CertInfo};
use mtls_sidecar::pki::{CrlSpec, Issued, LeafSpec, Role};
use mtls_sidecar::tools::atomic_writer::AtomicDir;

const DAY: Duration = Duration::from_secs(86_400);

/// Publishes a kubelet-style revision, with a CRL when one is given.
fn publish(dir: &AtomicDir, leaf: &Issued, ca: &str, crl: Option<&str>) {
    let mut files = vec![
        ("tls.crt", leaf.cert_pem.as_bytes()),
        ("tls.key", leaf.key_pem.as_bytes()),
        ("ca.crt", ca.as_bytes()),
    ];
    if let Some(crl) = crl {
        files.push(("ca.crl", crl.as_bytes()));
    }
    dir.publish(&files).unwrap();
}

fn load(dir: &std::path::Path) -> std::sync::Arc<CredentialStore> {
    CredentialStore::load(
        CredentialSource::Dir(dir.to_path_buf()),
        provider(),
        Duration::ZERO,
    )
    .expect("load")
}

/// Kills `replace < with <=` / `==` in `CredentialStore::judge` (no going
/// back): a revision that keeps the leaf and only adds a CA to the bundle
/// (the first step of a CA renewal) is not older, so it is applied; and a
/// plain rotation or a grown bundle does not make routes re-verify.
#[test]
fn the_same_leaf_with_a_grown_bundle_is_applied_without_a_trust_signal() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (Pki::new("CA A"), Pki::new("CA B"));
    let dir = AtomicDir::new(tmp.path()).unwrap();
    let leaf = a.leaf(REPLICA, Role::Server);
    publish(&dir, &leaf, &a.ca.cert_pem, None);
    let store = load(tmp.path());
    let mut generation = store.generation();
    let shrunk = store.trust_shrunk();
    let grown = format!("{}{}", a.ca.cert_pem, b.ca.cert_pem);
    publish(&dir, &leaf, &grown, None);
    match store.poll(SystemTime::now()) {
        Applied::Applied {
            trust_shrank: false,
            ..
        } => {}
        other => panic!("expected the grown bundle applied, got {other:?}"),
    }
    assert_eq!(store.current().trust.anchors.len(), 2);
    assert!(generation.has_changed().unwrap());
    generation.mark_unchanged();
    // A new leaf from the same CA: applied, trust unchanged.
    publish(&dir, &a.leaf(REPLICA, Role::Server), &grown, None);
    assert!(matches!(
        store.poll(SystemTime::now()),
        Applied::Applied { .. }
    ));
    assert!(generation.has_changed().unwrap());
    assert!(!shrunk.has_changed().unwrap(), "trust only grew");
}

/// Kills `replace || with &&` in `CredentialStore::judge`: a revision whose
/// only change to trust is a new CRL (no anchor goes) makes routes re-verify
/// their live connections. And `replace CredentialStore::newly_stale_crls
/// -> Vec<CrlInfo> with vec![]` / `delete !`: a CRL past its nextUpdate is
/// reported once, not on every poll.
#[test]
fn a_new_crl_signals_routes_and_a_stale_one_is_reported_once() {
    let tmp = tempfile::tempdir().unwrap();
    let a = Pki::new("CA A");
    let dir = AtomicDir::new(tmp.path()).unwrap();
    let first = a.ca.crl(&CrlSpec::new(1, Vec::new(), 1)).unwrap();
    let leaf = a.leaf(REPLICA, Role::Server);
    publish(&dir, &leaf, &a.ca.cert_pem, Some(&first.pem));
    let store = load(tmp.path());
    let shrunk = store.trust_shrunk();
    let now = SystemTime::now();
    assert!(store.newly_stale_crls(now).is_empty());
    let next_update = store.current().trust.crls.entries()[0]
        .crl
        .info
        .next_update
        .expect("nextUpdate");
    let stale_at = epoch_to_time(next_update);
    let stale = store.newly_stale_crls(stale_at);
    assert_eq!(stale.len(), 1, "{stale:?}");
    assert_eq!(stale[0], store.current().trust.crls.entries()[0].crl.info);
    assert!(store.newly_stale_crls(stale_at + DAY).is_empty(), "once");

    // The same leaf and CA with a newer CRL revoking someone else.
    let other = a.leaf(REPLICA, Role::Server);
    let serial = mtls_sidecar::pki::serial_of(&other.cert_der).unwrap();
    let second = a.ca.crl(&CrlSpec::new(2, vec![serial], 7)).unwrap();
    publish(&dir, &leaf, &a.ca.cert_pem, Some(&second.pem));
    assert!(matches!(
        store.poll(SystemTime::now()),
        Applied::Applied {
            trust_shrank: false,
            ..
        }
    ));
    assert!(shrunk.has_changed().unwrap(), "a new CRL is a new trust");
}

/// Kills `replace CredentialStore::set_crl_scope -> Result<(), CredError>
/// with Ok(())` and `replace == with !=` in it: the scope set at start-up
/// holds for the trust in force and every later one, and setting the scope
/// already in force swaps nothing.
#[test]
fn the_crl_scope_holds_for_every_later_trust() {
    let tmp = tempfile::tempdir().unwrap();
    let a = Pki::new("CA A");
    let dir = AtomicDir::new(tmp.path()).unwrap();
    publish(&dir, &a.leaf(REPLICA, Role::Server), &a.ca.cert_pem, None);
    let store = load(tmp.path());
    let generation = store.generation();
    store.set_crl_scope(CrlScope::Leaf).unwrap();
    assert!(!generation.has_changed().unwrap(), "nothing to change");
    assert_eq!(store.current().trust.scope, CrlScope::Leaf);
    store.set_crl_scope(CrlScope::Chain).unwrap();
    assert_eq!(store.current().trust.scope, CrlScope::Chain);
    publish(&dir, &a.leaf(REPLICA, Role::Server), &a.ca.cert_pem, None);
    assert!(matches!(
        store.poll(SystemTime::now()),
        Applied::Applied { .. }
    ));
    assert_eq!(store.current().trust.scope, CrlScope::Chain);
}

/// Kills `replace CredentialStore::cert_path -> std::path::PathBuf with
/// Default::default()`: refusing to go back names the certificate file.
#[test]
fn an_older_identity_is_refused_naming_the_certificate_file() {
    let tmp = tempfile::tempdir().unwrap();
    let a = Pki::new("CA A");
    let dir = AtomicDir::new(tmp.path()).unwrap();
    publish(&dir, &a.leaf(REPLICA, Role::Server), &a.ca.cert_pem, None);
    let store = load(tmp.path());
    let now = SystemTime::now();
    let old = a.issue(&LeafSpec::dns(REPLICA, Role::Server, 1).valid(now - DAY, now + DAY));
    publish(&dir, &old, &a.ca.cert_pem, None);
    match store.poll(now) {
        Applied::Rejected {
            error: CredError::Older {
                path, not_before, ..
            },
            ..
        } => {
            assert_eq!(path, tmp.path().join("tls.crt"));
            assert_eq!(
                not_before,
                CertInfo::parse(&old.cert_der).unwrap().not_before
            );
        }
        other => panic!("expected an Older rejection, got {other:?}"),
    }
}

/// Kills `replace match guard self.settles() with true in
/// CredentialStore::next_due`: once a plain directory becomes a kubelet
/// mount (a `..data` link appears) its content is published atomically, so
/// the poller no longer waits for a settle window and judges at once.
#[test]
fn a_directory_that_becomes_a_kubelet_mount_stops_settling() {
    let tmp = tempfile::tempdir().unwrap();
    let a = Pki::new("CA A");
    let dir = a.dir(tmp.path(), "plain", &a.leaf(REPLICA, Role::Server));
    let store = load(&dir);
    let next = a.leaf(REPLICA, Role::Server);
    std::fs::write(dir.join("tls.crt"), &next.cert_pem).unwrap();
    std::fs::write(dir.join("tls.key"), &next.key_pem).unwrap();
    let t0 = SystemTime::now();
    let until = match store.poll(t0) {
        Applied::Settling { until, .. } => until,
        other => panic!("expected a plain directory to settle, got {other:?}"),
    };
    assert_eq!(store.next_due(), Some(until));
    std::os::unix::fs::symlink(".", dir.join("..data")).unwrap();
    assert_eq!(store.next_due(), None, "nothing to wait for any more");
    assert!(matches!(
        store.poll(t0 + Duration::from_millis(1)),
        Applied::Applied { .. }
    ));
    assert_eq!(
        store.current().leaf.serial,
        CertInfo::parse(&next.cert_der).unwrap().serial
    );
}

/// Kills `replace match guard error.is_time_dependent() with true in
/// CredentialStore::judge`: a revision refused for a reason time cannot
/// change (its leaf does not chain to its own CA bundle) is judged once and
/// its verdict cached, while one refused for a reason time can change (it
/// expired; a clock that was ahead may be corrected) is judged again on
/// every poll. The mutant caches nothing: the same verdict, a chain
/// verification a poll.
#[test]
fn a_revision_refused_for_good_is_judged_once() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (Pki::new("CA A"), Pki::new("CA B"));
    let dir = AtomicDir::new(tmp.path()).unwrap();
    publish(&dir, &a.leaf(REPLICA, Role::Server), &a.ca.cert_pem, None);
    let store = load(tmp.path());
    let now = SystemTime::now();
    let polls = |from: u64| {
        (0..3u64)
            .map(|i| store.poll(now + Duration::from_secs(from + i)))
            .collect::<Vec<_>>()
    };

    // Control: an expired revision is re-judged on each of three polls.
    let expired = a.issue(&LeafSpec::dns(REPLICA, Role::Server, 1).valid(now - 2 * DAY, now - DAY));
    publish(&dir, &expired, &a.ca.cert_pem, None);
    let before = store.judgements();
    let outcomes = polls(0);
    assert!(
        matches!(
            outcomes[0],
            Applied::Rejected {
                error: CredError::Expired { .. },
                ..
            }
        ),
        "{outcomes:?}"
    );
    assert_eq!(store.judgements() - before, 3, "{outcomes:?}");

    // A leaf of CA A with only CA B's certificate as its bundle: refused
    // once, then never judged again.
    publish(&dir, &a.leaf(REPLICA, Role::Server), &b.ca.cert_pem, None);
    let before = store.judgements();
    let outcomes = polls(10);
    assert!(
        matches!(
            outcomes[0],
            Applied::Rejected {
                error: CredError::Chain { .. },
                ..
            }
        ),
        "{outcomes:?}"
    );
    assert!(
        outcomes[1..]
            .iter()
            .all(|o| matches!(o, Applied::Unchanged)),
        "{outcomes:?}"
    );
    assert_eq!(store.judgements() - before, 1, "{outcomes:?}");
}

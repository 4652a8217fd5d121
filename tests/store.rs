//! The credential store's rules, driven in process: all-or-nothing
//! revisions, no going back, one report per bad revision, and trust grace.

mod common;

use std::time::{Duration, SystemTime};

use common::*;
use mtls_sidecar::atomic_writer::AtomicDir;
use mtls_sidecar::credentials::{Applied, CredError, CredentialSource, CredentialStore};
use mtls_sidecar::pki::{Issued, LeafSpec, Role};

fn publish(dir: &AtomicDir, leaf: &Issued, ca: &str) {
    dir.publish(&[
        ("tls.crt", leaf.cert_pem.as_bytes()),
        ("tls.key", leaf.key_pem.as_bytes()),
        ("ca.crt", ca.as_bytes()),
    ])
    .unwrap();
}

fn load(dir: &std::path::Path, grace: Duration) -> std::sync::Arc<CredentialStore> {
    CredentialStore::load(CredentialSource::Dir(dir.to_path_buf()), provider(), grace)
        .expect("load")
}

#[test]
fn an_older_identity_is_never_applied() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("CA");
    let dir = AtomicDir::new(tmp.path()).unwrap();
    publish(&dir, &pki.leaf(REPLICA, Role::Server), &pki.ca.cert_pem);
    let store = load(tmp.path(), Duration::ZERO);
    let now = SystemTime::now();
    let old = pki.issue(&LeafSpec::dns(REPLICA, Role::Server, 30).valid(
        now - Duration::from_secs(86_400),
        now + Duration::from_secs(86_400),
    ));
    publish(&dir, &old, &pki.ca.cert_pem);
    match store.poll(SystemTime::now()) {
        Applied::Rejected {
            error: CredError::Older { .. },
            ..
        } => {}
        other => panic!("expected an Older rejection, got {other:?}"),
    }
    assert!(store
        .status()
        .last_rejected_error
        .unwrap()
        .contains("older than the one in force"));
}

#[test]
fn a_bad_kubelet_revision_is_rejected_at_once_and_reported_once() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("CA");
    let dir = AtomicDir::new(tmp.path()).unwrap();
    let good = pki.leaf(REPLICA, Role::Server);
    publish(&dir, &good, &pki.ca.cert_pem);
    let store = load(tmp.path(), Duration::ZERO);
    let revision = store.current().revision.clone();
    let other = pki.leaf(REPLICA, Role::Server);
    dir.publish(&[
        ("tls.crt", other.cert_pem.as_bytes()),
        ("tls.key", good.key_pem.as_bytes()),
        ("ca.crt", pki.ca.cert_pem.as_bytes()),
    ])
    .unwrap();
    assert!(matches!(
        store.poll(SystemTime::now()),
        Applied::Rejected {
            error: CredError::KeyMismatch { .. },
            ..
        }
    ));
    assert_eq!(store.poll(SystemTime::now()), Applied::Unchanged);
    assert_eq!(
        store.current().revision,
        revision,
        "the last good revision stays"
    );
}

#[test]
fn a_plain_directory_gets_one_poll_to_settle() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("CA");
    let good = pki.leaf(REPLICA, Role::Server);
    let dir = pki.dir(tmp.path(), "plain", &good);
    let store = load(&dir, Duration::ZERO);
    let next = pki.leaf(REPLICA, Role::Server);
    std::fs::write(dir.join("tls.crt"), &next.cert_pem).unwrap();
    assert_eq!(store.poll(SystemTime::now()), Applied::Settling);
    std::fs::write(dir.join("tls.key"), &next.key_pem).unwrap();
    assert!(matches!(
        store.poll(SystemTime::now()),
        Applied::Applied {
            trust_shrank: false,
            ..
        }
    ));
    assert_eq!(
        store.current().leaf.serial,
        mtls_sidecar::identity::CertInfo::parse(&next.cert_der)
            .unwrap()
            .serial
    );
    // A state that stays bad is rejected once it outlasts the settle window,
    // however often the poller looks before that.
    std::fs::write(dir.join("tls.key"), &good.key_pem).unwrap();
    let t0 = SystemTime::now();
    assert_eq!(store.poll(t0), Applied::Settling);
    assert_eq!(
        store.poll(t0 + Duration::from_millis(100)),
        Applied::Settling
    );
    let later = t0 + mtls_sidecar::credentials::SETTLE_WINDOW;
    assert!(matches!(store.poll(later), Applied::Rejected { .. }));
}

#[test]
fn a_removed_anchor_lives_exactly_as_long_as_the_grace() {
    let tmp = tempfile::tempdir().unwrap();
    let a = Pki::new("CA A");
    let b = Pki::new("CA B");
    let dir = AtomicDir::new(tmp.path()).unwrap();
    publish(
        &dir,
        &a.leaf(REPLICA, Role::Server),
        &format!("{}{}", a.ca.cert_pem, b.ca.cert_pem),
    );
    let grace = Duration::from_secs(3600);
    let store = load(tmp.path(), grace);
    let shrunk = store.trust_shrunk();
    publish(&dir, &b.leaf(REPLICA, Role::Server), &b.ca.cert_pem);
    let t0 = SystemTime::now();
    assert!(matches!(
        store.poll(t0),
        Applied::Applied {
            trust_shrank: false,
            ..
        }
    ));
    let trust = store.current().trust.clone();
    assert_eq!(trust.anchors.len(), 2, "A stays during the grace");
    let retire_at = trust.next_retirement().expect("A retires");
    assert!(retire_at >= t0 + grace - Duration::from_secs(1) && retire_at <= t0 + grace);
    assert!(!shrunk.has_changed().unwrap());
    // Nothing changes before the deadline, everything at it.
    assert_eq!(
        store.poll(retire_at - Duration::from_secs(1)),
        Applied::Unchanged
    );
    assert_eq!(store.poll(retire_at), Applied::TrustRetired);
    assert_eq!(store.current().trust.anchors.len(), 1);
    assert!(shrunk.has_changed().unwrap());
}

#[test]
fn without_grace_a_removed_anchor_goes_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let a = Pki::new("CA A");
    let b = Pki::new("CA B");
    let dir = AtomicDir::new(tmp.path()).unwrap();
    publish(
        &dir,
        &a.leaf(REPLICA, Role::Server),
        &format!("{}{}", a.ca.cert_pem, b.ca.cert_pem),
    );
    let store = load(tmp.path(), Duration::ZERO);
    let shrunk = store.trust_shrunk();
    publish(&dir, &b.leaf(REPLICA, Role::Server), &b.ca.cert_pem);
    assert!(matches!(
        store.poll(SystemTime::now()),
        Applied::Applied {
            trust_shrank: true,
            ..
        }
    ));
    assert_eq!(store.current().trust.anchors.len(), 1);
    assert!(shrunk.has_changed().unwrap());
}

#[test]
fn start_up_errors_name_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let err = CredentialStore::load(
        CredentialSource::Dir(tmp.path().join("nope")),
        provider(),
        Duration::ZERO,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("nope") && err.contains("not a directory"),
        "{err}"
    );
    let pki = Pki::new("CA");
    let dir = pki.dir(tmp.path(), "d", &pki.leaf(REPLICA, Role::Server));
    std::fs::write(
        dir.join("ca.crt"),
        "-----BEGIN CERTIFICATE-----\nnot base64\n",
    )
    .unwrap();
    let err = CredentialStore::load(
        CredentialSource::Dir(dir.clone()),
        provider(),
        Duration::ZERO,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("ca.crt"), "{err}");
}

#[test]
fn a_revision_without_the_routes_usage_is_rejected() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("CA");
    let dir = AtomicDir::new(tmp.path()).unwrap();
    publish(&dir, &pki.leaf(REPLICA, Role::Server), &pki.ca.cert_pem);
    let store = load(tmp.path(), Duration::ZERO);
    store
        .require_roles(true, false)
        .expect("a server leaf serves a server route");
    assert!(store.require_roles(true, true).is_err(), "no clientAuth");
    publish(&dir, &pki.leaf(REPLICA, Role::Client), &pki.ca.cert_pem);
    match store.poll(SystemTime::now()) {
        Applied::Rejected {
            error:
                CredError::Usage {
                    usage: "serverAuth",
                    ..
                },
            ..
        } => {}
        other => panic!("expected a usage rejection, got {other:?}"),
    }
    publish(&dir, &pki.leaf(REPLICA, Role::Both), &pki.ca.cert_pem);
    assert!(matches!(
        store.poll(SystemTime::now()),
        Applied::Applied { .. }
    ));
}

//! The credential store's rules, driven in process with an injected clock:
//! all-or-nothing revisions, no going back, one report per bad revision,
//! trust grace, the settle window of plain directories, and revisions whose
//! verdict depends on the time (not valid yet, expired).

use crate::common;

use std::time::{Duration, SystemTime};

use common::*;
use mtls_sidecar::credentials::SETTLE_WINDOW as WINDOW;
use mtls_sidecar::credentials::{Applied, CredError, CredentialSource, CredentialStore};
use mtls_sidecar::identity::{epoch_to_time, CertInfo};
use mtls_sidecar::pki::{DevCa, Issued, LeafSpec, Role};
use mtls_sidecar::tools::atomic_writer::AtomicDir;

fn publish(dir: &AtomicDir, leaf: &Issued, ca: &str) {
    dir.publish(&[
        ("tls.crt", leaf.cert_pem.as_bytes()),
        ("tls.key", leaf.key_pem.as_bytes()),
        ("ca.crt", ca.as_bytes()),
    ])
    .unwrap();
}

fn serial(leaf: &Issued) -> String {
    CertInfo::parse(&leaf.cert_der).unwrap().serial
}

fn not_before(leaf: &Issued) -> SystemTime {
    epoch_to_time(CertInfo::parse(&leaf.cert_der).unwrap().not_before)
}

fn load(dir: &std::path::Path, grace: Duration) -> std::sync::Arc<CredentialStore> {
    CredentialStore::load(CredentialSource::Dir(dir.to_path_buf()), provider(), grace)
        .expect("load")
}

/// What `/workload`, `/connections` (`trust_grace_seconds`) and the reload
/// poller read of a store: a file store has its revision at once and no
/// feed; a Workload API store has a feed and no revision until the agent
/// delivers one; the grace is the one given.
#[test]
fn a_store_reports_its_feed_revision_and_grace() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("CA");
    let dir = AtomicDir::new(tmp.path()).unwrap();
    publish(&dir, &pki.leaf(REPLICA, Role::Server), &pki.ca.cert_pem);
    let grace = Duration::from_secs(1_234);
    let files = load(tmp.path(), grace);
    assert!(
        files.feed().is_none(),
        "a file store has no Workload API feed"
    );
    assert!(files.has_revision());
    assert_eq!(files.trust_grace(), grace);

    let workload = CredentialStore::load(
        CredentialSource::WorkloadApi {
            endpoint: "unix:///nonexistent/agent.sock".into(),
            svid: None,
        },
        provider(),
        Duration::from_secs(7),
    )
    .expect("a Workload API store loads before the agent answers");
    let feed = workload.feed().expect("a Workload API store has a feed");
    assert!(feed.latest().is_none(), "nothing delivered yet");
    assert!(
        !workload.has_revision(),
        "no revision before the agent's first"
    );
    assert_eq!(workload.trust_grace(), Duration::from_secs(7));
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
fn a_plain_directory_is_judged_once_its_content_is_stable_for_the_window() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("CA");
    let good = pki.leaf(REPLICA, Role::Server);
    let dir = pki.dir(tmp.path(), "plain", &good);
    let store = load(&dir, Duration::ZERO);
    let next = pki.leaf(REPLICA, Role::Server);
    std::fs::write(dir.join("tls.crt"), &next.cert_pem).unwrap();
    let t0 = SystemTime::now();
    assert!(matches!(store.poll(t0), Applied::Settling { until, .. } if until == t0 + WINDOW));
    assert_eq!(store.next_due(), Some(t0 + WINDOW));
    // The key lands: new content, so the window starts again, even though
    // this state validates.
    std::fs::write(dir.join("tls.key"), &next.key_pem).unwrap();
    let t1 = t0 + Duration::from_millis(100);
    assert!(matches!(store.poll(t1), Applied::Settling { until, .. } if until == t1 + WINDOW));
    assert!(matches!(
        store.poll(t1 + WINDOW - Duration::from_millis(1)),
        Applied::Settling { .. }
    ));
    assert!(matches!(
        store.poll(t1 + WINDOW),
        Applied::Applied {
            trust_shrank: false,
            ..
        }
    ));
    assert_eq!(store.current().leaf.serial, serial(&next));
    assert_eq!(store.next_due(), None);
    // A state that stays bad is rejected once it outlasts the settle window,
    // however often the poller looks before that, and reported once.
    std::fs::write(dir.join("tls.key"), &good.key_pem).unwrap();
    let t2 = t1 + WINDOW + Duration::from_secs(1);
    assert!(matches!(store.poll(t2), Applied::Settling { .. }));
    assert!(matches!(
        store.poll(t2 + Duration::from_millis(100)),
        Applied::Settling { .. }
    ));
    assert!(matches!(
        store.poll(t2 + WINDOW),
        Applied::Rejected {
            error: CredError::KeyMismatch { .. },
            ..
        }
    ));
    assert!(!store.status().last_reload_successful);
    assert_eq!(
        store.poll(t2 + WINDOW + Duration::from_secs(1)),
        Applied::Unchanged
    );
}

/// The bug: `ca.crt` rewritten in place in two writes (A, then A+B) was
/// applied after the first, which validates on its own, so B-issued peers
/// lost their live connections. Now the half-written state is never judged.
#[test]
fn a_bundle_rewritten_in_place_is_not_applied_half_written() {
    let tmp = tempfile::tempdir().unwrap();
    let a = Pki::new("CA A");
    let b = Pki::new("CA B");
    let both = format!("{}{}", a.ca.cert_pem, b.ca.cert_pem);
    let dir = tmp.path().join("plain");
    mtls_sidecar::pki::write_secret_dir(&dir, &a.leaf(REPLICA, Role::Server), &both).unwrap();
    let store = load(&dir, Duration::ZERO);
    let revision = store.current().revision.clone();
    let shrunk = store.trust_shrunk();
    std::fs::write(dir.join("ca.crt"), &a.ca.cert_pem).unwrap();
    let t0 = SystemTime::now();
    assert!(matches!(store.poll(t0), Applied::Settling { .. }));
    std::fs::write(dir.join("ca.crt"), &both).unwrap();
    assert_eq!(store.poll(t0 + WINDOW), Applied::Unchanged);
    assert_eq!(store.current().revision, revision);
    assert_eq!(store.current().trust.anchors.len(), 2);
    assert!(!shrunk.has_changed().unwrap());
    assert_eq!(store.next_due(), None);
    // Positive control: the same content left in place is a real removal.
    std::fs::write(dir.join("ca.crt"), &a.ca.cert_pem).unwrap();
    let t1 = t0 + WINDOW + Duration::from_secs(1);
    assert!(matches!(store.poll(t1), Applied::Settling { .. }));
    assert!(matches!(
        store.poll(t1 + WINDOW),
        Applied::Applied {
            trust_shrank: true,
            ..
        }
    ));
    assert_eq!(store.current().trust.anchors.len(), 1);
    assert!(shrunk.has_changed().unwrap());
}

#[test]
fn explicit_files_settle_too_and_sighup_judges_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("CA");
    let dir = pki.dir(tmp.path(), "files", &pki.leaf(REPLICA, Role::Server));
    let source = CredentialSource::Files {
        cert: dir.join("tls.crt"),
        key: dir.join("tls.key"),
        ca: dir.join("ca.crt"),
        crl: None,
        intermediates: None,
        deny: None,
    };
    let store = CredentialStore::load(source, provider(), Duration::ZERO).expect("load");
    let next = pki.leaf(REPLICA, Role::Server);
    mtls_sidecar::pki::write_secret_dir(&dir, &next, &pki.ca.cert_pem).unwrap();
    let t0 = SystemTime::now();
    assert!(matches!(store.poll(t0), Applied::Settling { .. }));
    // SIGHUP: the writer says the files are complete.
    assert!(matches!(
        store.poll_now(t0 + Duration::from_millis(1)),
        Applied::Applied { .. }
    ));
    assert_eq!(store.current().leaf.serial, serial(&next));
}

#[test]
fn the_settle_window_is_at_least_the_poll_interval() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("CA");
    let dir = pki.dir(tmp.path(), "plain", &pki.leaf(REPLICA, Role::Server));
    let store = load(&dir, Duration::ZERO);
    store.set_settle_window(Duration::from_secs(5));
    let next = pki.leaf(REPLICA, Role::Server);
    mtls_sidecar::pki::write_secret_dir(&dir, &next, &pki.ca.cert_pem).unwrap();
    let t0 = SystemTime::now();
    let five = Duration::from_secs(5);
    assert!(matches!(store.poll(t0), Applied::Settling { until, .. } if until == t0 + five));
    assert!(matches!(
        store.poll(t0 + five - Duration::from_millis(1)),
        Applied::Settling { .. }
    ));
    assert!(matches!(store.poll(t0 + five), Applied::Applied { .. }));
    // A shorter interval does not shorten the floor.
    store.set_settle_window(Duration::from_millis(50));
    let later = pki.leaf(REPLICA, Role::Server);
    mtls_sidecar::pki::write_secret_dir(&dir, &later, &pki.ca.cert_pem).unwrap();
    let t1 = t0 + five + Duration::from_secs(1);
    assert!(matches!(store.poll(t1), Applied::Settling { until, .. } if until == t1 + WINDOW));
}

/// The bug: a renewed certificate whose notBefore was a few seconds ahead
/// (clock skew between issuer and node) was rejected and the verdict cached
/// by content hash, so it was never applied, not even after SIGHUP.
#[test]
fn a_not_yet_valid_revision_is_pending_and_applied_the_moment_it_is_valid() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("CA");
    let dir = AtomicDir::new(tmp.path()).unwrap();
    publish(&dir, &pki.leaf(REPLICA, Role::Server), &pki.ca.cert_pem);
    let store = load(tmp.path(), Duration::ZERO);
    let old = store.current().revision.clone();
    let t0 = SystemTime::now();
    let next = pki.issue(&LeafSpec::dns(REPLICA, Role::Server, 30).valid(
        t0 + Duration::from_secs(8),
        t0 + Duration::from_secs(86_400),
    ));
    let valid_from = not_before(&next);
    publish(&dir, &next, &pki.ca.cert_pem);
    let parses = store.parses();
    let revision = match store.poll(t0) {
        Applied::Pending {
            revision,
            error: CredError::NotYetValid { .. },
            valid_from: from,
        } => {
            assert_eq!(from, valid_from);
            revision
        }
        other => panic!("expected a pending revision, got {other:?}"),
    };
    let st = store.status();
    let pending = st.pending.expect("pending in the status");
    assert_eq!(pending.revision, revision);
    assert_eq!(pending.valid_from, valid_from);
    assert_eq!(pending.since, t0);
    assert!(
        pending.reason.contains("not valid before"),
        "{}",
        pending.reason
    );
    assert!(!st.last_reload_successful);
    assert_eq!(store.next_due(), Some(valid_from));
    // Every poll judges it again (reported once), none parses it again, and
    // SIGHUP does not apply it early.
    for i in 1..=50u64 {
        let t = t0 + Duration::from_millis(100 * i);
        if t < valid_from {
            assert_eq!(store.poll(t), Applied::Unchanged);
        }
    }
    let just_before = valid_from - Duration::from_secs(1);
    assert_eq!(store.poll(just_before), Applied::Unchanged);
    assert_eq!(store.poll_now(just_before), Applied::Unchanged);
    assert_eq!(
        store.parses(),
        parses + 1,
        "parsed once, judged on each poll"
    );
    assert_eq!(store.current().revision, old);
    match store.poll(valid_from) {
        Applied::Applied { revision: r, .. } => assert_eq!(r, revision),
        other => panic!("expected the revision applied at its notBefore, got {other:?}"),
    }
    assert_eq!(store.current().leaf.serial, serial(&next));
    let st = store.status();
    assert!(st.pending.is_none());
    assert!(st.last_reload_successful);
    assert_eq!(store.next_due(), None);
}

/// A CA certificate that is not a trust anchor (an intermediate in
/// `tls.crt`), signed by `root`, with its own validity window.
fn intermediate(root: &Pki, not_before: SystemTime, not_after: SystemTime) -> DevCa {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
    let issuer = rcgen::Issuer::from_ca_cert_pem(
        &root.ca.cert_pem,
        KeyPair::from_pem(&root.ca.key_pem).unwrap(),
    )
    .unwrap();
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, "intermediate CA");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = not_before.into();
    params.not_after = not_after.into();
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    DevCa::from_pem(&cert.pem(), &key.serialize_pem()).unwrap()
}

/// Publishes a leaf issued by an intermediate, the chain in `tls.crt`.
fn publish_chained(dir: &AtomicDir, leaf: &Issued, inter: &DevCa, ca: &str) {
    let chain = format!("{}{}", leaf.cert_pem, inter.cert_pem);
    dir.publish(&[
        ("tls.crt", chain.as_bytes()),
        ("tls.key", leaf.key_pem.as_bytes()),
        ("ca.crt", ca.as_bytes()),
    ])
    .unwrap();
}

#[test]
fn an_intermediate_not_yet_valid_is_pending_too() {
    let tmp = tempfile::tempdir().unwrap();
    let root = Pki::new("root CA");
    let dir = AtomicDir::new(tmp.path()).unwrap();
    publish(&dir, &root.leaf(REPLICA, Role::Server), &root.ca.cert_pem);
    let store = load(tmp.path(), Duration::ZERO);
    let t0 = SystemTime::now();
    let inter = intermediate(
        &root,
        t0 + Duration::from_secs(5),
        t0 + Duration::from_secs(86_400),
    );
    let leaf = inter
        .issue(&LeafSpec::dns(REPLICA, Role::Server, 1))
        .unwrap();
    publish_chained(&dir, &leaf, &inter, &root.ca.cert_pem);
    let valid_from = match store.poll(t0) {
        Applied::Pending {
            error: CredError::ChainNotYetValid { .. },
            valid_from,
            ..
        } => valid_from,
        other => panic!("expected a pending chain, got {other:?}"),
    };
    assert!(valid_from > t0 && valid_from <= t0 + Duration::from_secs(5));
    assert_eq!(
        store.poll(valid_from - Duration::from_secs(1)),
        Applied::Unchanged
    );
    assert!(matches!(store.poll(valid_from), Applied::Applied { .. }));
    assert_eq!(store.current().leaf.serial, serial(&leaf));
}

#[test]
fn an_expired_revision_is_rejected_once_and_still_judged_by_the_clock() {
    let tmp = tempfile::tempdir().unwrap();
    let root = Pki::new("root CA");
    let dir = AtomicDir::new(tmp.path()).unwrap();
    publish(&dir, &root.leaf(REPLICA, Role::Server), &root.ca.cert_pem);
    let store = load(tmp.path(), Duration::ZERO);
    let old = store.current().revision.clone();
    // An expired leaf: rejected, reported once, the old one stays.
    let t0 = SystemTime::now();
    let expired = root.issue(&LeafSpec::dns(REPLICA, Role::Server, 1).valid(
        t0 - Duration::from_secs(7_200),
        t0 - Duration::from_secs(3_600),
    ));
    publish(&dir, &expired, &root.ca.cert_pem);
    assert!(matches!(
        store.poll(t0),
        Applied::Rejected {
            error: CredError::Expired { .. },
            ..
        }
    ));
    assert_eq!(store.poll(t0 + Duration::from_secs(1)), Applied::Unchanged);
    let st = store.status();
    assert!(st.last_rejected_error.unwrap().contains("expired at"));
    assert!(st.pending.is_none());
    assert!(!st.last_reload_successful);
    assert_eq!(store.current().revision, old);
    // An expired intermediate: rejected now, yet not cached as bad: judged
    // at a time the chain was valid (a clock corrected backwards), it is
    // applied. Only time-independent failures are cached.
    let t1 = SystemTime::now();
    let inter = intermediate(
        &root,
        t1 - Duration::from_secs(3_600),
        t1 - Duration::from_secs(10),
    );
    let leaf = inter
        .issue(&LeafSpec::dns(REPLICA, Role::Server, 1))
        .unwrap();
    publish_chained(&dir, &leaf, &inter, &root.ca.cert_pem);
    assert!(matches!(
        store.poll(t1),
        Applied::Rejected {
            error: CredError::ChainExpired { .. },
            ..
        }
    ));
    assert_eq!(store.poll(t1 + Duration::from_secs(1)), Applied::Unchanged);
    assert!(matches!(
        store.poll(t1 - Duration::from_secs(30)),
        Applied::Applied { .. }
    ));
    assert_eq!(store.current().leaf.serial, serial(&leaf));
}

/// A measurement, not a check (`cargo test --test inproc store::measure --
/// --ignored --nocapture`): what a poll costs when nothing changed, and when a
/// pending revision is judged again.
#[test]
#[ignore]
fn measure_poll_cost() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("CA");
    let dir = AtomicDir::new(tmp.path()).unwrap();
    publish(&dir, &pki.leaf(REPLICA, Role::Server), &pki.ca.cert_pem);
    let store = load(tmp.path(), Duration::ZERO);
    const N: u32 = 2_000;
    let time = |label: &str| {
        let t0 = SystemTime::now();
        let start = std::time::Instant::now();
        for _ in 0..N {
            let _ = store.poll(t0);
        }
        eprintln!("{label}: {:?} per poll", start.elapsed() / N);
    };
    time("unchanged (the revision in force)");
    let now = SystemTime::now();
    let next = pki.issue(&LeafSpec::dns(REPLICA, Role::Server, 30).valid(
        now + Duration::from_secs(3_600),
        now + Duration::from_secs(86_400),
    ));
    publish(&dir, &next, &pki.ca.cert_pem);
    assert!(matches!(store.poll(now), Applied::Pending { .. }));
    time("a pending revision, judged again");
    let start = std::time::Instant::now();
    let raw = CredentialSource::Dir(tmp.path().to_path_buf())
        .read()
        .unwrap();
    for _ in 0..N {
        let _ = mtls_sidecar::credentials::validate(&raw, &provider(), now);
    }
    eprintln!("full validation (parse + judge): {:?}", start.elapsed() / N);
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
    assert_eq!(store.next_due(), Some(retire_at), "the poller wakes for it");
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

/// A split source (identity and trust in two directories) waits out the
/// settle window when either half is a plain directory, written file by
/// file; two Secret mounts (`..data` links, swapped whole) are judged at
/// once.
#[test]
fn a_split_source_settles_when_either_half_is_a_plain_directory() {
    let pki = Pki::new("CA");
    for (id_linked, trust_linked) in [(true, false), (false, true), (true, true)] {
        let tmp = tempfile::tempdir().unwrap();
        let (id, trust) = (tmp.path().join("id"), tmp.path().join("trust"));
        let write = |dir: &std::path::Path, linked: bool, files: &[(&str, &[u8])]| {
            if linked {
                AtomicDir::new(dir).unwrap().publish(files).unwrap();
            } else {
                std::fs::create_dir_all(dir).unwrap();
                for (name, bytes) in files {
                    std::fs::write(dir.join(name), bytes).unwrap();
                }
            }
        };
        let identity = |leaf: &Issued| {
            write(
                &id,
                id_linked,
                &[
                    ("tls.crt", leaf.cert_pem.as_bytes()),
                    ("tls.key", leaf.key_pem.as_bytes()),
                ],
            )
        };
        identity(&pki.leaf(REPLICA, Role::Server));
        write(
            &trust,
            trust_linked,
            &[("ca.crt", pki.ca.cert_pem.as_bytes())],
        );
        let source = CredentialSource::DirPair {
            identity: id.clone(),
            trust: trust.clone(),
        };
        let store = CredentialStore::load(source, provider(), Duration::ZERO).expect("load");
        let next = pki.leaf(REPLICA, Role::Server);
        identity(&next);
        let t0 = SystemTime::now();
        let case = format!("identity linked: {id_linked}, trust linked: {trust_linked}");
        if id_linked && trust_linked {
            assert!(matches!(store.poll(t0), Applied::Applied { .. }), "{case}");
        } else {
            assert!(
                matches!(store.poll(t0), Applied::Settling { until, .. } if until == t0 + WINDOW),
                "{case}"
            );
            assert!(
                matches!(store.poll(t0 + WINDOW), Applied::Applied { .. }),
                "{case}"
            );
        }
        assert_eq!(store.current().leaf.serial, serial(&next), "{case}");
    }
}

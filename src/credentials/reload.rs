//! The credential poller: reads the source every `--reload-interval` (or
//! sooner when a file watch, SIGHUP, or something due wakes it: a trust
//! retirement, a settle window ending, a pending certificate becoming
//! valid), applies a changed revision that validates, and reports the
//! outcome. Polling is the truth; file watches miss the kubelet's `..data`
//! swaps.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::{watch, Notify};
use tracing::{debug, error, info, warn};

use crate::credentials::revocation::Dropped;
use crate::credentials::{fmt_time, Applied, CredentialStore, CrlNotice};

/// Set to `1` to run without the file watcher, so only the interval (and
/// SIGHUP) polls. For tests only: it proves that polling alone picks up a
/// change, as it must for the kubelet's `..data` swaps that watchers miss.
/// Not part of the public interface.
pub const NO_FILE_WATCH_ENV: &str = "MTLS_SIDECAR_NO_FILE_WATCH";

/// How long after a due moment (a settle window ending, a certificate
/// becoming valid, a grace ending) the poller wakes, so the poll's clock is
/// past it.
const WAKE_SLACK: Duration = Duration::from_millis(5);

/// What wakes a store's poller early: its file watch (or, for a Workload
/// API source, the arrival of a context). Armed by [`arm`] before the
/// routes log `listening`, so a change made once they do is never left to
/// the interval because the watch was not there yet (one made during
/// start-up, between the first read and the arming, is the interval's).
pub struct Wake {
    event: Arc<Notify>,
    _watcher: Option<notify::RecommendedWatcher>,
}

/// Arms `store`'s file watch (none for a Workload API source, or with
/// [`NO_FILE_WATCH_ENV`] set).
pub fn arm(store: &CredentialStore, interval: Duration) -> Wake {
    let event = match store.feed() {
        // A Workload API source wakes the poller when a context arrives.
        Some(feed) => feed.wake.clone(),
        None => Arc::new(Notify::new()),
    };
    let watcher = if store.feed().is_some() {
        None
    } else if file_watch_disabled() {
        info!(target: "mtls_sidecar::reload", source = %store.source(), "file watcher disabled ({NO_FILE_WATCH_ENV}=1); polling every {interval:?} only");
        None
    } else {
        start_watcher(store, event.clone())
    };
    Wake {
        event,
        _watcher: watcher,
    }
}

/// Runs until `stop` turns true.
/// `all` is every store of the process: the expiry gauges show the earliest
/// expiry across them. `hup` is notified on SIGHUP: that poll judges a
/// changed plain directory at once instead of waiting for it to settle.
/// `wake` is the store's, from [`arm`].
pub async fn run(
    store: Arc<CredentialStore>,
    all: Arc<[Arc<CredentialStore>]>,
    interval: Duration,
    hup: Arc<Notify>,
    mut stop: watch::Receiver<bool>,
    wake: Wake,
) {
    let file_event = wake.event.clone();
    publish_reload_state(&all);
    warn_stale_crls(&store);
    report_crl_notices(&store, &all);
    loop {
        let wait = next_wait(&store, interval);
        let trigger = tokio::select! {
            _ = tokio::time::sleep(wait) => Trigger::Interval,
            _ = file_event.notified() => Trigger::File,
            _ = hup.notified() => Trigger::Signal,
            _ = stop.wait_for(|s| *s) => return,
        };
        let outcome = poll(&store, trigger, SystemTime::now());
        warn_stale_crls(&store);
        report_crl_notices(&store, &all);
        if matches!(outcome, Applied::Applied { .. } | Applied::TrustRetired) {
            publish_expiry(&all);
        }
        publish_reload_state(&all);
    }
}

/// What woke the poller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trigger {
    Interval,
    File,
    /// SIGHUP: the writer says the files are complete, so a changed plain
    /// directory is judged at once.
    Signal,
}

impl Trigger {
    fn as_str(self) -> &'static str {
        match self {
            Trigger::Interval => "interval",
            Trigger::File => "file",
            Trigger::Signal => "signal",
        }
    }
}

/// One poll, its outcome reported, then said at DEBUG with what woke it:
/// the line tests count to know the sidecar looked (and said what it saw)
/// before they assert that nothing came of it.
fn poll(store: &CredentialStore, trigger: Trigger, now: SystemTime) -> Applied {
    let outcome = if trigger == Trigger::Signal {
        store.poll_now(now)
    } else {
        store.poll(now)
    };
    report(store, &outcome);
    debug!(target: "mtls_sidecar::reload", source = %store.source(), trigger = trigger.as_str(), "polled credentials");
    outcome
}

/// How long to sleep before the next poll: the interval, or less when
/// something is due sooner (the store says what).
fn next_wait(store: &CredentialStore, interval: Duration) -> Duration {
    match store.next_due() {
        Some(at) => interval.min(
            at.duration_since(SystemTime::now())
                .unwrap_or_default()
                .saturating_add(WAKE_SLACK),
        ),
        None => interval,
    }
}

fn file_watch_disabled() -> bool {
    std::env::var_os(NO_FILE_WATCH_ENV).is_some_and(|v| v == "1")
}

/// Logs and counts one poll's outcome.
pub fn report(store: &CredentialStore, outcome: &Applied) {
    match outcome {
        Applied::Unchanged => {}
        Applied::Settling { revision, until } => {
            debug!(
                target: "mtls_sidecar::reload", source = %store.source(),
                revision = %short(revision),
                until = %humantime::format_rfc3339_millis(*until),
                "credential files changed; judging them once unchanged for the settle window"
            )
        }
        Applied::Applied {
            revision,
            trust_shrank,
        } => {
            let creds = store.current();
            crate::metrics::credential_reload(true);
            info!(
                target: "mtls_sidecar::reload", source = %store.source(),
                revision = %short(revision),
                subject = %creds.leaf.subject,
                serial = %creds.leaf.serial,
                not_after = %fmt_time(creds.leaf.not_after),
                anchors = creds.trust.anchors.len(),
                deny = creds.trust.deny.entries().len(),
                trust_shrank,
                "applied credential revision"
            );
        }
        Applied::TrustRetired => {
            let trust = store.current().trust.clone();
            info!(target: "mtls_sidecar::reload", source = %store.source(), anchors = trust.anchors.len(), crls = trust.crls.entries().len(), "trust re-judged: a trust grace ended (the removed CA is no longer trusted) or a pending CRL came due");
        }
        Applied::Pending {
            revision,
            error,
            valid_from,
        } => {
            warn!(
                target: "mtls_sidecar::reload", source = %store.source(),
                revision = %short(revision),
                valid_from = %humantime::format_rfc3339_seconds(*valid_from),
                error = %error,
                "credential revision is not valid yet; the current one stays in force and this one is applied once valid"
            );
        }
        Applied::Rejected { revision, error } => {
            crate::metrics::credential_reload(false);
            error!(
                target: "mtls_sidecar::reload", source = %store.source(),
                revision = %short(revision),
                error = %error,
                "rejected credential revision; the last good one stays in force"
            );
        }
    }
}

/// Logs, once per CRL, each CRL in force that is past its nextUpdate: it
/// is still enforced (refusing with old data beats refusing nothing).
fn warn_stale_crls(store: &CredentialStore) {
    for crl in store.newly_stale_crls(SystemTime::now()) {
        warn!(
            target: "mtls_sidecar::reload", source = %store.source(),
            issuer = %crl.issuer,
            crl_number = crl.number.as_deref().unwrap_or("none"),
            next_update = %crl.next_update.map(fmt_time).unwrap_or_default(),
            "CRL is past its nextUpdate; still enforcing it until a newer one is published"
        );
    }
}

/// Logs, once each, what happened to the CRLs (a CRL ignored because its
/// CA is no longer trusted, a CRL held pending, serials made admissible
/// again), counts the un-revocations, and sets the pending gauge.
fn report_crl_notices(store: &CredentialStore, all: &[Arc<CredentialStore>]) {
    for notice in store.take_crl_notices() {
        match notice {
            CrlNotice::Ignored { crl, signer } => warn!(
                target: "mtls_sidecar::reload", source = %store.source(),
                issuer = %crl.issuer, signer = %signer,
                "CRL ignored: the CA that signed it is no longer trusted"
            ),
            CrlNotice::Pending { crl } => warn!(
                target: "mtls_sidecar::reload", source = %store.source(),
                issuer = %crl.issuer,
                crl_number = crl.number.as_deref().unwrap_or("none"),
                this_update = %fmt_time(crl.this_update),
                "CRL held pending: its thisUpdate is in the future (beyond the clock-skew tolerance); the previous CRL of that CA stays in force until it is due"
            ),
            CrlNotice::Unrevoked(dropped) => report_dropped(store, &dropped),
        }
    }
    let pending = all.iter().map(|s| s.current().trust.crls.pending()).sum();
    crate::metrics::crl_pending(pending);
}

/// Un-revocations: one WARN and one count of the alerting counter per
/// revision; serials an issuer pruned: one INFO, counted apart.
fn report_dropped(store: &CredentialStore, dropped: &[Dropped]) {
    let (pruned, unrevoked): (Vec<&Dropped>, Vec<&Dropped>) =
        dropped.iter().partition(|d| d.pruned);
    if !unrevoked.is_empty() {
        crate::metrics::crl_removal();
        let what: Vec<String> = unrevoked.iter().map(|d| describe_dropped(d)).collect();
        warn!(
            target: "mtls_sidecar::reload", source = %store.source(),
            admissible = %what.join("; "),
            "applied a revision that un-revokes certificates: these serials are admissible again"
        );
    }
    if !pruned.is_empty() {
        crate::metrics::crl_pruned(pruned.iter().map(|d| d.serials.len()).sum());
        let what: Vec<String> = pruned.iter().map(|d| describe_dropped(d)).collect();
        info!(
            target: "mtls_sidecar::reload", source = %store.source(),
            pruned = %what.join("; "),
            "applied a revision whose CRL issuer pruned serials (a higher CRL number without them, revoked longer ago than --crl-prune-age: their certificates expired)"
        );
    }
}

/// One issuer's un-revoked serials, for the WARN line.
fn describe_dropped(d: &Dropped) -> String {
    let serials: Vec<String> = d.serials.iter().map(|s| hex(s)).collect();
    format!(
        "{} ({}): serials [{}]",
        d.issuer,
        d.how(),
        serials.join(", ")
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Sets the reload gauges from every store: the revisions in force, and
/// whether each store's newest judged revision is the one in force. Each
/// store's poller calls it; one at a time, so a view read earlier never
/// overwrites a newer one.
pub fn publish_reload_state(stores: &[Arc<CredentialStore>]) {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let successful = stores.iter().all(|s| s.status().last_reload_successful);
    let in_force: Vec<(String, String)> = stores
        .iter()
        .map(|s| (s.source().to_string(), s.current().revision.clone()))
        .collect();
    crate::metrics::credential_reload_state(successful, &in_force);
    let mut deny = crate::credentials::DenyCounts::default();
    for c in stores.iter().map(|s| s.current().trust.deny.counts()) {
        deny.spki += c.spki;
        deny.serial += c.serial;
        deny.san += c.san;
    }
    crate::metrics::deny_entries(deny.spki, deny.serial, deny.san);
}

/// Sets the validity gauges from what is in force: the identity that
/// expires first across every store, and the trust anchor
/// [`crate::metrics::watched_anchor`] picks (the newest CA of each bundle,
/// the earliest of those), so an alert on them covers the source whose
/// renewal is most behind.
pub fn publish_expiry(stores: &[Arc<CredentialStore>]) {
    // A Workload API store waiting for its first context has no expiry.
    let current: Vec<_> = stores
        .iter()
        .filter(|s| s.has_revision())
        .map(|s| s.current())
        .collect();
    if let Some(leaf) = current.iter().map(|c| &c.leaf).min_by_key(|l| l.not_after) {
        let validity = |i: &crate::identity::CertInfo| crate::metrics::Validity {
            not_before: i.not_before,
            not_after: i.not_after,
        };
        // Per store and bundle; an anchor kept only for its grace is going.
        let anchors = current.iter().enumerate().flat_map(|(n, c)| {
            c.trust
                .anchors
                .iter()
                .filter(|a| a.retire_at.is_none())
                .map(move |a| ((n, a.domain.clone()), validity(&a.info)))
        });
        let trust = crate::metrics::watched_anchor(anchors);
        crate::metrics::cert_validity(validity(leaf), trust);
    }
    let crl = current
        .iter()
        .filter_map(|c| c.trust.crls.earliest_next_update())
        .min();
    crate::metrics::crl_next_update(crl);
}

fn short(revision: &str) -> &str {
    revision.get(..12).unwrap_or(revision)
}

/// An event that cannot mean new content: an open, a read, a close
/// without writing.
fn is_read_only(event: &notify::Event) -> bool {
    use notify::event::{AccessKind, AccessMode, EventKind};
    matches!(event.kind, EventKind::Access(k) if k != AccessKind::Close(AccessMode::Write))
}

/// Watches the source's directories (non-recursively) to poll early. A
/// watcher that cannot start is logged; polling carries on regardless.
fn start_watcher(store: &CredentialStore, wake: Arc<Notify>) -> Option<notify::RecommendedWatcher> {
    use notify::Watcher;
    // The poll itself opens the files it reads, and inotify reports those
    // opens: waking on read-only access would make the poller chase its own
    // tail (a plain directory is watched directly), spinning a core.
    let mut watcher = match notify::recommended_watcher(
        move |event: notify::Result<notify::Event>| {
            if !event.as_ref().is_ok_and(is_read_only) {
                wake.notify_one()
            }
        },
    ) {
        Ok(w) => w,
        Err(e) => {
            warn!(target: "mtls_sidecar::reload", error = %e, "file watcher unavailable; polling only");
            return None;
        }
    };
    for dir in store.source().watch_dirs() {
        if let Err(e) = watcher.watch(&dir, notify::RecursiveMode::NonRecursive) {
            warn!(target: "mtls_sidecar::reload", dir = %dir.display(), error = %e, "cannot watch directory; polling only");
        }
    }
    Some(watcher)
}

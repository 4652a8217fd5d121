//! The credential poller: reads the source every `--reload-interval` (or
//! sooner when a file watch, SIGHUP or a due trust retirement wakes it),
//! applies a changed revision that validates, and reports the outcome.
//! Polling is the truth; file watches miss the kubelet's `..data` swaps.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::{watch, Notify};
use tracing::{debug, error, info, warn};

use crate::credentials::{fmt_time, Applied, CredentialStore};

/// Runs until `stop` turns true.
/// `all` is every store of the process: the expiry gauges show the earliest
/// expiry across them.
pub async fn run(
    store: Arc<CredentialStore>,
    all: Arc<[Arc<CredentialStore>]>,
    interval: Duration,
    wake: Arc<Notify>,
    mut stop: watch::Receiver<bool>,
) {
    let _watcher = start_watcher(&store, wake.clone());
    loop {
        let mut wait = interval;
        if let Some(at) = store.current().trust.next_retirement() {
            let until = at.duration_since(SystemTime::now()).unwrap_or_default();
            wait = wait.min(until + Duration::from_millis(5));
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = wake.notified() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let outcome = store.poll(SystemTime::now());
        report(&store, &outcome);
        if matches!(outcome, Applied::Applied { .. } | Applied::TrustRetired) {
            publish_expiry(&all);
        }
    }
}

/// Logs and counts one poll's outcome.
pub fn report(store: &CredentialStore, outcome: &Applied) {
    match outcome {
        Applied::Unchanged => {}
        Applied::Settling => {
            debug!(source = %store.source(), "credential files do not validate together yet; waiting one poll")
        }
        Applied::Applied {
            revision,
            trust_shrank,
        } => {
            let creds = store.current();
            crate::metrics::credential_reload(true);
            info!(
                source = %store.source(),
                revision = %short(revision),
                subject = %creds.leaf.subject,
                serial = %creds.leaf.serial,
                not_after = %fmt_time(creds.leaf.not_after),
                anchors = creds.trust.anchors.len(),
                trust_shrank,
                "applied credential revision"
            );
        }
        Applied::TrustRetired => {
            info!(source = %store.source(), anchors = store.current().trust.anchors.len(), "trust grace ended; removed CA is no longer trusted");
        }
        Applied::Rejected { revision, error } => {
            crate::metrics::credential_reload(false);
            error!(
                source = %store.source(),
                revision = %short(revision),
                error = %error,
                "rejected credential revision; the last good one stays in force"
            );
        }
    }
}

/// Sets the expiry gauges from what is in force: the earliest identity and
/// the earliest trust anchor across every store, so an alert on the gauge
/// covers the source that expires first.
pub fn publish_expiry(stores: &[Arc<CredentialStore>]) {
    let current: Vec<_> = stores.iter().map(|s| s.current()).collect();
    if let Some(identity) = current.iter().map(|c| c.leaf.not_after).min() {
        let trust = current
            .iter()
            .filter_map(|c| c.trust.earliest_not_after())
            .min();
        crate::metrics::cert_expiry(identity, trust);
    }
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
    let mut watcher =
        match notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            if !event.as_ref().is_ok_and(is_read_only) {
                wake.notify_one()
            }
        }) {
            Ok(w) => w,
            Err(e) => {
                warn!(error = %e, "file watcher unavailable; polling only");
                return None;
            }
        };
    for dir in store.source().watch_dirs() {
        if let Err(e) = watcher.watch(&dir, notify::RecursiveMode::NonRecursive) {
            warn!(dir = %dir.display(), error = %e, "cannot watch directory; polling only");
        }
    }
    Some(watcher)
}

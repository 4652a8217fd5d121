//! The one credential store a source's routes share. Handshakes read it
//! lock-free (arc-swap); the poller replaces its contents whole.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;
use serde::Serialize;
use tokio::sync::watch;

use super::trust::{Anchor, Trust};
use super::validate::{parse, ParsedRevision};
use super::{CredError, CredentialSource, CrlInfo, CrlScope};
use crate::identity::CertInfo;

/// One applied revision: identity and trust, swapped together.
#[derive(Debug)]
pub struct Credentials {
    /// Hex content hash of the files this came from.
    pub revision: String,
    pub identity: Arc<CertifiedKey>,
    pub leaf: CertInfo,
    pub trust: Arc<Trust>,
}

/// What the poller has seen, for `/status` and `/readyz`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReloadStatus {
    pub last_poll: Option<SystemTime>,
    pub last_applied: Option<SystemTime>,
    pub last_rejected_revision: Option<String>,
    pub last_rejected_error: Option<String>,
    pub last_rejected_at: Option<SystemTime>,
    /// A newer revision that is good but not valid yet; it is applied on the
    /// first poll once it is.
    pub pending: Option<PendingRevision>,
    /// True when the newest revision judged is the one in force; false while
    /// a newer one is rejected or pending. A plain directory's revision that
    /// is still settling has no verdict yet and leaves this as it was.
    pub last_reload_successful: bool,
}

/// A revision waiting for one of its certificates to become valid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PendingRevision {
    /// Its content hash.
    pub revision: String,
    /// Why it is not in force yet (names the file and the time).
    pub reason: String,
    /// When the failing certificate becomes valid.
    pub valid_from: SystemTime,
    /// When the poller first saw this revision.
    pub since: SystemTime,
}

/// The outcome of one poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// Same content as in force, or as already judged (rejected, or pending
    /// and still not valid).
    Unchanged,
    /// A new revision is in force.
    Applied {
        revision: String,
        trust_shrank: bool,
    },
    /// Only the trust changed: a graced anchor retired.
    TrustRetired,
    /// A new revision failed validation; the last good one stays. Reported
    /// once per revision.
    Rejected { revision: String, error: CredError },
    /// A new revision is good except that a certificate in it is not valid
    /// yet; it is judged again on every poll and applied once valid.
    /// Reported once per revision.
    Pending {
        revision: String,
        error: CredError,
        valid_from: SystemTime,
    },
    /// A plain directory's (or explicit files') content changed and has not
    /// stayed the same for the settle window yet: it may be mid-write, so
    /// no verdict before `until`.
    Settling { revision: String, until: SystemTime },
}

/// How long a plain directory's (or explicit files') content must stay the
/// same before it is judged (at least this, or the poll interval if
/// longer): writers replace `tls.crt`, `tls.key` and `ca.crt` one after the
/// other, or rewrite one in place in several writes, and a file watch wakes
/// the poller on the first write. A half-written state can even validate
/// (a CA bundle cut after its first certificate), so a changed revision
/// waits whether it validates or not. A `..data` revision is published
/// atomically and is judged at once.
pub const SETTLE_WINDOW: Duration = Duration::from_secs(2);

/// The newest revision seen that is not in force, and what is known of it.
#[derive(Debug)]
struct Candidate {
    /// The content hash, or `read-error:...` when the files could not be read.
    key: String,
    /// The first poll that saw this content (every poll since saw it too).
    first_seen: SystemTime,
    stage: Stage,
}

#[derive(Debug)]
enum Stage {
    /// Seen, not judged yet (settling).
    Unjudged,
    /// Failed for a reason time cannot change; reported.
    Rejected,
    /// Parsed and checked once; only its validity in time is judged again
    /// on each poll. `reported` is what was last said about it.
    Parsed {
        rev: Arc<ParsedRevision>,
        reported: Reported,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reported {
    Nothing,
    Pending,
    Rejected,
}

#[derive(Debug)]
struct PollState {
    status: ReloadStatus,
    candidate: Option<Candidate>,
    settle_window: Duration,
    /// The roles the store's routes play: (server, client).
    roles: (bool, bool),
    /// How many revisions were parsed in full (a diagnostic).
    parses: u64,
    /// The stale CRLs already reported (each is reported once).
    stale_reported: Vec<CrlInfo>,
}

impl Default for PollState {
    fn default() -> Self {
        PollState {
            status: ReloadStatus {
                last_reload_successful: true,
                ..Default::default()
            },
            candidate: None,
            settle_window: SETTLE_WINDOW,
            roles: (false, false),
            parses: 0,
            stale_reported: Vec::new(),
        }
    }
}

/// Holds the credentials in force for one source.
#[derive(Debug)]
pub struct CredentialStore {
    source: CredentialSource,
    provider: Arc<CryptoProvider>,
    trust_grace: Duration,
    current: ArcSwap<Credentials>,
    state: Mutex<PollState>,
    trust_shrunk: watch::Sender<u64>,
    generation: watch::Sender<u64>,
}

impl CredentialStore {
    /// Reads and validates the source; any problem is an error naming the file.
    pub fn load(
        source: CredentialSource,
        provider: Arc<CryptoProvider>,
        trust_grace: Duration,
    ) -> Result<Arc<CredentialStore>, CredError> {
        let now = SystemTime::now();
        let raw = source.read()?;
        let rev = super::validate(&raw, &provider, now)?;
        let trust = Arc::new(Trust::build(
            Anchor::bundle(&rev.anchors),
            rev.crls.clone(),
            CrlScope::default(),
            &provider,
        )?);
        let creds = Credentials {
            revision: rev.hash,
            identity: rev.identity,
            leaf: rev.leaf,
            trust,
        };
        let mut state = PollState::default();
        state.status.last_poll = Some(now);
        state.status.last_applied = Some(now);
        Ok(Arc::new(CredentialStore {
            source,
            provider,
            trust_grace,
            current: ArcSwap::from_pointee(creds),
            state: Mutex::new(state),
            trust_shrunk: watch::channel(0).0,
            generation: watch::channel(0).0,
        }))
    }

    /// The credentials in force. Cheap; called on every handshake.
    pub fn current(&self) -> Arc<Credentials> {
        self.current.load_full()
    }

    /// Where this store reads from.
    pub fn source(&self) -> &CredentialSource {
        &self.source
    }

    /// The crypto provider credentials were validated with.
    pub fn provider(&self) -> &Arc<CryptoProvider> {
        &self.provider
    }

    /// A copy of what the poller has seen.
    pub fn status(&self) -> ReloadStatus {
        self.lock().status.clone()
    }

    /// Changes whenever the effective trust loses an anchor or the CRLs in
    /// force change; routes re-verify their live connections then.
    pub fn trust_shrunk(&self) -> watch::Receiver<u64> {
        self.trust_shrunk.subscribe()
    }

    /// Changes whenever anything new is swapped in.
    pub fn generation(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PollState> {
        // A panic while holding this lock cannot leave PollState invalid
        // (plain values), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads the source once and applies what changed. A `..data` revision
    /// is judged at once; a plain directory's or explicit files' content
    /// only once it has stayed the same for the settle window.
    pub fn poll(&self, now: SystemTime) -> Applied {
        self.poll_with(now, false)
    }

    /// Like [`poll`](Self::poll), but judges a changed plain directory at
    /// once, without waiting for the settle window: SIGHUP is the writer
    /// saying the files are complete.
    pub fn poll_now(&self, now: SystemTime) -> Applied {
        self.poll_with(now, true)
    }

    fn poll_with(&self, now: SystemTime, force: bool) -> Applied {
        let mut state = self.lock();
        state.status.last_poll = Some(now);
        let current = self.current();
        let retired = self.retire_due(&current, now);
        let current = self.current();
        let outcome = self.poll_source(&mut state, &current, now, force);
        match outcome {
            Applied::Unchanged if retired => Applied::TrustRetired,
            other => other,
        }
    }

    /// The next moment a poll could change something without the files
    /// changing: a graced anchor retiring, a settle window ending, a pending
    /// revision becoming valid. Only moments after the last poll count (that
    /// poll handled the earlier ones), so a poller that wakes for it never
    /// spins.
    pub fn next_due(&self) -> Option<SystemTime> {
        let retirement = self.current().trust.next_retirement();
        let state = self.lock();
        let candidate = state.candidate.as_ref().and_then(|c| match &c.stage {
            Stage::Unjudged if self.settles() => {
                Some(settled_at(c.first_seen, state.settle_window))
            }
            _ => None,
        });
        let pending = state.status.pending.as_ref().map(|p| p.valid_from);
        let floor = state.status.last_poll;
        [retirement, candidate, pending]
            .into_iter()
            .flatten()
            .filter(|t| floor.is_none_or(|polled| *t > polled))
            .min()
    }

    /// The CRLs in force that are past their nextUpdate at `now` and were
    /// not returned before: each stale CRL is reported once.
    pub fn newly_stale_crls(&self, now: SystemTime) -> Vec<CrlInfo> {
        let now = crate::identity::time_to_epoch(now);
        let current = self.current();
        let mut state = self.lock();
        let in_force = &current.trust.crls.infos;
        state.stale_reported.retain(|c| in_force.contains(c));
        let mut fresh = Vec::new();
        for crl in current.trust.crls.stale(now) {
            if !state.stale_reported.contains(crl) {
                state.stale_reported.push(crl.clone());
                fresh.push(crl.clone());
            }
        }
        fresh
    }

    /// How many revisions were parsed in full since start-up. A revision
    /// waiting to become valid is parsed once and only re-judged in time
    /// on later polls; tests use this to prove it.
    pub fn parses(&self) -> u64 {
        self.lock().parses
    }

    fn retire_due(&self, current: &Credentials, now: SystemTime) -> bool {
        let Some(anchors) = current.trust.expire(now) else {
            return false;
        };
        match Trust::build(
            anchors,
            current.trust.crls.clone(),
            current.trust.scope,
            &self.provider,
        ) {
            Ok(trust) => {
                self.swap(Credentials {
                    revision: current.revision.clone(),
                    identity: current.identity.clone(),
                    leaf: current.leaf.clone(),
                    trust: Arc::new(trust),
                });
                self.trust_shrunk.send_modify(|g| *g += 1);
                true
            }
            Err(_) => false,
        }
    }

    fn poll_source(
        &self,
        state: &mut PollState,
        current: &Credentials,
        now: SystemTime,
        force: bool,
    ) -> Applied {
        let read = self.source.read();
        let key = match &read {
            Ok(raw) => raw.hash.clone(),
            Err(error) => format!("read-error:{error}"),
        };
        if key == current.revision {
            // The newest content is the one in force again.
            state.candidate = None;
            state.status.pending = None;
            state.status.last_reload_successful = true;
            return Applied::Unchanged;
        }
        let mut candidate = match state.candidate.take() {
            Some(c) if c.key == key => c,
            _ => {
                state.status.pending = None;
                Candidate {
                    key,
                    first_seen: now,
                    stage: Stage::Unjudged,
                }
            }
        };
        let outcome = self.judge(state, &mut candidate, read, current, now, force);
        if !matches!(outcome, Applied::Applied { .. }) {
            state.candidate = Some(candidate);
        }
        outcome
    }

    /// Moves a candidate on: settle, parse once, judge in time, apply.
    fn judge(
        &self,
        state: &mut PollState,
        candidate: &mut Candidate,
        read: Result<super::RawRevision, CredError>,
        current: &Credentials,
        now: SystemTime,
        force: bool,
    ) -> Applied {
        let key = candidate.key.clone();
        match candidate.stage {
            Stage::Rejected => return Applied::Unchanged,
            Stage::Parsed { .. } => {}
            Stage::Unjudged => {
                if self.settles() && !force {
                    let until = settled_at(candidate.first_seen, state.settle_window);
                    if now < until {
                        return Applied::Settling {
                            revision: key,
                            until,
                        };
                    }
                }
                state.parses = state.parses.saturating_add(1);
                let (server, client) = state.roles;
                let parsed = read.and_then(|raw| {
                    let rev = parse(&raw, &self.provider)?;
                    super::check_usage(&rev.leaf, &raw.cert.path, server, client)?;
                    Ok(rev)
                });
                match parsed {
                    Ok(rev) => {
                        candidate.stage = Stage::Parsed {
                            rev: Arc::new(rev),
                            reported: Reported::Nothing,
                        }
                    }
                    Err(error) => {
                        candidate.stage = Stage::Rejected;
                        return self.reject(state, key, error, now);
                    }
                }
            }
        }
        let Stage::Parsed { rev, reported } = &mut candidate.stage else {
            return Applied::Unchanged;
        };
        let valid = match rev.judge(&self.provider, now) {
            Ok(valid) => valid,
            Err(error) if error.is_time_dependent() => {
                state.status.last_reload_successful = false;
                let Some(from) = error.valid_from() else {
                    // Expired: rejected, but judged again on every poll (a
                    // clock that was ahead may be corrected).
                    state.status.pending = None;
                    if *reported == Reported::Rejected {
                        return Applied::Unchanged;
                    }
                    *reported = Reported::Rejected;
                    return self.reject(state, key, error, now);
                };
                let valid_from = crate::identity::epoch_to_time(from);
                state.status.pending = Some(PendingRevision {
                    revision: key.clone(),
                    reason: error.to_string(),
                    valid_from,
                    since: candidate.first_seen,
                });
                if *reported == Reported::Pending {
                    return Applied::Unchanged;
                }
                *reported = Reported::Pending;
                return Applied::Pending {
                    revision: key,
                    error,
                    valid_from,
                };
            }
            Err(error) => {
                candidate.stage = Stage::Rejected;
                state.status.pending = None;
                return self.reject(state, key, error, now);
            }
        };
        state.status.pending = None;
        if valid.leaf.not_before < current.leaf.not_before {
            let error = CredError::Older {
                path: self.cert_path(),
                not_before: valid.leaf.not_before,
                current: current.leaf.not_before,
            };
            candidate.stage = Stage::Rejected;
            return self.reject(state, key, error, now);
        }
        let crl_path = valid.crl_path.clone().unwrap_or_else(|| self.cert_path());
        if let Err(error) = valid.crls.check_not_older(&current.trust.crls, &crl_path) {
            candidate.stage = Stage::Rejected;
            return self.reject(state, key, error, now);
        }
        let (anchors, trust_shrank) = current.trust.merge(&valid.anchors, self.trust_grace, now);
        let trust = match Trust::build(anchors, valid.crls, current.trust.scope, &self.provider) {
            Ok(t) => t,
            Err(error) => {
                candidate.stage = Stage::Rejected;
                return self.reject(state, key, error, now);
            }
        };
        let crls_changed = current.trust.crls_differ(&trust);
        self.swap(Credentials {
            revision: valid.hash.clone(),
            identity: valid.identity,
            leaf: valid.leaf,
            trust: Arc::new(trust),
        });
        state.status.last_applied = Some(now);
        state.status.last_reload_successful = true;
        if trust_shrank || crls_changed {
            self.trust_shrunk.send_modify(|g| *g += 1);
        }
        Applied::Applied {
            revision: valid.hash,
            trust_shrank,
        }
    }

    fn cert_path(&self) -> std::path::PathBuf {
        match &self.source {
            CredentialSource::Dir(d) => d.join(super::CERT_FILE),
            CredentialSource::Files { cert, .. } => cert.clone(),
        }
    }

    /// Requires every future revision's leaf to allow these roles, and checks
    /// the one in force now.
    pub fn require_roles(&self, server: bool, client: bool) -> Result<(), CredError> {
        super::check_usage(&self.current().leaf, &self.cert_path(), server, client)?;
        self.lock().roles = (server, client);
        Ok(())
    }

    /// Sets which certificates of a peer chain the CRLs judge, for the
    /// trust in force and every later one. Called once at start-up, before
    /// any route serves.
    pub fn set_crl_scope(&self, scope: CrlScope) -> Result<(), CredError> {
        let _state = self.lock();
        let current = self.current();
        if current.trust.scope == scope {
            return Ok(());
        }
        let trust = current.trust.with_scope(scope, &self.provider)?;
        self.swap(Credentials {
            revision: current.revision.clone(),
            identity: current.identity.clone(),
            leaf: current.leaf.clone(),
            trust: Arc::new(trust),
        });
        Ok(())
    }

    /// Makes a plain directory's changed content wait `max(window,
    /// SETTLE_WINDOW)` of stability before it is judged (set to the poll
    /// interval by the app).
    pub fn set_settle_window(&self, window: Duration) {
        self.lock().settle_window = window.max(SETTLE_WINDOW);
    }

    /// A plain directory (no `..data` link) and explicit files are written
    /// file by file and write by write, so a reading may be a write in
    /// progress.
    fn settles(&self) -> bool {
        match &self.source {
            CredentialSource::Dir(d) => !d.join(super::DATA_LINK).is_symlink(),
            CredentialSource::Files { .. } => true,
        }
    }

    fn reject(
        &self,
        state: &mut PollState,
        key: String,
        error: CredError,
        now: SystemTime,
    ) -> Applied {
        state.status.last_reload_successful = false;
        state.status.last_rejected_revision = Some(key.clone());
        state.status.last_rejected_error = Some(error.to_string());
        state.status.last_rejected_at = Some(now);
        Applied::Rejected {
            revision: key,
            error,
        }
    }

    fn swap(&self, creds: Credentials) {
        self.current.store(Arc::new(creds));
        self.generation.send_modify(|g| *g += 1);
    }
}

/// When content first seen at `first_seen` has been stable for `window`
/// (at once if that moment is beyond what the clock can represent).
fn settled_at(first_seen: SystemTime, window: Duration) -> SystemTime {
    first_seen.checked_add(window).unwrap_or(first_seen)
}

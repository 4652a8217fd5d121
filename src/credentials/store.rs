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
use super::{validate, CredError, CredentialSource};
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
}

/// The outcome of one poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// Same content as in force (or as already rejected).
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
    /// A plain directory's files did not validate together; they may be
    /// mid-write, so the verdict waits for the next poll.
    Settling,
}

/// How long a plain directory's files may disagree before the state is
/// called bad (at least this, or the poll interval if longer): writers
/// replace `tls.crt` and `tls.key` one after the other, and a file watch
/// can wake the poller between the two.
pub const SETTLE_WINDOW: Duration = Duration::from_secs(2);

#[derive(Debug)]
struct PollState {
    status: ReloadStatus,
    /// Hash of the last rejected revision, so it is reported once.
    rejected: Option<String>,
    /// A failing state of a non-atomic source and when it was first seen.
    settling: Option<(String, SystemTime)>,
    settle_window: Duration,
    /// The roles the store's routes play: (server, client).
    roles: (bool, bool),
}

impl Default for PollState {
    fn default() -> Self {
        PollState {
            status: ReloadStatus::default(),
            rejected: None,
            settling: None,
            settle_window: SETTLE_WINDOW,
            roles: (false, false),
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
        let rev = validate(&raw, &provider, now)?;
        let trust = Arc::new(Trust::build(Anchor::bundle(&rev.anchors), &provider)?);
        let creds = Credentials {
            revision: rev.hash,
            identity: rev.identity,
            leaf: rev.leaf,
            trust,
        };
        let state = PollState {
            status: ReloadStatus {
                last_poll: Some(now),
                last_applied: Some(now),
                ..Default::default()
            },
            ..Default::default()
        };
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

    /// Changes whenever the effective trust loses an anchor; routes re-verify
    /// their live connections then.
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

    /// Reads the source once and applies what changed. `atomic` sources
    /// (a `..data` link or explicit files) are judged at once; a plain
    /// directory's bad state is given one more poll to settle.
    pub fn poll(&self, now: SystemTime) -> Applied {
        let mut state = self.lock();
        state.status.last_poll = Some(now);
        let current = self.current();
        let retired = self.retire_due(&current, now);
        let current = self.current();
        let outcome = self.poll_source(&mut state, &current, now);
        match outcome {
            Applied::Unchanged if retired => Applied::TrustRetired,
            other => other,
        }
    }

    fn retire_due(&self, current: &Credentials, now: SystemTime) -> bool {
        let Some(anchors) = current.trust.expire(now) else {
            return false;
        };
        match Trust::build(anchors, &self.provider) {
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
    ) -> Applied {
        let settles = self.settles();
        let raw = match self.source.read() {
            Ok(raw) => raw,
            Err(error) => {
                let key = format!("read-error:{error}");
                return self.reject(state, key, error, settles, now);
            }
        };
        if raw.hash == current.revision {
            state.settling = None;
            return Applied::Unchanged;
        }
        if state.rejected.as_deref() == Some(raw.hash.as_str()) {
            return Applied::Unchanged;
        }
        let (server, client) = state.roles;
        let rev = match validate(&raw, &self.provider, now).and_then(|rev| {
            super::check_usage(&rev.leaf, &raw.cert.path, server, client).map(|()| rev)
        }) {
            Ok(rev) => rev,
            Err(error) => return self.reject(state, raw.hash, error, settles, now),
        };
        if rev.leaf.not_before < current.leaf.not_before {
            let error = CredError::Older {
                path: raw.cert.path.clone(),
                not_before: rev.leaf.not_before,
                current: current.leaf.not_before,
            };
            return self.reject(state, raw.hash, error, false, now);
        }
        let (anchors, trust_shrank) = current.trust.merge(&rev.anchors, self.trust_grace, now);
        let trust = match Trust::build(anchors, &self.provider) {
            Ok(t) => t,
            Err(error) => return self.reject(state, raw.hash, error, false, now),
        };
        self.swap(Credentials {
            revision: rev.hash.clone(),
            identity: rev.identity,
            leaf: rev.leaf,
            trust: Arc::new(trust),
        });
        state.settling = None;
        state.rejected = None;
        state.status.last_applied = Some(now);
        if trust_shrank {
            self.trust_shrunk.send_modify(|g| *g += 1);
        }
        Applied::Applied {
            revision: rev.hash,
            trust_shrank,
        }
    }

    /// Requires every future revision's leaf to allow these roles, and checks
    /// the one in force now.
    pub fn require_roles(&self, server: bool, client: bool) -> Result<(), CredError> {
        let path = match &self.source {
            CredentialSource::Dir(d) => d.join(super::CERT_FILE),
            CredentialSource::Files { cert, .. } => cert.clone(),
        };
        super::check_usage(&self.current().leaf, &path, server, client)?;
        self.lock().roles = (server, client);
        Ok(())
    }

    /// Lets a plain directory's files disagree for up to `max(window,
    /// SETTLE_WINDOW)` before the state is rejected (set to the poll
    /// interval by the app).
    pub fn set_settle_window(&self, window: Duration) {
        self.lock().settle_window = window.max(SETTLE_WINDOW);
    }

    /// A plain directory (no `..data` link) is written file by file, so one
    /// bad reading may be a write in progress.
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
        settles: bool,
        now: SystemTime,
    ) -> Applied {
        if state.rejected.as_deref() == Some(key.as_str()) {
            return Applied::Unchanged;
        }
        if settles {
            let since = match &state.settling {
                Some((k, since)) if *k == key => *since,
                _ => {
                    state.settling = Some((key, now));
                    return Applied::Settling;
                }
            };
            if now.duration_since(since).unwrap_or_default() < state.settle_window {
                return Applied::Settling;
            }
        }
        state.settling = None;
        state.rejected = Some(key.clone());
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

//! Moving a new revision of the source on, one poll at a time: a plain
//! directory's content settles first, a revision is parsed once, then
//! judged in time on every poll (not yet valid: pending; expired:
//! rejected, judged again), and applied or rejected; graced anchors retire
//! when due.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rustls_pki_types::CertificateDer;

use super::super::revocation::{classify_over, Crl, Dropped, DEFAULT_CRL_PRUNE_AGE};
use super::super::trust::{Anchor, Trust};
use super::super::validate::{parse, ParsedRevision};
use super::super::{CredError, CrlInfo, CrlSet};
use super::notices::{self, CrlNotice};
use super::{Applied, CredentialStore, Credentials, PendingRevision, ReloadStatus};

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
pub(super) struct PollState {
    pub(super) status: ReloadStatus,
    candidate: Option<Candidate>,
    pub(super) settle_window: Duration,
    /// `--crl-prune-age`: how long ago an entry a higher CRL number omits
    /// must have been revoked to count as pruned, not un-revoked.
    pub(super) crl_prune_age: Duration,
    /// The roles the store's routes play: (server, client).
    pub(super) roles: (bool, bool),
    /// How many revisions were parsed in full (a diagnostic).
    pub(super) parses: u64,
    /// How many times a parsed revision was judged in time (a diagnostic).
    pub(super) judgements: u64,
    /// The stale CRLs already reported (each is reported once).
    pub(super) stale_reported: Vec<CrlInfo>,
    /// CRL events not yet taken by the reloader.
    pub(super) notices: Vec<CrlNotice>,
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
            crl_prune_age: DEFAULT_CRL_PRUNE_AGE,
            roles: (false, false),
            parses: 0,
            judgements: 0,
            stale_reported: Vec::new(),
            notices: Vec::new(),
        }
    }
}

impl CredentialStore {
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
        let retired = self.refresh_trust(&mut state, &current, now);
        let current = self.current();
        let outcome = self.poll_source(&mut state, &current, now, force);
        match outcome {
            Applied::Unchanged if retired => Applied::TrustRetired,
            other => other,
        }
    }

    /// The next moment a poll could change something without the files
    /// changing: a graced anchor retiring, a pending CRL coming due, a
    /// settle window ending, a pending revision becoming valid. Only moments after the last poll count (that
    /// poll handled the earlier ones), so a poller that wakes for it never
    /// spins.
    pub fn next_due(&self) -> Option<SystemTime> {
        let trust = self.current().trust.clone();
        let retirement = trust.next_retirement();
        let crl = trust.crls.next_pending();
        let state = self.lock();
        let candidate = state.candidate.as_ref().and_then(|c| match &c.stage {
            Stage::Unjudged if self.settles() => {
                Some(settled_at(c.first_seen, state.settle_window))
            }
            _ => None,
        });
        let pending = state.status.pending.as_ref().map(|p| p.valid_from);
        let floor = state.status.last_poll;
        [retirement, crl, candidate, pending]
            .into_iter()
            .flatten()
            .filter(|t| floor.is_none_or(|polled| *t > polled))
            .min()
    }

    /// Re-judges the trust in force at `now` without new files: graced
    /// anchors whose grace ended retire (their CRLs are then ignored), and
    /// pending CRLs that came due are enforced. True when the trust changed.
    fn refresh_trust(&self, state: &mut PollState, current: &Credentials, now: SystemTime) -> bool {
        let expired = current.trust.expire(now);
        let crl_due = current.trust.crls.next_pending().is_some_and(|t| t <= now);
        if expired.is_none() && !crl_due {
            return false;
        }
        let retiring = expired.is_some();
        let anchors = expired.unwrap_or_else(|| current.trust.anchors.clone());
        let supplied = current.trust.crls.supplied();
        let inters = current.trust.intermediates.clone();
        let deny = current.trust.deny.clone();
        let (trust, dropped) = match self.trust_for(state, current, anchors, inters, &supplied, now)
        {
            Ok(t) => t,
            // A CRL that came due is older than the one in force: keep the
            // trust as it is (it is judged again on the next poll).
            Err(_) => return false,
        };
        let crls_changed = current.trust.crls_differ(&trust);
        state
            .notices
            .extend(notices::between(&current.trust.crls, &trust.crls, dropped));
        self.swap(Credentials {
            revision: current.revision.clone(),
            identity: current.identity.clone(),
            leaf: current.leaf.clone(),
            trust: Arc::new(trust.with_deny(deny)),
        });
        if retiring || crls_changed {
            self.trust_shrunk.send_modify(|g| *g += 1);
        }
        true
    }

    /// The trust over `anchors` and `intermediates` with `crls` classified
    /// against it and the CRLs in force; the anchors `current` had and
    /// these lack join the retired history.
    fn trust_for(
        &self,
        state: &PollState,
        current: &Credentials,
        anchors: Vec<Anchor>,
        intermediates: Arc<[CertificateDer<'static>]>,
        crls: &[Arc<Crl>],
        now: SystemTime,
    ) -> Result<(Trust, Vec<Dropped>), CredError> {
        let history = current.trust.history_after(&anchors, &intermediates, now);
        let bare = Trust::build(
            anchors,
            Arc::new(CrlSet::empty()),
            current.trust.scope,
            &self.provider,
        )?
        .with_issuers(intermediates, history.retired)
        .with_former(history.former);
        let in_force = &current.trust.crls;
        let classified = classify_over(
            crls,
            &bare.known(),
            now,
            in_force,
            state.crl_prune_age,
            &self.provider,
        )?;
        Ok((
            bare.with_crls(Arc::new(classified.set))?,
            classified.dropped,
        ))
    }

    fn poll_source(
        &self,
        state: &mut PollState,
        current: &Credentials,
        now: SystemTime,
        force: bool,
    ) -> Applied {
        let read = self.read_source();
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
        read: Result<super::super::RawRevision, CredError>,
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
                    super::super::check_usage(&rev.leaf, &raw.cert.path, server, client)?;
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
        state.judgements = state.judgements.saturating_add(1);
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
        let (anchors, trust_shrank) =
            current
                .trust
                .merge_anchors(revision_anchors(&valid), self.trust_grace, now);
        let inters = valid.intermediates.clone();
        let (trust, dropped) =
            match self.trust_for(state, current, anchors, inters, &valid.crl_list, now) {
                Ok(t) => t,
                Err(error) => {
                    candidate.stage = Stage::Rejected;
                    return self.reject(state, key, error, now);
                }
            };
        state
            .notices
            .extend(notices::between(&current.trust.crls, &trust.crls, dropped));
        let trust = trust.with_deny(valid.deny.clone());
        let crls_changed = current.trust.crls_differ(&trust) || current.trust.deny_differs(&trust);
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
}

/// Every anchor a revision brings: its own bundle's, then each federated
/// trust domain's, tagged with that domain.
fn revision_anchors(valid: &super::super::ValidRevision) -> Vec<Anchor> {
    let mut anchors = Anchor::bundle(&valid.anchors);
    for (td, bundle) in valid.federated.iter() {
        anchors.extend(Anchor::federated(td, bundle));
    }
    anchors
}

/// When content first seen at `first_seen` has been stable for `window`
/// (at once if that moment is beyond what the clock can represent).
fn settled_at(first_seen: SystemTime, window: Duration) -> SystemTime {
    first_seen.checked_add(window).unwrap_or(first_seen)
}

//! What one poll of the credential source reports ([`Applied`]) and what
//! `/status` and `/readyz` show of the poller ([`ReloadStatus`]).

use std::time::SystemTime;

use serde::Serialize;

use crate::credentials::CredError;

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

//! Credentials: read from a Secret-style directory or three files, validated
//! whole, and held in one store that every route's TLS config reads on each
//! handshake. Swapping the store's contents is how rotation happens.

pub(crate) mod agent_channel;
pub mod deny;
mod grace;
pub(crate) mod reload;
pub mod revocation;
mod source;
mod store;
mod trust;
mod validate;
pub mod workload;

use std::path::{Path, PathBuf};

pub use deny::{parse_deny, DenyCounts, DenyEntry, DenyError, DenyList, PeerFacts};
pub use revocation::{
    classify_crl_file, judge_chain, CrlInfo, CrlReport, CrlScope, CrlSet, CrlState, TrustInputs,
    Usage, Verdict, CLOCK_SKEW, MAX_CRLS,
};
pub use source::{
    content_hash, read_deny, read_file, CredentialSource, RawFile, RawRevision, CA_FILE, CERT_FILE,
    CRL_FILE, DATA_LINK, DENY_FILE, INTERMEDIATES_FILE, KEY_FILE,
};
pub use store::{
    Applied, CredentialStore, Credentials, CrlNotice, PendingRevision, ReloadStatus, NO_REVISION,
    SETTLE_WINDOW,
};
pub use trust::{Anchor, Trust};
pub use validate::{
    parse, parse_certs, parse_deny_file, parse_key, root_store, validate, verify_chain,
    FederatedBundle, ParsedRevision, ValidRevision,
};

/// Why a revision could not be used. Every variant names the file.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum CredError {
    #[error("{path}: cannot read: {detail}", path = .path.display())]
    Read { path: PathBuf, detail: String },
    #[error("{path}: file is empty", path = .path.display())]
    Empty { path: PathBuf },
    #[error("{path}: not valid PEM: {detail}", path = .path.display())]
    Pem { path: PathBuf, detail: String },
    #[error("{path}: {detail}", path = .path.display())]
    Parse { path: PathBuf, detail: String },
    #[error("{key}: private key does not match the certificate in {cert}", key = .key.display(), cert = .cert.display())]
    KeyMismatch { cert: PathBuf, key: PathBuf },
    #[error("{path}: certificate expired at {}", fmt_time(*.not_after), path = .path.display())]
    Expired { path: PathBuf, not_after: i64 },
    #[error("{path}: certificate not valid before {}", fmt_time(*.not_before), path = .path.display())]
    NotYetValid { path: PathBuf, not_before: i64 },
    #[error("{cert}: a certificate of the chain is not valid before {}", fmt_time(*.not_before), cert = .cert.display())]
    ChainNotYetValid { cert: PathBuf, not_before: i64 },
    #[error("{cert}: a certificate of the chain expired at {}", fmt_time(*.not_after), cert = .cert.display())]
    ChainExpired { cert: PathBuf, not_after: i64 },
    #[error("{cert}: certificate does not chain to {ca}: {detail}", cert = .cert.display(), ca = .ca.display())]
    Chain {
        cert: PathBuf,
        ca: PathBuf,
        detail: String,
    },
    #[error("{path}: certificate issued {} is older than the one in force (issued {}); refusing to go back", fmt_time(*.not_before), fmt_time(*.current), path = .path.display())]
    Older {
        path: PathBuf,
        not_before: i64,
        current: i64,
    },
    #[error("{path}: {detail}", path = .path.display())]
    CrlParse { path: PathBuf, detail: String },
    #[error("{path}: the CRL from {issuer} ({this}) verifies against no trusted key of that name, so it is not loaded: {detail}", path = .path.display())]
    CrlSignature {
        path: PathBuf,
        issuer: String,
        this: String,
        detail: String,
    },
    #[error("{path}: the CRL from {issuer} ({this}) is older than the one in force ({current}); refusing to go back", path = .path.display())]
    CrlOlder {
        path: PathBuf,
        issuer: String,
        this: String,
        current: String,
    },
    #[error("{path}: {error}", path = .path.display())]
    Deny { path: PathBuf, error: DenyError },
    #[error("{path}: certificate lacks the {usage} extended key usage that a {mode} route needs", path = .path.display())]
    Usage {
        path: PathBuf,
        usage: &'static str,
        mode: &'static str,
    },
}

impl CredError {
    /// True for a verdict that only holds at the time it was made (a
    /// certificate of the revision is not valid yet, or no longer): the same
    /// files may pass later (or, after a clock correction, earlier), so the
    /// store judges them again on every poll instead of caching the verdict.
    pub fn is_time_dependent(&self) -> bool {
        matches!(
            self,
            CredError::NotYetValid { .. }
                | CredError::Expired { .. }
                | CredError::ChainNotYetValid { .. }
                | CredError::ChainExpired { .. }
        )
    }

    /// When the failure is "not valid yet": the moment (epoch seconds) the
    /// failing certificate becomes valid.
    pub fn valid_from(&self) -> Option<i64> {
        match self {
            CredError::NotYetValid { not_before, .. }
            | CredError::ChainNotYetValid { not_before, .. } => Some(*not_before),
            _ => None,
        }
    }

    /// Adds the revision directory a `..data` read resolved to, so a log
    /// names both the link and the real directory.
    fn within(self, rev_dir: &Path) -> CredError {
        match self {
            CredError::Read { path, detail } => CredError::Read {
                detail: format!("{detail} (revision {})", rev_dir.display()),
                path,
            },
            other => other,
        }
    }
}

/// Checks that a leaf may act in the roles its routes need: serverAuth for
/// a server route, clientAuth for a client route (no EKU extension allows
/// both).
pub fn check_usage(
    leaf: &crate::identity::CertInfo,
    cert_path: &Path,
    server: bool,
    client: bool,
) -> Result<(), CredError> {
    let missing = if server && !leaf.server_auth {
        Some(("serverAuth", "server"))
    } else if client && !leaf.client_auth {
        Some(("clientAuth", "client"))
    } else {
        None
    };
    match missing {
        Some((usage, mode)) => Err(CredError::Usage {
            path: cert_path.to_path_buf(),
            usage,
            mode,
        }),
        None => Ok(()),
    }
}

/// Formats epoch seconds as RFC 3339 for messages.
pub fn fmt_time(secs: i64) -> String {
    humantime::format_rfc3339_seconds(crate::identity::epoch_to_time(secs)).to_string()
}

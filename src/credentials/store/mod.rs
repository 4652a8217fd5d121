//! The one credential store a source's routes share. Handshakes read it
//! lock-free (arc-swap); the poller replaces its contents whole.
//!
//! This file holds the store and what reads it; [`poll`] moves a new
//! revision on (settle, parse once, judge in time, apply or reject);
//! [`outcome`] is what a poll reports and `/status` shows.

mod notices;
mod outcome;
mod poll;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;
use tokio::sync::watch;

use super::trust::Trust;
use super::workload::Feed;
use super::{CredError, CredentialSource, CrlInfo, CrlScope, CrlSet};
use crate::identity::CertInfo;

pub use notices::CrlNotice;
pub use outcome::{Applied, PendingRevision, ReloadStatus};
use poll::PollState;
pub use poll::SETTLE_WINDOW;

/// One applied revision: identity and trust, swapped together.
#[derive(Debug)]
pub struct Credentials {
    /// Hex content hash of the files this came from.
    pub revision: String,
    pub identity: Arc<CertifiedKey>,
    pub leaf: CertInfo,
    pub trust: Arc<Trust>,
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
    /// What the Workload API client received (a Workload API source only).
    feed: Option<Arc<Feed>>,
}

/// The revision of a Workload API store that has received nothing yet.
pub const NO_REVISION: &str = "none";

impl CredentialStore {
    /// For the unit tests of every layer: a store over the directory `dir`,
    /// `leaf` and the CA that issued it written there first (no trust
    /// grace).
    #[cfg(test)]
    pub(crate) fn for_test(
        dir: &std::path::Path,
        leaf: &crate::pki::Issued,
        ca: &crate::pki::DevCa,
    ) -> Arc<CredentialStore> {
        crate::pki::write_secret_dir(dir, leaf, &ca.cert_pem).expect("write");
        CredentialStore::load(
            CredentialSource::Dir(dir.to_path_buf()),
            crate::tls::provider::crypto_provider(),
            Duration::ZERO,
        )
        .expect("load")
    }

    /// Reads and validates the source; any problem is an error naming the file.
    pub fn load(
        source: CredentialSource,
        provider: Arc<CryptoProvider>,
        trust_grace: Duration,
    ) -> Result<Arc<CredentialStore>, CredError> {
        if let CredentialSource::WorkloadApi { .. } = &source {
            return awaiting(source, provider, trust_grace);
        }
        let now = SystemTime::now();
        let raw = source.read()?;
        let rev = super::validate(&raw, &provider, now)?;
        let trust = Arc::new(rev.starting_trust(&provider, now)?);
        let notices = notices::between(&CrlSet::empty(), &trust.crls, Vec::new());
        let creds = Credentials {
            revision: rev.hash,
            identity: rev.identity,
            leaf: rev.leaf,
            trust,
        };
        let mut state = PollState::default();
        state.notices = notices;
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
            feed: None,
        }))
    }

    /// The Workload API feed, for a Workload API source.
    pub fn feed(&self) -> Option<Arc<Feed>> {
        self.feed.clone()
    }

    /// False while a Workload API store waits for its first good revision.
    pub fn has_revision(&self) -> bool {
        self.current().revision != NO_REVISION
    }

    /// Reads one revision of the source: a Workload API source's newest
    /// context, any other's files.
    fn read_source(&self) -> Result<super::RawRevision, CredError> {
        match self.feed.as_ref().and_then(|f| f.latest()) {
            Some(latest) => latest,
            None => self.source.read(),
        }
    }

    /// The credentials in force. Cheap; called on every handshake.
    pub fn current(&self) -> Arc<Credentials> {
        self.current.load_full()
    }

    /// Where this store reads from.
    pub fn source(&self) -> &CredentialSource {
        &self.source
    }

    /// `--trust-grace`: how long an anchor dropped from `ca.crt` stays
    /// trusted (what `check --against` previews).
    pub fn trust_grace(&self) -> Duration {
        self.trust_grace
    }

    /// The crypto provider credentials were validated with.
    pub fn provider(&self) -> &Arc<CryptoProvider> {
        &self.provider
    }

    /// A copy of what the poller has seen.
    pub fn status(&self) -> ReloadStatus {
        self.lock().status.clone()
    }

    /// Changes whenever the effective trust loses an anchor, or the CRLs
    /// or the deny-list in force change; routes re-verify their live
    /// connections then.
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

    /// The CRLs in force that are past their nextUpdate at `now` and were
    /// not returned before: each stale CRL is reported once.
    pub fn newly_stale_crls(&self, now: SystemTime) -> Vec<CrlInfo> {
        let now = crate::identity::time_to_epoch(now);
        let current = self.current();
        let mut state = self.lock();
        let in_force: Vec<&CrlInfo> = current.trust.crls.infos().collect();
        state.stale_reported.retain(|c| in_force.contains(&c));
        let mut fresh = Vec::new();
        for crl in current.trust.crls.stale(now) {
            if !state.stale_reported.contains(crl) {
                state.stale_reported.push(crl.clone());
                fresh.push(crl.clone());
            }
        }
        fresh
    }

    /// What happened to the CRLs since the last call (each reported once):
    /// the reloader WARNs and counts them.
    pub fn take_crl_notices(&self) -> Vec<CrlNotice> {
        std::mem::take(&mut self.lock().notices)
    }

    /// How many revisions were parsed in full since start-up. A revision
    /// waiting to become valid is parsed once and only re-judged in time
    /// on later polls; tests use this to prove it.
    pub fn parses(&self) -> u64 {
        self.lock().parses
    }

    /// How many times a parsed revision was judged (its chain verified at a
    /// moment) since start-up. A revision refused for a reason time cannot
    /// change is judged once; one refused for a time-dependent reason is
    /// judged again on every poll; tests use this to prove it.
    pub fn judgements(&self) -> u64 {
        self.lock().judgements
    }

    fn cert_path(&self) -> std::path::PathBuf {
        match &self.source {
            CredentialSource::Dir(d) => d.join(super::CERT_FILE),
            CredentialSource::DirPair { identity, .. } => identity.join(super::CERT_FILE),
            CredentialSource::Files { cert, .. } => cert.clone(),
            CredentialSource::WorkloadApi { endpoint, .. } => endpoint.into(),
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

    /// `--crl-prune-age`: a serial a higher CRL number omits counts as
    /// pruned only when revoked longer ago than this; else it is an
    /// un-revocation.
    pub fn set_crl_prune_age(&self, age: Duration) {
        self.lock().crl_prune_age = age;
    }

    /// A plain directory (no `..data` link) and explicit files are written
    /// file by file and write by write, so a reading may be a write in
    /// progress.
    fn settles(&self) -> bool {
        match &self.source {
            CredentialSource::Dir(d) => !d.join(super::DATA_LINK).is_symlink(),
            CredentialSource::DirPair { identity, trust } => {
                !identity.join(super::DATA_LINK).is_symlink()
                    || !trust.join(super::DATA_LINK).is_symlink()
            }
            CredentialSource::Files { .. } => true,
            // Each context arrives whole.
            CredentialSource::WorkloadApi { .. } => false,
        }
    }

    fn swap(&self, creds: Credentials) {
        self.current.store(Arc::new(creds));
        self.generation.send_modify(|g| *g += 1);
    }
}

/// A Workload API store before its first context: an identity nobody can
/// accept (self-signed, expired since 1970) and no trust anchor, so every
/// handshake fails closed and `/readyz` says what it waits for.
fn awaiting(
    source: CredentialSource,
    provider: Arc<CryptoProvider>,
    trust_grace: Duration,
) -> Result<Arc<CredentialStore>, CredError> {
    let fail = |detail: String| CredError::Parse {
        path: source.to_string().into(),
        detail,
    };
    let (der, key) = placeholder_identity().map_err(|e| fail(e.to_string()))?;
    let leaf = CertInfo::parse(&der).map_err(|e| fail(e.to_string()))?;
    let identity =
        CertifiedKey::from_der(vec![der], key, &provider).map_err(|e| fail(e.to_string()))?;
    let trust = Trust::build(
        Vec::new(),
        Arc::new(CrlSet::empty()),
        CrlScope::default(),
        &provider,
    )?;
    let creds = Credentials {
        revision: NO_REVISION.to_string(),
        identity: Arc::new(identity),
        leaf,
        trust: Arc::new(trust),
    };
    Ok(Arc::new(CredentialStore {
        source,
        provider,
        trust_grace,
        current: ArcSwap::from_pointee(creds),
        state: Mutex::new(PollState::default()),
        trust_shrunk: watch::channel(0).0,
        generation: watch::channel(0).0,
        feed: Some(Arc::new(Feed::default())),
    }))
}

fn placeholder_identity() -> Result<
    (
        rustls_pki_types::CertificateDer<'static>,
        rustls_pki_types::PrivateKeyDer<'static>,
    ),
    rcgen::Error,
> {
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    params.not_before = time::OffsetDateTime::UNIX_EPOCH;
    params.not_after = time::OffsetDateTime::UNIX_EPOCH + time::Duration::DAY;
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        "no SVID from the Workload API yet",
    );
    params.extended_key_usages = vec![
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let cert = params.self_signed(&key)?;
    let key = rustls_pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    Ok((cert.der().clone(), key))
}

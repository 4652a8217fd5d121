//! The chain-check memo of a verifier: the last peer chain found good,
//! against which trust and in which trust domain, so a peer reconnecting
//! with the same certificate skips the chain's signature checks.

use std::sync::{Arc, Mutex};

use rustls::Error;
use rustls_pki_types::{CertificateDer, UnixTime};

use crate::credentials::{Trust, Usage};
use crate::identity::CertInfo;

/// The last peer certificate a policy found chaining to the trust. A
/// sidecar's peer reconnects with the same certificate every time, so the
/// chain check (a signature verification, a third of a handshake's
/// verification work) is skipped when the very same DER comes back while
/// the very same trust is in force (any reload, CRL change or retirement
/// swaps in a new `Arc<Trust>`, and the CRLs live in the trust, so the
/// revocation state is part of what is compared; the one kept here pins the old allocation, so the pointer
/// comparison cannot be fooled) and `now` is inside its validity. The
/// handshake's own signature (CertificateVerify) and the SAN check always
/// run. Only leaves issued directly by an anchor are remembered.
#[derive(Debug, Default)]
pub(super) struct LastVerified(Mutex<Option<Remembered>>);

#[derive(Debug)]
struct Remembered {
    der: Vec<u8>,
    trust: Arc<Trust>,
    /// The trust domain whose root store the chain was built against.
    domain: Option<String>,
    not_before: u64,
    not_after: u64,
}

impl LastVerified {
    fn covers(
        &self,
        ee: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        trust: &Arc<Trust>,
        domain: Option<&str>,
        now: UnixTime,
    ) -> bool {
        let Ok(last) = self.0.lock() else {
            return false;
        };
        last.as_ref().is_some_and(|r| {
            intermediates.is_empty()
                && Arc::ptr_eq(&r.trust, trust)
                && r.domain.as_deref() == domain
                && r.der == ee.as_ref()
                && (r.not_before..=r.not_after).contains(&now.as_secs())
        })
    }

    /// The chain check of a handshake or a re-verification: trust's full
    /// judgement, skipped when this very chain passed against this very
    /// trust last time. Each call logs at DEBUG which of the two it was
    /// (`chain=verified` or `chain=remembered`): the shortcut's saving is
    /// observable, and tests count it.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn check(
        &self,
        trust: &Arc<Trust>,
        domain: Option<&str>,
        ee: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
        info: Option<&CertInfo>,
        usage: Usage,
    ) -> Result<(), Error> {
        if self.covers(ee, intermediates, trust, domain, now) {
            tracing::debug!(chain = "remembered", "peer chain judged");
            return Ok(());
        }
        trust.verify_peer_in(domain, ee, intermediates, now, usage)?;
        self.record(ee, intermediates, trust, domain, info);
        tracing::debug!(chain = "verified", "peer chain judged");
        Ok(())
    }

    fn record(
        &self,
        ee: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        trust: &Arc<Trust>,
        domain: Option<&str>,
        info: Option<&CertInfo>,
    ) {
        let Some(info) = info.filter(|_| intermediates.is_empty()) else {
            return;
        };
        if let Ok(mut last) = self.0.lock() {
            *last = Some(Remembered {
                der: ee.as_ref().to_vec(),
                trust: trust.clone(),
                domain: domain.map(str::to_string),
                not_before: u64::try_from(info.not_before).unwrap_or(u64::MAX),
                not_after: u64::try_from(info.not_after).unwrap_or(0),
            });
        }
    }
}

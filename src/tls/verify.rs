//! Peer verification: the trust's one peer judgement
//! ([`Trust::verify_peer`]: webpki's chain checks, then revocation on the
//! path built), wrapped with the role SAN check, both reading the trust in
//! force at the moment of the handshake.
//! Failing inside the handshake makes the peer get a TLS alert rather than a
//! silent close.

use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, Error, SignatureScheme};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

use super::chain_memo::LastVerified;
use super::spiffe::{check_trust_domain, federated_peer_allowed, PeerDomain};
use crate::credentials::{CredentialStore, Trust, Usage};
use crate::identity::{CertInfo, SanPolicy};

/// What a verifier learned about the peer during one handshake, for the
/// refusal log line and the live-connection registry.
#[derive(Debug, Default, Clone)]
pub struct PeerReport {
    /// The peer's leaf, when it sent one that parsed.
    pub cert: Option<CertInfo>,
    /// The chain as sent, kept so the connection can be re-verified when the
    /// trust shrinks.
    pub chain: Vec<CertificateDer<'static>>,
    /// The trust the chain was found good against, when it was.
    pub verified_with: Option<Arc<Trust>>,
    /// What the session ticketer saw in this handshake (`--resumption`).
    pub ticket: TicketNote,
    /// The server name the client asked for (server side; noted by the
    /// certificate resolver, which rustls calls on resumed handshakes too).
    pub sni: Option<String>,
}

/// What the session ticketer ([`crate::tls::resumption`]) saw during one
/// handshake.
#[derive(Debug, Default, Clone)]
pub struct TicketNote {
    /// The revision whose keys decrypted the ticket the peer offered.
    pub(crate) resumed_under: Option<Arc<crate::credentials::Credentials>>,
    /// That ticket's end (epoch seconds).
    pub(crate) resumed_until: Option<u64>,
    /// The end given to the tickets issued in this handshake, which the
    /// ticketer's `lifetime()` advertises.
    pub(crate) issued_until: Option<u64>,
}

impl PeerReport {
    /// The report of a resumed session: no verifier ran, so the peer is
    /// what rustls stored with the session (`peer_certificates()`), judged
    /// by nothing yet.
    pub fn resumed(chain: Vec<CertificateDer<'static>>) -> PeerReport {
        PeerReport {
            cert: chain.first().and_then(|c| CertInfo::parse(c).ok()),
            chain,
            ..PeerReport::default()
        }
    }
}

tokio::task_local! {
    static REPORT: Arc<Mutex<PeerReport>>;
}

/// Runs a handshake future with a slot the verifiers fill in. rustls calls
/// the verifier synchronously while the handshake future is polled, so a
/// task-local reaches it without per-connection configs.
pub async fn with_report<F: std::future::Future>(fut: F) -> (F::Output, PeerReport) {
    let slot = Arc::new(Mutex::new(PeerReport::default()));
    let out = REPORT.scope(slot.clone(), fut).await;
    // Taken, not cloned: the scope has ended, so nothing else reads the
    // slot, and the chain moves on to the registry as its one copy of ours.
    let report = slot
        .lock()
        .map(|mut r| std::mem::take(&mut *r))
        .unwrap_or_default();
    (out, report)
}

/// Runs `f` on the report of the handshake being polled, if any: the
/// session ticketer reads and notes what it needs there.
pub(crate) fn with_current_report<R>(f: impl FnOnce(&mut PeerReport) -> R) -> Option<R> {
    REPORT
        .try_with(|slot| slot.lock().ok().map(|mut r| f(&mut r)))
        .ok()
        .flatten()
}

fn note_peer(
    end_entity: &CertificateDer<'_>,
    intermediates: &[CertificateDer<'_>],
) -> Option<CertInfo> {
    let info = CertInfo::parse(end_entity).ok();
    let _ = REPORT.try_with(|slot| {
        if let Ok(mut r) = slot.lock() {
            r.cert = info.clone();
            r.chain = std::iter::once(end_entity)
                .chain(intermediates)
                .map(|c| c.clone().into_owned())
                .collect();
        }
    });
    info
}

/// Records, in a handshake's report, the trust its chain passed against
/// (outside a handshake, e.g. when re-verifying, there is no report).
fn note_verified(trust: Arc<Trust>) {
    let _ = REPORT.try_with(|slot| {
        if let Ok(mut r) = slot.lock() {
            r.verified_with = Some(trust);
        }
    });
}

fn unix_time(t: SystemTime) -> UnixTime {
    UnixTime::since_unix_epoch(t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default())
}

/// Splits a stored chain and re-runs a policy's check on it.
fn reverify(
    chain: &[CertificateDer<'static>],
    now: SystemTime,
    check: impl Fn(
        &CertificateDer<'_>,
        &[CertificateDer<'_>],
        UnixTime,
        Option<&CertInfo>,
    ) -> Result<(), Error>,
) -> Result<(), Error> {
    let (ee, rest) = chain.split_first().ok_or(Error::NoCertificatesPresented)?;
    check(ee, rest, unix_time(now), CertInfo::parse(ee).ok().as_ref())
}

fn check_san(policy: &SanPolicy, info: Option<&CertInfo>) -> Result<(), Error> {
    match info {
        Some(info) if policy.allows(info) => Ok(()),
        _ => Err(Error::InvalidCertificate(CertificateError::NotValidForName)),
    }
}

/// A route's own judgement of a peer leaf whose chain already passed the
/// trust: an allowed SAN (`--allow-san`/`--expect-san`, a `bad_san`
/// refusal), then the `--*-spki-sha256` pins (`pin_mismatch`). Every
/// handshake and re-verification runs it; `check --config … --against`
/// runs it on a live connection's leaf with a candidate configuration's
/// policy.
pub fn check_route_policy(
    sans: &SanPolicy,
    pins: &[[u8; 32]],
    ee: &CertificateDer<'_>,
    info: Option<&CertInfo>,
) -> Result<(), Error> {
    check_san(sans, info)?;
    crate::identity::pin::check(pins, ee.as_ref())
}

/// [`check_route_policy`] for a peer of `domain`: a federated peer must be
/// named by a `spiffe://` allow entry (`bad_san` otherwise), then pinned
/// like any other.
fn check_peer_policy(
    sans: &SanPolicy,
    pins: &[[u8; 32]],
    ee: &CertificateDer<'_>,
    info: Option<&CertInfo>,
    domain: &PeerDomain,
) -> Result<(), Error> {
    match domain {
        PeerDomain::Local => check_route_policy(sans, pins, ee, info),
        PeerDomain::Federated(_) => {
            if !info.is_some_and(|i| federated_peer_allowed(sans, i)) {
                return Err(Error::InvalidCertificate(CertificateError::NotValidForName));
            }
            crate::identity::pin::check(pins, ee.as_ref())
        }
    }
}

/// A peer's handshake signature (CertificateVerify, or the TLS 1.2 key
/// exchange's), checked by rustls's own code with the provider's algorithms.
fn tls12_signature(
    provider: &CryptoProvider,
    message: &[u8],
    cert: &CertificateDer<'_>,
    dss: &DigitallySignedStruct,
) -> Result<HandshakeSignatureValid, Error> {
    rustls::crypto::verify_tls12_signature(
        message,
        cert,
        dss,
        &provider.signature_verification_algorithms,
    )
}

/// The TLS 1.3 CertificateVerify signature, checked the same way.
fn tls13_signature(
    provider: &CryptoProvider,
    message: &[u8],
    cert: &CertificateDer<'_>,
    dss: &DigitallySignedStruct,
) -> Result<HandshakeSignatureValid, Error> {
    rustls::crypto::verify_tls13_signature(
        message,
        cert,
        dss,
        &provider.signature_verification_algorithms,
    )
}

/// The signature schemes a peer may sign its handshake with.
fn verify_schemes(provider: &CryptoProvider) -> Vec<SignatureScheme> {
    provider
        .signature_verification_algorithms
        .supported_schemes()
}

/// The signature checks are the same for both directions. The macro only
/// forwards to the named functions above: cargo-mutants does not mutate
/// inside a macro's expansion, so no decision lives here.
macro_rules! signature_methods {
    () => {
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            tls12_signature(&self.judge.provider, message, cert, dss)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            tls13_signature(&self.judge.provider, message, cert, dss)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            verify_schemes(&self.judge.provider)
        }
    };
}

/// What both directions judge a peer's chain by: the trust in force in
/// the store, a SAN policy, SPKI pins and the chain memo, for one key
/// usage. One judgement for the handshake and live re-verification alike.
#[derive(Debug)]
pub struct PeerJudge {
    store: Arc<CredentialStore>,
    sans: SanPolicy,
    /// `--*-spki-sha256` pins; empty: no pinning.
    pins: Vec<[u8; 32]>,
    provider: Arc<CryptoProvider>,
    last: LastVerified,
    usage: Usage,
}

impl PeerJudge {
    fn new(
        store: Arc<CredentialStore>,
        sans: SanPolicy,
        pins: Vec<[u8; 32]>,
        usage: Usage,
    ) -> Self {
        let provider = store.provider().clone();
        PeerJudge {
            store,
            sans,
            pins,
            provider,
            last: LastVerified::default(),
            usage,
        }
    }

    /// Re-checks a live connection's chain against the trust in force now.
    pub fn reverify(
        &self,
        chain: &[CertificateDer<'static>],
        now: SystemTime,
    ) -> Result<(), Error> {
        reverify(chain, now, |ee, rest, now, info| {
            self.check(ee, rest, now, info)
        })
    }

    fn check(
        &self,
        ee: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
        info: Option<&CertInfo>,
    ) -> Result<(), Error> {
        let creds = self.store.current();
        let domain = check_trust_domain(&self.store, &creds, info)?;
        let trust = creds.trust.clone();
        self.last.check(
            &trust,
            domain.roots(),
            ee,
            intermediates,
            now,
            info,
            self.usage,
        )?;
        check_peer_policy(&self.sans, &self.pins, ee, info, &domain)?;
        note_verified(trust);
        Ok(())
    }
}

/// Server-side: verifies client certificates (chain to the trust in force,
/// clientAuth usage, an allowed role SAN).
#[derive(Debug)]
pub struct ClientCertPolicy {
    judge: PeerJudge,
}

impl ClientCertPolicy {
    pub fn new(store: Arc<CredentialStore>, allowed: SanPolicy, pins: Vec<[u8; 32]>) -> Self {
        ClientCertPolicy {
            judge: PeerJudge::new(store, allowed, pins, Usage::ClientAuth),
        }
    }
}

/// Its judge's `reverify`, as the routes call it.
impl std::ops::Deref for ClientCertPolicy {
    type Target = PeerJudge;
    fn deref(&self) -> &PeerJudge {
        &self.judge
    }
}

impl ClientCertVerifier for ClientCertPolicy {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        // The trust can change under us; advertising no hints keeps every
        // client sending its certificate regardless.
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        let info = note_peer(end_entity, intermediates);
        self.judge
            .check(end_entity, intermediates, now, info.as_ref())?;
        // The handshake is not over yet (CertificateVerify and Finished
        // follow); this marks the moment the chain was judged.
        tracing::debug!(
            subject = %crate::log::clean(info.as_ref().map(|i| i.subject.as_str()).unwrap_or("")),
            "client certificate chain verified"
        );
        Ok(ClientCertVerified::assertion())
    }

    signature_methods!();
}

/// Client-side: verifies the remote sidecar's certificate (chain to the
/// trust in force, serverAuth usage, one of the expected SANs). The SAN check
/// replaces hostname verification so URI SANs (SPIFFE IDs) work.
#[derive(Debug)]
pub struct ServerCertPolicy {
    judge: PeerJudge,
}

impl ServerCertPolicy {
    pub fn new(store: Arc<CredentialStore>, expected: SanPolicy, pins: Vec<[u8; 32]>) -> Self {
        ServerCertPolicy {
            judge: PeerJudge::new(store, expected, pins, Usage::ServerAuth),
        }
    }
}

/// Its judge's `reverify`, as the routes call it.
impl std::ops::Deref for ServerCertPolicy {
    type Target = PeerJudge;
    fn deref(&self) -> &PeerJudge {
        &self.judge
    }
}

impl ServerCertVerifier for ServerCertPolicy {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        let info = note_peer(end_entity, intermediates);
        self.judge
            .check(end_entity, intermediates, now, info.as_ref())?;
        Ok(ServerCertVerified::assertion())
    }

    signature_methods!();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::{DevCa, LeafSpec, Role};

    /// A resumed session's report is the chain rustls stored with it, its
    /// leaf parsed, and nothing judged yet: admission judges it from there.
    #[test]
    fn a_resumed_report_carries_the_stored_chain_unjudged() {
        let ca = DevCa::new("A", 1).unwrap();
        let spec = LeafSpec::dns("replica-0.test.svc", Role::Server, 1);
        let chain = vec![ca.issue(&spec).unwrap().cert_der];
        let report = PeerReport::resumed(chain.clone());
        assert_eq!(report.chain, chain);
        let cert = report.cert.expect("the leaf parsed");
        assert_eq!(cert.sans(), vec!["replica-0.test.svc".to_string()]);
        assert!(report.verified_with.is_none());
    }
}

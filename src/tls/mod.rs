//! TLS configs for the two route modes. Each is built once per route; the
//! identity and trust inside are read from the credential store on every
//! handshake through [`resolve`] and [`verify`].
//!
//! Session resumption is off unless a route asks for it (`--resumption`,
//! [`resumption`]): every connection then performs a full handshake, so the
//! peer chain is always checked against the trust and SAN policy in force.

mod chain_memo;
pub mod provider;
pub(crate) mod resolve;
pub(crate) mod resumption;
mod spiffe;
pub mod stream;
pub(crate) mod verify;

use std::sync::Arc;

use rustls::server::NoServerSessionStorage;
use rustls::{ClientConfig, ServerConfig, SupportedProtocolVersion};

use crate::credentials::CredentialStore;
use crate::identity::SanPolicy;
use resolve::IdentityResolver;
use verify::{ClientCertPolicy, ServerCertPolicy};

/// The lowest TLS version a route offers or accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsVersion {
    Tls12,
    Tls13,
}

impl std::str::FromStr for TlsVersion {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "1.2" => Ok(TlsVersion::Tls12),
            "1.3" => Ok(TlsVersion::Tls13),
            other => Err(format!(
                "unsupported TLS version {other:?} (use 1.2 or 1.3)"
            )),
        }
    }
}

/// What a route asks of its peer beyond the CA and the SAN.
#[derive(Debug, Clone, Default)]
pub struct PeerOptions {
    /// ALPN protocols accepted (server) or offered (client).
    pub alpn: Vec<Vec<u8>>,
    /// SHA-256 pins of the peer's SubjectPublicKeyInfo.
    pub spki_pins: Vec<[u8; 32]>,
    /// TLS 1.3 session resumption (`--resumption`).
    pub resumption: bool,
}

fn versions(min: TlsVersion) -> &'static [&'static SupportedProtocolVersion] {
    static ONLY_13: &[&SupportedProtocolVersion] = &[&rustls::version::TLS13];
    static BOTH: &[&SupportedProtocolVersion] = &[&rustls::version::TLS13, &rustls::version::TLS12];
    match min {
        TlsVersion::Tls13 => ONLY_13,
        TlsVersion::Tls12 => BOTH,
    }
}

/// The config a `server` route accepts with, and its verifier (kept for
/// re-verifying live connections).
pub fn server_config(
    store: &Arc<CredentialStore>,
    allowed: SanPolicy,
    min: TlsVersion,
    peer: &PeerOptions,
) -> Result<(Arc<ServerConfig>, Arc<ClientCertPolicy>), rustls::Error> {
    let policy = Arc::new(ClientCertPolicy::new(
        store.clone(),
        allowed,
        peer.spki_pins.clone(),
    ));
    let mut cfg = ServerConfig::builder_with_provider(store.provider().clone())
        .with_protocol_versions(versions(min))?
        .with_client_cert_verifier(policy.clone())
        .with_cert_resolver(Arc::new(IdentityResolver::new(store.clone())));
    // No session-ID cache (TLS 1.2 resumption) and no stateful TLS 1.3
    // sessions, hence never 0-RTT (rustls offers it only with those).
    cfg.session_storage = Arc::new(NoServerSessionStorage {});
    cfg.send_tls13_tickets = 0;
    if peer.resumption {
        cfg.ticketer = Arc::new(resumption::RevisionTicketer::new(store.clone()));
        cfg.send_tls13_tickets = resumption::TICKETS_PER_HANDSHAKE;
    }
    // A client offering protocols none of which is here gets a
    // no_application_protocol alert; one offering none is accepted.
    cfg.alpn_protocols = peer.alpn.clone();
    Ok((Arc::new(cfg), policy))
}

/// The configs a `client` route connects with (one, or one per revision
/// under `--resumption`), and the verifier live connections are re-checked
/// with.
pub fn client_config(
    store: &Arc<CredentialStore>,
    expected: SanPolicy,
    min: TlsVersion,
    peer: &PeerOptions,
) -> Result<(resumption::ClientTls, Arc<ServerCertPolicy>), rustls::Error> {
    let (cfg, policy) = one_client_config(store, expected.clone(), min, peer)?;
    if !peer.resumption {
        return Ok((resumption::ClientTls::Fixed(cfg), policy));
    }
    let (store2, peer) = (store.clone(), peer.clone());
    let build: resumption::BuildClient = Box::new(move || {
        one_client_config(&store2, expected.clone(), min, &peer).map(|(cfg, _)| cfg)
    });
    let resuming = resumption::ResumingClient::new(store.clone(), build)?;
    Ok((resumption::ClientTls::Resuming(Box::new(resuming)), policy))
}

/// One client config, with its own verifier (rustls resumes a session
/// only with the verifier that stored it) and, under `--resumption`, its
/// own session cache.
fn one_client_config(
    store: &Arc<CredentialStore>,
    expected: SanPolicy,
    min: TlsVersion,
    peer: &PeerOptions,
) -> Result<(Arc<ClientConfig>, Arc<ServerCertPolicy>), rustls::Error> {
    let policy = Arc::new(ServerCertPolicy::new(
        store.clone(),
        expected,
        peer.spki_pins.clone(),
    ));
    let mut cfg = ClientConfig::builder_with_provider(store.provider().clone())
        .with_protocol_versions(versions(min))?
        .dangerous()
        .with_custom_certificate_verifier(policy.clone())
        .with_client_cert_resolver(Arc::new(IdentityResolver::new(store.clone())));
    cfg.resumption = resumption::client_resumption(peer.resumption);
    cfg.alpn_protocols = peer.alpn.clone();
    Ok((Arc::new(cfg), policy))
}

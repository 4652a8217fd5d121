//! TLS configs for the two route modes. Each is built once per route; the
//! identity and trust inside are read from the credential store on every
//! handshake through [`resolve`] and [`verify`].
//!
//! Session resumption is disabled in both directions: every connection
//! performs a full handshake, so the peer chain is always checked against
//! the trust and SAN policy in force (a resumed session could otherwise
//! outlive the trust that authenticated it).

pub mod resolve;
pub mod verify;

use std::sync::Arc;

use rustls::client::Resumption;
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
    cfg.session_storage = Arc::new(NoServerSessionStorage {});
    cfg.send_tls13_tickets = 0;
    // A client offering protocols none of which is here gets a
    // no_application_protocol alert; one offering none is accepted.
    cfg.alpn_protocols = peer.alpn.clone();
    Ok((Arc::new(cfg), policy))
}

/// The config a `client` route connects with, and its verifier.
pub fn client_config(
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
    cfg.resumption = Resumption::disabled();
    cfg.alpn_protocols = peer.alpn.clone();
    Ok((Arc::new(cfg), policy))
}

//! Certificate resolvers that hand rustls whatever identity the store holds
//! at the moment of each handshake, so a swap needs no config rebuild.

use std::sync::Arc;

use rustls::client::ResolvesClientCert;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::SignatureScheme;

use crate::credentials::CredentialStore;

/// Resolves our own identity from the shared store (both directions).
#[derive(Debug)]
pub struct IdentityResolver {
    store: Arc<CredentialStore>,
}

impl IdentityResolver {
    pub fn new(store: Arc<CredentialStore>) -> Self {
        IdentityResolver { store }
    }
}

impl ResolvesServerCert for IdentityResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        // The driver's unbuffered server connection does not expose the
        // SNI; the PROXY header (`--proxy-protocol`) carries it.
        crate::tls::verify::with_current_report(|r| {
            r.sni = hello.server_name().map(str::to_string);
        });
        Some(self.store.current().identity.clone())
    }
}

impl ResolvesClientCert for IdentityResolver {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.store.current().identity.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

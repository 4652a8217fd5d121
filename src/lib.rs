//! mtls-sidecar: a transparent mutual-TLS sidecar proxy.
//!
//! Data flows one way through the modules:
//! [`config`] → [`credentials`] (loaded, validated, swapped atomically) →
//! [`tls`] (configs that read the current credentials on every handshake) →
//! [`route`] (accept, handshake in its own task) → [`forward`] (copy, flush,
//! half-close), with [`metrics`] observing all of it.

pub mod addr;
pub mod admin;
pub mod app;
pub mod cli;
pub mod config;
pub mod conn;
pub mod credentials;
pub mod fdlimit;
pub mod forward;
pub mod identity;
pub mod logging;
pub mod logsafe;
pub mod memtrim;
pub mod metrics;
pub mod ops;
pub mod pending;
pub mod pin;
pub mod preauth;
pub mod process_metrics;
pub mod proxy_header;
pub mod reason;
pub mod reload;
pub mod resident;
pub mod route;
pub mod sandbox;
pub mod shared;
pub mod status;
pub mod systemd;
pub mod tls;
pub mod transparent;

/// The crypto provider every TLS config and verifier in the process uses:
/// aws-lc-rs, key exchange preferring the post-quantum hybrid X25519MLKEM768,
/// then X25519 and P-256.
pub fn crypto_provider() -> std::sync::Arc<rustls::crypto::CryptoProvider> {
    use rustls::crypto::aws_lc_rs::{self, kx_group};
    std::sync::Arc::new(rustls::crypto::CryptoProvider {
        kx_groups: vec![
            kx_group::X25519MLKEM768,
            kx_group::X25519,
            kx_group::SECP256R1,
        ],
        ..aws_lc_rs::default_provider()
    })
}

//! mtls-sidecar: a transparent mutual-TLS sidecar proxy.
//!
//! Data flows one way through the modules:
//! [`config`] → [`credentials`] (loaded, validated, swapped atomically) →
//! [`tls`] (configs that read the current credentials on every handshake) →
//! [`proxy`] (accept, handshake in its own task, copy, flush, half-close),
//! with [`metrics`] observing all of it.
//!
//! Imports point down this order (`tests/repo/layers.rs` checks it):
//! [`ops`] (the operator's tools) → [`app`] (one process) → [`admin`]
//! (what observers see) → [`cli`] → [`config`] (what the user asked) →
//! [`sandbox`] → [`proxy`] (the data path) → [`tls`] → [`credentials`] →
//! [`metrics`] and [`logging`] → [`logsafe`] → [`reason`] → the leaves:
//! [`identity`], [`process`] (fd limit, allocator trimming, start-up
//! pages, process metrics, systemd, the off switches) and [`crypto`] (which
//! AES-GCM protects TLS 1.3 records) → [`copy`] (bulk copies in pieces).

pub mod admin;
pub mod app;
pub mod cli;
pub mod config;
pub mod copy;
pub mod credentials;
pub mod crypto;
pub mod identity;
pub mod logging;
pub mod logsafe;
pub mod metrics;
pub mod ops;
pub mod process;
pub mod proxy;
pub mod reason;
pub mod sandbox;
pub mod tls;

/// The crypto provider every TLS config and verifier in the process uses:
/// aws-lc-rs, key exchange preferring the post-quantum hybrid X25519MLKEM768,
/// then X25519, P-256 and P-384.
///
/// The order is our preference; a client sends key shares for the first
/// group only (plus X25519, which the hybrid contains), so the later groups
/// grow `supported_groups` by two bytes each, never the key shares: a peer
/// that takes only P-256 or P-384 costs one HelloRetryRequest. P-384 is
/// there for CNSA/FIPS-restricted peers that offer nothing else, and
/// because OpenSSL serves an ECDSA P-384 certificate over TLS 1.2 only to a
/// client listing that curve (RFC 8422 §5.1). P-521 is not offered:
/// rustls' aws-lc-rs provider has no P-521 group (we would have to write
/// one), and CNSA asks for P-384, not P-521.
///
/// The TLS 1.3 AES-GCM suites protect records with ring's AES-GCM on CPUs
/// where that is the faster one ([`crypto`]); the suites are the same.
pub fn crypto_provider() -> std::sync::Arc<rustls::crypto::CryptoProvider> {
    use rustls::crypto::aws_lc_rs::{self, kx_group};
    let base = aws_lc_rs::default_provider();
    std::sync::Arc::new(rustls::crypto::CryptoProvider {
        kx_groups: vec![
            kx_group::X25519MLKEM768,
            kx_group::X25519,
            kx_group::SECP256R1,
            kx_group::SECP384R1,
        ],
        cipher_suites: crypto::cipher_suites(&base.cipher_suites),
        ..base
    })
}

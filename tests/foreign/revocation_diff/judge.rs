//! The sidecar's judgement, in process. ONE function over the bytes of a
//! revision and a peer chain, answering with the failure-reason label the
//! handshake would count (`ok` when admitted, `revision_rejected` when the
//! revision itself does not load): `mtls_sidecar::credentials::judge_chain`,
//! the path-aware judgement the handshake, live re-verification, `check`,
//! `/status` and `publish` share.
//!
//! Before it existed this was an adapter over the old public API (CRLs
//! loaded by `CrlSet::parse`, a `Trust` from them, rustls's client verifier
//! or `Trust::verify_server_chain`); the disagreements that adapter had are
//! `table::TODAY`, tolerated only while `PATH_AWARE` is false.

use std::time::SystemTime;

use mtls_sidecar::credentials::{judge_chain, CrlScope, TrustInputs, Usage as KeyUsage};

use super::gen::Usage;

/// True: `judge` is the path-aware judgement, and none of `table::TODAY`
/// is tolerated.
pub const PATH_AWARE: bool = true;

/// The label for a revision that does not load.
pub const REJECTED: &str = "revision_rejected";

/// Judges `chain_pem` (leaf first) against a revision made of `ca_pem`,
/// the optional `intermediates` file and the optional `ca.crl`.
pub fn judge(
    ca_pem: &[u8],
    intermediates_pem: Option<&[u8]>,
    crl_pem: Option<&[u8]>,
    chain_pem: &[u8],
    scope: CrlScope,
    usage: Usage,
    now: SystemTime,
) -> String {
    let inputs = TrustInputs {
        ca: ca_pem,
        intermediates: intermediates_pem,
        crl: crl_pem,
        retired_ca: None,
    };
    let usage = match usage {
        Usage::Client => KeyUsage::ClientAuth,
        Usage::Server => KeyUsage::ServerAuth,
    };
    match judge_chain(&inputs, chain_pem, scope, usage, now) {
        Ok(verdict) => verdict.label().to_string(),
        Err(_) => REJECTED.to_string(),
    }
}

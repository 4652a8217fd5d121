//! The sidecar's judgement, in process. ONE function over the bytes of a
//! revision and a peer chain, answering with the failure-reason label the
//! handshake would count (`ok` when admitted, `revision_rejected` when the
//! revision itself does not load), so switching to the path-aware
//! `mtls_sidecar::credentials::judge_chain` is a change of this body only.
//!
//! TODAY (`PATH_AWARE = false`): an adapter over today's public API — the
//! revision's CRLs loaded by `CrlSet::parse`, a `Trust` built from them,
//! and the verifier each route uses (rustls's client verifier for a client
//! certificate, `Trust::verify_server_chain` for a server certificate).

use std::sync::Arc;
use std::time::SystemTime;

use mtls_sidecar::credentials::{parse_certs, Anchor, CrlScope, CrlSet, RawFile, Trust};
use mtls_sidecar::identity::CertInfo;
use mtls_sidecar::reason::FailureReason;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, UnixTime};

use super::gen::Usage;

/// False while the judge is today's adapter: the disagreements the table
/// lists as expected today are tolerated (and counted). Once the path-aware
/// judgement is what `judge` calls, set it true: they must all pass.
pub const PATH_AWARE: bool = false;

/// The label for a revision that does not load.
pub const REJECTED: &str = "revision_rejected";

/// Judges `chain_pem` (leaf first) against a revision made of `ca_pem`,
/// the optional `intermediates` file and the optional `ca.crl`.
pub fn judge(
    ca_pem: &[u8],
    _intermediates_pem: Option<&[u8]>,
    crl_pem: Option<&[u8]>,
    chain_pem: &[u8],
    scope: CrlScope,
    usage: Usage,
    now: SystemTime,
) -> String {
    let provider = mtls_sidecar::crypto_provider();
    let file = |name: &str, bytes: &[u8]| RawFile {
        path: name.into(),
        bytes: bytes.to_vec(),
    };
    let Ok(cas) = parse_certs(&file("ca.crt", ca_pem)) else {
        return REJECTED.into();
    };
    let Ok(bundle) = cas
        .into_iter()
        .map(|der| CertInfo::parse(&der).map(|info| (der, info)))
        .collect::<Result<Vec<_>, _>>()
    else {
        return REJECTED.into();
    };
    let crls = match crl_pem {
        None => CrlSet::empty(),
        Some(bytes) => match CrlSet::parse(&file("ca.crl", bytes), &bundle, &provider) {
            Ok(set) => set,
            Err(_) => return REJECTED.into(),
        },
    };
    let Ok(trust) = Trust::build(Anchor::bundle(&bundle), Arc::new(crls), scope, &provider) else {
        return REJECTED.into();
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(chain_pem)
        .collect::<Result<_, _>>()
        .expect("the test's own chain parses");
    let (ee, rest) = chain.split_first().expect("a leaf");
    let at = UnixTime::since_unix_epoch(
        now.duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default(),
    );
    let verdict = match usage {
        Usage::Client => trust
            .client_verifier
            .verify_client_cert(ee, rest, at)
            .map(|_| ()),
        Usage::Server => trust.verify_server_chain(ee, rest, at, &provider),
    };
    match verdict {
        Ok(()) => "ok".into(),
        Err(e) => FailureReason::from_tls(&e).as_str().into(),
    }
}

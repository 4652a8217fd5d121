//! The revocation judgement for tools (`publish`, the OpenSSL differential
//! test, scripts): the same [`Trust::verify_peer`] a handshake runs, over
//! the bytes of a revision's files instead of a running store.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use rustls_pki_types::{CertificateDer, UnixTime};

use super::{classify, parse_file, CrlInfo, CrlScope, CrlSet, CrlState, SignerKind, Usage};
use crate::credentials::{parse_certs, Anchor, CredError, DenyList, RawFile, Trust};
use crate::identity::CertInfo;
use crate::reason::FailureReason;

/// The trust side of a revision, as file contents.
#[derive(Debug, Clone, Copy, Default)]
pub struct TrustInputs<'a> {
    /// `ca.crt`: the trust anchors (PEM).
    pub ca: &'a [u8],
    /// `intermediates`: known intermediate CAs (PEM), when there is one.
    pub intermediates: Option<&'a [u8]>,
    /// `ca.crl`: one or more CRLs (PEM or DER), when there is one.
    pub crl: Option<&'a [u8]>,
    /// Anchors no longer trusted (PEM), e.g. the `ca.crt` being replaced:
    /// a CRL that only one of these verifies is classified `ignored`.
    pub retired_ca: Option<&'a [u8]>,
}

/// How the judgement ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The chain is admitted.
    Admitted,
    /// The chain is refused, with the handshake failure reason a sidecar
    /// would count (`revoked`, `revoked_status_unknown`, `unknown_ca`,
    /// `expired`, `bad_san`, ...) and rustls's error text.
    Refused {
        reason: FailureReason,
        detail: String,
    },
}

impl Verdict {
    /// `ok`, or the failure reason's label.
    pub fn label(&self) -> &'static str {
        match self {
            Verdict::Admitted => "ok",
            Verdict::Refused { reason, .. } => reason.as_str(),
        }
    }
}

fn file(name: &str, bytes: &[u8]) -> RawFile {
    RawFile {
        path: PathBuf::from(name),
        bytes: bytes.to_vec(),
    }
}

fn certs(name: &str, bytes: Option<&[u8]>) -> Result<Vec<CertificateDer<'static>>, CredError> {
    bytes.map_or(Ok(Vec::new()), |b| parse_certs(&file(name, b)))
}

/// The trust a sidecar holding these files (and nothing earlier) would
/// judge peers with at `now`.
fn trust(inputs: &TrustInputs<'_>, scope: CrlScope, now: SystemTime) -> Result<Trust, CredError> {
    let ca = parse_certs(&file("ca.crt", inputs.ca))?;
    let mut bundle = Vec::with_capacity(ca.len());
    for der in ca {
        let info = CertInfo::parse(&der).map_err(|e| CredError::Parse {
            path: "ca.crt".into(),
            detail: e.to_string(),
        })?;
        bundle.push((der, info));
    }
    let intermediates: Arc<[CertificateDer<'static>]> =
        Arc::from(certs("intermediates", inputs.intermediates)?);
    let retired: Arc<[CertificateDer<'static>]> =
        Arc::from(certs("retired ca.crt", inputs.retired_ca)?);
    // Signatures only (chains and CRLs): aws-lc's verification algorithms,
    // those of every TLS config's provider (`tls::provider`, whose tests
    // hold the two equal); that provider's key exchange and record
    // choices play no part here, and it lives a layer above.
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let bare = Trust::build(
        Anchor::bundle(&bundle),
        Arc::new(CrlSet::empty()),
        scope,
        &provider,
    )?
    .with_issuers(intermediates, retired);
    let crls = match inputs.crl {
        Some(bytes) => parse_file(&file("ca.crl", bytes))?,
        None => Vec::new(),
    };
    let known = bare.known();
    let set = classify(&crls, &known, now, &provider)?.set;
    bare.with_crls(Arc::new(set))
}

/// Judges a peer's chain (PEM, leaf first) for `usage` at `now` against
/// the trust these files make, through the handshake's own code path.
/// `Err`: the inputs are unusable (the error names the file).
pub fn judge_chain(
    inputs: &TrustInputs<'_>,
    chain_pem: &[u8],
    scope: CrlScope,
    usage: Usage,
    now: SystemTime,
) -> Result<Verdict, CredError> {
    judge_chain_denying(inputs, Arc::default(), chain_pem, scope, usage, now)
}

/// [`judge_chain`] with a deny-list in force (`check --against` previews a
/// candidate `deny` file with it): a matching entry refuses the chain as
/// `denied`, as it would at a handshake.
pub fn judge_chain_denying(
    inputs: &TrustInputs<'_>,
    deny: Arc<DenyList>,
    chain_pem: &[u8],
    scope: CrlScope,
    usage: Usage,
    now: SystemTime,
) -> Result<Verdict, CredError> {
    let trust = trust(inputs, scope, now)?.with_deny(deny);
    let chain = parse_certs(&file("chain", chain_pem))?;
    let (ee, rest) = chain.split_first().ok_or(CredError::Empty {
        path: "chain".into(),
    })?;
    let at = UnixTime::since_unix_epoch(
        now.duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default(),
    );
    Ok(match trust.verify_peer(ee, rest, at, usage) {
        Ok(()) => Verdict::Admitted,
        Err(e) => Verdict::Refused {
            reason: FailureReason::from_tls(&e),
            detail: crate::reason::plain_tls(&e).to_string(),
        },
    })
}

/// One CRL of a file, classified against a revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrlReport {
    pub info: CrlInfo,
    /// `verified`, `unverified`, `ignored` or `pending`.
    pub state: &'static str,
    /// The subject of the CA whose key signed it, when known.
    pub signer: Option<String>,
    /// What the state means, for a person.
    pub detail: String,
}

/// Classifies every CRL of `inputs.crl` against the revision's anchors,
/// intermediates and retired anchors at `now`, with the rules the sidecar
/// loads with. `Err`: a CRL does not parse, two CRLs of one key, or
/// another input is unusable.
pub fn classify_crl_file(
    inputs: &TrustInputs<'_>,
    now: SystemTime,
) -> Result<Vec<CrlReport>, CredError> {
    let trust = trust(inputs, CrlScope::Leaf, now)?;
    Ok(trust
        .crls
        .entries()
        .iter()
        .map(|e| report(&e.state, &e.crl.info))
        .collect())
}

/// What `check`, `/status` and `publish` say of one CRL's state.
pub fn describe_state(state: &CrlState) -> String {
    match state {
        CrlState::Verified(s) => match s.kind {
            SignerKind::Intermediate => format!("signed by the intermediate {}", s.subject),
            SignerKind::Graced => format!("signed by {} (in its trust grace)", s.subject),
            _ => format!("signed by {} in ca.crt", s.subject),
        },
        CrlState::Unverified => "its issuer is no CA we hold: enforced only \
             against a peer's chain whose intermediate of that name verifies it"
            .to_string(),
        CrlState::Ignored(s) => format!("ignored: {} is no longer trusted", s.subject),
        CrlState::Pending(_) => {
            "pending: its thisUpdate is in the future; enforced once it is not".to_string()
        }
    }
}

fn report(state: &CrlState, info: &CrlInfo) -> CrlReport {
    CrlReport {
        info: info.clone(),
        state: state.label(),
        signer: state.signer().map(|s| s.subject.clone()),
        detail: describe_state(state),
    }
}

//! Judging a staged revision exactly as the sidecar will judge it once it
//! is swapped in.
//!
//! Why read it back from disk: the staged revision directory is read with
//! the sidecar's own reader (`CredentialSource`, the code a poll runs: which
//! files a revision has, empty files, PEM or DER) and validated with its
//! own loader (every certificate, the key, the chain, every CRL and who
//! signed it), so "published" means "the sidecar will apply it" without a
//! second implementation that could drift. A file the sidecar reads is
//! judged whether it was given or carried over from the revision in force.
//! The revision in force is the reference for "older": a CRL that goes back
//! (lower CRL number) is refused here as the sidecar would refuse it.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::PublishError;
use crate::credentials::{
    fmt_time, parse, validate, CredError, CredentialSource, CrlSet, RawRevision, ValidRevision,
    CA_FILE, CERT_FILE, CRL_FILE, KEY_FILE,
};

/// The files a sidecar reads from a credential directory.
pub const CREDENTIAL_FILES: [&str; 4] = [CERT_FILE, KEY_FILE, CA_FILE, CRL_FILE];

/// Validates the revision staged in `staged` (to be published into `dir`)
/// at `now`, and returns one line per credential file saying what the
/// sidecar will make of it. A staged directory without any credential file
/// is some other kind of revision and is not judged.
pub fn judge(dir: &Path, staged: &Path, now: SystemTime) -> Result<Vec<String>, PublishError> {
    if !CREDENTIAL_FILES.iter().any(|n| staged.join(n).exists()) {
        return Ok(Vec::new());
    }
    let provider = crate::crypto_provider();
    let invalid = |e: CredError| invalid(dir, staged, e);
    let mut raw = CredentialSource::Dir(staged.to_path_buf())
        .read()
        .map_err(invalid)?;
    rename_into(&mut raw, dir);
    let valid = validate(&raw, &provider, now).map_err(invalid)?;
    if let Some(path) = &valid.crl_path {
        if let Some(in_force) = in_force_crls(dir, &provider) {
            valid
                .crls
                .check_not_older(&in_force, path)
                .map_err(invalid)?;
        }
    }
    Ok(lines(&valid))
}

/// The error as the sidecar would log it, naming files by their published
/// path (`DIR/ca.crl`) rather than the staged directory's.
fn invalid(dir: &Path, staged: &Path, e: CredError) -> PublishError {
    let text = e
        .to_string()
        .replace(&staged.display().to_string(), &dir.display().to_string());
    PublishError::Invalid(text)
}

/// Names the staged files by the paths they will have in `dir`, as the
/// sidecar names files read through `..data`.
fn rename_into(raw: &mut RawRevision, dir: &Path) {
    let at = |name: &str| -> PathBuf { dir.join(name) };
    raw.cert.path = at(CERT_FILE);
    raw.key.path = at(KEY_FILE);
    raw.ca.path = at(CA_FILE);
    if let Some(crl) = &mut raw.crl {
        crl.path = at(CRL_FILE);
    }
}

/// The CRLs of the revision in force in `dir`, when it has one that parses
/// (a revision in force that no longer parses is no reference).
fn in_force_crls(
    dir: &Path,
    provider: &rustls::crypto::CryptoProvider,
) -> Option<std::sync::Arc<CrlSet>> {
    let raw = CredentialSource::Dir(dir.to_path_buf()).read().ok()?;
    raw.crl.as_ref()?;
    parse(&raw, provider).ok().map(|p| p.crls)
}

/// One line per file of a valid revision.
fn lines(v: &ValidRevision) -> Vec<String> {
    let mut out = vec![
        format!(
            "{CERT_FILE}: {} (serial {}), valid until {}, chains to {CA_FILE}",
            v.leaf.subject,
            v.leaf.serial,
            fmt_time(v.leaf.not_after)
        ),
        format!("{KEY_FILE}: matches {CERT_FILE}"),
        format!(
            "{CA_FILE}: {} trust anchor(s): {}",
            v.anchors.len(),
            v.anchors
                .iter()
                .map(|(_, a)| a.subject.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        ),
    ];
    for crl in &v.crls.infos {
        let version = match &crl.number {
            Some(n) => format!("CRL number {n}"),
            None => format!("thisUpdate {}", fmt_time(crl.this_update)),
        };
        out.push(format!(
            "{CRL_FILE}: CRL from {} ({version}, {} revoked): verified, signed by the CA {} in {CA_FILE}",
            crl.issuer, crl.revoked, crl.issuer
        ));
    }
    out
}

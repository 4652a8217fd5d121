//! Judging a staged revision exactly as the sidecar will judge it once it
//! is swapped in.
//!
//! Why read it back from disk: the staged revision directory is read with
//! the sidecar's own reader (`CredentialSource`, the code a poll runs: which
//! files a revision has, empty files, PEM or DER) and validated with its
//! own loader (every certificate, the key, the chain, `intermediates`, every
//! CRL), so "published" means "the sidecar will apply it" without a second
//! implementation that could drift. A file the sidecar reads is judged
//! whether it was given or carried over from the revision in force.
//!
//! The CRLs are then classified the way a sidecar that has the revision in
//! force applies the new one (the store's own `classify_over`): each is
//! verified (by which CA), unverified (its issuer is no CA we hold:
//! checked at handshake against a peer-sent intermediate), ignored (its CA
//! is no longer in `ca.crt`) or pending (dated in the future); one older
//! than the CRL in force, or one that names a CA we hold and that no
//! trusted key of that name verifies, is refused; serials the new revision
//! makes admissible again are
//! named, as the sidecar's WARN will name them.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use std::sync::Arc;

use rustls::crypto::CryptoProvider;

use super::PublishError;
use crate::credentials::revocation::{classify_over, describe_state, Dropped};
use crate::credentials::{
    fmt_time, parse, validate, Anchor, CredError, CredentialSource, CrlScope, CrlSet, CrlState,
    RawRevision, Trust, ValidRevision, CA_FILE, CERT_FILE, CRL_FILE, INTERMEDIATES_FILE, KEY_FILE,
};

/// The files a sidecar reads from a credential directory.
pub const CREDENTIAL_FILES: [&str; 5] =
    [CERT_FILE, KEY_FILE, CA_FILE, CRL_FILE, INTERMEDIATES_FILE];

/// What the sidecar will make of a revision.
#[derive(Debug, Clone, Default)]
pub struct Judged {
    /// One line per credential file (per CRL for `ca.crl`).
    pub lines: Vec<String>,
    /// Serials the revision makes admissible again, one line per issuer.
    pub warnings: Vec<String>,
}

/// Validates the revision staged in `staged` (to be published into `dir`)
/// at `now`, and says what the sidecar will make of each file. A staged
/// directory without any credential file is some other kind of revision
/// and is not judged.
pub fn judge(
    dir: &Path,
    staged: &Path,
    now: SystemTime,
    prune_age: Duration,
) -> Result<Judged, PublishError> {
    if !CREDENTIAL_FILES.iter().any(|n| staged.join(n).exists()) {
        return Ok(Judged::default());
    }
    let provider = crate::tls::provider::crypto_provider();
    let invalid = |e: CredError| invalid(dir, staged, e);
    let mut raw = CredentialSource::Dir(staged.to_path_buf())
        .read()
        .map_err(invalid)?;
    rename_into(&mut raw, dir);
    let valid = validate(&raw, &provider, now).map_err(invalid)?;
    let in_force = in_force_trust(dir, &provider, now);
    let (crls, dropped) =
        after(&valid, in_force.as_ref(), &provider, now, prune_age).map_err(invalid)?;
    Ok(Judged {
        lines: lines(&valid, &crls),
        warnings: dropped.iter().map(un_revoked).collect(),
    })
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
    if let Some(i) = &mut raw.intermediates {
        i.path = at(INTERMEDIATES_FILE);
    }
}

/// The trust of the revision in force in `dir` as a sidecar that started
/// on it holds it (its anchors, intermediates and CRLs), when it parses: a
/// revision in force that no longer parses is no reference.
fn in_force_trust(dir: &Path, provider: &Arc<CryptoProvider>, now: SystemTime) -> Option<Trust> {
    let raw = CredentialSource::Dir(dir.to_path_buf()).read().ok()?;
    let old = parse(&raw, provider).ok()?;
    let crls = old.own_crls(provider, now).ok()?;
    let trust = Trust::build(
        Anchor::bundle(&old.anchors),
        Arc::new(crls),
        CrlScope::default(),
        provider,
    )
    .ok()?;
    Some(trust.with_issuers(old.intermediates.clone(), Arc::from(Vec::new())))
}

/// The new revision's CRLs classified as the store classifies them when
/// it applies `next` over `in_force` (the anchors `in_force` had and `next`
/// lacks count as no longer trusted: a sidecar's `--trust-grace` may still
/// enforce their CRLs for a while), with the serials made admissible again.
fn after(
    next: &ValidRevision,
    in_force: Option<&Trust>,
    provider: &Arc<CryptoProvider>,
    now: SystemTime,
    prune_age: Duration,
) -> Result<(CrlSet, Vec<Dropped>), CredError> {
    let anchors = Anchor::bundle(&next.anchors);
    let none = || Arc::from(Vec::new());
    let (retired, former) = match in_force {
        Some(t) => {
            let h = t.history_after(&anchors, &next.intermediates, now);
            (h.retired, h.former)
        }
        None => (none(), none()),
    };
    let bare = Trust::build(
        anchors,
        Arc::new(CrlSet::empty()),
        CrlScope::default(),
        provider,
    )?
    .with_issuers(next.intermediates.clone(), retired)
    .with_former(former);
    let empty = CrlSet::empty();
    let previous = in_force.map_or(&empty, |t| &*t.crls);
    let c = classify_over(
        &next.crl_list,
        &bare.known(),
        now,
        previous,
        prune_age,
        provider,
    )?;
    Ok((c.set, c.dropped))
}

/// One line per file of a valid revision.
fn lines(v: &ValidRevision, crls: &CrlSet) -> Vec<String> {
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
            subjects(v.anchors.iter().map(|(_, a)| a.subject.as_str()))
        ),
    ];
    if !v.intermediates.is_empty() {
        let names = v
            .intermediates
            .iter()
            .filter_map(|d| crate::identity::CertInfo::parse(d).ok())
            .map(|i| i.subject)
            .collect::<Vec<_>>();
        out.push(format!(
            "{INTERMEDIATES_FILE} (with the chain of {CERT_FILE}): {} known intermediate CA(s), never trust anchors: {}",
            names.len(),
            subjects(names.iter().map(String::as_str))
        ));
    }
    for e in crls.entries().iter().filter(|e| e.kept.is_none()) {
        out.push(format!(
            "{CRL_FILE}: CRL from {} ({}, {} revoked): {}{}",
            e.crl.info.issuer,
            e.crl.info.version(),
            e.crl.info.revoked,
            e.state.label(),
            crl_detail(&e.state)
        ));
    }
    out
}

fn subjects<'a>(names: impl Iterator<Item = &'a str>) -> String {
    names.collect::<Vec<_>>().join("; ")
}

/// What a CRL's state means here; an ignored CRL may still be enforced by
/// a sidecar whose `--trust-grace` keeps its CA a while.
fn crl_detail(state: &CrlState) -> String {
    match state {
        CrlState::Ignored(s) => format!(
            ", its CA {} is no longer in {CA_FILE} (a sidecar with --trust-grace enforces it until the grace ends)",
            s.subject
        ),
        other => format!(", {}", describe_state(other)),
    }
}

/// The line for serials a revision makes admissible again (the sidecar
/// WARNs the same and counts `mtls_sidecar_crl_removals_total`).
fn un_revoked(d: &Dropped) -> String {
    let serials: Vec<String> = d.serials.iter().map(|s| colon_hex(s)).collect();
    let (verb, counter) = if d.pruned {
        (
            "prunes",
            "mtls_sidecar_crl_entries_pruned_total, not as an un-revocation",
        )
    } else {
        ("un-revokes", "mtls_sidecar_crl_removals_total")
    };
    format!(
        "{verb} {} serial(s) of {} ({}): {}; the sidecar counts this in {counter}",
        serials.len(),
        d.issuer,
        d.how(),
        serials.join(", ")
    )
}

fn colon_hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

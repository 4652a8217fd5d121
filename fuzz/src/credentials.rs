//! The credentials target's checks (see `fuzz_targets/credentials.rs`):
//! the revision loader (`credentials::parse`, then `judge` at two times,
//! which classifies the CRLs against the revision's own anchors and
//! intermediates) and the tools' revocation judgement
//! (`revocation::judge_chain`, `classify_crl_file`) over the same bytes.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mtls_sidecar::credentials::revocation::{parse_file, MAX_CRLS};
use mtls_sidecar::credentials::{
    self, classify_crl_file, judge_chain, CredError, CrlScope, RawFile, RawRevision, TrustInputs,
    Usage, Verdict,
};
use mtls_sidecar::identity::CertInfo;
use rustls::crypto::CryptoProvider;

use crate::frames::{pem, records, FILES};

const NAMES: [&str; FILES] = ["tls.crt", "tls.key", "ca.crt", "ca.crl", "intermediates"];

fn provider() -> &'static Arc<CryptoProvider> {
    static P: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    P.get_or_init(mtls_sidecar::tls::provider::crypto_provider)
}

/// Runs the loader on the files `data` describes.
pub fn check(data: &[u8]) {
    let mut files: [Vec<u8>; FILES] = Default::default();
    // Per file: the DER of its PEM CERTIFICATE blocks, None once a raw
    // record makes the expected content unknown.
    let mut wrapped: [Option<Vec<&[u8]>>; FILES] = Default::default();
    for w in &mut wrapped {
        *w = Some(vec![]);
    }
    let mut present = [false; FILES];
    for r in records(data) {
        present[r.file] = true;
        if r.raw {
            files[r.file].extend_from_slice(r.bytes);
            wrapped[r.file] = None;
        } else {
            files[r.file].extend(pem(r.label, r.bytes));
            if r.label == "CERTIFICATE" {
                if let Some(w) = &mut wrapped[r.file] {
                    w.push(r.bytes);
                }
            }
        }
    }
    let raw: Vec<RawFile> = files
        .into_iter()
        .zip(NAMES)
        .map(|(bytes, name)| RawFile {
            path: PathBuf::from("/fuzz").join(name),
            bytes,
        })
        .collect();
    for (file, want) in raw.iter().zip(&wrapped) {
        check_pem_certs(file, want.as_deref());
    }
    let [cert, key, ca, crl, int] =
        <[RawFile; FILES]>::try_from(raw).unwrap_or_else(|_| unreachable!());
    if present[3] {
        check_crl_file(&crl);
    }
    let revision = RawRevision::with_crl(cert, key, ca, present[3].then_some(crl))
        .with_intermediates(present[4].then_some(int));
    check_tools(&revision);
    check_revision(&revision);
}

/// The loader: what parses is self-consistent, judging it is bounded by
/// the leaf's window, and every error names a file.
fn check_revision(revision: &RawRevision) {
    let parsed = match credentials::parse(revision, provider()) {
        Ok(p) => p,
        Err(e) => return names_a_file(&e),
    };
    let chain = credentials::parse_certs(&revision.cert).expect("parsed once already");
    let leaf = CertInfo::parse(&chain[0]).expect("the leaf parsed once already");
    assert_eq!(parsed.leaf, leaf);
    let anchors = credentials::parse_certs(&revision.ca).expect("parsed once already");
    assert_eq!(parsed.anchors.len(), anchors.len());
    assert!(parsed.crl_list.len() <= MAX_CRLS);
    // Known intermediates: never an anchor, never twice.
    for (i, der) in parsed.intermediates.iter().enumerate() {
        assert!(!anchors.contains(der), "an anchor among the intermediates");
        assert!(
            !parsed.intermediates[..i].contains(der),
            "an intermediate twice"
        );
    }
    // Judged inside the leaf's window (deterministic, unlike "now") and
    // just after it, where only an expiry error is right.
    let at = |secs: i64| UNIX_EPOCH + Duration::from_secs(secs.max(0).unsigned_abs());
    match parsed.judge(provider(), at(leaf.not_before)) {
        Ok(valid) => {
            let crls = &valid.crls;
            assert!(crls.entries().len() <= parsed.crl_list.len());
            for e in crls.entries() {
                assert!(
                    parsed.crl_list.iter().any(|c| c.der() == e.crl.der()),
                    "a CRL the revision did not supply"
                );
            }
            let again = parsed
                .own_crls(provider(), at(leaf.not_before))
                .expect("classified once already");
            assert!(again.same_as(crls), "classifying twice differs");
            let _ = crls.earliest_next_update();
            let _ = crls.stale(leaf.not_before).count();
            let _ = crls.next_pending();
            let _ = crls.revoked_entries();
        }
        Err(e) => names_a_file(&e),
    }
    if (0..i64::MAX).contains(&leaf.not_after) && leaf.not_before <= leaf.not_after {
        match parsed.judge(provider(), at(leaf.not_after + 1)) {
            Err(CredError::Expired { .. }) => {}
            other => panic!("judged after not_after: {other:?}"),
        }
    }
}

/// A CRL file parses to at most [`MAX_CRLS`] CRLs; or an error naming
/// the file.
fn check_crl_file(file: &RawFile) {
    match parse_file(file) {
        Ok(crls) => {
            assert!(crls.len() <= MAX_CRLS);
            for c in &crls {
                assert!(!c.der().is_empty());
                let _ = c.revoked_entries();
            }
        }
        Err(e) => names_a_file(&e),
    }
}

/// The tools' judgement (`publish`, `check`) of the revision's own chain
/// against its own trust files: never a panic, every error names a file.
fn check_tools(revision: &RawRevision) {
    let inputs = TrustInputs {
        ca: &revision.ca.bytes,
        intermediates: revision.intermediates.as_ref().map(|f| f.bytes.as_slice()),
        crl: revision.crl.as_ref().map(|f| f.bytes.as_slice()),
        retired_ca: None,
    };
    let now = SystemTime::now();
    match classify_crl_file(&inputs, now) {
        Ok(reports) => assert!(reports.len() <= MAX_CRLS),
        Err(e) => tool_error_names_a_file(&e),
    }
    for (scope, usage) in [
        (CrlScope::Leaf, Usage::ClientAuth),
        (CrlScope::Chain, Usage::ServerAuth),
    ] {
        match judge_chain(&inputs, &revision.cert.bytes, scope, usage, now) {
            Ok(Verdict::Admitted) => {}
            Ok(Verdict::Refused { detail, .. }) => assert!(!detail.is_empty()),
            Err(e) => tool_error_names_a_file(&e),
        }
    }
}

/// A file of nothing but PEM blocks reads back exactly the certificates
/// that were wrapped, in order; none at all is an error.
fn check_pem_certs(file: &RawFile, want: Option<&[&[u8]]>) {
    let got = credentials::parse_certs(file);
    let Some(want) = want else {
        if let Err(e) = got {
            names_a_file(&e);
        }
        return;
    };
    match got {
        Ok(certs) => {
            let got: Vec<&[u8]> = certs.iter().map(|c| c.as_ref()).collect();
            assert_eq!(got, want, "{}", file.path.display());
        }
        Err(e) => {
            assert!(want.is_empty(), "{e}");
            names_a_file(&e);
        }
    }
}

/// Every credential error names the file it is about.
fn names_a_file(e: &CredError) {
    let shown = e.to_string();
    assert!(
        NAMES.iter().any(|n| shown.contains(&format!("/fuzz/{n}"))),
        "an error that names no file: {shown}"
    );
}

/// The tools name the files by their role (`ca.crt`, `chain`, ...).
fn tool_error_names_a_file(e: &CredError) {
    let shown = e.to_string();
    assert!(
        ["ca.crt", "ca.crl", "intermediates", "chain"]
            .iter()
            .any(|n| shown.contains(n)),
        "a tool error that names no file: {shown}"
    );
}

//! The credentials target's checks (see `fuzz_targets/credentials.rs`).

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, UNIX_EPOCH};

use mtls_sidecar::credentials::{self, CredError, CrlSet, RawFile, RawRevision, MAX_CRLS};
use mtls_sidecar::identity::CertInfo;
use rustls::crypto::CryptoProvider;

use crate::frames::{pem, records};

const NAMES: [&str; 4] = ["tls.crt", "tls.key", "ca.crt", "ca.crl"];

fn provider() -> &'static Arc<CryptoProvider> {
    static P: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    P.get_or_init(mtls_sidecar::crypto_provider)
}

/// Runs the loader on the files `data` describes.
pub fn check(data: &[u8]) {
    let mut files: [Vec<u8>; 4] = Default::default();
    // Per file: the DER of its PEM CERTIFICATE blocks, None once a raw
    // record makes the expected content unknown.
    let mut wrapped: [Option<Vec<&[u8]>>; 4] =
        [Some(vec![]), Some(vec![]), Some(vec![]), Some(vec![])];
    let mut has_crl = false;
    for r in records(data) {
        has_crl |= r.file == 3;
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
    let [cert, key, ca, crl] = <[RawFile; 4]>::try_from(raw).unwrap_or_else(|_| unreachable!());
    let revision = RawRevision::with_crl(cert, key, ca, has_crl.then_some(crl));
    let parsed = match credentials::parse(&revision, provider()) {
        Ok(p) => p,
        Err(e) => return names_a_file(&e),
    };
    let chain = credentials::parse_certs(&revision.cert).expect("parsed once already");
    let leaf = CertInfo::parse(&chain[0]).expect("the leaf parsed once already");
    assert_eq!(parsed.leaf, leaf);
    assert_eq!(
        parsed.anchors.len(),
        credentials::parse_certs(&revision.ca).map_or(0, |c| c.len())
    );
    assert!(parsed.crls.infos.len() <= MAX_CRLS);
    assert_eq!(parsed.crls.infos.len(), parsed.crls.ders().len());
    assert_eq!(parsed.crls.infos.len(), parsed.crls.lists.len());
    // Judged inside the leaf's window (deterministic, unlike "now") and
    // just after it, where only an expiry error is right.
    let at = |secs: i64| UNIX_EPOCH + Duration::from_secs(secs.max(0).unsigned_abs());
    if let Err(e) = parsed.judge(provider(), at(leaf.not_before)) {
        names_a_file(&e);
    }
    if (0..i64::MAX).contains(&leaf.not_after) && leaf.not_before <= leaf.not_after {
        match parsed.judge(provider(), at(leaf.not_after + 1)) {
            Err(CredError::Expired { .. }) => {}
            other => panic!("judged after not_after: {other:?}"),
        }
    }
    let _ = parsed.crls.earliest_next_update();
    let _ = parsed.crls.stale(leaf.not_before).count();
    for (der, _) in &parsed.anchors {
        let _ = parsed.crls.revoking(der);
    }
    if let Some(file) = &revision.crl {
        if let Ok(again) = CrlSet::parse(file, &parsed.anchors, provider()) {
            assert!(again.same_as(&parsed.crls));
            assert!(again.check_not_older(&parsed.crls, &file.path).is_ok());
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

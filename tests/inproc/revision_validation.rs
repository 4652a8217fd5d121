//! Whether a revision is admitted, judged in process at exact instants
//! (`credentials::validate`): a leaf is good through both ends of its
//! validity window and not one second beyond, a chain whose intermediate is
//! out of its window is refused naming that certificate's exact time, and a
//! bundle that did not issue the leaf is refused saying so. Each test names
//! the cargo-mutants mutants of `src/credentials/validate.rs` it kills.

use crate::common;

use std::time::{Duration, SystemTime};

use common::*;
use mtls_sidecar::credentials::{
    parse_certs, root_store, validate, verify_chain, CredError, RawFile, RawRevision,
};
use mtls_sidecar::identity::{epoch_to_time, CertInfo};
use mtls_sidecar::pki::{DevCa, LeafSpec, Role};
use rustls_pki_types::CertificateDer;

const DAY: Duration = Duration::from_secs(86_400);

fn file(name: &str, pem: &str) -> RawFile {
    RawFile {
        path: format!("rev/{name}").into(),
        bytes: pem.as_bytes().to_vec(),
    }
}

fn revision(cert_pem: &str, key_pem: &str, ca_pem: &str) -> RawRevision {
    RawRevision::new(
        file("tls.crt", cert_pem),
        file("tls.key", key_pem),
        file("ca.crt", ca_pem),
    )
}

fn info(pem: &str) -> CertInfo {
    let der = CertificateDer::from_pem_slice(pem.as_bytes()).expect("PEM certificate");
    CertInfo::parse(&der).expect("certificate")
}

use rustls_pki_types::pem::PemObject;

/// Kills `replace < with <=` / `== ` / `>` in `ParsedRevision::judge` (the
/// leaf's notBefore) and `replace > with >=` / `==` / `<` (its notAfter):
/// X.509 validity includes both ends.
#[test]
fn a_leaf_is_admitted_through_both_ends_of_its_window_and_not_a_second_beyond() {
    let pki = Pki::new("window CA");
    let now = SystemTime::now();
    let leaf = pki.issue(&LeafSpec::dns(REPLICA, Role::Server, 1).valid(
        now + Duration::from_secs(600),
        now + Duration::from_secs(7_200),
    ));
    let window = info(&leaf.cert_pem);
    let rev = revision(&leaf.cert_pem, &leaf.key_pem, &pki.ca.cert_pem);
    let p = provider();
    let at = |secs: i64| validate(&rev, &p, epoch_to_time(secs));
    assert!(at(window.not_before).is_ok(), "{:?}", at(window.not_before));
    assert!(at(window.not_after).is_ok(), "{:?}", at(window.not_after));
    assert!(at(window.not_before + 60).is_ok());
    match at(window.not_before - 1) {
        Err(CredError::NotYetValid { path, not_before }) => {
            assert_eq!(not_before, window.not_before);
            assert_eq!(path, std::path::Path::new("rev/tls.crt"));
        }
        other => panic!("expected NotYetValid, got {other:?}"),
    }
    match at(window.not_after + 1) {
        Err(CredError::Expired { path, not_after }) => {
            assert_eq!(not_after, window.not_after);
            assert_eq!(path, std::path::Path::new("rev/tls.crt"));
        }
        other => panic!("expected Expired, got {other:?}"),
    }
}

/// Kills `replace secs -> i64 with 0` / `1` / `-1`: a chain refused because
/// its intermediate is out of its window reports that certificate's exact
/// notBefore (which the store waits for) and notAfter, while the leaf itself
/// is still in its own window.
#[test]
fn an_intermediate_out_of_its_window_is_refused_with_its_exact_time() {
    let root = Pki::new("root CA");
    let inter = root
        .ca
        .intermediate("intermediate CA", 1)
        .expect("intermediate");
    let inter_window = info(&inter.cert_pem);
    let now = SystemTime::now();
    let leaf = inter
        .issue(&LeafSpec::dns(REPLICA, Role::Server, 1).valid(now - 2 * DAY, now + 10 * DAY))
        .expect("leaf");
    let chain = format!("{}{}", leaf.cert_pem, inter.cert_pem);
    let rev = revision(&chain, &leaf.key_pem, &root.ca.cert_pem);
    let p = provider();
    let at = |secs: i64| validate(&rev, &p, epoch_to_time(secs));
    assert!(at(inter_window.not_before).is_ok());
    assert!(at(inter_window.not_after).is_ok());
    match at(inter_window.not_before - 1) {
        Err(CredError::ChainNotYetValid { cert, not_before }) => {
            assert_eq!(not_before, inter_window.not_before);
            assert_eq!(cert, std::path::Path::new("rev/tls.crt"));
        }
        other => panic!("expected ChainNotYetValid, got {other:?}"),
    }
    match at(inter_window.not_after + 1) {
        Err(CredError::ChainExpired { cert, not_after }) => {
            assert_eq!(not_after, inter_window.not_after);
            assert_eq!(cert, std::path::Path::new("rev/tls.crt"));
        }
        other => panic!("expected ChainExpired, got {other:?}"),
    }
}

/// Kills `replace describe -> String with String::new()` / `"xyzzy".into()`
/// and `replace chain_error -> Result<(), webpki::Error> with Ok(())`: a leaf
/// from another CA is refused, naming both files and saying why.
#[test]
fn a_leaf_the_bundle_did_not_issue_is_refused_saying_so() {
    let pki = Pki::new("the bundle's CA");
    let foreign = DevCa::new("some other CA", 1).expect("CA");
    let leaf = foreign
        .issue(&LeafSpec::dns(REPLICA, Role::Server, 1))
        .expect("leaf");
    let rev = revision(&leaf.cert_pem, &leaf.key_pem, &pki.ca.cert_pem);
    match validate(&rev, &provider(), SystemTime::now()) {
        Err(CredError::Chain { cert, ca, detail }) => {
            assert_eq!(cert, std::path::Path::new("rev/tls.crt"));
            assert_eq!(ca, std::path::Path::new("rev/ca.crt"));
            assert_eq!(detail, "not issued by any certificate in the CA bundle");
        }
        other => panic!("expected a Chain refusal, got {other:?}"),
    }
    // The same verdict through `verify_chain` (what `certs` uses).
    let ca = parse_certs(&file("ca.crt", &pki.ca.cert_pem)).expect("bundle");
    let roots = root_store(std::path::Path::new("rev/ca.crt"), &ca).expect("roots");
    let chain = parse_certs(&file("tls.crt", &leaf.cert_pem)).expect("leaf");
    assert_eq!(
        verify_chain(&chain, &roots, &provider(), SystemTime::now()),
        Err("not issued by any certificate in the CA bundle".to_string())
    );
    let own = pki.leaf(REPLICA, Role::Client);
    let own = parse_certs(&file("tls.crt", &own.cert_pem)).expect("leaf");
    assert_eq!(
        verify_chain(&own, &roots, &provider(), SystemTime::now()),
        Ok(())
    );
}

//! The handshake sample: scenarios (every kind at least once) confirmed
//! through real handshakes against ONE running server sidecar
//! (`--crl-scope chain`), whose credential directory is swapped to each
//! scenario's revision kubelet-style (`..data`): a client presents the
//! scenario's leaf and intermediates, and the outcome (admitted, or refused
//! with the failure-reason metric moving by one) must be the in-process
//! verdict. A revision the in-process judge rejects must be rejected by the
//! sidecar too (the last good one stays in force).

use std::collections::BTreeSet;
use std::sync::Arc;

use mtls_sidecar::credentials::CrlScope;
use mtls_sidecar::tools::atomic_writer::AtomicDir;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::gen::{self, Shape, Usage};
use super::judge::REJECTED;
use super::mint::Minted;
use crate::common::*;

const FAILURES: &str = "mtls_sidecar_tls_handshake_failures_total";
/// At least this many scenarios, more when covering every kind takes more.
pub const MIN_SAMPLE: usize = 20;

/// Picks the sample from the run's scenario stream: each scenario that
/// brings a kind not seen yet, then more until `MIN_SAMPLE`. Every shape
/// is judged as a client certificate (the server route).
pub fn pick(seed: u64) -> Vec<Shape> {
    let mut seen = BTreeSet::new();
    let mut chosen = Vec::new();
    for i in 0..5000 {
        let mut shape = Shape::draw(super::scenario_seed(seed, i));
        shape.usage = Usage::Client;
        let kinds = shape.kinds();
        let new = kinds.iter().any(|k| !seen.contains(k));
        if new || chosen.len() < MIN_SAMPLE {
            seen.extend(kinds);
            chosen.push(shape);
        }
        if chosen.len() >= MIN_SAMPLE && gen::ALL_KINDS.iter().all(|k| seen.contains(k)) {
            break;
        }
    }
    chosen
}

/// The files of a scenario's revision.
fn revision(m: &Minted) -> Vec<(&'static str, Vec<u8>)> {
    let mut files = vec![
        ("tls.crt", m.server_pem.clone().into_bytes()),
        ("tls.key", m.server_key_pem.clone().into_bytes()),
        ("ca.crt", m.ca_pem.clone().into_bytes()),
    ];
    if let Some(crl) = &m.crl_pem {
        files.push(("ca.crl", crl.clone().into_bytes()));
    }
    if m.shape.intermediates_file && !m.intermediates_pem.is_empty() {
        files.push(("intermediates", m.intermediates_pem.clone().into_bytes()));
    }
    files
}

fn publish(dir: &AtomicDir, m: &Minted) {
    let files = revision(m);
    let refs: Vec<(&str, &[u8])> = files.iter().map(|(n, b)| (*n, b.as_slice())).collect();
    dir.publish(&refs).expect("publish revision");
}

/// Judged revisions so far: applied plus rejected.
fn judged(sc: &Sidecar) -> usize {
    sc.log_count("applied credential revision") + sc.log_count("rejected credential revision")
}

async fn failures(sc: &Sidecar, reason: &str) -> f64 {
    let m = scrape(&sc.admin()).await;
    m.value(FAILURES, &[("route", "server"), ("reason", reason)])
        .unwrap_or(0.0)
}

/// A client presenting the scenario's leaf and intermediates.
fn client(m: &Minted) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(m.ca_pem.as_bytes()) {
        roots.add(c.expect("CA")).expect("add CA");
    }
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(m.chain_pem().as_bytes())
            .collect::<Result<_, _>>()
            .expect("chain");
    let key = PrivateKeyDer::from_pem_slice(m.leaf_key_pem.as_bytes()).expect("key");
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .expect("client identity"),
    )
}

/// Swaps `sc`'s revision to scenario `m` and checks one handshake against
/// the in-process verdict `expected`. Returns what happened, for the log.
pub async fn confirm(sc: &Sidecar, dir: &AtomicDir, m: &Minted, expected: &str) -> String {
    let before = judged(sc);
    let rejected_before = sc.log_count("rejected credential revision");
    publish(dir, m);
    eventually("the revision judged", || judged(sc) > before).await;
    let rejected = sc.log_count("rejected credential revision") > rejected_before;
    if expected == REJECTED {
        assert!(
            rejected,
            "{}: the sidecar applied a revision the judge rejects",
            m.shape.describe()
        );
        return REJECTED.to_string();
    }
    assert!(
        !rejected,
        "{}: the sidecar rejected the revision:\n{}",
        m.shape.describe(),
        sc.logs().join("\n")
    );
    let counted_before = failures(sc, expected).await;
    let admitted = match tls_connect(&sc.addr("server"), gen::SERVER_NAME, client(m)).await {
        Ok(mut s) => !refused(&mut s).await,
        Err(_) => false,
    };
    if expected == "ok" {
        assert!(
            admitted,
            "{}: refused by the sidecar, the judge admits:\n{}",
            m.shape.describe(),
            sc.logs().join("\n")
        );
        return "ok".to_string();
    }
    assert!(
        !admitted,
        "{}: admitted by the sidecar, the judge says {expected}",
        m.shape.describe()
    );
    let admin = sc.admin();
    scrape_until(&admin, &format!("{expected} counted once more"), |page| {
        page.value(FAILURES, &[("route", "server"), ("reason", expected)])
            .unwrap_or(0.0)
            == counted_before + 1.0
    })
    .await;
    expected.to_string()
}

/// The scope the sample's sidecar runs with.
pub const SCOPE: CrlScope = CrlScope::Chain;

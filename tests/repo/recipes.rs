//! The revocation recipes of docs/rotation.md, `docs/recipes/*.sh`, run
//! step by step with the built binary (and openssl) in a temporary
//! directory, while real sidecars read the directory the recipe publishes
//! into; after each step, every peer identity the recipe made handshakes
//! with them and the verdict (admitted, or refused with the reason the
//! failure counter shows) is asserted:
//!
//! - intermediate: an intermediate's CRL revokes its leaf; the root's CRL
//!   revoking the intermediate refuses all of its leaves with
//!   `--crl-scope chain` and none but the leaked one with `leaf`;
//! - rotation: A's CRL, published once, stays enforced across the overlap,
//!   the re-issue and A's removal for as long as `--trust-grace` keeps A;
//!   then A's peers are unknown, its CRL ignored, and dropping it counts no
//!   removal;
//! - same-name: two CAs of one name, each CRL refusing its own CA's leaked
//!   peer only.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use common::*;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

const FAILURES: &str = "mtls_sidecar_tls_handshake_failures_total";

/// Runs one step of a recipe; its output, which must end in success.
fn step(recipe: &str, work: &Path, name: &str) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("docs/recipes/{recipe}.sh"));
    let out = Command::new("bash")
        .arg(&script)
        .arg(work)
        .arg(name)
        .env("MTLS_SIDECAR", bin())
        .output()
        .expect("run bash");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{recipe} {name}:\n{text}");
    text
}

/// A client config presenting the recipe's peer `name` (its whole chain)
/// and trusting every CA certificate the recipe wrote (the server's
/// identity is not what these tests judge).
fn peer(work: &Path, name: &str) -> Arc<rustls::ClientConfig> {
    let dir = work.join("peers").join(name);
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(dir.join("tls.crt"))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(dir.join("tls.key")).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for entry in std::fs::read_dir(work).unwrap() {
        let ca = entry.unwrap().path().join("ca.crt");
        for der in CertificateDer::pem_file_iter(&ca).into_iter().flatten() {
            let _ = roots.add(der.unwrap());
        }
    }
    let cfg = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .unwrap();
    Arc::new(cfg)
}

/// How `sc` judges the peer `name`: `ok`, or the failure reason its
/// counter went up by.
async fn verdict(sc: &Sidecar, work: &Path, name: &str) -> String {
    let admin = sc.admin();
    let before = scrape(&admin).await;
    let count = |m: &expo::Exposition| -> Vec<(String, f64)> {
        m.series(FAILURES)
            .into_iter()
            .map(|s| (s.labels.get("reason").cloned().unwrap_or_default(), s.value))
            .collect()
    };
    let was = count(&before);
    let admitted = match tls_connect(&sc.addr("server"), REPLICA, peer(work, name)).await {
        Ok(mut s) => !refused(&mut s).await,
        Err(_) => false,
    };
    if admitted {
        return "ok".into();
    }
    let m = scrape_until(&admin, &format!("a refusal of {name} counted"), |m| {
        count(m)
            .iter()
            .any(|(r, v)| !was.contains(&(r.clone(), *v)))
    })
    .await;
    let now = count(&m);
    now.into_iter()
        .find(|x| !was.contains(x))
        .map(|(r, _)| r)
        .unwrap()
}

/// Asserts each `(peer, verdict)` on `sc`.
async fn expect(sc: &Sidecar, work: &Path, when: &str, want: &[(&str, &str)]) {
    for (name, v) in want {
        assert_eq!(
            verdict(sc, work, name).await,
            *v,
            "{when}: {name}\n{}",
            sc.logs().join("\n")
        );
    }
}

/// Waits until `sc` has applied `n` credential revisions after start.
async fn applied(sc: &Sidecar, n: usize) {
    eventually(&format!("{n} revisions applied"), || {
        sc.log_count("applied credential revision") >= n
    })
    .await;
}

async fn server(work: &Path, echo: &Echo, extra: &[&str]) -> Sidecar {
    let mut args = vec!["--admin", "127.0.0.1:0", "--reload-interval", "50ms"];
    args.extend_from_slice(extra);
    start_server(&work.join("tls"), &echo.addr.to_string(), &args).await
}

fn workdir() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().to_path_buf();
    (tmp, work)
}

#[tokio::test(flavor = "multi_thread")]
async fn intermediate_crl_revokes_its_leaf_and_the_roots_crl_the_intermediate() {
    let (_tmp, w) = workdir();
    let echo = echo_target().await;
    step("intermediate", &w, "pki");
    let leaf = server(&w, &echo, &[]).await;
    let chain = server(&w, &echo, &["--crl-scope", "chain"]).await;
    for sc in [&leaf, &chain] {
        expect(sc, &w, "no CRL", &[("good", "ok"), ("leaked", "ok")]).await;
    }
    let out = step("intermediate", &w, "revoke-leaf");
    assert!(
        out.contains("verified, signed by the intermediate CN=Recipe Intermediate CA"),
        "{out}"
    );
    for sc in [&leaf, &chain] {
        applied(sc, 1).await;
        let want = [("good", "ok"), ("leaked", "revoked")];
        expect(sc, &w, "the intermediate's CRL", &want).await;
    }
    step("intermediate", &w, "revoke-intermediate");
    applied(&leaf, 2).await;
    applied(&chain, 2).await;
    let want = [("good", "ok"), ("leaked", "revoked")];
    expect(&leaf, &w, "root's CRL, scope leaf", &want).await;
    let want = [("good", "revoked"), ("leaked", "revoked")];
    expect(&chain, &w, "root's CRL, scope chain", &want).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_ca_rotation_carries_the_crl_through_the_grace_then_ignores_it() {
    let (_tmp, w) = workdir();
    let echo = echo_target().await;
    let r = "rotation";
    step(r, &w, "start");
    let sc = server(&w, &echo, &["--trust-grace", "10s"]).await;
    let a = [("a-good", "ok"), ("a-leaked", "revoked")];
    expect(&sc, &w, "start", &a).await;
    for (n, name) in ["overlap", "reissue"].into_iter().enumerate() {
        step(r, &w, name);
        applied(&sc, n + 1).await;
        expect(&sc, &w, name, &a).await;
        expect(&sc, &w, name, &[("b-good", "ok")]).await;
    }
    // A leaves ca.crt; for the grace its CRL still refuses a-leaked.
    let out = step(r, &w, "drop-a");
    assert!(
        out.contains("ignored, its CA CN=Recipe CA A is no longer in ca.crt"),
        "{out}"
    );
    applied(&sc, 3).await;
    expect(&sc, &w, "A in its grace", &a).await;
    // A retires: its peers are unknown, its CRL ignored with one WARN.
    sc.wait_log(&["CRL ignored: the CA that signed it is no longer trusted"])
        .await;
    let retired = [("a-good", "unknown_ca"), ("a-leaked", "unknown_ca")];
    expect(&sc, &w, "A retired", &retired).await;
    expect(&sc, &w, "A retired", &[("b-good", "ok")]).await;
    // Dropping the ignored CRL un-revokes nothing.
    let out = step(r, &w, "cleanup");
    assert!(!out.contains("un-revokes"), "{out}");
    applied(&sc, 4).await;
    let m = scrape(&sc.admin()).await;
    assert_eq!(m.value("mtls_sidecar_crl_removals_total", &[]), Some(0.0));
    assert_eq!(sc.log_count("un-revokes certificates"), 0);
    expect(&sc, &w, "cleanup", &[("b-good", "ok")]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn two_cas_of_one_name_each_have_their_crl() {
    let (_tmp, w) = workdir();
    let echo = echo_target().await;
    let r = "same-name";
    step(r, &w, "pki");
    let sc = server(&w, &echo, &[]).await;
    let mut want = [
        ("old-good", "ok"),
        ("old-leaked", "ok"),
        ("new-good", "ok"),
        ("new-leaked", "ok"),
    ];
    expect(&sc, &w, "no CRL", &want).await;
    step(r, &w, "revoke-old");
    applied(&sc, 1).await;
    want[1].1 = "revoked";
    expect(&sc, &w, "the old key's CRL", &want).await;
    step(r, &w, "revoke-new");
    applied(&sc, 2).await;
    want[3].1 = "revoked";
    expect(&sc, &w, "both CRLs", &want).await;
}

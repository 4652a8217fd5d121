//! The CA renewal the shipped issuer performs, driven through kubelet-style
//! revisions (`publish`) against a live client/server pair: no handshake may
//! fail and no connection may close.
//!
//! The sequence is what cert-manager, trust-manager and the kubelet do with
//! deploy/kubernetes/pki: cert-manager renews the CA certificate (with the
//! manifest's `rotationPolicy`), trust-manager replaces `ca.crt` in the
//! bundle with the renewed certificate, each pod's kubelet swaps its
//! projected volume at its own moment, and later cert-manager re-issues the
//! leaves from the renewed CA. The order chosen is the hostile one: the
//! server sees everything first, the client last.
//!
//! A positive control runs the same sequence with a re-keyed CA (what
//! `rotationPolicy: Always` produced) and must see it break, so a passing
//! run means something.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use common::*;
use mtls_sidecar::pki::{DevCa, Issued, LeafSpec, Role};
use mtls_sidecar::tools::publish::{publish, Entry};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair, KeyUsagePurpose,
    SerialNumber,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The CA Certificate's `privateKey.rotationPolicy` in the shipped manifest.
fn shipped_rotation_policy() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/kubernetes/pki/ca.yaml");
    let docs = yaml_rust2::YamlLoader::load_from_str(&std::fs::read_to_string(path).unwrap())
        .expect("pki/ca.yaml");
    let ca = docs
        .iter()
        .find(|d| {
            d["kind"].as_str() == Some("Certificate") && d["spec"]["isCA"].as_bool() == Some(true)
        })
        .expect("the CA Certificate");
    ca["spec"]["privateKey"]["rotationPolicy"]
        .as_str()
        .expect("rotationPolicy")
        .to_string()
}

/// A self-signed CA certificate for `key`, as cert-manager's self-signed
/// issuer writes one (same subject on every renewal, a new serial).
fn ca_cert(key: &KeyPair, not_before: SystemTime, not_after: SystemTime, serial: u64) -> DevCa {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "mtls-sidecar CA");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = not_before.into();
    params.not_after = not_after.into();
    params.serial_number = Some(SerialNumber::from(serial));
    let cert = params.self_signed(key).expect("self-sign CA");
    DevCa::from_pem(&cert.pem(), &key.serialize_pem()).expect("load CA")
}

fn revision(dir: &Path, leaf: &Issued, ca_pem: &str) {
    let entries = [
        ("tls.crt", leaf.cert_pem.as_bytes()),
        ("tls.key", leaf.key_pem.as_bytes()),
        ("ca.crt", ca_pem.as_bytes()),
    ]
    .map(|(n, b)| Entry {
        name: n.to_string(),
        bytes: b.to_vec(),
    });
    publish(dir, &entries, 0o640).expect("publish a revision");
}

/// Sends a message and reads it back, or says why not.
async fn try_roundtrip(s: &mut TcpStream, msg: &[u8]) -> Result<(), String> {
    s.write_all(msg).await.map_err(|e| format!("write: {e}"))?;
    let mut buf = vec![0u8; msg.len()];
    match tokio::time::timeout(DEADLINE, s.read_exact(&mut buf)).await {
        Ok(Ok(_)) if buf == msg => Ok(()),
        Ok(Ok(_)) => Err("wrong bytes back".into()),
        Ok(Err(e)) => Err(format!("read: {e}")),
        Err(_) => Err("no answer".into()),
    }
}

/// Waits until `sc` has judged `n` revisions after its first load (applied,
/// or rejected: a rejection is reported as a failure at the end).
async fn applied(sc: &Sidecar, n: usize) {
    eventually("the revision to be judged", || {
        sc.log_count("applied credential revision") + sc.log_count("rejected credential revision")
            >= n
    })
    .await;
}

/// Runs the renewal; returns the first failure seen.
async fn renewal(keep_key: bool) -> Result<(), String> {
    let tmp = tempfile::tempdir().unwrap();
    let now = SystemTime::now();
    let day = Duration::from_secs(86_400);
    let key = KeyPair::generate().unwrap();
    let ca = ca_cert(&key, now - 300 * day, now + 60 * day, 1);
    let leaf = |ca: &DevCa, name: &str, role| ca.issue(&LeafSpec::dns(name, role, 30)).unwrap();
    let (server_dir, client_dir): (PathBuf, PathBuf) = (tmp.path().join("s"), tmp.path().join("c"));
    revision(&server_dir, &leaf(&ca, REPLICA, Role::Server), &ca.cert_pem);
    revision(
        &client_dir,
        &leaf(&ca, CONTROLLER, Role::Client),
        &ca.cert_pem,
    );

    let echo = echo_target().await;
    let fast = ["--reload-interval", "50ms"];
    let server = start_server(&server_dir, &echo.addr.to_string(), &fast).await;
    let client = start_client(&client_dir, &server.addr("server"), &fast).await;
    let mut live = TcpStream::connect(client.addr("client")).await.unwrap();
    try_roundtrip(&mut live, b"before").await?;

    // cert-manager renews the CA 90 days before expiry. rotationPolicy
    // Never: same key; Always: a new one.
    let renewed_key = if keep_key {
        key
    } else {
        KeyPair::generate().unwrap()
    };
    let renewed = ca_cert(
        &renewed_key,
        now - Duration::from_secs(60),
        now + 1825 * day,
        2,
    );

    let mut checks = 0;
    let mut step = async |what: &str, live: &mut TcpStream| -> Result<(), String> {
        checks += 1;
        let tag = format!("{what}: ");
        try_roundtrip(live, format!("live {checks}").as_bytes())
            .await
            .map_err(|e| tag.clone() + "live connection: " + &e)?;
        let mut fresh = TcpStream::connect(client.addr("client")).await.unwrap();
        try_roundtrip(&mut fresh, b"new")
            .await
            .map_err(|e| tag + "new connection: " + &e)
    };

    // 1. trust-manager replaces ca.crt with the renewed CA; the server's
    //    kubelet delivers it first.
    revision(
        &server_dir,
        &leaf(&ca, REPLICA, Role::Server),
        &renewed.cert_pem,
    );
    applied(&server, 1).await;
    step("server trusts the renewed CA", &mut live).await?;
    // 2. cert-manager re-issues the replica's leaf from the renewed CA.
    revision(
        &server_dir,
        &leaf(&renewed, REPLICA, Role::Server),
        &renewed.cert_pem,
    );
    applied(&server, 2).await;
    step("server presents a leaf from the renewed CA", &mut live).await?;
    // 3. The client's kubelet catches up: the bundle, then its new leaf.
    revision(
        &client_dir,
        &leaf(&ca, CONTROLLER, Role::Client),
        &renewed.cert_pem,
    );
    applied(&client, 1).await;
    step("client trusts the renewed CA", &mut live).await?;
    revision(
        &client_dir,
        &leaf(&renewed, CONTROLLER, Role::Client),
        &renewed.cert_pem,
    );
    applied(&client, 2).await;
    step("client presents a leaf from the renewed CA", &mut live).await?;

    for (who, sc) in [("server", &server), ("client", &client)] {
        let bad: Vec<String> = sc
            .logs()
            .into_iter()
            .filter(|l| {
                l.contains("handshake refused") || l.contains("revoked") || l.contains("rejected")
            })
            .collect();
        if !bad.is_empty() {
            return Err(format!("{who}: {}", bad.join("\n")));
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_shipped_ca_renewal_drops_nothing() {
    let policy = shipped_rotation_policy();
    let keep_key = match policy.as_str() {
        "Never" => true,
        "Always" => false,
        other => panic!("unexpected rotationPolicy {other}"),
    };
    if let Err(e) = renewal(keep_key).await {
        panic!("CA renewal with rotationPolicy {policy} broke the pair: {e}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn control_a_rekeyed_ca_renewal_is_seen_to_break_the_pair() {
    let e = renewal(false)
        .await
        .expect_err("a re-keyed CA renewal must break a live pair; the harness saw nothing");
    assert!(e.contains("connection"), "{e}");
}

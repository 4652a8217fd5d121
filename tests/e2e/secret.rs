//! `check --secret`, run as the real binary on Secrets printed the way
//! `kubectl get secret -o yaml|json` prints them: the seed-003 preflight
//! matrix (wrong type, missing key, empty key, not PEM, unparseable, SAN
//! mismatch, SAN superset), stdin, trust from a separate bundle, and
//! hostile documents that must end in a clear failure, never a panic.

use crate::common;

use std::io::Write;
use std::process::{Command, Stdio};

use base64::Engine;
use common::*;
use mtls_sidecar::pki::{Issued, LeafSpec, Role};
use serde_json::Value;

const TLS: &str = "kubernetes.io/tls";

/// A Secret as `kubectl get secret -o yaml` prints it: `data` base64, keys
/// sorted, `type` last.
fn secret_yaml(kind: Option<&str>, data: &[(&str, &[u8])]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut s = String::from("apiVersion: v1\ndata:\n");
    let mut sorted: Vec<_> = data.to_vec();
    sorted.sort();
    for (k, v) in sorted {
        s.push_str(&format!("  {k}: {}\n", b64.encode(v)));
    }
    s.push_str("kind: Secret\nmetadata:\n  creationTimestamp: \"2026-11-30T10:00:00Z\"\n  name: replica-mtls\n  namespace: env-1\n  resourceVersion: \"4242\"\n  uid: 0d5e6a3c-7d1e-4c1a-9b55-2a1a0c3f1e11\n");
    if let Some(t) = kind {
        s.push_str(&format!("type: {t}\n"));
    }
    s
}

fn good_files(pki: &Pki, leaf: &Issued) -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("ca.crt", pki.ca.cert_pem.clone().into_bytes()),
        ("tls.crt", leaf.cert_pem.clone().into_bytes()),
        ("tls.key", leaf.key_pem.clone().into_bytes()),
    ]
}

fn as_refs<'a>(files: &'a [(&'static str, Vec<u8>)]) -> Vec<(&'static str, &'a [u8])> {
    files.iter().map(|(k, v)| (*k, v.as_slice())).collect()
}

/// Runs `check --secret - ARGS --json` with `doc` on stdin.
fn check_stdin(doc: &str, args: &[&str]) -> (i32, Value, String) {
    let mut child = Command::new(bin())
        .args(["check", "--secret", "-", "--json"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run check");
    let mut stdin = child.stdin.take().unwrap();
    let doc = doc.to_string();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(doc.as_bytes());
    });
    let out = child.wait_with_output().expect("check output");
    writer.join().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let report = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}):\n{stdout}\n{stderr}"));
    (out.status.code().unwrap_or(-1), report, stderr)
}

/// Runs `check --secret FILE ARGS --json`.
fn check_file(doc: &str, args: &[&str]) -> (i32, Value) {
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("secret.yaml");
    std::fs::write(&f, doc).unwrap();
    let out = Command::new(bin())
        .args(["check", "--secret", f.to_str().unwrap(), "--json"])
        .args(args)
        .output()
        .expect("run check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}):\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), report)
}

fn check_of<'a>(report: &'a Value, name: &str, subject: Option<&str>) -> &'a Value {
    report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["name"] == name && subject.is_none_or(|s| c["subject"] == s))
        .unwrap_or_else(|| panic!("no check {name} {subject:?} in {report:#}"))
}

fn assert_check(report: &Value, name: &str, subject: Option<&str>, status: &str, needle: &str) {
    let c = check_of(report, name, subject);
    assert_eq!(c["status"], status, "{name} {subject:?}: {report:#}");
    let detail = c["detail"].as_str().unwrap();
    assert!(
        detail.contains(needle),
        "{name}: {detail:?} lacks {needle:?}"
    );
}

/// Exactly the named checks failed, and the exit status says so.
fn assert_failed_only(code: i32, report: &Value, failed: &[&str]) {
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(report["ok"], false);
    for c in report["checks"].as_array().unwrap() {
        if c["status"] == "fail" {
            let n = c["name"].as_str().unwrap();
            assert!(failed.contains(&n), "unexpected failure {c}");
        }
    }
    for f in failed {
        let any = report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == *f && c["status"] == "fail");
        assert!(any, "{f} did not fail: {report:#}");
    }
}

fn replica() -> (Pki, Issued) {
    let pki = Pki::new("secret CA");
    let leaf = pki.leaf(REPLICA, Role::Server);
    (pki, leaf)
}

#[test]
fn a_good_tls_secret_passes_from_a_file_from_stdin_and_as_json() {
    let (pki, leaf) = replica();
    let files = good_files(&pki, &leaf);
    let doc = secret_yaml(Some(TLS), &as_refs(&files));
    let args = ["--role", "server", "--require-san", REPLICA];
    let (code, report) = check_file(&doc, &args);
    assert_eq!(code, 0, "{report:#}");
    assert_check(&report, "secret", None, "pass", "Secret env-1/replica-mtls");
    assert_check(&report, "type", None, "pass", TLS);
    assert_check(&report, "load", None, "pass", "the sidecar accepts");
    assert_eq!(report["certificate"]["dns_sans"][0], REPLICA);

    let (code, report, _) = check_stdin(&doc, &args);
    assert_eq!(code, 0, "{report:#}");

    // `kubectl get secret -o json`, and a List holding that one Secret.
    let b64 = base64::engine::general_purpose::STANDARD;
    let data: serde_json::Map<String, Value> = files
        .iter()
        .map(|(k, v)| (k.to_string(), Value::String(b64.encode(v))))
        .collect();
    let json = serde_json::json!({
        "apiVersion": "v1", "kind": "Secret", "type": TLS, "data": data,
        "metadata": {"name": "replica-mtls", "namespace": "env-1"}
    });
    let (code, report, _) = check_stdin(&serde_json::to_string_pretty(&json).unwrap(), &args);
    assert_eq!(code, 0, "{report:#}");
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [json]});
    let (code, report, _) = check_stdin(&list.to_string(), &args);
    assert_eq!(code, 0, "{report:#}");

    // The text form names the Secret.
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("s.yaml");
    std::fs::write(&f, &doc).unwrap();
    let (code, text) = run_bin(&["check", "--secret", f.to_str().unwrap()]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("PASS  type"), "{text}");
    assert!(
        text.contains("checking Secret env-1/replica-mtls"),
        "{text}"
    );
}

#[test]
fn the_wrong_type_fails() {
    let (pki, leaf) = replica();
    let files = good_files(&pki, &leaf);
    let (code, report) = check_file(&secret_yaml(Some("Opaque"), &as_refs(&files)), &[]);
    assert_check(
        &report,
        "type",
        None,
        "fail",
        "type is Opaque, not kubernetes.io/tls",
    );
    assert_failed_only(code, &report, &["type"]);
    let (code, report) = check_file(&secret_yaml(None, &as_refs(&files)), &[]);
    assert_check(&report, "type", None, "fail", "no type");
    assert_failed_only(code, &report, &["type"]);
}

#[test]
fn a_missing_key_fails_and_names_the_keys_it_has() {
    let (pki, leaf) = replica();
    let mut files = good_files(&pki, &leaf);
    files.retain(|(k, _)| *k != "tls.key");
    let (code, report) = check_file(&secret_yaml(Some(TLS), &as_refs(&files)), &[]);
    assert_check(
        &report,
        "present",
        Some("tls.key"),
        "fail",
        "no tls.key key (it has [ca.crt, tls.crt])",
    );
    assert_check(&report, "key_match", None, "skip", "");
    assert_check(&report, "load", None, "skip", "");
    assert_failed_only(code, &report, &["present"]);

    // No ca.crt: the hint names the separate-bundle path...
    files = good_files(&pki, &leaf);
    files.retain(|(k, _)| *k != "ca.crt");
    let doc = secret_yaml(Some(TLS), &as_refs(&files));
    let (code, report) = check_file(&doc, &[]);
    assert_check(&report, "present", Some("ca.crt"), "fail", "--ca FILE");
    assert_failed_only(code, &report, &["present"]);
    // ...and with the bundle given separately the Secret passes.
    let tmp = tempfile::tempdir().unwrap();
    let ca = tmp.path().join("bundle.pem");
    std::fs::write(&ca, &pki.ca.cert_pem).unwrap();
    let (code, report) = check_file(&doc, &["--ca", ca.to_str().unwrap()]);
    assert_eq!(code, 0, "{report:#}");
    // A bundle from another CA is judged, not the Secret's own ca.crt.
    let foreign = Pki::new("foreign CA");
    std::fs::write(&ca, &foreign.ca.cert_pem).unwrap();
    let full = secret_yaml(Some(TLS), &as_refs(&good_files(&pki, &leaf)));
    let (code, report) = check_file(&full, &["--ca", ca.to_str().unwrap()]);
    assert_check(&report, "chain", None, "fail", "does not chain to");
    assert_failed_only(code, &report, &["chain"]);
}

#[test]
fn an_empty_key_fails() {
    let (pki, leaf) = replica();
    let mut files = good_files(&pki, &leaf);
    files[1].1 = Vec::new();
    let (code, report) = check_file(&secret_yaml(Some(TLS), &as_refs(&files)), &[]);
    assert_check(
        &report,
        "present",
        Some("tls.crt"),
        "fail",
        "tls.crt is empty",
    );
    assert_failed_only(code, &report, &["present"]);
    // `tls.key: ""` as kubectl prints an empty value, and a bare `tls.key:`.
    let doc = secret_yaml(Some(TLS), &as_refs(&good_files(&pki, &leaf)));
    let key_line = doc.lines().find(|l| l.contains("tls.key:")).unwrap();
    for empty in ["  tls.key: \"\"", "  tls.key:"] {
        let (code, report) = check_file(&doc.replace(key_line, empty), &[]);
        assert_check(
            &report,
            "present",
            Some("tls.key"),
            "fail",
            "tls.key is empty",
        );
        assert_failed_only(code, &report, &["present"]);
    }
}

#[test]
fn data_that_is_not_pem_or_not_base64_fails() {
    let (pki, leaf) = replica();
    let mut files = good_files(&pki, &leaf);
    files[1].1 = b"this is not a certificate\n".to_vec();
    let (code, report) = check_file(&secret_yaml(Some(TLS), &as_refs(&files)), &[]);
    assert_check(&report, "pem", Some("tls.crt"), "fail", "not valid PEM");
    assert_failed_only(code, &report, &["pem"]);

    let doc = secret_yaml(Some(TLS), &as_refs(&good_files(&pki, &leaf)));
    let line = doc.lines().find(|l| l.contains("tls.crt:")).unwrap();
    let (code, report) = check_file(&doc.replace(line, "  tls.crt: '%%% not base64'"), &[]);
    assert_check(&report, "present", Some("tls.crt"), "fail", "not base64");
    assert_failed_only(code, &report, &["present"]);
}

#[test]
fn pem_that_does_not_parse_fails() {
    let (pki, leaf) = replica();
    let mut files = good_files(&pki, &leaf);
    files[1].1 =
        b"-----BEGIN CERTIFICATE-----\nMIIBAgMEBQYHCAkK\n-----END CERTIFICATE-----\n".to_vec();
    let (code, report) = check_file(&secret_yaml(Some(TLS), &as_refs(&files)), &[]);
    assert_check(
        &report,
        "parse",
        Some("tls.crt"),
        "fail",
        "not a valid X.509",
    );
    assert_failed_only(code, &report, &["parse"]);
    files = good_files(&pki, &leaf);
    files[2].1 =
        b"-----BEGIN PRIVATE KEY-----\nMIIBAgMEBQYHCAkK\n-----END PRIVATE KEY-----\n".to_vec();
    let (code, report) = check_file(&secret_yaml(Some(TLS), &as_refs(&files)), &[]);
    assert_check(
        &report,
        "parse",
        Some("tls.key"),
        "fail",
        "unusable private key",
    );
    assert_failed_only(code, &report, &["parse"]);
}

#[test]
fn a_san_mismatch_fails_and_a_san_superset_passes() {
    let (pki, leaf) = replica();
    let files = good_files(&pki, &leaf);
    let doc = secret_yaml(Some(TLS), &as_refs(&files));
    let (code, report) = check_file(
        &doc,
        &["--require-san", REPLICA, "--require-san", CONTROLLER],
    );
    assert_check(
        &report,
        "san",
        Some(CONTROLLER),
        "fail",
        "no SAN matches controller.env-1.svc",
    );
    assert_check(&report, "san", Some(REPLICA), "pass", "");
    assert_failed_only(code, &report, &["san"]);

    // More SANs than required (pod names, a SPIFFE ID) is fine.
    let mut spec = LeafSpec::dns(REPLICA, Role::Server, 30);
    spec.dns
        .push("replica-0.replica.env-1.svc.cluster.local".into());
    spec.uris
        .push("spiffe://cluster.local/ns/env-1/sa/replica".into());
    let wide = pki.issue(&spec);
    let doc = secret_yaml(Some(TLS), &as_refs(&good_files(&pki, &wide)));
    let (code, report) = check_file(&doc, &["--require-san", REPLICA, "--role", "server"]);
    assert_eq!(code, 0, "{report:#}");
}

#[test]
fn hostile_or_foreign_documents_fail_cleanly() {
    let cases: &[(&str, &str)] = &[
        ("kind: ConfigMap\nmetadata: {name: x}\n", "not \"Secret\""),
        (
            "kind: Secret\na: &a [x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a]\n",
            "alias",
        ),
        ("kind: Secret\nkind: Secret\n", "duplicate key"),
        ("this: [is: {not", "neither YAML nor JSON"),
        ("{\"kind\": \"Secret\", ", "neither YAML nor JSON"),
        ("", "neither YAML nor JSON"),
        (
            "---\nkind: Secret\n---\nkind: Secret\n",
            "more than one document",
        ),
        ("kind: List\nitems: []\n", "a List of 0 items"),
        ("apiVersion: v2\nkind: Secret\n", "apiVersion"),
    ];
    for (doc, needle) in cases {
        let (code, report, stderr) = check_stdin(doc, &[]);
        assert_eq!(code, 1, "{doc:?}: {report:#}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert_check(&report, "secret", None, "fail", needle);
        assert_check(
            &report,
            "present",
            Some("tls.crt"),
            "skip",
            "could not be read",
        );
    }
    // Deep nesting: a clear error, not a stack overflow.
    let deep = format!(
        "kind: Secret\nx: {}{}\n",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let (code, report, stderr) = check_stdin(&deep, &[]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(check_of(&report, "secret", None)["status"], "fail");
    let deep_json = format!(
        "{{\"kind\":\"Secret\",\"x\":{}1{}}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let (code, _, stderr) = check_stdin(&deep_json, &[]);
    assert_eq!(code, 1, "{stderr}");
    // More than any Secret can be: refused without reading it all.
    let huge = format!("kind: Secret\ndata:\n  tls.crt: {}\n", "A".repeat(5 << 20));
    let (code, report, _) = check_stdin(&huge, &[]);
    assert_eq!(code, 1);
    assert_check(&report, "secret", None, "fail", "larger than");
    // Binary garbage.
    let garbage: String = (0u8..=255).map(char::from).collect();
    let (code, _, stderr) = check_stdin(&garbage, &[]);
    assert_eq!(code, 1, "{stderr}");
    // An unreadable file.
    let (code, text) = run_bin(&["check", "--secret", "/nonexistent/secret.yaml"]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("cannot read"), "{text}");
}

#[test]
fn secret_conflicts_with_a_directory_or_files() {
    let (code, text) = run_bin(&["check", "--secret", "-", "--tls-dir", "/x"]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("--secret"), "{text}");
    let (code, text) = run_bin(&["check", "--secret", "-", "--cert", "/x/tls.crt"]);
    assert_eq!(code, 2, "{text}");
}

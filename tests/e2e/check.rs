//! `mtls-sidecar check`, run as the real binary: the passing case, one test
//! per failing case (each failure FAILs its own line, SKIPs what depends on
//! it, and exits 1), and usage errors (exit 2).

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

use common::*;
use mtls_sidecar::pki::{LeafSpec, Role};
use mtls_sidecar::tools::atomic_writer::AtomicDir;
use serde_json::Value;

const DAY: Duration = Duration::from_secs(86_400);

/// Runs `check ARGS --json`; returns the exit code and the parsed report.
fn check_json(args: &[&str]) -> (i32, Value) {
    let out = Command::new(bin())
        .arg("check")
        .args(args)
        .arg("--json")
        .output()
        .expect("run check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "--json output is not JSON ({e}):\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), report)
}

/// The status and detail of check `name` (about `subject`, if given).
fn status(report: &Value, name: &str, subject: Option<&str>) -> (String, String) {
    let checks = report["checks"].as_array().expect("checks array");
    let c = checks
        .iter()
        .find(|c| c["name"] == name && subject.is_none_or(|s| c["subject"] == s))
        .unwrap_or_else(|| panic!("no check {name} {subject:?} in {report:#}"));
    (
        c["status"].as_str().unwrap().to_string(),
        c["detail"].as_str().unwrap().to_string(),
    )
}

fn assert_status(report: &Value, name: &str, subject: Option<&str>, want: &str, needle: &str) {
    let (got, detail) = status(report, name, subject);
    assert_eq!(got, want, "{name} {subject:?}: {detail}\n{report:#}");
    assert!(
        detail.contains(needle),
        "{name} {subject:?}: {detail:?} lacks {needle:?}"
    );
}

/// Every check that is not `name` passed (so a failure is reported once).
fn assert_only_failure(report: &Value, failed: &[&str]) {
    assert_eq!(report["ok"], false);
    for c in report["checks"].as_array().unwrap() {
        let n = c["name"].as_str().unwrap();
        if c["status"] == "fail" {
            assert!(failed.contains(&n), "unexpected failure {c}");
        }
    }
    assert_status(report, "load", None, "skip", "earlier check failed");
}

fn dir_arg(d: &Path) -> String {
    d.to_str().unwrap().to_string()
}

/// A replica server identity in a fresh directory.
fn replica_dir(tmp: &Path) -> (Pki, std::path::PathBuf) {
    let pki = Pki::new("check CA");
    let d = pki.dir(tmp, "replica", &pki.leaf(REPLICA, Role::Server));
    (pki, d)
}

#[test]
fn a_good_directory_passes_every_check() {
    let tmp = tempfile::tempdir().unwrap();
    let (_pki, d) = replica_dir(tmp.path());
    let d = dir_arg(&d);
    let args = [
        "--tls-dir",
        &d,
        "--role",
        "server",
        "--require-san",
        REPLICA,
        "--min-validity",
        "7d",
    ];
    let (code, report) = check_json(&args);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["ok"], true);
    for c in report["checks"].as_array().unwrap() {
        assert_eq!(c["status"], "pass", "{c}");
    }
    for name in [
        "present",
        "pem",
        "parse",
        "key_match",
        "chain",
        "validity",
        "min_validity",
        "role",
        "san",
        "load",
    ] {
        status(&report, name, None);
    }
    assert_eq!(report["certificate"]["dns_sans"][0], REPLICA);

    // The text form: one PASS line per check, then a summary.
    let (code, text) = run_bin(&["check", "--tls-dir", &d, "--require-san", REPLICA]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("PASS  present tls.key"), "{text}");
    assert!(text.contains("PASS  san replica-0.env-1.svc"), "{text}");
    assert!(text.contains("OK: all"), "{text}");
    assert!(!text.contains("FAIL") && !text.contains("SKIP"), "{text}");
}

#[test]
fn a_kubernetes_secret_mount_and_explicit_files_pass() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("check CA");
    let leaf = pki.leaf(CONTROLLER, Role::Client);
    let mount = AtomicDir::new(&tmp.path().join("mount")).unwrap();
    mount
        .publish(&[
            ("tls.crt", leaf.cert_pem.as_bytes()),
            ("tls.key", leaf.key_pem.as_bytes()),
            ("ca.crt", pki.ca.cert_pem.as_bytes()),
        ])
        .unwrap();
    let d = dir_arg(mount.path());
    let (code, report) = check_json(&["--tls-dir", &d, "--role", "client"]);
    assert_eq!(code, 0, "{report:#}");

    let plain = pki.dir(tmp.path(), "plain", &leaf);
    let f = |n: &str| dir_arg(&plain.join(n));
    let (cert, key, ca) = (f("tls.crt"), f("tls.key"), f("ca.crt"));
    let (code, report) = check_json(&["--cert", &cert, "--key", &key, "--ca", &ca]);
    assert_eq!(code, 0, "{report:#}");
}

#[test]
fn a_certificate_with_more_sans_than_required_passes() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("check CA");
    let mut spec = LeafSpec::dns(REPLICA, Role::Both, 30);
    spec.dns
        .push("replica-0.replicas.env-1.svc.cluster.local".into());
    spec.uris
        .push("spiffe://cluster.local/ns/env-1/sa/replica".into());
    let d = pki.dir(tmp.path(), "replica", &pki.issue(&spec));
    let d = dir_arg(&d);
    let (code, report) = check_json(&[
        "--tls-dir",
        &d,
        "--require-san",
        REPLICA,
        "--require-san",
        "spiffe://cluster.local/ns/env-1/sa/replica",
        "--role",
        "both",
    ]);
    assert_eq!(code, 0, "{report:#}");
    assert_status(&report, "san", Some(REPLICA), "pass", REPLICA);
}

#[test]
fn a_missing_file_fails_and_skips_what_depends_on_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (_pki, d) = replica_dir(tmp.path());
    std::fs::remove_file(d.join("tls.key")).unwrap();
    let (code, report) = check_json(&["--tls-dir", &dir_arg(&d)]);
    assert_eq!(code, 1);
    assert_status(
        &report,
        "present",
        Some("tls.key"),
        "fail",
        "tls.key: cannot read: file not found",
    );
    assert_status(
        &report,
        "pem",
        Some("tls.key"),
        "skip",
        "tls.key could not be read",
    );
    assert_status(&report, "parse", Some("tls.key"), "skip", "");
    assert_status(&report, "key_match", None, "skip", "");
    // What does not need the key is still checked.
    assert_status(&report, "chain", None, "pass", "chains to");
    assert_only_failure(&report, &["present"]);

    let (code, text) = run_bin(&["check", "--tls-dir", &dir_arg(&d)]);
    assert_eq!(code, 1);
    assert!(text.contains("FAIL  present tls.key"), "{text}");
    assert!(text.contains("SKIP  key-match"), "{text}");
    assert!(text.contains("FAILED: 1 of"), "{text}");
}

#[test]
fn an_empty_file_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let (_pki, d) = replica_dir(tmp.path());
    std::fs::write(d.join("ca.crt"), "\n").unwrap();
    let (code, report) = check_json(&["--tls-dir", &dir_arg(&d)]);
    assert_eq!(code, 1);
    assert_status(
        &report,
        "present",
        Some("ca.crt"),
        "fail",
        "ca.crt: file is empty",
    );
    assert_status(&report, "chain", None, "skip", "");
    assert_only_failure(&report, &["present"]);
}

#[test]
fn a_file_that_is_not_pem_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let (_pki, d) = replica_dir(tmp.path());
    std::fs::write(d.join("tls.crt"), "this is not a certificate\n").unwrap();
    let (code, report) = check_json(&["--tls-dir", &dir_arg(&d)]);
    assert_eq!(code, 1);
    assert_status(
        &report,
        "pem",
        Some("tls.crt"),
        "fail",
        "tls.crt: not valid PEM",
    );
    assert_status(&report, "parse", Some("tls.crt"), "skip", "");
    for dependent in ["key_match", "chain", "validity"] {
        assert_status(&report, dependent, None, "skip", "");
    }
    assert_only_failure(&report, &["pem"]);
}

#[test]
fn a_pem_certificate_that_does_not_parse_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let (_pki, d) = replica_dir(tmp.path());
    let garbage = "-----BEGIN CERTIFICATE-----\nMIIBAgMEBQYHCAkK\n-----END CERTIFICATE-----\n";
    std::fs::write(d.join("tls.crt"), garbage).unwrap();
    let (code, report) = check_json(&["--tls-dir", &dir_arg(&d), "--require-san", REPLICA]);
    assert_eq!(code, 1);
    assert_status(&report, "pem", Some("tls.crt"), "pass", "1 certificate");
    assert_status(
        &report,
        "parse",
        Some("tls.crt"),
        "fail",
        "certificate #1: not a valid X.509",
    );
    assert_status(
        &report,
        "san",
        Some(REPLICA),
        "skip",
        "tls.crt did not parse",
    );
    assert_only_failure(&report, &["parse"]);
}

#[test]
fn a_pem_key_that_does_not_parse_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let (_pki, d) = replica_dir(tmp.path());
    let garbage = "-----BEGIN PRIVATE KEY-----\nMIIBAgMEBQYHCAkK\n-----END PRIVATE KEY-----\n";
    std::fs::write(d.join("tls.key"), garbage).unwrap();
    let (code, report) = check_json(&["--tls-dir", &dir_arg(&d)]);
    assert_eq!(code, 1);
    assert_status(
        &report,
        "parse",
        Some("tls.key"),
        "fail",
        "unusable private key",
    );
    assert_status(&report, "key_match", None, "skip", "");
    assert_only_failure(&report, &["parse"]);
}

#[test]
fn a_key_that_does_not_match_the_certificate_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let (pki, d) = replica_dir(tmp.path());
    let other = pki.leaf(REPLICA, Role::Server);
    std::fs::write(d.join("tls.key"), &other.key_pem).unwrap();
    let (code, report) = check_json(&["--tls-dir", &dir_arg(&d)]);
    assert_eq!(code, 1);
    assert_status(
        &report,
        "key_match",
        None,
        "fail",
        "private key does not match the certificate",
    );
    assert_only_failure(&report, &["key_match"]);
}

#[test]
fn a_certificate_from_another_ca_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let (_pki, d) = replica_dir(tmp.path());
    let foreign = Pki::new("some other CA");
    std::fs::write(d.join("ca.crt"), &foreign.ca.cert_pem).unwrap();
    let (code, report) = check_json(&["--tls-dir", &dir_arg(&d)]);
    assert_eq!(code, 1);
    // Named for what it is, whichever usage the certificate carries.
    assert_status(&report, "chain", None, "fail", "does not chain to");
    let (_, detail) = status(&report, "chain", None);
    assert!(
        detail.ends_with("not issued by any certificate in the CA bundle"),
        "{detail}"
    );
    assert_only_failure(&report, &["chain"]);
    let pki = Pki::new("check CA");
    let client = pki.dir(tmp.path(), "client", &pki.leaf(CONTROLLER, Role::Client));
    std::fs::write(client.join("ca.crt"), &foreign.ca.cert_pem).unwrap();
    let (_, report) = check_json(&["--tls-dir", &dir_arg(&client)]);
    let (_, detail) = status(&report, "chain", None);
    assert!(
        detail.ends_with("not issued by any certificate in the CA bundle"),
        "{detail}"
    );
}

#[test]
fn an_expired_certificate_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("check CA");
    let now = SystemTime::now();
    let spec = LeafSpec::dns(REPLICA, Role::Server, 30).valid(now - 10 * DAY, now - DAY);
    let d = pki.dir(tmp.path(), "replica", &pki.issue(&spec));
    let (code, report) = check_json(&["--tls-dir", &dir_arg(&d), "--min-validity", "1h"]);
    assert_eq!(code, 1);
    assert_status(&report, "validity", None, "fail", "certificate expired at");
    assert_status(&report, "min_validity", None, "skip", "not valid now");
    // The issuer is right; only the date is wrong, and that is said once.
    assert_status(
        &report,
        "chain",
        None,
        "pass",
        "inside the certificate's validity",
    );
    assert_only_failure(&report, &["validity"]);
}

#[test]
fn too_little_validity_left_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("check CA");
    let d = pki.dir(
        tmp.path(),
        "replica",
        &pki.issue(&LeafSpec::dns(REPLICA, Role::Server, 2)),
    );
    let d = dir_arg(&d);
    let (code, report) = check_json(&["--tls-dir", &d, "--min-validity", "7d"]);
    assert_eq!(code, 1);
    assert_status(&report, "validity", None, "pass", "left");
    assert_status(
        &report,
        "min_validity",
        None,
        "fail",
        "--min-validity asks for 7d",
    );
    assert_only_failure(&report, &["min_validity"]);
    let (code, _) = check_json(&["--tls-dir", &d, "--min-validity", "1d"]);
    assert_eq!(code, 0);
}

#[test]
fn a_certificate_for_the_wrong_role_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("check CA");
    let d = pki.dir(tmp.path(), "ctl", &pki.leaf(CONTROLLER, Role::Client));
    let d = dir_arg(&d);
    let (code, report) = check_json(&["--tls-dir", &d, "--role", "server"]);
    assert_eq!(code, 1);
    assert_status(
        &report,
        "role",
        None,
        "fail",
        "clientAuth does not allow --role server",
    );
    assert_only_failure(&report, &["role"]);
    let (code, report) = check_json(&["--tls-dir", &d, "--role", "both"]);
    assert_eq!(code, 1);
    assert_status(&report, "role", None, "fail", "does not allow --role both");
    let (code, _) = check_json(&["--tls-dir", &d, "--role", "client"]);
    assert_eq!(code, 0);
}

#[test]
fn a_missing_san_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let (_pki, d) = replica_dir(tmp.path());
    let (code, report) = check_json(&[
        "--tls-dir",
        &dir_arg(&d),
        "--require-san",
        REPLICA,
        "--require-san",
        CONTROLLER,
    ]);
    assert_eq!(code, 1);
    assert_status(&report, "san", Some(REPLICA), "pass", "");
    assert_status(
        &report,
        "san",
        Some(CONTROLLER),
        "fail",
        "no SAN matches controller.env-1.svc; the certificate has [replica-0.env-1.svc]",
    );
    assert_only_failure(&report, &["san"]);
}

#[test]
fn usage_errors_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let (_pki, d) = replica_dir(tmp.path());
    let d = dir_arg(&d);
    let (code, text) = run_bin(&["check"]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("--tls-dir"), "{text}");
    let (code, text) = run_bin(&["check", "--cert", "/x/tls.crt"]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("must be given together"), "{text}");
    let (code, text) = run_bin(&["check", "--tls-dir", &d, "--min-validity", "soon"]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("--min-validity"), "{text}");
    let (code, text) = run_bin(&["check", "--tls-dir", &d, "--require-san", "bad name"]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("--require-san"), "{text}");
}

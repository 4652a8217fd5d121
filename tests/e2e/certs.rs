//! `mtls-sidecar certs`, run as the real binary: what it mints is accepted
//! end to end by real `server`/`client` sidecars and by `check`; keys are
//! 0600 and never overwritten without `--force`.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::*;

fn s(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

fn certs(args: &[&str]) -> String {
    let mut full = vec!["certs"];
    full.extend_from_slice(args);
    let (code, text) = run_bin(&full);
    assert_eq!(code, 0, "certs {args:?} failed:\n{text}");
    text
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[tokio::test(flavor = "multi_thread")]
async fn minted_identities_work_end_to_end_and_pass_check() {
    let tmp = tempfile::tempdir().unwrap();
    let (ca, replica, controller, spiffe_ctl) = (
        tmp.path().join("ca"),
        tmp.path().join("replica"),
        tmp.path().join("controller"),
        tmp.path().join("spiffe-controller"),
    );
    certs(&[
        "ca",
        "--out",
        &s(&ca),
        "--name",
        "env-1 dev CA",
        "--days",
        "30",
    ]);
    certs(&[
        "issue",
        "--ca",
        &s(&ca),
        "--out",
        &s(&replica),
        "--dns",
        REPLICA,
        "--role",
        "server",
    ]);
    certs(&[
        "issue",
        "--ca",
        &s(&ca),
        "--out",
        &s(&controller),
        "--dns",
        CONTROLLER,
        "--role",
        "client",
    ]);
    let spiffe = "spiffe://cluster.local/ns/env-1/sa/controller";
    certs(&[
        "issue",
        "--ca",
        &s(&ca),
        "--out",
        &s(&spiffe_ctl),
        "--uri",
        spiffe,
        "--role",
        "client",
    ]);

    // check agrees with what the sidecars are about to accept.
    for (dir, role, san) in [
        (&replica, "server", REPLICA),
        (&controller, "client", CONTROLLER),
        (&spiffe_ctl, "client", spiffe),
    ] {
        let args = [
            "check",
            "--tls-dir",
            &s(dir),
            "--role",
            role,
            "--require-san",
            san,
            "--min-validity",
            "7d",
        ];
        let (code, text) = run_bin(&args);
        assert_eq!(code, 0, "check {dir:?}:\n{text}");
    }

    let echo = echo_target().await;
    let target = echo.addr.to_string();
    let server = start_server(&replica, &target, &["--allow-san", spiffe]).await;
    let saddr = server.addr("server");
    for (name, dir) in [("dns", &controller), ("uri", &spiffe_ctl)] {
        let client = start_client(dir, &saddr, &["--name", name]).await;
        let mut conn = tokio::net::TcpStream::connect(client.addr(name))
            .await
            .unwrap();
        let msg = format!("hello from the {name} controller");
        assert_eq!(roundtrip(&mut conn, msg.as_bytes()).await, msg.as_bytes());
    }
    assert_eq!(echo.accepted(), 2);
}

#[test]
fn key_files_are_private() {
    let tmp = tempfile::tempdir().unwrap();
    let (ca, out) = (tmp.path().join("ca"), tmp.path().join("out"));
    certs(&["ca", "--out", &s(&ca)]);
    certs(&[
        "issue",
        "--ca",
        &s(&ca),
        "--out",
        &s(&out),
        "--dns",
        REPLICA,
        "--role",
        "both",
    ]);
    assert_eq!(mode(&ca.join("ca.key")), 0o600);
    assert_eq!(mode(&out.join("tls.key")), 0o600);
    for public in [ca.join("ca.crt"), out.join("tls.crt"), out.join("ca.crt")] {
        assert!(public.is_file(), "{public:?}");
    }
    assert_eq!(
        std::fs::read(ca.join("ca.crt")).unwrap(),
        std::fs::read(out.join("ca.crt")).unwrap(),
        "the issued directory carries the CA, like a Secret"
    );
}

#[test]
fn existing_keys_are_not_overwritten_without_force() {
    let tmp = tempfile::tempdir().unwrap();
    let (ca, out) = (tmp.path().join("ca"), tmp.path().join("out"));
    certs(&["ca", "--out", &s(&ca)]);
    let ca_key = std::fs::read(ca.join("ca.key")).unwrap();
    let (code, text) = run_bin(&["certs", "ca", "--out", &s(&ca)]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("ca.key: a private key already exists"),
        "{text}"
    );
    assert!(text.contains("--force"), "{text}");
    assert_eq!(
        std::fs::read(ca.join("ca.key")).unwrap(),
        ca_key,
        "CA key untouched"
    );

    let issue = [
        "issue",
        "--ca",
        &s(&ca),
        "--out",
        &s(&out),
        "--dns",
        REPLICA,
        "--role",
        "server",
    ];
    certs(&issue);
    let tls_key = std::fs::read(out.join("tls.key")).unwrap();
    let mut again = vec!["certs"];
    again.extend_from_slice(&issue);
    let (code, text) = run_bin(&again);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("tls.key: a private key already exists"),
        "{text}"
    );
    assert_eq!(
        std::fs::read(out.join("tls.key")).unwrap(),
        tls_key,
        "leaf key untouched"
    );

    // --force replaces the key, and a loosened mode does not survive it.
    std::fs::set_permissions(out.join("tls.key"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut forced = issue.to_vec();
    forced.push("--force");
    certs(&forced);
    assert_ne!(std::fs::read(out.join("tls.key")).unwrap(), tls_key);
    assert_eq!(mode(&out.join("tls.key")), 0o600);
    let (code, text) = run_bin(&["check", "--tls-dir", &s(&out), "--role", "server"]);
    assert_eq!(code, 0, "{text}");

    certs(&["ca", "--out", &s(&ca), "--force"]);
    assert_ne!(std::fs::read(ca.join("ca.key")).unwrap(), ca_key);
}

#[test]
fn bad_usage_exits_2_naming_the_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let (ca, out) = (tmp.path().join("ca"), tmp.path().join("out"));
    certs(&["ca", "--out", &s(&ca)]);
    let cases: [(&[&str], &str); 5] = [
        (&["--role", "server"], "--dns/--uri"),
        (&["--dns", "not a name", "--role", "server"], "--dns"),
        (&["--uri", "no-scheme", "--role", "client"], "--uri"),
        (
            &["--dns", REPLICA, "--role", "server", "--days", "0"],
            "--days",
        ),
        (
            &["--dns", REPLICA, "--role", "server", "--ca", "/nonexistent"],
            "/nonexistent/ca.key: not found, nor tls.key",
        ),
    ];
    for (extra, needle) in cases {
        let mut args = vec!["certs", "issue", "--out"];
        let out_s = s(&out);
        args.push(&out_s);
        let ca_s = s(&ca);
        if !extra.contains(&"--ca") {
            args.extend(["--ca", &ca_s]);
        }
        args.extend_from_slice(extra);
        let (code, text) = run_bin(&args);
        assert_eq!(code, 2, "{args:?}:\n{text}");
        assert!(text.contains(needle), "{args:?}: {text}");
        assert!(
            !out.join("tls.key").exists(),
            "nothing written on a usage error"
        );
    }
}

//! Bad input on the command line or in a config file's `[[route]]`: exit 2
//! with a message naming the file, flag or key; a port already in use:
//! exit 1. Every case runs the real binary.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use common::*;
use mtls_sidecar::pki::{LeafSpec, Role};

/// Time the binary gets to reject its input; a binary still running after
/// this accepted what it should have refused.
const EXIT_WITHIN: Duration = Duration::from_secs(20);

/// A good server credential directory to break one thing in.
fn good_dir() -> (tempfile::TempDir, Pki, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("test CA");
    let dir = pki.dir(tmp.path(), "replica", &pki.leaf(REPLICA, Role::Server));
    (tmp, pki, dir)
}

fn server_args(dir: &Path) -> Vec<String> {
    [
        "server",
        "--listen",
        "127.0.0.1:0",
        "--target",
        "127.0.0.1:1",
        "--tls-dir",
        dir.to_str().unwrap(),
        "--allow-san",
        CONTROLLER,
    ]
    .map(String::from)
    .to_vec()
}

/// Runs the binary and expects exit `code` with every needle in its output.
fn expect_exit(args: &[String], code: i32, needles: &[&str]) -> String {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (got, text) = run_bin_within(&args, EXIT_WITHIN)
        .unwrap_or_else(|| panic!("still running after {EXIT_WITHIN:?}: {args:?}"));
    assert_eq!(got, code, "exit status for {args:?}; output:\n{text}");
    for n in needles {
        assert!(text.contains(n), "output does not name {n:?}:\n{text}");
    }
    text
}

fn p(path: PathBuf) -> String {
    path.to_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_good_configuration_starts() {
    // The control: every case below breaks exactly one thing in this.
    let (_tmp, _pki, dir) = good_dir();
    let args = server_args(&dir);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let sc = Sidecar::start(&args, 1).await;
    assert!(sc.exited().is_none());
}

#[test]
fn missing_directory_exits_2_naming_it() {
    let (tmp, _pki, _dir) = good_dir();
    let missing = tmp.path().join("no-such-dir");
    expect_exit(&server_args(&missing), 2, &[&p(missing)]);
}

#[test]
fn missing_ca_file_exits_2_naming_it() {
    let (_tmp, _pki, dir) = good_dir();
    std::fs::remove_file(dir.join("ca.crt")).unwrap();
    expect_exit(&server_args(&dir), 2, &[&p(dir.join("ca.crt"))]);
}

#[test]
fn unparseable_pem_exits_2_naming_the_file() {
    let (_tmp, _pki, dir) = good_dir();
    std::fs::write(dir.join("tls.crt"), "this is not PEM\n").unwrap();
    expect_exit(&server_args(&dir), 2, &[&p(dir.join("tls.crt"))]);
}

#[test]
fn key_not_matching_the_certificate_exits_2_naming_it() {
    let (_tmp, pki, dir) = good_dir();
    let other = pki.leaf(REPLICA, Role::Server);
    std::fs::write(dir.join("tls.key"), &other.key_pem).unwrap();
    let text = expect_exit(&server_args(&dir), 2, &[&p(dir.join("tls.key"))]);
    assert!(text.to_lowercase().contains("match"), "{text}");
}

#[test]
fn expired_certificate_exits_2_naming_it() {
    let (_tmp, pki, dir) = good_dir();
    let now = SystemTime::now();
    let day = Duration::from_secs(86_400);
    let expired =
        pki.issue(&LeafSpec::dns(REPLICA, Role::Server, 30).valid(now - 10 * day, now - day));
    mtls_sidecar::pki::write_secret_dir(&dir, &expired, &pki.ca.cert_pem).unwrap();
    let text = expect_exit(&server_args(&dir), 2, &[&p(dir.join("tls.crt"))]);
    assert!(text.contains("expired"), "{text}");
}

#[test]
fn server_without_allow_san_exits_2_naming_the_flag() {
    let (_tmp, _pki, dir) = good_dir();
    let mut args = server_args(&dir);
    args.truncate(args.len() - 2);
    assert!(!args.iter().any(|a| a.contains("allow")));
    expect_exit(&args, 2, &["--allow-san"]);
}

#[test]
fn client_on_a_public_address_without_unsafe_listen_exits_2() {
    let (_tmp, _pki, dir) = good_dir();
    let args = [
        "client",
        "--listen",
        "0.0.0.0:0",
        "--target",
        "127.0.0.1:1",
        "--server-name",
        REPLICA,
        "--tls-dir",
        dir.to_str().unwrap(),
    ]
    .map(String::from)
    .to_vec();
    expect_exit(&args, 2, &["--listen", "--unsafe-listen"]);
}

#[test]
fn trust_grace_over_a_day_exits_2_naming_the_flag() {
    let (_tmp, _pki, dir) = good_dir();
    let mut args = server_args(&dir);
    args.extend(["--trust-grace".to_string(), "25h".to_string()]);
    expect_exit(&args, 2, &["--trust-grace"]);
}

#[test]
fn a_port_already_in_use_exits_1() {
    let (_tmp, _pki, dir) = good_dir();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let mut args = server_args(&dir);
    args[2] = addr.clone();
    expect_exit(&args, 1, &[&addr]);
    drop(taken);
}

#[test]
fn a_client_only_certificate_on_a_server_route_exits_2_naming_the_usage() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("test CA");
    let dir = pki.dir(tmp.path(), "replica", &pki.leaf(REPLICA, Role::Client));
    expect_exit(
        &server_args(&dir),
        2,
        &["tls.crt", "serverAuth", "server route"],
    );
}

/// A config file with one server route, plus `extra` lines inside it.
fn route_config(dir: &Path, extra: &str) -> PathBuf {
    let path = dir.join("sidecar.toml");
    std::fs::write(
        &path,
        format!(
            "tls_dir = \"{}\"\n\n[[route]]\nname = \"replica\"\nmode = \"server\"\n\
             listen = \"127.0.0.1:0\"\ntarget = \"127.0.0.1:1\"\nallow_san = [\"{CONTROLLER}\"]\n{extra}",
            dir.join("replica").display()
        ),
    )
    .unwrap();
    path
}

#[tokio::test(flavor = "multi_thread")]
async fn the_good_route_config_starts() {
    // The control for the bad keys below: each adds one line to this.
    let (tmp, _pki, _dir) = good_dir();
    let config = route_config(tmp.path(), "");
    let sc = Sidecar::start(&["run", "--config", config.to_str().unwrap()], 1).await;
    sc.addr("replica");
}

#[test]
fn unknown_and_conflicting_keys_in_a_route_exit_2_naming_them() {
    let cases: [(&str, &[&str]); 8] = [
        ("bogus_key = 1", &["unknown field `bogus_key`"]),
        // A misspelt key is not silently ignored.
        ("allow_sans = [\"x.svc\"]", &["unknown field `allow_sans`"]),
        // A test-only hidden flag is not a file key.
        (
            "half_close_linger = \"1s\"",
            &["unknown field `half_close_linger`"],
        ),
        ("listen = \"127.0.0.1:1\"", &["duplicate key", "listen"]),
        (
            "allow_any_san = true",
            &[
                "route \"replica\"",
                "allow_any_san",
                "conflicts with allow_san",
            ],
        ),
        (
            "cert = \"c\"\nkey = \"k\"\nca = \"a\"\ntls_dir = \"d\"",
            &["route \"replica\"", "tls_dir", "not both"],
        ),
        (
            "server_name = \"replica.svc\"",
            &[
                "route \"replica\"",
                "server_name",
                "only valid for client routes",
            ],
        ),
        ("mode = \"client\"", &["duplicate key", "mode"]),
    ];
    for (extra, needles) in cases {
        let (tmp, _pki, _dir) = good_dir();
        let config = route_config(tmp.path(), extra);
        let args = ["run", "--config", config.to_str().unwrap()].map(String::from);
        let text = expect_exit(&args, 2, needles);
        assert!(
            text.contains(config.to_str().unwrap()),
            "{extra}: names no file:\n{text}"
        );
        if !text.contains("TOML parse error") {
            assert!(
                !text.contains("--"),
                "{extra}: names a flag, not the key:\n{text}"
            );
        }
    }
}

#[test]
fn server_only_keys_in_a_client_route_exit_2_naming_them() {
    let (tmp, _pki, _dir) = good_dir();
    let path = tmp.path().join("client.toml");
    let pin = format!("allow_spki_sha256 = [\"{}\"]", "ab".repeat(32));
    for (extra, key) in [
        ("exclusive = true", "exclusive"),
        ("allow_san = [\"x.svc\"]", "allow_san"),
        ("allow_any_san = true", "allow_any_san"),
        ("proxy_protocol = \"v2\"", "proxy_protocol"),
        (pin.as_str(), "allow_spki_sha256"),
    ] {
        std::fs::write(
            &path,
            format!(
                "tls_dir = \"{}\"\n[[route]]\nname = \"agent\"\nmode = \"client\"\n\
                 listen = \"127.0.0.1:0\"\ntarget = \"{REPLICA}:6877\"\n{extra}\n",
                tmp.path().join("replica").display()
            ),
        )
        .unwrap();
        let args = ["run", "--config", path.to_str().unwrap()].map(String::from);
        expect_exit(
            &args,
            2,
            &[
                path.to_str().unwrap(),
                "route \"agent\"",
                key,
                "only valid for server routes",
            ],
        );
    }
}

/// Each client-only key alone in a server route: exit 2 naming it (one
/// key at a time, so every check of the list is seen to refuse).
#[test]
fn client_only_keys_in_a_server_route_exit_2_naming_them() {
    let pin = format!("expect_spki_sha256 = [\"{}\"]", "ab".repeat(32));
    for (extra, key) in [
        ("expect_san = [\"replica.svc\"]", "expect_san"),
        ("server_name = \"replica.svc\"", "server_name"),
        ("unsafe_listen = true", "unsafe_listen"),
        (pin.as_str(), "expect_spki_sha256"),
    ] {
        let (tmp, _pki, _dir) = good_dir();
        let config = route_config(tmp.path(), extra);
        let args = ["run", "--config", config.to_str().unwrap()].map(String::from);
        expect_exit(
            &args,
            2,
            &["route \"replica\"", key, "only valid for client routes"],
        );
    }
}

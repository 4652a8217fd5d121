//! The host-side deployment files: deploy/sidecar.toml, the systemd unit
//! (its hardening, its command line, and the READY=1 its Type=notify relies
//! on) and the Dockerfile (no Docker engine here, so its recipe is checked
//! against the CLI and the shared build script instead of built).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use mtls_sidecar::cli::{Cli, Command};
use mtls_sidecar::config::FileSpec;
use mtls_sidecar::proxy::settings::Mode;

// The shared fixtures, for `common::bin()`: the binary under test, which
// CI points at the shipped build with `MTLS_SIDECAR_BIN`.
use crate::common;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

#[test]
fn the_example_config_file_loads() {
    let settings =
        FileSpec::load(&root().join("deploy/sidecar.toml")).expect("deploy/sidecar.toml");
    let names: Vec<_> = settings
        .routes
        .iter()
        .map(|r| (r.name.as_str(), r.mode))
        .collect();
    assert_eq!(
        names,
        [("replication", Mode::Server), ("agent", Mode::Client)]
    );
    let (server, client) = (&settings.routes[0], &settings.routes[1]);
    assert!(server.exclusive);
    assert_eq!(
        server.max_connection_lifetime,
        Some(Duration::from_secs(12 * 3600))
    );
    assert_ne!(
        server.credentials, client.credentials,
        "the agent route has its own identity"
    );
    assert!(settings.admin.is_some());
}

/// `Key=value` lines of a unit file, continuation lines joined; a key may
/// repeat.
fn unit_entries(text: &str) -> Vec<(String, String)> {
    let mut joined = Vec::new();
    let mut cur = String::new();
    for line in text.lines() {
        let line = line.trim();
        if cur.is_empty() && (line.is_empty() || line.starts_with('#') || line.starts_with('[')) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => {
                cur.push_str(part);
                cur.push(' ');
            }
            None => {
                cur.push_str(line);
                joined.push(std::mem::take(&mut cur));
            }
        }
    }
    joined
        .into_iter()
        .filter_map(|l| {
            l.split_once('=')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        })
        .collect()
}

#[test]
fn the_systemd_unit_is_notify_reloadable_and_hardened() {
    let unit = unit_entries(&read("deploy/systemd/mtls-sidecar.service"));
    let get = |k: &str| -> Vec<&str> {
        unit.iter()
            .filter(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
            .collect()
    };
    for (k, v) in [
        ("Type", "notify"),
        ("ExecReload", "/bin/kill -HUP $MAINPID"),
        ("Restart", "on-failure"),
        ("DynamicUser", "yes"),
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("CapabilityBoundingSet", ""),
        (
            "RestrictAddressFamilies",
            "AF_INET AF_INET6 AF_UNIX AF_NETLINK",
        ),
        ("SystemCallFilter", "@system-service"),
    ] {
        assert!(get(k).contains(&v), "{k}={v} missing; have {:?}", get(k));
    }
    assert!(
        get("LoadCredential").is_empty(),
        "LoadCredential= files cannot rotate"
    );
    assert!(
        get("TimeoutStopSec")[0]
            .trim_end_matches('s')
            .parse::<u64>()
            .unwrap()
            > 30
    );
}

/// Expands `${VAR}` (one word) and `$VAR` (split at whitespace) as systemd does.
fn expand(exec: &str, env: &HashMap<String, String>) -> Vec<String> {
    let mut out = Vec::new();
    for word in exec.split_whitespace() {
        if let Some(var) = word.strip_prefix("${").and_then(|w| w.strip_suffix('}')) {
            out.push(
                env.get(var)
                    .unwrap_or_else(|| panic!("env file lacks {var}"))
                    .clone(),
            );
        } else if let Some(var) = word.strip_prefix('$') {
            let v = env
                .get(var)
                .unwrap_or_else(|| panic!("env file lacks {var}"));
            out.extend(v.split_whitespace().map(str::to_string));
        } else {
            out.push(word.to_string());
        }
    }
    out
}

#[test]
fn the_systemd_command_line_parses_with_the_example_environment() {
    let unit = unit_entries(&read("deploy/systemd/mtls-sidecar.service"));
    let env: HashMap<String, String> = unit_entries(&read("deploy/systemd/mtls-sidecar.env"))
        .into_iter()
        .collect();
    let exec = &unit
        .iter()
        .find(|(k, _)| k == "ExecStart")
        .expect("ExecStart")
        .1;
    let mut argv = expand(exec, &env);
    assert_eq!(argv[0], "/usr/local/bin/mtls-sidecar");
    argv[0] = "mtls-sidecar".into();
    let cli = Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let Command::Server(server) = cli.command else {
        panic!("the unit runs `server`")
    };
    let settings = server.to_spec().validate().expect("validates");
    assert_eq!(
        settings.routes[0].credentials.to_string(),
        "/etc/mtls-sidecar/tls"
    );
}

#[test]
fn the_binary_tells_systemd_it_is_ready_once_listening() {
    use std::os::unix::net::UnixDatagram;
    let tmp = tempfile::tempdir().unwrap();
    let ca = mtls_sidecar::pki::DevCa::new("notify CA", 1).unwrap();
    let leaf = ca
        .issue(&mtls_sidecar::pki::LeafSpec::dns(
            "replica.env-1.svc",
            mtls_sidecar::pki::Role::Server,
            1,
        ))
        .unwrap();
    let tls = tmp.path().join("tls");
    mtls_sidecar::pki::write_secret_dir(&tls, &leaf, &ca.cert_pem).unwrap();
    let sock_path = tmp.path().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(common::DEADLINE)).unwrap();
    // A socket path known before the start, rather than a TCP port bound,
    // released and hoped to be still free.
    let listen = tmp.path().join("listen.sock");
    let mut child = std::process::Command::new(common::bin())
        .args([
            "server",
            "--listen",
            &format!("unix:{}", listen.display()),
            "--target",
            "127.0.0.1:9",
            "--allow-san",
            "c.env-1.svc",
        ])
        .arg("--tls-dir")
        .arg(&tls)
        .env("NOTIFY_SOCKET", &sock_path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut buf = [0u8; 256];
    let got = sock.recv(&mut buf);
    let connect = std::os::unix::net::UnixStream::connect(&listen);
    let _ = child.kill();
    let _ = child.wait();
    let n = got.expect("a notification within 20s");
    let msg = String::from_utf8_lossy(&buf[..n]);
    assert!(msg.lines().any(|l| l == "READY=1"), "got {msg:?}");
    assert!(
        connect.is_ok(),
        "READY=1 came before the listener was bound"
    );
}

/// The Dockerfile's instructions, continuation lines joined, comments dropped.
pub fn dockerfile() -> Vec<String> {
    // Join continuation lines; drop comments.
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in read("Dockerfile").lines() {
        let t = line.trim();
        if t.starts_with('#') || (cur.is_empty() && t.is_empty()) {
            continue;
        }
        match t.strip_suffix('\\') {
            Some(part) => cur.push_str(part),
            None => {
                cur.push_str(t);
                out.push(std::mem::take(&mut cur));
            }
        }
    }
    out
}

/// The JSON array of an exec-form instruction (`ENTRYPOINT [...]`).
pub fn exec_form(line: &str, instruction: &str) -> Vec<String> {
    let json = line
        .split_once('[')
        .map(|(_, rest)| format!("[{rest}"))
        .unwrap_or_default();
    serde_json::from_str(&json)
        .unwrap_or_else(|e| panic!("{instruction} is not in exec form ({e}): {line}"))
}

#[test]
fn the_dockerfile_builds_with_the_shared_script_into_distroless_nonroot() {
    let lines = dockerfile();
    let from: Vec<_> = lines.iter().filter(|l| l.starts_with("FROM ")).collect();
    assert!(from.len() >= 3, "multi-stage with a dependency layer");
    // The shipped binary is static: the final image carries no libc.
    assert_eq!(
        from.last().unwrap().as_str(),
        "FROM gcr.io/distroless/static-debian13:nonroot"
    );
    assert!(from[0].contains("trixie"), "{}", from[0]);

    // The dependency layer is cooked with the exact flags of the release
    // build (cargo options and RUSTFLAGS), which the builder then runs
    // through the one shared script.
    let script = read("scripts/build-release.sh");
    let build = script
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("\"${cargo[@]}\" rustc"))
        .expect("the \"${cargo[@]}\" rustc line");
    let rustflags = script
        .lines()
        .find_map(|l| {
            l.split_once("RUSTFLAGS=\"${RUSTFLAGS:-} ")?
                .1
                .split_once('"')
        })
        .expect("RUSTFLAGS line")
        .0;
    let cook = lines
        .iter()
        .find(|l| l.contains("cargo chef cook"))
        .expect("cargo chef cook");
    let cargo_flags = build.split(" -- ").next().unwrap_or(build);
    for flag in cargo_flags.split_whitespace().skip(2) {
        let flag = flag.trim_matches('"');
        let flag = if flag == "$target" { "--target" } else { flag };
        assert!(
            cook.split_whitespace().any(|w| w.trim_matches('"') == flag),
            "cook lacks {flag}: {cook}"
        );
    }
    assert!(
        cook.contains(&format!("RUSTFLAGS=\"{rustflags}\"")),
        "cook lacks RUSTFLAGS=\"{rustflags}\": {cook}"
    );
    assert!(lines.iter().any(|l| l.contains("target/dist/mtls-sidecar")));
    assert!(lines
        .iter()
        .any(|l| l.starts_with("RUN bash scripts/build-release.sh")));

    let user = lines
        .iter()
        .rev()
        .find(|l| l.starts_with("USER "))
        .expect("USER");
    let uid = user["USER ".len()..].split(':').next().unwrap();
    assert!(uid != "0" && uid != "root", "{user}");

    let entry = lines
        .iter()
        .find(|l| l.starts_with("ENTRYPOINT"))
        .expect("ENTRYPOINT");
    assert_eq!(
        exec_form(entry, "ENTRYPOINT"),
        ["/usr/local/bin/mtls-sidecar"]
    );

    let health = lines
        .iter()
        .find(|l| l.starts_with("HEALTHCHECK"))
        .expect("HEALTHCHECK");
    let mut argv = exec_form(health, "HEALTHCHECK CMD");
    assert_eq!(argv[0], "/usr/local/bin/mtls-sidecar");
    argv[0] = "mtls-sidecar".into();
    let cli = Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    assert!(matches!(cli.command, Command::Health(_)));

    let ignore = read(".dockerignore");
    for must in ["target/", ".git/"] {
        assert!(
            ignore.lines().any(|l| l.trim() == must),
            ".dockerignore lacks {must}"
        );
    }
    assert!(Path::new(&root().join("scripts/build-release.sh")).is_file());
}

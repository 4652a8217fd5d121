//! The external tools some tests run (openssl, HAProxy, iproute2, …) and
//! the one rule for when one is missing: the test FAILS, naming the
//! package to install, unless `MTLS_SIDECAR_SKIP` names it; then the test
//! returns at once and says so on the real stderr (not the captured one),
//! so a skip is never silent. `scripts/test.sh` checks the same list
//! before it builds anything ([`KNOWN`] is that list).

use std::io::Write;
use std::path::{Path, PathBuf};

/// The variable naming what to skip: `MTLS_SIDECAR_SKIP=haproxy,root`.
pub const SKIP_ENV: &str = "MTLS_SIDECAR_SKIP";

/// Every name [`SKIP_ENV`] may hold, with the Debian package that provides
/// it (`root` is no package: the tests that build network namespaces or
/// capture loopback packets need it). Keep in step with scripts/test.sh.
pub const KNOWN: &[(&str, &str)] = &[
    ("openssl", "openssl"),
    ("python3", "python3"),
    ("haproxy", "haproxy"),
    ("nginx", "nginx"),
    ("ip", "iproute2"),
    ("nft", "nftables"),
    ("iptables", "iptables"),
    ("ip6tables", "iptables"),
    ("systemd-socket-activate", "systemd"),
    ("systemd-analyze", "systemd"),
    ("promtool", "prometheus"),
    ("root", "(run as root)"),
    ("grpcio", "(python3 -m pip install grpcio)"),
    (
        "kubernetes-validate",
        "(bash scripts/validate-deploy.sh installs it in target/deploy-tools/venv)",
    ),
];

/// A Python that imports kubernetes_validate (and yaml): the venv
/// scripts/validate-deploy.sh installs it in, or python3.
pub fn kubernetes_validate_python() -> Option<PathBuf> {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/deploy-tools/venv/bin/python");
    [venv, PathBuf::from("python3")].into_iter().find(|py| {
        std::process::Command::new(py)
            .args(["-c", "import kubernetes_validate, yaml"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// The program's path when it is installed (`PATH`, then the sbin
/// directories a non-root `PATH` may lack).
pub fn installed(program: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"])
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file());
    found
}

/// The names [`SKIP_ENV`] holds; panics on a name not in [`KNOWN`], so a
/// typo cannot leave a test running that the user meant to skip (or the
/// other way round).
pub fn skip_list() -> Vec<String> {
    parse_skip_list(&std::env::var(SKIP_ENV).unwrap_or_default())
}

fn parse_skip_list(value: &str) -> Vec<String> {
    let names: Vec<String> = value
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect();
    for n in &names {
        assert!(
            KNOWN.iter().any(|(k, _)| k == n),
            "{SKIP_ENV} names {n:?}, which no test needs; known: {}",
            KNOWN.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(",")
        );
    }
    names
}

/// Whether `need` (a [`KNOWN`] name) is available here.
fn available(need: &str) -> bool {
    match need {
        "root" => (unsafe { libc::geteuid() }) == 0,
        // A Python module (tests/spiffe/agent.py's gRPC server), not a
        // program: the python3 on PATH must import it.
        "grpcio" => std::process::Command::new("python3")
            .args(["-c", "import grpc"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success()),
        "kubernetes-validate" => kubernetes_validate_python().is_some(),
        tool => installed(tool).is_some(),
    }
}

fn package(need: &str) -> &'static str {
    KNOWN
        .iter()
        .find(|(k, _)| *k == need)
        .map(|(_, p)| *p)
        .unwrap_or_else(|| panic!("{need:?} is not in tests/common/tools.rs KNOWN"))
}

/// True when the calling test must return at once because [`SKIP_ENV`]
/// names one of `needs` (said on the real stderr). Panics, naming the
/// package, when one of `needs` is missing and not skipped. Call it first
/// thing in every test that runs an external tool.
pub fn skip_unless(needs: &[&str]) -> bool {
    let skip = skip_list();
    let test = std::thread::current()
        .name()
        .unwrap_or("this test")
        .to_string();
    if let Some(n) = needs.iter().find(|n| skip.iter().any(|s| s == *n)) {
        // Past the test harness's capture: a skip must show.
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED {test}: it needs {n}, and {SKIP_ENV} names it"
        );
        return true;
    }
    let missing: Vec<&str> = needs.iter().copied().filter(|n| !available(n)).collect();
    if !missing.is_empty() {
        let packages: Vec<&str> = missing.iter().map(|n| package(n)).collect();
        panic!(
            "{test} needs {missing:?}, missing here: install {packages:?} \
             (apt-get install), or set {SKIP_ENV}={} to skip it, saying so",
            missing.join(",")
        );
    }
    false
}

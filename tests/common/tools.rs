//! The external tools some tests run (openssl, HAProxy, iproute2, …) and
//! the one rule for when one is missing: the test FAILS, naming the
//! package to install, unless `MTLS_SIDECAR_SKIP` names it; then the test
//! returns at once and says so on the real stderr (not the captured one),
//! so a skip is never silent. The list is `scripts/tools.list`, which
//! `scripts/test.sh` checks before it builds anything ([`known`] reads it).

use std::io::Write;
use std::path::{Path, PathBuf};

/// The variable naming what to skip: `MTLS_SIDECAR_SKIP=haproxy,root`.
pub const SKIP_ENV: &str = "MTLS_SIDECAR_SKIP";

/// One row of `scripts/tools.list`: a name [`SKIP_ENV`] may hold, the
/// Debian package that provides it (`-` for `root`: the tests that build
/// network namespaces or capture loopback packets need it), and for a
/// Python module the name `python3 -c import` takes.
pub struct Tool {
    pub name: &'static str,
    pub package: &'static str,
    pub module: Option<&'static str>,
}

/// The list, compiled in so a test never depends on the working directory.
const LIST: &str = include_str!("../../scripts/tools.list");

/// Every row of `scripts/tools.list`, in its order.
pub fn known() -> Vec<Tool> {
    LIST.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut cols = l.split_whitespace();
            let name = cols.next().expect("a name");
            let package = cols.next().expect("scripts/tools.list: a package per name");
            Tool {
                name,
                package,
                module: cols.next(),
            }
        })
        .collect()
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

/// The names [`SKIP_ENV`] holds; panics on a name not in [`known`], so a
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
            known().iter().any(|t| t.name == n),
            "{SKIP_ENV} names {n:?}, which no test needs; known: {}",
            known().iter().map(|t| t.name).collect::<Vec<_>>().join(",")
        );
    }
    names
}

/// Whether `need` (a [`known`] name) is available here.
fn available(need: &str) -> bool {
    if need == "root" {
        // SAFETY: geteuid(2) takes nothing and cannot fail.
        return (unsafe { libc::geteuid() }) == 0;
    }
    match known()
        .iter()
        .find(|t| t.name == need)
        .and_then(|t| t.module)
    {
        // A Python module (tests/spiffe/agent.py's gRPC server, say), not a
        // program: the python3 on PATH must import it.
        Some(module) => std::process::Command::new("python3")
            .args(["-c", &format!("import {module}")])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success()),
        None => installed(need).is_some(),
    }
}

fn package(need: &str) -> &'static str {
    known()
        .iter()
        .find(|t| t.name == need)
        .map(|t| t.package)
        .unwrap_or_else(|| panic!("{need:?} is not in scripts/tools.list"))
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
             (`bash scripts/tools.sh install`), or set {SKIP_ENV}={} to skip it, saying so",
            missing.join(",")
        );
    }
    false
}

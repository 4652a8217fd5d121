//! The Landlock sandbox, from inside the real process: the hidden
//! `sandbox-probe` applies exactly the sandbox a config file gets and then
//! tries accesses outside and inside its allow-list; and real sidecars keep
//! serving under it (a host-name target, unix sockets, SIGHUP, drain) and
//! say on `/status` what is enforced. This kernel offers Landlock ABI 7, so
//! both the filesystem and the network halves and the ABI 6 scopes are
//! expected in force. `sandbox/rules.rs` tries each rule docs/security.md
//! claims (writes, binds, scopes, the seccomp filter) and what it says stays open.

use crate::common;
mod rules;

use common::http;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::*;
use mtls_sidecar::pki::Role;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A one-route server config: credentials in `tls_dir`, forwarding to
/// `target`, with `extra` top-level lines.
fn write_config(dir: &Path, tls_dir: &Path, target: &str, extra: &str) -> PathBuf {
    let credentials = format!("tls_dir = {:?}", tls_dir.display().to_string());
    write_config_with(dir, &credentials, target, extra)
}

/// The same, with the credentials given by `credentials` (TOML lines).
fn write_config_with(dir: &Path, credentials: &str, target: &str, extra: &str) -> PathBuf {
    let file = dir.join("sidecar.toml");
    std::fs::write(
        &file,
        format!(
            "{extra}\n{credentials}\n\n[[route]]\nname = \"probe\"\nmode = \"server\"\n\
             listen = \"127.0.0.1:0\"\ntarget = {target:?}\nallow_san = [\"{CONTROLLER}\"]\n",
        ),
    )
    .unwrap();
    file
}

/// Runs the probe; returns its JSON report (panics, with its stderr, on a
/// non-zero exit).
fn probe(config: &Path, extra: &[&str], reads: &[&Path], connects: &[String]) -> Value {
    report(probe_command(config, extra, reads, connects))
}

/// The probe's command line.
fn probe_command(config: &Path, extra: &[&str], reads: &[&Path], connects: &[String]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.arg("sandbox-probe")
        .arg("--config")
        .arg(config)
        .args(extra);
    for r in reads {
        cmd.arg("--read").arg(r);
    }
    for c in connects {
        cmd.arg("--connect").arg(c);
    }
    cmd
}

/// Runs a probe command; returns its JSON report (panics, with its stderr,
/// on a non-zero exit).
fn report(mut cmd: Command) -> Value {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .expect("run sandbox-probe");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "probe failed: {stderr}");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{stderr}", String::from_utf8_lossy(&out.stdout)))
}

/// The result the probe reported for attempt `i` of `kind` (`read` or
/// `connect`), with the whole attempt for messages.
fn outcome(report: &Value, kind: &str, i: usize) -> (String, String) {
    let a = &report[kind][i];
    (
        a["result"].as_str().unwrap_or("?").to_string(),
        a.to_string(),
    )
}

/// A probe setting: credentials, a file outside every allow-list, a
/// listener on a port that is no target (both must be refused), and the
/// target's listener (must be reachable).
struct Setup {
    tmp: tempfile::TempDir,
    tls_dir: PathBuf,
    outside_file: PathBuf,
    outside: std::net::TcpListener,
    target: std::net::TcpListener,
}

impl Setup {
    fn new() -> Setup {
        let tmp = tempfile::tempdir().unwrap();
        let pki = Pki::new("sandbox CA");
        let tls_dir = pki.dir(tmp.path(), "replica", &pki.leaf(REPLICA, Role::Server));
        let outside_dir = tmp.path().join("elsewhere");
        std::fs::create_dir(&outside_dir).unwrap();
        let outside_file = outside_dir.join("secret.txt");
        std::fs::write(&outside_file, "not for the sidecar").unwrap();
        Setup {
            tmp,
            tls_dir,
            outside_file,
            outside: std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
            target: std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
        }
    }

    fn target(&self) -> String {
        self.target.local_addr().unwrap().to_string()
    }

    fn outside(&self) -> String {
        self.outside.local_addr().unwrap().to_string()
    }

    /// Probes reads of [credential, config, outside file, /proc/self/status]
    /// and connects to [target, outside port].
    fn run(&self, top: &str, extra: &[&str]) -> Value {
        let config = write_config(self.tmp.path(), &self.tls_dir, &self.target(), top);
        probe(
            &config,
            extra,
            &[
                &self.tls_dir.join("tls.key"),
                &config,
                &self.outside_file,
                Path::new("/proc/self/status"),
            ],
            &[self.target(), self.outside()],
        )
    }
}

#[test]
fn the_sandbox_refuses_reads_and_connects_outside_its_allow_list() {
    let s = Setup::new();
    let report = s.run("", &[]);
    let sandbox = &report["sandbox"];
    assert_eq!(sandbox["mode"], "best-effort", "{sandbox}");
    assert_eq!(sandbox["filesystem"], "enforced", "{sandbox}");
    assert_eq!(sandbox["network"], "enforced", "{sandbox}");
    // Positive controls: the credentials, the config and the target.
    let (r, a) = outcome(&report, "read", 0);
    assert_eq!(r, "allowed", "reading the credential directory: {a}");
    let (r, a) = outcome(&report, "read", 1);
    assert_eq!(r, "allowed", "reading the config file: {a}");
    let (r, a) = outcome(&report, "read", 3);
    assert_eq!(r, "allowed", "reading /proc/self (process metrics): {a}");
    let (r, a) = outcome(&report, "connect", 0);
    assert_eq!(r, "allowed", "connecting to the target port: {a}");
    // The point: outside the allow-list, both refused by the sandbox.
    let (r, a) = outcome(&report, "read", 2);
    assert_eq!(r, "refused", "reading a file outside the allow-list: {a}");
    let (r, a) = outcome(&report, "connect", 1);
    assert_eq!(r, "refused", "connecting to a port that is no target: {a}");
}

#[test]
fn require_enforces_the_same_rules_on_this_kernel() {
    let s = Setup::new();
    let report = s.run("", &["--sandbox", "require"]);
    assert_eq!(report["sandbox"]["mode"], "require");
    assert_eq!(outcome(&report, "read", 0).0, "allowed");
    assert_eq!(outcome(&report, "read", 2).0, "refused");
    assert_eq!(outcome(&report, "connect", 1).0, "refused");
}

/// Shows the probe can fail: with the sandbox off (here through the config
/// file's key) the same outside accesses go through.
#[test]
fn with_the_sandbox_off_the_outside_accesses_are_allowed() {
    let s = Setup::new();
    let report = s.run("sandbox = \"off\"", &[]);
    assert_eq!(report["sandbox"]["mode"], "off");
    assert_eq!(report["sandbox"]["filesystem"], "off");
    let (r, a) = outcome(&report, "read", 2);
    assert_eq!(r, "allowed", "{a}");
    let (r, a) = outcome(&report, "connect", 1);
    assert_eq!(r, "allowed", "{a}");
    // The command line overrides the file.
    let report = s.run("sandbox = \"off\"", &["--sandbox", "best-effort"]);
    assert_eq!(outcome(&report, "read", 2).0, "refused");
}

/// Credential files copied into a new directory `name` of the setting's
/// temporary directory, beside a file that is none of them.
struct Beside {
    dir: PathBuf,
    sibling: PathBuf,
}

impl Beside {
    fn new(s: &Setup, name: &str) -> Beside {
        let dir = s.tmp.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        for name in ["tls.crt", "tls.key", "ca.crt"] {
            std::fs::copy(s.tls_dir.join(name), dir.join(name)).unwrap();
        }
        let sibling = dir.join("sibling.txt");
        std::fs::write(&sibling, "beside the credentials, not one of them").unwrap();
        Beside { dir, sibling }
    }

    /// Checks a report of reads [a credential file, another credential
    /// file, the sibling]: the credentials readable, the sibling refused,
    /// the files granted rather than their directory.
    fn check(&self, report: &Value) {
        assert_eq!(report["sandbox"]["filesystem"], "enforced", "{report}");
        let (r, a) = outcome(report, "read", 0);
        assert_eq!(r, "allowed", "reading a credential file: {a}");
        let (r, a) = outcome(report, "read", 1);
        assert_eq!(r, "allowed", "reading another credential file: {a}");
        let (r, a) = outcome(report, "read", 2);
        assert_eq!(r, "refused", "reading a file beside the credentials: {a}");
        let dir = std::fs::canonicalize(&self.dir).unwrap();
        let granted = report["sandbox"]["read_only"].to_string();
        assert!(
            granted.contains(&dir.join("tls.key").display().to_string())
                && !granted.contains(&format!("{:?}", dir.display().to_string())),
            "the files, not their directory: {granted}"
        );
    }
}

/// The review finding: credential files named by a relative path live in
/// the working directory, wherever the process was started (`/` for a
/// systemd service); granting that directory would make everything beside
/// them readable. Only the files themselves are: a sibling is refused. (The
/// same rule grants a file at `/` or in `/etc` alone: unit tests.)
#[test]
fn credential_files_in_the_working_directory_are_granted_alone() {
    let s = Setup::new();
    let work = Beside::new(&s, "work");
    let config = write_config_with(
        s.tmp.path(),
        "cert = \"tls.crt\"\nkey = \"tls.key\"\nca = \"ca.crt\"",
        &s.target(),
        "",
    );
    let reads: [&Path; 3] = [
        &work.dir.join("tls.key"),
        Path::new("ca.crt"),
        &work.sibling,
    ];
    let mut cmd = probe_command(&config, &[], &reads, &[]);
    cmd.current_dir(&work.dir);
    work.check(&report(cmd));
}

/// The same for credential files directly in the home directory (`$HOME`),
/// named by absolute paths.
#[test]
fn credential_files_in_the_home_directory_are_granted_alone() {
    let s = Setup::new();
    let home = Beside::new(&s, "home");
    let credentials = ["cert", "key", "ca"]
        .iter()
        .zip(["tls.crt", "tls.key", "ca.crt"])
        .map(|(k, f)| format!("{k} = {:?}", home.dir.join(f).display().to_string()))
        .collect::<Vec<_>>()
        .join("\n");
    let config = write_config_with(s.tmp.path(), &credentials, &s.target(), "");
    let reads: [&Path; 3] = [
        &home.dir.join("tls.key"),
        &home.dir.join("ca.crt"),
        &home.sibling,
    ];
    let mut cmd = probe_command(&config, &[], &reads, &[]);
    cmd.env("HOME", &home.dir);
    home.check(&report(cmd));
}

/// Makes `cmd` run as on a kernel without Landlock: a seccomp filter fails
/// the three landlock system calls (444-446 on x86_64 and aarch64) with
/// ENOSYS, as a kernel built without Landlock does.
fn without_landlock(cmd: &mut Command) {
    use libc::{sock_filter, sock_fprog, BPF_JUMP, BPF_STMT};
    use std::os::unix::process::CommandExt;
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
    const JGT_K: u16 = 0x25; // BPF_JMP | BPF_JGT | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
                             // SAFETY: between fork and exec only prctl, on a filter on the stack.
    unsafe {
        cmd.pre_exec(|| {
            let filter: [sock_filter; 5] = [
                BPF_STMT(LD_W_ABS, 0), // seccomp_data.nr
                BPF_JUMP(JGE_K, 444, 0, 2),
                BPF_JUMP(JGT_K, 446, 1, 0),
                BPF_STMT(RET_K, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
                BPF_STMT(RET_K, libc::SECCOMP_RET_ALLOW),
            ];
            let prog = sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_ptr() as *mut sock_filter,
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Runs `cmd` to completion, or kills it and returns `None` if it has not
/// exited within [`DEADLINE`] (a server that should have refused to start).
fn output_within(mut cmd: Command) -> Option<std::process::Output> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = std::time::Instant::now() + DEADLINE;
    while child.try_wait().expect("try_wait").is_none() {
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Some(child.wait_with_output().expect("output"))
}

/// Where the kernel offers no Landlock, best effort says so and runs
/// unsandboxed (the outside read goes through: nothing is pretended), and
/// `require` refuses to start, in the probe and in the real server alike.
#[test]
fn without_landlock_best_effort_says_so_and_require_exits_1() {
    let s = Setup::new();
    let config = write_config(s.tmp.path(), &s.tls_dir, &s.target(), "");
    let mut cmd = Command::new(bin());
    cmd.arg("sandbox-probe")
        .arg("--config")
        .arg(&config)
        .arg("--read")
        .arg(&s.outside_file);
    without_landlock(&mut cmd);
    let out = cmd.output().expect("run probe");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["sandbox"]["filesystem"], "not_enforced", "{report}");
    assert_eq!(report["sandbox"]["network"], "not_enforced", "{report}");
    assert_eq!(outcome(&report, "read", 0).0, "allowed");
    assert!(stderr.contains("offers no Landlock"), "{stderr}");

    let d = s.tls_dir.to_str().unwrap();
    let target = s.target();
    let mut cmd = Command::new(bin());
    cmd.args(["server", "--listen", "127.0.0.1:0", "--target", &target])
        .args(["--tls-dir", d, "--allow-san", CONTROLLER])
        .args(["--sandbox", "require"])
        .stdin(Stdio::null());
    without_landlock(&mut cmd);
    let out = output_within(cmd).expect("--sandbox require must refuse to start");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--sandbox require"), "{stderr}");
    assert!(!stderr.contains(" listening "), "{stderr}");
}

async fn status(admin: &str) -> Value {
    let a = http::request(admin, "GET", "/status").await;
    assert_eq!(a.code, 200, "{}", a.body);
    assert_eq!(a.header("content-type"), Some("application/json"));
    serde_json::from_str(&a.body).unwrap_or_else(|e| panic!("{e}\n{}", a.body))
}

/// A sandboxed server forwards to a target named by host name (the
/// resolver works under the sandbox), rotates through `..data`, polls on
/// SIGHUP, serves its admin endpoint on a unix socket, says what is
/// enforced on `/status`, and drains.
#[tokio::test]
async fn a_sandboxed_sidecar_keeps_working() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("sandbox CA");
    let dir =
        mtls_sidecar::tools::atomic_writer::AtomicDir::new(&tmp.path().join("replica")).unwrap();
    let publish = |leaf: &mtls_sidecar::pki::Issued| {
        let files = [
            ("tls.crt", leaf.cert_pem.as_bytes()),
            ("tls.key", leaf.key_pem.as_bytes()),
            ("ca.crt", pki.ca.cert_pem.as_bytes()),
        ];
        dir.publish(&files).unwrap();
    };
    publish(&pki.leaf(REPLICA, Role::Server));
    let echo = echo_target().await;
    let admin = format!("unix:{}", tmp.path().join("admin.sock").display());
    let target = format!("localhost:{}", echo.addr.port());
    let sc = start_server(
        dir.path(),
        &target,
        &["--admin", &admin, "--reload-interval", "1h"],
    )
    .await;
    let line = sc.wait_log(&["sandbox applied"]).await;
    assert!(line.contains(" INFO "), "{line}");
    // The host name was resolved once before the sandbox, so that the
    // resolver had loaded what it needs (an NSS module outside libc, on a
    // host whose nsswitch.conf names one) while it still could.
    let logs = sc.logs();
    let at = |needles: &[&str]| {
        logs.iter()
            .position(|l| needles.iter().all(|n| l.contains(n)))
    };
    let warmed = at(&["resolver warmed up", &target]);
    assert!(
        warmed.is_some() && warmed < at(&["sandbox applied"]),
        "no warm-up of {target} before the sandbox:\n{}",
        logs.join("\n")
    );
    // The line says what is enforced and what is not.
    assert!(
        line.contains(r#"scopes=["abstract_unix_socket", "signal"]"#)
            && line.contains(r#"seccomp="enforced""#)
            && line.contains(r#"unrestricted=["udp", "pathname_unix_socket"]"#),
        "{line}"
    );

    let st = status(&admin).await;
    let sandbox = &st["sandbox"];
    assert_eq!(sandbox["filesystem"], "enforced", "{sandbox}");
    assert_eq!(sandbox["network"], "enforced", "{sandbox}");
    assert!(
        sandbox["landlock_abi"].as_i64().unwrap_or(0) >= 6,
        "{sandbox}"
    );
    assert_eq!(
        sandbox["scopes"],
        serde_json::json!(["abstract_unix_socket", "signal"]),
        "{sandbox}"
    );
    // A host-name target: the seccomp filter leaves UDP open for DNS.
    assert_eq!(sandbox["seccomp"], "enforced", "{sandbox}");
    assert_eq!(
        sandbox["unrestricted"],
        serde_json::json!(["udp", "pathname_unix_socket"]),
        "{sandbox}"
    );
    let connect: Vec<i64> = sandbox["connect_ports"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_i64)
        .collect();
    assert!(
        connect.contains(&i64::from(echo.addr.port())) && connect.contains(&53),
        "{sandbox}"
    );
    let sock_dir = tmp.path().display().to_string();
    assert!(
        sandbox["unix_socket_dirs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d.as_str() == Some(sock_dir.as_str())),
        "{sandbox}"
    );

    let cfg = client_config(Some(&pki.leaf(CONTROLLER, Role::Client)), &pki.ca.cert_pem);
    let mut s = tls_connect(&sc.addr("server"), REPLICA, cfg.clone())
        .await
        .expect("handshake");
    assert_eq!(
        roundtrip(&mut s, b"through the sandbox").await,
        b"through the sandbox"
    );

    // A ..data swap, picked up on SIGHUP, is readable under the sandbox.
    let next = pki.leaf(REPLICA, Role::Server);
    publish(&next);
    sc.signal(libc::SIGHUP);
    sc.wait_log(&["applied credential revision"]).await;
    let again = tls_connect(&sc.addr("server"), REPLICA, cfg)
        .await
        .expect("handshake after rotation");
    let served = again.get_ref().1.peer_certificates().unwrap()[0].clone();
    assert_eq!(served, next.cert_der, "the rotated identity is served");
    assert!(sc.warn_lines(&["rejected"]).is_empty(), "{:?}", sc.logs());

    // Drain: the live connection finishes, the process exits 0.
    sc.signal(libc::SIGTERM);
    s.write_all(b"last").await.unwrap();
    let mut buf = [0u8; 4];
    s.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"last");
    drop(s);
    drop(again);
    let (code, logs) = sc.wait_exit().await;
    assert_eq!(code, Some(0), "{}", logs.join("\n"));
}

/// `--sandbox off` leaves the process unrestricted, and `/status` says so.
#[tokio::test]
async fn sandbox_off_is_reported_on_status() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("sandbox CA");
    let tls = pki.dir(tmp.path(), "replica", &pki.leaf(REPLICA, Role::Server));
    let echo = echo_target().await;
    let sc = start_server(
        &tls,
        &echo.addr.to_string(),
        &["--admin", "127.0.0.1:0", "--sandbox", "off"],
    )
    .await;
    let st = status(&sc.admin()).await;
    assert_eq!(st["sandbox"]["mode"], "off", "{}", st["sandbox"]);
    assert_eq!(st["sandbox"]["network"], "off", "{}", st["sandbox"]);
}

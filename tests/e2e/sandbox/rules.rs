//! Each rule docs/security.md claims, tried through the probe and seen
//! refused by the kernel: writing, creating and removing files; binding ports other
//! than the listen and admin ports; the ABI 6 scopes (abstract unix
//! sockets, signals); UDP, refused by the seccomp filter unless a target
//! is a host name. And what the sandbox does not restrict (pathname unix
//! sockets, UDP for DNS), tried too, so that `/status`'s `unrestricted`
//! list is held to the truth. Each test also runs with the sandbox off: the same
//! attempts then go through, so a refusal is the sandbox's doing.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use super::{outcome, probe, write_config, Setup};

/// Probes `args` with the sandbox as `top` (top-level config lines) says.
fn run(s: &Setup, top: &str, args: &[String]) -> Value {
    let config = write_config(s.tmp.path(), &s.tls_dir, &s.target(), top);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    probe(&config, &args, &[], &[])
}

/// `flag value` pairs as probe arguments.
fn flags<T: ToString>(flag: &str, values: &[T]) -> Vec<String> {
    values
        .iter()
        .flat_map(|v| [flag.to_string(), v.to_string()])
        .collect()
}

fn results(report: &Value, kind: &str) -> Vec<String> {
    let n = report[kind].as_array().map_or(0, Vec::len);
    (0..n).map(|i| outcome(report, kind, i).0).collect()
}

fn listed(report: &Value, key: &str, name: &str) -> bool {
    report["sandbox"][key]
        .as_array()
        .is_some_and(|a| a.iter().any(|v| v == name))
}

/// The kernel's Landlock ABI as the probe reported it, or a loud stop
/// where it is below `need`: a skip only when `MTLS_SIDECAR_SKIP` names
/// `landlock-abi6`, never silently.
fn has_abi(report: &Value, need: i64, what: &str) -> bool {
    let abi = report["sandbox"]["landlock_abi"].as_i64().unwrap_or(0);
    if abi >= need {
        return true;
    }
    let skip = std::env::var("MTLS_SIDECAR_SKIP").unwrap_or_default();
    assert!(
        skip.split(',').any(|s| s == "landlock-abi6"),
        "this kernel's Landlock ABI is {abi}, below the {need} that {what} needs; \
         set MTLS_SIDECAR_SKIP=landlock-abi6 to skip this test"
    );
    eprintln!("SKIPPED: {what} needs Landlock ABI {need}; this kernel has {abi}");
    false
}

/// A path directly in /tmp (no rule grants anything there) unique to this
/// test process and `tag`.
fn in_tmp(tag: &str) -> PathBuf {
    PathBuf::from(format!(
        "/tmp/mtls-sidecar-sandbox-{}-{tag}",
        std::process::id()
    ))
}

/// Removes a file on drop.
struct Cleanup(Vec<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

const PLANTED: &str = "planted by the test";

/// docs/security.md: "creating, writing or removing no file". In a directory the
/// sandbox grants reading (the credential directory) and in /tmp (granted
/// nothing): writing an existing file (Landlock WriteFile), creating one
/// (MakeReg) and removing one (RemoveFile) are each refused, and the files
/// are seen unchanged on disk.
#[test]
fn files_cannot_be_written_created_or_removed() {
    let s = Setup::new();
    let dirs = [s.tls_dir.clone(), in_tmp("dir")];
    std::fs::create_dir_all(&dirs[1]).unwrap();
    let _cleanup = Cleanup(vec![dirs[1].join("existing"), dirs[1].join("new")]);
    for (i, dir) in dirs.iter().enumerate() {
        let existing = dir.join("existing");
        let new = dir.join("new");
        let files = [&existing, &new];
        let check = |top: &str| {
            std::fs::write(&existing, PLANTED).unwrap();
            let _ = std::fs::remove_file(&new);
            let mut args = flags("--write", &files.map(|p| p.display()));
            args.extend(flags("--remove", &[existing.display()]));
            run(&s, top, &args)
        };
        let report = check("");
        assert_eq!(
            results(&report, "write"),
            ["refused", "refused"],
            "writing an existing file, creating one in {dir:?}: {report}"
        );
        assert_eq!(results(&report, "remove"), ["refused"], "{report}");
        assert_eq!(std::fs::read_to_string(&existing).unwrap(), PLANTED);
        assert!(!new.exists(), "{new:?} was created");
        // Control: without the sandbox all three go through.
        let report = check("sandbox = \"off\"");
        assert_eq!(
            results(&report, "write"),
            ["allowed", "allowed"],
            "{report}"
        );
        assert_eq!(results(&report, "remove"), ["allowed"], "{report}");
        assert!(new.exists() && !existing.exists(), "case {i}");
    }
    let _ = std::fs::remove_dir(&dirs[1]);
}

/// docs/security.md: "TCP bind only on its listen and admin ports". A port held by
/// this test is refused by the sandbox (EACCES, before the kernel's
/// address-in-use check, which is what the unsandboxed control meets), as
/// is port 0; the listen and admin ports, bound before the sandbox, can be
/// bound again after it once the probe closes them.
#[test]
fn only_the_listen_and_admin_ports_can_be_bound() {
    let s = Setup::new();
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let other = other.local_addr().unwrap().to_string();
    let mut args = flags("--bind", &[other.as_str(), "127.0.0.1:0"]);
    args.push("--rebind-listeners".into());
    let top = "admin = \"127.0.0.1:0\"";
    let report = run(&s, top, &args);
    assert_eq!(report["sandbox"]["network"], "enforced", "{report}");
    assert_eq!(
        results(&report, "bind"),
        ["refused", "refused"],
        "binding a port held elsewhere, then port 0: {report}"
    );
    // Positive control: the route's and the admin endpoint's ports.
    assert_eq!(
        results(&report, "rebind"),
        ["allowed", "allowed"],
        "{report}"
    );
    let ports = report["sandbox"]["bind_ports"].as_array().unwrap().len();
    assert_eq!(ports, 2, "the listen and admin ports: {report}");

    let report = run(&s, &format!("{top}\nsandbox = \"off\""), &args);
    assert_eq!(
        results(&report, "bind"),
        ["failed", "allowed"],
        "unsandboxed, the held port is in use and port 0 binds: {report}"
    );
}

/// An abstract unix socket bound by this test, outside the probe's
/// sandbox.
fn abstract_listener(tag: &str) -> (UnixListener, String) {
    let name = format!("mtls-sidecar-sandbox-{}-{tag}", std::process::id());
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    (UnixListener::bind_addr(&addr).unwrap(), name)
}

/// Landlock ABI 6: connecting to an abstract unix socket created outside
/// the sandbox is refused.
#[test]
fn abstract_unix_sockets_outside_the_sandbox_are_refused() {
    let s = Setup::new();
    let (_listener, name) = abstract_listener("connect");
    let args = flags("--abstract-connect", &[name]);
    let report = run(&s, "", &args);
    if !has_abi(&report, 6, "the abstract unix socket scope") {
        return;
    }
    assert!(
        listed(&report, "scopes", "abstract_unix_socket"),
        "{report}"
    );
    assert!(!listed(&report, "unrestricted", "abstract_unix_socket"));
    assert_eq!(
        results(&report, "abstract_connect"),
        ["refused"],
        "{report}"
    );
    let report = run(&s, "sandbox = \"off\"", &args);
    assert_eq!(
        results(&report, "abstract_connect"),
        ["allowed"],
        "{report}"
    );
}

/// A process outside the sandbox, killed on drop.
struct Bystander(Child);

impl Drop for Bystander {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Landlock ABI 6: signalling a process outside the sandbox is refused
/// (signal 0: the permission check every signal gets, nothing delivered).
#[test]
fn signalling_a_process_outside_the_sandbox_is_refused() {
    let s = Setup::new();
    let bystander = Bystander(
        Command::new("sleep")
            .arg("600")
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn sleep"),
    );
    let args = flags("--signal", &[bystander.0.id()]);
    let report = run(&s, "", &args);
    if !has_abi(&report, 6, "the signal scope") {
        return;
    }
    assert!(listed(&report, "scopes", "signal"), "{report}");
    assert_eq!(results(&report, "signal"), ["refused"], "{report}");
    let report = run(&s, "sandbox = \"off\"", &args);
    assert_eq!(results(&report, "signal"), ["allowed"], "{report}");
}

/// The seccomp filter: with every target an IP address, creating a UDP
/// socket is refused (std asks for `SOCK_DGRAM | SOCK_CLOEXEC`: the filter
/// must mask the flag to see it); with a target named by host name, UDP
/// stays open for DNS, and `/status` lists it as unrestricted: a datagram
/// to a port of this test then arrives.
#[test]
fn udp_is_refused_unless_a_target_is_a_host_name() {
    let s = Setup::new();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let args = flags("--udp-send", &[udp.local_addr().unwrap()]);
    let report = run(&s, "", &args);
    assert_eq!(report["sandbox"]["seccomp"], "enforced", "{report}");
    assert!(!listed(&report, "unrestricted", "udp"), "{report}");
    assert_eq!(results(&report, "udp_send"), ["refused"], "{report}");

    let by_name = format!("localhost:{}", s.target.local_addr().unwrap().port());
    let config = write_config(s.tmp.path(), &s.tls_dir, &by_name, "");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let report = probe(&config, &args, &[], &[]);
    assert!(listed(&report, "unrestricted", "udp"), "{report}");
    assert_eq!(results(&report, "udp_send"), ["allowed"], "{report}");
    udp.set_read_timeout(Some(crate::common::DEADLINE)).unwrap();
    let mut buf = [0u8; 64];
    let n = udp.recv(&mut buf).expect("the probe's datagram");
    assert_eq!(&buf[..n], b"sent under the sandbox");
}

/// The seccomp filter refuses raw IP sockets, with EACCES: without
/// CAP_NET_RAW the kernel's own refusal is EPERM, so the error tells the
/// two apart whoever runs the test.
#[test]
fn raw_sockets_are_refused_by_the_filter() {
    let s = Setup::new();
    let report = run(&s, "", &["--raw-socket".to_string()]);
    let a = &report["raw_socket"][0];
    assert_eq!(a["result"], "refused", "{report}");
    let eacces = format!("(os error {})", libc::EACCES);
    assert!(a["error"].as_str().unwrap_or("").contains(&eacces), "{a}");
    let report = run(&s, "sandbox = \"off\"", &["--raw-socket".to_string()]);
    let a = &report["raw_socket"][0];
    assert!(!a.to_string().contains(&eacces), "unsandboxed: {a}");
}

/// The seccomp filter lets one netlink protocol through, the one the
/// target-exposure check lists listening sockets with
/// (`NETLINK_SOCK_DIAG`), and refuses any other with EACCES
/// (`NETLINK_ROUTE` here); without the sandbox both open.
#[test]
fn netlink_is_refused_but_for_sock_diag() {
    let s = Setup::new();
    let report = run(&s, "", &["--netlink".to_string()]);
    assert_eq!(report["sandbox"]["seccomp"], "enforced", "{report}");
    assert_eq!(
        results(&report, "netlink"),
        ["allowed", "refused"],
        "{report}"
    );
    let eacces = format!("(os error {})", libc::EACCES);
    let route = &report["netlink"][1];
    assert!(
        route["error"].as_str().unwrap_or("").contains(&eacces),
        "{route}"
    );
    let report = run(&s, "sandbox = \"off\"", &["--netlink".to_string()]);
    assert_eq!(
        results(&report, "netlink"),
        ["allowed", "allowed"],
        "{report}"
    );
}

/// What docs/security.md says the sandbox does not restrict, held to the truth:
/// `/status` lists `pathname_unix_socket` as unrestricted, and a connect to
/// a unix socket of this test, by its path, is accepted.
#[test]
fn pathname_unix_sockets_stay_reachable_as_status_says() {
    let s = Setup::new();
    let sock = s.tmp.path().join("outside.sock");
    let unix = UnixListener::bind(&sock).unwrap();
    let report = run(&s, "", &flags("--unix-connect", &[sock.display()]));
    assert_eq!(report["sandbox"]["filesystem"], "enforced", "{report}");
    assert!(listed(&report, "unrestricted", "pathname_unix_socket"));
    assert_eq!(results(&report, "unix_connect"), ["allowed"], "{report}");
    // The probe has exited; its connection waits in the backlog.
    unix.set_nonblocking(true).unwrap();
    unix.accept().expect("the probe's connection");
}

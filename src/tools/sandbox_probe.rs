//! The hidden `sandbox-probe` subcommand: proof, from inside the real
//! process, that the sandbox holds. It prepares exactly what `run --config`
//! would (credentials loaded, listeners bound), applies exactly the sandbox
//! that configuration gets, then tries the accesses it was asked to (reads,
//! writes, removals, TCP connects and binds, unix socket connects, signals,
//! UDP sends) and reports each as `allowed`, `refused` (by the sandbox:
//! EACCES or EPERM) or `failed` (any other error), as one JSON document on
//! stdout. Tests use it; it is not for operators.

use std::borrow::Borrow;
use std::io::{self, Read};
use std::net::{TcpListener, TcpStream, ToSocketAddrs, UdpSocket};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use crate::cli::SandboxProbeArgs;
use crate::config::FileSpec;
use crate::proxy::addr::Addr;
use crate::sandbox::{apply, warm_up_resolver, SandboxStatus};

/// How long one probe connect may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// One attempted access.
#[derive(Debug, Serialize)]
pub struct Attempt {
    /// The path, address, name or process tried.
    pub what: String,
    /// `allowed`, `refused` (by the sandbox) or `failed`.
    pub result: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The probe's report: the sandbox in force, then one list of attempts per
/// kind, in the order given on the command line.
#[derive(Debug, Serialize)]
pub struct Report {
    pub sandbox: SandboxStatus,
    pub read: Vec<Attempt>,
    pub connect: Vec<Attempt>,
    pub write: Vec<Attempt>,
    pub remove: Vec<Attempt>,
    pub bind: Vec<Attempt>,
    /// The sidecar's own TCP listen addresses bound again after it closed
    /// them (`--rebind-listeners`).
    pub rebind: Vec<Attempt>,
    pub abstract_connect: Vec<Attempt>,
    pub unix_connect: Vec<Attempt>,
    pub signal: Vec<Attempt>,
    pub udp_send: Vec<Attempt>,
    pub raw_socket: Vec<Attempt>,
    /// `sock_diag`, then `route` (`--netlink`).
    pub netlink: Vec<Attempt>,
}

/// Classifies one outcome: EACCES and EPERM are the sandbox's refusals
/// (Landlock answers one or the other), anything else a plain failure.
fn attempt(what: String, r: io::Result<()>) -> Attempt {
    let (result, error) = match r {
        Ok(()) => ("allowed", None),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) => {
            ("refused", Some(e.to_string()))
        }
        Err(e) => ("failed", Some(e.to_string())),
    };
    Attempt {
        what,
        result,
        error,
    }
}

/// Tries `f` on each item, named by `name`.
fn each<T: Borrow<U>, U: ?Sized>(
    items: &[T],
    name: impl Fn(&U) -> String,
    f: impl Fn(&U) -> io::Result<()>,
) -> Vec<Attempt> {
    items
        .iter()
        .map(|i| attempt(name(i.borrow()), f(i.borrow())))
        .collect()
}

fn shown(p: &Path) -> String {
    p.display().to_string()
}

fn try_read(path: &Path) -> io::Result<()> {
    let mut f = std::fs::File::open(path)?;
    f.read(&mut [0u8; 1]).map(|_| ())
}

/// Opens for writing (creating the file when it is missing: Landlock's
/// MakeReg; writing an existing one: WriteFile), without truncating.
fn try_write(path: &Path) -> io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    f.write_all(b"written under the sandbox\n")
}

fn try_remove(path: &Path) -> io::Result<()> {
    std::fs::remove_file(path)
}

/// Resolves `addr` and tries `f` on each address until one succeeds.
fn on_each_address(
    addr: &str,
    f: impl Fn(std::net::SocketAddr) -> io::Result<()>,
) -> io::Result<()> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
    for a in addr.to_socket_addrs()? {
        match f(a) {
            Ok(()) => return Ok(()),
            Err(e) => last = e,
        }
    }
    Err(last)
}

fn try_connect(addr: &str) -> io::Result<()> {
    on_each_address(addr, |a| {
        TcpStream::connect_timeout(&a, CONNECT_TIMEOUT).map(drop)
    })
}

fn try_bind(addr: &str) -> io::Result<()> {
    on_each_address(addr, |a| TcpListener::bind(a).map(drop))
}

/// Sends one datagram from an unbound socket of the destination's family
/// (the kernel binds it to an ephemeral port on the way).
fn try_udp_send(addr: &str) -> io::Result<()> {
    on_each_address(addr, |a| {
        let local = if a.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" };
        let s = UdpSocket::bind(local)?;
        s.send_to(b"sent under the sandbox", a).map(drop)
    })
}

fn try_abstract_connect(name: &str) -> io::Result<()> {
    let addr = SocketAddr::from_abstract_name(name.as_bytes())?;
    UnixStream::connect_addr(&addr).map(drop)
}

fn try_unix_connect(path: &Path) -> io::Result<()> {
    UnixStream::connect(path).map(drop)
}

/// Signal 0: kill(2)'s permission check without a signal delivered, which
/// Landlock's signal scope judges as it does every signal.
fn try_signal(pid: &i32) -> io::Result<()> {
    // SAFETY: kill has no memory effects; clap keeps `pid` positive, so it
    // names one process, never a group or every process.
    if unsafe { libc::kill(*pid, 0) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A raw IPv4 socket: the seccomp filter refuses it with EACCES (lacking
/// CAP_NET_RAW, the kernel answers EPERM).
fn try_raw_socket() -> io::Result<()> {
    // SAFETY: socket takes no pointers; the descriptor is closed at once.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_ICMP) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by socket and is owned here.
    unsafe { libc::close(fd) };
    Ok(())
}

/// A netlink socket of `protocol`: the seccomp filter allows only
/// `NETLINK_SOCK_DIAG`.
fn try_netlink(protocol: libc::c_int) -> io::Result<()> {
    // SAFETY: socket takes no pointers; the descriptor is closed at once.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            protocol,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by socket and is owned here.
    unsafe { libc::close(fd) };
    Ok(())
}

/// The TCP addresses `listeners` are bound to.
fn tcp_addresses(prepared: &crate::app::Prepared) -> Vec<String> {
    prepared
        .listeners()
        .filter_map(|l| match l.local_addr() {
            Ok(Addr::Tcp(a)) => Some(a),
            _ => None,
        })
        .collect()
}

/// Runs the probe; exit codes as the sidecar's: 2 for a bad configuration,
/// 1 when the sandbox cannot be applied as asked.
pub fn run(args: &SandboxProbeArgs) -> u8 {
    let settings = match FileSpec::load(&args.config) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    let mode = args.sandbox.unwrap_or(settings.sandbox);
    let prepared = match crate::app::prepare(settings) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return e.exit_code();
        }
    };
    let plan = prepared.sandbox_plan(Some(&args.config));
    warm_up_resolver(&plan);
    let sandbox = match apply(&plan, mode) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return 1;
        }
    };
    let mut report = Report {
        sandbox,
        read: each(&args.read, shown, try_read),
        connect: each(&args.connect, str::to_owned, try_connect),
        write: each(&args.write, shown, try_write),
        remove: each(&args.remove, shown, try_remove),
        bind: each(&args.bind, str::to_owned, try_bind),
        rebind: Vec::new(),
        raw_socket: if args.raw_socket {
            vec![attempt("raw IPv4 socket".into(), try_raw_socket())]
        } else {
            Vec::new()
        },
        netlink: if args.netlink {
            vec![
                attempt("sock_diag".into(), try_netlink(libc::NETLINK_SOCK_DIAG)),
                attempt("route".into(), try_netlink(libc::NETLINK_ROUTE)),
            ]
        } else {
            Vec::new()
        },
        abstract_connect: each(
            &args.abstract_connect,
            |n| format!("@{n}"),
            try_abstract_connect,
        ),
        unix_connect: each(&args.unix_connect, shown, try_unix_connect),
        signal: each(&args.signal, i32::to_string, try_signal),
        udp_send: each(&args.udp_send, str::to_owned, try_udp_send),
    };
    if args.rebind_listeners {
        let own = tcp_addresses(&prepared);
        drop(prepared);
        report.rebind = each(&own, str::to_owned, try_bind);
    }
    print(&report)
}

fn print(report: &Report) -> u8 {
    match serde_json::to_string_pretty(report) {
        Ok(text) => {
            println!("{text}");
            0
        }
        Err(e) => {
            eprintln!("error: cannot encode the report: {e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only EACCES and EPERM count as the sandbox's refusals.
    #[test]
    fn outcomes_are_classified() {
        let r = |e| attempt("x".into(), Err(io::Error::from_raw_os_error(e))).result;
        assert_eq!(r(libc::EACCES), "refused");
        assert_eq!(r(libc::EPERM), "refused");
        assert_eq!(r(libc::EADDRINUSE), "failed");
        assert_eq!(attempt("x".into(), Ok(())).result, "allowed");
    }
}

//! Least privilege with Landlock (`--sandbox best-effort|require|off`).
//!
//! A TLS terminator parses hostile input all day. Should a parser bug ever
//! be exploited, the process should be unable to read anything but its
//! credentials, write anything, or connect anywhere but its targets. Once
//! every listener is bound and every file known ([`crate::app::prepare`]),
//! [`apply`] restricts the process to:
//!
//! * reading its credential directories (whole, so `..data` swaps keep
//!   working), the directories explicit `--cert/--key/--ca` files live in
//!   (and those their symlinks point into) unless such a directory is too
//!   broad to grant whole (see [`Scope`]: then only the file itself), the
//!   config file, `/proc/self`, and, when a target is a host name, the
//!   resolver's files;
//! * creating, writing or removing no file at all (its unix sockets were
//!   created before); executing nothing;
//! * where the kernel's Landlock ABI has network rules (≥ 4): binding only
//!   its listen ports and connecting only to its target ports (plus TCP 53
//!   when a target is a host name).
//!
//! Landlock restricts the calling thread and the threads it creates later
//! (there is no way to reach sibling threads before ABI 8), so the binary
//! applies it on the main thread before it builds the runtime; [`apply`]
//! refuses to pretend when other threads already exist.
//!
//! The rule set handles the filesystem rights of ABI 5 and TCP bind/connect
//! (ABI 4), nothing newer: rights a later kernel adds (say, UDP or unix
//! socket connects) would deny what the sidecar needs (DNS over UDP, the
//! `NOTIFY_SOCKET`) without a rule written for them.

use std::io;
use std::net::ToSocketAddrs;
use std::path::PathBuf;
use std::sync::OnceLock;

use landlock::{
    Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, LandlockStatus, NetPort,
    PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, ABI,
};
use tracing::{debug, warn};

mod mode;
mod plan;
mod scope;
mod status;

pub use mode::SandboxMode;
pub use plan::{Plan, RESOLVER_FILES};
pub use scope::Scope;
pub use status::{Enforcement, SandboxStatus};

use status::log;

/// The filesystem rights the rule set handles (denies unless a rule grants
/// them): every right up to ABI 5.
const FS_ABI: ABI = ABI::V5;

/// Resolves every host-name target once, before the sandbox: the resolver
/// loads its configuration (and any NSS module) on first use, which it
/// could not do afterwards. A name that does not resolve yet is fine: the
/// point is the loading, and connects resolve again anyway.
pub fn warm_up_resolver(plan: &Plan) {
    for t in &plan.hostname_targets {
        match t.as_str().to_socket_addrs() {
            Ok(addrs) => debug!(target = %t, resolved = addrs.count(), "resolver warmed up"),
            Err(e) => {
                debug!(target = %t, error = %e, "resolver warmed up (the name does not resolve yet)")
            }
        }
    }
}

static STATE: OnceLock<SandboxStatus> = OnceLock::new();

/// The sandbox in force in this process (none when [`apply`] never ran, as
/// for the in-process [`crate::app::start`]).
pub fn current() -> SandboxStatus {
    STATE.get().cloned().unwrap_or_else(|| {
        SandboxStatus::unsandboxed(SandboxMode::Off, "no sandbox was applied to this process")
    })
}

/// Why the sandbox could not be applied as asked.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("--sandbox require: Landlock cannot enforce the rule set on this kernel: {0}")]
    Landlock(#[from] landlock::RulesetError),
    #[error("--sandbox require: cannot open {path} for a sandbox rule: {source}")]
    Path { path: PathBuf, source: io::Error },
    #[error(
        "--sandbox require: {0} other threads already run and Landlock (before ABI 8) \
         would not restrict them"
    )]
    Threads(usize),
    #[error("--sandbox require: the kernel does not enforce the whole rule set: {0}")]
    NotEnforced(String),
    #[error("--sandbox {mode}: cannot apply the sandbox: {source}")]
    Failed {
        mode: &'static str,
        source: landlock::RulesetError,
    },
}

/// Threads of this process other than the caller, from `/proc/self/task`
/// (0 when it cannot be read).
fn other_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|d| d.count().saturating_sub(1))
        .unwrap_or(0)
}

/// Restricts the calling thread, and every thread it creates afterwards,
/// to `plan`. Best effort enforces what the kernel supports; `require`
/// fails unless everything is. Logs what is in force at INFO and records it
/// for `/status`.
pub fn apply(plan: &Plan, mode: SandboxMode) -> Result<SandboxStatus, SandboxError> {
    let status = match mode {
        SandboxMode::Off => {
            SandboxStatus::unsandboxed(SandboxMode::Off, "turned off with --sandbox off")
        }
        SandboxMode::BestEffort | SandboxMode::Require => restrict(plan, mode)?,
    };
    log(&status);
    let _ = STATE.set(status.clone());
    Ok(status)
}

fn restrict(plan: &Plan, mode: SandboxMode) -> Result<SandboxStatus, SandboxError> {
    let require = mode == SandboxMode::Require;
    let threads = other_threads();
    if threads > 0 && require {
        return Err(SandboxError::Threads(threads));
    }
    let compat = if require {
        CompatLevel::HardRequirement
    } else {
        CompatLevel::BestEffort
    };
    let wrap = |source: landlock::RulesetError| {
        if require {
            SandboxError::Landlock(source)
        } else {
            SandboxError::Failed {
                mode: mode.as_str(),
                source,
            }
        }
    };
    let net: BitFlags<AccessNet> = AccessNet::BindTcp | AccessNet::ConnectTcp;
    let mut ruleset = Ruleset::default()
        .set_compatibility(compat)
        .handle_access(AccessFs::from_all(FS_ABI))
        .and_then(|r| r.handle_access(net))
        .and_then(|r| r.create())
        .map_err(wrap)?;
    let read_dir = AccessFs::ReadFile | AccessFs::ReadDir;
    let read_file: BitFlags<AccessFs> = AccessFs::ReadFile.into();
    let mut skipped = Vec::new();
    let mut read_only = Vec::new();
    // Unix sockets are created (and a stale one removed) before the sandbox
    // exists; after it, nothing may create or remove a file. Landlock's
    // RemoveFile would cover every file of those directories, so the socket
    // directories get no right at all and are listed for /status only.
    for path in plan.read_dirs.iter().chain(&plan.read_files) {
        let fd = match PathFd::new(path) {
            Ok(fd) => fd,
            Err(e) => {
                let source = io::Error::other(e.to_string());
                if require {
                    return Err(SandboxError::Path {
                        path: path.clone(),
                        source,
                    });
                }
                warn!(path = %path.display(), error = %source, "sandbox: cannot open an allow-list entry; it stays unreadable");
                skipped.push(path.display().to_string());
                continue;
            }
        };
        let access = if path.is_dir() { read_dir } else { read_file };
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, access))
            .map_err(wrap)?;
        read_only.push(path.display().to_string());
    }
    for port in &plan.bind_ports {
        ruleset = ruleset
            .add_rule(NetPort::new(*port, AccessNet::BindTcp))
            .map_err(wrap)?;
    }
    for port in &plan.connect_ports {
        ruleset = ruleset
            .add_rule(NetPort::new(*port, AccessNet::ConnectTcp))
            .map_err(wrap)?;
    }
    let restricted = ruleset.restrict_self().map_err(wrap)?;
    let abi = match restricted.landlock {
        LandlockStatus::Available {
            effective_abi,
            kernel_abi,
        } => Some(kernel_abi.unwrap_or(effective_abi as i32)),
        _ => None,
    };
    let in_force = restricted.ruleset != RulesetStatus::NotEnforced;
    let level = abi.unwrap_or(0);
    let filesystem = match (in_force, level) {
        (false, _) | (_, ..=0) => Enforcement::NotEnforced,
        (true, l) if l >= FS_ABI as i32 => Enforcement::Enforced,
        _ => Enforcement::Partial,
    };
    let network = if in_force && level >= ABI::V4 as i32 {
        Enforcement::Enforced
    } else {
        Enforcement::NotEnforced
    };
    let note = (threads > 0).then(|| {
        format!("{threads} threads started before the sandbox and are not restricted by it")
    });
    let status = SandboxStatus {
        mode,
        landlock_abi: abi,
        filesystem,
        network,
        read_only,
        unix_socket_dirs: plan
            .socket_dirs
            .iter()
            .map(|p| p.display().to_string())
            .collect(),
        bind_ports: plan.bind_ports.iter().copied().collect(),
        connect_ports: plan.connect_ports.iter().copied().collect(),
        skipped,
        note,
    };
    if require && !status.fully_enforced() {
        return Err(SandboxError::NotEnforced(format!(
            "filesystem {}, network {} (Landlock ABI {})",
            status.filesystem.as_str(),
            status.network.as_str(),
            abi.map_or_else(|| "none".to_string(), |a| a.to_string())
        )));
    }
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `require` refuses while other threads run: Landlock (before ABI 8)
    /// would restrict only the calling thread. (Were the check gone, this
    /// would sandbox the test's own thread and return Ok.)
    #[test]
    fn require_refuses_while_other_threads_run() {
        let (stop, parked) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || {
            let _ = parked.recv();
        });
        let r = apply(&Plan::default(), SandboxMode::Require);
        drop(stop);
        other.join().unwrap();
        assert!(
            matches!(r, Err(SandboxError::Threads(n)) if n >= 1),
            "{r:?}"
        );
    }
}

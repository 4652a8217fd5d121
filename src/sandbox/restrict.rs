//! The Landlock rule set: a [`Plan`] turned into filesystem and TCP rules
//! plus the two scopes of ABI 6, applied to the calling thread, and what
//! the kernel actually enforced.

use std::io;

use landlock::{
    Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, LandlockStatus, NetPort,
    PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus,
    Scope as LandlockScope, ABI,
};
use tracing::warn;

use super::mode::SandboxMode;
use super::plan::Plan;
use super::seccomp;
use super::status::{Enforcement, SandboxStatus};
use super::SandboxError;

/// The filesystem rights the rule set handles (denies unless a rule grants
/// them): every right up to ABI 5.
const FS_ABI: ABI = ABI::V5;

/// The scopes the rule set asks for: those of ABI 6, connecting to an
/// abstract unix socket and signalling a process, each refused when the
/// other end is outside the sandbox. The sidecar needs neither (sd-notify
/// reaches `NOTIFY_SOCKET` by path; nothing signals another process).
const SCOPE_ABI: ABI = ABI::V6;

/// What Landlock never restricts here, as `/status` names it. The crate
/// has the rights for both, but the kernel here (Landlock ABI 7) has
/// neither, so rules for them could not be tested: UDP (`BindUdp`,
/// `ConnectSendUdp`: ABI 10; the seccomp filter refuses datagram sockets
/// instead, where no target is a host name) and connecting to a pathname
/// unix socket (`ResolveUnix`: ABI 9), which would have to stay open for
/// `NOTIFY_SOCKET` and unix-socket targets anyway.
const UDP: &str = "udp";
const PATHNAME_UNIX_SOCKET: &str = "pathname_unix_socket";
const SCOPES: [&str; 2] = ["abstract_unix_socket", "signal"];

/// The scopes in force, as `/status` names them: both where the rule set
/// is in force on a kernel with ABI 6 or later, none otherwise.
fn scopes_in_force(in_force: bool, level: i32) -> Vec<&'static str> {
    if in_force && level >= SCOPE_ABI as i32 {
        SCOPES.to_vec()
    } else {
        Vec::new()
    }
}

/// How far the filesystem rules are in force: wholly with every access
/// right this build asks for (ABI `FS_ABI` or later), partly on an older
/// Landlock (the rights it lacks stay open), not at all without one.
fn filesystem_in_force(in_force: bool, level: i32) -> Enforcement {
    match (in_force, level) {
        (false, _) | (_, ..=0) => Enforcement::NotEnforced,
        (true, l) if l >= FS_ABI as i32 => Enforcement::Enforced,
        _ => Enforcement::Partial,
    }
}

/// Whether the TCP bind and connect rules are in force: they need ABI 4.
fn network_in_force(in_force: bool, level: i32) -> Enforcement {
    if in_force && level >= ABI::V4 as i32 {
        Enforcement::Enforced
    } else {
        Enforcement::NotEnforced
    }
}

/// What `/status` notes when threads ran before the sandbox (Landlock
/// before ABI 8 restricts only the thread that applies it and those it
/// starts later).
fn threads_note(threads: usize) -> Option<String> {
    (threads > 0).then(|| {
        format!("{threads} threads started before the sandbox and are not restricted by it")
    })
}

/// What stays open: UDP unless the filter refuses it, pathname unix
/// sockets, and each scope not in force.
fn unrestricted(scopes: &[&'static str], udp_refused: bool) -> Vec<&'static str> {
    let mut open = Vec::new();
    if !udp_refused {
        open.push(UDP);
    }
    open.push(PATHNAME_UNIX_SOCKET);
    open.extend(SCOPES.iter().filter(|s| !scopes.contains(s)));
    open
}

/// Installs the socket filter ([`seccomp`]); datagram sockets stay open
/// when a target is a host name (DNS). Returns whether it is in force, and
/// whether it refuses UDP.
fn filter_sockets(plan: &Plan) -> (Enforcement, bool) {
    let dns = !plan.hostname_targets.is_empty();
    match seccomp::install(dns) {
        Ok(true) => (Enforcement::Enforced, !dns),
        Ok(false) => (Enforcement::NotEnforced, false),
        Err(e) => {
            warn!(target: "mtls_sidecar::sandbox", error = %e, "sandbox: cannot install the seccomp socket filter; UDP stays open");
            (Enforcement::NotEnforced, false)
        }
    }
}

/// Threads of this process other than the caller, from `/proc/self/task`
/// (0 when it cannot be read).
fn other_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|d| d.count().saturating_sub(1))
        .unwrap_or(0)
}

pub(super) fn restrict(plan: &Plan, mode: SandboxMode) -> Result<SandboxStatus, SandboxError> {
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
        // Best effort even under `require`, which asks for the filesystem
        // and TCP halves only: a kernel before ABI 6 simply has no scopes,
        // and `/status` says so.
        .map(|r| r.set_compatibility(CompatLevel::BestEffort))
        .and_then(|r| r.scope(LandlockScope::from_all(SCOPE_ABI)))
        .map(|r| r.set_compatibility(compat))
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
                warn!(target: "mtls_sidecar::sandbox", path = %path.display(), error = %source, "sandbox: cannot open an allow-list entry; it stays unreadable");
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
    let filesystem = filesystem_in_force(in_force, level);
    let network = network_in_force(in_force, level);
    let scopes = scopes_in_force(in_force, level);
    let (seccomp, udp_refused) = filter_sockets(plan);
    let note = threads_note(threads);
    let status = SandboxStatus {
        mode,
        landlock_abi: abi,
        filesystem,
        network,
        seccomp,
        unrestricted: unrestricted(&scopes, udp_refused),
        scopes,
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

    #[test]
    fn scopes_need_the_rule_set_in_force_on_abi_6() {
        assert_eq!(scopes_in_force(true, 7), ["abstract_unix_socket", "signal"]);
        assert_eq!(scopes_in_force(true, 6), ["abstract_unix_socket", "signal"]);
        assert!(scopes_in_force(true, 5).is_empty());
        assert!(scopes_in_force(false, 7).is_empty());
    }

    #[test]
    fn the_filesystem_rules_are_wholly_in_force_from_their_abi() {
        let fs = FS_ABI as i32;
        assert_eq!(filesystem_in_force(true, fs), Enforcement::Enforced);
        assert_eq!(filesystem_in_force(true, fs + 1), Enforcement::Enforced);
        assert_eq!(filesystem_in_force(true, fs - 1), Enforcement::Partial);
        assert_eq!(filesystem_in_force(true, 1), Enforcement::Partial);
        assert_eq!(filesystem_in_force(true, 0), Enforcement::NotEnforced);
        assert_eq!(filesystem_in_force(false, fs), Enforcement::NotEnforced);
    }

    #[test]
    fn the_network_rules_need_abi_4() {
        assert_eq!(network_in_force(true, 4), Enforcement::Enforced);
        assert_eq!(network_in_force(true, 7), Enforcement::Enforced);
        assert_eq!(network_in_force(true, 3), Enforcement::NotEnforced);
        assert_eq!(network_in_force(false, 7), Enforcement::NotEnforced);
    }

    #[test]
    fn threads_started_before_the_sandbox_are_noted() {
        assert_eq!(threads_note(0), None);
        assert_eq!(
            threads_note(1).as_deref(),
            Some("1 threads started before the sandbox and are not restricted by it")
        );
    }

    #[test]
    fn what_is_not_in_force_is_listed_as_unrestricted() {
        let all = scopes_in_force(true, 6);
        assert_eq!(unrestricted(&all, true), ["pathname_unix_socket"]);
        assert_eq!(unrestricted(&all, false), ["udp", "pathname_unix_socket"]);
        assert_eq!(
            unrestricted(&[], false),
            [
                "udp",
                "pathname_unix_socket",
                "abstract_unix_socket",
                "signal"
            ]
        );
    }
}

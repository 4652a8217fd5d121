//! The Landlock rule set: a [`Plan`] turned into filesystem and TCP rules,
//! applied to the calling thread, and what the kernel actually enforced.

use std::io;

use landlock::{
    Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, LandlockStatus, NetPort,
    PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, ABI,
};
use tracing::warn;

use super::mode::SandboxMode;
use super::plan::Plan;
use super::status::{Enforcement, SandboxStatus};
use super::SandboxError;

/// The filesystem rights the rule set handles (denies unless a rule grants
/// them): every right up to ABI 5.
const FS_ABI: ABI = ABI::V5;

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

//! What is in force: how much of each half (filesystem, network) of the
//! rule set the kernel enforces, as the INFO log line and `/status` say it.

use serde::Serialize;
use tracing::{info, warn};

use super::mode::SandboxMode;

/// How much of one half (filesystem or network) of the rule set is in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Enforcement {
    /// Every rule of this half is enforced.
    Enforced,
    /// Enforced with fewer rights handled than the rule set asks for (an
    /// older Landlock ABI): what it cannot express stays allowed.
    Partial,
    /// The kernel cannot enforce it (no Landlock, or an ABI without it).
    NotEnforced,
    /// `--sandbox off`, or no sandbox was applied to this process.
    Off,
}

impl Enforcement {
    pub fn as_str(self) -> &'static str {
        match self {
            Enforcement::Enforced => "enforced",
            Enforcement::Partial => "partial",
            Enforcement::NotEnforced => "not_enforced",
            Enforcement::Off => "off",
        }
    }
}

/// What is in force, for the log line and `/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SandboxStatus {
    pub mode: SandboxMode,
    /// The kernel's Landlock ABI (`null` when it has none or nothing was
    /// applied).
    pub landlock_abi: Option<i32>,
    pub filesystem: Enforcement,
    pub network: Enforcement,
    /// The Landlock scopes in force (ABI 6): `abstract_unix_socket`
    /// (connecting to one created outside the sandbox) and `signal`
    /// (signalling a process outside it).
    pub scopes: Vec<&'static str>,
    /// The seccomp filter on `socket(2)`: no raw IP sockets, and no UDP
    /// ones unless a target is a host name.
    pub seccomp: Enforcement,
    /// What this sandbox does not restrict: `udp` (unless the seccomp
    /// filter refuses it), `pathname_unix_socket` (connecting to a unix
    /// socket by its path), and each scope not in force. Empty when no
    /// sandbox was applied.
    pub unrestricted: Vec<&'static str>,
    /// Readable paths (directories: everything beneath).
    pub read_only: Vec<String>,
    /// Directories where unix sockets may be created.
    pub unix_socket_dirs: Vec<String>,
    pub bind_ports: Vec<u16>,
    pub connect_ports: Vec<u16>,
    /// Allow-list entries that could not be opened when the sandbox was
    /// applied (best effort only), so are not readable.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl SandboxStatus {
    pub(super) fn unsandboxed(mode: SandboxMode, note: &str) -> SandboxStatus {
        SandboxStatus {
            mode,
            landlock_abi: None,
            filesystem: Enforcement::Off,
            network: Enforcement::Off,
            scopes: Vec::new(),
            seccomp: Enforcement::Off,
            unrestricted: Vec::new(),
            read_only: Vec::new(),
            unix_socket_dirs: Vec::new(),
            bind_ports: Vec::new(),
            connect_ports: Vec::new(),
            skipped: Vec::new(),
            note: Some(note.to_string()),
        }
    }

    /// True when every half of the rule set is enforced.
    pub fn fully_enforced(&self) -> bool {
        self.filesystem == Enforcement::Enforced && self.network == Enforcement::Enforced
    }
}

pub(super) fn log(s: &SandboxStatus) {
    if s.mode == SandboxMode::Off {
        info!(target: "mtls_sidecar::sandbox", "sandbox off (--sandbox off): the process keeps all of its user's access");
        return;
    }
    let abi = s
        .landlock_abi
        .map_or_else(|| "none".to_string(), |a| a.to_string());
    info!(
        target: "mtls_sidecar::sandbox", mode = s.mode.as_str(),
        landlock_abi = %abi,
        filesystem = s.filesystem.as_str(),
        network = s.network.as_str(),
        scopes = ?s.scopes,
        seccomp = s.seccomp.as_str(),
        unrestricted = ?s.unrestricted,
        read_only = ?s.read_only,
        unix_socket_dirs = ?s.unix_socket_dirs,
        bind_ports = ?s.bind_ports,
        connect_ports = ?s.connect_ports,
        "sandbox applied (Landlock)"
    );
    if let Some(n) = &s.note {
        warn!(target: "mtls_sidecar::sandbox", "sandbox: {n}");
    }
    if s.filesystem == Enforcement::NotEnforced {
        warn!(target: "mtls_sidecar::sandbox", "sandbox: this kernel offers no Landlock; the process is not sandboxed (--sandbox require would refuse to start)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fully enforced takes both halves of the rule set, each wholly.
    #[test]
    fn fully_enforced_takes_both_halves() {
        let mut s = SandboxStatus::unsandboxed(SandboxMode::Off, "none");
        assert!(!s.fully_enforced());
        s.filesystem = Enforcement::Enforced;
        assert!(!s.fully_enforced(), "the network half is not");
        s.network = Enforcement::Enforced;
        assert!(s.fully_enforced());
        s.filesystem = Enforcement::Partial;
        assert!(!s.fully_enforced(), "the filesystem half is partial");
    }
}

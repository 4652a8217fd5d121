//! Least privilege with Landlock and seccomp (`--sandbox
//! best-effort|require|off`).
//!
//! A TLS terminator parses hostile input all day. Should a parser bug ever
//! be exploited, the process should be unable to read anything but its
//! credentials, write anything, or reach anything but its targets. Once
//! every listener is bound and every file known ([`crate::app::prepare`]),
//! [`apply`] restricts the process to:
//!
//! * reading its credential directories (whole, so `..data` swaps keep
//!   working), the directories explicit `--cert/--key/--ca` files live in
//!   (and those their symlinks point into) unless such a directory is too
//!   broad to grant whole (see [`Scope`](scope::Scope): then only the file itself), the
//!   config file, `/proc/self`, and, when a target is a host name, the
//!   resolver's files;
//! * creating, writing or removing no file at all (its unix sockets were
//!   created before); executing nothing;
//! * where the kernel's Landlock ABI has network rules (≥ 4): binding only
//!   its listen ports and connecting only to its target ports (plus TCP 53
//!   when a target is a host name);
//! * where it has scopes (≥ 6): connecting to no abstract unix socket and
//!   signalling no process created outside the sandbox;
//! * a seccomp filter on `socket(2)` (`seccomp.rs`): no raw IP socket, and
//!   no UDP socket unless a target is a host name.
//!
//! What stays open, and `/status` lists as `unrestricted`: connecting to a
//! unix socket by its path (Landlock's `ResolveUnix` needs ABI 9; the
//! sidecar needs it for `NOTIFY_SOCKET`, which `sd_notify` opens on every
//! watchdog ping, and unix-socket targets), and UDP to anywhere when a
//! target is a host name (DNS; Landlock's UDP rules need ABI 10, and a
//! seccomp filter sees no destination address).
//!
//! Landlock restricts the calling thread and the threads it creates later
//! (there is no way to reach sibling threads before ABI 8), and so does the
//! seccomp filter; the binary applies both on the main thread before it
//! builds the runtime; [`apply`] refuses to pretend when other threads
//! already exist.
//!
//! The rule set handles the filesystem rights of ABI 5, TCP bind/connect
//! (ABI 4) and the scopes of ABI 6, nothing newer: this kernel has ABI 7,
//! so rights a later kernel adds (pathname unix socket connects at 9, UDP
//! at 10) could not be tested here, and without rules written for them
//! they would deny what the sidecar needs (the `NOTIFY_SOCKET`, DNS).
//! `require` demands the filesystem and TCP halves; the scopes and the
//! seccomp filter are applied where the kernel has them in either mode.
//!
//! One job a file: `mode.rs` (the `--sandbox` flag), `plan.rs` (the
//! allow-list, [`Plan`]), `scope.rs` (which directories are too broad to
//! grant whole), `restrict.rs` (the Landlock rule set built from a plan
//! and applied), `seccomp.rs` (the socket filter), `status.rs` (what is in
//! force, for the log line and `/status`). This file holds the entry
//! points: [`warm_up_resolver`], [`apply`] and [`current`].

use std::io;
use std::net::ToSocketAddrs;
use std::path::PathBuf;
use std::sync::OnceLock;

use tracing::debug;

mod mode;
mod plan;
mod restrict;
mod scope;
mod seccomp;
mod status;

pub use mode::SandboxMode;
pub use plan::Plan;
pub use status::SandboxStatus;

use restrict::restrict;
use status::log;

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

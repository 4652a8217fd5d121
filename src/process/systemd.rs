//! systemd integration beyond `READY=1`: listening sockets passed by socket
//! activation (`--listen systemd:NAME`), and the service watchdog.
//!
//! With socket activation systemd owns the listening socket and keeps it
//! open across a restart or an upgrade of the service, so peers that
//! connect meanwhile queue in its backlog instead of being refused. The
//! sockets are read once, through `sd-notify` (which checks `LISTEN_PID`
//! against this process and reads `LISTEN_FDS`/`LISTEN_FDNAMES`), and each
//! is handed out at most once, so no descriptor is ever owned twice.
//!
//! The watchdog pings (`WATCHDOG=1`) come from a task on the serving
//! runtime once every runtime that serves has run a probe task, so a
//! wedged event loop (any of them, with `--runtime per-core`) stops them
//! and systemd restarts the service.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Mutex;
use std::time::Duration;

use tracing::{debug, info};

/// The longest pause between two watchdog pings, whatever `WATCHDOG_USEC`
/// says: pinging more often than asked is harmless.
const MAX_PING_INTERVAL: Duration = Duration::from_secs(3600);
/// The shortest pause between two pings.
const MIN_PING_INTERVAL: Duration = Duration::from_millis(10);

/// Why a `systemd:` listener could not be had.
#[derive(Debug, thiserror::Error)]
pub enum SystemdError {
    #[error("{}", not_passed(.name, .passed))]
    NotPassed { name: String, passed: Vec<String> },
    #[error("cannot read the sockets systemd passed (LISTEN_FDS/LISTEN_FDNAMES): {0}")]
    Environment(String),
    #[error("the socket systemd passed as {name:?} is not a listening stream socket: {why}")]
    NotAListener { name: String, why: String },
}

fn not_passed(name: &str, passed: &[String]) -> String {
    let what = if name.is_empty() {
        "no socket was passed by systemd".to_string()
    } else {
        format!("socket {name:?} was not passed by systemd")
    };
    if passed.is_empty() {
        format!("{what} (no LISTEN_FDS for this process: is the .socket unit enabled?)")
    } else {
        format!("{what} (passed and unused: {})", passed.join(", "))
    }
}

impl SystemdError {
    /// True when `e` (an error from binding a listener) is a `systemd:`
    /// socket problem, which is a configuration error (exit 2).
    pub fn is_in(e: &io::Error) -> bool {
        e.get_ref().is_some_and(|inner| inner.is::<SystemdError>())
    }
}

/// One passed descriptor and its name; `None` once handed out.
struct Passed {
    fd: Option<OwnedFd>,
    name: String,
}

/// The passed sockets, read on first use.
static PASSED: Mutex<Option<Result<Vec<Passed>, String>>> = Mutex::new(None);

fn read_passed() -> Result<Vec<Passed>, String> {
    // Sockets passed to another process (an exec'ing parent, say) are not
    // ours, whatever LISTEN_FDNAMES says; sd-notify would still read the
    // names and call them inconsistent.
    let ours = std::env::var("LISTEN_PID")
        .ok()
        .and_then(|p| p.parse::<u32>().ok())
        == Some(std::process::id());
    if !ours {
        return Ok(Vec::new());
    }
    let fds = sd_notify::listen_fds_with_names(false).map_err(|e| e.to_string())?;
    Ok(fds
        .map(|(raw, name)| Passed {
            // SAFETY: sd-notify yields these only when LISTEN_PID is this
            // process, so systemd passed them to us; PASSED reads them once
            // and each is taken at most once, so this is their sole owner.
            fd: Some(unsafe { OwnedFd::from_raw_fd(raw) }),
            name,
        })
        .collect())
}

/// Takes the passed socket named `name` (the first one not yet taken when
/// `name` is empty).
pub fn take(name: &str) -> Result<OwnedFd, SystemdError> {
    let mut guard = PASSED.lock().unwrap_or_else(|e| e.into_inner());
    let passed = match guard.get_or_insert_with(read_passed) {
        Ok(p) => p,
        Err(e) => return Err(SystemdError::Environment(e.clone())),
    };
    let found = passed
        .iter_mut()
        .filter(|p| p.fd.is_some())
        .find(|p| name.is_empty() || p.name == name)
        .and_then(|p| p.fd.take());
    found.ok_or_else(|| SystemdError::NotPassed {
        name: name.to_string(),
        passed: unused_in(passed),
    })
}

fn unused_in(passed: &[Passed]) -> Vec<String> {
    passed
        .iter()
        .filter(|p| p.fd.is_some())
        .map(|p| p.name.clone())
        .collect()
}

/// The names of passed sockets no listener took (for a warning).
pub fn unused() -> Vec<String> {
    let guard = PASSED.lock().unwrap_or_else(|e| e.into_inner());
    match guard.as_ref() {
        Some(Ok(p)) => unused_in(p),
        _ => Vec::new(),
    }
}

fn sockopt(fd: &OwnedFd, opt: libc::c_int) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: value and len are valid for writes of an int, as getsockopt
    // requires for these integer options.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The kind of a passed listening socket.
pub enum Kind {
    Tcp,
    Unix,
}

/// Checks that `fd` is a listening stream socket and says which kind.
pub fn kind(name: &str, fd: &OwnedFd) -> Result<Kind, SystemdError> {
    let bad = |why: String| SystemdError::NotAListener {
        name: name.to_string(),
        why,
    };
    let ty = sockopt(fd, libc::SO_TYPE).map_err(|e| bad(e.to_string()))?;
    if ty != libc::SOCK_STREAM {
        return Err(bad("not SOCK_STREAM (use ListenStream=)".into()));
    }
    if sockopt(fd, libc::SO_ACCEPTCONN).map_err(|e| bad(e.to_string()))? == 0 {
        return Err(bad("not listening (Accept=yes is not supported)".into()));
    }
    match sockopt(fd, libc::SO_DOMAIN).map_err(|e| bad(e.to_string()))? {
        libc::AF_INET | libc::AF_INET6 => Ok(Kind::Tcp),
        libc::AF_UNIX => Ok(Kind::Unix),
        other => Err(bad(format!("address family {other}"))),
    }
}

/// Half the watchdog interval systemd set for this process
/// (`WATCHDOG_USEC`, `WATCHDOG_PID` this process), within sane bounds;
/// `None` when there is no watchdog.
pub fn watchdog_interval() -> Option<Duration> {
    let mut usec = 0u64;
    if !sd_notify::watchdog_enabled(false, &mut usec) || usec == 0 {
        return None;
    }
    Some((Duration::from_micros(usec) / 2).clamp(MIN_PING_INTERVAL, MAX_PING_INTERVAL))
}

/// Sends `WATCHDOG=1` every `every`, forever, each time once `alive`
/// resolved (a probe of every runtime that serves, so that one wedged event
/// loop stops the pings); run it as a task on the serving runtime.
pub async fn watchdog<F: std::future::Future<Output = ()>>(every: Duration, alive: impl Fn() -> F) {
    info!(every = ?every, "systemd watchdog: pinging");
    loop {
        alive().await;
        if let Err(e) = sd_notify::notify(false, &[sd_notify::NotifyState::Watchdog]) {
            debug!(error = %e, "systemd watchdog: cannot notify");
        }
        tokio::time::sleep(every).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_passed_names_the_socket_and_what_was_passed() {
        let e = SystemdError::NotPassed {
            name: "tls".into(),
            passed: vec!["admin".into()],
        };
        let s = e.to_string();
        assert!(s.contains("\"tls\"") && s.contains("admin"), "{s}");
        let e = SystemdError::NotPassed {
            name: String::new(),
            passed: vec![],
        };
        assert!(e.to_string().contains("no socket"), "{e}");
        let io = io::Error::other(e);
        assert!(SystemdError::is_in(&io));
        assert!(!SystemdError::is_in(&io::Error::other("x")));
    }
}

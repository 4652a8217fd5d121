//! Waiting for events instead of sleeping: the n-th log line, and "the
//! sidecar looked n more times" (its credential poller's DEBUG line per
//! poll) before a test asserts that something did NOT happen, so a check
//! of nothing cannot pass on a machine too slow to have done anything.

use std::time::{Duration, Instant};

use super::{Sidecar, DEADLINE};

/// The poller's DEBUG line, one per poll of a credential source
/// (src/credentials/reload.rs), with `trigger=interval|file|signal`.
pub const POLLED: &str = "polled credentials";

impl Sidecar {
    /// Waits until at least `n` log lines contain `needle`; returns how many
    /// there are then.
    pub async fn wait_log_count(&self, needle: &str, n: usize) -> usize {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let got = self.log_count(needle);
            if got >= n {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "{got} of {n} log lines with {needle:?}:\n{}",
                self.logs().join("\n")
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until the credential poller has polled `more` times after
    /// this call: proof the sidecar looked (run it with a short
    /// `--reload-interval`).
    pub async fn wait_polls(&self, more: usize) {
        let now = self.log_count(POLLED);
        self.wait_log_count(POLLED, now + more).await;
    }
}

/// The accept queue length of the listener on 127.0.0.1:`port`, as the
/// kernel reports it (`/proc/net/tcp`): the connections it completed that
/// the process has not accepted yet.
pub fn accept_backlog(port: u16) -> Option<u32> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let local = format!("0100007F:{port:04X}");
    table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.get(1) == Some(&local.as_str()) && f.get(3) == Some(&"0A") {
            let rx = f.get(4)?.split(':').nth(1)?;
            u32::from_str_radix(rx, 16).ok()
        } else {
            None
        }
    })
}

/// The kernel's state code (`/proc/net/tcp`'s `st`, e.g. `06` TIME_WAIT) of
/// the IPv4 loopback socket 127.0.0.1:`local` - 127.0.0.1:`remote`, if any.
pub fn tcp_state(local: u16, remote: u16) -> Option<String> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let (l, r) = (
        format!("0100007F:{local:04X}"),
        format!("0100007F:{remote:04X}"),
    );
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        (f.get(1) == Some(&l.as_str()) && f.get(2) == Some(&r.as_str()))
            .then(|| f.get(3).map(|s| s.to_string()))
            .flatten()
    })
}

//! The file-descriptor budget. A container under containerd 2.x, or a
//! systemd service without `LimitNOFILE=`, starts with a soft
//! `RLIMIT_NOFILE` of 1024 under a much higher hard limit: at two
//! descriptors per forwarded connection that would cap a sidecar at ~500
//! connections whatever `--max-connections` says. Like Go programs, HAProxy
//! and nginx, the sidecar raises its soft limit to the hard one at start-up
//! and says what the result allows; a limit still too low for the configured
//! maxima is a warning, not a crash (accept errors back off and recover).

use std::io;

use rlimit::Resource;

/// Descriptors kept aside for listeners, the admin endpoint, the file
/// watcher, the runtime and stdio.
pub const RESERVED: u64 = 64;

/// What start-up did to the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdLimit {
    /// The soft limit before.
    pub before: u64,
    /// The soft limit now.
    pub soft: u64,
    /// The hard limit.
    pub hard: u64,
}

impl FdLimit {
    /// Forwarded connections the soft limit allows (two descriptors each).
    pub fn connections(&self) -> u64 {
        self.soft.saturating_sub(RESERVED) / 2
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (or to the kernel's
/// `fs.nr_open` when the hard limit is unlimited).
pub fn raise() -> io::Result<FdLimit> {
    let (before, hard) = Resource::NOFILE.get()?;
    if before >= hard {
        return Ok(FdLimit {
            before,
            soft: before,
            hard,
        });
    }
    let mut soft = hard;
    if Resource::NOFILE.set(soft, hard).is_err() {
        // An unlimited hard limit cannot be the soft one on Linux: the
        // kernel caps descriptors at fs.nr_open.
        soft = nr_open().unwrap_or(before).clamp(before, hard);
        Resource::NOFILE.set(soft, hard)?;
    }
    Ok(FdLimit { before, soft, hard })
}

fn nr_open() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Descriptors the configured maxima can use at once: two per forwarded
/// connection and per pending handshake (a client route holds the local
/// socket and the remote one), plus the reserve.
pub fn needed(routes: impl IntoIterator<Item = (usize, usize)>) -> u64 {
    routes
        .into_iter()
        .map(|(conns, handshakes)| {
            (conns as u64)
                .saturating_add(handshakes as u64)
                .saturating_mul(2)
        })
        .fold(RESERVED, u64::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_leave_the_reserve() {
        let l = FdLimit {
            before: 1024,
            soft: 1024,
            hard: 1024,
        };
        assert_eq!(l.connections(), (1024 - RESERVED) / 2);
        let tiny = FdLimit { soft: 10, ..l };
        assert_eq!(tiny.connections(), 0);
    }

    /// The kernel never lets the hard limit exceed `fs.nr_open`, so what
    /// `nr_open` reads bounds the hard limit this process runs under: a
    /// reader returning nothing, 0 or 1 is caught.
    #[test]
    fn nr_open_reads_the_kernel_bound_of_the_hard_limit() {
        let (_, hard) = Resource::NOFILE.get().expect("getrlimit");
        let read = nr_open().expect("/proc/sys/fs/nr_open");
        assert!(read >= hard, "nr_open {read} < hard limit {hard}");
        assert!(read > 1024, "nr_open {read}");
    }

    #[test]
    fn needed_counts_both_limits_and_saturates() {
        assert_eq!(needed([(4096, 1024)]), RESERVED + 2 * 5120);
        assert_eq!(needed([(usize::MAX, usize::MAX)]), u64::MAX);
        assert_eq!(needed(Vec::<(usize, usize)>::new()), RESERVED);
    }
}

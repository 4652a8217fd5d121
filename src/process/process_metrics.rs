//! The standard Prometheus `process_*` metrics, read from `/proc/self`.
//!
//! Why our own: the five gauges Prometheus' client libraries export are a
//! few fields of `/proc/self/stat` and `/proc/self/limits` away, and the
//! crate that offered them (`metrics-process`, through `procfs` and
//! `rustix`) cost code in every sidecar's resident set and crashed under
//! valgrind at start-up (rustix's auxiliary-vector probe), which is how
//! `scripts/link-order/generate.py` finds the functions a sidecar runs.
//!
//! A value that cannot be read is left unset (the series keeps its last
//! value); reading never fails the caller.

use metrics::{describe_gauge, gauge, Unit};

const RSS: &str = "process_resident_memory_bytes";
const VSIZE: &str = "process_virtual_memory_bytes";
const OPEN_FDS: &str = "process_open_fds";
const MAX_FDS: &str = "process_max_fds";
const CPU: &str = "process_cpu_seconds_total";
const START: &str = "process_start_time_seconds";
const THREADS: &str = "process_threads";

/// Describes the gauges (once, when the recorder is installed).
pub fn describe() {
    describe_gauge!(RSS, Unit::Bytes, "Resident memory size in bytes.");
    describe_gauge!(VSIZE, Unit::Bytes, "Virtual memory size in bytes.");
    describe_gauge!(OPEN_FDS, Unit::Count, "Number of open file descriptors.");
    describe_gauge!(
        MAX_FDS,
        Unit::Count,
        "Maximum number of open file descriptors (the soft limit)."
    );
    describe_gauge!(
        CPU,
        Unit::Seconds,
        "Total user and system CPU time spent in seconds (fractional; a gauge so that it is not truncated)."
    );
    describe_gauge!(
        START,
        Unit::Seconds,
        "Start time of the process since the Unix epoch in seconds."
    );
    describe_gauge!(THREADS, Unit::Count, "Number of OS threads in the process.");
}

/// Reads `/proc/self` and sets every gauge it could read.
pub fn collect() {
    let ticks = clock_ticks();
    if let Some(stat) = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| Stat::parse(&s))
    {
        if let Some(t) = ticks {
            gauge!(CPU).set((stat.utime.saturating_add(stat.stime)) as f64 / t);
            if let Some(boot) = boot_time() {
                gauge!(START).set(boot + stat.starttime as f64 / t);
            }
        }
        gauge!(THREADS).set(stat.threads as f64);
        gauge!(VSIZE).set(stat.vsize as f64);
        gauge!(RSS).set(stat.rss_pages.saturating_mul(page_size()) as f64);
    }
    if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
        // Minus the descriptor read_dir itself holds open.
        gauge!(OPEN_FDS).set(dir.count().saturating_sub(1) as f64);
    }
    if let Some(max) = soft_nofile() {
        gauge!(MAX_FDS).set(max as f64);
    }
}

/// The fields of `/proc/self/stat` the gauges need.
#[derive(Debug, PartialEq)]
struct Stat {
    utime: u64,
    stime: u64,
    threads: u64,
    starttime: u64,
    vsize: u64,
    rss_pages: u64,
}

impl Stat {
    /// Fields are counted after the command name's closing parenthesis (the
    /// name itself may hold spaces and parentheses): state is field 3, so
    /// utime (14) is the 12th after it.
    fn parse(s: &str) -> Option<Stat> {
        let (_, rest) = s.rsplit_once(')')?;
        let f: Vec<&str> = rest.split_whitespace().collect();
        let n = |field: usize| -> Option<u64> { f.get(field.checked_sub(3)?)?.parse().ok() };
        Some(Stat {
            utime: n(14)?,
            stime: n(15)?,
            threads: n(20)?,
            starttime: n(22)?,
            vsize: n(23)?,
            rss_pages: n(24)?,
        })
    }
}

fn clock_ticks() -> Option<f64> {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (t > 0).then_some(t as f64)
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(p).ok().filter(|p| *p > 0).unwrap_or(4096)
}

/// Boot time (Unix seconds): the `btime` line of `/proc/stat`, or where
/// that file is hidden (systemd's `ProcSubset=pid`, in the shipped unit,
/// leaves only the process directories in `/proc`) the wall clock minus the
/// time since boot, [`boot_time_from_clocks`].
fn boot_time() -> Option<f64> {
    proc_stat_btime()
        .map(|b| b as f64)
        .or_else(boot_time_from_clocks)
}

/// The `btime` line of `/proc/stat`.
fn proc_stat_btime() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// `CLOCK_REALTIME - CLOCK_BOOTTIME`: what the kernel computes `btime`
/// from. `CLOCK_BOOTTIME` counts suspended time too, as the process
/// `starttime` does.
fn boot_time_from_clocks() -> Option<f64> {
    Some(clock_secs(libc::CLOCK_REALTIME)? - clock_secs(libc::CLOCK_BOOTTIME)?)
}

fn clock_secs(clock: libc::clockid_t) -> Option<f64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the struct we own.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    (rc == 0).then(|| ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9)
}

fn soft_nofile() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    (rc == 0).then_some(lim.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_stat_line_whose_command_has_spaces_and_parentheses() {
        let line = "4242 (mtls (side) car) S 1 4242 4242 0 -1 4194560 1200 0 0 0 \
                    150 37 0 0 20 0 3 0 98765 123456789 2048 18446744073709551615";
        assert_eq!(
            Stat::parse(line),
            Some(Stat {
                utime: 150,
                stime: 37,
                threads: 3,
                starttime: 98765,
                vsize: 123456789,
                rss_pages: 2048,
            })
        );
    }

    #[test]
    fn a_truncated_or_garbled_stat_line_is_none() {
        assert_eq!(Stat::parse("4242 (x) S 1 2 3"), None);
        assert_eq!(Stat::parse("no parenthesis at all"), None);
        assert_eq!(
            Stat::parse("1 (x) S 1 1 1 0 -1 0 0 0 0 0 abc 1 0 0 20 0 1 0 1 1 1"),
            None
        );
    }

    #[test]
    fn reads_this_process() {
        let s = Stat::parse(&std::fs::read_to_string("/proc/self/stat").unwrap()).unwrap();
        assert!(s.threads >= 1 && s.rss_pages > 0 && s.vsize > 0);
        assert!(boot_time().is_some_and(|b| b > 1_500_000_000.0));
        assert!(clock_ticks().is_some());
        assert!(soft_nofile().is_some_and(|n| n > 0));
    }

    #[test]
    fn boot_time_from_the_clocks_agrees_with_proc_stat() {
        let (Some(btime), Some(clocks)) = (proc_stat_btime(), boot_time_from_clocks()) else {
            panic!("no /proc/stat btime or no clocks");
        };
        // btime is whole seconds, truncated.
        assert!(
            (clocks - btime as f64).abs() < 2.0,
            "clocks {clocks} vs btime {btime}"
        );
    }
}

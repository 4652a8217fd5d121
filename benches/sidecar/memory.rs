//! Memory and CPU measurement: resident set and CPU time of a system's
//! process tree.

use std::collections::HashMap;

/// Resident set of `pids` and all their descendants, KiB.
pub fn rss_kib(pids: &[u32]) -> u64 {
    tree(pids).into_iter().map(vm_rss).sum()
}

/// CPU time (user + system) of `pids` and all their descendants, in clock
/// ticks (`CLK_TCK`, 100 per second on Linux), every thread included, and
/// the children they have reaped (a forking peer's finished processes).
/// `None` when none of those processes exists.
pub fn cpu_ticks(pids: &[u32]) -> Option<u64> {
    let procs = tree(pids);
    if procs.is_empty() {
        return None;
    }
    Some(procs.into_iter().map(ticks).sum())
}

/// Seconds per clock tick of `/proc/PID/stat`.
pub fn tick_secs() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        1.0 / hz as f64
    } else {
        0.01
    }
}

fn ticks(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1.to_string();
            // After the name: state is field 3; utime, stime, cutime and
            // cstime are fields 14-17.
            let f: Vec<&str> = rest.split_whitespace().collect();
            let field = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
            Some(field(11)? + field(12)? + field(13)? + field(14)?)
        })
        .unwrap_or(0)
}

/// `pids` and every process descending from them.
fn tree(pids: &[u32]) -> Vec<u32> {
    let mut parent: HashMap<u32, u32> = HashMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
                if let Some(ppid) = stat
                    .rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                    .and_then(|p| p.parse().ok())
                {
                    parent.insert(pid, ppid);
                }
            }
        }
    }
    let in_tree = |mut p: u32| loop {
        if pids.contains(&p) {
            return true;
        }
        match parent.get(&p) {
            Some(&pp) if pp != 0 && pp != p => p = pp,
            _ => return false,
        }
    };
    parent.keys().copied().filter(|&p| in_tree(p)).collect()
}

pub fn vm_rss(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

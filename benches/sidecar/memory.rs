//! Memory measurement: resident set of a system's process tree.

use std::collections::HashMap;

/// Resident set of `pids` and all their descendants, KiB.
pub fn rss_kib(pids: &[u32]) -> u64 {
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
    parent
        .keys()
        .filter(|&&p| in_tree(p))
        .map(|p| vm_rss(*p))
        .sum()
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

//! The `scale` scenario: a pair started with a container's low soft fd
//! limit carries many concurrent connections (the sidecar must raise its
//! own limit), what each idle one costs in RSS, and whether descriptors and
//! memory come back once they close.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::harness::{fds, mb, wait_for, Pair};
use crate::memory::vm_rss;
use crate::scenarios::open_idle;
use crate::sidecar_process::{Sidecar, Spawn};

/// The soft descriptor limit of the scale scenario.
const SOFT_NOFILE: u64 = 1024;

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct ScaleFigures {
    pub connections: usize,
    /// The soft limit each sidecar found at start (client, server).
    pub soft_nofile_at_start: [String; 2],
    pub open_secs: f64,
    pub fds_before: [usize; 2],
    pub fds_open: [usize; 2],
    pub fds_after: [usize; 2],
    pub fds_back_secs: f64,
    pub rss_before_kib: [u64; 2],
    pub rss_open_kib: [u64; 2],
    pub rss_after_kib: [u64; 2],
    /// (RSS open − RSS before) / connections, both sidecars.
    pub kib_per_conn: f64,
}

pub fn scale(n: usize, env: &[(String, String)]) -> ScaleFigures {
    eprintln!("# scale: {n} connections through a pair started with soft fd limit {SOFT_NOFILE}");
    let spawn = Spawn {
        soft_nofile: Some(SOFT_NOFILE),
        quiet: false,
        env: env.to_vec(),
    };
    let pair = Pair::start(&[], &spawn);
    let (client, server) = (&pair.client, &pair.server);
    let pids = [client.pid(), server.pid()];
    let was = |s: &Sidecar| {
        s.line("file descriptor limit")
            .and_then(|l| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix("was=").map(str::to_string))
            })
            .unwrap_or_else(|| "?".into())
    };
    let mut f = ScaleFigures {
        connections: n,
        soft_nofile_at_start: [was(client), was(server)],
        fds_before: pids.map(fds),
        rss_before_kib: pids.map(vm_rss),
        ..ScaleFigures::default()
    };
    let t = Instant::now();
    let conns = open_idle(pair.via(), n);
    f.open_secs = t.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(500));
    f.fds_open = pids.map(fds);
    f.rss_open_kib = pids.map(vm_rss);
    let sum = |a: [u64; 2]| a[0] + a[1];
    f.kib_per_conn = sum(f.rss_open_kib).saturating_sub(sum(f.rss_before_kib)) as f64 / n as f64;
    eprintln!(
        "#   {n} connections open in {:.1}s; fds {:?} -> {:?}; RSS {:?} -> {:?} KiB: {:.1} KiB per connection (both sidecars)",
        f.open_secs, f.fds_before, f.fds_open, f.rss_before_kib, f.rss_open_kib, f.kib_per_conn
    );
    drop(conns);
    let before = f.fds_before;
    f.fds_back_secs = wait_for(Duration::from_secs(60), || {
        fds(pids[0]) <= before[0] && fds(pids[1]) <= before[1]
    })
    .map_or(f64::NAN, |d| d.as_secs_f64());
    f.fds_after = pids.map(fds);
    // Long enough for a trim (checked every second, at most every 5 s).
    std::thread::sleep(Duration::from_secs(7));
    f.rss_after_kib = pids.map(vm_rss);
    eprintln!(
        "#   closed: fds {:?} after {:.1}s; RSS {:?} KiB 7 s later",
        f.fds_after, f.fds_back_secs, f.rss_after_kib
    );
    f
}

/// The scenario's line of the table.
pub fn print(s: &ScaleFigures) {
    println!(
        "scale: {} connections through a pair started with soft fd limit {} (client, server): opened in {:.1} s; \
         {:.1} KiB RSS per idle connection (both sidecars); fds {:?} -> {:?} -> {:?} ({:.1} s after close); \
         RSS {:.1}/{:.1} -> {:.1}/{:.1} -> {:.1}/{:.1} MB",
        s.connections,
        s.soft_nofile_at_start.join("/"),
        s.open_secs,
        s.kib_per_conn,
        s.fds_before,
        s.fds_open,
        s.fds_after,
        s.fds_back_secs,
        mb(s.rss_before_kib[0]),
        mb(s.rss_before_kib[1]),
        mb(s.rss_open_kib[0]),
        mb(s.rss_open_kib[1]),
        mb(s.rss_after_kib[0]),
        mb(s.rss_after_kib[1]),
    );
}

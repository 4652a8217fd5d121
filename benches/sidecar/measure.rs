//! One system's run: every selected scenario through the system and direct.

use std::net::SocketAddr;
use std::time::Duration;

use crate::memory::{cpu_ticks, rss_kib, tick_secs};
use crate::options::{Opts, Scale, RT_CONNS};
use crate::results::{Fig, Row};
use crate::rotation::{rotation, Rotator};
use crate::scenarios::{bulk, echo, newconns, one_roundtrip, open_idle, pingpong, roundtrips};
use crate::target::Target;

/// A system under test: where the generator connects, where the target
/// must listen, and which processes make it up.
pub struct System {
    pub name: String,
    pub listen: SocketAddr,
    /// The processes of the pair: their CPU time is counted per unit of
    /// work, and their RSS (when `memory`) is the memory figure.
    pub pids: Vec<u32>,
    /// Whether the memory scenario measures `pids` (not for processes
    /// whose RSS is another program's: the `plain-rust` forwarders are
    /// this load generator re-run).
    pub memory: bool,
    pub idle: usize,
    /// Where the same system with session resumption on listens, for the
    /// `resumed` scenario (none: not measured).
    pub resuming: Option<SocketAddr>,
    /// The processes of that resuming system (empty: no CPU figure).
    pub resuming_pids: Vec<u32>,
}

pub fn measure(
    opts: &Opts,
    scale: &Scale,
    sys: &System,
    target: &Target,
    rotate: Option<&Rotator>,
) -> Row {
    let direct = target.addr;
    let via = sys.listen;
    let mut row = Row {
        system: sys.name.clone(),
        quick: opts.quick,
        ..Row::default()
    };
    let say = |what: &str| eprintln!("# {}: {what}", sys.name);

    // Memory first, before the heavy scenarios grow any heap.
    if opts.wants("memory") && sys.memory && !sys.pids.is_empty() {
        for _ in 0..5 {
            one_roundtrip(via).expect("warm-up round trip");
        }
        std::thread::sleep(Duration::from_millis(300));
        let base = rss_kib(&sys.pids);
        row.baseline_mb = Some(base as f64 / 1024.0);
        say(&format!("baseline RSS {:.1} MB", base as f64 / 1024.0));
        if sys.idle > 0 {
            let before = rss_kib(&sys.pids);
            let conns = open_idle(via, sys.idle);
            std::thread::sleep(Duration::from_millis(500));
            let after = rss_kib(&sys.pids);
            let per = after.saturating_sub(before) as f64 / sys.idle as f64;
            row.idle_kib = Some(per);
            say(&format!(
                "{} idle connections: RSS {before} → {after} KiB, {per:.1} KiB each",
                conns.len()
            ));
            drop(conns);
            std::thread::sleep(Duration::from_millis(1000));
        }
    }
    if opts.wants("bulk") {
        let gib = scale.bulk_bytes as f64 / (1u64 << 30) as f64;
        let (f, cpu) = best_of_cpu(
            scale.rounds,
            &sys.pids,
            || bulk(direct, scale.bulk_bytes),
            || bulk(via, scale.bulk_bytes),
            |_| gib,
        );
        row.cpu.bulk_s_per_gib = cpu;
        say(&format!("bulk {:.0} MB/s (direct {:.0})", f.sys, f.direct));
        row.bulk = Some(f);
    }
    if opts.wants("echo") {
        let gib = scale.echo_bytes as f64 / (1u64 << 30) as f64;
        let (f, cpu) = best_of_cpu(
            scale.rounds,
            &sys.pids,
            || echo(direct, scale.echo_bytes),
            || echo(via, scale.echo_bytes),
            |_| gib,
        );
        row.cpu.echo_s_per_gib = cpu;
        say(&format!(
            "echo {:.0} MB/s each way (direct {:.0})",
            f.sys, f.direct
        ));
        row.echo = Some(f);
    }
    if opts.wants("latency") {
        let (d, s) = pingpong(direct, via, scale.pings);
        let fig = |q: f64| Fig {
            sys: percentile(&s, q),
            direct: percentile(&d, q),
        };
        row.p50 = Some(fig(0.50));
        row.p99 = Some(fig(0.99));
        row.p999 = Some(fig(0.999));
        say(&format!(
            "ping-pong p50 {:.1} p99 {:.1} p99.9 {:.1} µs (direct {:.1} {:.1} {:.1})",
            fig(0.5).sys,
            fig(0.99).sys,
            fig(0.999).sys,
            fig(0.5).direct,
            fig(0.99).direct,
            fig(0.999).direct
        ));
    }
    if opts.wants("rt16") {
        let secs = scale.rt_time.as_secs_f64();
        let (f, cpu) = best_of_cpu(
            scale.rounds,
            &sys.pids,
            || roundtrips(direct, RT_CONNS, scale.rt_time),
            || roundtrips(via, RT_CONNS, scale.rt_time),
            |rate| rate * secs / 1e6,
        );
        row.cpu.rt16_us = cpu;
        say(&format!(
            "{RT_CONNS} connections: {:.0} round trips/s (direct {:.0})",
            f.sys, f.direct
        ));
        row.rt16 = Some(f);
    }
    if opts.wants("newconn") {
        let secs = scale.newconn_time.as_secs_f64();
        let (f, cpu) = best_of_cpu(
            scale.rounds,
            &sys.pids,
            || newconns(direct, scale.newconn_time),
            || newconns(via, scale.newconn_time),
            |rate| rate * secs / 1e6,
        );
        row.cpu.newconn_us = cpu;
        say(&format!(
            "{:.0} new connections/s (direct {:.0})",
            f.sys, f.direct
        ));
        row.newconn = Some(f);
    }
    if let (true, Some(resuming)) = (opts.wants("resumed"), sys.resuming) {
        let secs = scale.newconn_time.as_secs_f64();
        let (f, cpu) = best_of_cpu(
            scale.rounds,
            &sys.resuming_pids,
            || newconns(direct, scale.newconn_time),
            || newconns(resuming, scale.newconn_time),
            |rate| rate * secs / 1e6,
        );
        row.cpu.resumed_us = cpu;
        say(&format!(
            "{:.0} new connections/s with resumption (direct {:.0})",
            f.sys, f.direct
        ));
        row.newconn_resumed = Some(f);
    }
    if let (true, Some(rot)) = (opts.wants("rotation"), rotate) {
        let (n, ok, failed) = rotation(via, scale, rot);
        say(&format!(
            "{n} rotations applied under load: {ok} requests ok, {failed} failed"
        ));
        row.rotations = Some(n as u64);
        row.rotation_requests = Some(ok);
        row.rotation_failed = Some(failed);
    }
    row
}

/// Best (highest) of `rounds` alternating measurements direct and through
/// the system (other tenants of the machine only ever slow a run down),
/// also measuring the CPU time of `pids` (and descendants)
/// during each run through the system: CPU seconds per unit of work, where
/// `units(figure)` is the work one run did (GiB moved; or millions of round
/// trips or connections, so the result reads in µs: the rate times the
/// scenario's nominal duration), taken from the round whose figure is
/// kept. `None` without pids.
pub fn best_of_cpu(
    rounds: usize,
    pids: &[u32],
    direct: impl Fn() -> f64,
    sys: impl Fn() -> f64,
    units: impl Fn(f64) -> f64,
) -> (Fig, Option<f64>) {
    let mut f = Fig {
        sys: 0.0,
        direct: 0.0,
    };
    let mut cpu = None;
    for _ in 0..rounds {
        f.direct = f.direct.max(direct());
        let before = cpu_ticks(pids);
        let v = sys();
        let after = cpu_ticks(pids);
        if v > f.sys {
            f.sys = v;
            let work = units(v);
            // No figure when the processes are gone (or were never there)
            // or the count went backwards (one of them exited).
            cpu = match (before, after) {
                (Some(b), Some(a)) if a >= b && work > 0.0 => {
                    Some((a - b) as f64 * tick_secs() / work)
                }
                _ => None,
            };
        }
    }
    (f, cpu)
}

pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

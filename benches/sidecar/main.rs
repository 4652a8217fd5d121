//! Load generator and benchmark scenarios for a TLS proxy pair.
//!
//! Default mode spawns the real release binary as a client sidecar → server
//! sidecar pair (TLS 1.3, ECDSA P-256, full mTLS with SAN checks) in front of
//! a plaintext target that lives in this process, and measures every
//! scenario through the pair and directly against the target in the same
//! run. `--system plain-rust` measures a plaintext forwarder pair instead
//! (this executable re-run twice with `--plain-forward`: the ceiling of a
//! user-space forwarder without crypto; their CPU time is counted, not
//! their memory). `--external` measures any other
//! pair (stunnel, HAProxy, nginx, socat: see `peers.sh`) with the same
//! generator.
//!
//! ```text
//! cargo bench --bench sidecar                         # full run (a few minutes)
//! BENCH_QUICK=1 cargo bench --bench sidecar           # smoke run (< 1 minute)
//! cargo bench --bench sidecar -- --only bulk,latency  # some scenarios
//! cargo bench --bench sidecar -- --system plain-rust  # the plaintext Rust forwarder pair
//! cargo bench --bench sidecar -- --external name=haproxy,listen=127.0.0.1:7001,target=127.0.0.1:7003,pids=11,12 --out rows.jsonl
//! cargo bench --bench sidecar -- --table rows.jsonl   # one table of saved rows
//! ```
//!
//! Environment: `BENCH_QUICK=1` (small sizes), `MTLS_SIDECAR_BIN` (binary to
//! run), `BENCH_WRAP` (a command prefix for the sidecars, e.g.
//! `valgrind --tool=callgrind`), `BENCH_SIDECAR_ARGS` (extra flags for both),
//! `BENCH_VERBOSE=1` (echo the sidecars' logs), `BENCH_ONLY=a,b` (as
//! `--only`); `BENCH_ONLY=hostile` (or `scale`, `flood`, `churn`, `preauth`) runs the
//! hostile-load scenarios instead (`hostile/`; `BENCH_TRIM=off`,
//! `BENCH_SCALE_CONNS`, `BENCH_FLOOD_SOCKETS`, `BENCH_PREAUTH_PEERS`, `BENCH_CHURN`); size overrides
//! `BENCH_BULK_MB`, `BENCH_PINGS`, `BENCH_IDLE`, `BENCH_SECS_MS`,
//! `BENCH_RELOAD_INTERVAL` (the server's `--reload-interval`); `BENCH_ONLY=http`
//! measures HTTP requests/s with `--http-identity` instead (`http_rps`).
//!
//! Layers, lowest first; a module imports only from layers below its own:
//! `options`, `results`, `memory`, `sidecar_process`, `plain_forward` →
//! `target`, `scenarios` → `rotation` → `measure` → `systems`, `hostile`, `http_rps`,
//! `table` → `main`.

mod hostile;
mod http_rps;
mod measure;
mod memory;
mod options;
mod plain_forward;
mod results;
mod rotation;
mod scenarios;
mod sidecar_process;
mod systems;
mod table;
mod target;

use std::io::Write;
use std::time::{Duration, Instant};

use options::{usage, Opts, Scale};
use results::Row;
use systems::{run_external, run_plain_rust, run_sidecar};
use table::{print_table, print_targets};

fn main() {
    // `cargo bench` passes --bench; `cargo test --all-targets` runs bench
    // targets with no arguments: do nothing there rather than a long run.
    if std::env::args().len() == 1 {
        eprintln!("benchmarks run with `cargo bench --bench sidecar` (see benches/README.md)");
        return;
    }
    if let Some((listen, target)) = plain_forward::args() {
        raise_nofile();
        plain_forward::serve(&listen, &target);
    }
    let opts = Opts::parse();
    if let Some(file) = &opts.table {
        let text = std::fs::read_to_string(file)
            .unwrap_or_else(|e| usage(&format!("{}: {e}", file.display())));
        let rows: Vec<Row> = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            // Hostile-load rows have their own shape (hostile/mod.rs).
            .filter(|l| !l.contains("\"hostile\":true"))
            .map(|l| serde_json::from_str(l).expect("a results row"))
            .collect();
        print_table(&rows);
        print_targets(&rows);
        return;
    }
    raise_nofile();
    if hostile::requested(&opts) {
        let started = Instant::now();
        let row = hostile::run(&opts);
        eprintln!("# done in {:.1}s", started.elapsed().as_secs_f64());
        if let Some(out) = &opts.out {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(out)
                .expect("open --out file");
            writeln!(f, "{}", serde_json::to_string(&row).unwrap()).expect("write row");
        }
        return;
    }
    let mut scale = if opts.quick {
        Scale::quick()
    } else {
        Scale::full()
    };
    // Size overrides, for profiling runs under valgrind.
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    if let Some(mb) = env("BENCH_BULK_MB") {
        scale.bulk_bytes = mb << 20;
        scale.echo_bytes = mb << 20;
    }
    if let Ok(v) = std::env::var("BENCH_RELOAD_INTERVAL") {
        scale.reload_interval = Box::leak(v.into_boxed_str());
    }
    if let Some(n) = env("BENCH_PINGS") {
        scale.pings = n as usize;
    }
    if let Some(n) = env("BENCH_IDLE") {
        scale.idle = n as usize;
    }
    if let Some(ms) = env("BENCH_SECS_MS") {
        scale.rt_time = Duration::from_millis(ms);
        scale.newconn_time = Duration::from_millis(ms);
    }
    if http_rps::requested(&opts) {
        http_rps::run(&opts, &scale);
        return;
    }
    let started = Instant::now();
    let row = match (&opts.external, opts.system.as_str()) {
        (Some(kv), _) => run_external(&opts, &scale, kv),
        (None, "plain-rust") => run_plain_rust(&opts, &scale),
        (None, _) => run_sidecar(&opts, &scale),
    };
    eprintln!("# done in {:.1}s", started.elapsed().as_secs_f64());
    if let Some(out) = &opts.out {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(out)
            .expect("open --out file");
        writeln!(f, "{}", serde_json::to_string(&row).unwrap()).expect("write row");
    }
    print_table(std::slice::from_ref(&row));
}

fn raise_nofile() {
    // SAFETY: plain libc calls on a local struct.
    unsafe {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

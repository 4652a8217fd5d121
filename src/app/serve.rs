//! Running the proxy as a process: the runtime model (one multi-thread
//! runtime, or one current-thread runtime per core: `per_core`), the
//! worker count, the file-descriptor limit, the signals and the drain
//! around [`super::prepare`] and [`super::start`]. `main.rs` only
//! dispatches the command line here or to the tools.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tracing::{error, info, warn};

use crate::config::{RuntimeModel, Settings};
use crate::identity::SanPolicy;
use crate::proxy::route::runtimes::Runtimes;
use crate::sandbox;

fn usage_error(e: &dyn std::fmt::Display) -> u8 {
    eprintln!("error: {e}");
    2
}

/// The most runtimes (or worker threads) a sidecar starts unless told
/// otherwise: a sidecar carries one port's traffic, which two cores
/// saturate on the benches' box (`benches/README.md`); on a large node with
/// no CPU limit, one thread per node CPU would only add idle reactors,
/// their memory, and loops that all wake for every new connection.
const DEFAULT_MAX_WORKERS: usize = 4;

/// The runtime's worker threads: `configured`, or one per CPU the process
/// may use (cgroup quota included), at most [`DEFAULT_MAX_WORKERS`].
/// Decided before the sandbox, which would hide the cgroup files this reads.
pub fn worker_count(configured: Option<usize>) -> usize {
    configured.unwrap_or_else(|| {
        default_workers(std::thread::available_parallelism().map(|n| n.get()).ok())
    })
}

/// [`worker_count`]'s default for `cpus` usable CPUs (unknown: one).
fn default_workers(cpus: Option<usize>) -> usize {
    cpus.unwrap_or(1).clamp(1, DEFAULT_MAX_WORKERS)
}

/// Builds the runtime (`workers` threads, or one per CPU the process may
/// use) and runs `f` on it.
pub fn with_runtime(workers: Option<usize>, f: impl FnOnce(&tokio::runtime::Runtime) -> u8) -> u8 {
    match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(worker_count(workers))
        .enable_all()
        .build()
    {
        Ok(rt) => f(&rt),
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            1
        }
    }
}

/// Prepares everything on the main thread (credentials, TLS configs, bound
/// listeners), applies the sandbox to it, then builds the runtime, whose
/// threads inherit the sandbox, and serves. `config_file` is the file the
/// settings came from, if any.
pub fn serve(
    settings: Result<Settings, crate::config::ConfigError>,
    config_file: Option<&Path>,
) -> u8 {
    let settings = match settings {
        Ok(s) => s,
        Err(e) => return usage_error(&e),
    };
    // --mark needs a capability: find out now, not on the first connection.
    for mark in settings.routes.iter().filter_map(|r| r.mark) {
        if let Err(e) = crate::proxy::mark::probe_mark(mark) {
            return usage_error(&e);
        }
    }
    // So does --tproxy (IP_TRANSPARENT on the listener).
    if settings.routes.iter().any(|r| r.tproxy) {
        if let Err(e) = crate::proxy::transparent::probe_tproxy() {
            return usage_error(&e);
        }
    }
    let workers = worker_count(settings.worker_threads);
    raise_fd_limit(&settings);
    for r in &settings.routes {
        if r.peer_sans == SanPolicy::Any {
            warn!(route = %r.name, "--allow-any-san: ANY certificate from the trusted CA is accepted; role pinning is off");
        }
    }
    // aws-lc seeds its random generator from CPU jitter on first use (~0.1 s
    // of CPU, ~90 ms of wall time here): pay it before listening rather
    // than inside the first peer's handshake.
    let _ = aws_lc_rs::rand::fill(&mut [0u8; 16]);
    let mode = settings.sandbox;
    let model = settings.runtime;
    let prepared = match super::prepare(settings) {
        Ok(p) => p,
        Err(e) => {
            error!("{e}");
            return e.exit_code();
        }
    };
    let plan = prepared.sandbox_plan(config_file);
    sandbox::warm_up_resolver(&plan);
    if let Err(e) = sandbox::apply(&plan, mode) {
        error!("{e}");
        return 1;
    }
    match model {
        RuntimeModel::Multi => with_runtime(Some(workers), |rt| {
            rt.block_on(run(prepared, vec![rt.handle().clone()]))
        }),
        RuntimeModel::PerCore => per_core(workers, prepared),
    }
}

/// `--runtime per-core`: `n` single-threaded runtimes, the first on this
/// thread (the control tasks and its share of the connections), each other
/// on a thread of its own, created after the sandbox and so inheriting it.
/// Every route accepts on all of them (see `proxy::route::runtimes`).
fn per_core(n: usize, prepared: super::Prepared) -> u8 {
    let build = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    };
    let cannot = |e: &dyn std::fmt::Display| {
        eprintln!("error: cannot start the async runtime: {e}");
        1
    };
    let first = match build() {
        Ok(rt) => rt,
        Err(e) => return cannot(&e),
    };
    // Dropping `done` (an early return included) ends the other threads.
    let (done, _) = tokio::sync::watch::channel(false);
    let (ended_tx, ended) = std::sync::mpsc::channel::<()>();
    let fault = runtime_fault();
    let mut handles = vec![first.handle().clone()];
    for i in 1..n {
        let rt = match build() {
            Ok(rt) => rt,
            Err(e) => return cannot(&e),
        };
        handles.push(rt.handle().clone());
        let mut until = done.subscribe();
        let ended_tx = ended_tx.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("mtls-sidecar-{i}"))
            .spawn(move || {
                if fault == Some(i) {
                    panic!("test fault: runtime {i} ends");
                }
                rt.block_on(async move {
                    let _ = until.wait_for(|d| *d).await;
                });
                drop(rt);
                let _ = ended_tx.send(());
            });
        if let Err(e) = spawned {
            return cannot(&e);
        }
    }
    drop(ended_tx);
    let code = first.block_on(run(prepared, handles));
    done.send_replace(true);
    // The drain is over: give the other runtimes a moment to wind down,
    // but never hang the exit on one that does not.
    let until = std::time::Instant::now() + Duration::from_secs(2);
    for _ in 1..n {
        let left = until.saturating_duration_since(std::time::Instant::now());
        if ended.recv_timeout(left).is_err() {
            break;
        }
    }
    code
}

/// `MTLS_SIDECAR_TEST_FAULT=runtime-exit:I`: runtime thread `I` panics as
/// it starts, for the test that a lost runtime ends the process. Like the
/// route fault (`proxy::route`), only the process's own environment sets
/// it; never set it in production.
fn runtime_fault() -> Option<usize> {
    let spec = std::env::var("MTLS_SIDECAR_TEST_FAULT").ok()?;
    spec.strip_prefix("runtime-exit:")?.parse().ok()
}

/// Serves `prepared` with an accept loop of every route on each of
/// `runtimes` (the first being the current one, which runs the control
/// tasks) until a signal or a failed route drains it. A runtime that dies
/// fails every route (each has an accept loop there, and its end is the
/// route's failure), so a lost runtime drains the rest and exits 1 too.
async fn run(prepared: super::Prepared, runtimes: Vec<tokio::runtime::Handle>) -> u8 {
    let runtimes = Runtimes::new(runtimes);
    // The handlers go in before any route says "listening": a SIGTERM
    // that arrives after that line must drain, not kill (the default
    // action) a process whose handlers were not installed yet.
    let signals = match Signals::install() {
        Ok(s) => s,
        Err(e) => {
            error!(error = %e, "cannot install signal handlers");
            return 1;
        }
    };
    let running = match prepared.start_on(runtimes.clone()) {
        Ok(r) => r,
        Err(e) => {
            error!("{e}");
            return e.exit_code();
        }
    };
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);
    // Every runtime has started its thread and polled its accept loops
    // before the start-up code goes: a runtime thread still starting when
    // it went faulted that code back in, 64 KiB around each page (up to
    // ten blocks, 0.6 MiB, in one run and none in the next).
    let _ = tokio::time::timeout(Duration::from_secs(1), all_alive(runtimes.clone())).await;
    let released = crate::process::resident::release_startup_pages();
    tracing::debug!(
        segments = released.segments,
        bytes = released.bytes,
        "start-up code and read-only data released from the resident set"
    );
    if let Some(every) = crate::process::systemd::watchdog_interval() {
        let probed = runtimes.clone();
        tokio::spawn(crate::process::systemd::watchdog(every, move || {
            all_alive(probed.clone())
        }));
    }
    let code = tokio::select! {
        () = signals.wait_for_shutdown(&running) => 0,
        why = running.failure() => {
            error!("{why}; draining the other routes and exiting 1 so the orchestrator restarts the process");
            1
        }
    };
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
    running.drain().await;
    code
}

/// Resolves once every runtime has run a task: the watchdog's probe. A
/// runtime that has shut down cancels the task: never resolves, so the
/// watchdog stops petting and systemd restarts the process.
async fn all_alive(runtimes: Arc<Runtimes>) {
    for h in runtimes.handles() {
        if h.spawn(async {}).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Raises the soft descriptor limit to the hard one and says what it allows.
fn raise_fd_limit(settings: &Settings) {
    use crate::process::fdlimit;
    let needed = fdlimit::needed(
        settings
            .routes
            .iter()
            .map(|r| (r.max_connections, r.max_handshakes)),
    );
    match fdlimit::raise() {
        Ok(l) => {
            info!(
                soft = l.soft,
                hard = l.hard,
                was = l.before,
                connections = l.connections(),
                "file descriptor limit: room for this many forwarded connections"
            );
            if l.soft < needed {
                warn!(
                    limit = l.soft,
                    needed,
                    "the file descriptor limit is below what --max-connections and \
                     --max-handshakes allow; raise LimitNOFILE (systemd) or the \
                     container's nofile ulimit, or lower the maxima"
                );
            }
        }
        Err(e) => warn!(error = %e, "cannot read or raise the file descriptor limit"),
    }
}

/// The signals the process answers: SIGTERM and SIGINT drain, SIGHUP polls
/// the credentials at once.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// Waits for SIGTERM or SIGINT; SIGHUP polls the credentials at once.
    async fn wait_for_shutdown(mut self, running: &super::Running) {
        loop {
            tokio::select! {
                _ = self.term.recv() => { info!("SIGTERM received"); return }
                _ = self.int.recv() => { info!("SIGINT received"); return }
                _ = self.hup.recv() => { info!("SIGHUP received: polling credentials"); running.reload_now() }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_one_worker_per_cpu_up_to_the_cap() {
        assert_eq!(default_workers(None), 1);
        assert_eq!(default_workers(Some(0)), 1);
        assert_eq!(default_workers(Some(1)), 1);
        assert_eq!(default_workers(Some(2)), 2);
        assert_eq!(
            default_workers(Some(DEFAULT_MAX_WORKERS)),
            DEFAULT_MAX_WORKERS
        );
        assert_eq!(default_workers(Some(64)), DEFAULT_MAX_WORKERS);
        assert_eq!(worker_count(Some(9)), 9);
    }
}

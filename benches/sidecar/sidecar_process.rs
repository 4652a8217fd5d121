//! Spawning the real `mtls-sidecar` binary: finding it, starting it (under
//! `BENCH_WRAP` if set), collecting its log and stopping it.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The SAN of the client sidecar's leaf, which the server allows.
pub const CONTROLLER: &str = "controller.bench.svc";
/// The SAN of the server sidecar's leaf, which the client expects.
pub const REPLICA: &str = "replica-0.bench.svc";

pub fn sidecar_bin() -> PathBuf {
    if let Ok(p) = std::env::var("MTLS_SIDECAR_BIN") {
        return p.into();
    }
    if let Some(p) = option_env!("CARGO_BIN_EXE_mtls-sidecar") {
        if Path::new(p).exists() {
            return p.into();
        }
    }
    // target/release/deps/sidecar-HASH → target/release/mtls-sidecar
    let exe = std::env::current_exe().expect("current exe");
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("mtls-sidecar"))
        .expect("target dir");
    if !bin.exists() {
        eprintln!("# building the release binary");
        let ok = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["build", "--release", "--bin", "mtls-sidecar"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok && bin.exists(), "cannot build {}", bin.display());
    }
    bin
}

/// One spawned sidecar, its stderr collected.
pub struct Sidecar {
    pub child: Child,
    pub logs: Arc<Mutex<Vec<String>>>,
    pub listen: SocketAddr,
}

/// How to start a sidecar beyond its arguments.
#[derive(Debug, Default, Clone)]
pub struct Spawn {
    /// Start it with this soft `RLIMIT_NOFILE` under a hard limit of at
    /// least [`HARD_NOFILE`] (or this process's own when it may not raise
    /// it): what a container under containerd 2.x gets.
    pub soft_nofile: Option<u64>,
    /// Do not echo its WARN lines (a flood makes thousands).
    pub quiet: bool,
    /// Extra environment.
    pub env: Vec<(String, String)>,
}

/// The hard descriptor limit a low-soft-limit sidecar gets.
pub const HARD_NOFILE: u64 = 20_000;

impl Sidecar {
    pub fn start(bin: &Path, args: &[&str]) -> Sidecar {
        Sidecar::start_with(bin, args, &Spawn::default())
    }

    pub fn start_with(bin: &Path, args: &[&str], spawn: &Spawn) -> Sidecar {
        let wrap = std::env::var("BENCH_WRAP").unwrap_or_default();
        let extra = std::env::var("BENCH_SIDECAR_ARGS").unwrap_or_default();
        let mut argv: Vec<String> = wrap.split_whitespace().map(str::to_string).collect();
        argv.push(bin.to_string_lossy().into_owned());
        argv.extend(args.iter().map(|a| a.to_string()));
        argv.extend(extra.split_whitespace().map(str::to_string));
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(&argv[0]);
        if let Some(soft) = spawn.soft_nofile {
            let own_hard = own_hard_nofile();
            // SAFETY: only setrlimit (async-signal-safe) runs between fork
            // and exec.
            unsafe {
                cmd.pre_exec(move || {
                    for hard in [HARD_NOFILE.max(own_hard), own_hard] {
                        let lim = libc::rlimit {
                            rlim_cur: soft,
                            rlim_max: hard,
                        };
                        if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0 {
                            return Ok(());
                        }
                    }
                    Err(std::io::Error::last_os_error())
                });
            }
        }
        cmd.envs(spawn.env.iter().map(|(k, v)| (k, v)));
        let mut child = cmd
            .args(&argv[1..])
            // Its own process group, so a wrapper (valgrind, perf) and the
            // sidecar under it are signalled together.
            .process_group(0)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", argv[0]));
        let stderr = child.stderr.take().unwrap();
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = logs.clone();
        let verbose = std::env::var("BENCH_VERBOSE").is_ok();
        let quiet = spawn.quiet && !verbose;
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if verbose || line.contains("ERROR") || (!quiet && line.contains("WARN")) {
                    eprintln!("#   [{}] {line}", args_mode(&line));
                }
                sink.lock().unwrap().push(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(if wrap.is_empty() { 20 } else { 120 });
        let listen = loop {
            let found = logs.lock().unwrap().iter().find_map(|l| {
                l.contains(" listening ")
                    .then(|| {
                        l.split_whitespace()
                            .find_map(|w| w.strip_prefix("listen="))
                            .and_then(|a| a.parse::<SocketAddr>().ok())
                    })
                    .flatten()
            });
            if let Some(a) = found {
                break a;
            }
            if let Ok(Some(st)) = child.try_wait() {
                panic!(
                    "sidecar exited ({st}):\n{}",
                    logs.lock().unwrap().join("\n")
                );
            }
            assert!(Instant::now() < deadline, "sidecar did not start");
            std::thread::sleep(Duration::from_millis(10));
        };
        Sidecar {
            child,
            logs,
            listen,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The first log line containing `needle`.
    pub fn line(&self, needle: &str) -> Option<String> {
        self.logs
            .lock()
            .unwrap()
            .iter()
            .find(|l| l.contains(needle))
            .cloned()
    }

    /// The admin endpoint's address, once it listens.
    pub fn admin(&self) -> SocketAddr {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(a) = self.line("admin endpoint listening").and_then(|l| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix("admin="))
                    .and_then(|a| a.parse().ok())
            }) {
                return a;
            }
            assert!(Instant::now() < deadline, "no admin endpoint");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn count(&self, needle: &str) -> usize {
        self.logs
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(needle))
            .count()
    }
}

fn own_hard_nofile() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a plain libc call on a local struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
    }
    lim.rlim_max
}

pub fn args_mode(line: &str) -> &str {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("route="))
        .unwrap_or("sidecar")
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        // SIGTERM, so a profiler wrapping the sidecar can write its output.
        // SAFETY: signalling our own child by pid.
        unsafe {
            libc::kill(-(self.child.id() as libc::pid_t), libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: as above.
        unsafe {
            libc::kill(-(self.child.id() as libc::pid_t), libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

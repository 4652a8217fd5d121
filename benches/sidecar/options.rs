//! Command line and environment: the run's sizes (`Scale`) and options
//! (`Opts`), and the fixed sizes every scenario shares.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

/// Request and response size of every round trip.
pub const MSG: usize = 64;
/// Size of the generator's bulk writes and reads.
pub const IO_BUF: usize = 256 * 1024;
/// Concurrent connections of the round-trip scenario.
pub const RT_CONNS: usize = 16;
/// Concurrent connectors of the new-connection scenario.
pub const NEWCONN_CONCURRENCY: usize = 8;

#[derive(Debug, Clone)]
pub struct Scale {
    pub bulk_bytes: u64,
    pub echo_bytes: u64,
    pub pings: usize,
    pub rt_time: Duration,
    pub newconn_time: Duration,
    pub idle: usize,
    pub rotations: usize,
    pub rotation_gap: Duration,
    pub reload_interval: &'static str,
    /// Alternating direct/system rounds of the throughput scenarios (best kept).
    pub rounds: usize,
}

impl Scale {
    pub fn full() -> Scale {
        Scale {
            bulk_bytes: 1 << 30,
            echo_bytes: 1 << 30,
            pings: 20_000,
            rt_time: Duration::from_secs(3),
            newconn_time: Duration::from_secs(3),
            idle: 4_000,
            rotations: 10,
            rotation_gap: Duration::from_millis(500),
            reload_interval: "100ms",
            rounds: 3,
        }
    }
    pub fn quick() -> Scale {
        Scale {
            bulk_bytes: 128 << 20,
            echo_bytes: 64 << 20,
            pings: 3_000,
            rt_time: Duration::from_millis(1000),
            newconn_time: Duration::from_millis(1000),
            idle: 500,
            rotations: 10,
            rotation_gap: Duration::from_millis(150),
            reload_interval: "50ms",
            rounds: 1,
        }
    }
}

#[derive(Debug, Default)]
pub struct Opts {
    pub quick: bool,
    pub only: Option<Vec<String>>,
    pub out: Option<PathBuf>,
    pub table: Option<PathBuf>,
    pub external: Option<HashMap<String, String>>,
    pub name: Option<String>,
    /// The pair to spawn when not `--external`: `mtls-sidecar` (default) or
    /// `plain-rust`.
    pub system: String,
}

impl Opts {
    pub fn parse() -> Opts {
        let mut o = Opts {
            quick: std::env::var("BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0"),
            system: "mtls-sidecar".into(),
            ..Opts::default()
        };
        if let Ok(only) = std::env::var("BENCH_ONLY") {
            o.only = Some(only.split(',').map(str::to_string).collect());
        }
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            let mut val = || {
                args.next()
                    .unwrap_or_else(|| usage(&format!("{a} needs a value")))
            };
            match a.as_str() {
                // `cargo bench` passes this to every harness = false target.
                "--bench" => {}
                "--quick" => o.quick = true,
                "--only" => o.only = Some(val().split(',').map(str::to_string).collect()),
                "--out" => o.out = Some(val().into()),
                "--table" => o.table = Some(val().into()),
                "--name" => o.name = Some(val()),
                "--system" => {
                    o.system = val();
                    if !["mtls-sidecar", "plain-rust"].contains(&o.system.as_str()) {
                        usage(&format!("unknown system {:?}", o.system));
                    }
                }
                "--external" => {
                    let spec = val();
                    let mut kv: HashMap<String, String> = HashMap::new();
                    let mut last = String::new();
                    for part in spec.split(',') {
                        match part.split_once('=') {
                            Some((k, v)) => {
                                kv.insert(k.to_string(), v.to_string());
                                last = k.to_string();
                            }
                            // pids=1,2: a bare value continues the last key.
                            None if !last.is_empty() => {
                                let e = kv.entry(last.clone()).or_default();
                                e.push(',');
                                e.push_str(part);
                            }
                            None => usage(&format!("--external: {part:?} is not key=value")),
                        }
                    }
                    o.external = Some(kv);
                }
                "-h" | "--help" => usage(""),
                other if other.starts_with("--") => usage(&format!("unknown flag {other}")),
                _ => {}
            }
        }
        o
    }

    pub fn wants(&self, scenario: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|l| l.iter().any(|s| s == scenario))
    }
}

pub fn usage(msg: &str) -> ! {
    if !msg.is_empty() {
        eprintln!("error: {msg}");
    }
    eprintln!(
        "usage: sidecar [--quick] [--only memory,bulk,echo,latency,rt16,newconn,resumed,rotation | --only hostile|scale,flood,preauth] [--out FILE] [--name NAME]\n\
         \x20              [--system mtls-sidecar|plain-rust]\n\
         \x20      sidecar --external name=N,listen=ADDR,target=ADDR[,pids=P1,P2][,idle=N][,resumed=ADDR[,rpids=P1,P2]] [--out FILE]\n\
         \x20      sidecar --table FILE"
    );
    std::process::exit(2)
}

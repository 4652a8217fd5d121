//! The hidden `sandbox-probe` subcommand: proof, from inside the real
//! process, that the sandbox holds. It prepares exactly what `run --config`
//! would (credentials loaded, listeners bound), applies exactly the sandbox
//! that configuration gets, then tries the reads and connects it was asked
//! to and reports each as `allowed`, `refused` (by the sandbox: EACCES or
//! EPERM) or `failed` (any other error), as one JSON document on stdout.
//! Tests use it; it is not for operators.

use std::io::{self, Read};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::cli::SandboxProbeArgs;
use crate::config::FileSpec;
use crate::sandbox::{apply, warm_up_resolver, SandboxStatus};

/// How long one probe connect may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// One attempted access.
#[derive(Debug, Serialize)]
pub struct Attempt {
    /// The path read or the address connected to.
    pub what: String,
    /// `allowed`, `refused` (by the sandbox) or `failed`.
    pub result: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The probe's report.
#[derive(Debug, Serialize)]
pub struct Report {
    pub sandbox: SandboxStatus,
    pub read: Vec<Attempt>,
    pub connect: Vec<Attempt>,
}

fn attempt(what: String, r: io::Result<()>) -> Attempt {
    let (result, error) = match r {
        Ok(()) => ("allowed", None),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) => {
            ("refused", Some(e.to_string()))
        }
        Err(e) => ("failed", Some(e.to_string())),
    };
    Attempt {
        what,
        result,
        error,
    }
}

fn try_read(path: &Path) -> io::Result<()> {
    let mut f = std::fs::File::open(path)?;
    f.read(&mut [0u8; 1]).map(|_| ())
}

fn try_connect(addr: &str) -> io::Result<()> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
    for a in addr.to_socket_addrs()? {
        match TcpStream::connect_timeout(&a, CONNECT_TIMEOUT) {
            Ok(_) => return Ok(()),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Runs the probe; exit codes as the sidecar's: 2 for a bad configuration,
/// 1 when the sandbox cannot be applied as asked.
pub fn run(args: &SandboxProbeArgs) -> u8 {
    let settings = match FileSpec::load(&args.config) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    let mode = args.sandbox.unwrap_or(settings.sandbox);
    let prepared = match crate::app::prepare(settings) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return e.exit_code();
        }
    };
    let plan = prepared.sandbox_plan(Some(&args.config));
    warm_up_resolver(&plan);
    let sandbox = match apply(&plan, mode) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return 1;
        }
    };
    let report = Report {
        sandbox,
        read: args
            .read
            .iter()
            .map(|p: &PathBuf| attempt(p.display().to_string(), try_read(p)))
            .collect(),
        connect: args
            .connect
            .iter()
            .map(|a| attempt(a.clone(), try_connect(a)))
            .collect(),
    };
    match serde_json::to_string_pretty(&report) {
        Ok(text) => {
            println!("{text}");
            0
        }
        Err(e) => {
            eprintln!("error: cannot encode the report: {e}");
            1
        }
    }
}

//! The validated configuration of a sidecar process: its routes and the
//! credential source they share. Built from the command line (`server`,
//! `client`) or a TOML file (`run --config`); everything downstream takes
//! these types, never raw flags.
//!
//! This file holds what every part shares: `Settings`, `ConfigError`, the
//! defaults and the upper `bounds`. The parts, each importing only lower
//! ones: `values` (one field's text to its typed, bounded value),
//! `credentials` (where certificates come from), `http` (`--http-identity` and its limits), `route` (one route to a
//! `RouteConfig`) and `file` (the TOML file to `Settings`).

use std::path::PathBuf;
use std::time::Duration;

use crate::credentials::CrlScope;
use crate::proxy::addr::Addr;
use crate::proxy::settings::RouteConfig;
use crate::sandbox::SandboxMode;

pub mod app_probe;
mod credentials;
mod file;
mod http;
mod route;
mod values;

pub use credentials::CredentialSpec;
pub use file::FileSpec;
pub use route::RouteSpec;
pub use values::{crl_prune_age, parse_duration, MAX_ALPN};

/// How long a connection half-closed by one side may stay quiet before it
/// is reaped (so it never lingers in CLOSE_WAIT).
pub const DEFAULT_HALF_CLOSE_LINGER: Duration = Duration::from_secs(60);

/// The longest `--trust-grace` accepted: a removed CA must not linger.
pub const MAX_TRUST_GRACE: Duration = Duration::from_secs(24 * 3600);

/// Upper bounds on every count and duration, checked when flags or a file
/// are read, so no value can make a later task panic or overflow (a
/// semaphore's permit limit, an `Instant` plus a duration). Each is far
/// beyond any sensible setting; docs/configuration.md lists them.
pub mod bounds {
    use std::time::Duration;

    const HOUR: Duration = Duration::from_secs(3600);
    const DAY: Duration = Duration::from_secs(24 * 3600);

    /// `--max-connections`: authenticated, forwarded connections per route.
    pub const MAX_CONNECTIONS: usize = 1_000_000;
    /// `--max-handshakes`: unauthenticated handshakes in flight per route.
    pub const MAX_HANDSHAKES: usize = 1_000_000;
    /// `--worker-threads`.
    pub const WORKER_THREADS: usize = 1024;
    /// `--handshake-timeout`, `--connect-timeout`.
    pub const TIMEOUT: Duration = HOUR;
    /// `--crl-prune-age`: longer than any certificate lifetime.
    pub const CRL_PRUNE_AGE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    /// `--reload-interval`.
    pub const RELOAD_INTERVAL: Duration = HOUR;
    /// `--drain-timeout`.
    pub const DRAIN_TIMEOUT: Duration = HOUR;
    /// `--workload-api-keepalive`.
    pub const WORKLOAD_API_KEEPALIVE: Duration = HOUR;
    /// `--max-connection-lifetime`.
    pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);
    /// The hidden `--half-close-linger`.
    pub const HALF_CLOSE_LINGER: Duration = DAY;
}

/// The default `--max-connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;
/// The default `--max-handshakes`.
pub const DEFAULT_MAX_HANDSHAKES: usize = 1024;

/// Process-wide settings plus the routes.
#[derive(Debug, Clone)]
pub struct Settings {
    pub routes: Vec<RouteConfig>,
    pub admin: Option<Addr>,
    /// `--admin-connections on`: serve `/connections` on any admin listener,
    /// not only a loopback or Unix-socket one.
    pub admin_connections: bool,
    pub reload_interval: Duration,
    pub trust_grace: Duration,
    /// `--workload-api-keepalive`: how often a quiet connection to a
    /// Workload API agent is pinged.
    pub workload_api_keepalive: Duration,
    /// Which certificates of a peer chain are checked against the CRLs.
    pub crl_scope: CrlScope,
    /// `--crl-prune-age`: a serial a higher CRL number omits is pruned (not
    /// un-revoked) only when revoked longer ago than this.
    pub crl_prune_age: Duration,
    pub drain_timeout: Duration,
    /// Runtime worker threads; `None`: the CPUs the process may use, at most 4.
    pub worker_threads: Option<usize>,
    /// `--runtime` / `runtime`: how those threads share the work.
    pub runtime: RuntimeModel,
    /// `--sandbox` / `sandbox`: how Landlock restricts the process.
    pub sandbox: SandboxMode,
    /// `--app-probe` / `app_probe`: what `/app-probe/NAME` performs.
    pub app_probes: Vec<app_probe::AppProbe>,
}

impl Settings {
    /// Adds `--app-probe` values (a `run` command line's to its file's).
    pub fn add_app_probes(&mut self, args: &[String]) -> Result<(), ConfigError> {
        let added = app_probe::validate(args, &self.routes)?;
        if !added.is_empty() && self.admin.is_none() {
            return Err(invalid(
                "--app-probe",
                "is served on the admin endpoint: give --admin",
            ));
        }
        for p in added {
            if self.app_probes.iter().any(|q| q.name == p.name) {
                return Err(invalid("--app-probe", format!("{}: given twice", p.name)));
            }
            self.app_probes.push(p);
        }
        Ok(())
    }
}

/// How the process spreads connections over its threads (`--runtime`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RuntimeModel {
    /// One work-stealing runtime with `--worker-threads` workers: a task
    /// may run on any of them.
    Multi,
    /// `--worker-threads` single-threaded runtimes, each accepting from
    /// the same listening sockets (one descriptor, never `SO_REUSEPORT`); a
    /// connection lives its whole life on the thread that accepted it.
    /// The default: on the quiet 2-core box it did more 16-connection
    /// round trips for less CPU each than `multi`, with no worse
    /// single-connection latency, once the release build's link order was
    /// derived from it (benches/reports/2026-12-04-thread-model-decided.md).
    #[default]
    PerCore,
}

impl RuntimeModel {
    /// The names `--runtime` and the config key accept.
    pub const NAMES: [&'static str; 2] = ["multi", "per-core"];

    /// Parses `--runtime`'s value; `None` is the default.
    pub fn parse(s: Option<&str>) -> Result<RuntimeModel, ConfigError> {
        match s {
            None => Ok(RuntimeModel::default()),
            Some("multi") => Ok(RuntimeModel::Multi),
            Some("per-core") => Ok(RuntimeModel::PerCore),
            Some(other) => Err(invalid(
                "--runtime",
                format!("{other:?}: multi or per-core"),
            )),
        }
    }

    /// The name `--runtime` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            RuntimeModel::Multi => "multi",
            RuntimeModel::PerCore => "per-core",
        }
    }
}

/// A configuration problem; the message names the flag, file or field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{field}: {why}")]
    Invalid { field: String, why: String },
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {source}")]
    Parse {
        path: PathBuf,
        source: Box<toml::de::Error>,
    },
}

fn invalid(field: impl Into<String>, why: impl std::fmt::Display) -> ConfigError {
    ConfigError::Invalid {
        field: field.into(),
        why: why.to_string(),
    }
}

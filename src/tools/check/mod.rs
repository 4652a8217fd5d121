//! `mtls-sidecar check`: a preflight for a credential directory or three
//! files, run before a workload is pointed at a Secret.
//!
//! Why a separate command when the sidecar validates at start-up anyway: the
//! start-up error names only the first problem, and only once the pod is
//! already crash-looping. `check` reports every check on its own line (PASS,
//! FAIL, or SKIP when an earlier failure makes it meaningless), adds the
//! operator's expectations the sidecar cannot know (`--role`,
//! `--require-san`, `--min-validity`), and ends by running the sidecar's own
//! loader so "all PASS" means "the sidecar will accept this".
//!
//! `check --secret FILE` (`-` for stdin) reads a Secret as kubectl prints
//! it ([`secret`]) and checks its `type` and data keys before the same file
//! checks, in memory.
//!
//! `check … --against ADMIN_URL` previews a candidate on a running sidecar
//! instead: which live connections it would close, why and when
//! ([`against`], judged in [`preview`]; a candidate configuration,
//! `--config FILE --against`, in [`restart`]).
//!
//! `check --manifest FILE...` preflights rendered Kubernetes workloads
//! offline instead: references, SANs between dialing workloads, Service
//! target ports ([`manifest`]).
//!
//! The checks themselves live in [`inspect`](mod@inspect); this file turns arguments into
//! a [`Request`] and prints the [`Report`].

pub mod against;
mod deny;
mod expect;
mod fetch;
mod inspect;
pub mod manifest;
pub mod preview;
mod report;
pub mod restart;
pub mod secret;
mod steps;

use std::time::{Duration, SystemTime};

use crate::cli::CheckArgs;
use crate::config::{parse_duration, ConfigError};
use crate::credentials::CredentialSource;
use crate::identity::{Role, SanPattern};

pub use report::{Check, Report, Status};

/// What `check` reads.
#[derive(Debug, Clone)]
pub enum Input {
    /// A credential directory or three files.
    Source(CredentialSource),
    /// A printed Secret (`-` is stdin), and optionally the CA bundle from a
    /// file instead of the Secret's own `ca.crt` (trust from a trust-manager
    /// Bundle or any ConfigMap, projected beside the Secret).
    Secret {
        from: String,
        ca: Option<std::path::PathBuf>,
    },
    /// What a Workload API source (`--workload-api`) handed `check`: one
    /// context as the revision the sidecar would build from it.
    Fetched(crate::credentials::RawRevision),
}

/// What to check, validated from the command line.
#[derive(Debug, Clone)]
pub struct Request {
    pub input: Input,
    pub require_sans: Vec<SanPattern>,
    pub role: Option<Role>,
    pub min_validity: Option<Duration>,
}

/// A command line that cannot be checked (exit status 2).
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    #[error("give --tls-dir DIR, or --cert FILE --key FILE --ca FILE, or --secret FILE")]
    NoCredentials,
    #[error("--secret takes the identity from the Secret: give no --tls-dir, --cert or --key with it (--ca is allowed)")]
    SecretConflict,
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("--require-san: {0}")]
    San(#[from] crate::identity::SanPatternError),
}

impl Request {
    /// Validates the arguments; nothing is read from disk yet.
    pub fn from_args(args: &CheckArgs) -> Result<Request, UsageError> {
        let creds = &args.credentials;
        let input = match &args.secret {
            Some(from) => {
                if creds.tls_dir.is_some() || creds.cert.is_some() || creds.key.is_some() {
                    return Err(UsageError::SecretConflict);
                }
                Input::Secret {
                    from: from.clone(),
                    ca: creds.ca.clone(),
                }
            }
            None => Input::Source(
                creds
                    .spec()
                    .to_source("")?
                    .ok_or(UsageError::NoCredentials)?,
            ),
        };
        let require_sans = args
            .require_san
            .iter()
            .map(|s| s.parse::<SanPattern>())
            .collect::<Result<Vec<_>, _>>()?;
        let min_validity = args
            .min_validity
            .as_deref()
            .map(|s| parse_duration("--min-validity", s))
            .transpose()?;
        Ok(Request {
            input,
            require_sans,
            role: args.role,
            min_validity,
        })
    }
}

/// Runs every check against `now`.
pub fn inspect(req: &Request, now: SystemTime) -> Report {
    inspect::run(req, &crate::tls::provider::crypto_provider(), now)
}

/// Runs the checks and prints them; returns the exit status (0 all passed,
/// 1 a check failed, 2 bad usage).
pub fn run(args: &CheckArgs) -> u8 {
    if !args.manifest.is_empty() {
        return manifest::run(&args.manifest);
    }
    if args.spki {
        return print_spki(args);
    }
    if let Some(url) = &args.against {
        return against::run(args, url);
    }
    if let Some(path) = &args.config {
        return check_config(path);
    }
    let req = match Request::from_args(args) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    let req = match fetch::resolve(req) {
        Ok((req, said)) => {
            for line in said {
                // Beside the report, not inside the JSON one.
                if args.json {
                    eprintln!("{line}");
                } else {
                    println!("{line}");
                }
            }
            req
        }
        Err(e) => {
            eprintln!("error: --workload-api: {e}");
            return 1;
        }
    };
    let report = inspect(&req, SystemTime::now());
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("error: cannot encode the report: {e}");
                return 1;
            }
        }
    } else {
        print!("{}", report.to_text());
    }
    if report.ok {
        0
    } else {
        1
    }
}

/// `check --config FILE`: the file validated exactly as `run --config`
/// validates it at start-up, without starting anything.
fn check_config(path: &std::path::Path) -> u8 {
    match crate::config::FileSpec::load(path) {
        Ok(s) => {
            println!(
                "PASS  {}: {} route(s) valid",
                path.display(),
                s.routes.len()
            );
            0
        }
        Err(e) => {
            eprintln!("error: {e}");
            2
        }
    }
}

/// `check --spki`: the pin of the identity certificate (the first
/// certificate of `tls.crt` or `--cert`).
fn print_spki(args: &CheckArgs) -> u8 {
    let creds = &args.credentials;
    let path = match (&creds.tls_dir, &creds.cert) {
        (Some(dir), None) => dir.join(crate::credentials::CERT_FILE),
        (None, Some(cert)) => cert.clone(),
        _ => {
            eprintln!("error: --spki: give --tls-dir DIR or --cert FILE");
            return 2;
        }
    };
    let raw = match crate::credentials::read_file(&path) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return 1;
        }
    };
    use rustls_pki_types::pem::PemObject;
    let first = rustls_pki_types::CertificateDer::pem_slice_iter(&raw.bytes).next();
    let pin = match first {
        Some(Ok(der)) => crate::identity::pin::spki_sha256(der.as_ref()),
        _ => None,
    };
    match pin {
        Some(pin) => {
            println!("{}", crate::identity::pin::encode(&pin));
            0
        }
        None => {
            eprintln!("error: {}: no PEM certificate that parses", path.display());
            1
        }
    }
}

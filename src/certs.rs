//! `mtls-sidecar certs`: a development PKI in process.

use crate::cli::CertsCommand;

/// Runs a certs subcommand; returns the exit status.
pub fn run(_cmd: &CertsCommand) -> u8 {
    eprintln!("error: `certs` is not implemented yet");
    2
}

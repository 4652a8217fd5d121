//! `mtls-sidecar check`: preflight validation of a credential directory.

use crate::cli::CheckArgs;

/// Runs the checks; returns the exit status.
pub fn run(_args: &CheckArgs) -> u8 {
    eprintln!("error: `check` is not implemented yet");
    2
}

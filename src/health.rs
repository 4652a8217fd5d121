//! `mtls-sidecar health`: probe a running sidecar's admin endpoint.

use crate::cli::HealthArgs;

/// Probes the admin endpoint; returns 0 when it answers 200.
pub async fn run(_args: &HealthArgs) -> u8 {
    eprintln!("error: `health` is not implemented yet");
    2
}

//! `mtls-sidecar demo`: a self-contained walkthrough.

use crate::cli::DemoArgs;

/// Runs the demo; returns the exit status.
pub async fn run(_args: &DemoArgs) -> u8 {
    eprintln!("error: `demo` is not implemented yet");
    2
}

//! Log set-up: text or JSON lines on stderr, level from `RUST_LOG`
//! (default `info`).

use tracing_subscriber::EnvFilter;

/// The log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Installs the global subscriber; a second call is a no-op.
pub fn init(format: LogFormat) {
    init_with_default(format, "info");
}

/// Installs the global subscriber with another default level (the demo
/// keeps its narration readable by logging only warnings unless asked).
pub fn init_with_default(format: LogFormat, default: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            // The event's own `target` field (a route's target address)
            // would otherwise collide with tracing's module target.
            .with_target(false)
            .try_init(),
    };
}

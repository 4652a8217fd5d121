use std::process::ExitCode;

use clap::Parser;
use tracing::{error, info, warn};

use mtls_sidecar::app;
use mtls_sidecar::cli::{Cli, Command};
use mtls_sidecar::config::{FileSpec, Settings};
use mtls_sidecar::identity::SanPolicy;
use mtls_sidecar::logging::{self, LogFormat};

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The process default is the same provider every config is built with.
    let provider = std::sync::Arc::unwrap_or_clone(mtls_sidecar::crypto_provider());
    if rustls::crypto::CryptoProvider::install_default(provider).is_err() {
        eprintln!("error: a TLS crypto provider was already installed");
        return ExitCode::from(1);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let code = match cli.command {
        Command::Server(args) => {
            logging::init(args.common.log_format);
            serve(&runtime, args.to_spec())
        }
        Command::Client(args) => {
            logging::init(args.common.log_format);
            serve(&runtime, args.to_spec())
        }
        Command::Run(args) => {
            logging::init(args.log_format);
            match FileSpec::load(&args.config) {
                Ok(settings) => runtime.block_on(run(settings)),
                Err(e) => usage_error(&e),
            }
        }
        Command::Check(args) => mtls_sidecar::check::run(&args),
        Command::Certs(cmd) => mtls_sidecar::certs::run(&cmd),
        Command::Demo(args) => {
            logging::init_with_default(LogFormat::Text, "warn");
            runtime.block_on(mtls_sidecar::demo::run(&args))
        }
        Command::Health(args) => runtime.block_on(mtls_sidecar::health::run(&args)),
        Command::Publish(args) => mtls_sidecar::publish::run(&args),
    };
    ExitCode::from(code)
}

fn usage_error(e: &dyn std::fmt::Display) -> u8 {
    eprintln!("error: {e}");
    2
}

fn serve(runtime: &tokio::runtime::Runtime, spec: FileSpec) -> u8 {
    match spec.validate() {
        Ok(settings) => runtime.block_on(run(settings)),
        Err(e) => usage_error(&e),
    }
}

async fn run(settings: Settings) -> u8 {
    for r in &settings.routes {
        if r.peer_sans == SanPolicy::Any {
            warn!(route = %r.name, "--allow-any-san: ANY certificate from the trusted CA is accepted; role pinning is off");
        }
    }
    // aws-lc seeds its random generator from CPU jitter on first use (~0.1 s
    // of CPU, ~90 ms of wall time here): pay it before listening rather
    // than inside the first peer's handshake.
    let _ = aws_lc_rs::rand::fill(&mut [0u8; 16]);
    let running = match app::start(settings).await {
        Ok(r) => r,
        Err(e) => {
            error!("{e}");
            return e.exit_code();
        }
    };
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);
    match wait_for_shutdown(&running).await {
        Ok(()) => {
            let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
            running.drain().await;
            0
        }
        Err(e) => {
            error!(error = %e, "cannot install signal handlers");
            1
        }
    }
}

/// Waits for SIGTERM or SIGINT; SIGHUP polls the credentials at once.
async fn wait_for_shutdown(running: &app::Running) -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    loop {
        tokio::select! {
            _ = term.recv() => { info!("SIGTERM received"); return Ok(()) }
            _ = int.recv() => { info!("SIGINT received"); return Ok(()) }
            _ = hup.recv() => { info!("SIGHUP received: polling credentials"); running.reload_now() }
        }
    }
}

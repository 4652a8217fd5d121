//! The `mtls-sidecar` command: parses the command line and dispatches to
//! the proxy ([`mtls_sidecar::app::serve`]) or to one of the operator's
//! tools.

use std::process::ExitCode;

use clap::Parser;

use mtls_sidecar::app::serve::{serve, with_runtime};
use mtls_sidecar::cli::{Cli, Command};
use mtls_sidecar::config::FileSpec;
use mtls_sidecar::log::{self, LogFormat};

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The process default is the same provider every config is built with.
    let provider = std::sync::Arc::unwrap_or_clone(mtls_sidecar::tls::provider::crypto_provider());
    if rustls::crypto::CryptoProvider::install_default(provider).is_err() {
        eprintln!("error: a TLS crypto provider was already installed");
        return ExitCode::from(1);
    }
    let code = match cli.command {
        Command::Server(args) => {
            log::init(args.common.log_format);
            serve(args.to_spec().validate(), None)
        }
        Command::Client(args) => {
            log::init(args.common.log_format);
            serve(args.to_spec().validate(), None)
        }
        Command::Run(args) => {
            log::init(args.log_format);
            let settings = FileSpec::load(&args.config).and_then(|mut s| {
                if let Some(mode) = args.sandbox {
                    s.sandbox = mode;
                }
                s.add_app_probes(&args.app_probe)?;
                Ok(s)
            });
            serve(settings, Some(&args.config))
        }
        Command::Check(args) => mtls_sidecar::tools::check::run(&args),
        Command::Certs(cmd) => mtls_sidecar::tools::certs::run(&cmd),
        Command::Demo(args) => {
            log::init_with_default(LogFormat::Text, "warn");
            with_runtime(None, |rt| {
                rt.block_on(mtls_sidecar::tools::demo::run(&args))
            })
        }
        Command::SandboxProbe(args) => {
            log::init(LogFormat::Text);
            mtls_sidecar::tools::sandbox_probe::run(&args)
        }
        Command::Health(args) => with_runtime(None, |rt| {
            rt.block_on(mtls_sidecar::tools::health::run(&args))
        }),
        Command::Publish(args) => mtls_sidecar::tools::publish::run(&args),
        Command::Inject(args) => mtls_sidecar::tools::inject::run::run(
            &args,
            mtls_sidecar::tools::inject::manifest::Action::Inject,
        ),
        Command::Uninject(args) => {
            let args = mtls_sidecar::cli::InjectArgs {
                filename: args.filename,
                image: None,
            };
            mtls_sidecar::tools::inject::run::run(
                &args,
                mtls_sidecar::tools::inject::manifest::Action::Uninject,
            )
        }
        Command::Webhook(args) => {
            log::init(args.log_format);
            mtls_sidecar::tools::webhook::start(&args)
        }
    };
    ExitCode::from(code)
}

//! End to end through the real binary: each module starts `mtls-sidecar`
//! (`common::bin()`, which `MTLS_SIDECAR_BIN` points at the shipped build in
//! CI) and drives it over loopback with the crate's own TLS peers: routes,
//! admin endpoint, credentials and rotation, revocation, limits, process
//! behaviour, the command-line tools. tests/README.md maps the modules.

mod common;

/// The areas, one module (file under tests/e2e/) each.
mod e2e {
    mod addresses;
    mod admin;
    mod admin_load;
    mod ca_hints;
    mod ca_renewal;
    mod certs;
    mod chain_memo;
    mod check;
    mod check_manifest;
    mod cli;
    mod client_reverify;
    mod client_side;
    mod connections;
    mod crl;
    mod crl_cert_manager;
    mod demo;
    mod deny;
    mod deny_tools;
    mod disconnect;
    mod eku;
    mod forwarding;
    mod handoff;
    mod health;
    mod hostile;
    mod http_identity;
    mod http_identity_h2;
    mod identity_proof;
    mod inject;
    mod lifecycle;
    mod limits;
    mod logs;
    mod ops_metrics;
    mod patterns;
    mod preview;
    mod process;
    mod publish;
    mod publish_files;
    mod refusals;
    mod resumption;
    mod revocation_e2e;
    mod rotation;
    mod runtimes;
    mod sandbox;
    mod secret;
    mod settle;
    mod systemd;
    mod webhook;
}

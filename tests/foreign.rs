//! Interop with software we did not write, through the real binary: TLS
//! stacks (OpenSSL's `s_client`/`s_server`, Python's `ssl`), HAProxy and
//! nginx on the hand-off, OpenSSL's revocation verdicts, and an independent
//! Python Workload API agent. tests/README.md maps the modules.

mod common;

/// The areas, one module (file under tests/foreign/) each.
mod foreign {
    mod handoff_interop;
    mod http_identity_nginx;
    mod http_identity_subject;
    mod interop;
    mod kx_groups;
    mod p384;
    mod revocation_diff;
    mod workload_api;
    mod workload_api_federation;
    mod workload_api_lifecycle;
}

//! mtls-sidecar: a transparent mutual-TLS sidecar proxy.
//!
//! Data flows one way through the modules:
//! [`config`] → [`credentials`] (loaded, validated, swapped atomically) →
//! [`tls`] (configs that read the current credentials on every handshake) →
//! [`proxy`] (accept, handshake in its own task, copy, flush, half-close),
//! with [`metrics`] observing all of it.
//!
//! Imports point down this order (`tests/repo/layers.rs` checks it):
//! [`tools`] (the operator's tools) → [`app`] (one process) → [`admin`]
//! (what observers see) → [`cli`] → [`config`] (what the user asked) →
//! [`sandbox`] → [`target_exposure`] (does an application listen outside
//! loopback) → [`proxy`] (the data path) → [`tls`] → [`credentials`] →
//! [`metrics`] and [`log`] → [`reason`] → [`pki`] (the development PKI) →
//! the leaves: [`identity`] and [`process`] (fd limit, allocator
//! trimming, start-up pages, process metrics, systemd, the off switches).

// The API docs are the maintainers' and are built with
// `--document-private-items` (as .ci/run builds them): public items may
// link to the crate-internal (`pub(crate)`) modules they rest on.
#![allow(rustdoc::private_intra_doc_links)]

pub mod admin;
pub mod app;
pub mod cli;
pub mod config;
pub mod credentials;
pub mod identity;
pub mod log;
pub mod metrics;
pub mod pki;
pub(crate) mod process;
pub mod proxy;
pub mod reason;
pub(crate) mod sandbox;
pub mod target_exposure;
pub mod tls;
pub mod tools;

//! The operator's tools, on top of everything else: `check` (would this
//! configuration and these files serve?), `certs` (with `certs deny`,
//! the deny-list appender, on the development [`crate::pki`]), `publish`
//! (write a Secret-shaped directory atomically), `health` (a probe for
//! shell-less images), `demo`, and injection: [`inject`] and the admission
//! [`webhook`] that serves it. They reuse the proxy's own validation and
//! the app, so what they say is what the proxy would do; nothing below
//! this folder imports from it.

pub mod atomic_writer;
pub mod certs;
pub mod check;
pub mod demo;
pub mod health;
pub mod inject;
pub mod publish;
pub mod sandbox_probe;
pub mod webhook;

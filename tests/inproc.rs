//! In process, no binary: the credential store, trust anchors, revision
//! validation and the revocation judgement driven through the crate's
//! public API with an injected clock. tests/README.md maps the modules.

mod common;

/// The areas, one module (file under tests/inproc/) each.
mod inproc {
    mod revision_validation;
    mod revocation_judge;
    mod revocation_store;
    mod store;
    mod store_signals;
    mod trust_anchors;
}

//! Checks of the repository itself: the layer table against `src/`, the one
//! list of external tools, which test programs start the binary, the
//! deployment files (and the systemd unit's READY=1 against the binary),
//! and the recipes in docs/ run as written. tests/README.md maps the
//! modules.

mod common;

/// The areas, one module (file under tests/repo/) each.
mod repo {
    mod deploy;
    mod layers;
    mod programs;
    mod recipes;
    mod tools_listed;
}

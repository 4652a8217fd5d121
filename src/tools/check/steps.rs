//! The building blocks every part of `check` reports with: one step (PASS,
//! FAIL, or SKIP when an earlier step did not give it its input), the
//! `present` step of a file, and the files under check. Kept apart from
//! the checks themselves so that each of them depends on this alone.

use std::path::PathBuf;

use super::report::{Report, Status};
use crate::credentials::RawFile;

/// Runs one check: SKIP when `input` is missing (an earlier check failed),
/// otherwise PASS or FAIL with the detail `f` returns.
pub(super) fn step<D, T>(
    r: &mut Report,
    name: &'static str,
    subject: Option<&str>,
    input: Option<D>,
    skip_why: &str,
    f: impl FnOnce(D) -> Result<(T, String), String>,
) -> Option<T> {
    let Some(input) = input else {
        r.push(name, subject, Status::Skip, format!("skipped: {skip_why}"));
        return None;
    };
    match f(input) {
        Ok((value, detail)) => {
            r.push(name, subject, Status::Pass, detail);
            Some(value)
        }
        Err(detail) => {
            r.push(name, subject, Status::Fail, detail);
            None
        }
    }
}

/// A path as the report shows it.
pub(super) fn show(p: &std::path::Path) -> String {
    p.display().to_string()
}

/// The three files to check, however they were given: their paths as the
/// user knows them, and each one's bytes when it could be had.
pub(super) struct Files {
    pub(super) paths: [PathBuf; 3],
    pub(super) got: [Option<RawFile>; 3],
}

/// The `present` check of one file: its bytes, or why there are none
/// (`None`: skipped, an earlier check failed).
pub(super) fn present(
    r: &mut Report,
    name: &str,
    got: Option<Result<RawFile, String>>,
) -> Option<RawFile> {
    step(
        r,
        "present",
        Some(name),
        got,
        "the Secret could not be read",
        |got| {
            got.map(|f: RawFile| {
                let detail = format!("{} ({} bytes)", show(&f.path), f.bytes.len());
                (f, detail)
            })
        },
    )
}

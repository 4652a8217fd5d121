//! `check --secret`'s reader (`tools::check::secret::Secret::parse`) on
//! arbitrary bytes: never a panic; every error names the input and what
//! in it is wrong (a field of the Secret, or a position in the text); an
//! accepted Secret holds only keys of its `data` and `stringData`.

use mtls_sidecar::tools::check::secret::{Secret, SecretError, Value};

const FROM: &str = "fuzz-secret.yaml";

/// The fields a shape error may name: what `Secret::parse` reads.
const FIELDS: [&str; 8] = [
    "kind",
    "List",
    "apiVersion",
    "type",
    "data",
    "stringData",
    "metadata",
    "items",
];

/// Checks `bytes` as the input of `check --secret`.
pub fn check(bytes: &[u8]) {
    match Secret::parse(FROM, bytes) {
        Err(e) => check_error(&e),
        Ok(s) => {
            assert!(!s.name.is_empty());
            for (k, v) in &s.data {
                if let Value::NotBase64(why) = v {
                    assert!(!why.is_empty(), "data.{k}: an empty reason");
                }
            }
        }
    }
}

fn check_error(e: &SecretError) {
    let shown = e.to_string();
    assert!(
        shown.starts_with(&format!("{FROM}: ")),
        "the error does not name the input: {shown}"
    );
    match e {
        SecretError::Shape { detail, .. } => assert!(
            FIELDS.iter().any(|f| detail.contains(f)),
            "a shape error that names no field: {shown}"
        ),
        SecretError::Syntax { detail, .. } => assert!(
            names_a_place(detail),
            "a syntax error that names no place: {shown}"
        ),
        SecretError::Read { .. } | SecretError::TooLarge { .. } => {
            panic!("parsing bytes cannot fail to read: {shown}")
        }
    }
}

/// A syntax error says where (a line) or what is wrong with the whole
/// input (its encoding, its emptiness, its nesting).
fn names_a_place(detail: &str) -> bool {
    detail.contains("line")
        || detail.starts_with("not UTF-8")
        || detail == "empty document"
        || detail.starts_with("nested deeper than")
}

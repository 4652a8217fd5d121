//! Reading a Kubernetes Secret the way `kubectl get secret NAME -o yaml`
//! (or `-o json`) prints it, for `check --secret`.
//!
//! Why: a `kubernetes.io/tls` Secret can be wrong in ways a mounted
//! directory never shows (the wrong `type`, a key missing or empty, data that
//! is not base64), and the point of a preflight is to catch them before a
//! pod mounts it and crash-loops. The document is untrusted input, so the
//! reader is deliberately small: at most [`MAX_INPUT`] bytes, one document,
//! nesting bounded by [`MAX_DEPTH`], no YAML aliases (kubectl never prints
//! them, and expanding them is how a small document becomes a huge one),
//! duplicate keys refused. Nothing is written to disk: the decoded files
//! are checked in memory.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use base64::Engine;
use yaml_rust2::parser::{Event, Parser};

use super::report::Report;
use super::steps::{present, step, Files};
use crate::credentials::{read_file, RawFile, CA_FILE, CERT_FILE, KEY_FILE};

/// The most bytes read from the file or stdin. The API server limits a
/// Secret to 1 MiB of data; base64 and metadata make the printed form larger.
pub const MAX_INPUT: u64 = 4 << 20;
/// How deeply mappings and sequences may nest.
pub const MAX_DEPTH: usize = 64;

/// Why a document could not be used as a Secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("{from}: cannot read: {detail}")]
    Read { from: String, detail: String },
    #[error("{from}: larger than {MAX_INPUT} bytes, which no Secret is")]
    TooLarge { from: String },
    #[error("{from}: neither YAML nor JSON: {detail}")]
    Syntax { from: String, detail: String },
    #[error("{from}: not a Secret as kubectl prints one: {detail}")]
    Shape { from: String, detail: String },
}

/// One value of a data key, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Bytes(Vec<u8>),
    /// Present, but its `data` value is not base64.
    NotBase64(String),
}

/// A Secret's name, type and decoded data.
#[derive(Debug, Clone)]
pub struct Secret {
    /// `namespace/name`, or `name` when no namespace was printed.
    pub name: String,
    /// `type`; `None` when absent (the API server then defaults it to `Opaque`).
    pub kind: Option<String>,
    /// `data` (base64-decoded) merged with `stringData`, as the API server
    /// merges them.
    pub data: BTreeMap<String, Value>,
}

impl Secret {
    /// Reads `from` (a path, or `-` for stdin).
    pub fn read(from: &str) -> Result<Secret, SecretError> {
        let mut bytes = Vec::new();
        let read = if from == "-" {
            std::io::stdin()
                .lock()
                .take(MAX_INPUT + 1)
                .read_to_end(&mut bytes)
        } else {
            std::fs::File::open(from).and_then(|f| f.take(MAX_INPUT + 1).read_to_end(&mut bytes))
        };
        let shown = if from == "-" { "stdin" } else { from };
        read.map_err(|e| SecretError::Read {
            from: shown.to_string(),
            detail: e.to_string(),
        })?;
        if bytes.len() as u64 > MAX_INPUT {
            return Err(SecretError::TooLarge {
                from: shown.to_string(),
            });
        }
        Secret::parse(shown, &bytes)
    }

    /// Parses a printed Secret (or a `List` holding exactly one).
    pub fn parse(from: &str, bytes: &[u8]) -> Result<Secret, SecretError> {
        let syntax = |detail: String| SecretError::Syntax {
            from: from.to_string(),
            detail,
        };
        let shape = |detail: String| SecretError::Shape {
            from: from.to_string(),
            detail,
        };
        let text = std::str::from_utf8(bytes).map_err(|e| syntax(format!("not UTF-8: {e}")))?;
        let root = if text.trim_start().starts_with('{') {
            let v: serde_json::Value =
                serde_json::from_str(text).map_err(|e| syntax(e.to_string()))?;
            Node::from_json(&v, 0).map_err(syntax)?
        } else {
            parse_yaml(text).map_err(syntax)?
        };
        let doc = match root.get("kind").and_then(Node::scalar) {
            Some("Secret") => &root,
            Some("List") => match root.get("items") {
                Some(Node::Seq(items)) if items.len() == 1 => &items[0],
                Some(Node::Seq(items)) => {
                    return Err(shape(format!(
                        "a List of {} items; give exactly one Secret",
                        items.len()
                    )))
                }
                _ => return Err(shape("a List without items".into())),
            },
            Some(other) => return Err(shape(format!("kind is {other:?}, not \"Secret\""))),
            None => return Err(shape("no kind".into())),
        };
        match doc.get("kind").and_then(Node::scalar) {
            Some("Secret") => {}
            other => {
                return Err(shape(format!(
                    "the List holds kind {other:?}, not a Secret"
                )))
            }
        }
        if let Some(v) = doc.get("apiVersion").and_then(Node::scalar) {
            if v != "v1" {
                return Err(shape(format!("apiVersion is {v:?}, not \"v1\"")));
            }
        }
        let meta = doc.get("metadata");
        // An empty name or namespace (which the API server never prints)
        // reads as none, so that no message names a Secret "".
        let field = |k: &str| {
            meta.and_then(|m| m.get(k))
                .and_then(Node::scalar)
                .filter(|v| !v.is_empty())
        };
        let name = match (field("namespace"), field("name")) {
            (Some(ns), Some(n)) => format!("{ns}/{n}"),
            (None, Some(n)) => n.to_string(),
            (_, None) => "(unnamed)".to_string(),
        };
        let kind = match doc.get("type") {
            None | Some(Node::Null) => None,
            Some(Node::Scalar(s)) => Some(s.clone()),
            Some(_) => return Err(shape("type is not a string".into())),
        };
        let mut data = BTreeMap::new();
        for (section, decode) in [("data", true), ("stringData", false)] {
            let entries = match doc.get(section) {
                None | Some(Node::Null) => continue,
                Some(Node::Map(m)) => m,
                Some(_) => return Err(shape(format!("{section} is not a mapping"))),
            };
            for (k, v) in entries {
                let text = match v {
                    Node::Null => "",
                    Node::Scalar(s) => s.as_str(),
                    _ => return Err(shape(format!("{section}.{k} is not a string"))),
                };
                let value = if decode {
                    let compact: String = text.split_ascii_whitespace().collect();
                    match base64::engine::general_purpose::STANDARD.decode(compact) {
                        Ok(b) => Value::Bytes(b),
                        Err(e) => Value::NotBase64(e.to_string()),
                    }
                } else {
                    Value::Bytes(text.as_bytes().to_vec())
                };
                data.insert(k.clone(), value);
            }
        }
        Ok(Secret { name, kind, data })
    }
}

/// A parsed document: only what a Secret needs.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    Null,
    Scalar(String),
    Seq(Vec<Node>),
    Map(Vec<(String, Node)>),
}

impl Node {
    fn get(&self, key: &str) -> Option<&Node> {
        match self {
            Node::Map(m) => m.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    fn scalar(&self) -> Option<&str> {
        match self {
            Node::Scalar(s) => Some(s),
            _ => None,
        }
    }

    fn from_json(v: &serde_json::Value, depth: usize) -> Result<Node, String> {
        use serde_json::Value as J;
        if depth > MAX_DEPTH {
            return Err(format!("nested deeper than {MAX_DEPTH} levels"));
        }
        Ok(match v {
            J::Null => Node::Null,
            J::Bool(b) => Node::Scalar(b.to_string()),
            J::Number(n) => Node::Scalar(n.to_string()),
            J::String(s) => Node::Scalar(s.clone()),
            J::Array(a) => Node::Seq(
                a.iter()
                    .map(|x| Node::from_json(x, depth + 1))
                    .collect::<Result<_, _>>()?,
            ),
            J::Object(o) => Node::Map(
                o.iter()
                    .map(|(k, x)| Ok((k.clone(), Node::from_json(x, depth + 1)?)))
                    .collect::<Result<_, String>>()?,
            ),
        })
    }
}

/// A collection being built from parser events.
enum Open {
    Seq(Vec<Node>),
    Map(Vec<(String, Node)>, Option<String>),
}

/// Builds one document from the event stream, without recursion and
/// without aliases.
fn parse_yaml(text: &str) -> Result<Node, String> {
    let mut parser = Parser::new_from_str(text);
    let mut open: Vec<Open> = Vec::new();
    let mut root: Option<Node> = None;
    let mut documents = 0usize;
    loop {
        let (event, mark) = parser.next_token().map_err(|e| e.to_string())?;
        let at = || format!("line {}", mark.line());
        let node = match event {
            Event::StreamEnd => break,
            Event::Nothing | Event::StreamStart | Event::DocumentEnd => continue,
            Event::DocumentStart => {
                documents += 1;
                if documents > 1 {
                    return Err(format!("{}: more than one document", at()));
                }
                continue;
            }
            Event::Alias(_) => {
                return Err(format!(
                    "{}: a YAML alias (kubectl never prints one; not accepted)",
                    at()
                ))
            }
            Event::SequenceStart(..) | Event::MappingStart(..) => {
                if open.len() >= MAX_DEPTH {
                    return Err(format!("{}: nested deeper than {MAX_DEPTH} levels", at()));
                }
                open.push(if matches!(event, Event::SequenceStart(..)) {
                    Open::Seq(Vec::new())
                } else {
                    Open::Map(Vec::new(), None)
                });
                continue;
            }
            Event::Scalar(v, style, ..) => {
                let plain_null = style == yaml_rust2::scanner::TScalarStyle::Plain
                    && matches!(v.as_str(), "" | "~" | "null" | "Null" | "NULL");
                if plain_null {
                    Node::Null
                } else {
                    Node::Scalar(v)
                }
            }
            Event::SequenceEnd | Event::MappingEnd => match open.pop() {
                Some(Open::Seq(items)) => Node::Seq(items),
                Some(Open::Map(entries, None)) => Node::Map(entries),
                Some(Open::Map(_, Some(k))) => {
                    return Err(format!("{}: key {k:?} has no value", at()))
                }
                None => return Err(format!("{}: unbalanced end of a collection", at())),
            },
        };
        match open.last_mut() {
            None if root.is_none() => root = Some(node),
            None => return Err(format!("{}: more than one document", at())),
            Some(Open::Seq(items)) => items.push(node),
            Some(Open::Map(entries, pending)) => match pending.take() {
                None => match node {
                    Node::Scalar(k) => {
                        if entries.iter().any(|(e, _)| *e == k) {
                            return Err(format!("{}: duplicate key {k:?}", at()));
                        }
                        *pending = Some(k);
                    }
                    _ => return Err(format!("{}: a key that is not a string", at())),
                },
                Some(k) => entries.push((k, node)),
            },
        }
    }
    root.ok_or_else(|| "empty document".to_string())
}

/// The Secret type the sidecar's Secrets must have.
pub const TLS_TYPE: &str = "kubernetes.io/tls";

/// The `secret`, `type` and `present` checks of `check --secret`: the
/// report so far and the three files (the CA from `ca` when given).
pub(super) fn files(from: &str, ca: Option<&Path>) -> (Report, Files) {
    let shown = if from == "-" { "stdin" } else { from };
    let secret = Secret::read(from);
    let label = match &secret {
        Ok(s) => format!("Secret {} ({shown})", s.name),
        Err(_) => shown.to_string(),
    };
    let mut r = Report::new(label);
    let parsed = step(&mut r, "secret", None, Some(()), "", |()| {
        let s = secret.map_err(|e| e.to_string())?;
        let keys: Vec<&str> = s.data.keys().map(String::as_str).collect();
        let d = format!("{shown}: Secret {} with keys [{}]", s.name, keys.join(", "));
        Ok((s, d))
    });
    let why = "the Secret could not be read";
    step(&mut r, "type", None, parsed.as_ref(), why, |s| {
        match s.kind.as_deref() {
            Some(TLS_TYPE) => Ok(((), format!("Secret {}: type {TLS_TYPE}", s.name))),
            Some(other) => Err(format!(
                "Secret {}: type is {other}, not {TLS_TYPE} (kubectl create secret tls and cert-manager write {TLS_TYPE})",
                s.name
            )),
            None => Err(format!(
                "Secret {}: no type (the API server makes it Opaque), not {TLS_TYPE}",
                s.name
            )),
        }
    });
    let name = parsed.as_ref().map_or("(unread)", |s| s.name.as_str());
    let in_secret = |key: &str| PathBuf::from(format!("Secret {name}: {key}"));
    let paths = [
        in_secret(CERT_FILE),
        in_secret(KEY_FILE),
        ca.map_or_else(|| in_secret(CA_FILE), Path::to_path_buf),
    ];
    let mut got: [Option<RawFile>; 3] = [None, None, None];
    for (i, key) in [CERT_FILE, KEY_FILE, CA_FILE].into_iter().enumerate() {
        let value = match (key, ca) {
            (CA_FILE, Some(file)) => Some(read_file(file).map_err(|e| e.to_string())),
            _ => parsed
                .as_ref()
                .map(|s| key_of(s, key, ca.is_none(), paths[i].clone())),
        };
        got[i] = present(&mut r, key, value);
    }
    (r, Files { paths, got })
}

/// One data key as a file, or why it cannot be one.
fn key_of(s: &Secret, key: &str, ca_expected: bool, path: PathBuf) -> Result<RawFile, String> {
    match s.data.get(key) {
        None => {
            let keys: Vec<&str> = s.data.keys().map(String::as_str).collect();
            let hint = if key == CA_FILE && ca_expected {
                "; when trust comes from a trust-manager Bundle or a ConfigMap projected beside the Secret, give that bundle with --ca FILE"
            } else {
                ""
            };
            Err(format!(
                "Secret {}: no {key} key (it has [{}]){hint}",
                s.name,
                keys.join(", ")
            ))
        }
        Some(Value::NotBase64(e)) => {
            Err(format!("Secret {}: data.{key} is not base64: {e}", s.name))
        }
        Some(Value::Bytes(b)) if b.iter().all(u8::is_ascii_whitespace) => {
            Err(format!("Secret {}: {key} is empty", s.name))
        }
        Some(Value::Bytes(b)) => Ok(RawFile {
            path,
            bytes: b.clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Secret, SecretError> {
        Secret::parse("t", s.as_bytes())
    }

    #[test]
    fn reads_kubectl_yaml() {
        let s = parse(
            "apiVersion: v1\ndata:\n  tls.crt: aGVsbG8=\n  tls.key: \"\"\nkind: Secret\nmetadata:\n  name: x\n  namespace: env-1\ntype: kubernetes.io/tls\n",
        )
        .unwrap();
        assert_eq!(s.name, "env-1/x");
        assert_eq!(s.kind.as_deref(), Some("kubernetes.io/tls"));
        assert_eq!(s.data["tls.crt"], Value::Bytes(b"hello".to_vec()));
        assert_eq!(s.data["tls.key"], Value::Bytes(Vec::new()));
    }

    #[test]
    fn reads_json_and_string_data() {
        let s = parse(
            r#"{"kind":"Secret","metadata":{"name":"y"},"data":{"a":"!!"},"stringData":{"b":"plain"}}"#,
        )
        .unwrap();
        assert_eq!(s.name, "y");
        assert_eq!(s.kind, None);
        assert!(matches!(s.data["a"], Value::NotBase64(_)));
        assert_eq!(s.data["b"], Value::Bytes(b"plain".to_vec()));
    }

    #[test]
    fn refuses_hostile_documents() {
        let bomb = "kind: Secret\na: &a [x, x, x, x]\nb: [*a, *a, *a]\n";
        assert!(parse(bomb).unwrap_err().to_string().contains("alias"));
        let deep = format!("kind: Secret\nx: {}{}\n", "[".repeat(200), "]".repeat(200));
        assert!(parse(&deep).is_err());
        let deep_json = format!(
            r#"{{"kind":"Secret","x":{}1{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        assert!(parse(&deep_json).is_err());
        assert!(parse("kind: Secret\nkind: Secret\n")
            .unwrap_err()
            .to_string()
            .contains("duplicate"));
        assert!(parse("kind: ConfigMap\n").is_err());
        assert!(parse("---\nkind: Secret\n---\nkind: Secret\n").is_err());
        assert!(parse("\u{0}\u{1}: [").is_err());
        assert!(parse("").is_err());
        assert!(Secret::parse("t", &[0xff, 0xfe]).is_err());
    }

    /// Found by the `check_secret` fuzz target
    /// (fuzz/seeds/check_secret/regression-empty-name).
    #[test]
    fn an_empty_name_or_namespace_reads_as_none() {
        let s = parse(r#"{"kind":"Secret","metadata":{"name":"","namespace":""}}"#).unwrap();
        assert_eq!(s.name, "(unnamed)");
        let s = parse("kind: Secret\nmetadata: {name: x, namespace: ''}\n").unwrap();
        assert_eq!(s.name, "x");
    }

    #[test]
    fn a_list_of_one_secret_is_that_secret() {
        let s = parse("kind: List\nitems:\n- kind: Secret\n  metadata: {name: z}\n").unwrap();
        assert_eq!(s.name, "z");
        assert!(parse("kind: List\nitems: []\n").is_err());
    }
}

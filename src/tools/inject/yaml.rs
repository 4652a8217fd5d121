//! Kubernetes manifests as YAML streams, read into and written from
//! `serde_json::Value` with yaml-rust2's event parser and emitter.
//!
//! Why not a serde YAML crate: serde_yaml is archived, and the crates
//! that carry it on (and yaml-rust2's own tree loader) implement YAML
//! 1.2's core schema, while the API server and kubectl read manifests
//! with go-yaml v2's YAML 1.1 rules (sigs.k8s.io/yaml). The difference
//! is not academic here: `defaultMode: 0440` is the octal 288 (0440) to
//! Kubernetes and the decimal 440 (0670, group-writable) to a YAML 1.2
//! reader, and an unquoted `on` is a boolean to Kubernetes. So the
//! scalars are resolved here, by the rules Kubernetes uses, from the
//! parser's events (which say whether a scalar was quoted), and what is
//! written is read back by the same rules before it is trusted: a
//! document whose YAML would read back differently is written as JSON
//! (valid YAML) instead. Comments are not kept.

use std::collections::HashMap;

use serde_json::{Map, Number, Value};
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser, Tag};
use yaml_rust2::scanner::{Marker, TScalarStyle};
use yaml_rust2::{Yaml, YamlEmitter};

/// The documents of a YAML stream (empty documents dropped).
pub fn load(text: &str) -> Result<Vec<Value>, String> {
    let mut builder = Builder::default();
    let mut parser = Parser::new_from_str(text);
    // Event by event, not through `Parser::load`, which recurses once per
    // nesting level: a hostile stream would overflow the stack before the
    // builder's depth bound could refuse it.
    loop {
        let (ev, at) = parser.next_token().map_err(|e| format!("YAML: {e}"))?;
        if ev == Event::StreamEnd {
            break;
        }
        if ev == Event::DocumentStart {
            // Anchors are per document.
            builder.anchors.clear();
        }
        builder.on_event(ev, at);
        if let Some(e) = builder.error.take() {
            return Err(e);
        }
    }
    Ok(builder.docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// Deeper than this, a stream is refused: no manifest nests so deep, and a
/// hostile one (`- - - …`) must not exhaust the stack of what walks it.
const MAX_DEPTH: usize = 100;
/// More nodes than this in a stream, aliases expanded, is refused: an alias
/// copies its anchor's value, so nested aliases (a "billion laughs") would
/// otherwise grow exponentially.
const MAX_NODES: usize = 1_000_000;

#[derive(Default)]
struct Builder {
    docs: Vec<Value>,
    /// Open collections: a sequence, or a mapping with its pending key,
    /// its anchor, and the nodes it holds so far.
    stack: Vec<(Value, Option<String>, usize, usize)>,
    /// Anchored values with the nodes each holds (itself included).
    anchors: HashMap<usize, (Value, usize)>,
    /// Nodes built so far, aliases expanded.
    nodes: usize,
    error: Option<String>,
}

impl Builder {
    fn fail(&mut self, at: Marker, what: String) {
        if self.error.is_none() {
            self.error = Some(format!(
                "YAML line {} column {}: {what}",
                at.line(),
                at.col() + 1
            ));
        }
    }

    /// Counts `size` more nodes; false (and the stream refused) past
    /// [`MAX_NODES`].
    fn count(&mut self, size: usize, at: Marker) -> bool {
        self.nodes = self.nodes.saturating_add(size);
        if self.nodes > MAX_NODES {
            self.fail(
                at,
                format!("more than {MAX_NODES} nodes (aliases expanded)"),
            );
            return false;
        }
        true
    }

    /// Opens a collection; false (and the stream refused) past [`MAX_DEPTH`].
    fn open(&mut self, empty: Value, anchor: usize, at: Marker) {
        if self.stack.len() >= MAX_DEPTH {
            self.fail(at, format!("nested deeper than {MAX_DEPTH} levels"));
            return;
        }
        self.stack.push((empty, None, anchor, 0));
    }

    /// A finished node holding `size` nodes (itself included): into its
    /// parent, or a document of its own.
    fn add(&mut self, value: Value, size: usize, anchor: usize, at: Marker) {
        if anchor > 0 {
            self.anchors.insert(anchor, (value.clone(), size));
        }
        let Some((parent, key, _, held)) = self.stack.last_mut() else {
            self.docs.push(value);
            return;
        };
        *held = held.saturating_add(size);
        match parent {
            Value::Array(a) => a.push(value),
            Value::Object(m) => match key.take() {
                None => match value {
                    Value::String(s) => *key = Some(s),
                    Value::Null => *key = Some("null".into()),
                    Value::Bool(b) => *key = Some(b.to_string()),
                    Value::Number(n) => *key = Some(n.to_string()),
                    _ => self.fail(at, "a mapping key must be a scalar".into()),
                },
                Some(k) if k == "<<" => merge(m, value),
                Some(k) => {
                    m.insert(k, value);
                }
            },
            _ => {}
        }
    }
}

/// A `<<` merge key: the mapping's (or each mapping's) entries not
/// already present.
fn merge(into: &mut Map<String, Value>, from: Value) {
    let maps = match from {
        Value::Array(a) => a,
        other => vec![other],
    };
    for m in maps {
        if let Value::Object(m) = m {
            for (k, v) in m {
                into.entry(k).or_insert(v);
            }
        }
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, ev: Event, at: Marker) {
        // A refused stream builds nothing more.
        if self.error.is_some() {
            return;
        }
        match ev {
            Event::SequenceStart(anchor, _) => self.open(Value::Array(Vec::new()), anchor, at),
            Event::MappingStart(anchor, _) => self.open(Value::Object(Map::new()), anchor, at),
            Event::SequenceEnd | Event::MappingEnd => {
                if let Some((v, _, anchor, held)) = self.stack.pop() {
                    if self.count(1, at) {
                        self.add(v, held.saturating_add(1), anchor, at);
                    }
                }
            }
            Event::Scalar(text, style, anchor, tag) => match scalar(&text, style, tag.as_ref()) {
                Ok(v) if self.count(1, at) => self.add(v, 1, anchor, at),
                Ok(_) => {}
                Err(e) => self.fail(at, e),
            },
            Event::Alias(id) => match self.anchors.get(&id).map(|(_, size)| *size) {
                Some(size) if self.count(size, at) => {
                    if let Some((v, _)) = self.anchors.get(&id).cloned() {
                        self.add(v, size, 0, at);
                    }
                }
                Some(_) => {}
                None => self.fail(at, "an alias to an unknown anchor".into()),
            },
            _ => {}
        }
    }
}

/// One scalar, resolved as go-yaml v2 resolves it for Kubernetes.
fn scalar(text: &str, style: TScalarStyle, tag: Option<&Tag>) -> Result<Value, String> {
    if let Some(t) = tag {
        if t.handle == "!!" || t.handle == "tag:yaml.org,2002:" {
            return match t.suffix.as_str() {
                "str" | "binary" => Ok(Value::String(text.into())),
                "null" => Ok(Value::Null),
                "bool" | "int" | "float" => plain(text)
                    .filter(|v| !v.is_string())
                    .ok_or_else(|| format!("{text:?} is not a !!{}", t.suffix)),
                other => Err(format!("unsupported tag !!{other}")),
            };
        }
    }
    if style != TScalarStyle::Plain {
        return Ok(Value::String(text.into()));
    }
    plain(text).ok_or_else(|| format!("{text:?}: a number JSON cannot hold"))
}

/// A plain scalar: null, a YAML 1.1 boolean, an integer (decimal, 0x hex,
/// 0b binary, 0o or leading-0 octal, `_` separators), a float, or a
/// string. `None` for what JSON cannot hold (.inf, .nan).
fn plain(text: &str) -> Option<Value> {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Some(Value::Null),
        "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" | "true" | "True" | "TRUE" => {
            return Some(Value::Bool(true))
        }
        "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" | "false" | "False" | "FALSE" => {
            return Some(Value::Bool(false))
        }
        _ => {}
    }
    if let Some(n) = integer(text) {
        return Some(Value::Number(n));
    }
    let lower = text.to_ascii_lowercase();
    if matches!(lower.trim_start_matches(['+', '-']), ".inf" | ".nan") {
        return None;
    }
    let looks_numeric = text
        .chars()
        .all(|c| c.is_ascii_digit() || "+-.eE_".contains(c))
        && text.chars().any(|c| c.is_ascii_digit());
    if looks_numeric {
        if let Some(n) = text
            .replace('_', "")
            .parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
        {
            return Some(Value::Number(n));
        }
    }
    Some(Value::String(text.into()))
}

fn integer(text: &str) -> Option<Number> {
    let (negative, body) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    if body.is_empty() || body.starts_with('_') || body.ends_with('_') {
        return None;
    }
    let digits = body.replace('_', "");
    let (radix, digits) = if let Some(h) = digits.strip_prefix("0x") {
        (16, h.to_string())
    } else if let Some(b) = digits.strip_prefix("0b") {
        (2, b.to_string())
    } else if let Some(o) = digits.strip_prefix("0o") {
        (8, o.to_string())
    } else if digits.len() > 1 && digits.starts_with('0') {
        (8, digits[1..].to_string())
    } else {
        (10, digits)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let magnitude = u64::from_str_radix(&digits, radix).ok()?;
    if negative {
        let n = 0i64.checked_sub_unsigned(magnitude)?;
        Some(Number::from(n))
    } else {
        Some(Number::from(magnitude))
    }
}

fn to_yaml(v: &Value) -> Yaml {
    match v {
        Value::Null => Yaml::Null,
        Value::Bool(b) => Yaml::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Yaml::Integer(i),
            None => Yaml::Real(n.to_string()),
        },
        Value::String(s) => Yaml::String(s.clone()),
        Value::Array(a) => Yaml::Array(a.iter().map(to_yaml).collect()),
        Value::Object(m) => Yaml::Hash(
            m.iter()
                .map(|(k, v)| (Yaml::String(k.clone()), to_yaml(v)))
                .collect(),
        ),
    }
}

/// One document as YAML (starting `---`), or as JSON when its YAML would
/// not read back as the same value in a stream: what is read back is what
/// is written, followed by the `---` that starts any next document (the
/// loader reads a marker after a top-level block scalar as part of it).
pub fn emit_document(doc: &Value) -> String {
    let mut out = String::new();
    let mut emitter = YamlEmitter::new(&mut out);
    emitter.multiline_strings(true);
    let dumped = emitter.dump(&to_yaml(doc)).is_ok();
    out.push('\n');
    let in_a_stream = format!("{out}---\n");
    if dumped && load(&in_a_stream).ok().as_deref() == Some(std::slice::from_ref(doc)) {
        return out;
    }
    let json = serde_json::to_string_pretty(doc).expect("a Value serializes");
    format!("---\n{json}\n")
}

/// Documents as one YAML stream.
pub fn emit(docs: &[Value]) -> String {
    docs.iter().map(emit_document).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Found by the `inject_manifest` fuzz target: a document that is a
    /// string of several lines was written as a top-level block scalar,
    /// which reads back alone, but swallowed the next document's `---`
    /// and the document after it.
    #[test]
    fn a_stream_reads_back_as_the_documents_written() {
        let streams = [
            vec![json!("|\nnarobe {:hort: 8080}}\n"), json!("a\u{7f}")],
            vec![json!("a\nb"), json!({"k": 1})],
            vec![json!({"data": {"k": "a\nb", "l": "x\ny\n"}}), json!("x")],
            vec![json!(["a\nb\n"]), json!("c\nd\n")],
        ];
        for docs in streams {
            let text = emit(&docs);
            assert_eq!(load(&text).unwrap(), docs, "{text}");
        }
    }

    #[test]
    fn scalars_resolve_as_kubernetes_reads_them() {
        let docs = load(
            "a: 0440\nb: '0440'\nc: on\nd: \"on\"\ne: 0x1F\nf: 1_000\ng: 1.5\nh: ~\ni: -7\nj: 09\nk: !!str 12\nl: |\n  x\n  y\n",
        )
        .unwrap();
        assert_eq!(
            docs,
            vec![
                json!({"a": 288, "b": "0440", "c": true, "d": "on", "e": 31, "f": 1000,
                "g": 1.5, "h": null, "i": -7, "j": 9.0, "k": "12", "l": "x\ny\n"})
            ]
        );
    }

    #[test]
    fn a_stream_round_trips_with_its_order_and_odd_strings() {
        let text = "---\nz: 1\na: [x, 'yes', '0o17', '1_000', \"0b1\"]\n---\n# only a comment\n---\nkind: List\nitems: []\nanchor: &x {k: v}\nref: *x\nm:\n  <<: *x\n  own: 1\n";
        let docs = load(text).unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(
            docs[0].as_object().unwrap().keys().collect::<Vec<_>>(),
            ["z", "a"]
        );
        assert_eq!(docs[1]["ref"], json!({"k": "v"}));
        assert_eq!(docs[1]["m"], json!({"k": "v", "own": 1}));
        let again = load(&emit(&docs)).unwrap();
        assert_eq!(again, docs);
    }

    #[test]
    fn what_json_cannot_hold_is_an_error() {
        assert!(load("a: .inf\n").is_err());
        assert!(load("a: [1\n").is_err());
        assert!(load("a: *nowhere\n").is_err());
    }

    #[test]
    fn deep_nesting_is_refused_not_a_crash() {
        let deep = format!("{}x", "- ".repeat(100_000));
        let err = load(&deep).unwrap_err();
        assert!(err.contains("nested deeper than 100"), "{err}");
        let flow = format!("{}{}", "[".repeat(5_000), "]".repeat(5_000));
        assert!(load(&flow).is_err());
        let ok = format!("{}x", "- ".repeat(50));
        assert!(load(&ok).is_ok());
    }

    #[test]
    fn an_alias_bomb_is_refused_by_its_expanded_size() {
        let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            let prev = format!("*a{}", i - 1);
            bomb.push_str(&format!("a{i}: &a{i} [{}]\n", vec![prev; 9].join(", ")));
        }
        let err = load(&bomb).unwrap_err();
        assert!(err.contains("more than 1000000 nodes"), "{err}");
        // Aliases below the bound still resolve.
        let fine = load("a: &a {k: v}\nb: *a\n").unwrap();
        assert_eq!(fine[0]["b"]["k"], "v");
    }
}

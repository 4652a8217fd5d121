//! Log set-up: text or JSON lines on stderr, level from `RUST_LOG`
//! (default `info`).
//!
//! The text format is tracing-subscriber's own. The JSON format is written
//! here: tracing 0.1 records a field as a number, a bool, a string or a
//! `Debug` rendering, with no arrays (short of the unstable `valuable`
//! feature), and consumers need `sans` as a real array. So JSON lines are
//! one object each, `timestamp`, `level`, then the event's fields in order
//! exactly as tracing-subscriber's flattened JSON wrote them, except that a
//! [list field](LIST_FIELDS) displayed by [`crate::log::clean_list`]
//! becomes an array of its (escaped) items. Every JSON string is written
//! with the characters [`crate::log::is_unsafe_char`] names escaped as
//! `\uXXXX`, so no raw line separator or bidi control reaches the line even
//! from a field that was not cleaned. The event schema is in
//! `docs/logging.md`.

use std::fmt;
use std::io;

use serde::Serialize;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

/// The log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Installs the global subscriber; a second call is a no-op.
pub fn init(format: LogFormat) {
    init_with_default(format, "info");
}

/// Installs the global subscriber with another default level (the demo
/// keeps its narration readable by logging only warnings unless asked).
pub fn init_with_default(format: LogFormat, default: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .fmt_fields(JsonFields::new())
            .event_format(JsonLines::default())
            .try_init(),
    };
}

/// Fields whose value is a list: in JSON, a value displayed by
/// [`crate::log::clean_list`] is written as an array of its items.
pub const LIST_FIELDS: &[&str] = &["sans"];

/// The JSON event format: one object per line.
#[derive(Debug, Default)]
pub struct JsonLines {
    timer: SystemTime,
}

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'w> FormatFields<'w> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut timestamp = String::new();
        self.timer.format_time(&mut Writer::new(&mut timestamp))?;
        let mut obj = JsonObject::default();
        obj.entry("timestamp", &timestamp);
        obj.entry("level", event.metadata().level().as_str());
        event.record(&mut JsonVisitor(&mut obj));
        if let Some(scope) = ctx.event_scope() {
            let spans: Vec<serde_json::Value> = scope
                .from_root()
                .map(|span| {
                    let ext = span.extensions();
                    let mut fields = ext
                        .get::<FormattedFields<N>>()
                        .and_then(|f| serde_json::from_str(f).ok())
                        .unwrap_or_else(serde_json::Map::new);
                    fields.insert("name".into(), span.metadata().name().into());
                    serde_json::Value::Object(fields)
                })
                .collect();
            if let Some(current) = spans.last() {
                obj.entry("span", current);
            }
            obj.entry("spans", &spans);
        }
        writer.write_str(&obj.finish()?)?;
        writer.write_char('\n')
    }
}

/// A JSON object written entry by entry.
#[derive(Debug, Default)]
struct JsonObject {
    buf: Vec<u8>,
    failed: bool,
}

impl JsonObject {
    fn entry<V: Serialize + ?Sized>(&mut self, key: &str, value: &V) {
        self.buf.push(if self.buf.is_empty() { b'{' } else { b',' });
        let mut ser = serde_json::Serializer::with_formatter(&mut self.buf, SafeStrings);
        let ok = key.serialize(&mut ser).is_ok();
        self.buf.push(b':');
        let mut ser = serde_json::Serializer::with_formatter(&mut self.buf, SafeStrings);
        self.failed |= !ok || value.serialize(&mut ser).is_err();
    }

    fn finish(mut self) -> Result<String, fmt::Error> {
        if self.buf.is_empty() {
            self.buf.push(b'{');
        }
        self.buf.push(b'}');
        if self.failed {
            return Err(fmt::Error);
        }
        String::from_utf8(self.buf).map_err(|_| fmt::Error)
    }
}

/// Records fields as tracing-serde's map visitor does (same names, same
/// JSON types), except list fields.
struct JsonVisitor<'a>(&'a mut JsonObject);

impl Visit for JsonVisitor<'_> {
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.entry(field.name(), &value);
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.entry(field.name(), &value);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.entry(field.name(), &value);
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.entry(field.name(), &value);
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.entry(field.name(), value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let text = format!("{value:?}");
        if LIST_FIELDS.contains(&field.name()) {
            if let Some(items) = crate::log::parse_list(&text) {
                self.0.entry(field.name(), &items);
                return;
            }
        }
        self.0.entry(field.name(), &text);
    }
}

/// serde_json's compact formatter, escaping in strings also what JSON
/// allows raw but a terminal or a line-oriented reader does not take
/// kindly: DEL, C1 controls, line/paragraph separators, bidi controls.
struct SafeStrings;

impl serde_json::ser::Formatter for SafeStrings {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut run = 0;
        for (i, c) in fragment.char_indices() {
            if crate::log::is_unsafe_char(c) {
                writer.write_all(&fragment.as_bytes()[run..i])?;
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    write!(writer, "\\u{unit:04x}")?;
                }
                run = i + c.len_utf8();
            }
        }
        writer.write_all(&fragment.as_bytes()[run..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::fmt::MakeWriter;

    /// Collects what the subscriber writes.
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Sink {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Sink {
        type Writer = Sink;
        fn make_writer(&'a self) -> Sink {
            self.clone()
        }
    }

    fn json_of(f: impl FnOnce()) -> Vec<serde_json::Value> {
        let sink = Sink::default();
        let sub = tracing_subscriber::fmt()
            .with_writer(sink.clone())
            .with_max_level(tracing::Level::TRACE)
            .fmt_fields(JsonFields::new())
            .event_format(JsonLines::default())
            .finish();
        tracing::subscriber::with_default(sub, f);
        let out = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        assert!(out.ends_with('\n'), "{out:?}");
        out.lines()
            .map(|l| {
                assert!(!l.chars().any(crate::log::is_unsafe_char), "raw in {l:?}");
                serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))
            })
            .collect()
    }

    #[test]
    fn fields_keep_their_names_and_types_and_sans_is_an_array() {
        let sans = vec!["a.svc".to_string(), "b\n\"c\"".to_string()];
        let v = json_of(|| {
            tracing::warn!(
                route = %"server", n = 3u64, neg = -2i64, ok = true, ratio = 0.5,
                s = "plain", took = ?std::time::Duration::from_millis(1500),
                sans = %crate::log::clean_list(&sans), "handshake refused"
            )
        });
        assert_eq!(v.len(), 1);
        let e = &v[0];
        let keys: Vec<&str> = e.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys.len(), 11, "{e}");
        assert!(e["timestamp"].as_str().unwrap().ends_with('Z'));
        assert_eq!(e["level"], "WARN");
        assert_eq!(e["message"], "handshake refused");
        assert_eq!(e["route"], "server");
        assert_eq!(e["n"], 3);
        assert_eq!(e["neg"], -2);
        assert_eq!(e["ok"], true);
        assert_eq!(e["ratio"], 0.5);
        assert_eq!(e["s"], "plain");
        assert_eq!(e["took"], "1.5s");
        assert_eq!(e["sans"], serde_json::json!(["a.svc", "b\\n\\\"c\\\""]));
    }

    #[test]
    fn a_list_field_not_shaped_like_a_clean_list_stays_a_string() {
        let v = json_of(|| tracing::info!(sans = "[not, a list", other = "[\"x\"]", "m"));
        assert_eq!(v[0]["sans"], "[not, a list");
        assert_eq!(v[0]["other"], "[\"x\"]", "only list fields become arrays");
    }

    #[test]
    fn unsafe_characters_are_escaped_even_in_fields_nobody_cleaned() {
        let raw = "a\nb\u{2028}c\u{202e}d\u{85}e\u{7f}f\u{e0041}";
        let v = json_of(|| tracing::info!(subject = raw, "m {raw}"));
        // The JSON escapes decode back to the original: nothing is lost.
        assert_eq!(v[0]["subject"], raw);
        assert_eq!(v[0]["message"], format!("m {raw}"));
    }

    #[test]
    fn spans_are_listed_like_tracing_subscriber_lists_them() {
        let v = json_of(|| {
            let outer = tracing::info_span!("outer", id = 7u64);
            let _o = outer.enter();
            let inner = tracing::info_span!("inner");
            let _i = inner.enter();
            tracing::info!("inside");
        });
        assert_eq!(v[0]["span"]["name"], "inner");
        assert_eq!(v[0]["spans"][0]["name"], "outer");
        assert_eq!(v[0]["spans"][0]["id"], 7);
        let v = json_of(|| tracing::info!("outside"));
        assert!(v[0].get("spans").is_none());
    }
}

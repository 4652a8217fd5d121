//! `_info` gauges, rendered by us rather than by the recorder. An info
//! metric has exactly one series per thing it describes, always at 1, and a
//! replaced label set (a credential revision no longer in force) must
//! disappear from `/metrics`, not linger at 0 where every query needs
//! `== 1`. The `metrics` recorder cannot delete one series, and an idle
//! timeout would also drop real gauges that merely stay unchanged, so these
//! families are held here as whole sets of label sets and appended to the
//! exposition the recorder's handle renders, with their own `# HELP` and
//! `# TYPE`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Mutex, MutexGuard};

use metrics_exporter_prometheus::PrometheusHandle;

/// One series' labels, in the order they are written.
pub type Labels = Vec<(&'static str, String)>;

/// One info family: its description and every series it has now.
struct Family {
    help: &'static str,
    series: Vec<Labels>,
}

/// Every info family, by metric name (rendered in name order).
static FAMILIES: Mutex<BTreeMap<&'static str, Family>> = Mutex::new(BTreeMap::new());

fn families() -> MutexGuard<'static, BTreeMap<&'static str, Family>> {
    FAMILIES.lock().unwrap_or_else(|e| e.into_inner())
}

/// Makes `series` the whole of info family `name`: each label set at 1,
/// every label set not listed gone from the next scrape. Duplicates
/// collapse into one series.
pub fn set(name: &'static str, help: &'static str, mut series: Vec<Labels>) {
    series.sort();
    series.dedup();
    families().insert(name, Family { help, series });
}

/// The `/metrics` page: what the recorder renders, then the info families.
pub fn render(handle: &PrometheusHandle) -> String {
    let mut text = handle.render();
    append(&mut text);
    text
}

/// Appends every info family that has a series, in the text format 0.0.4.
fn append(out: &mut String) {
    for (name, family) in families().iter() {
        if family.series.is_empty() {
            continue;
        }
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        let _ = writeln!(out, "# HELP {name} {}", escape_help(family.help));
        let _ = writeln!(out, "# TYPE {name} gauge");
        for labels in &family.series {
            out.push_str(name);
            push_labels(out, labels);
            out.push_str(" 1\n");
        }
        out.push('\n');
    }
}

/// `{k="v",...}`, nothing for an empty label set.
fn push_labels(out: &mut String, labels: &Labels) {
    if labels.is_empty() {
        return;
    }
    out.push('{');
    for (i, (key, value)) in labels.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{key}=\"{}\"", escape_label_value(value));
    }
    out.push('}');
}

/// A label value as the text format wants it: backslash, double quote and
/// line feed escaped (a source path may hold any of them).
fn escape_label_value(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

/// A `# HELP` text: backslash and line feed escaped.
fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendered(name: &'static str) -> String {
        let mut out = String::new();
        append(&mut out);
        out.split("\n\n")
            .filter(|block| block.contains(&format!("# TYPE {name} ")))
            .map(|block| format!("{block}\n"))
            .collect()
    }

    #[test]
    fn a_family_is_replaced_whole_and_escaped() {
        const NAME: &str = "test_info_replaced";
        let one = |r: &str| {
            vec![
                ("source", "/a \"q\"\\\n".to_string()),
                ("revision", r.into()),
            ]
        };
        set(NAME, "help \\ line\nnext", vec![one("old")]);
        set(NAME, "help \\ line\nnext", vec![one("new"), one("new")]);
        let text = rendered(NAME);
        assert_eq!(
            text,
            "# HELP test_info_replaced help \\\\ line\\nnext\n\
             # TYPE test_info_replaced gauge\n\
             test_info_replaced{source=\"/a \\\"q\\\"\\\\\\n\",revision=\"new\"} 1\n"
        );
    }

    #[test]
    fn an_empty_family_renders_nothing() {
        const NAME: &str = "test_info_empty";
        set(NAME, "h", vec![vec![]]);
        assert_eq!(
            rendered(NAME),
            "# HELP test_info_empty h\n# TYPE test_info_empty gauge\ntest_info_empty 1\n"
        );
        set(NAME, "h", vec![]);
        assert_eq!(rendered(NAME), "");
    }
}

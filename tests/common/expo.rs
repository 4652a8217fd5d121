//! A parser for the Prometheus text exposition format (0.0.4), so tests
//! assert on metric families, `# TYPE`s and exact label sets instead of on
//! substrings of the page.

use std::collections::{BTreeMap, HashMap};

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A parsed `/metrics` page.
#[derive(Debug, Default)]
pub struct Exposition {
    /// Family name → `counter`, `gauge`, `histogram`, ...
    pub types: HashMap<String, String>,
    pub helps: HashMap<String, String>,
    pub samples: Vec<Sample>,
}

impl Exposition {
    /// Parses a page; every sample must belong to a family with a `# TYPE`.
    pub fn parse(text: &str) -> Result<Exposition, String> {
        let mut e = Exposition::default();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim_end();
            let err = |why: &str| format!("line {}: {why}: {line:?}", n + 1);
            if line.is_empty() {
                continue;
            }
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, ty) = rest.split_once(' ').ok_or_else(|| err("bad TYPE"))?;
                if e.types.insert(name.into(), ty.trim().into()).is_some() {
                    return Err(err("duplicate TYPE"));
                }
            } else if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, help) = rest.split_once(' ').ok_or_else(|| err("bad HELP"))?;
                e.helps.insert(name.into(), help.into());
            } else if line.starts_with('#') {
                continue;
            } else {
                let s = parse_sample(line).map_err(|why| err(&why))?;
                if e.family_type(&s.name).is_none() {
                    return Err(err("sample without a # TYPE"));
                }
                e.samples.push(s);
            }
        }
        Ok(e)
    }

    /// The declared type of the family a sample name belongs to.
    pub fn family_type(&self, sample: &str) -> Option<&str> {
        if let Some(t) = self.types.get(sample) {
            return Some(t);
        }
        ["_bucket", "_sum", "_count"].iter().find_map(|suffix| {
            let base = sample.strip_suffix(suffix)?;
            match self.types.get(base).map(String::as_str) {
                Some(t @ ("histogram" | "summary")) => Some(t),
                _ => None,
            }
        })
    }

    /// Every sample of `name`.
    pub fn series(&self, name: &str) -> Vec<&Sample> {
        self.samples.iter().filter(|s| s.name == name).collect()
    }

    /// The value of the sample with exactly this label set.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let want: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut hits = self
            .samples
            .iter()
            .filter(|s| s.name == name && s.labels == want);
        let first = hits.next()?;
        assert!(hits.next().is_none(), "duplicate series {name}{labels:?}");
        Some(first.value)
    }

    /// Like [`value`](Self::value), panicking when the series is missing.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.value(name, labels)
            .unwrap_or_else(|| panic!("no series {name}{labels:?}"))
    }
}

fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line.find(['{', ' ']).ok_or("no value")?;
    let name = &line[..name_end];
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    {
        return Err(format!("bad metric name {name:?}"));
    }
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(after) = rest.strip_prefix('{') {
        let (parsed, tail) = parse_labels(after)?;
        labels = parsed;
        rest = tail;
    }
    let mut fields = rest.split_whitespace();
    let value = fields.next().ok_or("no value")?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        v => v.parse::<f64>().map_err(|_| format!("bad value {v:?}"))?,
    };
    if let Some(ts) = fields.next() {
        ts.parse::<i64>()
            .map_err(|_| format!("bad timestamp {ts:?}"))?;
    }
    if fields.next().is_some() {
        return Err("trailing fields".into());
    }
    Ok(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// Parses `k="v",...}` and returns the labels and what follows the `}`.
fn parse_labels(mut s: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    loop {
        s = s.trim_start_matches([',', ' ']);
        if let Some(tail) = s.strip_prefix('}') {
            return Ok((labels, tail));
        }
        let (key, after) = s.split_once("=\"").ok_or("bad label")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next().ok_or("unterminated label value")? {
                (i, '"') => break i,
                (_, '\\') => match chars.next().ok_or("bad escape")?.1 {
                    'n' => value.push('\n'),
                    c @ ('\\' | '"') => value.push(c),
                    c => return Err(format!("bad escape \\{c}")),
                },
                (_, c) => value.push(c),
            }
        };
        if labels.insert(key.trim().to_string(), value).is_some() {
            return Err(format!("duplicate label {key}"));
        }
        s = &after[end + 1..];
    }
}

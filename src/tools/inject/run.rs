//! `inject` / `uninject` over files or stdin: every document read and
//! changed before anything is written, so an error writes nothing.

use std::io::{Read, Write};

use serde_json::Value;

use super::manifest::{self, Action};
use super::{yaml, Options};
use crate::cli::InjectArgs;

/// What one input said and how to write it back.
struct Input<'a> {
    name: &'a str,
    json: bool,
    docs: Vec<Value>,
}

/// How messages name an input: its file name, or `stdin` for `-`.
pub fn input_name(name: &str) -> &str {
    if name == "-" {
        "stdin"
    } else {
        name
    }
}

/// The text of one input: a file, or stdin for `-`.
pub fn read_input(name: &str) -> Result<String, String> {
    if name == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| format!("stdin: {e}"))?;
        return Ok(s);
    }
    std::fs::read_to_string(name).map_err(|e| format!("{name}: {e}"))
}

/// The documents of one input: a JSON stream when it starts with `{` or
/// `[`, else YAML.
pub fn parse(text: &str) -> Result<(bool, Vec<Value>), String> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        let docs = serde_json::Deserializer::from_str(text)
            .into_iter::<Value>()
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("JSON: {e}"))?;
        return Ok((true, docs));
    }
    Ok((false, yaml::load(text)?))
}

/// The output for one input's documents.
pub fn render(json: bool, docs: &[Value]) -> String {
    if json {
        docs.iter()
            .map(|d| serde_json::to_string_pretty(d).expect("a Value serializes") + "\n")
            .collect()
    } else {
        yaml::emit(docs)
    }
}

/// Applies `action` to every document of every input; the text to write,
/// or the first error, naming the input (file name) it is in. Every input
/// is read and changed before any text is returned.
pub fn transform(
    texts: &[(String, String)],
    action: Action,
    opts: &Options,
) -> Result<String, String> {
    let mut inputs = Vec::new();
    for (name, text) in texts {
        let name = input_name(name);
        let (json, docs) = parse(text).map_err(|e| format!("{name}: {e}"))?;
        inputs.push(Input { name, json, docs });
    }
    let mut out = String::new();
    for input in inputs {
        let docs = input
            .docs
            .iter()
            .map(|d| manifest::apply(d, action, opts))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("{}: {e}", input.name))?;
        out.push_str(&render(input.json, &docs));
    }
    Ok(out)
}

/// `mtls-sidecar inject|uninject`: 0, or 2 with the message on stderr and
/// nothing on stdout.
pub fn run(args: &InjectArgs, action: Action) -> u8 {
    let opts = Options {
        image: args.image.clone().unwrap_or_else(super::default_image),
        ..Options::default()
    };
    let result = args
        .filename
        .iter()
        .map(|f| read_input(f).map(|t| (f.clone(), t)))
        .collect::<Result<Vec<_>, _>>()
        .and_then(|texts| transform(&texts, action, &opts));
    match result {
        Ok(text) => {
            let mut stdout = std::io::stdout().lock();
            match stdout
                .write_all(text.as_bytes())
                .and_then(|()| stdout.flush())
            {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("error: writing stdout: {e}");
                    1
                }
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            2
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `inject_manifest` fuzz target: a JSON number of 181
    /// digits read as a double one ulp off the nearest, written as such,
    /// and read one ulp further off on the next pass.
    #[test]
    fn a_json_number_is_written_back_as_read() {
        for number in [
            "3".repeat(181),
            "0.1".into(),
            "1e308".into(),
            "-2.5e-300".into(),
        ] {
            let text = format!("{{}}\n{number}\n");
            let (json, docs) = parse(&text).unwrap();
            let written = render(json, &docs);
            let (_, again) = parse(&written).unwrap();
            assert_eq!(again, docs, "{written}");
            let read: f64 = number.parse().unwrap();
            assert_eq!(docs[1].as_f64(), Some(read), "{number}: the nearest double");
        }
    }
}

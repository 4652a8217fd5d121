//! The architecture, checked: every `crate::` import in `src/` points down
//! the layer order written in `src/lib.rs`, and no two sibling files of a
//! folder import each other round a circle. Test modules (`#[cfg(test)]`)
//! may use anything (they mint certificates with the development PKI in
//! `ops/`); comments and string literals are not code.
//!
//! A failure names the file, the import and both layers: move the item the
//! lower layer needs down to it (as `proxy/settings.rs` and
//! `reason::HandshakeTooLarge` were), rather than adding an exception here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, top first. A file may import from its own top-level module
/// and from any module in a later group; never from an earlier one, nor
/// from another module of its own group.
const LAYERS: &[&[&str]] = &[
    &["ops"],
    &["app"],
    &["admin"],
    &["cli"],
    &["config"],
    &["sandbox"],
    &["proxy"],
    &["tls"],
    &["credentials"],
    &["metrics", "logging"],
    &["logsafe"],
    &["reason"],
    &[
        "identity",
        "systemd",
        "memtrim",
        "fdlimit",
        "resident",
        "process_metrics",
    ],
    &["switch"],
];

fn rank(module: &str) -> Option<usize> {
    LAYERS.iter().position(|group| group.contains(&module))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The source with comments, string and char literals blanked out (their
/// newlines kept, so line numbers still match).
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    let blank = |out: &mut String, s: &[u8]| {
        for &c in s {
            out.push(if c == b'\n' { '\n' } else { ' ' });
        }
    };
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            let end = rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest.starts_with(b"/*") {
            let end = src[i + 2..].find("*/").map_or(rest.len(), |e| e + 4);
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest.starts_with(b"r#\"") || rest.starts_with(b"r\"") {
            let hashes = rest[1..].iter().take_while(|&&c| c == b'#').count();
            let close = format!("\"{}", "#".repeat(hashes));
            let open = 2 + hashes;
            let end = src[i + open..]
                .find(&close)
                .map_or(rest.len(), |e| open + e + close.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest[0] == b'"' {
            let mut j = 1;
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest[0] == b'\'' && rest.len() > 3 && (rest[2] == b'\'' || rest[1] == b'\\') {
            // A char literal ('x', '\n', '\u{..}'), not a lifetime.
            let end = rest[2..]
                .iter()
                .position(|&c| c == b'\'')
                .map_or(rest.len(), |e| e + 3);
            blank(&mut out, &rest[..end]);
            i += end;
        } else {
            let ch = src[i..].chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// `code` without its `#[cfg(test)]` items (a module or a single item),
/// blanked like comments.
fn without_tests(code: &str) -> String {
    let mut out = code.to_string();
    let mut from = 0;
    while let Some(at) = out[from..].find("#[cfg(test)]").map(|a| a + from) {
        let after = at + "#[cfg(test)]".len();
        let bytes = out.as_bytes();
        // The item ends at its first `;` before any `{`, or at the brace
        // that closes its first `{`.
        let mut depth = 0usize;
        let mut end = out.len();
        for (k, &c) in bytes[after..].iter().enumerate() {
            match c {
                b';' if depth == 0 => {
                    end = after + k + 1;
                    break;
                }
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = after + k + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        let blanked: String = out[at..end]
            .chars()
            .map(|c| if c == '\n' { '\n' } else { ' ' })
            .collect();
        out.replace_range(at..end, &blanked);
        from = end;
    }
    out
}

/// Every `crate::a::b…` path in `code`, with its line; `crate::{a, b}`
/// groups give one path per member.
fn crate_paths(code: &str) -> Vec<(usize, Vec<String>)> {
    let mut found = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            let before = rest[..at].chars().last();
            rest = &rest[at + "crate::".len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue; // e.g. `mtls_sidecar::`… is not this crate's path
            }
            if let Some(group) = rest.strip_prefix('{') {
                let inner = group.split('}').next().unwrap_or("");
                for member in inner.split(',') {
                    let segs = segments(member.trim());
                    if !segs.is_empty() {
                        found.push((n + 1, segs));
                    }
                }
            } else {
                found.push((n + 1, segments(rest)));
            }
        }
    }
    found
}

fn segments(s: &str) -> Vec<String> {
    let mut segs = Vec::new();
    let mut rest = s;
    loop {
        let ident: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if ident.is_empty() {
            break;
        }
        rest = &rest[ident.len()..];
        segs.push(ident);
        match rest.strip_prefix("::") {
            Some(r) => rest = r,
            None => break,
        }
    }
    segs
}

/// `src/proxy/route.rs` -> ["proxy", "route"]; `src/proxy/mod.rs` ->
/// ["proxy"]; `src/ops/check.rs` -> ["ops", "check"].
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut segs: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if segs.last().is_some_and(|s| s == "mod") {
        segs.pop();
    }
    segs
}

struct Source {
    module: Vec<String>,
    path: PathBuf,
    code: String,
}

fn sources() -> Vec<Source> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files
        .into_iter()
        .filter(|f| {
            !matches!(
                f.file_name().and_then(|n| n.to_str()),
                Some("lib.rs" | "main.rs")
            ) || f.parent() != Some(&src)
        })
        .map(|f| {
            let text = std::fs::read_to_string(&f).unwrap();
            Source {
                module: module_of(&src, &f),
                code: without_tests(&code_only(&text)),
                path: f,
            }
        })
        .collect()
}

#[test]
fn every_import_points_down_the_layers() {
    let top_level: BTreeSet<String> = LAYERS
        .iter()
        .flat_map(|g| g.iter().map(|m| m.to_string()))
        .collect();
    let mut wrong = Vec::new();
    for s in sources() {
        let own = &s.module[0];
        let Some(own_rank) = rank(own) else {
            wrong.push(format!(
                "{}: module `{own}` is in no layer of tests/layers.rs",
                s.path.display()
            ));
            continue;
        };
        for (line, path) in crate_paths(&s.code) {
            let Some(target) = path.first() else { continue };
            if target == own || !top_level.contains(target) {
                continue; // its own module, or an item of the crate root
            }
            let target_rank = rank(target).unwrap();
            if target_rank <= own_rank {
                wrong.push(format!(
                    "{}:{line}: `{own}` (layer {own_rank}) imports crate::{} (layer {target_rank})",
                    s.path.display(),
                    path.join("::")
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports pointing up or sideways:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn every_top_level_module_has_a_layer() {
    let lib =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    for line in lib.lines() {
        if let Some(m) = line
            .strip_prefix("pub mod ")
            .and_then(|m| m.strip_suffix(';'))
        {
            assert!(
                rank(m).is_some(),
                "src/lib.rs declares `{m}`, which has no layer here"
            );
        }
    }
}

/// The sibling modules (files of one folder, not its `mod.rs`) a file
/// imports, as `super::x` or by its full path.
fn sibling_imports(s: &Source, siblings: &BTreeSet<String>) -> BTreeSet<String> {
    let parent = &s.module[..s.module.len() - 1];
    let mut out = BTreeSet::new();
    for (_, path) in crate_paths(&s.code) {
        if path.len() > parent.len() && path[..parent.len()] == *parent {
            out.insert(path[parent.len()].clone());
        }
    }
    for (n, _) in s.code.match_indices("super::") {
        let segs = segments(&s.code[n + "super::".len()..]);
        if let Some(first) = segs.first() {
            out.insert(first.clone());
        }
        // `super::{a, b}`
        if let Some(group) = s.code[n + "super::".len()..].strip_prefix('{') {
            for member in group.split('}').next().unwrap_or("").split(',') {
                if let Some(first) = segments(member.trim()).first() {
                    out.insert(first.clone());
                }
            }
        }
    }
    out.retain(|m| siblings.contains(m) && Some(m) != s.module.last());
    out
}

#[test]
fn no_sibling_files_import_each_other_round_a_circle() {
    let sources = sources();
    // Folder -> its child modules.
    let mut children: BTreeMap<Vec<String>, BTreeSet<String>> = BTreeMap::new();
    for s in &sources {
        if s.module.len() >= 2 {
            let (parent, name) = s.module.split_at(s.module.len() - 1);
            children
                .entry(parent.to_vec())
                .or_default()
                .insert(name[0].clone());
        }
    }
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for s in &sources {
        if s.module.len() < 2 {
            continue;
        }
        let parent = s.module[..s.module.len() - 1].to_vec();
        for to in sibling_imports(s, &children[&parent]) {
            let mut target = parent.clone();
            target.push(to);
            edges.entry(s.module.clone()).or_default().insert(target);
        }
    }
    // Depth-first search for a back edge.
    fn visit(
        node: &Vec<String>,
        edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        state: &mut BTreeMap<Vec<String>, u8>,
        stack: &mut Vec<Vec<String>>,
    ) -> Option<Vec<Vec<String>>> {
        state.insert(node.clone(), 1);
        stack.push(node.clone());
        for next in edges.get(node).into_iter().flatten() {
            match state.get(next) {
                Some(1) => {
                    let from = stack.iter().position(|n| n == next).unwrap();
                    let mut circle = stack[from..].to_vec();
                    circle.push(next.clone());
                    return Some(circle);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(next, edges, state, stack) {
                        return Some(c);
                    }
                }
            }
        }
        stack.pop();
        state.insert(node.clone(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in edges.keys() {
        if !state.contains_key(node) {
            if let Some(circle) = visit(node, &edges, &mut state, &mut Vec::new()) {
                let names: Vec<String> = circle.iter().map(|m| m.join("::")).collect();
                panic!("sibling modules import each other: {}", names.join(" -> "));
            }
        }
    }
}

#[test]
fn the_checker_sees_what_it_must() {
    // Positive controls: an upward import in code is found; the same in a
    // comment, a string or a test module is not.
    let code = "use crate::proxy::route::Route;\n// crate::ops::pki\nlet s = \"crate::app\";\n#[cfg(test)]\nmod tests { use crate::ops::pki::DevCa; fn f() { let c = '{'; } }\nfn g() { crate::{tls, app}; }\n";
    let cleaned = without_tests(&code_only(code));
    let found: Vec<String> = crate_paths(&cleaned)
        .into_iter()
        .map(|(line, p)| format!("{line}:{}", p.join("::")))
        .collect();
    assert_eq!(found, ["1:proxy::route::Route", "6:tls", "6:app"]);
    assert!(rank("ops") < rank("proxy") && rank("proxy") < rank("reason"));
}

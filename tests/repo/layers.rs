//! The architecture, checked: every path in `src/` that reaches another
//! module from the crate root (`crate::`, groups included) or by climbing
//! (`super::super::`) points down the layer table of `ARCHITECTURE.md`
//! (between its `layers: begin` and `layers: end` markers; `src/lib.rs`'s
//! doc states the same order), and no two sibling modules of a folder (files or sub-folders, a
//! sub-folder counting every file below it) import each other round a
//! circle. Test modules (`#[cfg(test)]`) may use anything (they mint
//! certificates with the development PKI, `pki`); comments and string
//! literals are not code.
//!
//! A failure names the file, the import and both layers: move the item the
//! lower layer needs down to it (as `proxy/settings.rs` and
//! `reason::HandshakeTooLarge` were), rather than adding an exception here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The file whose layer table this test enforces.
const TABLE_FILE: &str = "ARCHITECTURE.md";
const TABLE_BEGIN: &str = "<!-- layers: begin";
const TABLE_END: &str = "<!-- layers: end";

/// The layers, top first, as the markdown table between `TABLE_BEGIN` and
/// `TABLE_END` in `text` states them: one row a layer, its modules the
/// backticked names of the row's first cell (`proxy/` a folder, `reason.rs`
/// a file). A file may import from its own top-level module and from any
/// module in a later row; never from an earlier one, nor from another
/// module of its own row.
fn parse_layers(text: &str) -> Result<Vec<Vec<String>>, String> {
    let begin = text
        .find(TABLE_BEGIN)
        .ok_or_else(|| format!("no `{TABLE_BEGIN}` marker"))?;
    let end = text[begin..]
        .find(TABLE_END)
        .map(|e| begin + e)
        .ok_or_else(|| format!("no `{TABLE_END}` marker after the begin marker"))?;
    let mut layers = Vec::new();
    for line in text[begin..end].lines().skip(1) {
        let Some(row) = line.trim().strip_prefix('|') else {
            continue;
        };
        let first = row.split('|').next().unwrap_or("").trim();
        if first.is_empty() || first.starts_with('-') || first == "layer" {
            continue; // the header and the separator
        }
        let modules: Vec<String> = first
            .split('`')
            .skip(1)
            .step_by(2)
            .map(|m| m.trim_end_matches('/').trim_end_matches(".rs").to_string())
            .collect();
        if modules.is_empty() {
            return Err(format!("a row names no module in backticks: {line:?}"));
        }
        layers.push(modules);
    }
    if layers.is_empty() {
        return Err("the table has no rows".to_string());
    }
    Ok(layers)
}

/// The layers of `ARCHITECTURE.md`, read once.
fn layers() -> &'static [Vec<String>] {
    static LAYERS: std::sync::OnceLock<Vec<Vec<String>>> = std::sync::OnceLock::new();
    LAYERS.get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(TABLE_FILE);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{TABLE_FILE}: {e}"));
        parse_layers(&text).unwrap_or_else(|e| panic!("{TABLE_FILE}'s layer table: {e}"))
    })
}

fn rank(module: &str) -> Option<usize> {
    layers()
        .iter()
        .position(|group| group.iter().any(|m| m == module))
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
        // that closes its first `{`; a field or struct-literal entry
        // (`#[cfg(test)] name: T,`) at its `,`, or before the `}` that
        // closes what holds it.
        let mut depth = 0usize;
        let mut parens = 0usize;
        let mut end = out.len();
        for (k, &c) in bytes[after..].iter().enumerate() {
            match c {
                b'(' | b'[' | b'<' if depth == 0 => parens += 1,
                b')' | b']' | b'>' if depth == 0 => parens = parens.saturating_sub(1),
                b';' if depth == 0 => {
                    end = after + k + 1;
                    break;
                }
                b',' if depth == 0 && parens == 0 => {
                    end = after + k + 1;
                    break;
                }
                b'{' => depth += 1,
                b'}' if depth == 0 => {
                    end = after + k;
                    break;
                }
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

/// Every path in `code` that starts at the crate root (`crate::`,
/// `$crate::`) or climbs out of `module` (`super::`, `super::super::`…),
/// resolved from the crate root, with its line. A group gives one path per
/// member, nested (`crate::{a::{b, c}, d}`) or over several lines as
/// rustfmt writes a long one.
fn crate_paths(code: &str, module: &[String]) -> Vec<(usize, Vec<String>)> {
    let b = code.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let preceded = i > 0 && (is_ident(b[i - 1]) || b[i - 1] == b':');
        let base = if preceded {
            None
        } else if code[i..].starts_with("crate::") {
            i += "crate::".len();
            Some(Vec::new())
        } else if code[i..].starts_with("super::") {
            let mut up = 0;
            while code[i..].starts_with("super::") {
                i += "super::".len();
                up += 1;
            }
            Some(module[..module.len().saturating_sub(up)].to_vec())
        } else {
            None
        };
        match base {
            Some(base) => i = use_tree(code, i, base, &mut found),
            None => i += 1,
        }
    }
    found
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

fn line_of(code: &str, at: usize) -> usize {
    code[..at].matches('\n').count() + 1
}

/// Reads the path (or `{…}` group of paths) at `at` below `prefix` into
/// `out`; returns where it ends.
fn use_tree(
    code: &str,
    mut at: usize,
    mut prefix: Vec<String>,
    out: &mut Vec<(usize, Vec<String>)>,
) -> usize {
    let b = code.as_bytes();
    let skip_space = |mut k: usize| {
        while k < b.len() && b[k].is_ascii_whitespace() {
            k += 1;
        }
        k
    };
    let from = skip_space(at);
    loop {
        at = skip_space(at);
        if at < b.len() && b[at] == b'{' {
            at += 1;
            loop {
                at = skip_space(at);
                if at >= b.len() {
                    return at;
                }
                match b[at] {
                    b'}' => return at + 1,
                    b',' => at += 1,
                    _ => {
                        let before = at;
                        at = use_tree(code, at, prefix.clone(), out);
                        if at == before {
                            at += 1; // not a path: step over it
                        }
                    }
                }
            }
        }
        let len = b[at..].iter().take_while(|&&c| is_ident(c)).count();
        if len == 0 {
            break;
        }
        prefix.push(code[at..at + len].to_string());
        at += len;
        let next = skip_space(at);
        if code[next..].starts_with("::") {
            at = next + 2;
        } else {
            break;
        }
    }
    if !prefix.is_empty() {
        out.push((line_of(code, from), prefix));
    }
    at
}

/// `src/proxy/route/client.rs` -> ["proxy", "route", "client"]; `src/proxy/mod.rs` ->
/// ["proxy"]; `src/tools/check/mod.rs` -> ["ops", "check"].
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

/// The files of test modules declared apart (`#[cfg(test)] mod NAME;`):
/// test code like an inline `#[cfg(test)] mod tests { .. }`.
fn test_module_files(files: &[PathBuf]) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    for f in files {
        let code = code_only(&std::fs::read_to_string(f).unwrap());
        let dir = match f.file_stem().and_then(|s| s.to_str()) {
            Some("mod" | "lib" | "main") => f.parent().unwrap().to_path_buf(),
            Some(stem) => f.parent().unwrap().join(stem),
            None => continue,
        };
        let mut rest = code.as_str();
        while let Some(at) = rest.find("#[cfg(test)]") {
            rest = &rest[at + "#[cfg(test)]".len()..];
            let item = rest.trim_start();
            let Some(decl) = item.strip_prefix("mod ") else {
                continue;
            };
            let name: String = decl
                .trim_start()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if decl.trim_start()[name.len()..]
                .trim_start()
                .starts_with(';')
            {
                out.insert(dir.join(format!("{name}.rs")));
            }
        }
    }
    out
}

fn sources() -> Vec<Source> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let tests = test_module_files(&files);
    files
        .into_iter()
        .filter(|f| !tests.contains(f))
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
    let top_level: BTreeSet<String> = layers().iter().flatten().cloned().collect();
    let mut wrong = Vec::new();
    for s in sources() {
        let own = &s.module[0];
        let Some(own_rank) = rank(own) else {
            wrong.push(format!(
                "{}: module `{own}` is in no layer of {TABLE_FILE}'s table",
                s.path.display()
            ));
            continue;
        };
        for (line, path) in crate_paths(&s.code, &s.module) {
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

/// The top-level modules `src/lib.rs` declares.
fn declared_modules() -> Vec<String> {
    let lib =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    lib.lines()
        .filter_map(|l| l.strip_prefix("pub mod ")?.strip_suffix(';'))
        .map(str::to_string)
        .collect()
}

#[test]
fn every_top_level_module_has_a_layer() {
    let declared = declared_modules();
    assert!(declared.len() > 10, "src/lib.rs: {declared:?}");
    for m in declared {
        assert!(
            rank(&m).is_some(),
            "src/lib.rs declares `{m}`, which has no row in {TABLE_FILE}'s layer table"
        );
    }
}

#[test]
fn a_row_removed_from_the_table_leaves_its_module_without_a_layer() {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(TABLE_FILE)).unwrap();
    let full = parse_layers(&text).unwrap();
    assert_eq!(full, layers());
    let row = text
        .lines()
        .find(|l| l.starts_with("| `reason.rs`"))
        .expect("the table has a `reason.rs` row");
    let cut = parse_layers(&text.replacen(&format!("{row}\n"), "", 1)).unwrap();
    assert_eq!(cut.len(), full.len() - 1);
    let unplaced: Vec<String> = declared_modules()
        .into_iter()
        .filter(|m| !cut.iter().flatten().any(|c| c == m))
        .collect();
    assert_eq!(unplaced, ["reason"]);

    assert!(parse_layers("| `a/` | x |").is_err(), "no markers");
    assert!(
        parse_layers("<!-- layers: begin -->\n| layer | job |\n|---|---|\n<!-- layers: end -->")
            .is_err(),
        "no rows"
    );
    let two = "<!-- layers: begin -->\n| layer | job |\n|---|---|\n\
               | `a/` | x |\n| `b.rs`, `c/` | y |\n<!-- layers: end -->";
    assert_eq!(
        parse_layers(two).unwrap(),
        [
            vec!["a".to_string()],
            vec!["b".to_string(), "c".to_string()]
        ]
    );
}

#[test]
fn src_lib_rs_states_the_same_order() {
    let lib =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    let doc: Vec<&str> = lib.lines().filter_map(|l| l.strip_prefix("//!")).collect();
    let doc = doc.join(" ");
    let from = doc
        .find("Imports point down")
        .expect("src/lib.rs's doc states the layer order");
    let stated: Vec<&str> = doc[from..]
        .split("[`")
        .skip(1)
        .filter_map(|s| s.split("`]").next())
        .collect();
    let checked: Vec<&str> = layers().iter().flatten().map(String::as_str).collect();
    assert_eq!(
        stated, checked,
        "src/lib.rs's order and {TABLE_FILE}'s layer table differ"
    );
}

/// Which module imports which, as edges between the two siblings (files
/// or folders of one folder) that hold them: `proxy/route/client.rs`
/// importing `crate::proxy::transparent::dial` is the edge
/// `proxy::route` -> `proxy::transparent`. Imports of a module's own
/// ancestors, or of items its `mod.rs` defines, are not edges.
fn sibling_edges(
    imports: &[(Vec<String>, Vec<Vec<String>>)],
) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let modules: BTreeSet<&[String]> = imports
        .iter()
        .flat_map(|(m, _)| (1..=m.len()).map(move |k| &m[..k]))
        .collect();
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (module, paths) in imports {
        for path in paths {
            let common = module.iter().zip(path).take_while(|(a, b)| a == b).count();
            // Below one top-level module (across them, the layers rule),
            // and between two of its children.
            if common == 0 || common >= module.len() || common >= path.len() {
                continue;
            }
            let (from, to) = (&module[..=common], &path[..=common]);
            if modules.contains(to) {
                edges.entry(from.to_vec()).or_default().insert(to.to_vec());
            }
        }
    }
    edges
}

/// A circle in `edges`, if there is one.
fn find_circle(edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Option<Vec<Vec<String>>> {
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
            if let Some(circle) = visit(node, edges, &mut state, &mut Vec::new()) {
                return Some(circle);
            }
        }
    }
    None
}

#[test]
fn no_sibling_modules_import_each_other_round_a_circle() {
    let imports: Vec<_> = sources()
        .into_iter()
        .map(|s| {
            let paths = crate_paths(&s.code, &s.module)
                .into_iter()
                .map(|(_, p)| p)
                .collect();
            (s.module, paths)
        })
        .collect();
    if let Some(circle) = find_circle(&sibling_edges(&imports)) {
        let names: Vec<String> = circle.iter().map(|m| m.join("::")).collect();
        panic!("sibling modules import each other: {}", names.join(" -> "));
    }
}

#[test]
fn the_checker_sees_what_it_must() {
    // Positive controls: an upward import in code is found, in a group too
    // (nested, or over several lines), or climbing with `super::`; the
    // same in a comment, a string or a test module is not.
    let code = "use crate::proxy::route::Route;\n// crate::pki\nlet s = \"crate::app\";\n#[cfg(test)]\nmod tests { use crate::pki::DevCa; fn f() { let c = '{'; } }\nfn g() { crate::{tls, app}; }\nuse crate::{\n    identity::{SanPolicy, pin},\n    app::Prepared,\n};\nuse super::super::tools::certs;\n";
    let module = ["tls".to_string(), "resolve".to_string()];
    let cleaned = without_tests(&code_only(code));
    let found: Vec<String> = crate_paths(&cleaned, &module)
        .into_iter()
        .map(|(line, p)| format!("{line}:{}", p.join("::")))
        .collect();
    assert_eq!(
        found,
        [
            "1:proxy::route::Route",
            "6:tls",
            "6:app",
            "8:identity::SanPolicy",
            "8:identity::pin",
            "9:app::Prepared",
            "11:tools::certs",
        ]
    );
    assert!(rank("tools").is_some() && rank("tools") < rank("proxy"));
    assert!(rank("proxy") < rank("reason") && rank("reason") < rank("pki"));

    // A circle through files below two sibling folders (or a folder and a
    // file) is a circle between those siblings; importing an ancestor, or
    // an item of one's own `mod.rs`, is not an edge.
    let m = |s: &str| s.split("::").map(str::to_string).collect::<Vec<_>>();
    let imports = vec![
        (m("proxy::addr"), vec![m("proxy::transparent::Outbound")]),
        (m("proxy::transparent"), vec![]),
        (
            m("proxy::transparent::tproxy"),
            vec![
                m("proxy::addr::StdListener"),
                m("proxy::transparent::Rules"),
            ],
        ),
        (m("proxy::route"), vec![]),
        (m("proxy::route::client"), vec![m("proxy::route::Route")]),
    ];
    let circle = find_circle(&sibling_edges(&imports)).expect("the circle");
    assert!(circle.contains(&m("proxy::addr")) && circle.contains(&m("proxy::transparent")));
    assert_eq!(find_circle(&sibling_edges(&imports[1..])), None);
}

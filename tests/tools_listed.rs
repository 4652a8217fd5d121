//! Every external program a test runs is on the list `scripts/test.sh`
//! checks before it builds (`tests/common/tools.rs` KNOWN), and the two
//! lists agree. A tool missing from them reached a newcomer as a panic deep
//! in one test (`promtool`, 2026-12-04) instead of the one `apt-get` line
//! the script prints before anything builds.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::tools::KNOWN;

/// Programs every machine that builds this crate has: not on the list.
const BASE_SYSTEM: &[&str] = &["bash", "sh", "/bin/sh", "sleep"];

/// The quoted names that follow `marker` in `text` (the program of each
/// `Command::new` given a string literal).
fn quoted_after<'a>(text: &'a str, marker: &str) -> Vec<&'a str> {
    text.match_indices(marker)
        .filter_map(|(i, _)| {
            let rest = &text[i + marker.len()..];
            let end = rest.find('"')?;
            Some(&rest[..end])
        })
        .collect()
}

/// Every program a test file starts by name.
fn programs_run(dir: &Path) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for name in quoted_after(&text, "Command::new(\"") {
                    found.insert(name.to_string());
                }
            }
        }
    }
    found
}

#[test]
fn every_program_a_test_runs_is_on_the_list_test_sh_checks() {
    let listed: BTreeSet<&str> = KNOWN.iter().map(|(name, _)| *name).collect();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let run = programs_run(&root.join("tests"));
    assert!(run.contains("openssl"), "the scan found nothing: {run:?}");
    let unlisted: Vec<&String> = run
        .iter()
        .filter(|p| !listed.contains(p.as_str()) && !BASE_SYSTEM.contains(&p.as_str()))
        .collect();
    assert!(
        unlisted.is_empty(),
        "tests run {unlisted:?}, which tests/common/tools.rs KNOWN and \
         scripts/test.sh do not list"
    );
}

#[test]
fn test_sh_checks_the_same_list_as_known() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = std::fs::read_to_string(root.join("scripts/test.sh")).unwrap();
    let start = script
        .find("known=\"")
        .expect("scripts/test.sh known=\"...\"")
        + 7;
    let end = start + script[start..].find('"').unwrap();
    let in_script: Vec<(String, String)> = script[start..end]
        .split_whitespace()
        .map(|e| {
            let (name, package) = e.split_once(':').expect("name:package");
            (name.to_string(), package.to_string())
        })
        .collect();
    let names: Vec<&str> = in_script.iter().map(|(n, _)| n.as_str()).collect();
    let known: Vec<&str> = KNOWN.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        names, known,
        "scripts/test.sh and KNOWN list different tools"
    );
    for ((name, package), (_, known_package)) in in_script.iter().zip(KNOWN) {
        if !package.is_empty() {
            assert_eq!(package, known_package, "{name}'s package");
        }
    }
}

/// The rows between CONTRIBUTING.md's tools markers, as (name, package):
/// the first two cells, backticks and parentheses stripped.
fn contributing_rows(text: &str) -> Vec<(String, String)> {
    let begin = text
        .find("<!-- tools: begin")
        .expect("CONTRIBUTING.md: <!-- tools: begin");
    let end = begin + text[begin..].find("<!-- tools: end").expect("tools: end");
    text[begin..end]
        .lines()
        .filter_map(|l| l.trim().strip_prefix('|'))
        .map(|row| {
            row.split('|')
                .map(|c| c.trim().trim_matches(['`', '(', ')']).to_string())
                .collect::<Vec<_>>()
        })
        .filter(|cells| {
            cells.len() >= 2 && !cells[0].starts_with('-') && !cells[0].starts_with("name")
        })
        .map(|cells| (cells[0].clone(), cells[1].clone()))
        .collect()
}

#[test]
fn contributing_lists_the_same_tools_as_known() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("CONTRIBUTING.md")).unwrap();
    let rows = contributing_rows(&text);
    let known: Vec<(String, String)> = KNOWN
        .iter()
        .map(|(n, p)| (n.to_string(), p.trim_matches(['(', ')']).to_string()))
        .collect();
    assert_eq!(
        rows, known,
        "CONTRIBUTING.md's tools table and tests/common/tools.rs KNOWN differ"
    );
}

//! Every external program a test runs is on the one list,
//! `scripts/tools.list`, which `scripts/test.sh` checks before it builds,
//! and no script keeps a list of its own. A tool missing from it reaches a
//! newcomer as a panic deep in one test instead of the one install line the
//! script prints (or the install it runs) before anything builds.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::tools::known;

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
    let listed: BTreeSet<&str> = known().iter().map(|t| t.name).collect();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let run = programs_run(&root.join("tests"));
    assert!(run.contains("openssl"), "the scan found nothing: {run:?}");
    let unlisted: Vec<&String> = run
        .iter()
        .filter(|p| !listed.contains(p.as_str()) && !BASE_SYSTEM.contains(&p.as_str()))
        .collect();
    assert!(
        unlisted.is_empty(),
        "tests run {unlisted:?}, which scripts/tools.list does not list"
    );
}

#[test]
fn the_scripts_read_the_one_list() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for script in ["scripts/test.sh", ".ci/run"] {
        let text = std::fs::read_to_string(root.join(script)).unwrap();
        assert!(
            text.contains("scripts/tools.sh") || text.contains("scripts/tools.list"),
            "{script} does not use scripts/tools.list"
        );
        // A list of its own would be `name:package` words again.
        assert!(
            !text.contains("haproxy:haproxy"),
            "{script} keeps a tool list of its own"
        );
    }
    let names: Vec<&str> = known().iter().map(|t| t.name).collect();
    for needed in ["openssl", "root", "grpcio"] {
        assert!(names.contains(&needed), "scripts/tools.list lacks {needed}");
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
    let known: Vec<(String, String)> = known()
        .iter()
        .map(|t| (t.name.to_string(), t.package.to_string()))
        .collect();
    assert_eq!(
        rows, known,
        "CONTRIBUTING.md's tools table and scripts/tools.list differ"
    );
}

//! The test programs, checked: each is a top-level `tests/NAME.rs` whose
//! areas are the files under `tests/NAME/`, every one of them declared (a
//! file cargo never compiles would pass as tested), no `#[path]` include,
//! and the programs that start the binary are exactly the ones
//! tests/README.md lists, which `.ci/run` reruns against the shipped build:
//! a program left off the list would never meet that build.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// How a test reaches the binary: `common::bin()` itself, or a helper of
/// `tests/common` that calls it.
const SPAWNERS: &[&str] = &[
    "bin()",
    "run_bin",
    "Sidecar::",
    "Pair::start",
    "PairTo::start",
    "ServerSide::start",
    "start_server(",
    "start_client(",
    "health(&",
];

/// The markers around the list in tests/README.md.
const BEGIN: &str = "<!-- programs that start the binary: begin -->";
const END: &str = "<!-- programs that start the binary: end -->";

fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests")
}

/// The test programs: the names of the top-level `tests/*.rs`.
fn programs() -> BTreeSet<String> {
    std::fs::read_dir(tests_dir())
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().ok()?;
            Some(name.strip_suffix(".rs")?.to_string())
        })
        .collect()
}

/// Every `.rs` file of program `name`: its root and all below `tests/NAME/`
/// (this file aside: it names the spawners without calling them).
fn files_of(name: &str) -> Vec<PathBuf> {
    let this = Path::new(env!("CARGO_MANIFEST_DIR")).join(file!());
    let mut files = vec![tests_dir().join(format!("{name}.rs"))];
    files.retain(|f| f.exists());
    let mut dirs = vec![tests_dir().join(name)];
    while let Some(d) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let path = e.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|x| x == "rs") && path != this {
                files.push(path);
            }
        }
    }
    files
}

/// Whether `code` calls one of [`SPAWNERS`] (`bin()` as a whole word, not
/// the tail of another name).
fn spawns(code: &str) -> bool {
    SPAWNERS.iter().any(|s| {
        code.match_indices(s).any(|(i, _)| {
            let before = code[..i].chars().next_back();
            !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
    })
}

/// The program names between the markers of tests/README.md, one
/// "- `name`" line each.
fn listed(readme: &str) -> BTreeSet<String> {
    let begin = readme
        .find(BEGIN)
        .expect("tests/README.md: the begin marker");
    let end = begin + readme[begin..].find(END).expect("the end marker");
    readme[begin..end]
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_string)
        .collect()
}

#[test]
fn the_programs_that_start_the_binary_are_the_listed_ones() {
    let readme = std::fs::read_to_string(tests_dir().join("README.md")).unwrap();
    let list = listed(&readme);
    assert!(
        list.len() >= 2,
        "the list in tests/README.md is empty: {list:?}"
    );
    let found: BTreeSet<String> = programs()
        .into_iter()
        .filter(|p| {
            files_of(p)
                .iter()
                .any(|f| spawns(&std::fs::read_to_string(f).unwrap()))
        })
        .collect();
    assert_eq!(
        found, list,
        "the programs that start the binary (left) and the list in tests/README.md \
         (right) differ: .ci/run reruns the listed ones against the shipped build"
    );
}

#[test]
fn every_spawner_is_a_helper_of_common() {
    let common = std::fs::read_to_string(tests_dir().join("common/mod.rs")).unwrap();
    for s in SPAWNERS {
        // The helper's own name: `Pair` of `Pair::start`, `bin` of `bin()`.
        let name = s.split(['(', ':', '&']).next().unwrap_or(s);
        assert!(
            common.contains(&format!("fn {name}")) || common.contains(&format!("struct {name}")),
            "{s} is no longer in tests/common/mod.rs: the list here has gone stale"
        );
    }
}

#[test]
fn only_common_reads_the_path_of_the_binary_cargo_built() {
    // Spelled in two pieces so that this file does not match itself, nor
    // the same search in .ci/run.
    let var = concat!("CARGO_BIN", "_EXE");
    for p in programs() {
        for f in files_of(&p) {
            let text = std::fs::read_to_string(&f).unwrap();
            assert!(
                !text.contains(var),
                "{}: starts the binary cargo built without common::bin(), so it would \
                 never run the shipped build (MTLS_SIDECAR_BIN)",
                f.display()
            );
        }
    }
}

#[test]
fn the_search_finds_a_spawner_and_passes_lookalikes() {
    assert!(spawns("let sc = Sidecar::start(&args, 1).await;"));
    assert!(spawns("Command::new(common::bin())"));
    assert!(spawns("let (code, out) = run_bin(&[\"check\"]);"));
    assert!(!spawns("let path = cargo_bin();"));
    assert!(!spawns("let p = Pki::new(\"ca\");"));
}

#[test]
fn every_area_file_is_declared_and_none_is_included_by_path() {
    for p in programs() {
        let root = std::fs::read_to_string(tests_dir().join(format!("{p}.rs"))).unwrap();
        let Ok(entries) = std::fs::read_dir(tests_dir().join(&p)) else {
            continue;
        };
        for e in entries {
            let name = e.unwrap().file_name().into_string().unwrap();
            if let Some(area) = name.strip_suffix(".rs") {
                assert!(
                    root.contains(&format!("mod {area};")),
                    "tests/{p}/{name} is not declared in tests/{p}.rs: it would never compile"
                );
            }
        }
    }
    for p in programs().iter().chain(["common".to_string()].iter()) {
        for f in files_of(p) {
            let text = std::fs::read_to_string(&f).unwrap();
            assert!(
                !text.contains(concat!("#[", "path")),
                "{}: a #[path] include; use a module path (shared helpers live in tests/common)",
                f.display()
            );
        }
    }
}

#[test]
fn at_most_eight_programs() {
    let all = programs();
    assert!(
        all.len() <= 8,
        "{} test programs ({all:?}): each links the whole crate again; add an area to one",
        all.len()
    );
}

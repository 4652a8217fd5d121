//! Memory figures have one source. benches/README.md measures them;
//! docs/sizing.md quotes them per sidecar and sizes pod limits from them;
//! the manifests' comments, the Kubernetes section of docs/deployment.md
//! and the README quote docs/sizing.md, and the manifests' limits are the
//! ones it sizes. A figure changed in one place and not the others fails
//! here.

use super::yaml::{at, manifests, of_kind};

const UNITS: &[&str] = &["MB", "KiB", "MiB"];

fn read(rel: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// From `## heading` to the next `## ` heading.
fn section<'a>(text: &'a str, heading: &str) -> &'a str {
    let start = text
        .find(&format!("\n## {heading}\n"))
        .unwrap_or_else(|| panic!("no section {heading:?}"));
    let rest = &text[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |e| e + 3);
    &rest[..end]
}

/// Every "N UNIT" (3.6 MB, ~45 KiB, 11.7 KiB) in `text`, as (value, unit).
fn figures(text: &str) -> Vec<(f64, String)> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let mut out = Vec::new();
    for pair in words.windows(2) {
        let number = pair[0].trim_start_matches(['~', '(', '*']);
        let unit = pair[1].trim_end_matches([',', ')', ';', ':', '.', '*']);
        if !UNITS.contains(&unit) {
            continue;
        }
        if let Ok(v) = number.parse::<f64>() {
            out.push((v, unit.to_string()));
        }
    }
    out
}

fn has(set: &[(f64, String)], (v, u): &(f64, String)) -> bool {
    set.iter()
        .any(|(w, unit)| unit == u && (w - v).abs() < 1e-9)
}

/// The comment lines of a file, joined.
fn comments(text: &str) -> String {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix('#'))
        .collect::<Vec<_>>()
        .join("\n")
}

/// (file, the sidecar's memory limit) of each workload.
fn limits() -> Vec<(String, String)> {
    let docs = manifests();
    let mut out = Vec::new();
    for kind in ["StatefulSet", "Deployment"] {
        for w in of_kind(&docs, kind) {
            let inits = at(w, "spec.template.spec.initContainers").as_vec().unwrap();
            let sidecar = inits
                .iter()
                .find(|c| c["name"].as_str() == Some("mtls-sidecar"))
                .unwrap();
            let limit = sidecar["resources"]["limits"]["memory"].as_str().unwrap();
            out.push((w.file.clone(), limit.to_string()));
        }
    }
    assert_eq!(out.len(), 2, "{out:?}");
    out
}

/// The sizing page, where the table and the examples are.
const SIZING: &str = "docs/sizing.md";

#[test]
fn the_manifests_and_the_kubernetes_section_quote_the_sizing_table() {
    let table = figures(&read(SIZING));
    let deployment = read("docs/deployment.md");
    let kubernetes = section(&deployment, "Kubernetes");
    let sizing = &kubernetes[kubernetes.find("**Sizing.**").expect("**Sizing.**")..];
    let sizing = &sizing[..sizing.find("\n\n").unwrap()];
    let readme = read("README.md");
    let pointer = &readme[readme
        .find("Memory per sidecar")
        .expect("README: Memory per sidecar")..];
    let pointer = &pointer[..pointer.find("\n\n").unwrap()];
    let mut quoted = vec![
        (
            "docs/deployment.md, Kubernetes".to_string(),
            figures(sizing),
        ),
        ("README.md, Deploying".to_string(), figures(pointer)),
    ];
    for (file, _) in limits() {
        let text = read(&format!("deploy/kubernetes/{file}"));
        quoted.push((file, figures(&comments(&text))));
    }
    for (place, found) in quoted {
        assert!(found.len() >= 2, "{place}: no sizing figures found");
        for f in &found {
            assert!(
                has(&table, f),
                "{place} quotes {} {}, which {SIZING} does not say",
                f.0,
                f.1
            );
        }
    }
}

#[test]
fn the_manifests_limits_are_the_ones_the_sizing_table_sizes() {
    let table = read(SIZING);
    let deployment = read("docs/deployment.md");
    let kubernetes = section(&deployment, "Kubernetes");
    for (file, limit) in limits() {
        let row = table
            .lines()
            .find(|l| l.starts_with('|') && l.contains(&format!("`deploy/kubernetes/{file}`")))
            .unwrap_or_else(|| panic!("{SIZING} has no row for {file}"));
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        assert!(
            cells[0].starts_with(&format!("{limit} ")),
            "{file}: limit {limit}, {SIZING} says {}",
            cells[0]
        );
        let mib: f64 = limit.strip_suffix("Mi").unwrap().parse().unwrap();
        let worst = figures(cells.last().unwrap());
        let (v, u) = worst.last().expect("a worst case");
        assert_eq!(u, "MiB");
        assert!(
            *v <= mib,
            "{file}: worst case {v} MiB over the {limit} limit"
        );
        assert!(
            kubernetes.contains(&format!("`{limit}`")),
            "docs/deployment.md's Kubernetes section does not state the {limit} limit"
        );
    }
}

#[test]
fn the_sizing_tables_figures_are_measured_in_benches() {
    let table = read(SIZING);
    let benches = figures(&read("benches/README.md"));
    for row in [
        "| baseline",
        "| an idle authenticated connection",
        "| a pending handshake, worst case",
    ] {
        let line = table
            .lines()
            .find(|l| l.starts_with(row))
            .unwrap_or_else(|| panic!("no row {row:?}"));
        let found = figures(line);
        assert!(!found.is_empty(), "{row}: no figure");
        for f in &found {
            // Per sidecar: either measured as such, or half of the pair's
            // figure quoted in the same row.
            let half_of_pair = found.iter().any(|(pair, unit)| {
                unit == &f.1
                    && has(&benches, &(*pair, unit.clone()))
                    && (pair / 2.0 - f.0).abs() <= 0.051
            });
            assert!(
                has(&benches, f) || half_of_pair,
                "{row}: {} {} is not in benches/README.md",
                f.0,
                f.1
            );
        }
    }
}

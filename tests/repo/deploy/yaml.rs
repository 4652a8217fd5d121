//! Loading the Kubernetes manifests and walking them by dotted path, with
//! failures that name the file and the missing field.

use std::path::PathBuf;

use yaml_rust2::{Yaml, YamlLoader};

/// One YAML document and the file it came from.
pub struct Doc {
    pub file: String,
    pub y: Yaml,
}

/// deploy/kubernetes in this checkout.
pub fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes")
}

/// The injector's kustomization (`injector/`): the platform's webhook, not
/// part of the example environment the other tests judge as one.
pub const INJECTOR: &str = "injector";

/// The `*.yaml` files under `root` and its subdirectories, except kustomize
/// patches (`patches/`), which are not objects, and the directories named
/// in `skip`.
fn yaml_files(root: &std::path::Path, skip: &[&str]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(root).expect("deploy/kubernetes") {
        let p = e.unwrap().path();
        if p.is_dir() {
            if p.file_name()
                .is_some_and(|n| n != "patches" && !skip.iter().any(|s| n == *s))
            {
                out.extend(yaml_files(&p, skip));
            }
        } else if p.extension().is_some_and(|x| x == "yaml") {
            out.push(p);
        }
    }
    out
}

/// Every document of every `*.yaml` file (subdirectories included, as
/// `pki/ca.yaml`, except `injector/`), in path order.
pub fn manifests() -> Vec<Doc> {
    load(yaml_files(&dir(), &[INJECTOR]))
}

/// Every document of `injector/`, named as `injector/webhook.yaml`.
pub fn injector_manifests() -> Vec<Doc> {
    load(yaml_files(&dir().join(INJECTOR), &[]))
}

fn load(mut files: Vec<PathBuf>) -> Vec<Doc> {
    files.sort();
    let mut docs = Vec::new();
    for f in files {
        let name = f.strip_prefix(dir()).unwrap().to_string_lossy().to_string();
        let src = std::fs::read_to_string(&f).unwrap();
        let parsed = YamlLoader::load_from_str(&src).unwrap_or_else(|e| panic!("{name}: {e}"));
        for y in parsed.into_iter().filter(|y| !y.is_null()) {
            docs.push(Doc {
                file: name.clone(),
                y,
            });
        }
    }
    docs
}

/// The documents of one kind.
pub fn of_kind<'a>(docs: &'a [Doc], kind: &str) -> Vec<&'a Doc> {
    docs.iter()
        .filter(|d| d.y["kind"].as_str() == Some(kind))
        .collect()
}

/// The node at a dotted path (`spec.issuerRef.name`); `BadValue` if absent.
pub fn at<'a>(d: &'a Doc, path: &str) -> &'a Yaml {
    path.split('.').fold(&d.y, |node, key| &node[key])
}

/// The string at a dotted path; panics naming the file and path if absent.
pub fn text(d: &Doc, path: &str) -> String {
    at(d, path)
        .as_str()
        .unwrap_or_else(|| panic!("{}: {} {:?}: no string at {path}", d.file, kind(d), name(d)))
        .to_string()
}

/// The list of strings at a dotted path (empty if absent).
pub fn strs(d: &Doc, path: &str) -> Vec<String> {
    at(d, path)
        .as_vec()
        .map(|v| {
            v.iter()
                .map(|s| {
                    s.as_str()
                        .unwrap_or_else(|| panic!("{}: {path}: not a string: {s:?}", d.file))
                        .to_string()
                })
                .collect()
        })
        .unwrap_or_default()
}

fn kind(d: &Doc) -> &str {
    d.y["kind"].as_str().unwrap_or("?")
}

fn name(d: &Doc) -> &str {
    d.y["metadata"]["name"].as_str().unwrap_or("?")
}

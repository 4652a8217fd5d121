//! Loading the Kubernetes manifests and walking them by dotted path, with
//! failures that name the file and the missing field. The example
//! workloads are annotated pod templates: they are loaded as the binary's
//! `inject` renders them, so what is judged is the sidecar it adds.

use std::path::PathBuf;

use crate::common;

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
/// `pki/ca.yaml`, except `injector/`), in path order; a file with a pod
/// template that opted in is rendered by `mtls-sidecar inject` first.
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
        let src = rendered(&name, std::fs::read_to_string(&f).unwrap());
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

/// What the pod template annotation marks as opted in.
const OPTED_IN: &str = "mtls-sidecar.dev/inject: enabled";

/// A file as it is applied: with an opted-in pod template, the output of
/// the binary's `inject`, after the root kustomization's `vars` are
/// replaced by the generated object's name (kustomize adds a content hash
/// to it; a test cannot, and finds the generator by this name).
fn rendered(name: &str, src: String) -> String {
    if !src.contains(OPTED_IN) {
        return src;
    }
    let mut src = src;
    for (var, object) in kustomize_vars() {
        src = src.replace(&format!("$({var})"), &object);
    }
    let (code, out, err) = common::run_bin_stdin(&["inject", "-f", "-"], &src);
    assert_eq!(code, 0, "{name}: mtls-sidecar inject refused it: {err}");
    out
}

/// (name, object name) of each of the root kustomization's `vars`.
fn kustomize_vars() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(dir().join("kustomization.yaml")).unwrap();
    let k = YamlLoader::load_from_str(&text).unwrap().remove(0);
    k["vars"]
        .as_vec()
        .into_iter()
        .flatten()
        .map(|v| {
            let name = v["name"].as_str().expect("vars[].name");
            let object = v["objref"]["name"].as_str().expect("vars[].objref.name");
            (name.to_string(), object.to_string())
        })
        .collect()
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

//! The container image's file tree as the Dockerfile builds it, and every
//! command the docs and manifests run inside it. There is no Docker engine
//! here, so the builder's commands that lay out the final tree (`install`,
//! `ln`; not the compile) are run for real into a temporary directory, the
//! final stage's `COPY --from=builder` lines are applied with COPY's rules
//! (a symlink inside a copied directory stays a symlink; a symlink named as
//! the source is followed), and paths are resolved in the result, links
//! followed, against distroless's PATH.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::host::{dockerfile, exec_form};

/// distroless's PATH: the base image's `ENV PATH` (the Dockerfile sets
/// none), as `docker inspect gcr.io/distroless/static-debian13` shows it.
const DISTROLESS_PATH: &[&str] = &[
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

#[derive(Debug, Clone, PartialEq)]
enum Entry {
    File,
    Symlink(String),
}

/// The files the Dockerfile puts into the final image (only those: the
/// base image's own are not needed to find ours).
struct Image {
    files: BTreeMap<String, Entry>,
}

impl Image {
    /// The regular file `path` names, symlinks followed (a few hops).
    fn resolve(&self, path: &str) -> Option<String> {
        let mut at = path.to_string();
        for _ in 0..8 {
            match self.files.get(&at)? {
                Entry::File => return Some(at),
                Entry::Symlink(target) if target.starts_with('/') => at = target.clone(),
                Entry::Symlink(target) => {
                    let parent = Path::new(&at).parent().unwrap_or(Path::new("/"));
                    at = parent.join(target).to_string_lossy().into_owned();
                }
            }
        }
        None
    }

    /// What a container runtime runs for `program`: an absolute path as
    /// given, a bare name through PATH.
    fn lookup(&self, program: &str) -> Option<String> {
        if program.starts_with('/') {
            return self.resolve(program);
        }
        DISTROLESS_PATH
            .iter()
            .find_map(|dir| self.resolve(&format!("{dir}/{program}")))
    }
}

/// The final stage's `COPY --from=builder SRC DEST` pairs.
fn copies(lines: &[String]) -> Vec<(String, String)> {
    let last_from = lines.iter().rposition(|l| l.starts_with("FROM ")).unwrap();
    lines[last_from..]
        .iter()
        .filter_map(|l| l.strip_prefix("COPY --from=builder "))
        .map(|rest| {
            let words: Vec<_> = rest.split_whitespace().collect();
            assert_eq!(words.len(), 2, "COPY SRC DEST: {rest}");
            (words[0].to_string(), words[1].to_string())
        })
        .collect()
}

/// Runs the builder's tree-laying commands (everything after the release
/// build in its RUN line) with /out moved under `root` and the built binary
/// replaced by a stub.
fn lay_out_builder_tree(lines: &[String], root: &Path) {
    let run = lines
        .iter()
        .find(|l| l.starts_with("RUN bash scripts/build-release.sh"))
        .expect("the builder's RUN line");
    let stub = root.join("stub-binary");
    std::fs::write(&stub, b"\x7fELF").unwrap();
    let out = root.join("out");
    for cmd in run["RUN ".len()..].split("&&").map(str::trim).skip(1) {
        let cmd = cmd
            .replace("target/dist/mtls-sidecar", &stub.to_string_lossy())
            .replace(" /out/", &format!(" {}/", out.display()));
        let status = std::process::Command::new("sh")
            .args(["-ec", &cmd])
            .status()
            .unwrap();
        assert!(status.success(), "{cmd}");
    }
}

/// COPY's rules: a directory's contents are copied with their symlinks
/// as symlinks; a source that is itself a symlink is followed.
fn copy_into(image: &mut Image, src: &Path, dest: &str) {
    let meta = std::fs::metadata(src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    if !meta.is_dir() {
        image.files.insert(dest.to_string(), Entry::File);
        return;
    }
    let mut stack = vec![(src.to_path_buf(), PathBuf::from(dest))];
    while let Some((dir, at)) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let to = at.join(e.file_name());
            let kind = std::fs::symlink_metadata(e.path()).unwrap().file_type();
            let key = to.to_string_lossy().into_owned();
            if kind.is_symlink() {
                let target = std::fs::read_link(e.path()).unwrap();
                image
                    .files
                    .insert(key, Entry::Symlink(target.to_string_lossy().into_owned()));
            } else if kind.is_dir() {
                stack.push((e.path(), to));
            } else {
                image.files.insert(key, Entry::File);
            }
        }
    }
}

fn image() -> Image {
    let lines = dockerfile();
    let tmp = tempfile::tempdir().unwrap();
    lay_out_builder_tree(&lines, tmp.path());
    let mut image = Image {
        files: BTreeMap::new(),
    };
    for (src, dest) in copies(&lines) {
        let local = tmp.path().join(src.trim_start_matches('/'));
        copy_into(&mut image, &local, &dest);
    }
    image
}

#[test]
fn the_binary_is_on_path_and_the_old_path_is_a_symlink_to_it() {
    let image = image();
    assert_eq!(
        image.files.get("/usr/local/bin/mtls-sidecar"),
        Some(&Entry::File),
        "{:?}",
        image.files
    );
    assert_eq!(
        image.lookup("mtls-sidecar").as_deref(),
        Some("/usr/local/bin/mtls-sidecar")
    );
    // Kept for one release: users' command: lines and probes name it.
    assert!(
        matches!(image.files.get("/mtls-sidecar"), Some(Entry::Symlink(_))),
        "/mtls-sidecar must be a symlink, not a second copy: {:?}",
        image.files.get("/mtls-sidecar")
    );
    assert_eq!(
        image.resolve("/mtls-sidecar").as_deref(),
        Some("/usr/local/bin/mtls-sidecar")
    );
    let lines = dockerfile();
    for (instruction, prefix) in [
        ("ENTRYPOINT", "ENTRYPOINT"),
        ("HEALTHCHECK", "HEALTHCHECK CMD"),
    ] {
        let line = lines
            .iter()
            .find(|l| l.starts_with(instruction))
            .unwrap_or_else(|| panic!("{instruction}"));
        let argv = exec_form(line, prefix);
        assert!(image.lookup(&argv[0]).is_some(), "{instruction} {argv:?}");
    }
}

/// The program word after ` -- ` of every `kubectl … exec … -- PROGRAM` in
/// `text` (continuation backslashes and line breaks joined, backticks and
/// ellipses ignored), with the file it came from.
fn kubectl_exec_programs(text: &str) -> Vec<String> {
    let joined = text.replace("\\\n", " ");
    let words: Vec<&str> = joined
        .split_whitespace()
        .map(|w| w.trim_matches(|c| c == '`' || c == '"' || c == '\'' || c == '('))
        .filter(|w| !w.is_empty() && *w != "…")
        .collect();
    let mut out = Vec::new();
    for (i, w) in words.iter().enumerate() {
        if *w != "kubectl" {
            continue;
        }
        let rest = &words[i + 1..words.len().min(i + 30)];
        let end = rest
            .iter()
            .position(|w| *w == "kubectl")
            .unwrap_or(rest.len());
        let rest = &rest[..end];
        let Some(exec) = rest.iter().position(|w| *w == "exec") else {
            continue;
        };
        if let Some(dash) = rest[exec..].iter().position(|w| *w == "--") {
            if let Some(program) = rest.get(exec + dash + 1) {
                out.push(program.to_string());
            }
        }
    }
    out
}

fn text_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            text_files(&p, out);
        } else if p.extension().is_some_and(|x| {
            ["md", "yaml", "toml", "sh", "nft", "service", "env"]
                .contains(&x.to_str().unwrap_or(""))
        }) {
            out.push(p);
        }
    }
}

#[test]
fn every_documented_kubectl_exec_names_a_program_in_the_image() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let image = image();
    let mut files = vec![root.join("README.md")];
    text_files(&root.join("docs"), &mut files);
    text_files(&root.join("deploy"), &mut files);
    let mut seen = 0;
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for program in kubectl_exec_programs(&text) {
            seen += 1;
            assert!(
                image.lookup(&program).is_some(),
                "{}: `kubectl exec … -- {program}`: not on the image's PATH ({DISTROLESS_PATH:?}) nor a file in it",
                f.display()
            );
        }
    }
    assert!(
        seen >= 4,
        "found only {seen} kubectl exec commands: the scan is broken"
    );
}

#[test]
fn the_scan_finds_commands_across_lines_and_stops_at_the_next_kubectl() {
    let text = "kubectl -n env-1 exec replica-0 -c mtls-sidecar -- \\\n  mtls-sidecar check\n\
                `kubectl exec …\n-c mtls-sidecar -- /mtls-sidecar health`\n\
                kubectl logs x -- y; kubectl get pods";
    assert_eq!(
        kubectl_exec_programs(text),
        ["mtls-sidecar", "/mtls-sidecar"]
    );
}

#[test]
fn every_command_and_exec_probe_in_the_manifests_names_a_program_in_the_image() {
    let image = image();
    let docs = super::yaml::manifests();
    let mut seen = 0;
    for d in &docs {
        for list in ["initContainers", "containers"] {
            let path = format!("spec.template.spec.{list}");
            let Some(cs) = super::yaml::at(d, &path).as_vec() else {
                continue;
            };
            for c in cs.iter().filter(|c| {
                c["image"]
                    .as_str()
                    .is_some_and(|i| i.contains("/mtls-sidecar:"))
            }) {
                seen += 1;
                let mut programs = Vec::new();
                if let Some(p) = c["command"][0].as_str() {
                    programs.push(p.to_string());
                }
                for probe in ["startupProbe", "readinessProbe", "livenessProbe"] {
                    if let Some(p) = c[probe]["exec"]["command"][0].as_str() {
                        programs.push(p.to_string());
                    }
                }
                for p in programs {
                    assert!(
                        image.lookup(&p).is_some(),
                        "{}: {:?} runs {p}, which the image does not have",
                        d.file,
                        c["name"]
                    );
                }
            }
        }
    }
    assert!(seen >= 2, "no sidecar container found in the manifests");
}

/// Every file under `dir` (subdirectories included).
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// The tags of our images (`…/mtls-sidecar:TAG`, `…/mtls-sidecar-nft:TAG`)
/// named in `text`.
fn our_image_tags(text: &str) -> Vec<String> {
    let mut tags = Vec::new();
    for image in ["/mtls-sidecar:", "/mtls-sidecar-nft:"] {
        for (at, _) in text.match_indices(image) {
            let tag: String = text[at + image.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || ".-_".contains(*c))
                .collect();
            tags.push(tag);
        }
    }
    tags
}

/// The shipped manifests, the image recipes and the hand-written
/// manifests injection is compared with name this version's images (the
/// version `inject` writes in `mtls-sidecar.dev/injected` and its default
/// `--image`), so a release bump cannot leave one behind.
#[test]
fn every_image_of_ours_is_tagged_with_this_version() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut seen = 0;
    for dir in ["deploy", "tests/e2e/inject"] {
        for file in files_under(&root.join(dir)) {
            let Ok(text) = std::fs::read_to_string(&file) else {
                continue;
            };
            for tag in our_image_tags(&text) {
                seen += 1;
                assert_eq!(
                    tag,
                    env!("CARGO_PKG_VERSION"),
                    "{}: an image of ours tagged {tag}",
                    file.display()
                );
            }
        }
    }
    assert!(seen >= 5, "found {seen} images of ours");
}

#[test]
fn image_tags_are_read_up_to_their_end() {
    assert_eq!(
        our_image_tags(
            "image: r.example/mtls-sidecar:0.4.0 # x\n--image=r/mtls-sidecar-nft:1.2.3-rc1"
        ),
        ["0.4.0", "1.2.3-rc1"]
    );
    assert!(our_image_tags("mtls-sidecar: x, /mtls-sidecar@sha256:ab").is_empty());
}

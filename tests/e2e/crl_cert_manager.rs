//! The CRL on the cert-manager path, with the real binary: `certs revoke`
//! and `certs issue` read a cert-manager CA Secret's layout (`tls.crt`,
//! `tls.key`) as well as `certs ca`'s (`ca.crt`, `ca.key`); `certs revoke`
//! with no serial re-signs the CRL at `--out`; and the shipped CronJob
//! (deploy/kubernetes/crl/cronjob.yaml) run step by step, its shell scripts
//! exactly as written, against a stand-in `kubectl` that plays the API
//! server: it reads the ConfigMap's CRL, re-signs it and writes it back with
//! the resourceVersion it read.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use yaml_rust2::{Yaml, YamlLoader};

fn s(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

fn ok(args: &[&str]) -> String {
    let (code, out) = run_bin(args);
    assert_eq!(code, 0, "{args:?}: {out}");
    out
}

/// A CA from `certs ca`, and the same CA laid out as cert-manager writes a
/// CA Certificate's Secret: `tls.crt`/`tls.key` the CA, `ca.crt` its issuer
/// (itself, for a self-signed CA).
fn two_layouts(root: &Path) -> (PathBuf, PathBuf) {
    two_layouts_named(root, "mtls-sidecar dev CA")
}

/// [`two_layouts`] for a CA named `name`.
fn two_layouts_named(root: &Path, name: &str) -> (PathBuf, PathBuf) {
    std::fs::create_dir_all(root).unwrap();
    let classic = root.join("classic");
    ok(&["certs", "ca", "--out", &s(&classic), "--name", name]);
    let cm = root.join("cert-manager");
    std::fs::create_dir(&cm).unwrap();
    let crt = std::fs::read(classic.join("ca.crt")).unwrap();
    std::fs::write(cm.join("tls.crt"), &crt).unwrap();
    std::fs::write(cm.join("ca.crt"), &crt).unwrap();
    std::fs::copy(classic.join("ca.key"), cm.join("tls.key")).unwrap();
    (classic, cm)
}

/// `certs revoke --ca CA --serial SERIAL --out OUT`, which must succeed.
fn revoke_serial(ca: &Path, serial: &str, out: &str) -> String {
    ok(&[
        "certs",
        "revoke",
        "--ca",
        &s(ca),
        "--serial",
        serial,
        "--out",
        out,
    ])
}

fn issue(ca: &Path, out: &Path) {
    ok(&[
        "certs",
        "issue",
        "--ca",
        &s(ca),
        "--out",
        &s(out),
        "--dns",
        CONTROLLER,
        "--role",
        "client",
    ]);
}

#[test]
fn revoke_and_issue_read_both_ca_layouts() {
    let tmp = tempfile::tempdir().unwrap();
    let (classic, cm) = two_layouts(tmp.path());
    for (name, ca) in [("classic", &classic), ("cert-manager", &cm)] {
        let leaked = tmp.path().join(format!("{name}-leaked"));
        let fine = tmp.path().join(format!("{name}-fine"));
        issue(ca, &leaked);
        issue(ca, &fine);
        let crl = tmp.path().join(format!("{name}.crl"));
        let out = ok(&[
            "certs",
            "revoke",
            "--ca",
            &s(ca),
            "--cert",
            &s(&leaked.join("tls.crt")),
            "--out",
            &s(&crl),
        ]);
        assert!(out.contains("CRL number 1,"), "{name}: {out}");
        for dir in [&leaked, &fine] {
            std::fs::copy(&crl, dir.join("ca.crl")).unwrap();
        }
        let (code, out) = run_bin(&["check", "--tls-dir", &s(&leaked)]);
        assert_ne!(code, 0, "{name}: {out}");
        assert!(out.contains("is revoked by the CRL"), "{name}: {out}");
        let (code, out) = run_bin(&["check", "--tls-dir", &s(&fine)]);
        assert_eq!(code, 0, "{name}: {out}");
        assert!(out.contains("not revoked"), "{name}: {out}");
    }
}

#[test]
fn a_directory_with_both_layouts_or_neither_is_refused_naming_the_files() {
    let tmp = tempfile::tempdir().unwrap();
    let (classic, _) = two_layouts(tmp.path());
    std::fs::copy(classic.join("ca.key"), classic.join("tls.key")).unwrap();
    let crl = s(&tmp.path().join("x.crl"));
    let revoke = |ca: &Path| {
        run_bin(&[
            "certs",
            "revoke",
            "--ca",
            &s(ca),
            "--serial",
            "01",
            "--out",
            &crl,
        ])
    };
    let (code, out) = revoke(&classic);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("both ca.key") && out.contains("tls.key"),
        "{out}"
    );
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let (code, out) = revoke(&empty);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("ca.key") && out.contains("tls.key"), "{out}");
    assert!(!Path::new(&crl).exists());
}

#[test]
fn revoke_without_a_serial_re_signs_the_crl_at_out_and_refuses_to_mint_an_empty_one() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, cm) = two_layouts(tmp.path());
    let crl = s(&tmp.path().join("ca.crl"));
    let (code, out) = run_bin(&["certs", "revoke", "--ca", &s(&cm), "--out", &crl]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("--serial") && out.contains("no CRL to re-sign"),
        "{out}"
    );
    assert!(!Path::new(&crl).exists());
    revoke_serial(&cm, "7f:01", &crl);
    let first = std::fs::read(&crl).unwrap();
    let out = ok(&[
        "certs",
        "revoke",
        "--ca",
        &s(&cm),
        "--out",
        &crl,
        "--days",
        "9",
    ]);
    assert!(
        out.contains("CRL number 2, 0 serial(s) added, 1 revoked"),
        "{out}"
    );
    assert_ne!(std::fs::read(&crl).unwrap(), first);
}

// ---- The CronJob's steps, as shipped. ----

fn cronjob() -> Yaml {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/kubernetes/crl/cronjob.yaml"
    );
    let text = std::fs::read_to_string(path).unwrap();
    YamlLoader::load_from_str(&text).unwrap().remove(0)
}

/// The pod's containers by name: init containers, then containers.
fn containers(job: &Yaml) -> Vec<Yaml> {
    let pod = &job["spec"]["jobTemplate"]["spec"]["template"]["spec"];
    let mut v = pod["initContainers"].as_vec().unwrap().clone();
    v.extend(pod["containers"].as_vec().unwrap().iter().cloned());
    v
}

fn strings(y: &Yaml) -> Vec<String> {
    y.as_vec()
        .map(|v| v.iter().map(|s| s.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

/// A stand-in for kubectl: `get` prints what `jsonpath` asks of a
/// ConfigMap whose resourceVersion is 4711 and whose CRL is `api/ca.crl`;
/// `patch` records its arguments, one a line, in `api/patch`.
fn fake_kubectl(bin: &Path, api: &Path) {
    std::fs::create_dir_all(bin).unwrap();
    let script = format!(
        "#!/bin/sh\n\
         case \"$*\" in\n\
         *'-n env-1 get configmap mtls-crl -o jsonpath={{.metadata.resourceVersion}}{{\"\\n\"}}{{.data.ca\\.crl}}'*)\n\
           printf '4711\\n'; cat '{api}/ca.crl' ;;\n\
         *'-n env-1 patch configmap mtls-crl --type merge -p '*)\n\
           for a in \"$@\"; do printf '%s\\n' \"$a\"; done >'{api}/patch' ;;\n\
         *) echo \"unexpected kubectl $*\" >&2; exit 1 ;;\n\
         esac\n",
        api = api.display()
    );
    let path = bin.join("kubectl");
    std::fs::write(&path, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Runs a kubectl container's `command` with `/work` standing for `work`.
fn run_script(c: &Yaml, work: &Path, bin: &Path) {
    let cmd = strings(&c["command"]);
    assert_eq!(cmd[..2], ["/bin/sh", "-ec"], "{cmd:?}");
    let script = cmd[2].replace("/work", &s(work));
    let path = format!("{}:{}", s(bin), std::env::var("PATH").unwrap_or_default());
    let out = std::process::Command::new("/bin/sh")
        .args(["-ec", &script])
        .env("PATH", path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}: {}",
        c["name"].as_str().unwrap(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Reads the `"ca.crl"` string out of the merge patch the job sends (JSON
/// string escapes: `\n`, `\\`, `\"`), checking the resourceVersion
/// precondition is the one read.
fn patched_crl(patch: &str) -> String {
    assert!(
        patch.starts_with("{\"metadata\":{\"resourceVersion\":\"4711\"},\"data\":{\"ca.crl\":\""),
        "{patch}"
    );
    let body = patch.split("\"ca.crl\":\"").nth(1).unwrap();
    let mut out = String::new();
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                assert_eq!(chars.as_str(), "}}", "{patch}");
                return out;
            }
            '\\' => match chars.next() {
                Some('n') => out.push('\n'),
                Some(e @ ('\\' | '"')) => out.push(e),
                e => panic!("escape {e:?} in {patch}"),
            },
            c => out.push(c),
        }
    }
    panic!("unterminated: {patch}")
}

/// `certs revoke --prune-expired MAX_LIFETIME` leaves out the entries
/// revoked longer ago than that (their certificates have expired), keeps
/// the others and the serials given, and raises the CRL number.
#[test]
fn revoke_prunes_entries_older_than_the_longest_lifetime() {
    use mtls_sidecar::pki::{CrlSpec, DevCa};
    let tmp = tempfile::tempdir().unwrap();
    let (_, cm) = two_layouts(tmp.path());
    let read = |f: &str| std::fs::read_to_string(cm.join(f)).unwrap();
    let ca = DevCa::from_pem(&read("tls.crt"), &read("tls.key")).unwrap();
    let now = std::time::SystemTime::now();
    let day = std::time::Duration::from_secs(86_400);
    let mut spec = CrlSpec::new(4, Vec::new(), 7);
    spec.kept = vec![
        (vec![0x7f, 0x01], now - 40 * day),
        (vec![0x7f, 0x02], now - 2 * day),
    ];
    let crl = tmp.path().join("ca.crl");
    std::fs::write(&crl, ca.crl(&spec).unwrap().pem).unwrap();
    let prune = |lifetime: &str| {
        let (crl, ca) = (s(&crl), s(&cm));
        run_bin(&[
            "certs",
            "revoke",
            "--ca",
            &ca,
            "--out",
            &crl,
            "--prune-expired",
            lifetime,
        ])
    };
    let (code, out) = prune("720h");
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("CRL number 5, 0 serial(s) added, 1 revoked, 1 pruned"),
        "{out}"
    );
    let text = std::fs::read(&crl).unwrap();
    let file = mtls_sidecar::credentials::RawFile {
        path: crl.clone(),
        bytes: text,
    };
    let crls = mtls_sidecar::credentials::revocation::parse_file(&file).unwrap();
    let serials: Vec<Vec<u8>> = crls[0].revoked_entries().into_iter().map(|e| e.0).collect();
    assert_eq!(serials, [vec![0x7f, 0x02]]);
    let (code, out) = prune("0s");
    assert_eq!(code, 2, "{out}");
}

/// One CRL per CA across a rotation: `certs revoke` adds the new CA's CRL
/// beside the old one's and extends each CA's own; two CRLs of one CA are
/// refused.
#[test]
fn revoke_keeps_one_crl_per_ca_across_a_rotation() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, old) = two_layouts(&tmp.path().join("old"));
    let (_, new) = two_layouts_named(&tmp.path().join("new"), "mtls-sidecar dev CA next");
    let crl = s(&tmp.path().join("ca.crl"));
    revoke_serial(&old, "7f:01", &crl);
    revoke_serial(&new, "7f:02", &crl);
    let out = revoke_serial(&new, "7f:03", &crl);
    assert!(
        out.contains("CRL number 2, 1 serial(s) added, 2 revoked"),
        "{out}"
    );
    assert!(out.contains("wrote") && out.contains("2 CRL(s)"), "{out}");
    let out = revoke_serial(&old, "7f:04", &crl);
    assert!(
        out.contains("CRL number 2, 1 serial(s) added, 2 revoked"),
        "{out}"
    );
    // Two CRLs of one CA in the file: refused, naming it.
    let one = std::fs::read_to_string(&crl).unwrap();
    std::fs::write(&crl, format!("{one}{one}")).unwrap();
    let (code, out) = run_bin(&["certs", "revoke", "--ca", &s(&old), "--out", &crl]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("keep one per CA"), "{out}");
}

#[test]
fn the_cronjob_re_signs_the_configmaps_crl_and_writes_it_back_conditionally() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, cm) = two_layouts(tmp.path());
    let (_, next) = two_layouts_named(&tmp.path().join("next"), "mtls-sidecar CA next");
    let (api, work, bin) = (
        tmp.path().join("api"),
        tmp.path().join("work"),
        tmp.path().join("bin"),
    );
    std::fs::create_dir_all(&api).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    fake_kubectl(&bin, &api);
    // What the ConfigMap holds across a rotation: each CA's CRL, number 1,
    // one serial each.
    let in_force = s(&api.join("ca.crl"));
    revoke_serial(&cm, "7f:01", &in_force);
    revoke_serial(&next, "7f:02", &in_force);

    let job = cronjob();
    let steps = containers(&job);
    let names: Vec<_> = steps.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["fetch", "resign", "write"]);
    run_script(&steps[0], &work, &bin);
    assert_eq!(std::fs::read_to_string(work.join("rv")).unwrap(), "4711\n");
    assert_eq!(
        std::fs::read(work.join("ca.crl")).unwrap(),
        std::fs::read(&in_force).unwrap()
    );
    // The sidecar image's step, its arguments as shipped, the Secrets'
    // mounts at /ca and /ca-next standing for the cert-manager layout.
    let args_with = |next_dir: &Path| -> Vec<String> {
        strings(&steps[1]["args"])
            .iter()
            .map(|a| {
                a.replace("/work", &s(&work))
                    .replace("=/ca-next", &format!("={}", s(next_dir)))
                    .replace("=/ca", &format!("={}", s(&cm)))
            })
            .collect()
    };
    // Before the rotation's Secret exists, its empty mount is skipped.
    let empty = tmp.path().join("no-secret");
    std::fs::create_dir_all(&empty).unwrap();
    let before = args_with(&empty);
    let before: Vec<&str> = before.iter().map(String::as_str).collect();
    let saved = std::fs::read(work.join("ca.crl")).unwrap();
    let out = ok(&before);
    assert!(out.contains("no CA here; skipped"), "{out}");
    std::fs::write(work.join("ca.crl"), saved).unwrap();
    let args = args_with(&next);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_eq!(args[..2], ["certs", "revoke"]);
    let out = ok(&args);
    assert_eq!(
        out.matches("CRL number 2, 0 serial(s) added, 1 revoked")
            .count(),
        2,
        "both CAs' CRLs re-signed: {out}"
    );
    run_script(&steps[2], &work, &bin);
    let patch = std::fs::read_to_string(api.join("patch")).unwrap();
    let argv: Vec<&str> = patch.lines().collect();
    let json = argv.last().unwrap();
    let written = patched_crl(json);
    assert_eq!(
        written.as_bytes(),
        std::fs::read(work.join("ca.crl")).unwrap()
    );
    // What was written is a CRL the sidecar's own loader accepts for this CA.
    let leaf = tmp.path().join("leaf");
    issue(&cm, &leaf);
    std::fs::write(leaf.join("ca.crl"), &written).unwrap();
    let (code, out) = run_bin(&["check", "--tls-dir", &s(&leaf)]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("not revoked"), "{out}");
}

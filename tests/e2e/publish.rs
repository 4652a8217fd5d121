//! `mtls-sidecar publish --into DIR FILE...`, run as the real binary: the
//! kubelet's layout (timestamped revision directory, `..data` swapped by
//! rename, `name -> ..data/name` links, the old revision removed), a running
//! sidecar on DIR applying what it publishes without ever seeing a torn
//! revision, files of the previous revision kept unless dropped, and the
//! refusals (a revision the sidecar would reject, a plain directory, bad
//! names) that leave DIR as it was. tests/e2e/publish_files.rs judges each
//! credential file kind and the CRL a renewal keeps.

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};

use common::*;
use mtls_sidecar::pki::{Issued, Role};
use mtls_sidecar::tools::publish::is_revision_name;

/// Writes a leaf and its CA as loose files (as a renewal hook has them)
/// and returns `NAME=PATH` arguments for them.
fn staged(root: &Path, sub: &str, leaf: &Issued, ca_pem: &str) -> Vec<String> {
    let d = root.join(sub);
    fs::create_dir_all(&d).unwrap();
    fs::write(d.join("cert.pem"), &leaf.cert_pem).unwrap();
    fs::write(d.join("key.pem"), &leaf.key_pem).unwrap();
    fs::write(d.join("chain.pem"), ca_pem).unwrap();
    let p = |f: &str| d.join(f).to_str().unwrap().to_string();
    vec![
        format!("tls.crt={}", p("cert.pem")),
        format!("tls.key={}", p("key.pem")),
        format!("ca.crt={}", p("chain.pem")),
    ]
}

fn publish(into: &Path, files: &[String]) -> (i32, String) {
    let mut args = vec!["publish", "--into", into.to_str().unwrap()];
    args.extend(files.iter().map(String::as_str));
    run_bin(&args)
}

/// The revision directories in DIR.
fn revisions(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| is_revision_name(n))
        .collect();
    v.sort();
    v
}

fn data_target(dir: &Path) -> PathBuf {
    fs::read_link(dir.join("..data")).expect("..data is a symlink")
}

#[test]
fn publish_lays_out_a_kubelet_revision_and_replaces_it_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("publish CA");
    let dir = tmp.path().join("tls");
    let first = staged(
        tmp.path(),
        "one",
        &pki.leaf(REPLICA, Role::Server),
        &pki.ca.cert_pem,
    );
    let (code, out) = publish(&dir, &first);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("published .."), "{out}");

    let revs = revisions(&dir);
    assert_eq!(revs.len(), 1, "{revs:?}");
    assert_eq!(data_target(&dir), PathBuf::from(&revs[0]));
    for name in ["tls.crt", "tls.key", "ca.crt"] {
        assert_eq!(
            fs::read_link(dir.join(name)).unwrap(),
            Path::new("..data").join(name),
            "{name} is a link into ..data"
        );
    }
    assert!(fs::symlink_metadata(dir.join("..data_tmp")).is_err());
    use std::os::unix::fs::PermissionsExt;
    let key_mode = fs::metadata(dir.join("tls.key"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(key_mode & 0o777, 0o640, "default --mode");
    // The sidecar's own check accepts the published directory.
    let (code, text) = run_bin(&[
        "check",
        "--tls-dir",
        dir.to_str().unwrap(),
        "--role",
        "server",
    ]);
    assert_eq!(code, 0, "{text}");

    // A second revision: the old directory is gone after the swap, and a
    // name the new revision lacks is no longer published.
    let second_leaf = pki.leaf(REPLICA, Role::Server);
    let mut second = staged(tmp.path(), "two", &second_leaf, &pki.ca.cert_pem);
    let extra = tmp.path().join("note.txt");
    fs::write(&extra, "x").unwrap();
    let mut with_note = second.clone();
    with_note.push(extra.to_str().unwrap().to_string());
    let (code, out) = publish(&dir, &with_note);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!("removed the previous revision {}", revs[0])),
        "{out}"
    );
    assert!(!dir.join(&revs[0]).exists());
    assert_eq!(fs::read_to_string(dir.join("note.txt")).unwrap(), "x");
    // A file not given is kept (said on stderr); --drop removes it.
    let (code, out) = publish(&dir, &second);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("kept from the previous revision (not given): note.txt"),
        "{out}"
    );
    assert_eq!(fs::read_to_string(dir.join("note.txt")).unwrap(), "x");
    let mut dropping = vec!["--drop".to_string(), "note.txt".to_string()];
    dropping.extend(second.iter().cloned());
    let (code, out) = publish(&dir, &dropping);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("dropped (--drop): note.txt"), "{out}");
    assert!(fs::symlink_metadata(dir.join("note.txt")).is_err());
    assert_eq!(revisions(&dir).len(), 1);
    assert_eq!(
        fs::read_to_string(dir.join("tls.crt")).unwrap(),
        second_leaf.cert_pem
    );

    // Refused, and nothing changes: a key from another certificate...
    let before = data_target(&dir);
    let other = pki.leaf(REPLICA, Role::Server);
    let key_path = tmp.path().join("two/key.pem");
    fs::write(&key_path, &other.key_pem).unwrap();
    let (code, out) = publish(&dir, &second);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("not published") && out.contains("does not match"),
        "{out}"
    );
    assert_eq!(data_target(&dir), before);
    assert_eq!(revisions(&dir).len(), 1);
    // ...half a credential set (in a directory with no ca.crt to keep)...
    second.truncate(2);
    let fresh = tmp.path().join("fresh");
    let (code, out) = publish(&fresh, &second);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("not published") && out.contains("ca.crt: cannot read: file not found"),
        "{out}"
    );
    assert!(fs::symlink_metadata(fresh.join("..data")).is_err());
    // ...names that would break the layout, and a bad mode (usage: 2).
    for bad in [
        "..data=/etc/hostname",
        "=/etc/hostname",
        "..x=/etc/hostname",
    ] {
        let (code, out) = publish(&dir, &[bad.to_string()]);
        assert_eq!(code, 2, "{bad}: {out}");
    }
    let (code, out) = run_bin(&[
        "publish",
        "--into",
        dir.to_str().unwrap(),
        "--mode",
        "0666",
        "/etc/hostname",
    ]);
    assert_eq!(code, 2, "{out}");
    assert_eq!(data_target(&dir), before);

    // A plain directory is not silently converted.
    let plain = pki.dir(tmp.path(), "plain", &pki.leaf(REPLICA, Role::Server));
    let third = staged(
        tmp.path(),
        "three",
        &pki.leaf(REPLICA, Role::Server),
        &pki.ca.cert_pem,
    );
    let (code, out) = publish(&plain, &third);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("plain file"), "{out}");
    assert!(fs::symlink_metadata(plain.join("..data")).is_err());
}

#[test]
fn concurrent_publishers_leave_one_whole_revision() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("publish CA");
    let dir = tmp.path().join("tls");
    let sets: Vec<Vec<String>> = (0..6)
        .map(|i| {
            let leaf = pki.leaf(REPLICA, Role::Server);
            staged(tmp.path(), &format!("s{i}"), &leaf, &pki.ca.cert_pem)
        })
        .collect();
    let handles: Vec<_> = sets
        .into_iter()
        .map(|files| {
            let dir = dir.clone();
            std::thread::spawn(move || publish(&dir, &files))
        })
        .collect();
    for h in handles {
        let (code, out) = h.join().unwrap();
        assert_eq!(code, 0, "{out}");
    }
    let revs = revisions(&dir);
    assert_eq!(revs.len(), 1, "{revs:?}");
    assert_eq!(data_target(&dir), PathBuf::from(&revs[0]));
    let (code, text) = run_bin(&["check", "--tls-dir", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_running_sidecar_applies_each_published_revision_and_never_a_torn_one() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("publish CA");
    let dir = tmp.path().join("tls");
    let (code, out) = publish(
        &dir,
        &staged(
            tmp.path(),
            "s0",
            &pki.leaf(REPLICA, Role::Server),
            &pki.ca.cert_pem,
        ),
    );
    assert_eq!(code, 0, "{out}");
    let echo = echo_target().await;
    let server = start_server(&dir, &echo.addr.to_string(), &["--reload-interval", "20ms"]).await;
    let controller = pki.leaf(CONTROLLER, Role::Client);
    let cfg = client_config(Some(&controller), &pki.ca.cert_pem);
    let addr = server.addr("server");

    for i in 1..=8 {
        let leaf = pki.leaf(REPLICA, Role::Server);
        let files = staged(tmp.path(), &format!("s{i}"), &leaf, &pki.ca.cert_pem);
        let (code, out) = tokio::task::spawn_blocking({
            let dir = dir.clone();
            move || publish(&dir, &files)
        })
        .await
        .unwrap();
        assert_eq!(code, 0, "{out}");
        // The sidecar serves exactly the published certificate.
        let want = leaf.cert_der.clone();
        let deadline = std::time::Instant::now() + DEADLINE;
        loop {
            let tls = tls_connect(&addr, REPLICA, cfg.clone())
                .await
                .expect("handshake");
            let (_, conn) = tls.get_ref();
            let got = conn.peer_certificates().unwrap()[0].clone();
            if got == want {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "revision {i} not applied"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
    assert_eq!(
        server.log_count("rejected credential revision"),
        0,
        "a poll saw a torn revision:\n{}",
        server.logs().join("\n")
    );
    assert!(server.log_count("applied credential revision") >= 1);
}

/// A `PATH` whose directory part holds a `=` is a path, published under
/// its base name (`a=b`), not a `NAME=PATH` split at the first `=`. (The
/// summary line once named it `…/sub/a`; found while writing the
/// `publish_args` fuzz target's oracle, which checks `name_and_path`.)
#[test]
fn a_path_with_an_equals_sign_is_published_under_its_base_name() {
    let tmp = tempfile::tempdir().unwrap();
    let sub = tmp.path().join("sub");
    fs::create_dir_all(&sub).unwrap();
    fs::write(sub.join("a=b"), "1").unwrap();
    fs::write(sub.join("plain"), "2").unwrap();
    let dir = tmp.path().join("out");
    let files = [
        sub.join("a=b").to_str().unwrap().to_string(),
        format!("note={}", sub.join("plain").display()),
    ];
    let (code, out) = publish(&dir, &files);
    assert_eq!(code, 0, "{out}");
    assert_eq!(fs::read_to_string(dir.join("a=b")).unwrap(), "1");
    assert_eq!(fs::read_to_string(dir.join("note")).unwrap(), "2");
    assert!(!out.contains("sub/a"), "{out}");
}

/// `--mode` takes octal digits only: `+640` used to be read as 0640.
/// Found by the `publish_args` fuzz target (its reference parser).
#[test]
fn a_signed_mode_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("f");
    fs::write(&f, "x").unwrap();
    let dir = tmp.path().join("out");
    let (code, out) = run_bin(&[
        "publish",
        "--into",
        dir.to_str().unwrap(),
        "--mode",
        "+640",
        f.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("not an octal number"), "{out}");
    assert!(!dir.exists());
}

//! `publish` judges every file of the new revision with the sidecar's own
//! reader and loader, and carries over what it was not given: through the
//! real binary, each credential file kind is refused when the sidecar would
//! refuse it (naming the file) and accepted when it would not; a renewal
//! that gives `tls.crt tls.key ca.crt` keeps the `ca.crl` in force (and
//! judges it), `--drop ca.crl` removes it and says what that un-revokes;
//! and a running sidecar on the published directory keeps refusing the
//! revoked peer across the renewal.

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};

use common::*;
use mtls_sidecar::pki::{serial_of, Issued, Role};

/// Writes `contents` to a fresh file under `root` and returns `NAME=PATH`.
fn arg(root: &Path, name: &str, contents: &[u8]) -> String {
    let d = tempfile::Builder::new()
        .prefix("staged")
        .tempdir_in(root)
        .unwrap()
        .keep();
    let p = d.join("file");
    fs::write(&p, contents).unwrap();
    format!("{name}={}", p.display())
}

/// The three credential files of `leaf` from `ca_pem`.
fn creds(root: &Path, leaf: &Issued, ca_pem: &str) -> Vec<String> {
    vec![
        arg(root, "tls.crt", leaf.cert_pem.as_bytes()),
        arg(root, "tls.key", leaf.key_pem.as_bytes()),
        arg(root, "ca.crt", ca_pem.as_bytes()),
    ]
}

fn publish(into: &Path, extra: &[&str], files: &[String]) -> (i32, String) {
    let mut args = vec!["publish", "--into", into.to_str().unwrap()];
    args.extend_from_slice(extra);
    args.extend(files.iter().map(String::as_str));
    run_bin(&args)
}

fn data_target(dir: &Path) -> PathBuf {
    fs::read_link(dir.join("..data")).expect("..data is a symlink")
}

/// Publishes `files` and asserts it was refused naming `file` with
/// `detail`, leaving the revision in force untouched.
fn publish_refused(dir: &Path, files: &[String], file: &str, detail: &str) {
    let before = fs::read_link(dir.join("..data")).ok();
    let (code, out) = publish(dir, &[], files);
    assert_eq!(code, 1, "{file}: {out}");
    let named = format!("{}: ", dir.join(file).display());
    assert!(
        out.contains("not published") && out.contains(&named) && out.contains(detail),
        "{file}: want {named:?} and {detail:?} in:\n{out}"
    );
    assert_eq!(fs::read_link(dir.join("..data")).ok(), before, "{file}");
}

#[test]
fn each_credential_file_is_refused_as_the_sidecar_refuses_it_and_accepted_otherwise() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let pki = Pki::new("publish CA");
    let foreign = Pki::new("foreign CA");
    let leaf = pki.leaf(REPLICA, Role::Server);
    let dir = root.join("tls");
    let garbage = b"not a credential\n";
    let other_key = pki.leaf(REPLICA, Role::Server).key_pem;

    // tls.crt, tls.key, ca.crt: garbage, then a plausible wrong file.
    let mut files = creds(root, &leaf, &pki.ca.cert_pem);
    files[0] = arg(root, "tls.crt", garbage);
    publish_refused(&dir, &files, "tls.crt", "not valid PEM");
    files = creds(root, &leaf, &pki.ca.cert_pem);
    files[1] = arg(root, "tls.key", garbage);
    publish_refused(&dir, &files, "tls.key", "not valid PEM");
    files[1] = arg(root, "tls.key", other_key.as_bytes());
    publish_refused(&dir, &files, "tls.key", "does not match the certificate");
    files = creds(root, &leaf, &pki.ca.cert_pem);
    files[2] = arg(root, "ca.crt", garbage);
    publish_refused(&dir, &files, "ca.crt", "not valid PEM");
    files[2] = arg(root, "ca.crt", foreign.ca.cert_pem.as_bytes());
    publish_refused(&dir, &files, "tls.crt", "does not chain to");
    // ca.crl: garbage, then two CRLs of one key.
    files = creds(root, &leaf, &pki.ca.cert_pem);
    files.push(arg(root, "ca.crl", garbage));
    publish_refused(&dir, &files, "ca.crl", "CRL");
    files.pop();
    let twice = pki.crl(1, &[]).pem + &pki.crl(2, &[]).pem;
    files.push(arg(root, "ca.crl", twice.as_bytes()));
    publish_refused(&dir, &files, "ca.crl", "give one CRL per issuer key");
    files.pop();
    // intermediates: garbage.
    files.push(arg(root, "intermediates", garbage));
    publish_refused(&dir, &files, "intermediates", "not valid PEM");
    files.pop();
    assert!(fs::symlink_metadata(dir.join("..data")).is_err());

    // Accepted: each file judged, the CRL verified by the CA that signed
    // it; a CRL whose issuer is no CA we hold is kept unverified (judged at
    // handshake against an intermediate in the peer's chain), as the
    // sidecar keeps it; an
    // intermediate listed in `intermediates` is known, never an anchor.
    let revoked = pki.leaf(CONTROLLER, Role::Client);
    let inter = pki.ca.intermediate("publish intermediate", 30).unwrap();
    let two = pki.crl(2, &[&revoked]).pem + &foreign.crl(1, &[]).pem;
    files.push(arg(root, "ca.crl", two.as_bytes()));
    files.push(arg(root, "intermediates", inter.cert_pem.as_bytes()));
    let (code, out) = publish(&dir, &[], &files);
    assert_eq!(code, 0, "{out}");
    for line in [
        "tls.crt: CN=",
        "tls.key: matches tls.crt",
        "ca.crt: 1 trust anchor(s): CN=publish CA",
        "intermediates (with the chain of tls.crt): 1 known intermediate CA(s), never trust anchors: CN=publish intermediate",
        "ca.crl: CRL from CN=publish CA (CRL number 2, 1 revoked): verified, signed by CN=publish CA in ca.crt",
        "ca.crl: CRL from CN=foreign CA (CRL number 1, 0 revoked): unverified, its issuer is no CA we hold: enforced only against a peer's chain whose intermediate of that name verifies it",
    ] {
        assert!(out.contains(line), "{line:?} in:\n{out}");
    }
    let (code, text) = run_bin(&["check", "--tls-dir", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{text}");

    // A CRL older than the one in force is refused, as the sidecar refuses
    // it; a newer one alone is accepted, the rest kept and judged with it.
    let pem = |n: u64| pki.crl(n, &[&revoked]).pem;
    let older = [arg(root, "ca.crl", pem(1).as_bytes())];
    publish_refused(&dir, &older, "ca.crl", "older than the one in force");
    let newer = [arg(root, "ca.crl", pem(3).as_bytes())];
    let (code, out) = publish(&dir, &[], &newer);
    assert_eq!(code, 0, "{out}");
    let kept =
        "kept from the previous revision (not given): ca.crt, intermediates, tls.crt, tls.key";
    assert!(out.contains(kept), "{out}");
    assert!(
        out.contains("tls.crt: CN="),
        "kept files are judged:\n{out}"
    );
    // A kept file is judged like a given one: once ca.crt is another CA,
    // the CRL in force of the old one is ignored, not a reason to refuse.
    let moved = foreign.leaf(REPLICA, Role::Server);
    let mut files = creds(root, &moved, &foreign.ca.cert_pem);
    files.insert(0, "intermediates".into());
    files.insert(0, "--drop".into());
    let (code, out) = publish(&dir, &[], &files);
    assert_eq!(code, 0, "{out}");
    let ignored = "ca.crl: CRL from CN=publish CA (CRL number 3, 1 revoked): ignored, its CA CN=publish CA is no longer in ca.crt";
    assert!(out.contains(ignored), "{out}");
}

#[test]
fn a_renewal_keeps_the_crl_in_force_and_drop_removes_it() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let pki = Pki::new("publish CA");
    let dir = root.join("tls");
    let revoked = pki.leaf(CONTROLLER, Role::Client);
    let the_crl = pki.crl(1, &[&revoked]);
    let mut files = creds(root, &pki.leaf(REPLICA, Role::Server), &pki.ca.cert_pem);
    files.push(arg(root, "ca.crl", the_crl.pem.as_bytes()));
    let (code, out) = publish(&dir, &[], &files);
    assert_eq!(code, 0, "{out}");

    // The documented renewal: three files, the CRL not among them.
    let renewal = creds(root, &pki.leaf(REPLICA, Role::Server), &pki.ca.cert_pem);
    let (code, out) = publish(&dir, &[], &renewal);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(
            "kept from the previous revision (not given): ca.crl; --drop NAME removes one"
        ),
        "{out}"
    );
    assert!(
        out.contains("ca.crl: CRL from CN=publish CA (CRL number 1, 1 revoked): verified"),
        "{out}"
    );
    assert!(!out.contains("un-revokes"), "{out}");
    assert_eq!(fs::read_to_string(dir.join("ca.crl")).unwrap(), the_crl.pem);

    // Given and dropped at once is a usage error; nothing changes.
    let before = data_target(&dir);
    let (code, out) = publish(&dir, &["--drop", "tls.crt"], &renewal);
    assert_eq!(code, 2, "{out}");
    assert_eq!(data_target(&dir), before);

    // A CRL at the same number that lists fewer serials is applied with a
    // warning naming what becomes admissible, as the sidecar WARNs.
    let serial = serial_of(&revoked.cert_der).unwrap();
    let hex: Vec<String> = serial.iter().map(|b| format!("{b:02x}")).collect();
    let hex = hex.join(":");
    let shrunk = [arg(root, "ca.crl", pki.crl(1, &[]).pem.as_bytes())];
    let (code, out) = publish(&dir, &[], &shrunk);
    assert_eq!(code, 0, "{out}");
    let warning = format!("warning: un-revokes 1 serial(s) of CN=publish CA (CRL lists fewer serials without a higher CRL number): {hex}");
    assert!(out.contains(&warning), "{warning:?} in:\n{out}");
    let again = [arg(root, "ca.crl", the_crl.pem.as_bytes())];
    let (code, out) = publish(&dir, &[], &again);
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("un-revokes"), "{out}");

    // A higher CRL number leaving out a serial revoked within
    // --crl-prune-age (720h by default) un-revokes it, as the sidecar
    // judges; with a prune age shorter than the entry's, it prunes it.
    let higher =
        |n: u64, revoked: &[&Issued]| [arg(root, "ca.crl", pki.crl(n, revoked).pem.as_bytes())];
    let (code, out) = publish(&dir, &[], &higher(2, &[]));
    assert_eq!(code, 0, "{out}");
    let warning = format!("warning: un-revokes 1 serial(s) of CN=publish CA (CRL re-issued at a higher CRL number without them, revoked within --crl-prune-age: their certificates may still be valid): {hex}");
    assert!(out.contains(&warning), "{warning:?} in:\n{out}");
    let (code, out) = publish(&dir, &[], &higher(3, &[&revoked]));
    assert_eq!(code, 0, "{out}");
    let (code, out) = publish(&dir, &["--crl-prune-age", "1s"], &higher(4, &[]));
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(&format!("prunes 1 serial(s) of CN=publish CA (CRL re-issued at a higher CRL number without them, revoked longer ago than --crl-prune-age: their certificates expired): {hex}; the sidecar counts this in mtls_sidecar_crl_entries_pruned_total")), "{out}");
    assert!(!out.contains("un-revokes"), "{out}");
    let (code, out) = publish(&dir, &["--crl-prune-age", "0s"], &higher(5, &[&revoked]));
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("--crl-prune-age"), "{out}");
    let (code, out) = publish(&dir, &[], &higher(5, &[&revoked]));
    assert_eq!(code, 0, "{out}");

    // --drop ca.crl (no file given: the rest is kept) removes it, said on
    // stderr with what that un-revokes; dropping it again is a note.
    let (code, out) = publish(&dir, &["--drop", "ca.crl"], &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("dropped (--drop): ca.crl"), "{out}");
    let warning = format!("warning: un-revokes 1 serial(s) of CN=publish CA (CRL removed): {hex}");
    assert!(out.contains(&warning), "{warning:?} in:\n{out}");
    assert!(fs::symlink_metadata(dir.join("ca.crl")).is_err());
    let (code, out) = publish(&dir, &["--drop", "ca.crl"], &renewal);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("--drop ca.crl: not in the previous revision"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_running_sidecar_keeps_refusing_the_revoked_peer_across_a_renewal() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let pki = Pki::new("publish CA");
    let dir = root.join("tls");
    let revoked = pki.leaf(CONTROLLER, Role::Client);
    let good = pki.leaf(CONTROLLER, Role::Client);
    let mut files = creds(&root, &pki.leaf(REPLICA, Role::Server), &pki.ca.cert_pem);
    // Our CA's CRL, and one no known CA signed.
    let foreign = Pki::new("foreign CA");
    let crls = pki.crl(1, &[&revoked]).pem + &foreign.crl(1, &[]).pem;
    files.push(arg(&root, "ca.crl", crls.as_bytes()));
    let (code, out) = publish(&dir, &[], &files);
    assert_eq!(code, 0, "{out}");

    let echo = echo_target().await;
    let flags = ["--reload-interval", "20ms", "--admin", "127.0.0.1:0"];
    let server = start_server(&dir, &echo.addr.to_string(), &flags).await;
    let addr = server.addr("server");
    // What publish said of each CRL is what the sidecar holds (/status).
    let status = get(&server.admin(), "/status").await;
    let v: serde_json::Value = serde_json::from_str(&status.body).unwrap();
    let held = v["credentials"][0]["crls"]
        .as_array()
        .expect("crls")
        .clone();
    assert_eq!(held.len(), 2, "{}", status.body);
    for crl in &held {
        let text = |k: &str| crl[k].as_str().unwrap_or_default().to_string();
        let (issuer, state, detail) = (text("issuer"), text("state"), text("detail"));
        let said = format!("{state}, {detail}");
        assert!(
            out.lines()
                .any(|l| l.contains(&format!("CRL from {issuer} ")) && l.ends_with(&said)),
            "{issuer}: the sidecar holds it {said:?}; publish said:\n{out}"
        );
    }
    let ca = pki.ca.cert_pem.clone();
    let refused_now = |ident: Issued| {
        let (addr, ca) = (addr.clone(), ca.clone());
        async move {
            match tls_connect(&addr, REPLICA, client_config(Some(&ident), &ca)).await {
                Ok(mut s) => refused(&mut s).await,
                Err(_) => true,
            }
        }
    };
    assert!(
        refused_now(revoked.clone()).await,
        "revoked before the renewal"
    );

    // The renewal hook: a new server leaf, the CRL not given.
    let renewed = pki.leaf(REPLICA, Role::Server);
    let renewal = creds(&root, &renewed, &pki.ca.cert_pem);
    let (code, out) = tokio::task::spawn_blocking({
        let dir = dir.clone();
        move || publish(&dir, &[], &renewal)
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{out}");
    // Wait until the sidecar serves the renewed leaf: the new revision is
    // in force.
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let tls = tls_connect(&addr, REPLICA, client_config(Some(&good), &ca))
            .await
            .expect("handshake");
        if tls.get_ref().1.peer_certificates().unwrap()[0] == renewed.cert_der {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "renewal not applied");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(
        refused_now(revoked.clone()).await,
        "the renewal un-revoked the peer:\n{}",
        server.logs().join("\n")
    );
    assert!(!refused_now(good).await, "a good peer is admitted");
    assert_eq!(server.log_count("rejected credential revision"), 0);
    assert!(!server.warn_reason("revoked").is_empty());
}

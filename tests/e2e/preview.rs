//! `check … --against ADMIN_URL` against a running sidecar (the real
//! binary, a live mTLS connection through it): each reason a candidate
//! would close that connection for (`revoked`, `denied`, `untrusted`,
//! `expired`, and from a candidate configuration `bad_san` and
//! `pin_mismatch`), and when; nothing to close; an invalid candidate (exit
//! 2, before anything is fetched); and the sidecar itself left untouched.

use crate::common;

use std::path::Path;

use common::*;
use mtls_sidecar::pki::{Issued, LeafSpec, Role};

/// A server sidecar with a loopback admin endpoint, and one live
/// connection through it presenting the controller identity.
struct Running {
    creds: Creds,
    _echo: Echo,
    sc: Sidecar,
    conn: ClientTls,
}

impl Running {
    async fn start() -> Running {
        Running::with_admin("127.0.0.1:0").await
    }

    async fn with_admin(admin: &str) -> Running {
        Running::with(admin, |_| None).await
    }

    /// A running sidecar whose live connection presents the identity
    /// `peer` mints (the controller's when it gives none).
    async fn with(admin: &str, peer: impl FnOnce(&Creds) -> Option<Issued>) -> Running {
        Running::prepared(admin, peer, |_| {}).await
    }

    /// [`Running::with`], after `setup` wrote into the server's directory.
    async fn prepared(
        admin: &str,
        peer: impl FnOnce(&Creds) -> Option<Issued>,
        setup: impl FnOnce(&Creds),
    ) -> Running {
        let creds = Creds::new();
        setup(&creds);
        let peer = peer(&creds).unwrap_or_else(|| creds.controller.clone());
        let echo = echo_target().await;
        let sc = start_server(
            &creds.server_dir,
            &echo.addr.to_string(),
            &["--admin", admin],
        )
        .await;
        let cfg = client_config(Some(&peer), &creds.pki.ca.cert_pem);
        let mut conn = tls_connect(&sc.addr("server"), REPLICA, cfg)
            .await
            .expect("handshake");
        assert_eq!(roundtrip(&mut conn, b"before").await, b"before");
        Running {
            creds,
            _echo: echo,
            sc,
            conn,
        }
    }

    /// `check --against` this sidecar with `candidate` flags.
    async fn check(&self, candidate: &[&str]) -> (i32, String) {
        let admin = format!("http://{}", self.sc.admin());
        let mut args = vec!["check"];
        args.extend_from_slice(candidate);
        args.extend_from_slice(&["--against", &admin]);
        check_cmd(&args).await
    }

    /// The live connection still forwards: the preview changed nothing.
    async fn still_forwards(&mut self) {
        assert_eq!(roundtrip(&mut self.conn, b"after").await, b"after");
    }

    fn dir(&self, name: &str) -> std::path::PathBuf {
        self.creds.tmp.path().join(name)
    }
}

/// Runs the binary off the test's runtime threads; its code and output.
async fn check_cmd(args: &[&str]) -> (i32, String) {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_bin(&args)
    })
    .await
    .expect("check ran")
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write");
}

/// The CLOSE lines of a preview.
fn closes(out: &str) -> Vec<&str> {
    out.lines()
        .filter(|l| l.trim_start().starts_with("CLOSE"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crl_revoking_the_live_peer_closes_it_now() {
    let mut r = Running::start().await;
    let crl = r.creds.pki.crl(1, &[&r.creds.controller]);
    // A CRL file alone: the running trust with it in force.
    let file = r.dir("revoking.crl");
    write(&file, &crl.pem);
    let (code, out) = r.check(&["--crl", file.to_str().unwrap()]).await;
    assert_eq!(code, 1, "{out}");
    let cut = closes(&out);
    assert_eq!(cut.len(), 1, "{out}");
    assert!(cut[0].starts_with("  CLOSE revoked now: conn "), "{out}");
    assert!(cut[0].contains(CONTROLLER), "{out}");
    assert!(
        out.contains("route server: 1 of 1 live connection(s)"),
        "{out}"
    );
    // The same CRL inside a whole directory revision.
    let dir = r
        .creds
        .pki
        .dir(r.creds.tmp.path(), "with-crl", &r.creds.replica);
    write(&dir.join("ca.crl"), &crl.pem);
    let (code, out) = r.check(&["--tls-dir", dir.to_str().unwrap()]).await;
    assert_eq!(code, 1, "{out}");
    assert!(closes(&out)[0].contains("CLOSE revoked now"), "{out}");
    r.still_forwards().await;
    // A CRL revoking someone else cuts nothing.
    let other = r.creds.pki.leaf("other.svc", Role::Client);
    write(&file, &r.creds.pki.crl(2, &[&other]).pem);
    let (code, out) = r.check(&["--crl", file.to_str().unwrap()]).await;
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("route server: 0 of 1 live connection(s)"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deny_entry_naming_the_live_peer_closes_it_now() {
    let mut r = Running::start().await;
    // A deny file alone: the running trust with this list in force.
    let file = r.dir("deny");
    write(
        &file,
        &format!("# incident 42\nsan:{}\n", CONTROLLER.to_uppercase()),
    );
    let (code, out) = r.check(&["--deny-file", file.to_str().unwrap()]).await;
    assert_eq!(code, 1, "{out}");
    let cut = closes(&out);
    assert_eq!(cut.len(), 1, "{out}");
    assert!(cut[0].starts_with("  CLOSE denied now: conn "), "{out}");
    // The same entry as a whole directory revision's `deny` file.
    let dir = r
        .creds
        .pki
        .dir(r.creds.tmp.path(), "with-deny", &r.creds.replica);
    write(&dir.join("deny"), &format!("san:{CONTROLLER}\n"));
    let (code, out) = r.check(&["--tls-dir", dir.to_str().unwrap()]).await;
    assert_eq!(code, 1, "{out}");
    assert!(closes(&out)[0].contains("CLOSE denied now"), "{out}");
    r.still_forwards().await;
    // An entry naming someone else cuts nothing; a malformed file is exit 2.
    write(&file, "san:someone-else.svc\n");
    let (code, out) = r.check(&["--deny-file", file.to_str().unwrap()]).await;
    assert_eq!(code, 0, "{out}");
    write(&file, "san:ok.svc\nserial:nonsense\n");
    let (code, out) = r.check(&["--deny-file", file.to_str().unwrap()]).await;
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("line 2"), "{out}");
    r.still_forwards().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_deny_file_denies_nothing_as_the_sidecar_reads_it() {
    let mut r = Running::start().await;
    let file = r.dir("deny");
    for text in ["", "\n  \n", "# lifted after incident 42\n"] {
        write(&file, text);
        let (code, out) = r.check(&["--deny-file", file.to_str().unwrap()]).await;
        assert_eq!(code, 0, "{text:?}: {out}");
        assert!(
            out.contains("route server: 0 of 1 live connection(s)"),
            "{text:?}: {out}"
        );
    }
    r.still_forwards().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_carries_the_running_crls_and_deny_list_a_lone_candidate_keeps() {
    // The running sidecar holds a CRL (revoking a bystander) and a deny
    // entry (naming another): `/connections` hands both to the preview, so
    // a CRL alone is judged with this deny-list and a deny file alone with
    // this CRL (the judgement itself: the unit test in tools::check::preview).
    let r = Running::prepared(
        "127.0.0.1:0",
        |_| None,
        |c| {
            let other = c.pki.leaf("other.svc", Role::Client);
            write(&c.server_dir.join("ca.crl"), &c.pki.crl(1, &[&other]).pem);
            write(&c.server_dir.join("deny"), "san:Denied.SVC\n");
        },
    )
    .await;
    let a = get(&r.sc.admin(), "/connections").await;
    assert_eq!(a.code, 200, "{}", a.body);
    let page: serde_json::Value = serde_json::from_str(&a.body).expect("json");
    let route = &page["routes"][0];
    let crls = route["crls_pem"].as_str().expect("crls_pem");
    assert_eq!(
        crls.matches("-----BEGIN X509 CRL-----").count(),
        1,
        "{crls}"
    );
    assert_eq!(
        route["deny"],
        serde_json::json!(["san:denied.svc"]),
        "{route}"
    );
    // Neither names the live peer: no lone candidate cuts it.
    let file = r.dir("deny-candidate");
    write(&file, "san:someone-else.svc\n");
    let (code, out) = r.check(&["--deny-file", file.to_str().unwrap()]).await;
    assert_eq!(code, 0, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_ca_makes_the_peer_untrusted_now_or_at_the_end_of_the_grace() {
    let mut r = Running::start().await;
    let other = Pki::new("replacement CA");
    let replica = other.leaf(REPLICA, Role::Server);
    let dir = other.dir(r.creds.tmp.path(), "new-ca", &replica);
    let d = dir.to_str().unwrap();
    // The sidecar runs with no trust grace: the old CA goes at once.
    let (code, out) = r.check(&["--tls-dir", d]).await;
    assert_eq!(code, 1, "{out}");
    let cut = closes(&out);
    assert_eq!(cut.len(), 1, "{out}");
    assert!(cut[0].starts_with("  CLOSE untrusted now: "), "{out}");
    // With a grace, the dropped CA is still trusted until it ends.
    let (code, out) = r.check(&["--tls-dir", d, "--trust-grace", "1h"]).await;
    assert_eq!(code, 1, "{out}");
    assert!(
        closes(&out)[0].starts_with("  CLOSE untrusted at the end of --trust-grace ("),
        "{out}"
    );
    // Both CAs in the candidate's bundle: nothing is cut.
    let both = format!("{}{}", other.ca.cert_pem, r.creds.pki.ca.cert_pem);
    write(&dir.join("ca.crt"), &both);
    let (code, out) = r.check(&["--tls-dir", d]).await;
    assert_eq!(code, 0, "{out}");
    r.still_forwards().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_manifest_is_a_candidate_too() {
    use base64::Engine;
    let r = Running::start().await;
    let other = Pki::new("replacement CA");
    let replica = other.leaf(REPLICA, Role::Server);
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let manifest = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: candidate\ntype: kubernetes.io/tls\ndata:\n  \
         tls.crt: {}\n  tls.key: {}\n  ca.crt: {}\n",
        b64(&replica.cert_pem),
        b64(&replica.key_pem),
        b64(&other.ca.cert_pem)
    );
    let file = r.dir("candidate.yaml");
    write(&file, &manifest);
    let (code, out) = r.check(&["--secret", file.to_str().unwrap()]).await;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("Secret candidate"), "{out}");
    assert!(
        closes(&out)[0].starts_with("  CLOSE untrusted now: "),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_running_revision_cuts_nothing() {
    let r = Running::start().await;
    let (code, out) = r
        .check(&["--tls-dir", r.creds.server_dir.to_str().unwrap()])
        .await;
    assert_eq!(code, 0, "{out}");
    assert!(closes(&out).is_empty(), "{out}");
    assert!(
        out.contains("route server: 0 of 1 live connection(s)"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_candidate_is_exit_2_before_anything_is_fetched() {
    let r = Running::start().await;
    // A key that does not match its certificate.
    let dir = r
        .creds
        .pki
        .dir(r.creds.tmp.path(), "mismatch", &r.creds.replica);
    write(&dir.join("tls.key"), &r.creds.controller.key_pem);
    let (code, out) = r.check(&["--tls-dir", dir.to_str().unwrap()]).await;
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("the candidate is invalid"), "{out}");
    // A CRL file that is not one.
    let bad = r.dir("garbage.crl");
    write(
        &bad,
        "-----BEGIN X509 CRL-----\nnot base64\n-----END X509 CRL-----\n",
    );
    let (code, out) = r.check(&["--crl", bad.to_str().unwrap()]).await;
    assert_eq!(code, 2, "{out}");
    // Even when it would also cut something and the sidecar is unreachable,
    // the invalid candidate decides: exit 2, naming the candidate.
    let args = [
        "check",
        "--crl",
        bad.to_str().unwrap(),
        "--against",
        "127.0.0.1:1",
    ];
    let (code, out) = check_cmd(&args).await;
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("the candidate is invalid"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_that_refuses_connections_is_a_clear_error() {
    let r = Running::with_admin("0.0.0.0:0").await;
    let port = r.sc.admin().rsplit_once(':').unwrap().1.to_string();
    let dir = r.creds.server_dir.to_str().unwrap();
    let url = format!("http://127.0.0.1:{port}/");
    let (code, out) = check_cmd(&["check", "--tls-dir", dir, "--against", &url]).await;
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("403") && out.contains("--admin-connections on"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_expiring_before_the_grace_ends_is_listed_as_expired() {
    use std::time::{Duration, SystemTime};
    // The live peer's certificate ends in ten minutes.
    let ends = SystemTime::now() + Duration::from_secs(600);
    let r = Running::with("127.0.0.1:0", |c| {
        let spec = LeafSpec::dns(CONTROLLER, Role::Client, 1)
            .valid(SystemTime::now() - Duration::from_secs(60), ends);
        Some(c.pki.issue(&spec))
    })
    .await;
    let other = Pki::new("replacement CA");
    let replica = other.leaf(REPLICA, Role::Server);
    let dir = other.dir(r.creds.tmp.path(), "new-ca", &replica);
    let d = dir.to_str().unwrap();
    // The candidate would cut it when an hour's grace ends; its own
    // certificate ends first, and that is when it closes.
    let (code, out) = r.check(&["--tls-dir", d, "--trust-grace", "1h"]).await;
    assert_eq!(code, 1, "{out}");
    let cut = closes(&out);
    assert_eq!(cut.len(), 1, "{out}");
    let at = mtls_sidecar::credentials::fmt_time(mtls_sidecar::identity::time_to_epoch(ends));
    assert!(
        cut[0].starts_with(&format!("  CLOSE expired at {at} (notAfter): conn ")),
        "{out}"
    );
    assert!(
        cut[0].contains("untrusted"),
        "the candidate's own reason: {out}"
    );
    // A grace ending before the certificate does: the candidate's cut.
    let (code, out) = r.check(&["--tls-dir", d, "--trust-grace", "1m"]).await;
    assert_eq!(code, 1, "{out}");
    assert!(
        closes(&out)[0].starts_with("  CLOSE untrusted at the end of --trust-grace ("),
        "{out}"
    );
    // Expiring within the grace is not a cut of a candidate that cuts
    // nothing.
    let (code, out) = r
        .check(&[
            "--tls-dir",
            r.creds.server_dir.to_str().unwrap(),
            "--trust-grace",
            "1h",
        ])
        .await;
    assert_eq!(code, 0, "{out}");
}

/// A `run --config` file for the running sidecar's route `server`, with
/// the credentials of `tls_dir` and `extra` keys.
fn config(r: &Running, name: &str, tls_dir: &Path, extra: &str) -> String {
    let file = r.dir(name);
    write(
        &file,
        &format!(
            "tls_dir = {:?}\n[[route]]\nname = \"server\"\nmode = \"server\"\n\
             listen = \"127.0.0.1:0\"\ntarget = \"127.0.0.1:9\"\n{extra}\n",
            tls_dir.to_str().unwrap()
        ),
    );
    file.to_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_config_whose_san_policy_refuses_the_peer_cuts_it_at_restart() {
    let mut r = Running::start().await;
    let dir = r.creds.server_dir.clone();
    // The running policy: nothing to cut.
    let same = config(
        &r,
        "same.toml",
        &dir,
        &format!("allow_san = [{CONTROLLER:?}]"),
    );
    let (code, out) = r.check(&["--config", &same]).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("candidate: configuration "), "{out}");
    assert!(
        out.contains("route server: 0 of 1 live connection(s)"),
        "{out}"
    );
    // A policy naming someone else refuses the live peer's next handshake.
    let other = config(&r, "other.toml", &dir, "allow_san = [\"*.other.svc\"]");
    let (code, out) = r.check(&["--config", &other]).await;
    assert_eq!(code, 1, "{out}");
    let cut = closes(&out);
    assert_eq!(cut.len(), 1, "{out}");
    assert!(
        cut[0].starts_with("  CLOSE bad_san at restart: conn "),
        "{out}"
    );
    assert!(cut[0].contains(CONTROLLER), "{out}");
    // Any SAN from the CA: nothing to cut.
    let any = config(&r, "any.toml", &dir, "allow_any_san = true");
    let (code, out) = r.check(&["--config", &any]).await;
    assert_eq!(code, 0, "{out}");
    r.still_forwards().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_config_whose_pins_miss_the_peer_key_cuts_it_at_restart() {
    let mut r = Running::start().await;
    let dir = r.creds.server_dir.clone();
    let pin = |i: &Issued| {
        let p = mtls_sidecar::identity::pin::spki_sha256(&i.cert_der).expect("pin");
        mtls_sidecar::identity::pin::encode(&p)
    };
    let someone = r.creds.pki.leaf(CONTROLLER, Role::Client);
    let missing = config(
        &r,
        "pinned-other.toml",
        &dir,
        &format!(
            "allow_san = [{CONTROLLER:?}]\nallow_spki_sha256 = [{:?}]",
            pin(&someone)
        ),
    );
    let (code, out) = r.check(&["--config", &missing]).await;
    assert_eq!(code, 1, "{out}");
    let cut = closes(&out);
    assert_eq!(cut.len(), 1, "{out}");
    assert!(
        cut[0].starts_with("  CLOSE pin_mismatch at restart: conn "),
        "{out}"
    );
    assert!(cut[0].contains("matches no pinned key"), "{out}");
    // The live peer's own key pinned: nothing to cut.
    let own = config(
        &r,
        "pinned-own.toml",
        &dir,
        &format!(
            "allow_san = [{CONTROLLER:?}]\nallow_spki_sha256 = [{:?}, {:?}]",
            pin(&someone),
            pin(&r.creds.controller)
        ),
    );
    let (code, out) = r.check(&["--config", &own]).await;
    assert_eq!(code, 0, "{out}");
    r.still_forwards().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_config_is_judged_whole_by_route_name_and_its_credentials() {
    let r = Running::start().await;
    let allow = format!("allow_san = [{CONTROLLER:?}]");
    // Its credentials: a directory of another CA, applied at restart.
    let other = Pki::new("replacement CA");
    let replica = other.leaf(REPLICA, Role::Server);
    let new_ca = other.dir(r.creds.tmp.path(), "new-ca", &replica);
    let file = config(&r, "new-ca.toml", &new_ca, &allow);
    let (code, out) = r.check(&["--config", &file]).await;
    assert_eq!(code, 1, "{out}");
    assert!(
        closes(&out)[0].starts_with("  CLOSE untrusted at restart: "),
        "{out}"
    );
    // A candidate without the running route says so.
    let renamed = r.dir("renamed.toml");
    let text = std::fs::read_to_string(config(&r, "x.toml", &r.creds.server_dir, &allow))
        .unwrap()
        .replace("name = \"server\"", "name = \"renamed\"");
    write(&renamed, &text);
    let (code, out) = r.check(&["--config", renamed.to_str().unwrap()]).await;
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("route server: the candidate has no route of this name"),
        "{out}"
    );
    // An invalid configuration: exit 2 with the config loader's own error,
    // as `check --config` alone prints it.
    let bad = config(&r, "bad.toml", &r.creds.server_dir, "allow_san = [\"*\"]");
    let (code, out) = r.check(&["--config", &bad]).await;
    assert_eq!(code, 2, "{out}");
    let (alone, loader) = check_cmd(&["check", "--config", &bad]).await;
    assert_eq!(alone, 2, "{loader}");
    let loader = loader.trim().trim_start_matches("error: ");
    assert!(out.contains(loader), "{out}\nvs\n{loader}");
    // Credential flags beside --config: a usage error.
    let (code, out) = r
        .check(&["--config", &file, "--tls-dir", new_ca.to_str().unwrap()])
        .await;
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("--config takes the credentials from the file"),
        "{out}"
    );
}

/// The preview compares as the sidecar does, after the one normalisation
/// `--allow-san` uses: a live peer whose URI SAN spells the scheme and
/// trust domain in upper case is cut by `san:` with the lower-case ID and
/// by the wildcard entries `--allow-san` has; a wildcard that cannot
/// match is refused naming its line and why (exit 2). Seen failing before
/// the fix (exit 0: the entries compared byte for byte, the wildcards as
/// literal text).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deny_preview_compares_identities_as_the_allow_list_does() {
    let upper = "SPIFFE://TD/ns/prod/sa/controller-7";
    let mut r = Running::with("127.0.0.1:0", |c| {
        let mut spec = LeafSpec::dns(CONTROLLER, Role::Client, 30);
        spec.uris = vec![upper.to_string()];
        Some(c.pki.issue(&spec))
    })
    .await;
    let file = r.dir("deny");
    for entry in [
        "san:spiffe://td/ns/prod/sa/controller-7",
        "san:spiffe://TD/ns/prod/sa/controller-7",
        "san:spiffe://td/ns/prod/sa/*",
        "san:spiffe://td/ns/prod/**",
    ] {
        write(&file, &format!("{entry}\n"));
        let (code, out) = r.check(&["--deny-file", file.to_str().unwrap()]).await;
        assert_eq!(code, 1, "{entry}: {out}");
        let cut = closes(&out);
        assert_eq!(cut.len(), 1, "{entry}: {out}");
        assert!(cut[0].starts_with("  CLOSE denied now: conn "), "{out}");
    }
    write(&file, "san:spiffe://td/ns/prod/sa/controller-8\n");
    let (code, out) = r.check(&["--deny-file", file.to_str().unwrap()]).await;
    assert_eq!(code, 0, "{out}");
    write(&file, "# incident\nsan:fine.env-1.svc\nsan:*.svc\n");
    let (code, out) = r.check(&["--deny-file", file.to_str().unwrap()]).await;
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("line 3: san: invalid SAN pattern \"*.svc\""),
        "{out}"
    );
    assert!(out.contains("at least two labels after '*.'"), "{out}");
    r.still_forwards().await;
}

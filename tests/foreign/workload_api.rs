//! The SPIFFE Workload API as a credential source, against an independent
//! Workload API server (tests/common/spiffe/agent.py: Python, grpcio, protobuf
//! encoded by hand from the spec): start-up, agent never up, rotation
//! under load, bundle shrink, a cross-domain forgery, agent restart,
//! malformed contexts, and the command line's rules.

use crate::common;
use crate::common::spiffe as harness;
use crate::common::spiffe::sidecar;

use std::time::{Duration, Instant};

use common::expo::Exposition;
use common::tools::skip_unless;
use common::{get, get_until, roundtrip, run_bin, Sidecar, DEADLINE};
use harness::{dns_leaf, svid_leaf, Agent, Svid};
use mtls_sidecar::pki::DevCa;
use sidecar::{
    admitted, connect_as, fixture, metric, running, server, status, wait_serial, Fixture,
    CLIENT_ID, SERVER_ID,
};

#[tokio::test]
async fn start_serves_the_svid_and_sends_the_metadata() {
    if skip_unless(&["python3", "grpcio"]) {
        return;
    }
    let Fixture {
        agent,
        svid,
        ca,
        tmp: _tmp,
    } = fixture(&[]).await;
    let sc = server(&agent, &[]).await;
    get_until(&sc.admin(), "/readyz", 200).await;
    let st = wait_serial(&sc, &svid.leaf).await;
    let store = &st["credentials"][0];
    assert_eq!(store["workload_api"]["spiffe_id"], SERVER_ID);
    assert_eq!(store["workload_api"]["trust_domain"], "prod.test");
    assert_eq!(store["workload_api"]["agent_up"], true);
    assert_eq!(store["trust_anchors"].as_array().unwrap().len(), 1);
    assert!(store["source"]
        .as_str()
        .unwrap()
        .starts_with("workload-api "));

    let client = svid_leaf(&ca, &[CLIENT_ID]);
    let mut s = connect_as(&sc, &client, &ca).await;
    assert_eq!(roundtrip(&mut s, b"hello").await, b"hello");
    assert_eq!(metric(&sc, "mtls_sidecar_workload_api_up").await, Some(1.0));
    // Every request carried the metadata: the agent refused none.
    let stats = agent.op("stats").await;
    assert!(stats["requests"].as_u64().unwrap() >= 1, "{stats}");
    assert_eq!(stats["refused"], 0, "{stats}");
}

#[tokio::test]
async fn the_test_agent_refuses_requests_without_the_metadata() {
    if skip_unless(&["python3", "grpcio"]) {
        return;
    }
    let out = std::process::Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/common/spiffe/agent.py"
        ))
        .arg("--selftest")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[tokio::test]
async fn agent_never_up_is_not_ready_until_it_comes() {
    if skip_unless(&["python3", "grpcio"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ca = DevCa::new("prod.test CA", 30).unwrap();
    let agent = Agent::start(tmp.path(), false);
    let sc = server(&agent, &[]).await;
    let not_ready = get_until(&sc.admin(), "/readyz", 503).await;
    assert!(
        not_ready.body.contains("no X.509-SVID from workload-api"),
        "{}",
        not_ready.body
    );
    assert_eq!(get(&sc.admin(), "/livez").await.code, 200);
    assert_eq!(metric(&sc, "mtls_sidecar_workload_api_up").await, Some(0.0));
    // Fail closed: no identity, no trust, nobody admitted.
    let client = svid_leaf(&ca, &[CLIENT_ID]);
    assert!(!admitted(&sc, &client, &ca).await);
    sc.wait_log(&["Workload API agent unreachable"]).await;

    let svid = Svid::new(&ca, SERVER_ID);
    agent.op("start").await;
    agent.push(&[&svid], &[]).await;
    get_until(&sc.admin(), "/readyz", 200).await;
    assert!(admitted(&sc, &client, &ca).await);
    assert_eq!(metric(&sc, "mtls_sidecar_workload_api_up").await, Some(1.0));
    // Once per state change, however many retries: no busy loop of logs.
    assert_eq!(sc.log_count("Workload API agent unreachable"), 1);
}

#[tokio::test]
async fn malformed_contexts_are_rejected_and_the_last_good_stays() {
    if skip_unless(&["python3", "grpcio"]) {
        return;
    }
    let Fixture {
        agent,
        svid: good,
        ca,
        tmp: _tmp,
    } = fixture(&[]).await;
    let sc = server(&agent, &[]).await;
    wait_serial(&sc, &good.leaf).await;
    let client = svid_leaf(&ca, &[CLIENT_ID]);

    // Key mismatch: the chain of one SVID with the key of another.
    let other = Svid::new(&ca, SERVER_ID);
    let mut mismatched = Svid::new(&ca, SERVER_ID);
    mismatched.leaf.key_pem = other.leaf.key_pem.clone();
    // Bad DER in the chain.
    let mut bad_der = Svid::new(&ca, SERVER_ID);
    bad_der.leaf.cert_der = rustls::pki_types::CertificateDer::from(vec![0x30, 0x03, 1, 2, 3]);
    let mut rejections = 0;
    for (what, push) in [
        ("key mismatch", Some(&mismatched)),
        ("bad DER", Some(&bad_der)),
        ("empty SVID list", None),
    ] {
        match push {
            Some(s) => agent.push(&[s], &[]).await,
            None => agent.push(&[], &[]).await,
        }
        rejections += 1;
        let deadline = Instant::now() + DEADLINE;
        loop {
            let body = get(&sc.admin(), "/metrics").await.body;
            let m = Exposition::parse(&body).unwrap();
            let n = m
                .value(
                    "mtls_sidecar_credential_reloads_total",
                    &[("result", "rejected")],
                )
                .unwrap_or(0.0);
            if n >= rejections as f64 {
                break;
            }
            assert!(Instant::now() < deadline, "{what} not rejected:\n{body}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let st = wait_serial(&sc, &good.leaf).await;
        let error = st["credentials"][0]["last_rejected"]["error"].to_string();
        assert!(!error.is_empty() && error != "null", "{what}: {st}");
        assert!(admitted(&sc, &client, &ca).await, "{what}");
    }
    // --svid naming an ID the agent does not offer: rejected, named.
    drop(sc);
    let sc = server(&agent, &["--svid", "spiffe://prod.test/not/offered"]).await;
    agent.push(&[&good], &[]).await;
    let r = get_until(&sc.admin(), "/readyz", 503).await;
    let deadline = Instant::now() + DEADLINE;
    loop {
        let st = status(&sc).await;
        let e = st["credentials"][0]["last_rejected"]["error"].to_string();
        if e.contains("no SVID with SPIFFE ID spiffe://prod.test/not/offered") {
            break;
        }
        assert!(Instant::now() < deadline, "{st}\n{}", r.body);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A server sidecar whose agent streams a federated bundle for
/// partner.test, admitting CLIENT_ID, partner.test's controller and the
/// DNS name controller.env-1.svc: every refusal below is the trust
/// domain rule's, not the allow-list's.
struct Scoped {
    _tmp: tempfile::TempDir,
    _agent: Agent,
    sc: Sidecar,
    ca: DevCa,
    fed_ca: DevCa,
}

const PARTNER_ID: &str = "spiffe://partner.test/ns/app/sa/controller";

async fn scoped() -> Scoped {
    let fed_ca = DevCa::new("partner.test CA", 30).unwrap();
    let f = fixture(&[("partner.test", &fed_ca)]).await;
    let (agent, svid, ca, tmp) = (f.agent, f.svid, f.ca, f.tmp);
    let sc = server(
        &agent,
        &[
            "--allow-san",
            PARTNER_ID,
            "--allow-san",
            "controller.env-1.svc",
        ],
    )
    .await;
    wait_serial(&sc, &svid.leaf).await;
    // Our own trust domain's ID from our CA is admitted.
    assert!(admitted(&sc, &svid_leaf(&ca, &[CLIENT_ID]), &ca).await);
    Scoped {
        _tmp: tmp,
        _agent: agent,
        sc,
        ca,
        fed_ca,
    }
}

#[tokio::test]
async fn a_peer_of_another_trust_domain_is_refused_even_if_our_ca_signed_it() {
    if skip_unless(&["python3", "grpcio"]) {
        return;
    }
    let s = scoped().await;
    // Our CA minting another trust domain's ID: a forgery.
    let forged = svid_leaf(&s.ca, &[PARTNER_ID]);
    assert!(
        !admitted(&s.sc, &forged, &s.ca).await,
        "cross-domain forgery admitted"
    );
    s.sc.wait_log(&["reason=\"unknown_ca\"", "spiffe://partner.test"])
        .await;
    // The partner's CA for its own ID: its federated bundle vouches.
    let partner = svid_leaf(&s.fed_ca, &[PARTNER_ID]);
    assert!(admitted(&s.sc, &partner, &s.ca).await);
}

#[tokio::test]
async fn a_dns_allow_entry_does_not_admit_a_peer_without_a_spiffe_id() {
    if skip_unless(&["python3", "grpcio"]) {
        return;
    }
    let s = scoped().await;
    let dns_only = dns_leaf(&s.ca, "controller.env-1.svc");
    assert!(
        !admitted(&s.sc, &dns_only, &s.ca).await,
        "no SPIFFE ID admitted"
    );
}

#[tokio::test]
async fn a_peer_with_two_uri_sans_is_no_svid() {
    if skip_unless(&["python3", "grpcio"]) {
        return;
    }
    let s = scoped().await;
    let two = svid_leaf(&s.ca, &[CLIENT_ID, "spiffe://prod.test/also"]);
    assert!(!admitted(&s.sc, &two, &s.ca).await, "two URI SANs admitted");
}

/// A server route's arguments, but for its credentials.
const SERVER_ARGS: [&str; 7] = [
    "server",
    "--listen",
    "127.0.0.1:0",
    "--target",
    "127.0.0.1:9",
    "--allow-san",
    CLIENT_ID,
];

#[tokio::test]
async fn command_line_rules() {
    let sock = "unix:///tmp/agent.sock";
    let base = SERVER_ARGS;
    let with = |extra: &[&str]| {
        let mut a: Vec<&str> = base.to_vec();
        a.extend_from_slice(extra);
        run_bin(&a)
    };
    let (code, out) = with(&["--workload-api", sock, "--tls-dir", "/tmp"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("workload-api"), "{out}");
    let (code, out) = with(&[
        "--workload-api",
        sock,
        "--cert",
        "a",
        "--key",
        "b",
        "--ca",
        "c",
    ]);
    assert_eq!(code, 2, "{out}");
    let (code, out) = with(&["--workload-api", "tcp://127.0.0.1:1"]);
    assert_eq!(code, 2, "{out}");
    let (code, out) = with(&["--tls-dir", "/tmp", "--svid", SERVER_ID]);
    assert_eq!(code, 2, "{out}");
    let (code, out) = with(&["--workload-api", sock, "--svid", "not-an-id"]);
    assert_eq!(code, 2, "{out}");
    // The keepalive: at least five seconds, at most an hour.
    for bad in ["0s", "4s", "2h", "soon"] {
        let (code, out) = with(&["--workload-api", sock, "--workload-api-keepalive", bad]);
        assert_eq!(code, 2, "{bad}: {out}");
        assert!(out.contains("--workload-api-keepalive"), "{out}");
    }
    // A client route on the Workload API must expect a SPIFFE ID.
    let (code, out) = run_bin(&[
        "client",
        "--listen",
        "127.0.0.1:0",
        "--target",
        "replica.test:6877",
        "--workload-api",
        sock,
    ]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("--expect-san"), "{out}");
}

#[test]
fn bare_flag_reads_spiffe_endpoint_socket_and_the_variable_alone_changes_nothing() {
    let base = SERVER_ARGS;
    // Bare flag without the variable: a usage error naming it.
    let mut cmd = std::process::Command::new(common::bin());
    cmd.args(base)
        .arg("--workload-api")
        .env_remove("SPIFFE_ENDPOINT_SOCKET");
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("SPIFFE_ENDPOINT_SOCKET"));
    // The variable alone (pod-wide injection) does not replace --tls-dir:
    // the directory is read (and here missing), not the socket.
    let mut cmd = std::process::Command::new(common::bin());
    cmd.args(base)
        .args(["--tls-dir", "/nonexistent-tls-dir"])
        .env("SPIFFE_ENDPOINT_SOCKET", "unix:///nonexistent.sock");
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("/nonexistent-tls-dir"), "{err}");
}

#[test]
fn the_spiffe_csi_example_parses_with_the_real_cli_and_mounts_the_socket_it_dials() {
    use clap::Parser;
    use mtls_sidecar::cli::{Cli, Command};
    use mtls_sidecar::tools::inject::manifest::{apply, Action};
    use mtls_sidecar::tools::inject::{yaml, Options};
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/spiffe/replica.yaml");
    let docs = yaml::load(&std::fs::read_to_string(path).unwrap()).unwrap();
    let template = docs
        .iter()
        .find(|d| d["kind"] == "StatefulSet")
        .expect("a StatefulSet");
    // The example is an annotated template: judge what injection makes of it.
    let set = apply(template, Action::Inject, &Options::default()).expect("it injects");
    let spec = &set["spec"]["template"]["spec"];
    let sidecar = &spec["initContainers"][0];
    assert_eq!(sidecar["name"], "mtls-sidecar");
    assert!(sidecar["args"]
        .as_array()
        .unwrap()
        .contains(&serde_json::json!("--exclusive")));
    let args: Vec<String> = std::iter::once("mtls-sidecar".to_string())
        .chain(
            sidecar["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap().to_string()),
        )
        .collect();
    let cli = Cli::try_parse_from(&args).expect("args parse");
    let Command::Server(server) = cli.command else {
        panic!("the replica runs `server`")
    };
    let settings = server.to_spec().validate().expect("args validate");
    let endpoint = match &settings.routes[0].credentials {
        mtls_sidecar::credentials::CredentialSource::WorkloadApi { endpoint, .. } => {
            endpoint.clone()
        }
        other => panic!("not the Workload API: {other:?}"),
    };
    let socket_dir = endpoint
        .trim_start_matches("unix://")
        .rsplit_once('/')
        .unwrap()
        .0
        .to_string();
    let mount = &sidecar["volumeMounts"][0];
    assert_eq!(mount["mountPath"].as_str(), Some(socket_dir.as_str()));
    let volume = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the mounted volume");
    assert_eq!(volume["csi"]["driver"].as_str(), Some("csi.spiffe.io"));
    assert!(server
        .allow_san
        .iter()
        .all(|s| s.starts_with("spiffe://prod.example/")));
}

#[tokio::test]
async fn check_fetches_a_context_says_what_it_holds_and_judges_it_like_a_directory() {
    if skip_unless(&["python3", "grpcio"]) {
        return;
    }
    let fed_ca = DevCa::new("partner.test CA", 30).unwrap();
    let Fixture {
        agent,
        ca,
        tmp: _tmp,
        ..
    } = fixture(&[("partner.test", &fed_ca)]).await;
    let endpoint = agent.endpoint();
    let check = |extra: &'static [&'static str]| {
        let endpoint = endpoint.clone();
        tokio::task::spawn_blocking(move || {
            let mut args = vec!["check", "--workload-api", endpoint.as_str()];
            args.extend_from_slice(extra);
            run_bin(&args)
        })
    };
    let (code, out) = check(&["--role", "both"]).await.unwrap();
    assert_eq!(code, 0, "{out}");
    for needle in [
        "fetched from unix://",
        &format!("SVID {SERVER_ID}"),
        "bundle of prod.test: 1 authorities",
        "bundle of partner.test: 1 authorities",
        "federated bundles, each trusted for its own trust domain's IDs only: partner.test",
        "the sidecar accepts this revision",
    ] {
        assert!(out.contains(needle), "{needle:?} missing:\n{out}");
    }
    assert!(!out.contains("FAIL"), "{out}");

    // A key that does not match: a FAIL, as for a directory.
    let other = Svid::new(&ca, SERVER_ID);
    let mut mismatched = Svid::new(&ca, SERVER_ID);
    mismatched.leaf.key_pem = other.leaf.key_pem.clone();
    agent.push(&[&mismatched], &[]).await;
    let (code, out) = check(&[]).await.unwrap();
    assert_ne!(code, 0, "{out}");
    // An agent that is not there: an error, exit 1.
    agent.op("stop").await;
    let (code, out) = check(&[]).await.unwrap();
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("error: --workload-api"), "{out}");
}

/// `check --workload-api ENDPOINT --against ADMIN` (and a `--config`
/// naming `workload_api`) previews what that agent hands out now against
/// a running sidecar: fetched, not refused as a source with no file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_against_previews_what_another_agent_hands_out_now() {
    if skip_unless(&["python3", "grpcio"]) {
        return;
    }
    let (f, sc) = running(&[]).await;
    let client = svid_leaf(&f.ca, &[CLIENT_ID]);
    let mut live = connect_as(&sc, &client, &f.ca).await;
    assert_eq!(roundtrip(&mut live, b"before").await, b"before");
    // The candidate comes from a second agent: the running sidecar's own
    // agent must not hand it out.
    let cand_dir = tempfile::tempdir().unwrap();
    let cand = Agent::start(cand_dir.path(), true);
    let admin = format!("http://{}", sc.admin());
    let check = |args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run_bin(&args)
        })
    };
    let against = |extra: Vec<String>| {
        let mut args: Vec<String> = vec!["check".into()];
        args.extend(extra);
        args.extend(["--against".to_string(), admin.clone()]);
        check(args)
    };
    let flags = || vec!["--workload-api".to_string(), cand.endpoint()];

    // A rotated SVID under the same bundle: nothing cut.
    cand.push(&[&Svid::new(&f.ca, SERVER_ID)], &[]).await;
    let (code, out) = against(flags()).await.unwrap();
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("route server: 0 of 1 live connection(s)"),
        "{out}"
    );

    // A bundle of another CA only: the live peer is untrusted now.
    let next = DevCa::new("prod.test CA 2", 30).unwrap();
    cand.push(&[&Svid::new(&next, SERVER_ID)], &[]).await;
    let (code, out) = against(flags()).await.unwrap();
    assert_eq!(code, 1, "{out}");
    let cut: Vec<&str> = out
        .lines()
        .filter(|l| l.trim_start().starts_with("CLOSE"))
        .collect();
    assert_eq!(cut.len(), 1, "{out}");
    assert!(cut[0].starts_with("  CLOSE untrusted now: "), "{out}");
    assert!(cut[0].contains(CLIENT_ID), "{out}");

    // The same candidate as a configuration's `workload_api`.
    let cfg = cand_dir.path().join("candidate.toml");
    std::fs::write(
        &cfg,
        format!(
            "workload_api = {:?}\n[[route]]\nname = \"server\"\nmode = \"server\"\n\
             listen = \"127.0.0.1:0\"\ntarget = \"127.0.0.1:9\"\nallow_san = [{CLIENT_ID:?}]\n",
            cand.endpoint()
        ),
    )
    .unwrap();
    let (code, out) = against(vec!["--config".into(), cfg.display().to_string()])
        .await
        .unwrap();
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("CLOSE untrusted at restart: "), "{out}");

    // A candidate configuration comes from its file alone, and a CRL given
    // beside a Workload API source is no CRL-only candidate: both exit 2.
    let (code, out) = against(vec![
        "--config".into(),
        cfg.display().to_string(),
        "--workload-api".into(),
        cand.endpoint(),
    ])
    .await
    .unwrap();
    assert_eq!(code, 2, "{out}");
    let crl = cand_dir.path().join("some.crl");
    std::fs::write(
        &crl,
        f.ca.crl(&mtls_sidecar::pki::CrlSpec::new(1, vec![], 7))
            .unwrap()
            .pem,
    )
    .unwrap();
    let mut with_crl = flags();
    with_crl.extend(["--crl".to_string(), crl.display().to_string()]);
    let (code, out) = against(with_crl).await.unwrap();
    assert_eq!(code, 2, "{out}");
    assert!(!out.contains("CRL file"), "previewed as a CRL alone: {out}");

    // Federated bundles: the preview cannot scope trust domains, so it
    // says so instead of reporting federated peers untrusted.
    let partner = DevCa::new("partner.test CA", 30).unwrap();
    cand.push(
        &[&Svid::new(&f.ca, SERVER_ID)],
        &[("partner.test", &partner)],
    )
    .await;
    let (code, out) = against(flags()).await.unwrap();
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("federated bundles (partner.test)"), "{out}");

    // The preview changed nothing: the live connection still forwards.
    assert_eq!(roundtrip(&mut live, b"after").await, b"after");
    // An agent that is not there: the candidate cannot be read (exit 2).
    cand.op("stop").await;
    let (code, out) = against(flags()).await.unwrap();
    assert_eq!(code, 2, "{out}");
    assert!(out.contains(&cand.endpoint()), "{out}");
}

#[test]
fn config_files_take_workload_api_top_level_and_per_route_exclusively() {
    let tmp = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = tmp.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let route = |extra: &str| {
        format!(
            "[[route]]\nmode = \"server\"\nlisten = \"127.0.0.1:0\"\ntarget = \"127.0.0.1:9\"\n\
             allow_san = [\"{CLIENT_ID}\"]\n{extra}\n"
        )
    };
    let good = write(
        "top.toml",
        &format!(
            "workload_api = \"unix:///run/agent.sock\"\nsvid = \"{SERVER_ID}\"\n{}",
            route("")
        ),
    );
    let (code, out) = run_bin(&["check", "--config", &good]);
    assert_eq!(code, 0, "{out}");
    let per_route = write(
        "route.toml",
        &route("workload_api = \"unix:///run/agent.sock\""),
    );
    let (code, out) = run_bin(&["check", "--config", &per_route]);
    assert_eq!(code, 0, "{out}");
    let both = write(
        "both.toml",
        &route("workload_api = \"unix:///run/agent.sock\"\ntls_dir = \"/etc/mtls\""),
    );
    let (code, out) = run_bin(&["check", "--config", &both]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("workload_api: give either"), "{out}");
}

//! Revocation with CRLs, through the real binary: a revoked peer is refused
//! inside the handshake in both modes (reason `revoked`, one WARN naming the
//! serial, the target never reached) while another certificate of the same
//! CA is accepted; a live connection whose certificate a rotated CRL revokes
//! is closed as `revoked` while another stays up; a
//! truncated CRL, an older CRL, and a CRL that names our CA but that no
//! trusted key verifies (a corrupted signature, a rollback to a
//! broken-signature copy of an older CRL, another key under the CA's
//! name, a CA whose keyUsage lacks cRLSign) each reject the revision whole,
//! `check` FAILs it, and the last good one stays in force (`/status` names
//! the CRL in force: issuer, number, thisUpdate, nextUpdate, revoked
//! count, state); a CRL re-issued with fewer serials un-revokes, WARNed
//! and counted, as does one at a higher number omitting a serial revoked
//! within `--crl-prune-age` (older ones are counted as pruned); removing
//! `ca.crl` re-admits; an intermediate re-keyed under its own name keeps
//! its old key's CRL enforced and renewals applying.

use crate::common;

use common::http;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use mtls_sidecar::identity::CertInfo;
use mtls_sidecar::pki::{serial_of, CrlSpec, Issued, IssuedCrl, Role};
use mtls_sidecar::tools::atomic_writer::AtomicDir;

fn serial(leaf: &Issued) -> String {
    CertInfo::parse(&leaf.cert_der).expect("parse leaf").serial
}

fn crl(pki: &Pki, number: u64, revoked: &[&Issued]) -> IssuedCrl {
    let serials = revoked
        .iter()
        .map(|l| serial_of(&l.cert_der).expect("serial"))
        .collect();
    pki.ca
        .crl(&CrlSpec::new(number, serials, 7))
        .expect("sign CRL")
}

/// The value of a counter series on `/metrics` whose line carries every
/// label in `labels` (0 when the series is absent).
async fn metric(admin: &str, name: &str, labels: &[&str]) -> u64 {
    let a = http::request(admin, "GET", "/metrics").await;
    assert_eq!(a.code, 200, "{}", a.body);
    a.body
        .lines()
        .find(|l| l.starts_with(&format!("{name}{{")) && labels.iter().all(|x| l.contains(x)))
        .and_then(|l| l.rsplit(' ').next())
        .map(|v| v.parse::<f64>().expect("a number") as u64)
        .unwrap_or(0)
}

/// The value of a series without labels on `/metrics`.
async fn metric_plain(admin: &str, name: &str) -> u64 {
    let a = http::request(admin, "GET", "/metrics").await;
    a.body
        .lines()
        .find(|l| l.starts_with(&format!("{name} ")))
        .and_then(|l| l.rsplit(' ').next())
        .map(|v| v.parse::<f64>().expect("a number") as u64)
        .unwrap_or_else(|| panic!("no {name}:\n{}", a.body))
}

async fn revoked_failures(admin: &str, route: &str) -> u64 {
    metric(
        admin,
        "mtls_sidecar_tls_handshake_failures_total",
        &[&format!("route=\"{route}\""), "reason=\"revoked\""],
    )
    .await
}

/// True when the server sidecar refuses `ident` (the handshake fails, or,
/// in TLS 1.3, the first read after it does).
async fn is_refused(addr: &str, ca_pem: &str, ident: &Issued) -> bool {
    refuses(addr, client_config(Some(ident), ca_pem)).await
}

/// True when the server sidecar refuses a client configured by `cfg`.
async fn refuses(addr: &str, cfg: std::sync::Arc<rustls::ClientConfig>) -> bool {
    match tls_connect(addr, REPLICA, cfg).await {
        Ok(mut s) => refused(&mut s).await,
        Err(_) => true,
    }
}

/// Waits until the n-th line containing `needle` appears.
async fn nth_log(sc: &Sidecar, needle: &str, n: usize) -> String {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let lines: Vec<String> = sc
            .logs()
            .into_iter()
            .filter(|l| l.contains(needle))
            .collect();
        if lines.len() >= n {
            return lines[n - 1].clone();
        }
        assert!(
            Instant::now() < deadline,
            "no {n}th {needle:?} line:\n{}",
            sc.logs().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A server sidecar with an admin endpoint on `dir`, and its echo target.
async fn serve_with_admin(dir: &AtomicDir) -> (Echo, Sidecar) {
    let echo = echo_target().await;
    let sc = start_server(
        dir.path(),
        &echo.addr.to_string(),
        &["--admin", "127.0.0.1:0"],
    )
    .await;
    (echo, sc)
}

fn publish(dir: &AtomicDir, server: &Issued, ca_pem: &str, crl: Option<&[u8]>) {
    let mut files: Vec<(&str, &[u8])> = vec![
        ("tls.crt", server.cert_pem.as_bytes()),
        ("tls.key", server.key_pem.as_bytes()),
        ("ca.crt", ca_pem.as_bytes()),
    ];
    if let Some(crl) = crl {
        files.push(("ca.crl", crl));
    }
    dir.publish(&files).expect("publish revision");
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_refuses_a_revoked_client_and_admits_another_from_the_same_ca() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("test CA");
    let leaked = pki.leaf(CONTROLLER, Role::Client);
    let other = pki.leaf(CONTROLLER, Role::Client);
    let dir = pki.dir(tmp.path(), "replica", &pki.leaf(REPLICA, Role::Server));
    // Explicit files this time, the CRL as DER: `--crl FILE`.
    let crl_path = tmp.path().join("revoked.der");
    std::fs::write(&crl_path, crl(&pki, 1, &[&leaked]).der).unwrap();
    let echo = echo_target().await;
    let target = echo.addr.to_string();
    let (cert, key, ca) = (dir.join("tls.crt"), dir.join("tls.key"), dir.join("ca.crt"));
    let sc = Sidecar::start(
        &[
            "server",
            "--listen",
            "127.0.0.1:0",
            "--target",
            &target,
            "--cert",
            path_str(&cert),
            "--key",
            path_str(&key),
            "--ca",
            path_str(&ca),
            "--crl",
            path_str(&crl_path),
            "--allow-san",
            CONTROLLER,
            "--admin",
            "127.0.0.1:0",
        ],
        1,
    )
    .await;
    let addr = sc.addr("server");

    assert!(is_refused(&addr, &pki.ca.cert_pem, &leaked).await);
    let line = sc
        .wait_field("handshake refused", "reason", "revoked")
        .await;
    assert!(has_field(&line, "serial", &serial(&leaked)), "{line}");

    // Positive control: the same CA's other controller is admitted.
    let mut good = tls_connect(
        &addr,
        REPLICA,
        client_config(Some(&other), &pki.ca.cert_pem),
    )
    .await
    .expect("other controller handshake");
    assert_eq!(roundtrip(&mut good, b"hello").await, b"hello");

    assert_eq!(echo.accepted(), 1, "the revoked peer reached the target");
    assert_eq!(sc.warn_reason("revoked").len(), 1, "{:#?}", sc.logs());
    assert_eq!(revoked_failures(&sc.admin(), "server").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_refuses_a_revoked_server_until_the_crl_is_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("test CA");
    let replica = pki.leaf(REPLICA, Role::Server);
    let server_dir = pki.dir(tmp.path(), "replica", &replica);
    let client_dir = pki.dir(
        tmp.path(),
        "controller",
        &pki.leaf(CONTROLLER, Role::Client),
    );
    std::fs::write(client_dir.join("ca.crl"), crl(&pki, 1, &[&replica]).pem).unwrap();
    let echo = echo_target().await;
    let server = start_server(&server_dir, &echo.addr.to_string(), &[]).await;
    let client = start_client(
        &client_dir,
        &server.addr("server"),
        &["--admin", "127.0.0.1:0"],
    )
    .await;

    let mut local = tokio::net::TcpStream::connect(client.addr("client"))
        .await
        .unwrap();
    assert!(read_until_closed(&mut local).await.is_empty());
    let line = client
        .wait_field("handshake refused", "reason", "revoked")
        .await;
    assert!(has_field(&line, "serial", &serial(&replica)), "{line}");
    assert_eq!(client.warn_reason("revoked").len(), 1);
    assert_eq!(revoked_failures(&client.admin(), "client").await, 1);
    assert_eq!(echo.accepted(), 0, "the target was reached");

    // Removing ca.crl is a rotation; SIGHUP judges the plain directory now.
    std::fs::remove_file(client_dir.join("ca.crl")).unwrap();
    client.signal(libc::SIGHUP);
    // Under the documented module (docs/logging.md), which log filters use.
    client
        .wait_log(&[" INFO mtls_sidecar::reload: applied credential revision "])
        .await;
    let mut local = tokio::net::TcpStream::connect(client.addr("client"))
        .await
        .unwrap();
    assert_eq!(roundtrip(&mut local, b"again").await, b"again");
    assert_eq!(echo.accepted(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_crl_closes_the_revoked_live_connection_and_only_it() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("test CA");
    let replica = pki.leaf(REPLICA, Role::Server);
    let leaked = pki.leaf(CONTROLLER, Role::Client);
    let other = pki.leaf(CONTROLLER, Role::Client);
    let dir = AtomicDir::new(&tmp.path().join("replica")).unwrap();
    publish(&dir, &replica, &pki.ca.cert_pem, None);
    let echo = echo_target().await;
    let interval = Duration::from_secs(1);
    let sc = start_server(
        dir.path(),
        &echo.addr.to_string(),
        &["--reload-interval", "1s", "--admin", "127.0.0.1:0"],
    )
    .await;
    let addr = sc.addr("server");
    let connect =
        |ident: &Issued| tls_connect(&addr, REPLICA, client_config(Some(ident), &pki.ca.cert_pem));
    let mut doomed = connect(&leaked).await.expect("leaked handshake");
    // A second connection of the same peer shares its presented chain (and
    // so the one verdict the re-verification gives that chain).
    let mut doomed_too = connect(&leaked).await.expect("leaked handshake");
    let mut kept = connect(&other).await.expect("other handshake");
    assert_eq!(roundtrip(&mut doomed, b"one").await, b"one");
    assert_eq!(roundtrip(&mut doomed_too, b"one").await, b"one");
    assert_eq!(roundtrip(&mut kept, b"two").await, b"two");

    let published = Instant::now();
    let revoking = crl(&pki, 1, &[&leaked]);
    publish(
        &dir,
        &replica,
        &pki.ca.cert_pem,
        Some(revoking.pem.as_bytes()),
    );
    read_until_closed(&mut doomed).await;
    read_until_closed(&mut doomed_too).await;
    let took = published.elapsed();
    // One reload interval, plus generous headroom for a loaded machine.
    assert!(
        took < interval + Duration::from_secs(5),
        "closed after {took:?}"
    );

    let line = sc
        .wait_log(&["closing connection", &format!("serial={}", serial(&leaked))])
        .await;
    assert!(has_field(&line, "route", "server"), "{line}");
    eventually("both of its connections closed", || {
        sc.log_count("closing connection") == 2
    })
    .await;
    assert_eq!(sc.log_count("closing connection"), 2, "{:#?}", sc.logs());
    assert_eq!(roundtrip(&mut kept, b"still here").await, b"still here");
    let admin = sc.admin();
    eventually_async(|| async {
        metric(
            &admin,
            "mtls_sidecar_connections_closed_total",
            &["route=\"server\"", "reason=\"revoked\""],
        )
        .await
            == 2
    })
    .await;
    // A new handshake with the revoked certificate is refused as well.
    assert!(is_refused(&addr, &pki.ca.cert_pem, &leaked).await);
}

/// The `crls` array of the first credential store on `/status`.
async fn crl_status(admin: &str) -> Vec<serde_json::Value> {
    let st = status(admin).await;
    assert_eq!(st["credentials"][0]["crl_scope"], "leaf", "{st}");
    st["credentials"][0]["crls"]
        .as_array()
        .unwrap_or_else(|| panic!("no crls array: {st}"))
        .clone()
}

/// Polls an async condition every 10 ms until it holds; panics after
/// [`DEADLINE`].
async fn eventually_async<F, Fut>(mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + DEADLINE;
    while !cond().await {
        assert!(Instant::now() < deadline, "timed out");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A bad CRL revision, as the sidecar meets it and as `check` judges it.
struct BadCrl {
    what: &'static str,
    ca_pem: String,
    crl: Vec<u8>,
    says: &'static str,
    /// False when only the CRL in force makes it bad (`check` sees the
    /// files alone).
    alone: bool,
}

/// Every CRL that must never load over the CRL in force (number 2, listing
/// `leaked`): each would re-admit `leaked`. The last three are CRLs that
/// name our CA but that no trusted key of that name verifies; before they
/// were refused, each loaded as `unverified` and was never tried against
/// the anchor, so the leaked identity was admitted.
fn bad_crls(pki: &Pki, in_force: &IssuedCrl) -> Vec<BadCrl> {
    use common::broken_crl::{ca_without_crl_sign, corrupt_signature};
    let ca = pki.ca.cert_pem.clone();
    let foreign = Pki::new("test CA");
    let (no_sign_ca, no_sign_signer) = ca_without_crl_sign("test CA no cRLSign", None);
    vec![
        BadCrl {
            what: "truncated",
            ca_pem: ca.clone(),
            crl: in_force.der[..in_force.der.len() / 2].to_vec(),
            says: "ca.crl: neither PEM nor DER",
            alone: true,
        },
        BadCrl {
            what: "older (lower CRL number)",
            ca_pem: ca.clone(),
            crl: crl(pki, 1, &[]).pem.into_bytes(),
            says: "older than the one in force",
            alone: false,
        },
        BadCrl {
            what: "a broken-signature copy of an older CRL (the rollback guard)",
            ca_pem: ca.clone(),
            crl: corrupt_signature(&crl(pki, 1, &[]).der),
            says: "does not verify with the key of CN=test CA in ca.crt",
            alone: true,
        },
        BadCrl {
            what: "signed by another key under our CA's name",
            ca_pem: ca.clone(),
            crl: foreign
                .ca
                .crl(&CrlSpec::new(9, Vec::new(), 7))
                .unwrap()
                .pem
                .into_bytes(),
            says: "another key under that name",
            alone: true,
        },
        BadCrl {
            what: "signed by an anchor whose keyUsage lacks cRLSign",
            ca_pem: format!("{ca}{no_sign_ca}"),
            crl: no_sign_signer
                .crl(&CrlSpec::new(1, Vec::new(), 7))
                .unwrap()
                .pem
                .into_bytes(),
            says: "lacks cRLSign",
            alone: true,
        },
    ]
}

/// Each bad CRL rejects its revision whole: an ERROR naming `ca.crl` and
/// why, the rejected-revision counter and the gauge the alert reads, the
/// last good CRL still in force (the leaked identity still refused,
/// `/status` unchanged), and `check` FAILs the same files. A CRL re-issued
/// at the same number with fewer serials un-revokes, loudly (one WARN
/// naming the issuer and the serials, and the removals counter).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_crls_are_rejected_and_the_last_good_one_stays_in_force() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("test CA");
    let replica = pki.leaf(REPLICA, Role::Server);
    let leaked = pki.leaf(CONTROLLER, Role::Client);
    let dir = AtomicDir::new(&tmp.path().join("replica")).unwrap();
    let in_force = crl(&pki, 2, &[&leaked]);
    publish(&dir, &replica, &pki.ca.cert_pem, Some(&in_force.der));
    let (_echo, sc) = serve_with_admin(&dir).await;
    let addr = sc.addr("server");
    let admin = sc.admin();
    let ca = &pki.ca.cert_pem;
    assert!(is_refused(&addr, ca, &leaked).await);
    let in_force_status = crl_status(&admin).await;
    assert_eq!(in_force_status.len(), 1, "{in_force_status:?}");
    let st = &in_force_status[0];
    assert_eq!(st["issuer"], "CN=test CA");
    assert_eq!(st["number"], "2");
    assert_eq!(st["revoked"], 1);
    assert_eq!(st["stale"], false);
    assert_eq!(st["state"], "verified");
    let this_update = humantime::parse_rfc3339(st["this_update"].as_str().unwrap()).unwrap();
    let next_update = humantime::parse_rfc3339(st["next_update"].as_str().unwrap()).unwrap();
    let now = std::time::SystemTime::now();
    assert!(this_update <= now && now < next_update, "{st}");

    for (n, bad) in bad_crls(&pki, &in_force).iter().enumerate() {
        let what = bad.what;
        publish(&dir, &replica, &bad.ca_pem, Some(&bad.crl));
        let line = nth_log(&sc, "rejected credential revision", n + 1).await;
        assert!(line.contains("ca.crl"), "{what}: {line}");
        assert!(line.contains(bad.says), "{what}: {line}");
        assert_eq!(
            metric(
                &admin,
                "mtls_sidecar_credential_reloads_total",
                &["result=\"rejected\""]
            )
            .await,
            n as u64 + 1,
            "{what}: the rejected-revision counter"
        );
        assert_eq!(
            metric_plain(&admin, "mtls_sidecar_credential_last_reload_successful").await,
            0,
            "{what}: the alert's gauge"
        );
        assert!(
            is_refused(&addr, ca, &leaked).await,
            "{what}: the last good CRL is no longer in force"
        );
        if bad.alone {
            let (code, out) = run_bin(&["check", "--tls-dir", path_str(dir.path())]);
            assert_ne!(code, 0, "{what}: check passed:\n{out}");
            assert!(
                out.contains("FAIL") && out.contains(bad.says),
                "{what}:\n{out}"
            );
        }
    }
    assert_eq!(sc.log_count("applied credential revision"), 0);
    assert_eq!(crl_status(&admin).await, in_force_status, "/status moved");

    // A newer CRL (number 3, two serials) is applied and /status says so.
    let newer = crl(&pki, 3, &[&leaked, &pki.leaf(CONTROLLER, Role::Client)]);
    publish(&dir, &replica, ca, Some(newer.pem.as_bytes()));
    sc.wait_log(&["applied credential revision"]).await;
    let st = crl_status(&admin).await;
    assert_eq!(st[0]["number"], "3", "{st:?}");
    assert_eq!(st[0]["revoked"], 2, "{st:?}");
    assert!(is_refused(&addr, ca, &leaked).await);
    let removals = "mtls_sidecar_crl_removals_total";
    assert_eq!(metric_plain(&admin, removals).await, 0);

    // The same CRL number re-issued without the leaked serial is our
    // CA's, verified: it applies and un-revokes, loudly.
    let fewer = crl(&pki, 3, &[]);
    publish(&dir, &replica, ca, Some(fewer.pem.as_bytes()));
    let warn = sc.wait_log(&["un-revokes certificates"]).await;
    assert!(
        warn.contains("CN=test CA") && warn.contains(&serial(&leaked)),
        "{warn}"
    );
    assert_eq!(metric_plain(&admin, removals).await, 1);
    let st = crl_status(&admin).await;
    assert_eq!(st[0]["state"], "verified", "{st:?}");

    // Removing ca.crl is a rotation that re-admits.
    publish(&dir, &replica, ca, None);
    nth_log(&sc, "applied credential revision", 3).await;
    assert!(crl_status(&admin).await.is_empty());
    let mut back = tls_connect(&addr, REPLICA, client_config(Some(&leaked), ca))
        .await
        .expect("handshake");
    assert_eq!(roundtrip(&mut back, b"back").await, b"back");
}

/// CRL `number` of `pki`'s CA listing each leaf revoked `ago` before now
/// (as `certs revoke` keeps an entry's date across re-signings).
fn crl_dated(pki: &Pki, number: u64, revoked: &[(&Issued, Duration)]) -> IssuedCrl {
    let now = std::time::SystemTime::now();
    let mut spec = CrlSpec::new(number, Vec::new(), 7);
    spec.kept = revoked
        .iter()
        .map(|(l, ago)| (serial_of(&l.cert_der).expect("serial"), now - *ago))
        .collect();
    pki.ca.crl(&spec).expect("sign CRL")
}

const DAY: Duration = Duration::from_secs(86_400);

/// Serials the CRL's issuer drops at a higher CRL number that were revoked
/// longer ago than `--crl-prune-age` (720h by default: what `certs revoke
/// --prune-expired 720h` drops once their certificates expired), and a CRL
/// listing nothing removed, are counted apart
/// (`mtls_sidecar_crl_entries_pruned_total`): no WARN, no count on the
/// counter `MtlsSidecarCrlEntriesRemoved` reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serials_pruned_by_the_issuer_are_counted_apart_from_unrevocations() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("test CA");
    let replica = pki.leaf(REPLICA, Role::Server);
    let (old, kept) = (
        pki.leaf(CONTROLLER, Role::Client),
        pki.leaf(CONTROLLER, Role::Client),
    );
    let dir = AtomicDir::new(&tmp.path().join("replica")).unwrap();
    let ca = &pki.ca.cert_pem;
    let both = [(&old, 40 * DAY), (&kept, 31 * DAY)];
    publish(&dir, &replica, ca, Some(&crl_dated(&pki, 1, &both).der));
    let (_echo, sc) = serve_with_admin(&dir).await;
    let admin = sc.admin();
    let (removals, pruned) = (
        "mtls_sidecar_crl_removals_total",
        "mtls_sidecar_crl_entries_pruned_total",
    );
    assert_eq!(metric_plain(&admin, pruned).await, 0);
    publish(
        &dir,
        &replica,
        ca,
        Some(&crl_dated(&pki, 2, &both[1..]).der),
    );
    let line = sc.wait_log(&["pruned serials"]).await;
    assert!(
        line.contains(&serial(&old)) && line.contains("CN=test CA"),
        "{line}"
    );
    assert_eq!(metric_plain(&admin, pruned).await, 1);
    publish(&dir, &replica, ca, Some(&crl(&pki, 3, &[]).der));
    nth_log(&sc, "pruned serials", 2).await;
    assert_eq!(metric_plain(&admin, pruned).await, 2);
    // The CRL now lists nothing: removing it un-revokes nothing.
    publish(&dir, &replica, ca, None);
    nth_log(&sc, "pruned serials", 3).await;
    assert!(crl_status(&admin).await.is_empty());
    assert_eq!(metric_plain(&admin, pruned).await, 2);
    assert_eq!(metric_plain(&admin, removals).await, 0);
    assert_eq!(sc.log_count("un-revokes certificates"), 0);
}

/// A CRL re-signed at a higher number that omits a serial revoked within
/// `--crl-prune-age` un-revokes it (whoever holds the CA key, or replays
/// its signing job with a bad input, cannot quietly re-admit a peer whose
/// certificate may still be valid): WARNed and counted on
/// `mtls_sidecar_crl_removals_total`, and the peer, refused before, is
/// admitted. A serial revoked longer ago, dropped by the same CRL, is
/// counted as pruned only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_higher_crl_number_omitting_a_recent_serial_is_an_unrevocation() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("test CA");
    let replica = pki.leaf(REPLICA, Role::Server);
    let (recent, expired) = (
        pki.leaf(CONTROLLER, Role::Client),
        pki.leaf(CONTROLLER, Role::Client),
    );
    let dir = AtomicDir::new(&tmp.path().join("replica")).unwrap();
    let ca = &pki.ca.cert_pem;
    let first = crl_dated(&pki, 1, &[(&recent, DAY), (&expired, 40 * DAY)]);
    publish(&dir, &replica, ca, Some(&first.der));
    let (_echo, sc) = serve_with_admin(&dir).await;
    let (admin, addr) = (sc.admin(), sc.addr("server"));
    assert!(is_refused(&addr, ca, &recent).await, "revoked before");

    publish(&dir, &replica, ca, Some(&crl(&pki, 2, &[]).der));
    let warn = sc.wait_log(&["un-revokes certificates"]).await;
    assert!(
        warn.contains(&serial(&recent)) && !warn.contains(&serial(&expired)),
        "{warn}"
    );
    assert!(warn.contains("revoked within --crl-prune-age"), "{warn}");
    let line = sc.wait_log(&["pruned serials"]).await;
    assert!(
        line.contains(&serial(&expired)) && !line.contains(&serial(&recent)),
        "{line}"
    );
    assert_eq!(
        metric_plain(&admin, "mtls_sidecar_crl_removals_total").await,
        1
    );
    assert_eq!(
        metric_plain(&admin, "mtls_sidecar_crl_entries_pruned_total").await,
        1
    );
    let mut back = tls_connect(&addr, REPLICA, client_config(Some(&recent), ca))
        .await
        .expect("handshake");
    assert_eq!(roundtrip(&mut back, b"back").await, b"back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_crl_is_still_enforced_warned_once_and_its_next_update_is_a_gauge() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("test CA");
    let leaked = pki.leaf(CONTROLLER, Role::Client);
    let dir = pki.dir(tmp.path(), "replica", &pki.leaf(REPLICA, Role::Server));
    let now = std::time::SystemTime::now();
    let mut spec = CrlSpec::new(1, vec![serial_of(&leaked.cert_der).unwrap()], 1);
    spec.this_update = now - Duration::from_secs(2 * 86_400);
    spec.next_update = now - Duration::from_secs(86_400);
    let next_update = spec
        .next_update
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    std::fs::write(dir.join("ca.crl"), pki.ca.crl(&spec).unwrap().pem).unwrap();
    let echo = echo_target().await;
    let sc = start_server(
        &dir,
        &echo.addr.to_string(),
        &["--admin", "127.0.0.1:0", "--reload-interval", "100ms"],
    )
    .await;
    assert!(is_refused(&sc.addr("server"), &pki.ca.cert_pem, &leaked).await);
    sc.wait_log(&["past its nextUpdate"]).await;
    let a = http::request(&sc.admin(), "GET", "/metrics").await;
    let gauge = a
        .body
        .lines()
        .find(|l| l.starts_with("mtls_sidecar_crl_next_update_timestamp_seconds "))
        .unwrap_or_else(|| panic!("no gauge:\n{}", a.body));
    assert_eq!(
        gauge.rsplit(' ').next().unwrap().parse::<f64>().unwrap() as u64,
        next_update
    );
    // Several polls later (counted, not slept for), still one warning.
    sc.wait_polls(5).await;
    assert_eq!(sc.log_count("past its nextUpdate"), 1, "{:#?}", sc.logs());
}

#[test]
fn certs_revoke_writes_and_extends_a_crl_and_check_fails_a_revoked_identity() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |name: &str| tmp.path().join(name).to_str().unwrap().to_string();
    let ok = |args: &[&str]| {
        let (code, out) = run_bin(args);
        assert_eq!(code, 0, "{args:?}: {out}");
        out
    };
    ok(&["certs", "ca", "--out", &p("ca")]);
    for leaf in ["leaked", "fine"] {
        ok(&[
            "certs",
            "issue",
            "--ca",
            &p("ca"),
            "--out",
            &p(leaf),
            "--dns",
            CONTROLLER,
            "--role",
            "client",
        ]);
    }
    let crl_path = p("ca.crl");
    let out = ok(&[
        "certs",
        "revoke",
        "--ca",
        &p("ca"),
        "--cert",
        &format!("{}/tls.crt", p("leaked")),
        "--out",
        &crl_path,
    ]);
    assert!(out.contains("CRL number 1,"), "{out}");
    let out = ok(&[
        "certs",
        "revoke",
        "--ca",
        &p("ca"),
        "--serial",
        "7f:01:02",
        "--out",
        &crl_path,
    ]);
    assert!(out.contains("CRL number 2,"), "{out}");
    assert!(out.contains("2 revoked"), "{out}");
    let out = ok(&[
        "certs",
        "revoke",
        "--ca",
        &p("ca"),
        "--serial",
        "7f:01:03",
        "--out",
        &crl_path,
    ]);
    assert!(out.contains("CRL number 3,"), "{out}");
    assert!(out.contains("3 revoked"), "{out}");
    // Garbage serials are a usage error, not a panic.
    let (code, out) = run_bin(&[
        "certs",
        "revoke",
        "--ca",
        &p("ca"),
        "--serial",
        "xyz",
        "--out",
        &crl_path,
    ]);
    assert_eq!(code, 2, "{out}");

    // Without ca.crl, check has no CRL step at all.
    let (code, out) = run_bin(&["check", "--tls-dir", &p("leaked")]);
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("CRL"), "{out}");
    for leaf in ["leaked", "fine"] {
        std::fs::copy(&crl_path, tmp.path().join(leaf).join("ca.crl")).unwrap();
    }
    let (code, out) = run_bin(&["check", "--tls-dir", &p("leaked")]);
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("is revoked by the CRLs in ca.crl"), "{out}");
    let (code, out) = run_bin(&["check", "--tls-dir", &p("fine")]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("not revoked"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crl_scope_chain_judges_the_intermediate_and_leaf_does_not() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("test root");
    let intermediate = pki.ca.intermediate("test issuing CA", 30).unwrap();
    let leaf = intermediate
        .issue(&mtls_sidecar::pki::LeafSpec::dns(
            CONTROLLER,
            Role::Client,
            30,
        ))
        .unwrap();
    let intermediate_der =
        <rustls::pki_types::CertificateDer as rustls::pki_types::pem::PemObject>::from_pem_slice(
            intermediate.cert_pem.as_bytes(),
        )
        .unwrap();
    // The root's CRL revokes the intermediate; the leaf itself is on no CRL.
    let root_crl = pki
        .ca
        .crl(&CrlSpec::new(
            1,
            vec![serial_of(&intermediate_der).unwrap()],
            7,
        ))
        .unwrap();
    let dir = pki.dir(tmp.path(), "replica", &pki.leaf(REPLICA, Role::Server));
    std::fs::write(dir.join("ca.crl"), &root_crl.pem).unwrap();
    let echo = echo_target().await;
    let target = echo.addr.to_string();
    let chain = start_server(&dir, &target, &["--crl-scope", "chain"]).await;
    let leaf_only = start_server(&dir, &target, &[]).await;
    let cfg = chain_client(&leaf, &intermediate.cert_pem, &pki.ca.cert_pem);

    if let Ok(mut s) = tls_connect(&chain.addr("server"), REPLICA, cfg.clone()).await {
        assert!(
            refused(&mut s).await,
            "chain scope admitted a revoked intermediate"
        );
    }
    chain
        .wait_field("handshake refused", "reason", "revoked")
        .await;

    let mut s = tls_connect(&leaf_only.addr("server"), REPLICA, cfg)
        .await
        .expect("leaf scope handshake");
    assert_eq!(roundtrip(&mut s, b"leaf scope").await, b"leaf scope");
    assert_eq!(echo.accepted(), 1);
}

/// An intermediate re-keyed under its own name, through the real binary:
/// the `intermediates` file moves from I to I' (same name, another key)
/// while I's CRL is still in `ca.crl`. The renewal applies (it was
/// rejected: no key of I's name in the revision verifies that CRL), a
/// peer that I revoked, presenting I, is still refused inside the
/// handshake, and a peer of I' is admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rekeyed_intermediate_neither_blocks_renewals_nor_readmits() {
    use mtls_sidecar::pki::LeafSpec;
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("test CA");
    let (i, i2) = (
        pki.ca.intermediate("issuing CA", 30).unwrap(),
        pki.ca.intermediate("issuing CA", 30).unwrap(),
    );
    let client = |ca: &mtls_sidecar::pki::DevCa| {
        ca.issue(&LeafSpec::dns(CONTROLLER, Role::Client, 1))
            .unwrap()
    };
    let (revoked, fresh) = (client(&i), client(&i2));
    let replica = pki.leaf(REPLICA, Role::Server);
    let ca = &pki.ca.cert_pem;
    let crl_i = i
        .crl(&CrlSpec::new(
            1,
            vec![serial_of(&revoked.cert_der).unwrap()],
            7,
        ))
        .unwrap();
    let dir = AtomicDir::new(&tmp.path().join("replica")).unwrap();
    let publish_via = |inter: &str| {
        dir.publish(&[
            ("tls.crt", replica.cert_pem.as_bytes()),
            ("tls.key", replica.key_pem.as_bytes()),
            ("ca.crt", ca.as_bytes()),
            ("intermediates", inter.as_bytes()),
            ("ca.crl", &crl_i.der),
        ])
        .expect("publish revision")
    };
    publish_via(&i.cert_pem);
    let (_echo, sc) = serve_with_admin(&dir).await;
    let addr = sc.addr("server");
    assert!(refuses(&addr, chain_client(&revoked, &i.cert_pem, ca)).await);
    publish_via(&i2.cert_pem);
    sc.wait_log(&["applied credential revision"]).await;
    assert!(
        refuses(&addr, chain_client(&revoked, &i.cert_pem, ca)).await,
        "the re-key re-admitted a revoked peer"
    );
    let mut ok = tls_connect(&addr, REPLICA, chain_client(&fresh, &i2.cert_pem, ca))
        .await
        .expect("handshake");
    assert_eq!(roundtrip(&mut ok, b"fresh").await, b"fresh");
    let st = crl_status(&sc.admin()).await;
    assert_eq!(st[0]["state"], "verified", "{st:?}");
}

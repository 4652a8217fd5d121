//! Credential reloads through the real binary, where time matters: a plain
//! directory's content is applied only once it has stopped changing (a CA
//! bundle rewritten in place must not revoke live connections half-way), a
//! revision that is not valid yet waits and is applied once it is, an
//! expired one is rejected, polling alone picks a change up, and the reload
//! gauges say all of it on `/metrics`.

use crate::common;

use common::http;

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use common::expo::Exposition;
use common::*;
use mtls_sidecar::credentials::{content_hash, SETTLE_WINDOW};
use mtls_sidecar::identity::{epoch_to_time, CertInfo};
use mtls_sidecar::pki::{Issued, LeafSpec, Role};
use mtls_sidecar::tools::atomic_writer::AtomicDir;
use serde_json::Value;

const SUCCESSFUL: &str = "mtls_sidecar_credential_last_reload_successful";
const REVISION_INFO: &str = "mtls_sidecar_credential_revision_info";
const RELOADS: &str = "mtls_sidecar_credential_reloads_total";

fn serial(leaf: &Issued) -> String {
    CertInfo::parse(&leaf.cert_der).unwrap().serial
}

fn short(revision: &str) -> &str {
    &revision[..12]
}

/// The revision hash of a directory's files as they are now (the
/// `..data` target when there is one).
fn revision_of(dir: &Path) -> String {
    let f = |n: &str| std::fs::read(dir.join(n)).unwrap();
    content_hash(&[&f("tls.crt"), &f("tls.key"), &f("ca.crt")])
}

fn publish(dir: &AtomicDir, leaf: &Issued, ca: &str) {
    dir.publish(&[
        ("tls.crt", leaf.cert_pem.as_bytes()),
        ("tls.key", leaf.key_pem.as_bytes()),
        ("ca.crt", ca.as_bytes()),
    ])
    .unwrap();
}

async fn scrape(admin: &str) -> Exposition {
    let a = http::request(admin, "GET", "/metrics").await;
    assert_eq!(a.code, 200, "{}", a.body);
    Exposition::parse(&a.body).unwrap_or_else(|e| panic!("{e}\n{}", a.body))
}

/// Scrapes until `done` holds, or panics at the deadline.
async fn scrape_until(admin: &str, what: &str, done: impl Fn(&Exposition) -> bool) -> Exposition {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let m = scrape(admin).await;
        if done(&m) {
            return m;
        }
        assert!(Instant::now() < deadline, "never saw {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn status(admin: &str) -> Value {
    let a = http::request(admin, "GET", "/status").await;
    assert_eq!(a.code, 200, "{}", a.body);
    serde_json::from_str(&a.body).unwrap_or_else(|e| panic!("{e}\n{}", a.body))
}

/// The revisions `revision_info` shows as in force (value 1).
fn in_force(m: &Exposition) -> Vec<String> {
    m.series(REVISION_INFO)
        .into_iter()
        .filter(|s| s.value == 1.0)
        .map(|s| s.labels.get("revision").cloned().unwrap_or_default())
        .collect()
}

/// True when the gauges say exactly `revision` is in force and the last
/// reload succeeded (`ok`) or not.
fn gauges_say(m: &Exposition, revision: &str, ok: bool) -> bool {
    m.value(SUCCESSFUL, &[]) == Some(if ok { 1.0 } else { 0.0 })
        && in_force(m) == vec![short(revision).to_string()]
}

/// The serial of the certificate the server presents to a new handshake.
async fn served_serial(addr: &str, cfg: std::sync::Arc<rustls::ClientConfig>) -> String {
    let tls = tls_connect(addr, REPLICA, cfg).await.expect("handshake");
    let der = tls.get_ref().1.peer_certificates().expect("server cert")[0].clone();
    CertInfo::parse(&der).unwrap().serial
}

/// The bug: rewriting an A+B `ca.crt` in place, as A then A+B, applied the
/// A-only state the watcher woke the poller for, and a live B-issued
/// connection was closed as `revoked`. The positive control: leaving A
/// alone in place is a real removal and closes it, after the settle window.
#[tokio::test(flavor = "multi_thread")]
async fn a_live_connection_survives_an_in_place_rewrite_of_its_ca() {
    const WINDOW: Duration = Duration::from_secs(3);
    assert!(WINDOW >= SETTLE_WINDOW);
    let tmp = tempfile::tempdir().unwrap();
    let a = Pki::new("CA A");
    let b = Pki::new("CA B");
    let both = format!("{}{}", a.ca.cert_pem, b.ca.cert_pem);
    let dir = tmp.path().join("plain");
    mtls_sidecar::pki::write_secret_dir(&dir, &a.leaf(REPLICA, Role::Server), &both).unwrap();
    let echo = echo_target().await;
    // A 3 s interval makes the settle window 3 s: headroom for a loaded
    // machine between the two writes, which must land inside one window.
    let server = start_server(&dir, &echo.addr.to_string(), &["--reload-interval", "3s"]).await;
    let addr = server.addr("server");
    let b_client = client_config(Some(&b.leaf(CONTROLLER, Role::Client)), &a.ca.cert_pem);
    let mut live = tls_connect(&addr, REPLICA, b_client.clone()).await.unwrap();
    assert_eq!(roundtrip(&mut live, b"before").await, b"before");

    // Rewrite ca.crt in place: the same file, truncated, written twice.
    let half = {
        let f = |n: &str| std::fs::read(dir.join(n)).unwrap();
        content_hash(&[&f("tls.crt"), &f("tls.key"), a.ca.cert_pem.as_bytes()])
    };
    let mut ca = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(dir.join("ca.crt"))
        .unwrap();
    ca.write_all(a.ca.cert_pem.as_bytes()).unwrap();
    ca.flush().unwrap();
    // The poller has seen the half-written state (waiting for it to
    // settle; the code before the fix applied it here).
    server
        .wait_field("credential", "revision", short(&half))
        .await;
    ca.write_all(b.ca.cert_pem.as_bytes()).unwrap();
    drop(ca);

    // A barrier: a new identity, applied only after polls that saw the
    // finished bundle and after a whole settle window of its own.
    let next = a.leaf(REPLICA, Role::Server);
    std::fs::write(dir.join("tls.crt"), &next.cert_pem).unwrap();
    mtls_sidecar::pki::write_private(&dir.join("tls.key"), next.key_pem.as_bytes()).unwrap();
    server
        .wait_field("applied credential revision", "serial", &serial(&next))
        .await;
    assert_eq!(
        server.log_count("applied credential revision"),
        1,
        "only the barrier was applied:\n{}",
        server.logs().join("\n")
    );
    assert_eq!(roundtrip(&mut live, b"still here").await, b"still here");
    assert_eq!(server.warn_reason("revoked").len(), 0);
    assert!(server
        .logs()
        .iter()
        .all(|l| !(l.contains("connection closed") && has_field(l, "reason", "revoked"))));

    // Positive control: A alone, left in place, removes B.
    let written = Instant::now();
    std::fs::write(dir.join("ca.crt"), &a.ca.cert_pem).unwrap();
    read_until_closed(&mut live).await;
    let took = written.elapsed();
    server
        .wait_log(&["connection closed", "reason=\"revoked\""])
        .await;
    assert!(
        took + Duration::from_millis(100) >= WINDOW,
        "the removal was applied after {took:?}, inside the settle window"
    );
    let mut s = tls_connect(&addr, REPLICA, b_client).await.unwrap();
    assert!(refused(&mut s).await, "B is no longer trusted");
}

/// The bug: a renewed certificate whose notBefore was a few seconds ahead
/// was rejected and the verdict cached by content hash, so it was never
/// served. Now it is pending (status, readiness detail, one WARN, gauge)
/// and served within two reload intervals of becoming valid.
#[tokio::test(flavor = "multi_thread")]
async fn a_not_yet_valid_revision_is_pending_then_served_once_valid() {
    const INTERVAL: Duration = Duration::from_secs(1);
    const AHEAD: Duration = Duration::from_secs(6);
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("CA");
    let dir = AtomicDir::new(&tmp.path().join("replica")).unwrap();
    let first = pki.leaf(REPLICA, Role::Server);
    publish(&dir, &first, &pki.ca.cert_pem);
    let old = revision_of(dir.path());
    let echo = echo_target().await;
    let server = start_server(
        dir.path(),
        &echo.addr.to_string(),
        &["--reload-interval", "1s", "--admin", "127.0.0.1:0"],
    )
    .await;
    let (addr, admin) = (server.addr("server"), server.admin());
    let cfg = client_config(Some(&pki.leaf(CONTROLLER, Role::Client)), &pki.ca.cert_pem);
    scrape_until(&admin, "the first revision in force", |m| {
        gauges_say(m, &old, true)
    })
    .await;

    let published = SystemTime::now();
    let next = pki.issue(
        &LeafSpec::dns(REPLICA, Role::Server, 30)
            .valid(published + AHEAD, published + Duration::from_secs(86_400)),
    );
    let valid_from = epoch_to_time(CertInfo::parse(&next.cert_der).unwrap().not_before);
    publish(&dir, &next, &pki.ca.cert_pem);
    let new = revision_of(dir.path());
    let warn = server
        .wait_field("not valid yet", "revision", short(&new))
        .await;
    assert!(warn.contains(" WARN "), "{warn}");
    assert!(warn.contains("tls.crt"), "{warn}");

    let st = status(&admin).await;
    let creds = &st["credentials"][0];
    assert_eq!(creds["revision"], old.as_str());
    let pending = &creds["pending"];
    assert_eq!(pending["revision"], new.as_str(), "{st}");
    assert_eq!(
        pending["valid_from"],
        humantime::format_rfc3339_seconds(valid_from).to_string()
    );
    assert!(
        pending["reason"]
            .as_str()
            .unwrap()
            .contains("not valid before"),
        "{pending}"
    );
    assert_eq!(creds["last_reload_successful"], false);
    let ready = http::request(&admin, "GET", "/readyz").await;
    assert_eq!(ready.code, 200, "the revision in force is still good");
    assert!(
        ready.body.contains("pending") && ready.body.contains(short(&new)),
        "{}",
        ready.body
    );
    let m = scrape(&admin).await;
    assert!(gauges_say(&m, &old, false), "{:?}", m.series(SUCCESSFUL));
    assert_eq!(served_serial(&addr, cfg.clone()).await, serial(&first));
    assert!(
        SystemTime::now() < valid_from,
        "machine too slow to observe the pending state"
    );

    server
        .wait_field("applied credential revision", "serial", &serial(&next))
        .await;
    let late = SystemTime::now()
        .duration_since(valid_from)
        .unwrap_or_default();
    assert!(
        late < 2 * INTERVAL,
        "applied {late:?} after it became valid"
    );
    assert_eq!(served_serial(&addr, cfg).await, serial(&next));
    assert_eq!(server.warn_lines(&["not valid yet"]).len(), 1);
    let applied = server.wait_log(&["applied credential revision"]).await;
    assert!(applied.contains(" INFO "), "{applied}");
    let st = status(&admin).await;
    let creds = &st["credentials"][0];
    assert_eq!(creds["revision"], new.as_str());
    assert!(creds["pending"].is_null(), "{st}");
    assert_eq!(creds["last_reload_successful"], true);
    let m = scrape_until(&admin, "the new revision in force", |m| {
        gauges_say(m, &new, true)
    })
    .await;
    // The old revision's series is gone: one series per source, the one
    // in force.
    assert!(
        m.series(REVISION_INFO)
            .iter()
            .all(|s| s.labels.get("revision").map(String::as_str) != Some(short(&old))),
        "{:?}",
        m.series(REVISION_INFO)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_expired_revision_is_rejected_and_the_old_one_stays() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("CA");
    let dir = AtomicDir::new(&tmp.path().join("replica")).unwrap();
    let first = pki.leaf(REPLICA, Role::Server);
    publish(&dir, &first, &pki.ca.cert_pem);
    let old = revision_of(dir.path());
    let echo = echo_target().await;
    let server = start_server(
        dir.path(),
        &echo.addr.to_string(),
        &["--reload-interval", "100ms", "--admin", "127.0.0.1:0"],
    )
    .await;
    let (addr, admin) = (server.addr("server"), server.admin());
    let now = SystemTime::now();
    // Issued after the one in force (its notBefore is a minute back), so not
    // older, but already expired.
    let expired = pki.issue(
        &LeafSpec::dns(REPLICA, Role::Server, 1)
            .valid(now - Duration::from_secs(30), now - Duration::from_secs(10)),
    );
    publish(&dir, &expired, &pki.ca.cert_pem);
    let bad = revision_of(dir.path());
    let line = server
        .wait_field("rejected credential revision", "revision", short(&bad))
        .await;
    assert!(
        line.contains(" ERROR ") && line.contains("expired at"),
        "{line}"
    );
    let st = status(&admin).await;
    let creds = &st["credentials"][0];
    assert_eq!(creds["revision"], old.as_str());
    assert_eq!(creds["last_rejected"]["revision"], bad.as_str());
    assert!(
        creds["last_rejected"]["error"]
            .as_str()
            .unwrap()
            .contains("expired at"),
        "{st}"
    );
    assert!(creds["pending"].is_null());
    let cfg = client_config(Some(&pki.leaf(CONTROLLER, Role::Client)), &pki.ca.cert_pem);
    assert_eq!(served_serial(&addr, cfg).await, serial(&first));
    let m = scrape_until(&admin, "the rejection in the gauges", |m| {
        gauges_say(m, &old, false)
    })
    .await;
    assert_eq!(m.get(RELOADS, &[("result", "rejected")]), 1.0);
    assert_eq!(server.log_count("applied credential revision"), 0);
}

/// With the file watcher off (test-only switch), the interval alone picks
/// a change up, within one interval (bounded here by two).
#[tokio::test(flavor = "multi_thread")]
async fn polling_alone_applies_a_change_within_the_interval() {
    const INTERVAL: Duration = Duration::from_secs(1);
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("CA");
    let dir = AtomicDir::new(&tmp.path().join("replica")).unwrap();
    publish(&dir, &pki.leaf(REPLICA, Role::Server), &pki.ca.cert_pem);
    let echo = echo_target().await;
    let d = dir.path().to_str().unwrap();
    let target = echo.addr.to_string();
    let mut cmd = std::process::Command::new(bin());
    cmd.args([
        "server",
        "--listen",
        "127.0.0.1:0",
        "--target",
        &target,
        "--tls-dir",
        d,
        "--allow-san",
        CONTROLLER,
        "--reload-interval",
        "1s",
    ])
    .env("MTLS_SIDECAR_NO_FILE_WATCH", "1")
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::piped());
    let server = Sidecar::from_command(cmd);
    server.wait_log(&["file watcher disabled"]).await;
    server.wait_log(&[" listening ", "route=server"]).await;
    let addr = server.addr("server");
    let cfg = client_config(Some(&pki.leaf(CONTROLLER, Role::Client)), &pki.ca.cert_pem);
    for round in 1..=2 {
        let next = pki.leaf(REPLICA, Role::Server);
        let published = Instant::now();
        publish(&dir, &next, &pki.ca.cert_pem);
        server
            .wait_field("applied credential revision", "serial", &serial(&next))
            .await;
        let took = published.elapsed();
        assert!(
            took < 2 * INTERVAL,
            "round {round}: applied after {took:?} with a {INTERVAL:?} interval"
        );
        assert_eq!(served_serial(&addr, cfg.clone()).await, serial(&next));
    }
    assert_eq!(server.log_count("cannot watch"), 0);
}

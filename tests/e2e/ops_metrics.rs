//! The operations metrics on `/metrics` of the real binary:
//! `mtls_sidecar_build_info{version, rustls}` and the standard `process_*`
//! series, which must also stay current (open fds follow open connections),
//! and `mtls_sidecar_credential_revision_info{source, revision}`: one series
//! per credential source, at 1, a replaced revision gone from the page, the
//! whole page accepted by `promtool check metrics`.

use crate::common;

use std::collections::HashMap;

use common::*;
use mtls_sidecar::pki::Role;
use mtls_sidecar::tools::atomic_writer::AtomicDir;

/// `name{labels} value` lines of a scrape, keyed by everything before the
/// value.
fn samples(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

fn scrape(admin: &str) -> String {
    let (code, out) = run_bin(&["health", "--admin", admin, "--path", "/metrics"]);
    assert_eq!(code, 0, "{out}");
    out
}

/// The version of `name` in this checkout's Cargo.lock.
fn locked(name: &str) -> String {
    let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.lock")).unwrap();
    let key = format!("name = \"{name}\"\nversion = \"");
    let start = lock.find(&key).expect("package in Cargo.lock") + key.len();
    lock[start..].split('"').next().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn build_info_and_process_metrics_are_exported_and_stay_current() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("metrics CA");
    let dir = pki.dir(tmp.path(), "replica", &pki.leaf(REPLICA, Role::Server));
    let echo = echo_target().await;
    let sc = start_server(&dir, &echo.addr.to_string(), &["--admin", "127.0.0.1:0"]).await;
    let admin = sc.admin();
    let text = scrape(&admin);
    let m = samples(&text);

    // One series, whatever the order its labels are rendered in.
    let version = format!("version=\"{}\"", env!("CARGO_PKG_VERSION"));
    let rustls = format!("rustls=\"{}\"", locked("rustls"));
    let series: Vec<_> = m
        .iter()
        .filter(|(k, _)| k.starts_with("mtls_sidecar_build_info{"))
        .collect();
    assert_eq!(series.len(), 1, "{text}");
    let (key, value) = series[0];
    assert_eq!(*value, 1.0, "{text}");
    assert!(key.contains(&version) && key.contains(&rustls), "{key}");
    assert!(
        key.contains("aes_gcm=\"ring\"") || key.contains("aes_gcm=\"aws-lc\""),
        "{key}"
    );
    assert!(
        text.contains("# TYPE mtls_sidecar_build_info gauge"),
        "{text}"
    );

    let get = |name: &str| {
        *m.get(name)
            .unwrap_or_else(|| panic!("{name} missing from /metrics:\n{text}"))
    };
    let rss = get("process_resident_memory_bytes");
    assert!((1e6..2e9).contains(&rss), "rss {rss}");
    let fds = get("process_open_fds");
    assert!(fds >= 4.0, "open fds {fds}");
    assert!(get("process_max_fds") >= fds);
    let cpu = get("process_cpu_seconds_total");
    assert!(cpu >= 0.0, "cpu {cpu}");
    let started = get("process_start_time_seconds");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        (now - 600.0..=now + 5.0).contains(&started),
        "start time {started} vs now {now}"
    );
    for t in [
        "# TYPE process_resident_memory_bytes gauge",
        "# TYPE process_open_fds gauge",
        "# TYPE process_max_fds gauge",
        "# TYPE process_start_time_seconds gauge",
    ] {
        assert!(text.contains(t), "{t}:\n{text}");
    }

    // Refreshed while running: 20 more connections are 20 more fds.
    let cfg = client_config(Some(&pki.leaf(CONTROLLER, Role::Client)), &pki.ca.cert_pem);
    let mut held = Vec::new();
    for _ in 0..20 {
        let mut s = tls_connect(&sc.addr("server"), REPLICA, cfg.clone())
            .await
            .expect("handshake");
        assert_eq!(roundtrip(&mut s, b"x").await, b"x");
        held.push(s);
    }
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let now_fds = samples(&scrape(&admin))["process_open_fds"];
        if now_fds >= fds + 20.0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "process_open_fds stayed at {now_fds} (was {fds}) with 20 more connections"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    drop(held);

    // And CPU time grows with work: handshakes until the counter moves (its
    // resolution is the kernel's tick, 10 ms); a frozen one never does.
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let now_cpu = samples(&scrape(&admin))["process_cpu_seconds_total"];
        if now_cpu > cpu {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "process_cpu_seconds_total stayed at {now_cpu} through handshakes"
        );
        for _ in 0..5 {
            let mut s = tls_connect(&sc.addr("server"), REPLICA, cfg.clone())
                .await
                .expect("handshake");
            assert_eq!(roundtrip(&mut s, b"x").await, b"x");
        }
    }
}

const REVISION_INFO: &str = "mtls_sidecar_credential_revision_info";

/// `(source, revision)` of every `revision_info` series, each checked at 1.
fn revision_series(m: &common::expo::Exposition) -> Vec<(String, String)> {
    let mut v: Vec<_> = m
        .series(REVISION_INFO)
        .into_iter()
        .map(|s| {
            assert_eq!(s.value, 1.0, "an _info series not at 1: {s:?}");
            let keys: Vec<_> = s.labels.keys().map(String::as_str).collect();
            assert_eq!(keys, ["revision", "source"], "{s:?}");
            (s.labels["source"].clone(), s.labels["revision"].clone())
        })
        .collect();
    v.sort();
    v
}

/// `(source, first 12 hex of revision)` of every credential store `/status`
/// shows.
fn status_revisions(st: &serde_json::Value) -> Vec<(String, String)> {
    let mut v: Vec<_> = st["credentials"]
        .as_array()
        .expect("credentials[]")
        .iter()
        .map(|c| {
            let rev = c["revision"].as_str().expect("revision");
            (
                c["source"].as_str().expect("source").to_string(),
                rev[..12].to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

/// The one lint finding the page is allowed: `process_cpu_seconds_total` is
/// a gauge on purpose (fractional seconds; see `metrics::process_metrics`).
const ACCEPTED_LINT: &[&str] =
    &["process_cpu_seconds_total non-counter metrics should not have \"_total\" suffix"];

/// `promtool check metrics` reads a scrape on stdin: the page must parse
/// (exit 1 is a parse error: a duplicate family, a bad escape) and its lint
/// (exit 3) may report only [`ACCEPTED_LINT`].
fn promtool_accepts(page: &str) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus package)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(page.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let findings: Vec<&str> = said
        .lines()
        .filter(|l| !ACCEPTED_LINT.contains(&l.trim()))
        .collect();
    assert!(
        matches!(out.status.code(), Some(0 | 3)) && findings.is_empty(),
        "promtool check metrics ({:?}): {findings:?}\n{page}",
        out.status.code()
    );
}

/// Two credential sources (one per route): two series, each naming its
/// source as `/status` does. A renewal of one replaces its series (the old
/// revision leaves the page, not kept at 0) and leaves the other alone.
#[tokio::test(flavor = "multi_thread")]
async fn revision_info_is_one_series_per_source_and_a_replaced_revision_is_gone() {
    if tools::skip_unless(&["promtool"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("revision CA");
    let a = AtomicDir::new(&tmp.path().join("source \"a\"")).unwrap();
    let b = AtomicDir::new(&tmp.path().join("b")).unwrap();
    publish_identity(&a, &pki.leaf(REPLICA, Role::Server), &pki.ca.cert_pem);
    publish_identity(&b, &pki.leaf(REPLICA, Role::Server), &pki.ca.cert_pem);
    let echo = echo_target().await;
    let mut config = "admin = \"127.0.0.1:0\"\nreload_interval = \"100ms\"\n".to_string();
    for (name, dir) in [("one", &a), ("two", &b)] {
        config += &format!(
            "[[route]]\nname = \"{name}\"\nmode = \"server\"\nlisten = \"127.0.0.1:0\"\n\
             target = \"{}\"\nallow_san = [\"{CONTROLLER}\"]\ntls_dir = {:?}\n",
            echo.addr,
            dir.path()
        );
    }
    let path = tmp.path().join("two-sources.toml");
    std::fs::write(&path, config).unwrap();
    let sc = Sidecar::start(&["run", "--config", path.to_str().unwrap()], 2).await;
    let admin = sc.admin();

    let before = status_revisions(&status(&admin).await);
    assert_eq!(before.len(), 2, "{before:?}");
    let m = scrape_until(&admin, "a revision_info series per source", |m| {
        m.series(REVISION_INFO).len() == 2
    })
    .await;
    assert_eq!(revision_series(&m), before);
    promtool_accepts(&http::request(&admin, "GET", "/metrics").await.body);

    // Renew source a only.
    let a_source = a.path().display().to_string();
    let old = before
        .iter()
        .find(|(s, _)| *s == a_source)
        .unwrap()
        .1
        .clone();
    publish_identity(&a, &pki.leaf(REPLICA, Role::Server), &pki.ca.cert_pem);
    let m = scrape_until(&admin, "source a's new revision", |m| {
        revision_series(m)
            .iter()
            .any(|(s, r)| *s == a_source && *r != old)
    })
    .await;
    let after = revision_series(&m);
    assert_eq!(after, status_revisions(&status(&admin).await));
    assert_eq!(after.len(), 2, "one series per source: {after:?}");
    assert!(
        m.series(REVISION_INFO)
            .iter()
            .all(|s| s.labels["revision"] != old),
        "the replaced revision {old} is still on the page: {after:?}"
    );
    let untouched: Vec<_> = before.iter().filter(|(s, _)| *s != a_source).collect();
    assert!(after.contains(untouched[0]), "{before:?} -> {after:?}");
    promtool_accepts(&http::request(&admin, "GET", "/metrics").await.body);
}

/// The validity gauges give each watched certificate's whole lifetime, so
/// an alert can ask what fraction of it is left: the identity's notBefore
/// and notAfter as issued, and for `trust` the bundle's newest CA. Here
/// `ca.crt` is an overlap bundle, the old CA (expiring in 10 days) next to
/// its successor (40 days): the successor is watched, so the old CA kept
/// until it expires raises no alert.
#[tokio::test(flavor = "multi_thread")]
async fn validity_gauges_give_the_lifetime_of_the_identity_and_the_newest_ca() {
    use mtls_sidecar::pki::{DevCa, LeafSpec};
    use std::time::{Duration, SystemTime, UNIX_EPOCH};
    const NOT_BEFORE: &str = "mtls_sidecar_cert_not_before_timestamp_seconds";
    const NOT_AFTER: &str = "mtls_sidecar_cert_not_after_timestamp_seconds";
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let at = |secs: u64| UNIX_EPOCH + Duration::from_secs(secs);
    let day = 86_400;
    let old = DevCa::with_validity("old CA", at(now - 300 * day), at(now + 10 * day)).unwrap();
    let next = DevCa::with_validity("next CA", at(now - day), at(now + 40 * day)).unwrap();
    let (leaf_nb, leaf_na) = (now - 3_600, now + 2 * day);
    let leaf = old
        .issue(&LeafSpec::dns(REPLICA, Role::Server, 1).valid(at(leaf_nb), at(leaf_na)))
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("tls");
    let bundle = format!("{}{}", old.cert_pem, next.cert_pem);
    mtls_sidecar::pki::write_secret_dir(&dir, &leaf, &bundle).unwrap();
    let echo = echo_target().await;
    let sc = start_server(&dir, &echo.addr.to_string(), &["--admin", "127.0.0.1:0"]).await;

    let m = common::scrape(&sc.admin()).await;
    let got = |name: &str, cert: &str| m.get(name, &[("cert", cert)]);
    assert_eq!(got(NOT_BEFORE, "identity"), leaf_nb as f64);
    assert_eq!(got(NOT_AFTER, "identity"), leaf_na as f64);
    assert_eq!(got(NOT_BEFORE, "trust"), (now - day) as f64);
    assert_eq!(got(NOT_AFTER, "trust"), (now + 40 * day) as f64);
}

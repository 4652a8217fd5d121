//! The operations metrics on `/metrics` of the real binary:
//! `mtls_sidecar_build_info{version, rustls}` and the standard `process_*`
//! series, which must also stay current (open fds follow open connections).

mod common;

use std::collections::HashMap;

use common::*;
use mtls_sidecar::ops::pki::Role;

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

    let info = format!(
        "mtls_sidecar_build_info{{version=\"{}\",rustls=\"{}\"}}",
        env!("CARGO_PKG_VERSION"),
        locked("rustls")
    );
    let alt = format!(
        "mtls_sidecar_build_info{{rustls=\"{}\",version=\"{}\"}}",
        locked("rustls"),
        env!("CARGO_PKG_VERSION")
    );
    let value = m.get(&info).or_else(|| m.get(&alt));
    assert_eq!(value, Some(&1.0), "{info} missing:\n{text}");
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

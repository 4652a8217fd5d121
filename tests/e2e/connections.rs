//! The live-connection registry as observers see it, on the real binary
//! over real TLS: `/connections` (fields, byte counts, the presented chain,
//! cursor pages, bounds, and who may read it), and the access log line each
//! authenticated connection leaves at close (its fields, a hostile SAN
//! escaped, the off switch).

use crate::common;

use std::time::Instant;

use common::*;
use mtls_sidecar::identity::pin;
use mtls_sidecar::pki::{Issued, LeafSpec, Role};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use serde_json::Value;
use tokio::io::AsyncWriteExt;

/// A server sidecar with an admin endpoint in front of an echo target.
async fn server(creds: &Creds, echo: &Echo, extra: &[&str]) -> Sidecar {
    let target = echo.addr.to_string();
    start_server(&creds.server_dir, &target, extra).await
}

/// A live connection presenting `ident`, after one round trip of `msg`.
async fn live(sc: &Sidecar, creds: &Creds, ident: &Issued, msg: &[u8]) -> ClientTls {
    let cfg = client_config(Some(ident), &creds.pki.ca.cert_pem);
    let mut s = tls_connect(&sc.addr("server"), REPLICA, cfg)
        .await
        .expect("handshake");
    assert_eq!(roundtrip(&mut s, msg).await, msg);
    s
}

/// `/connections` (with `query`) as JSON; it must answer 200.
async fn connections(admin: &str, query: &str) -> Value {
    let a = get(admin, &format!("/connections{query}")).await;
    assert_eq!(a.code, 200, "{}", a.body);
    assert_eq!(a.header("content-type"), Some("application/json"));
    assert!(!a.body.contains("PRIVATE KEY"), "never a key: {}", a.body);
    serde_json::from_str(&a.body).unwrap_or_else(|e| panic!("{e}\n{}", a.body))
}

/// Polls `/connections` until `cond` holds on it.
async fn connections_until(admin: &str, what: &str, cond: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let v = connections(admin, "").await;
        if cond(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "never {what}: {v:#}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

fn ids(v: &Value) -> Vec<u64> {
    v["connections"]
        .as_array()
        .expect("connections")
        .iter()
        .map(|c| c["id"].as_u64().expect("id"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_show_each_live_peer_and_page_by_cursor() {
    let creds = Creds::new();
    let echo = echo_target().await;
    let sc = server(&creds, &echo, &["--admin", "127.0.0.1:0"]).await;
    let admin = sc.admin();
    let mut first = live(&sc, &creds, &creds.controller, b"hello").await;
    let _second = live(&sc, &creds, &creds.controller, b"hi").await;
    let _third = live(&sc, &creds, &creds.controller, b"hey").await;

    // Byte counts are the forwarder's own, read at query time.
    let v = connections_until(&admin, "three connections with their bytes", |v| {
        let c = v["connections"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        c.len() == 3 && c[0]["bytes_to_target"] == 5 && c[0]["bytes_from_target"] == 5
    })
    .await;
    let c = &v["connections"][0];
    assert_eq!(c["route"], "server");
    assert_eq!(c["sans"], serde_json::json!([CONTROLLER]));
    let info = mtls_sidecar::identity::CertInfo::parse(&creds.controller.cert_der).unwrap();
    assert_eq!(c["serial"], info.serial.as_str());
    assert_eq!(c["subject"], info.subject.as_str());
    let spki = pin::encode(&pin::spki_sha256(creds.controller.cert_der.as_ref()).unwrap());
    assert_eq!(c["spki_sha256"], spki.as_str());
    assert!(c["age_seconds"].as_f64().is_some_and(|a| a >= 0.0));
    assert!(c["peer"]
        .as_str()
        .is_some_and(|p| p.starts_with("127.0.0.1:")));
    let chain: Vec<_> = CertificateDer::pem_slice_iter(c["chain_pem"].as_str().unwrap().as_bytes())
        .collect::<Result<_, _>>()
        .expect("chain is PEM");
    assert_eq!(chain, vec![creds.controller.cert_der.clone()]);
    let route = &v["routes"][0];
    assert_eq!(route["name"], "server");
    assert_eq!(route["usage"], "client_auth");
    assert_eq!(route["live"], 3);
    assert!(route["trust_anchors_pem"]
        .as_str()
        .is_some_and(|p| p.contains("BEGIN CERTIFICATE")));
    assert!(v["next"].is_null());

    // Pages of two, by cursor: every connection exactly once, in order.
    let p1 = connections(&admin, "?limit=2").await;
    assert_eq!(ids(&p1).len(), 2);
    let next = p1["next"].as_str().expect("a next cursor").to_string();
    let p2 = connections(&admin, &format!("?limit=2&after={next}")).await;
    assert!(p2["next"].is_null());
    let mut all = ids(&p1);
    all.extend(ids(&p2));
    assert_eq!(all, ids(&v));

    // Bounds and malformed queries are refused with a clear 400.
    // Each names what it refused, quoted, at most 64 characters of it.
    let long = "z".repeat(100);
    let long_query = format!("?limit={long}");
    let quoted = format!("\"{}\"", "z".repeat(64));
    for (bad, named) in [
        ("?limit=0", "\"0\""),
        ("?limit=501", "\"501\""),
        ("?after=x", "\"x\""),
        ("?offset=2", "\"offset\""),
        (long_query.as_str(), quoted.as_str()),
    ] {
        let a = get(&admin, &format!("/connections{bad}")).await;
        assert_eq!(a.code, 400, "{bad}: {}", a.body);
        assert!(a.body.starts_with("/connections: "), "{}", a.body);
        assert!(a.body.contains(named), "{bad}: {}", a.body);
    }

    // A closed connection leaves the list.
    first.shutdown().await.unwrap();
    let _ = read_until_closed(&mut first).await;
    connections_until(&admin, "two connections", |v| ids(v).len() == 2).await;
}

/// Pages run across routes in (route, id) order: a cursor in the first
/// route leads on into the second, and every connection of both is listed
/// exactly once. Kills `<` to `>` in `page`'s skip of the routes before
/// the cursor's (which skipped the routes after it instead).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_run_on_across_routes() {
    let creds = Creds::new();
    let echo = echo_target().await;
    let config = creds.tmp.path().join("two-routes.toml");
    let mut text = format!(
        "tls_dir = {dir:?}\nadmin = \"127.0.0.1:0\"\n",
        dir = creds.server_dir.to_str().unwrap()
    );
    for name in ["first", "second"] {
        text.push_str(&format!(
            "[[route]]\nname = \"{name}\"\nmode = \"server\"\nlisten = \"127.0.0.1:0\"\n\
             target = \"{target}\"\nallow_san = [\"{CONTROLLER}\"]\n",
            target = echo.addr
        ));
    }
    std::fs::write(&config, text).unwrap();
    let sc = Sidecar::start(&["run", "--config", config.to_str().unwrap()], 2).await;
    let admin = sc.admin();
    let cfg = client_config(Some(&creds.controller), &creds.pki.ca.cert_pem);
    let mut held = Vec::new();
    for route in ["first", "first", "second", "second"] {
        let mut s = tls_connect(&sc.addr(route), REPLICA, cfg.clone())
            .await
            .expect("handshake");
        assert_eq!(roundtrip(&mut s, b"x").await, b"x");
        held.push(s);
    }
    let all = connections_until(&admin, "four connections", |v| ids(v).len() == 4).await;
    let routes: Vec<&str> = all["connections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["route"].as_str().expect("route"))
        .collect();
    assert_eq!(routes, ["first", "first", "second", "second"], "{all:#}");

    let mut paged = Vec::new();
    let mut query = "?limit=1".to_string();
    loop {
        let page = connections(&admin, &query).await;
        paged.extend(ids(&page));
        match page["next"].as_str() {
            Some(next) => query = format!("?limit=1&after={next}"),
            None => break,
        }
        assert!(paged.len() <= 4, "pages never end: {paged:?}");
    }
    assert_eq!(paged, ids(&all), "pages of one, route after route");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_refused_on_a_wildcard_admin_listener_unless_enabled() {
    let creds = Creds::new();
    let echo = echo_target().await;
    let wide = server(&creds, &echo, &["--admin", "0.0.0.0:0"]).await;
    let port = wide.admin().rsplit_once(':').unwrap().1.to_string();
    let admin = format!("127.0.0.1:{port}");
    let _c = live(&wide, &creds, &creds.controller, b"x").await;
    let a = get(&admin, "/connections").await;
    assert_eq!(a.code, 403, "{}", a.body);
    assert!(a.body.contains("--admin-connections on"), "{}", a.body);
    assert!(!a.body.contains(CONTROLLER));
    assert_eq!(get(&admin, "/status").await.code, 200);

    let on = server(
        &creds,
        &echo,
        &["--admin", "0.0.0.0:0", "--admin-connections", "on"],
    )
    .await;
    let port = on.admin().rsplit_once(':').unwrap().1.to_string();
    let _c = live(&on, &creds, &creds.controller, b"x").await;
    let v = connections_until(&format!("127.0.0.1:{port}"), "one connection", |v| {
        ids(v).len() == 1
    })
    .await;
    assert_eq!(v["connections"][0]["sans"], serde_json::json!([CONTROLLER]));

    // A Unix-socket admin listener is local by nature: served.
    let sock = creds.tmp.path().join("admin.sock");
    let unix = format!("unix:{}", sock.display());
    let local = server(&creds, &echo, &["--admin", &unix]).await;
    let _c = live(&local, &creds, &creds.controller, b"x").await;
    connections_until(&unix, "one connection", |v| ids(v).len() == 1).await;
}

/// The access line of a connection of route `server`.
async fn access_line(sc: &Sidecar) -> String {
    sc.wait_log(&["mtls_sidecar::access", "route=server"]).await
}

/// Closes a connection from the client side and waits for the sidecar's
/// own close line (DEBUG), written right after the access line.
async fn close(sc: &Sidecar, mut s: ClientTls) {
    s.shutdown().await.unwrap();
    let _ = read_until_closed(&mut s).await;
    sc.wait_log(&["connection closed", "route=server"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_line_names_the_peer_counts_bytes_and_escapes_hostile_sans() {
    let creds = Creds::new();
    let echo = echo_target().await;
    let sc = server(&creds, &echo, &[]).await;
    let hostile = creds.pki.issue(&LeafSpec {
        dns: vec![
            CONTROLLER.to_string(),
            "evil.svc\nINFO forged-access\u{1b}[2J".to_string(),
        ],
        ..LeafSpec::dns(CONTROLLER, Role::Client, 30)
    });
    let s = live(&sc, &creds, &hostile, b"hello").await;
    close(&sc, s).await;
    let line = access_line(&sc).await;
    assert!(line.contains(" INFO "), "{line}");
    assert!(has_field(&line, "reason", "completed"), "{line}");
    assert!(has_field(&line, "to_target", "5"), "{line}");
    assert!(has_field(&line, "from_target", "5"), "{line}");
    assert!(line.contains("duration="), "{line}");
    assert!(line.contains("peer=127.0.0.1:"), "{line}");
    let info = mtls_sidecar::identity::CertInfo::parse(&hostile.cert_der).unwrap();
    assert!(has_field(&line, "serial", &info.serial), "{line}");
    let spki = pin::encode(&pin::spki_sha256(hostile.cert_der.as_ref()).unwrap());
    assert!(has_field(&line, "spki_sha256", &spki), "{line}");
    assert!(line.contains(CONTROLLER), "{line}");
    // The hostile SAN is in the line, escaped: no forged line, no raw ESC.
    assert!(line.contains("forged-access"), "{line}");
    for l in sc.logs() {
        assert!(
            !l.trim_start().starts_with("INFO forged-access"),
            "forged: {l}"
        );
        assert!(!l.contains('\u{1b}'), "raw escape: {l:?}");
    }
    assert_eq!(sc.log_count("mtls_sidecar::access"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_log_off_writes_no_line_and_refusals_never_write_one() {
    let creds = Creds::new();
    let echo = echo_target().await;
    let sc = server(&creds, &echo, &["--access-log", "off"]).await;
    let s = live(&sc, &creds, &creds.controller, b"hello").await;
    close(&sc, s).await;
    assert_eq!(sc.log_count("mtls_sidecar::access"), 0, "{:#?}", sc.logs());

    // On (the default), a refused handshake writes its WARN, no access line.
    let on = server(&creds, &echo, &[]).await;
    let stranger = creds.pki.leaf("stranger.svc", Role::Client);
    let cfg = client_config(Some(&stranger), &creds.pki.ca.cert_pem);
    if let Ok(mut s) = tls_connect(&on.addr("server"), REPLICA, cfg).await {
        assert!(refused(&mut s).await);
    }
    on.wait_log(&["handshake refused", "bad_san"]).await;
    assert_eq!(on.log_count("mtls_sidecar::access"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_keys_open_the_gate_and_switch_the_access_log() {
    let creds = Creds::new();
    let echo = echo_target().await;
    let config = creds.tmp.path().join("sidecar.toml");
    let write = |admin_connections: &str, access_log: &str| {
        let text = format!(
            "tls_dir = {dir:?}\nadmin = \"0.0.0.0:0\"\nadmin_connections = \"{admin_connections}\"\n\
             [[route]]\nname = \"server\"\nmode = \"server\"\nlisten = \"127.0.0.1:0\"\n\
             target = \"{target}\"\nallow_san = [\"{CONTROLLER}\"]\naccess_log = \"{access_log}\"\n",
            dir = creds.server_dir.to_str().unwrap(),
            target = echo.addr,
        );
        std::fs::write(&config, text).unwrap();
    };
    let path = config.to_str().unwrap();
    for (gate, log, key) in [
        ("maybe", "off", "admin_connections"),
        ("on", "1", "access_log"),
    ] {
        write(gate, log);
        let (code, out) = run_bin(&["check", "--config", path]);
        assert_eq!(code, 2, "{out}");
        assert!(out.contains(key) && out.contains("on or off"), "{out}");
    }

    write("on", "off");
    let sc = Sidecar::start(&["run", "--config", path], 1).await;
    let port = sc.admin().rsplit_once(':').unwrap().1.to_string();
    let s = live(&sc, &creds, &creds.controller, b"hello").await;
    connections_until(&format!("127.0.0.1:{port}"), "one connection", |v| {
        ids(v).len() == 1
    })
    .await;
    close(&sc, s).await;
    assert_eq!(sc.log_count("mtls_sidecar::access"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_route_logs_access_only_when_asked() {
    let creds = Creds::new();
    let echo = echo_target().await;
    let (server, client) = creds
        .pair(
            &echo.addr.to_string(),
            &["--access-log", "off"],
            &["--access-log", "on"],
        )
        .await;
    let mut s = connect_plain(&client).await;
    assert_eq!(roundtrip(&mut s, b"hello").await, b"hello");
    s.shutdown().await.unwrap();
    let _ = read_until_closed(&mut s).await;
    let line = client
        .wait_log(&["mtls_sidecar::access", "route=client"])
        .await;
    assert!(line.contains(REPLICA), "{line}");
    assert!(has_field(&line, "to_target", "5"), "{line}");
    assert!(has_field(&line, "from_target", "5"), "{line}");
    server
        .wait_log(&["connection closed", "route=server"])
        .await;
    assert_eq!(server.log_count("mtls_sidecar::access"), 0);
}

//! Identity hand-off and policy through the real binary: the PROXY v2 header
//! a target receives (read back with the `ppp` parser), ALPN on both modes,
//! and public-key pins refusing inside the handshake (`pin_mismatch`).

use crate::common;
use crate::common::handoff as support;

use std::sync::Arc;

use common::*;
use mtls_sidecar::pki::Role;
use ppp::v2::{Addresses, Command, Header};
use support::recording_target;
use tokio::io::AsyncWriteExt;

fn tlv(h: &Header<'_>, kind: u8) -> Option<Vec<u8>> {
    h.tlvs()
        .filter_map(Result::ok)
        .find(|t| t.kind == kind)
        .map(|t| t.value.to_vec())
}

async fn send_and_close(mut tls: ClientTls, msg: &[u8]) -> std::net::SocketAddr {
    let local = tls.get_ref().0.local_addr().unwrap();
    tls.write_all(msg).await.unwrap();
    tls.flush().await.unwrap();
    tls.shutdown().await.unwrap();
    let _ = read_until_closed(&mut tls).await;
    local
}

#[tokio::test]
async fn proxy_v2_header_names_the_peer_before_its_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("handoff CA");
    let dir = pki.dir(tmp.path(), "replica", &pki.leaf(REPLICA, Role::Server));
    let controller = pki.leaf(CONTROLLER, Role::Client);
    let (target, mut got) = recording_target().await;
    let sc = start_server(&dir, &target, &["--proxy-protocol", "v2"]).await;
    let addr = sc.addr("server");
    let cfg = client_config(Some(&controller), &pki.ca.cert_pem);
    let tls = tls_connect(&addr, REPLICA, cfg.clone()).await.unwrap();
    let local = send_and_close(tls, b"first bytes").await;
    let bytes = tokio::time::timeout(DEADLINE, got.recv())
        .await
        .unwrap()
        .unwrap();
    let header = Header::try_from(bytes.as_slice()).expect("a PROXY v2 header comes first");
    let rest = &bytes[header.len()..];
    assert_eq!(rest, b"first bytes");
    assert_eq!(header.command, Command::Proxy);
    match header.addresses {
        Addresses::IPv4(a) => {
            assert_eq!(
                std::net::SocketAddr::from((a.source_address, a.source_port)),
                local
            );
            assert_eq!(
                std::net::SocketAddr::from((a.destination_address, a.destination_port)).to_string(),
                addr
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        tlv(&header, 0x02).unwrap(),
        REPLICA.as_bytes(),
        "authority = SNI"
    );
    assert_eq!(
        tlv(&header, 0xE0).unwrap(),
        CONTROLLER.as_bytes(),
        "matched entry"
    );
    assert_eq!(tlv(&header, 0xE1).unwrap(), CONTROLLER.as_bytes(), "SANs");
    let id = String::from_utf8(tlv(&header, 0x05).unwrap()).unwrap();
    let closed = sc.wait_log(&["connection closed"]).await;
    assert!(
        has_field(&closed, "conn", &id),
        "unique id {id} is the log's conn: {closed}"
    );
    let ssl = tlv(&header, 0x20).expect("PP2_TYPE_SSL");
    assert_eq!(ssl[0], 0x07, "client: SSL, cert on connection and session");
    assert_eq!(&ssl[1..5], &[0, 0, 0, 0], "verify = 0: verified");
    let subs = parse_subtlvs(&ssl[5..]);
    let sub = |k: u8| {
        subs.iter()
            .find(|(kind, _)| *kind == k)
            .map(|(_, v)| String::from_utf8(v.clone()).unwrap())
    };
    assert_eq!(sub(0x21).as_deref(), Some("TLSv1.3"));
    assert_eq!(sub(0x22).as_deref(), Some(CONTROLLER), "CN");
    assert!(sub(0x23).unwrap().starts_with("TLS_"), "{:?}", sub(0x23));
    assert_eq!(sub(0x24).as_deref(), Some("ecdsa-with-SHA256"));
    assert_eq!(sub(0x25).as_deref(), Some("EC256"));

    // Negative control: without the flag the target gets the bytes alone.
    let (plain_target, mut plain_got) = recording_target().await;
    let plain = start_server(&dir, &plain_target, &[]).await;
    let tls = tls_connect(&plain.addr("server"), REPLICA, cfg)
        .await
        .unwrap();
    send_and_close(tls, b"first bytes").await;
    let bytes = tokio::time::timeout(DEADLINE, plain_got.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(bytes, b"first bytes");
}

fn parse_subtlvs(mut b: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    while b.len() >= 3 {
        let len = u16::from_be_bytes([b[1], b[2]]) as usize;
        assert!(b.len() >= 3 + len, "sub-TLV overruns the SSL TLV");
        out.push((b[0], b[3..3 + len].to_vec()));
        b = &b[3 + len..];
    }
    assert!(b.is_empty(), "trailing bytes in the SSL TLV");
    out
}

fn with_alpn(mut cfg: rustls::ClientConfig, protos: &[&str]) -> Arc<rustls::ClientConfig> {
    cfg.alpn_protocols = protos.iter().map(|p| p.as_bytes().to_vec()).collect();
    Arc::new(cfg)
}

#[tokio::test]
async fn alpn_server_accepts_only_its_protocols() {
    let s = ServerSide::start(&["--alpn", "postgresql"]).await;
    let base = (*client_config(Some(&s.controller), &s.pki.ca.cert_pem)).clone();
    // Offering the protocol: negotiated.
    let mut tls = tls_connect(
        &s.addr,
        REPLICA,
        with_alpn(base.clone(), &["h2", "postgresql"]),
    )
    .await
    .expect("postgresql offered");
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"postgresql"[..]));
    assert_eq!(roundtrip(&mut tls, b"a").await, b"a");
    // Offering none: still accepted.
    let mut tls = tls_connect(&s.addr, REPLICA, with_alpn(base.clone(), &[]))
        .await
        .expect("no ALPN offered");
    assert_eq!(roundtrip(&mut tls, b"b").await, b"b");
    // Offering only others: refused inside the handshake.
    let before = s.sidecar.warn_reason("protocol").len();
    let r = tls_connect(&s.addr, REPLICA, with_alpn(base, &["h2"])).await;
    assert!(r.is_err(), "a client offering only h2 was accepted");
    eventually("one protocol refusal", || {
        s.sidecar.warn_reason("protocol").len() == before + 1
    })
    .await;
    assert_eq!(s.echo.accepted(), 2);
}

#[tokio::test]
async fn alpn_client_route_offers_its_protocols() {
    let pair = Pair::start(
        &["--alpn", "postgresql"],
        &["--alpn", "postgresql", "--alpn", "x-other"],
    )
    .await;
    let mut c = pair.connect().await;
    assert_eq!(roundtrip(&mut c, b"hi").await, b"hi");
    let line = pair.client.wait_log(&["ALPN negotiated"]).await;
    assert!(has_field(&line, "alpn", "postgresql"), "{line}");
}

#[tokio::test]
async fn spki_pins_refuse_an_unpinned_key_with_the_right_san() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("pin CA");
    let dir = pki.dir(tmp.path(), "replica", &pki.leaf(REPLICA, Role::Server));
    let pinned = pki.leaf(CONTROLLER, Role::Client);
    let other = pki.leaf(CONTROLLER, Role::Client);
    let pin = mtls_sidecar::identity::pin::encode(
        &mtls_sidecar::identity::pin::spki_sha256(pinned.cert_der.as_ref()).unwrap(),
    );
    let echo = echo_target().await;
    let sc = start_server(
        &dir,
        &echo.addr.to_string(),
        &["--allow-spki-sha256", &pin, "--admin", "127.0.0.1:0"],
    )
    .await;
    let addr = sc.addr("server");
    let mut ok = tls_connect(
        &addr,
        REPLICA,
        client_config(Some(&pinned), &pki.ca.cert_pem),
    )
    .await
    .unwrap();
    assert_eq!(roundtrip(&mut ok, b"pinned").await, b"pinned");
    let mut bad = tls_connect(
        &addr,
        REPLICA,
        client_config(Some(&other), &pki.ca.cert_pem),
    )
    .await
    .unwrap();
    assert!(refused(&mut bad).await);
    let line = sc
        .wait_field("handshake refused", "reason", "pin_mismatch")
        .await;
    assert!(line.contains(CONTROLLER), "{line}");
    assert_eq!(sc.warn_reason("pin_mismatch").len(), 1);
    assert_eq!(echo.accepted(), 1);
}

#[tokio::test]
async fn a_client_route_refuses_a_server_whose_key_is_not_pinned() {
    let wrong = mtls_sidecar::identity::pin::encode(&[9u8; 32]);
    let pair = Pair::start(&[], &["--expect-spki-sha256", &wrong]).await;
    let mut c = pair.connect().await;
    let got = read_until_closed(&mut c).await;
    assert!(got.is_empty());
    pair.client
        .wait_field("handshake refused", "reason", "pin_mismatch")
        .await;
    assert_eq!(pair.echo.accepted(), 0);
}

#[test]
fn bad_pins_alpn_and_proxy_versions_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("cli CA");
    let dir = pki.dir(tmp.path(), "replica", &pki.leaf(REPLICA, Role::Server));
    let d = dir.to_str().unwrap();
    let base = [
        "server",
        "--listen",
        "127.0.0.1:0",
        "--target",
        "127.0.0.1:9",
        "--tls-dir",
        d,
        "--allow-san",
        CONTROLLER,
    ];
    for (extra, needle) in [
        (&["--allow-spki-sha256", "short"][..], "--allow-spki-sha256"),
        (&["--proxy-protocol", "v1"][..], "proxy-protocol"),
        (&["--alpn", ""][..], "--alpn"),
    ] {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        let (code, out) = run_bin(&args);
        assert_eq!(code, 2, "{extra:?}: {out}");
        assert!(out.contains(needle), "{extra:?}: {out}");
    }
}

/// `check --spki` prints the pin a sidecar accepts: the pin it prints for
/// the controller's directory admits the controller.
#[tokio::test]
async fn check_spki_prints_the_pin_the_sidecar_accepts() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("spki CA");
    let dir = pki.dir(tmp.path(), "replica", &pki.leaf(REPLICA, Role::Server));
    let controller = pki.leaf(CONTROLLER, Role::Client);
    let cdir = pki.dir(tmp.path(), "controller", &controller);
    let (code, out) = run_bin(&["check", "--spki", "--tls-dir", cdir.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let pin = out.trim().to_string();
    assert_eq!(
        Some(mtls_sidecar::identity::pin::spki_sha256(controller.cert_der.as_ref()).unwrap()),
        mtls_sidecar::identity::pin::parse(&pin)
    );
    let cert = cdir.join("tls.crt");
    let (code, out2) = run_bin(&["check", "--spki", "--cert", cert.to_str().unwrap()]);
    assert_eq!((code, out2.trim()), (0, pin.as_str()));
    let echo = echo_target().await;
    let sc = start_server(&dir, &echo.addr.to_string(), &["--allow-spki-sha256", &pin]).await;
    let mut tls = tls_connect(
        &sc.addr("server"),
        REPLICA,
        client_config(Some(&controller), &pki.ca.cert_pem),
    )
    .await
    .unwrap();
    assert_eq!(roundtrip(&mut tls, b"pin").await, b"pin");
    let (code, _) = run_bin(&["check", "--spki"]);
    assert_eq!(code, 2);
}

/// `/status` shows the hand-off and policy options of a route.
#[tokio::test]
async fn status_shows_the_hand_off_options() {
    let pin = mtls_sidecar::identity::pin::encode(&[3u8; 32]);
    let s = ServerSide::start(&[
        "--alpn",
        "postgresql",
        "--proxy-protocol",
        "v2",
        "--allow-spki-sha256",
        &pin,
        "--admin",
        "127.0.0.1:0",
    ])
    .await;
    let admin = s.sidecar.admin();
    let body = common::http::request(&admin, "GET", "/status").await.body;
    let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
    let route = &doc["routes"][0];
    assert_eq!(route["alpn"], serde_json::json!(["postgresql"]), "{body}");
    assert_eq!(route["spki_pins"], serde_json::json!([pin]), "{body}");
    assert_eq!(route["proxy_protocol"], serde_json::json!(true), "{body}");
}

/// The TLV `0xE0` one connection from `ident` to `sc` carries.
async fn matched_tlv(
    sc: &Sidecar,
    got: &mut tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>,
    pki: &Pki,
    ident: &mtls_sidecar::pki::Issued,
) -> String {
    let cfg = client_config(Some(ident), &pki.ca.cert_pem);
    let tls = tls_connect(&sc.addr("server"), REPLICA, cfg).await.unwrap();
    send_and_close(tls, b"x").await;
    let bytes = tokio::time::timeout(DEADLINE, got.recv())
        .await
        .unwrap()
        .unwrap();
    let header = Header::try_from(bytes.as_slice()).expect("a PROXY v2 header");
    String::from_utf8(tlv(&header, 0xE0).expect("TLV 0xE0")).unwrap()
}

/// `0xE0` names the `--allow-san` entry that admitted the peer, exactly as
/// configured, among several (not the first, not the last); `*` with
/// `--allow-any-san`.
#[tokio::test]
async fn the_matched_tlv_names_the_entry_that_admitted_the_peer() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("handoff CA");
    let dir = pki.dir(tmp.path(), "replica", &pki.leaf(REPLICA, Role::Server));
    let (target, mut got) = recording_target().await;
    let sc = start_server(
        &dir,
        &target,
        &[
            "--proxy-protocol",
            "v2",
            "--allow-san",
            "*.ops.env-1.svc",
            "--allow-san",
            "spiffe://env-1.example/ns/x/sa/y",
        ],
    )
    .await;
    let tool = pki.leaf("tool.ops.env-1.svc", Role::Client);
    let controller = pki.leaf(CONTROLLER, Role::Client);
    assert_eq!(
        matched_tlv(&sc, &mut got, &pki, &tool).await,
        "*.ops.env-1.svc"
    );
    assert_eq!(
        matched_tlv(&sc, &mut got, &pki, &controller).await,
        CONTROLLER
    );

    let any = Sidecar::start(
        &[
            "server",
            "--listen",
            "127.0.0.1:0",
            "--target",
            &target,
            "--tls-dir",
            dir.to_str().unwrap(),
            "--allow-any-san",
            "--proxy-protocol",
            "v2",
        ],
        1,
    )
    .await;
    assert_eq!(matched_tlv(&any, &mut got, &pki, &tool).await, "*");
}

/// The positive control of the client route's pin: a pin of the server's
/// own key admits (the test above refuses a wrong one) and the connection
/// round-trips; the same pair with a wrong pin beside the right one
/// (either may match) does too.
#[tokio::test]
async fn a_client_route_admits_a_server_whose_key_is_pinned() {
    let creds = Creds::new();
    let pin = mtls_sidecar::identity::pin::spki_sha256(&creds.replica.cert_der)
        .expect("the server certificate's SPKI");
    let right = mtls_sidecar::identity::pin::encode(&pin);
    let wrong = mtls_sidecar::identity::pin::encode(&[9u8; 32]);
    let echo = echo_target().await;
    let target = echo.addr.to_string();
    for pins in [vec![right.as_str()], vec![wrong.as_str(), right.as_str()]] {
        let mut extra = Vec::new();
        for p in &pins {
            extra.extend(["--expect-spki-sha256", p]);
        }
        let (_server, client) = creds.pair(&target, &[], &extra).await;
        let mut c = connect_plain(&client).await;
        assert_eq!(roundtrip(&mut c, b"pinned").await, b"pinned", "{pins:?}");
        assert_eq!(client.log_count("pin_mismatch"), 0, "{pins:?}");
    }
}

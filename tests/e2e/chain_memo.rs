//! The verifiers' shortcuts, counted through the shipped binary. A peer
//! reconnecting with the very chain that passed against the very trust in
//! force is not chain-checked again (`LastVerified` in src/tls/verify.rs),
//! and admission does not re-check a chain the handshake just passed
//! against the trust still in force (`note_verified`). Both save a
//! signature verification a handshake; neither changes a verdict, so only
//! their cost tells them from no shortcut at all: each chain judgement logs
//! `peer chain judged` at DEBUG with `chain=verified` (the full check) or
//! `chain=remembered` (the shortcut), and these tests count the lines.
//!
//! Kills the cargo-mutants mutants of src/tls/verify.rs that docs/mutants.md
//! once listed as equivalent: `LastVerified::covers -> false` and
//! `LastVerified::record -> ()` (every handshake checked in full: two
//! `verified` lines), and `note_verified -> ()` (admission re-checks: a
//! `remembered` line more a connection).

use crate::common;

use common::*;
use mtls_sidecar::pki::{LeafSpec, Role};

const JUDGED: &str = "peer chain judged";

/// The `chain=` values of the `peer chain judged` lines so far, in order.
fn judgements(sc: &Sidecar) -> Vec<String> {
    sc.logs()
        .iter()
        .filter(|l| l.contains(JUDGED))
        .map(|l| field(l, "chain"))
        .collect()
}

/// One connection as the controller: a round trip through the echo
/// target, then a close, awaited until the sidecar logs it (`n` closes in
/// all). Admission and its re-check happen before any byte is forwarded,
/// and the log keeps its order, so once the close is logged every
/// judgement of this connection is too.
async fn one_connection(srv: &ServerSide, n: usize) {
    let mut tls = srv.connect_good().await;
    assert_eq!(roundtrip(&mut tls, b"ping").await, b"ping");
    drop(tls);
    eventually("the connection's close logged", || {
        srv.sidecar.log_count("connection closed") >= n
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_peer_reconnecting_with_the_same_chain_is_chain_checked_once() {
    let srv = ServerSide::start(&[]).await;
    one_connection(&srv, 1).await;
    // The handshake checked the chain in full; admission, seeing the trust
    // it passed against still in force, did not check it again.
    assert_eq!(judgements(&srv.sidecar), ["verified"]);
    one_connection(&srv, 2).await;
    // The same certificate under the same trust: remembered, not re-checked.
    assert_eq!(judgements(&srv.sidecar), ["verified", "remembered"]);
    assert_eq!(srv.echo.accepted(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chain_through_an_intermediate_is_checked_in_full_every_time() {
    // Only leaves issued directly by an anchor are remembered: a chain with
    // an intermediate is checked on every handshake, and still only once a
    // handshake (admission trusts the handshake's verdict).
    let srv = ServerSide::start(&[]).await;
    let intermediate = srv.pki.ca.intermediate("test issuing CA", 30).unwrap();
    let leaf = intermediate
        .issue(&LeafSpec::dns(CONTROLLER, Role::Client, 30))
        .unwrap();
    for n in 1..=2 {
        let cfg = chain_client(&leaf, &intermediate.cert_pem, &srv.pki.ca.cert_pem);
        let mut tls = tls_connect(&srv.addr, REPLICA, cfg)
            .await
            .expect("handshake");
        assert_eq!(roundtrip(&mut tls, b"ping").await, b"ping");
        drop(tls);
        eventually("the connection's close logged", || {
            srv.sidecar.log_count("connection closed") >= n
        })
        .await;
    }
    assert_eq!(judgements(&srv.sidecar), ["verified", "verified"]);
}

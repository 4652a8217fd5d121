//! Federated trust domains from the Workload API (the X.509 context's
//! `federated_bundles`), against the independent Python agent
//! (tests/common/spiffe/agent.py): each trust domain's bundle vouches for its own
//! IDs only, `spiffe://` allow entries name federated peers (DNS entries and
//! unmatched IDs do not), a removed federated bundle closes the live
//! connections it admitted, a bundle that does not parse is a rejected
//! revision, and a client route verifies a federated server the same way.

use crate::common;
use crate::common::spiffe as harness;
use crate::common::spiffe::sidecar;

use std::time::{Duration, Instant};

use common::tools::skip_unless;
use common::{connect_plain, get_until, read_until_closed, refused, roundtrip, Sidecar, DEADLINE};
use harness::{b64, svid_leaf, svid_leaf_dns, Agent, Svid};
use mtls_sidecar::pki::DevCa;
use serde_json::json;
use sidecar::{
    admitted, connect_as, fixture, server, server_admitting, status, wait_serial, CLIENT_ID,
    SERVER_ID,
};

const PARTNER: &str = "partner.test";
const PARTNER_ID: &str = "spiffe://partner.test/ns/app/sa/controller";
const PARTNER_SERVER_ID: &str = "spiffe://partner.test/ns/db/sa/replica";
const DNS_ENTRY: &str = "controller.env-1.svc";

/// A server sidecar on prod.test whose agent federates partner.test,
/// admitting CLIENT_ID, PARTNER_ID and the DNS name DNS_ENTRY.
struct Federated {
    agent: Agent,
    svid: Svid,
    sc: Sidecar,
    ca: DevCa,
    partner_ca: DevCa,
    _tmp: tempfile::TempDir,
}

async fn federated(extra: &[&str]) -> Federated {
    let partner_ca = DevCa::new("partner.test CA", 30).unwrap();
    let f = fixture(&[(PARTNER, &partner_ca)]).await;
    let mut args = vec!["--allow-san", PARTNER_ID, "--allow-san", DNS_ENTRY];
    args.extend_from_slice(extra);
    let sc = server(&f.agent, &args).await;
    wait_serial(&sc, &f.svid.leaf).await;
    Federated {
        agent: f.agent,
        svid: f.svid,
        sc,
        ca: f.ca,
        partner_ca,
        _tmp: f.tmp,
    }
}

/// Waits until `/status` lists exactly these trust domains as
/// (name, federated, anchors, retiring).
async fn wait_domains(sc: &Sidecar, want: &[(&str, bool, u64, u64)]) -> serde_json::Value {
    let want: Vec<serde_json::Value> = want
        .iter()
        .map(|(td, fed, n, r)| {
            json!({"trust_domain": td, "federated": fed, "anchors": n, "retiring": r})
        })
        .collect();
    let deadline = Instant::now() + DEADLINE;
    loop {
        let st = status(sc).await;
        if st["credentials"][0]["workload_api"]["trust_domains"] == json!(want) {
            return st;
        }
        assert!(
            Instant::now() < deadline,
            "trust domains never {want:?}: {st}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Seen failing with the check removed: with `Trust::build` making one
/// root store of every trust domain's anchors, partner.test's CA vouched
/// for a prod.test ID and the forgery was admitted; with `pick_domain`
/// taking a trust domain without a bundle as ours, the unknown trust
/// domain's ID (signed by our CA) was admitted.
#[tokio::test]
async fn each_bundle_vouches_for_its_own_trust_domain_only() {
    if skip_unless(&["python3", "grpcio"]) {
        return;
    }
    let f = federated(&["--allow-san", "spiffe://stranger.test/ns/app/sa/x"]).await;
    let st = wait_domains(&f.sc, &[("prod.test", false, 1, 0), (PARTNER, true, 1, 0)]).await;
    let anchors = st["credentials"][0]["trust_anchors"].as_array().unwrap();
    assert_eq!(anchors.len(), 2, "{st}");
    assert!(anchors[0]["trust_domain"].is_null(), "{st}");
    assert_eq!(anchors[1]["trust_domain"], PARTNER, "{st}");

    // The partner's CA for its own ID, named by a spiffe:// entry.
    let partner = svid_leaf(&f.partner_ca, &[PARTNER_ID]);
    let mut s = connect_as(&f.sc, &partner, &f.ca).await;
    assert_eq!(roundtrip(&mut s, b"federated").await, b"federated");
    // Ours still vouches for ours.
    assert!(admitted(&f.sc, &svid_leaf(&f.ca, &[CLIENT_ID]), &f.ca).await);

    // Domain B's CA minting domain A's ID: a forgery.
    let forged = svid_leaf(&f.partner_ca, &[CLIENT_ID]);
    assert!(
        !admitted(&f.sc, &forged, &f.ca).await,
        "partner.test's CA vouched for a prod.test ID"
    );
    f.sc.wait_log(&["handshake refused", "reason=\"unknown_ca\"", CLIENT_ID])
        .await;

    // A trust domain with no bundle: unknown_ca, even signed by our CA
    // and named by an allow entry.
    let stranger = svid_leaf(&f.ca, &["spiffe://stranger.test/ns/app/sa/x"]);
    assert!(
        !admitted(&f.sc, &stranger, &f.ca).await,
        "an ID of a trust domain without a bundle admitted"
    );
    f.sc.wait_log(&[
        "handshake refused",
        "reason=\"unknown_ca\"",
        "spiffe://stranger.test",
    ])
    .await;
}

/// Seen failing with the check removed: with `check_peer_policy` judging a
/// federated peer by the whole allow-list (as a local one), the DNS entry
/// admitted the partner's peer; with `federated_peer_allowed` always true,
/// the same peer was admitted (the first assertion).
#[tokio::test]
async fn only_spiffe_allow_entries_name_a_federated_peer() {
    if skip_unless(&["python3", "grpcio"]) {
        return;
    }
    let f = federated(&[]).await;
    // The partner's CA may mint a DNS name: DNS entries are ours only.
    let dns = svid_leaf_dns(
        &f.partner_ca,
        &["spiffe://partner.test/ns/other/sa/x"],
        &[DNS_ENTRY],
    );
    assert!(
        !admitted(&f.sc, &dns, &f.ca).await,
        "a DNS allow entry admitted a federated peer"
    );
    f.sc.wait_log(&[
        "handshake refused",
        "reason=\"bad_san\"",
        "spiffe://partner.test/ns/other/sa/x",
    ])
    .await;
    // A partner ID no entry names.
    let unlisted = svid_leaf(&f.partner_ca, &["spiffe://partner.test/ns/unlisted"]);
    assert!(
        !admitted(&f.sc, &unlisted, &f.ca).await,
        "unlisted admitted"
    );
    f.sc.wait_log(&[
        "handshake refused",
        "reason=\"bad_san\"",
        "spiffe://partner.test/ns/unlisted",
    ])
    .await;
    // The same DNS name on one of our own peers is still admitted.
    let ours = svid_leaf_dns(&f.ca, &["spiffe://prod.test/ns/x"], &[DNS_ENTRY]);
    assert!(admitted(&f.sc, &ours, &f.ca).await);

    // --allow-any-san admits any peer of our trust domain, no federated
    // one.
    let any = server_admitting(&f.agent, &["--allow-any-san"], &[]).await;
    wait_serial(&any, &f.svid.leaf).await;
    let partner = svid_leaf(&f.partner_ca, &[PARTNER_ID]);
    assert!(!admitted(&any, &partner, &f.ca).await, "any-san admitted");
    assert!(admitted(&any, &svid_leaf(&f.ca, &["spiffe://prod.test/ns/y"]), &f.ca).await);
}

/// Seen failing with the check removed: with `Trust::merge_anchors`
/// skipping federated anchors when it judges a shrink, the partner's live
/// connection outlived its bundle (and the next test's anchor was not
/// graced but dropped at once).
#[tokio::test]
async fn a_removed_federated_bundle_closes_the_connections_it_admitted() {
    if skip_unless(&["python3", "grpcio"]) {
        return;
    }
    let f = federated(&[]).await;
    let partner = svid_leaf(&f.partner_ca, &[PARTNER_ID]);
    let mut live = connect_as(&f.sc, &partner, &f.ca).await;
    assert_eq!(roundtrip(&mut live, b"before").await, b"before");
    let mut ours = connect_as(&f.sc, &svid_leaf(&f.ca, &[CLIENT_ID]), &f.ca).await;

    // The same SVID, partner.test no longer federated.
    f.agent.push(&[&f.svid], &[]).await;
    wait_domains(&f.sc, &[("prod.test", false, 1, 0)]).await;
    read_until_closed(&mut live).await;
    f.sc.wait_log(&["connection closed", "reason=\"revoked\""])
        .await;
    assert!(!admitted(&f.sc, &partner, &f.ca).await);
    f.sc.wait_log(&["handshake refused", "reason=\"unknown_ca\"", PARTNER_ID])
        .await;
    // Our own peer's connection is untouched.
    assert_eq!(roundtrip(&mut ours, b"still").await, b"still");
}

/// With `--trust-grace`, a federated anchor dropped from its bundle (the
/// partner moved to a new CA) is kept until the grace ends, as a `ca.crt`
/// anchor would be: the live connection stays, the new CA vouches too.
#[tokio::test]
async fn a_dropped_federated_anchor_is_graced_like_a_ca_crt_anchor() {
    if skip_unless(&["python3", "grpcio"]) {
        return;
    }
    let f = federated(&["--trust-grace", "1h"]).await;
    let partner = svid_leaf(&f.partner_ca, &[PARTNER_ID]);
    let mut live = connect_as(&f.sc, &partner, &f.ca).await;
    assert_eq!(roundtrip(&mut live, b"before").await, b"before");
    let moved = DevCa::new("partner.test CA 2", 30).unwrap();
    f.agent.push(&[&f.svid], &[(PARTNER, &moved)]).await;
    wait_domains(&f.sc, &[("prod.test", false, 1, 0), (PARTNER, true, 2, 1)]).await;
    assert_eq!(roundtrip(&mut live, b"graced").await, b"graced");
    assert!(admitted(&f.sc, &svid_leaf(&moved, &[PARTNER_ID]), &f.ca).await);
}

/// A federated bundle that does not parse rejects the whole context; the
/// last good revision (and its federation) stays in force.
#[tokio::test]
async fn a_federated_bundle_that_does_not_parse_rejects_the_revision() {
    if skip_unless(&["python3", "grpcio"]) {
        return;
    }
    let f = federated(&[]).await;
    let next = Svid::new(&f.ca, SERVER_ID);
    let garbage = b64(&[0x30, 0x03, 1, 2, 3]);
    f.agent
        .control(json!({
            "op": "push",
            "svids": [next.json()],
            "federated": {PARTNER: [garbage]},
        }))
        .await;
    let deadline = Instant::now() + DEADLINE;
    loop {
        let st = status(&f.sc).await;
        let error = &st["credentials"][0]["last_rejected"]["error"];
        if error.is_string() {
            break;
        }
        assert!(Instant::now() < deadline, "never rejected: {st}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    wait_serial(&f.sc, &f.svid.leaf).await;
    wait_domains(&f.sc, &[("prod.test", false, 1, 0), (PARTNER, true, 1, 0)]).await;
    assert!(admitted(&f.sc, &svid_leaf(&f.partner_ca, &[PARTNER_ID]), &f.ca).await);
}

/// A client route on prod.test expecting a partner.test server: verified
/// against partner.test's bundle. Seen failing with the check removed:
/// with `Trust::build` making one root store of every trust domain's
/// anchors, the server whose partner.test ID our own CA minted was
/// accepted; with `Trust::merge_anchors` skipping federated anchors, the
/// client's live connection outlived partner.test's bundle.
#[tokio::test]
async fn a_client_route_verifies_a_federated_server_against_its_bundle() {
    if skip_unless(&["python3", "grpcio"]) {
        return;
    }
    let ca = DevCa::new("prod.test CA", 30).unwrap();
    let partner_ca = DevCa::new("partner.test CA", 30).unwrap();
    // The partner's server: its own agent, federating prod.test.
    let partner_dir = tempfile::tempdir().unwrap();
    let partner_agent = Agent::start(partner_dir.path(), true);
    let partner_svid = Svid::new(&partner_ca, PARTNER_SERVER_ID);
    partner_agent
        .push(&[&partner_svid], &[("prod.test", &ca)])
        .await;
    let srv = server(&partner_agent, &[]).await;
    get_until(&srv.admin(), "/readyz", 200).await;

    // Our client: prod.test, federating partner.test.
    let our_dir = tempfile::tempdir().unwrap();
    let our_agent = Agent::start(our_dir.path(), true);
    let client_svid = Svid::new(&ca, CLIENT_ID);
    our_agent
        .push(&[&client_svid], &[(PARTNER, &partner_ca)])
        .await;
    let cli = client(&our_agent, &srv.addr("server")).await;
    let mut live = connect_plain(&cli).await;
    assert_eq!(roundtrip(&mut live, b"across").await, b"across");

    // A server whose partner.test ID our own CA minted: refused.
    let forged_dir = tempfile::tempdir().unwrap();
    let forged_agent = Agent::start(forged_dir.path(), true);
    let forged = Svid::new(&ca, PARTNER_SERVER_ID);
    forged_agent.push(&[&forged], &[("prod.test", &ca)]).await;
    let fake = server(&forged_agent, &[]).await;
    get_until(&fake.admin(), "/readyz", 200).await;
    let cli2 = client(&our_agent, &fake.addr("server")).await;
    let mut s = connect_plain(&cli2).await;
    assert!(refused(&mut s).await, "a forged partner server accepted");
    cli2.wait_log(&[
        "handshake refused",
        "reason=\"unknown_ca\"",
        PARTNER_SERVER_ID,
    ])
    .await;

    // Our agent stops federating partner.test: the client's live
    // connection to the partner's server is re-verified and closed.
    our_agent.push(&[&client_svid], &[]).await;
    read_until_closed(&mut live).await;
    cli.wait_log(&["connection closed", "reason=\"revoked\""])
        .await;
}

/// A client sidecar on `agent` to `target`, expecting PARTNER_SERVER_ID.
async fn client(agent: &Agent, target: &str) -> Sidecar {
    let endpoint = agent.endpoint();
    let cli = Sidecar::start(
        &[
            "client",
            "--listen",
            "127.0.0.1:0",
            "--target",
            target,
            "--workload-api",
            &endpoint,
            "--expect-san",
            PARTNER_SERVER_ID,
            "--admin",
            "127.0.0.1:0",
        ],
        1,
    )
    .await;
    get_until(&cli.admin(), "/readyz", 200).await;
    cli
}

//! A year of one deployment, compressed: the real binary on both sides,
//! short-lived certificates and kubelet-style revisions, walked the way an
//! operator walks them. Day 0; leaf renewals; a CRL published, extended
//! and carried across a renewal done with `publish`; a CA rotation with
//! overlap, `--trust-grace` and a CRL in force while its CA leaves the
//! bundle; a CA re-keyed under the same name with a CRL each; a rejected
//! revision during which the server restarts; the drain at the end. At each
//! step it asserts which connections stay up, which are closed and why, and
//! the `/metrics` and `/status` fields the shipped alerts read.

mod steps;

use mtls_sidecar::pki::DevCa;
use steps::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_compressed_year() {
    let tmp = tempfile::tempdir().unwrap();
    let a = DevCa::new("mtls CA", 30).unwrap();
    let mut year = Year::start(tmp.path(), &a).await;

    // ---- Day 0: both sides up, one revision each, nothing rejected. ----
    let mut app = year.app_connection().await;
    year.expect_converged(1).await;

    // ---- Months 1-2: leaf renewals on both sides. The live connection stays. ----
    for _ in 0..2 {
        year.renew_leaves(&a, &a.cert_pem, None).await;
        roundtrip_ok(&mut app, "after a renewal").await;
        year.expect_converged(1).await;
    }

    // ---- Month 3: a leaked controller identity is revoked by a CRL. ----
    let leaked = year.issue_controller(&a);
    let mut leaked_conn = year.direct(&leaked, &a.cert_pem).await;
    roundtrip_ok(&mut leaked_conn, "the leaked identity, before the CRL").await;
    let crl1 = crl(&a, 1, &[&leaked]);
    year.publish_server(&a.cert_pem, Some(&crl1.pem)).await;
    expect_closed(&mut leaked_conn, "the leaked identity's live connection").await;
    year.server.wait_closed("server", "revoked", 1.0).await;
    roundtrip_ok(&mut app, "the application's connection, after the CRL").await;
    assert!(year.refused(&leaked, &a.cert_pem).await);
    year.expect_failures("revoked", 1.0).await;

    // ---- Month 4: the CRL is extended (a second leak). ----
    let leaked2 = year.issue_controller(&a);
    let mut leaked2_conn = year.direct(&leaked2, &a.cert_pem).await;
    roundtrip_ok(&mut leaked2_conn, "the second leaked identity").await;
    let crl2 = crl(&a, 2, &[&leaked, &leaked2]);
    year.publish_server(&a.cert_pem, Some(&crl2.pem)).await;
    expect_closed(&mut leaked2_conn, "the second leak's live connection").await;
    year.server.wait_closed("server", "revoked", 2.0).await;

    // ---- Month 5: the renewal job renews the server leaf with `publish`,
    // giving tls.crt, tls.key and ca.crt only: the CRL in force is kept. ----
    year.renew_server_with_publish(&a, &a.cert_pem).await;
    assert!(year.refused(&leaked, &a.cert_pem).await);
    assert!(year.refused(&leaked2, &a.cert_pem).await);
    year.expect_no_crl_removals().await;
    roundtrip_ok(&mut app, "the application's connection, after publish").await;

    // ---- Months 6-7: CA rotation A → B with overlap and a grace, A's CRL in
    // force throughout. ----
    let b = DevCa::new("mtls CA 2027", 30).unwrap();
    let both = format!("{}{}", a.cert_pem, b.cert_pem);
    // Overlap: both sides trust A and B, then take leaves from B.
    year.renew_leaves(&a, &both, Some(&crl2.pem)).await;
    year.renew_leaves(&b, &both, Some(&crl2.pem)).await;
    roundtrip_ok(&mut app, "the A-era connection during the overlap").await;
    let old_peer = year.issue_controller(&a);
    let mut old_conn = year.direct(&old_peer, &both).await;
    roundtrip_ok(&mut old_conn, "an A-issued peer during the overlap").await;
    // A leaves the bundle while its CRL is still delivered (the ConfigMap
    // and trust-manager change at different times): the revision applies,
    // A stays trusted for the grace, and its CRL with it.
    year.publish_both(&b.cert_pem, Some(&crl2.pem)).await;
    year.expect_converged(1).await;
    assert!(
        year.refused(&leaked, &both).await,
        "the grace re-admitted a revoked peer"
    );
    roundtrip_ok(&mut old_conn, "an A-issued peer inside the grace").await;
    // The grace ends: A's peers are closed, B's new connections work.
    expect_closed(&mut old_conn, "an A-issued peer after the grace").await;
    expect_closed(&mut app, "the A-era application connection after the grace").await;
    let mut app = year.app_connection().await;
    year.expect_crl_ignored("CN=mtls CA").await;
    year.expect_converged(1).await;

    // ---- Months 8-9: CA B re-keyed under its own name (B'), one CRL each. ----
    let b2 = DevCa::new("mtls CA 2027", 30).unwrap();
    let b_both = format!("{}{}", b.cert_pem, b2.cert_pem);
    let leaked3 = year.issue_controller(&b2);
    let good_b = year.issue_controller(&b);
    let crl_b = crl(&b, 1, &[]);
    let crl_b2 = crl(&b2, 1, &[&leaked3]);
    let two_crls = format!("{}{}", crl_b.pem, crl_b2.pem);
    year.publish_both(&b_both, None).await;
    let mut good_b_conn = year.direct(&good_b, &b_both).await;
    year.publish_server(&b_both, Some(&two_crls)).await;
    year.expect_converged(1).await;
    assert!(
        year.refused(&leaked3, &b_both).await,
        "B''s CRL not enforced"
    );
    roundtrip_ok(&mut good_b_conn, "B's peer under B''s CRL").await;
    roundtrip_ok(&mut app, "the application under two same-name CRLs").await;
    assert!(!year.refused(&good_b, &b_both).await);

    // ---- Month 10: a bad revision is mounted, and the server restarts
    // while it is: exit 2, naming the file; the alert's gauge reads 0. ----
    year.publish_bad_server(&b, &b_both).await;
    year.expect_rejected().await;
    roundtrip_ok(&mut app, "the live connection during a rejected revision").await;
    year.restart_server_while_bad().await;
    year.restart_server(&b_both, Some(&two_crls)).await;
    let mut app = year.app_connection().await;
    year.expect_converged(1).await;

    // ---- Month 12: drain. The live connection may finish its exchange;
    // it is closed `drain` at the drain timeout and the process exits 0. ----
    roundtrip_ok(&mut app, "before the drain").await;
    year.drain(&mut app).await;
}

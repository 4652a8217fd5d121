//! The one revocation judgement, in process through its public entry point
//! (`credentials::judge_chain`, the code a handshake runs): CRLs matched to
//! their issuer by name AND key (two CAs of one name), an intermediate's
//! CRL (known from the `intermediates` file, or verified at handshake
//! against the intermediate the peer sends), `--crl-scope chain` judging
//! the intermediate against the root's CRL, Issuing Distribution Point
//! scope (`revoked_status_unknown`), a stale CRL still enforced, and how
//! `classify_crl_file` labels each CRL.

use crate::common;

use std::time::{Duration, SystemTime};

use common::*;
use mtls_sidecar::credentials::{
    classify_crl_file, judge_chain, CrlScope, TrustInputs, Usage, Verdict,
};
use mtls_sidecar::pki::{serial_of, CrlIdp, CrlSpec, DevCa, Issued, LeafSpec, Role};

fn ca(name: &str) -> DevCa {
    DevCa::new(name, 30).expect("CA")
}

fn leaf(ca: &DevCa) -> Issued {
    ca.issue(&LeafSpec::dns(REPLICA, Role::Both, 1))
        .expect("leaf")
}

fn serial(cert: &Issued) -> Vec<u8> {
    serial_of(&cert.cert_der).expect("serial")
}

fn ca_serial(ca: &DevCa) -> Vec<u8> {
    use rustls_pki_types::pem::PemObject;
    let der = rustls_pki_types::CertificateDer::from_pem_slice(ca.cert_pem.as_bytes()).unwrap();
    serial_of(&der).expect("serial")
}

fn crl(ca: &DevCa, number: u64, serials: Vec<Vec<u8>>) -> String {
    ca.crl(&CrlSpec::new(number, serials, 7)).expect("CRL").pem
}

fn crl_with_idp(ca: &DevCa, serials: Vec<Vec<u8>>, idp: CrlIdp) -> String {
    let mut spec = CrlSpec::new(1, serials, 7);
    spec.idp = Some(idp);
    ca.crl(&spec).expect("CRL").pem
}

/// The verdict's label for `chain` (PEM, leaf first) with these inputs.
fn judge(inputs: &TrustInputs<'_>, chain: &str, scope: CrlScope) -> &'static str {
    let now = SystemTime::now();
    let verdicts: Vec<Verdict> = [Usage::ClientAuth, Usage::ServerAuth]
        .into_iter()
        .map(|usage| judge_chain(inputs, chain.as_bytes(), scope, usage, now).expect("inputs"))
        .collect();
    assert_eq!(verdicts[0], verdicts[1], "both directions judge alike");
    verdicts[0].label()
}

fn inputs<'a>(ca: &'a str, crl: Option<&'a str>) -> TrustInputs<'a> {
    TrustInputs {
        ca: ca.as_bytes(),
        crl: crl.map(str::as_bytes),
        ..Default::default()
    }
}

/// Two CAs named alike: each CRL judges only what its own key signed. With
/// webpki's own revocation options (first CRL of the name wins, then its
/// signature fails), a leaf of A' against A's CRL was refused as
/// `unknown_ca` (bad signature): seen failing with `signed_by` matching
/// CRLs by name only.
#[test]
fn same_name_cas_each_have_their_own_crl() {
    let a = ca("mtls CA");
    let a2 = ca("mtls CA");
    let (l1, good_a) = (leaf(&a), leaf(&a));
    let (l2, good_a2) = (leaf(&a2), leaf(&a2));
    let bundle = format!("{}{}", a.cert_pem, a2.cert_pem);
    // A's CRL lists L1 and, as the same serial number, L2 (a leaf of A').
    let crl_a = crl(&a, 1, vec![serial(&l1), serial(&l2)]);
    let with_a = inputs(&bundle, Some(&crl_a));
    assert_eq!(judge(&with_a, &l1.cert_pem, CrlScope::Leaf), "revoked");
    assert_eq!(judge(&with_a, &l2.cert_pem, CrlScope::Leaf), "ok");
    assert_eq!(judge(&with_a, &good_a2.cert_pem, CrlScope::Leaf), "ok");
    // A' CRL listing L1's serial does not close A's peers.
    let crl_a2 = crl(&a2, 1, vec![serial(&l1)]);
    let with_a2 = inputs(&bundle, Some(&crl_a2));
    assert_eq!(judge(&with_a2, &l1.cert_pem, CrlScope::Leaf), "ok");
    // Both at once: one CRL per key, both enforced.
    let both_crls = format!(
        "{}{}",
        crl(&a, 2, vec![serial(&l1)]),
        crl(&a2, 2, vec![serial(&l2)])
    );
    let both = inputs(&bundle, Some(&both_crls));
    assert_eq!(judge(&both, &l1.cert_pem, CrlScope::Leaf), "revoked");
    assert_eq!(judge(&both, &l2.cert_pem, CrlScope::Leaf), "revoked");
    assert_eq!(judge(&both, &good_a.cert_pem, CrlScope::Leaf), "ok");
    assert_eq!(judge(&both, &good_a2.cert_pem, CrlScope::Leaf), "ok");
    // Two CRLs of the very same key are still an error naming the issuer.
    let twice = format!("{}{}", crl(&a, 1, vec![]), crl(&a, 2, vec![]));
    let e = judge_chain(
        &inputs(&bundle, Some(&twice)),
        l1.cert_pem.as_bytes(),
        CrlScope::Leaf,
        Usage::ClientAuth,
        SystemTime::now(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("CN=mtls CA") && e.contains("one CRL per issuer key"),
        "{e}"
    );
}

/// An intermediate's CRL revokes its leaves, whether the intermediate is
/// known from the `intermediates` file (verified at load) or only from the
/// peer's chain (verified at handshake); the root's CRL revokes the
/// intermediate under `--crl-scope chain` only. Seen failing with
/// `judge_node` skipping unverified CRLs.
#[test]
fn an_intermediates_crl_revokes_its_leaves() {
    let root = ca("root CA");
    let inter = root.intermediate("issuing CA", 30).expect("intermediate");
    let other = root
        .intermediate("issuing CA", 30)
        .expect("second intermediate");
    let (bad, good) = (leaf(&inter), leaf(&inter));
    let stranger = leaf(&other);
    let chain = |l: &Issued, i: &DevCa| format!("{}{}", l.cert_pem, i.cert_pem);
    let crl_i = crl(&inter, 1, vec![serial(&bad), serial(&stranger)]);
    for known in [Some(inter.cert_pem.as_str()), None] {
        let inp = TrustInputs {
            ca: root.cert_pem.as_bytes(),
            intermediates: known.map(str::as_bytes),
            crl: Some(crl_i.as_bytes()),
            retired_ca: None,
        };
        assert_eq!(judge(&inp, &chain(&bad, &inter), CrlScope::Leaf), "revoked");
        assert_eq!(judge(&inp, &chain(&good, &inter), CrlScope::Leaf), "ok");
        // Another intermediate of the same name: its own key, no CRL.
        assert_eq!(judge(&inp, &chain(&stranger, &other), CrlScope::Leaf), "ok");
        let state = classify_crl_file(&inp, SystemTime::now()).unwrap()[0].state;
        assert_eq!(
            state,
            if known.is_some() {
                "verified"
            } else {
                "unverified"
            }
        );
    }
    let crl_root = crl(&root, 1, vec![ca_serial(&inter)]);
    let inp = inputs(&root.cert_pem, Some(&crl_root));
    assert_eq!(judge(&inp, &chain(&good, &inter), CrlScope::Leaf), "ok");
    assert_eq!(
        judge(&inp, &chain(&good, &inter), CrlScope::Chain),
        "revoked"
    );
    assert_eq!(
        judge(&inp, &chain(&stranger, &other), CrlScope::Chain),
        "ok"
    );
    // Both levels at once.
    let both = format!("{crl_root}{crl_i}");
    let inp = inputs(&root.cert_pem, Some(&both));
    assert_eq!(judge(&inp, &chain(&bad, &inter), CrlScope::Leaf), "revoked");
    assert_eq!(judge(&inp, &chain(&good, &inter), CrlScope::Leaf), "ok");
}

/// A CRL whose Issuing Distribution Point does not cover the certificate
/// (URI differing only by letter case; onlyContainsCACerts for a leaf):
/// refused as `revoked_status_unknown`, never admitted. Seen failing
/// (`ok`) with `unknown_status` returning `Ok`.
#[test]
fn a_crl_that_does_not_cover_the_certificate_refuses_it_as_unknown() {
    let a = ca("scoped CA");
    let url = "http://crl.example/a.crl";
    let issue = |urls: &[&str]| {
        a.issue_with_crl_urls(&LeafSpec::dns(REPLICA, Role::Both, 1), urls)
            .expect("leaf")
    };
    let (listed_match, listed_case, listed_none, clean_match) = (
        issue(&[url]),
        issue(&["http://crl.example/A.crl"]),
        issue(&[]),
        issue(&[url]),
    );
    let idp = CrlIdp {
        urls: vec![url.to_string()],
        ..Default::default()
    };
    let serials = vec![
        serial(&listed_match),
        serial(&listed_case),
        serial(&listed_none),
    ];
    let c = crl_with_idp(&a, serials.clone(), idp);
    let inp = inputs(&a.cert_pem, Some(&c));
    assert_eq!(
        judge(&inp, &listed_match.cert_pem, CrlScope::Leaf),
        "revoked"
    );
    // No CRL Distribution Point: a CRL that names one does not cover it
    // (OpenSSL: error 44), listed or not.
    assert_eq!(
        judge(&inp, &listed_none.cert_pem, CrlScope::Leaf),
        "revoked_status_unknown"
    );
    assert_eq!(judge(&inp, &clean_match.cert_pem, CrlScope::Leaf), "ok");
    assert_eq!(
        judge(&inp, &listed_case.cert_pem, CrlScope::Leaf),
        "revoked_status_unknown"
    );
    let only_ca = crl_with_idp(
        &a,
        serials,
        CrlIdp {
            urls: vec![url.to_string()],
            only_ca: true,
            ..Default::default()
        },
    );
    let inp = inputs(&a.cert_pem, Some(&only_ca));
    assert_eq!(
        judge(&inp, &clean_match.cert_pem, CrlScope::Leaf),
        "revoked_status_unknown"
    );
    // An issuer without any CRL: admitted (the deliberate divergence).
    let b = ca("other CA");
    let bundle = format!("{}{}", a.cert_pem, b.cert_pem);
    let inp = inputs(&bundle, Some(&only_ca));
    assert_eq!(judge(&inp, &leaf(&b).cert_pem, CrlScope::Leaf), "ok");
}

/// A CRL past its nextUpdate is still enforced; the other refusals keep
/// their own reasons.
#[test]
fn a_stale_crl_is_enforced_and_other_refusals_keep_their_reasons() {
    let a = ca("stale CA");
    let bad = leaf(&a);
    let now = SystemTime::now();
    let mut spec = CrlSpec::new(1, vec![serial(&bad)], 1);
    spec.this_update = now - Duration::from_secs(7200);
    spec.next_update = now - Duration::from_secs(3600);
    let stale = a.crl(&spec).expect("CRL").pem;
    let inp = inputs(&a.cert_pem, Some(&stale));
    assert_eq!(judge(&inp, &bad.cert_pem, CrlScope::Leaf), "revoked");
    assert_eq!(
        judge(&inp, &leaf(&ca("stranger")).cert_pem, CrlScope::Leaf),
        "unknown_ca"
    );
    let expired = a
        .issue(&LeafSpec::dns(REPLICA, Role::Both, 1).valid(
            now - Duration::from_secs(7200),
            now - Duration::from_secs(3600),
        ))
        .expect("leaf");
    assert_eq!(judge(&inp, &expired.cert_pem, CrlScope::Leaf), "expired");
    let server_only = a
        .issue(&LeafSpec::dns(REPLICA, Role::Server, 1))
        .expect("leaf");
    let v = judge_chain(
        &inp,
        server_only.cert_pem.as_bytes(),
        CrlScope::Leaf,
        Usage::ClientAuth,
        now,
    )
    .unwrap();
    assert_eq!(v.label(), "bad_san");
}

/// Each CRL of a file is classified: verified by an anchor, unverified
/// (no known key), ignored (only a retired anchor verifies it), pending
/// (dated beyond the clock-skew tolerance).
#[test]
fn classify_names_each_crls_state() {
    let a = ca("A");
    let b = ca("B");
    let retired = ca("R");
    let now = SystemTime::now();
    let mut future = CrlSpec::new(3, vec![], 7);
    future.this_update = now + Duration::from_secs(3600);
    future.next_update = now + Duration::from_secs(7200);
    let file = format!(
        "{}{}{}{}",
        crl(&a, 1, vec![]),
        crl(&b, 1, vec![]),
        crl(&retired, 1, vec![]),
        ca("C").crl(&future).expect("CRL").pem
    );
    let inp = TrustInputs {
        ca: a.cert_pem.as_bytes(),
        crl: Some(file.as_bytes()),
        retired_ca: Some(retired.cert_pem.as_bytes()),
        ..Default::default()
    };
    let reports = classify_crl_file(&inp, now).unwrap();
    let states: Vec<(String, &str)> = reports
        .iter()
        .map(|r| (r.info.issuer.clone(), r.state))
        .collect();
    assert_eq!(
        states,
        [
            ("CN=A".to_string(), "verified"),
            ("CN=B".to_string(), "unverified"),
            ("CN=R".to_string(), "ignored"),
            ("CN=C".to_string(), "pending"),
        ]
    );
    // What `check`, `/status` and `publish` say of each.
    let details: Vec<&str> = reports.iter().map(|r| r.detail.as_str()).collect();
    assert_eq!(
        details,
        [
            "signed by CN=A in ca.crt",
            "its issuer is no CA we hold: enforced only against a peer's chain whose intermediate of that name verifies it",
            "ignored: CN=R is no longer trusted",
            "pending: its thisUpdate is in the future; enforced once it is not",
        ]
    );
    // A CRL of a known intermediate names it.
    let inter = a.intermediate("I", 30).expect("intermediate");
    let inter_crl = crl(&inter, 1, vec![]);
    let with_inter = TrustInputs {
        ca: a.cert_pem.as_bytes(),
        intermediates: Some(inter.cert_pem.as_bytes()),
        crl: Some(inter_crl.as_bytes()),
        ..Default::default()
    };
    let reports = classify_crl_file(&with_inter, now).unwrap();
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].state, "verified");
    assert_eq!(reports[0].detail, "signed by the intermediate CN=I");
}

/// A signature algorithm that counts the CRL signatures it is asked to
/// verify (a message found inside one of `crls`' DER: a CRL's TBS).
#[derive(Debug)]
struct CountingCrlSigs {
    inner: &'static dyn rustls_pki_types::SignatureVerificationAlgorithm,
    crls: Vec<Vec<u8>>,
    hits: &'static std::sync::atomic::AtomicUsize,
}

impl rustls_pki_types::SignatureVerificationAlgorithm for CountingCrlSigs {
    fn verify_signature(
        &self,
        public_key: &[u8],
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), rustls_pki_types::InvalidSignature> {
        if self
            .crls
            .iter()
            .any(|c| c.windows(message.len()).any(|w| w == message))
        {
            self.hits.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        self.inner.verify_signature(public_key, message, signature)
    }
    fn public_key_alg_id(&self) -> rustls_pki_types::AlgorithmIdentifier {
        self.inner.public_key_alg_id()
    }
    fn signature_alg_id(&self) -> rustls_pki_types::AlgorithmIdentifier {
        self.inner.signature_alg_id()
    }
    fn fips(&self) -> bool {
        self.inner.fips()
    }
}

/// A CRL no known key verifies (an intermediate the `intermediates` file
/// does not list) has its signature checked once per key a trust meets it
/// with, not at every handshake: two such intermediates' leaves judged in
/// turn, four times each, cost two CRL signature checks. Kills `>=` to
/// `<` in `SigMemo::verifies`'s bound (a memo that kept only its last
/// verdict checked all eight).
#[test]
fn an_unverified_crls_signature_is_checked_once_per_key() {
    use mtls_sidecar::credentials::{Anchor, CrlSet, RawFile, Trust};
    use mtls_sidecar::identity::CertInfo;
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, UnixTime};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    let root = ca("Root");
    let (i1, i2) = (
        root.intermediate("I1", 30).expect("intermediate"),
        root.intermediate("I2", 30).expect("intermediate"),
    );
    let (l1, l2) = (leaf(&i1), leaf(&i2));
    let der = |pem: &str| CertificateDer::from_pem_slice(pem.as_bytes()).expect("PEM");
    let crls = [
        i1.crl(&CrlSpec::new(1, vec![], 7)).unwrap(),
        i2.crl(&CrlSpec::new(1, vec![], 7)).unwrap(),
    ];

    let hits: &'static AtomicUsize = Box::leak(Box::new(AtomicUsize::new(0)));
    let base = provider();
    let all: Vec<&'static dyn rustls_pki_types::SignatureVerificationAlgorithm> = base
        .signature_verification_algorithms
        .all
        .iter()
        .map(|alg| {
            let counting: &'static CountingCrlSigs = Box::leak(Box::new(CountingCrlSigs {
                inner: *alg,
                crls: crls.iter().map(|c| c.der.clone()).collect(),
                hits,
            }));
            counting as &'static dyn rustls_pki_types::SignatureVerificationAlgorithm
        })
        .collect();
    let mut counted = (*base).clone();
    counted.signature_verification_algorithms.all = Box::leak(all.into_boxed_slice());
    let counted = Arc::new(counted);

    let root_der = der(&root.cert_pem);
    let anchors = [(root_der.clone(), CertInfo::parse(&root_der).expect("CA"))];
    let file = RawFile {
        path: "ca.crl".into(),
        bytes: format!("{}{}", crls[0].pem, crls[1].pem).into_bytes(),
    };
    let set = CrlSet::parse(&file, &anchors, &counted).expect("CRLs");
    let trust = Trust::build(
        Anchor::bundle(&anchors),
        Arc::new(set),
        CrlScope::Leaf,
        &counted,
    )
    .expect("trust");
    hits.store(0, Ordering::SeqCst);
    let chains = [
        (l1.cert_der.clone(), der(&i1.cert_pem)),
        (l2.cert_der.clone(), der(&i2.cert_pem)),
    ];
    for _ in 0..4 {
        for (leaf, inter) in &chains {
            trust
                .verify_peer(
                    leaf,
                    std::slice::from_ref(inter),
                    UnixTime::now(),
                    Usage::ClientAuth,
                )
                .expect("admitted");
        }
    }
    assert_eq!(
        hits.load(Ordering::SeqCst),
        2,
        "one CRL signature check per (CRL, key), not one a handshake"
    );
}

/// A CRL carrying non-critical extensions x509-parser cannot read (here a
/// malformed subject key identifier and key usage, which webpki does not
/// process in a CRL) is used like any other. Kills `is_idp` replaced by
/// `true` in `idp_of`'s parse-error guard, `is_idp -> true` and its `==`
/// to `!=`. An Issuing Distribution Point x509-parser could not read would
/// refuse the CRL (its scope unknown), but none reaches it: webpki, which
/// parses each CRL first, refuses a malformed one, and the odd ones it
/// takes (it keeps the full name's bytes unread), such as a URI of one
/// non-UTF-8 byte, x509-parser reads. Both asserted here: why the guard
/// replaced by `false` survives (docs/mutants.md).
#[test]
fn an_unreadable_extension_other_than_the_idp_is_ignored() {
    if tools::skip_unless(&["openssl"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("A");
    let ca = common::openssl_ca::OpensslCa::new(tmp.path(), &pki, true);
    let gencrl = |extra: &str| {
        ca.crl_extensions(extra);
        ca.gencrl(None)
    };
    let classify = |crl: &str| {
        let inp = TrustInputs {
            ca: pki.ca.cert_pem.as_bytes(),
            crl: Some(crl.as_bytes()),
            ..Default::default()
        };
        classify_crl_file(&inp, SystemTime::now()).map_err(|e| e.to_string())
    };

    // A BOOLEAN where an OCTET STRING (subjectKeyIdentifier) and a BIT
    // STRING (keyUsage) belong.
    let odd = gencrl("2.5.29.14 = DER:01:01:FF\n2.5.29.15 = DER:01:01:FF\n");
    let reports = classify(&odd).expect("the CRL is used");
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].state, "verified");

    // IssuingDistributionPoint { distributionPoint [0] { fullName [0] {
    // uniformResourceIdentifier [6] 0xFF } } }: webpki takes it, and so
    // does x509-parser (a CRL scoped to that name).
    let idp = gencrl("2.5.29.28 = critical,DER:30:07:A0:05:A0:03:86:01:FF\n");
    let reports = classify(&idp).expect("an odd IDP both parsers read");
    assert_eq!(reports[0].state, "verified");

    // A BOOLEAN for an IDP: webpki refuses it before we look.
    let bad = gencrl("2.5.29.28 = DER:01:01:FF\n");
    let err = classify(&bad).expect_err("a malformed IDP");
    assert!(err.contains("IssuingDistributionPoint"), "{err}");
}

/// An IDP that names no distribution point URI (its full name a DNS name
/// only, webpki refusing an IDP without a distribution point; from
/// `openssl ca`) covers a leaf that names none: a revoked one is `revoked`, not `revoked_status_unknown`. Kills
/// `&&` to `||` in `distribution_points` (which gave a certificate without
/// the extension one empty distribution point: in no partition).
#[test]
fn an_idp_naming_no_distribution_point_covers_a_leaf_naming_none() {
    if tools::skip_unless(&["openssl"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("unnamed scope CA");
    let (revoked, good) = (leaf(&pki.ca), leaf(&pki.ca));
    let ca = common::openssl_ca::OpensslCa::new(tmp.path(), &pki, true);
    // IssuingDistributionPoint { distributionPoint [0] { fullName [0] {
    // dNSName [2] "a" } }, onlyContainsUserCerts [1] TRUE }
    ca.crl_extensions("2.5.29.28 = critical,DER:30:0A:A0:05:A0:03:82:01:61:81:01:FF\n");
    ca.revoke(&revoked);
    let crl = ca.gencrl(None);
    let inp = inputs(&pki.ca.cert_pem, Some(&crl));
    assert_eq!(judge(&inp, &revoked.cert_pem, CrlScope::Leaf), "revoked");
    assert_eq!(judge(&inp, &good.cert_pem, CrlScope::Leaf), "ok");
}

/// Two anchors of one key under two names (a CA re-issued under a new name,
/// its key kept): each name is a known issuer, so the CRL issued under the
/// second name (one CRL a key) is verified. Kills `==` to `!=` on the name in `Known::add`'s
/// de-duplication (which kept only the first certificate of a key).
#[test]
fn one_key_under_two_names_verifies_the_crls_of_both() {
    let first = ca("Old Name");
    let renamed = {
        let key = rcgen::KeyPair::from_pem(&first.key_pem).expect("key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "New Name");
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let cert = params.self_signed(&key).expect("self-signed");
        DevCa::from_pem(&cert.pem(), &first.key_pem).expect("CA")
    };
    let bundle = format!("{}{}", first.cert_pem, renamed.cert_pem);
    let file = crl(&renamed, 1, vec![]);
    let inp = inputs(&bundle, Some(&file));
    let states: Vec<(String, &str)> = classify_crl_file(&inp, SystemTime::now())
        .unwrap()
        .into_iter()
        .map(|r| (r.info.issuer, r.state))
        .collect();
    assert_eq!(states, [("CN=New Name".to_string(), "verified")]);
}

use common::broken_crl::ca_without_crl_sign;

/// A CA whose keyUsage lacks cRLSign signs no CRL we enforce: an anchor's
/// CRL (or a held intermediate's) is refused at load, naming why (it never
/// loads silently), and the CRL of an intermediate the peer sends revokes
/// nothing (the same CRL from one that may sign CRLs revokes). Kills
/// `may_sign_crls -> true`, `der_may_sign_crls -> true` and `&&` to `||`
/// in `Known::refusal`.
#[test]
fn a_ca_without_crl_sign_signs_no_crl_we_enforce() {
    let (anchor, signer) = ca_without_crl_sign("No CRL Sign", None);
    let c = crl(&signer, 1, vec![]);
    let refused = |inp: &_| {
        classify_crl_file(inp, SystemTime::now())
            .unwrap_err()
            .to_string()
    };
    let e = refused(&inputs(&anchor, Some(&c)));
    assert!(
        e.contains("CN=No CRL Sign") && e.contains("lacks cRLSign"),
        "{e}"
    );

    // Under the same name from another key, it is the signature that
    // fails: the message does not blame the anchor's keyUsage.
    let twin = ca("No CRL Sign");
    let e = refused(&inputs(&anchor, Some(&crl(&twin, 1, vec![]))));
    assert!(
        e.contains("does not verify") && !e.contains("lacks cRLSign"),
        "{e}"
    );

    let root = ca("Root");
    let (inter, signer) = ca_without_crl_sign("Inter", Some(&root));
    let victim = leaf(&signer);
    let c = crl(&signer, 1, vec![serial(&victim)]);
    let inp = inputs(&root.cert_pem, Some(&c));
    let chain = format!("{}{}", victim.cert_pem, inter);
    assert_ne!(judge(&inp, &chain, CrlScope::Leaf), "revoked");
    let may = format!("{}{}", victim.cert_pem, signer.cert_pem);
    assert_eq!(judge(&inp, &may, CrlScope::Leaf), "revoked");
}

/// A leaf's CRL distribution point that names a cRLIssuer (an indirect
/// CRL, not supported) contributes no partition: a CRL scoped to its URI
/// does not cover the leaf (`revoked_status_unknown`), while the same URI
/// without the cRLIssuer is covered (`revoked`). The leaves come from
/// `openssl x509 -req` (rcgen writes no cRLIssuer). Kills `||` to `&&` in
/// `distribution_points`' skip.
#[test]
fn a_distribution_point_with_a_crl_issuer_is_no_partition() {
    if tools::skip_unless(&["openssl"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let a = ca("Scoped");
    std::fs::write(d.join("ca.crt"), &a.cert_pem).unwrap();
    std::fs::write(d.join("ca.key"), &a.key_pem).unwrap();
    let url = "http://crl.example/a.crl";
    let openssl = |args: &[&str]| common::openssl_ca::openssl_in(d, args);
    openssl(&[
        "req",
        "-new",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "leaf.key",
        "-out",
        "leaf.csr",
        "-subj",
        "/CN=replica",
    ]);
    let issue = |name: &str, dp: &str| {
        let ext = format!(
            "basicConstraints = CA:FALSE\nsubjectAltName = DNS:{REPLICA}\n\
             extendedKeyUsage = serverAuth, clientAuth\ncrlDistributionPoints = dp\n[dp]\n{dp}"
        );
        std::fs::write(d.join(format!("{name}.ext")), ext).unwrap();
        openssl(&[
            "x509",
            "-req",
            "-in",
            "leaf.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-set_serial",
            if name == "indirect" { "0x51" } else { "0x52" },
            "-days",
            "1",
            "-extfile",
            &format!("{name}.ext"),
            "-out",
            &format!("{name}.crt"),
        ]);
        std::fs::read_to_string(d.join(format!("{name}.crt"))).unwrap()
    };
    let indirect = issue(
        "indirect",
        &format!(
            "fullname = URI:{url}\nCRLissuer = dirName:issuer_dn\n[issuer_dn]\nCN = Someone Else\n"
        ),
    );
    let direct = issue("direct", &format!("fullname = URI:{url}\n"));
    let c = crl_with_idp(
        &a,
        vec![vec![0x51], vec![0x52]],
        CrlIdp {
            urls: vec![url.to_string()],
            ..Default::default()
        },
    );
    let inp = inputs(&a.cert_pem, Some(&c));
    assert_eq!(judge(&inp, &direct, CrlScope::Leaf), "revoked");
    assert_eq!(
        judge(&inp, &indirect, CrlScope::Leaf),
        "revoked_status_unknown"
    );
}

/// A root CA made by `openssl req -x509` in `d` (`ca.crt`, `ca.key`) with
/// the key `key_args` asks for, named `cn`, allowed to sign certificates
/// and CRLs.
fn openssl_root(d: &std::path::Path, key_args: &[&str], cn: &str) -> DevCa {
    let subject = format!("/CN={cn}");
    let mut args = vec!["req", "-x509"];
    args.extend_from_slice(key_args);
    args.extend_from_slice(&[
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-subj",
        &subject,
        "-days",
        "2",
        "-addext",
        "keyUsage = critical, keyCertSign, cRLSign",
        "-addext",
        "basicConstraints = critical, CA:TRUE",
    ]);
    common::openssl_ca::openssl_in(d, &args);
    DevCa::from_pem(
        &std::fs::read_to_string(d.join("ca.crt")).unwrap(),
        &std::fs::read_to_string(d.join("ca.key")).unwrap(),
    )
    .expect("openssl's root CA")
}

/// An RSA anchor (its SubjectPublicKeyInfo past 127 bytes, so its DER
/// length takes the long form): its CRL revokes its leaves, the key found
/// at a handshake (webpki's SPKI, re-wrapped) being the key that verified
/// the CRL at load. Kills `-` to `+` / `/` in `wrap_sequence`'s long-form
/// length (an RSA anchor's CRL then matched no path: revoked leaves
/// admitted).
#[test]
fn an_rsa_anchors_crl_revokes_its_leaves() {
    if tools::skip_unless(&["openssl"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let rsa = openssl_root(d, &["-newkey", "rsa:2048"], "RSA Root");
    let (bad, good) = (leaf(&rsa), leaf(&rsa));
    let c = crl(&rsa, 1, vec![serial(&bad)]);
    let inp = inputs(&rsa.cert_pem, Some(&c));
    assert_eq!(judge(&inp, &bad.cert_pem, CrlScope::Leaf), "revoked");
    assert_eq!(judge(&inp, &good.cert_pem, CrlScope::Leaf), "ok");
}

/// A CRL whose signatureAlgorithm (in the TBS and outside it, alike) does
/// not name the digest its signature was made with is not verified, even
/// though the key verifies it under the algorithm really used: an
/// algorithm is tried only when it matches both the CRL's signature
/// algorithm and the signer's key (`algorithm_matches`). Controls: the
/// CRL as signed revokes, and the relabelled TBS signed with the digest it
/// names revokes. Kills `||` to `&&` in the old `verify_crl` (and `&&` to
/// `||` in `algorithm_matches`), under which a P-384 key's ECDSA-SHA384
/// signature labelled ecdsa-with-SHA256 was verified by ECDSA_P384_SHA384
/// (the key matches) and revoked.
#[test]
fn a_crl_labelled_with_another_signature_algorithm_is_not_verified() {
    if tools::skip_unless(&["openssl"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let p384 = openssl_root(
        d,
        &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-384"],
        "P-384 Root",
    );
    let bad = leaf(&p384);
    let signed = p384
        .crl(&CrlSpec::new(1, vec![serial(&bad)], 7))
        .expect("CRL");
    let right = signed.pem.clone();
    assert_eq!(
        judge(
            &inputs(&p384.cert_pem, Some(&right)),
            &bad.cert_pem,
            CrlScope::Leaf
        ),
        "revoked",
        "the CRL labelled with the algorithm it was signed with revokes"
    );

    // Relabel both AlgorithmIdentifiers (the TBS's and the outer one:
    // webpki refuses a CRL where they differ) ecdsa-with-SHA256, and sign
    // the relabelled TBS with the CA's key and SHA-384.
    const SHA384: [u8; 12] = [
        0x30, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03,
    ];
    let mut relabelled = signed.der.clone();
    let mut found = 0;
    for at in 0..=relabelled.len().saturating_sub(SHA384.len()) {
        if relabelled[at..at + SHA384.len()] == SHA384 {
            relabelled[at + SHA384.len() - 1] = 0x02;
            found += 1;
        }
    }
    assert_eq!(found, 2, "the TBS's and the outer signatureAlgorithm");
    let (_, outer) = der_tlv(&relabelled);
    let (tbs, _) = der_tlv(outer);
    std::fs::write(d.join("tbs.der"), tbs).unwrap();
    let signed_with = |digest: &str| {
        common::openssl_ca::openssl_in(
            d,
            &[
                "dgst", digest, "-sign", "ca.key", "-out", "sig.der", "tbs.der",
            ],
        );
        let mut bits = vec![0u8];
        bits.extend(std::fs::read(d.join("sig.der")).unwrap());
        let mut body = tbs.to_vec();
        body.extend_from_slice(&SHA384[..SHA384.len() - 1]);
        body.push(0x02);
        body.extend(der_encode(0x03, &bits));
        pem_crl(&der_encode(0x30, &body))
    };
    // The control: signed with the digest it names, the rebuilt CRL revokes.
    let honest = signed_with("-sha256");
    assert_eq!(
        judge(
            &inputs(&p384.cert_pem, Some(&honest)),
            &bad.cert_pem,
            CrlScope::Leaf
        ),
        "revoked"
    );
    let wrong = signed_with("-sha384");
    let inp = inputs(&p384.cert_pem, Some(&wrong));
    let e = classify_crl_file(&inp, SystemTime::now())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("does not verify with the key of CN=P-384 Root"),
        "{e}"
    );
    let refused = judge_chain(
        &inp,
        bad.cert_pem.as_bytes(),
        CrlScope::Leaf,
        Usage::ClientAuth,
        SystemTime::now(),
    );
    assert!(refused.is_err(), "{refused:?}");
}

/// The first DER element of `der`: (the whole element, its contents).
fn der_tlv(der: &[u8]) -> (&[u8], &[u8]) {
    let (len, head) = match der[1] {
        n if n < 0x80 => (n as usize, 2),
        n => {
            let k = (n & 0x7f) as usize;
            let len = der[2..2 + k]
                .iter()
                .fold(0usize, |acc, b| (acc << 8) | *b as usize);
            (len, 2 + k)
        }
    };
    (&der[..head + len], &der[head..head + len])
}

/// One DER element: `tag`, its length, `contents`.
fn der_encode(tag: u8, contents: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = contents.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(contents);
    out
}

/// `der` as a PEM CRL.
fn pem_crl(der: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut pem = String::from("-----BEGIN X509 CRL-----\n");
    for line in b64.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        pem.push('\n');
    }
    pem.push_str("-----END X509 CRL-----\n");
    pem
}

/// A CRL that names a CA we hold (an anchor, or an intermediate of the
/// `intermediates` file) but that no trusted key of that name verifies
/// never loads: a corrupted signature, a CA whose keyUsage lacks cRLSign,
/// another key under the CA's name each make the inputs unusable, the
/// error naming the CRL and why. The same CRL of an intermediate only the
/// peer sends stays `unverified` (judged at the handshake), and a CRL of a
/// same-name CA that left the trust (a retired anchor) is `ignored`.
#[test]
fn a_crl_no_trusted_key_verifies_never_loads() {
    use common::broken_crl::corrupt_signature;
    let root = ca("Held Root");
    let twin = ca("Held Root");
    let inter = root.intermediate("Held Inter", 30).expect("intermediate");
    let inter_twin = root.intermediate("Held Inter", 30).expect("intermediate");
    let (no_sign_inter, no_sign_signer) = ca_without_crl_sign("Held Inter", Some(&root));
    let corrupt = |c: &DevCa| {
        let der = c.crl(&CrlSpec::new(1, vec![], 7)).expect("CRL").der;
        pem_crl(&corrupt_signature(&der))
    };
    let error = |inp: &TrustInputs<'_>| match classify_crl_file(inp, SystemTime::now()) {
        Ok(r) => panic!("loaded: {r:?}"),
        Err(e) => e.to_string(),
    };
    // The anchor's CRL, broken two ways.
    for (what, file, says) in [
        (
            "corrupted",
            corrupt(&root),
            "does not verify with the key of CN=Held Root in ca.crt",
        ),
        (
            "another key",
            crl(&twin, 1, vec![]),
            "another key under that name",
        ),
    ] {
        let e = error(&inputs(&root.cert_pem, Some(&file)));
        assert!(
            e.starts_with("ca.crl: the CRL from CN=Held Root (CRL number 1)"),
            "{what}: {e}"
        );
        assert!(e.contains(says), "{what}: {e}");
    }
    // A held intermediate's CRL, broken three ways; the same CRL with the
    // intermediate only in the peer's chain is judged at the handshake.
    let cases = [
        (
            "corrupted",
            inter.cert_pem.clone(),
            corrupt(&inter),
            "corrupted",
        ),
        (
            "another key",
            inter.cert_pem.clone(),
            crl(&inter_twin, 1, vec![]),
            "another key",
        ),
        (
            "no cRLSign",
            no_sign_inter.clone(),
            crl(&no_sign_signer, 1, vec![]),
            "lacks cRLSign",
        ),
    ];
    for (what, held, file, says) in cases {
        let inp = TrustInputs {
            ca: root.cert_pem.as_bytes(),
            intermediates: Some(held.as_bytes()),
            crl: Some(file.as_bytes()),
            retired_ca: None,
        };
        let e = error(&inp);
        assert!(
            e.contains("CN=Held Inter") && e.contains(says),
            "{what}: {e}"
        );
        let peer_sent = inputs(&root.cert_pem, Some(&file));
        let states = classify_crl_file(&peer_sent, SystemTime::now()).expect(what);
        assert_eq!(states[0].state, "unverified", "{what}");
    }
    // A same-name CA that left the trust: its CRL is ignored, not refused.
    let twin_crl = crl(&twin, 1, vec![]);
    let retired = TrustInputs {
        ca: root.cert_pem.as_bytes(),
        crl: Some(twin_crl.as_bytes()),
        retired_ca: Some(twin.cert_pem.as_bytes()),
        ..Default::default()
    };
    let states = classify_crl_file(&retired, SystemTime::now()).expect("retired");
    assert_eq!(states[0].state, "ignored");
}

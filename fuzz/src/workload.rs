//! The Workload API's `X509SVIDResponse` (the bytes the SPIFFE agent sends
//! on `FetchX509SVID`) decoded as the `spiffe` crate decodes it, then
//! turned into a revision by `credentials::workload::revision_from_context`.
//!
//! The crate's generated protobuf types are private, so the messages are
//! declared here from `workload.proto` (the same field numbers and types),
//! and the context is assembled with the crate's public parsers in the
//! order its client uses (each SVID with its bundle, then the federated
//! bundles, which replace a bundle of the same trust domain).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use mtls_sidecar::credentials::workload::{pick_svid, revision_from_context};
use mtls_sidecar::identity::{normal_uri, CertInfo};
use prost::Message;
use rustls_pki_types::CertificateDer;
use spiffe::{TrustDomain, X509Bundle, X509BundleSet, X509Context, X509Svid};

/// `X509SVIDResponse` (workload.proto).
#[derive(Clone, PartialEq, Message)]
pub struct X509SvidResponse {
    #[prost(message, repeated, tag = "1")]
    pub svids: Vec<X509SvidMsg>,
    #[prost(bytes = "vec", repeated, tag = "2")]
    pub crl: Vec<Vec<u8>>,
    #[prost(map = "string, bytes", tag = "3")]
    pub federated_bundles: HashMap<String, Vec<u8>>,
}

/// `X509SVID` (workload.proto).
#[derive(Clone, PartialEq, Message)]
pub struct X509SvidMsg {
    #[prost(string, tag = "1")]
    pub spiffe_id: String,
    #[prost(bytes = "vec", tag = "2")]
    pub x509_svid: Vec<u8>,
    #[prost(bytes = "vec", tag = "3")]
    pub x509_svid_key: Vec<u8>,
    #[prost(bytes = "vec", tag = "4")]
    pub bundle: Vec<u8>,
    #[prost(string, tag = "5")]
    pub hint: String,
}

/// The context the crate's client makes of `r`, or `None` where it
/// returns an error instead.
pub fn context(r: &X509SvidResponse) -> Option<X509Context> {
    if r.svids.is_empty() {
        return None;
    }
    let required = |s: &X509SvidMsg| {
        !(s.bundle.is_empty()
            || s.spiffe_id.is_empty()
            || s.x509_svid.is_empty()
            || s.x509_svid_key.is_empty())
    };
    if !r.svids.iter().all(required) {
        return None;
    }
    let mut svids = Vec::new();
    let mut set = X509BundleSet::new();
    for s in &r.svids {
        let hint = (!s.hint.is_empty()).then(|| Arc::<str>::from(s.hint.as_str()));
        let svid = X509Svid::parse_from_der_with_hint(&s.x509_svid, &s.x509_svid_key, hint).ok()?;
        let bundle =
            X509Bundle::parse_from_der(svid.spiffe_id().trust_domain().clone(), &s.bundle).ok()?;
        svids.push(Arc::new(svid));
        set.add_bundle(bundle);
    }
    let mut federated: Vec<_> = r.federated_bundles.iter().collect();
    federated.sort();
    for (td, der) in federated {
        let td = TrustDomain::try_from(td.as_str()).ok()?;
        set.add_bundle(X509Bundle::parse_from_der(td, der).ok()?);
    }
    Some(X509Context::new(svids, Arc::new(set)))
}

const ENDPOINT: &str = "unix:///fuzz/agent.sock";

/// Decodes `bytes` as a response and checks what `revision_from_context`
/// makes of it, first with no `--svid`, then asking for each SVID's ID
/// (and one the agent did not send).
pub fn check(bytes: &[u8]) {
    let Ok(resp) = X509SvidResponse::decode(bytes) else {
        return;
    };
    let Some(ctx) = context(&resp) else {
        return;
    };
    let mut wants: Vec<Option<String>> = vec![None, Some("spiffe://absent.td/x".into())];
    wants.extend(ctx.svids().iter().map(|s| Some(s.spiffe_id().to_string())));
    for want in wants {
        check_one(&ctx, want.as_deref());
    }
}

fn check_one(ctx: &X509Context, want: Option<&str>) {
    let picked = pick_svid(ctx.svids(), want);
    let rev = revision_from_context(ctx, want, ENDPOINT);
    let (rev, svid) = match (rev, picked) {
        (Err(e), _) => {
            let shown = e.to_string();
            assert!(shown.contains(ENDPOINT), "error names no source: {shown}");
            return;
        }
        (Ok(_), Err(e)) => panic!("a revision although no SVID was picked: {e}"),
        (Ok(rev), Ok(svid)) => (rev, svid),
    };
    if let Some(id) = want {
        assert_eq!(svid.spiffe_id().to_string(), id, "not the SVID asked for");
    }
    let id = svid.spiffe_id().to_string();
    let own = svid.spiffe_id().trust_domain().to_string();
    // tls.crt is the SVID's chain, leaf first, and the leaf carries the
    // SVID's SPIFFE ID as a URI SAN in the SVID's own trust domain.
    let chain = pem_blocks(&rev.cert.bytes, "CERTIFICATE");
    let expected: Vec<Vec<u8>> = svid
        .cert_chain()
        .iter()
        .map(|c| c.as_bytes().to_vec())
        .collect();
    assert_eq!(chain, expected, "tls.crt is not the SVID's chain");
    let leaf = CertInfo::parse(&CertificateDer::from(chain[0].clone()))
        .expect("a leaf the spiffe crate accepted parses");
    // The spiffe crate reads the SAN's scheme and trust domain in any
    // case (RFC 3986) and shows them lowercase; the sidecar compares
    // identities in that one normal form (`identity::normal_uri`).
    assert!(
        leaf.uri_sans
            .iter()
            .any(|u| normal_uri(u) == normal_uri(&id)),
        "the leaf's URI SANs {:?} lack the SVID's ID {id}",
        leaf.uri_sans
    );
    assert!(
        id.starts_with(&format!("spiffe://{own}/")) || id == format!("spiffe://{own}"),
        "{id} is not in its trust domain {own}"
    );
    assert_eq!(
        pem_blocks(&rev.key.bytes, "PRIVATE KEY"),
        vec![svid.private_key().as_bytes().to_vec()]
    );
    // ca.crt is exactly the own trust domain's bundle (whichever bundle
    // the set holds for it), and no federated bundle is the own domain's.
    let td = svid.spiffe_id().trust_domain();
    let bundle = ctx
        .bundle_set()
        .get_ref(td)
        .expect("a revision has its bundle");
    let anchors: Vec<Vec<u8>> = bundle
        .authorities()
        .iter()
        .map(|c| c.as_bytes().to_vec())
        .collect();
    assert_eq!(pem_blocks(&rev.ca.bytes, "CERTIFICATE"), anchors);
    for (name, file) in &rev.federated {
        assert_ne!(*name, own, "the own trust domain among the federated");
        assert!(
            path_names(&file.path, name),
            "{:?} does not name {name}",
            file.path
        );
    }
    let mut names: Vec<&String> = rev.federated.iter().map(|(n, _)| n).collect();
    let count = names.len();
    names.dedup();
    assert_eq!(
        names.len(),
        count,
        "a trust domain twice among the federated"
    );
}

fn path_names(path: &Path, what: &str) -> bool {
    path.to_string_lossy().contains(what)
}

/// The DER of each `label` block of PEM `text`, by a decoder of its own.
pub fn pem_blocks(text: &[u8], label: &str) -> Vec<Vec<u8>> {
    use base64::Engine;
    let text = std::str::from_utf8(text).expect("PEM is ASCII");
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let mut out = Vec::new();
    let mut body: Option<String> = None;
    for line in text.lines() {
        if line == begin {
            body = Some(String::new());
        } else if line == end {
            let b = body.take().expect("END after BEGIN");
            out.push(
                base64::engine::general_purpose::STANDARD
                    .decode(b)
                    .expect("base64"),
            );
        } else if let Some(b) = body.as_mut() {
            b.push_str(line);
        } else {
            panic!("text outside a block: {line:?}");
        }
    }
    assert!(body.is_none(), "an unterminated block");
    out
}

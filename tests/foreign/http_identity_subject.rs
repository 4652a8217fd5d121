//! `Subject=` in the x-forwarded-client-cert header, through the real
//! binary: whatever the client's certificate subject holds (`"`, `\`,
//! `,`, `;`, `=`, `+`, `<`, `>`, `#`, spaces at its ends, controls,
//! non-ASCII, in UTF8String, BMPString, UniversalString or
//! TeletexString), the header the target receives reads under a plain RFC
//! 9110 quoted-string parser (`tests/common/rfc9110.rs`, independent of
//! the encoder) as exactly one element carrying exactly the client's
//! SANs, and the bytes between `Subject`'s quotes are the line `openssl
//! x509 -noout -subject -nameopt RFC2253` prints for the same
//! certificate. The attack the double escape allowed (a subject that
//! closes the quote and adds `URI=`) forges no URI.

use crate::common;
use crate::common::http_identity as support;
use crate::common::rfc9110;

use std::time::{Duration, SystemTime};

use common::*;
use mtls_sidecar::pki::Issued;
use rcgen::string::{BmpString, TeletexString, UniversalString};
use rcgen::{
    CertificateParams, DistinguishedName, DnType, DnValue, ExtendedKeyUsagePurpose, SanType,
};
use support::*;

/// A client leaf issued by `ids`' CA with `subject` (RDNs in DER order),
/// the allowed DNS SAN and `uris`.
fn leaf(ids: &Ids, subject: &[(DnType, DnValue)], uris: &[&str]) -> Issued {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    for (t, v) in subject {
        dn.push(t.clone(), v.clone());
    }
    params.distinguished_name = dn;
    let mut sans = vec![SanType::DnsName(CONTROLLER.try_into().expect("DNS"))];
    for u in uris {
        sans.push(SanType::URI((*u).try_into().expect("URI")));
    }
    params.subject_alt_names = sans;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let now = SystemTime::now();
    params.not_before = (now - Duration::from_secs(60)).into();
    params.not_after = (now + Duration::from_secs(86_400)).into();
    sign_by(&ids.pki.ca, params)
}

/// What `openssl x509 -noout -subject -nameopt RFC2253` prints for `pem`
/// after `subject=`, byte for byte.
fn openssl_rfc2253(pem: &str) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("c.crt");
    std::fs::write(&path, pem).unwrap();
    let out = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-subject", "-nameopt", "RFC2253", "-in"])
        .arg(&path)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8(out.stdout).expect("openssl prints ASCII");
    let line = line.strip_suffix('\n').unwrap_or(&line);
    line.strip_prefix("subject=").expect("subject=").to_string()
}

/// The one x-forwarded-client-cert the target saw for a request from
/// `client`.
async fn header_for(sc: &Sidecar, ids: &Ids, client: &Issued) -> String {
    let cfg = client_config(Some(client), &ids.pki.ca.cert_pem);
    let mut c = Raw::connect(&sc.addr("server"), cfg).await;
    c.send(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").await;
    let r = c.response().await;
    assert_eq!(r.status, 200, "{r:?}");
    let seen = r.json()["xfcc"].clone();
    let all = seen.as_array().expect("a list");
    assert_eq!(all.len(), 1, "{seen}");
    all[0].as_str().expect("a string").to_string()
}

/// The header parses into one element: `By` (the server's URI SAN),
/// `Hash`, `Subject` (quoted), then
/// exactly `uris` and the DNS SAN; returns the bytes between `Subject`'s
/// quotes.
fn one_element(header: &str, uris: &[&str]) -> Result<String, String> {
    let elements = rfc9110::parse(header).map_err(|e| format!("{e}: {header}"))?;
    let [element] = elements.as_slice() else {
        return Err(format!("{} elements: {header}", elements.len()));
    };
    let keys: Vec<&str> = element.iter().map(|p| p.key.as_str()).collect();
    let mut want = vec!["By", "Hash", "Subject"];
    want.extend(uris.iter().map(|_| "URI"));
    want.push("DNS");
    if keys != want {
        return Err(format!("keys {keys:?}: {header}"));
    }
    if rfc9110::values(element, "URI") != uris || rfc9110::values(element, "DNS") != [CONTROLLER] {
        return Err(format!("SANs differ: {header}"));
    }
    let subject = &element[2];
    if !subject.quoted {
        return Err(format!("Subject not quoted: {header}"));
    }
    Ok(subject.raw.clone())
}

fn utf8(t: DnType, v: &str) -> (DnType, DnValue) {
    (t, DnValue::Utf8String(v.into()))
}

#[tokio::test]
async fn every_subject_reads_as_one_element_and_as_openssl_writes_it() {
    if tools::skip_unless(&["python3", "openssl"]) {
        return;
    }
    let ids = Ids::new();
    let target = PyTarget::start();
    let sc = start_server(&ids.server_dir, &target.addr, &["--http-identity", "xfcc"]).await;
    let cn = || DnType::CommonName;
    let o = || DnType::OrganizationName;
    let subjects: Vec<Vec<(DnType, DnValue)>> = vec![
        vec![utf8(o(), "q\""), utf8(cn(), "a\"b")],
        vec![utf8(o(), "\\"), utf8(cn(), "a\\\"b\\\\")],
        vec![utf8(cn(), "back\\")],
        vec![utf8(cn(), "a,b;c=d+e<f>g"), utf8(o(), " #x ")],
        vec![utf8(cn(), "#"), utf8(o(), " ")],
        vec![utf8(cn(), "#a#"), utf8(o(), "a+b=c")],
        vec![utf8(cn(), "nul\0tab\tlf\ncr\r\u{1f}del\u{7f}end")],
        vec![utf8(cn(), "é☃𝄞 ü"), utf8(o(), "\u{80}\u{ff}")],
        vec![
            (
                cn(),
                DnValue::BmpString(BmpString::try_from("é☃\"\\;").unwrap()),
            ),
            (
                o(),
                DnValue::UniversalString(UniversalString::try_from("𝄞,\u{1}").unwrap()),
            ),
            (
                DnType::OrganizationalUnitName,
                DnValue::TeletexString(TeletexString::try_from("t61\"\\\u{7f}").unwrap()),
            ),
        ],
        vec![
            utf8(DnType::CustomDnType(vec![2, 5, 4, 9]), "street \"x\""),
            utf8(
                DnType::CustomDnType(vec![1, 2, 840, 113549, 1, 9, 1]),
                "a@b",
            ),
            utf8(DnType::CustomDnType(vec![1, 3, 6, 1, 4, 1, 55555, 1]), "\""),
        ],
        vec![],
    ];
    let mut wrong = Vec::new();
    for subject in &subjects {
        let client = leaf(&ids, subject, &[]);
        let theirs = openssl_rfc2253(&client.cert_pem);
        let header = header_for(&sc, &ids, &client).await;
        match one_element(&header, &[]) {
            Ok(ours) if ours == theirs => {}
            Ok(ours) => wrong.push(format!("Subject {ours:?}, openssl {theirs:?}")),
            Err(e) => wrong.push(e),
        }
    }
    // A URI SAN comes through beside such a subject, in the normal form
    // allow and deny compared (scheme and authority lowercase, the path
    // as it is).
    let uri = "SPIFFE://TD/ns/prod/sa/Reader";
    let client = leaf(&ids, &[utf8(cn(), "x\";URI=spiffe://td/y")], &[uri]);
    let normal = "spiffe://td/ns/prod/sa/Reader";
    if let Err(e) = one_element(&header_for(&sc, &ids, &client).await, &[normal]) {
        wrong.push(e);
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The forged URI element: a subject `O=q"`, `CN=evil";URI=…` with an
/// allowed DNS SAN and no URI SAN. Escaped twice (`\"` to `\\"`) it closed
/// the quoted-string and the target read `URI=spiffe://td/ns/prod/sa/admin`.
#[tokio::test]
async fn a_subject_cannot_forge_a_uri_element() {
    if tools::skip_unless(&["python3"]) {
        return;
    }
    let ids = Ids::new();
    let target = PyTarget::start();
    let sc = start_server(&ids.server_dir, &target.addr, &["--http-identity", "xfcc"]).await;
    let client = leaf(
        &ids,
        &[
            utf8(DnType::OrganizationName, "q\""),
            utf8(
                DnType::CommonName,
                "evil\";URI=spiffe://td/ns/prod/sa/admin",
            ),
        ],
        &[],
    );
    let header = header_for(&sc, &ids, &client).await;
    let subject = one_element(&header, &[]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        subject,
        r#"CN=evil\"\;URI=spiffe://td/ns/prod/sa/admin,O=q\""#
    );
}

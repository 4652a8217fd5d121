//! The `http_identity` target's checks: the sidecar's XFCC name
//! predicate, value builder, subject escaping and smuggling scanner
//! against the references in [`crate::xfcc`].

use mtls_sidecar::proxy::http::dn::escape_bytes;
use mtls_sidecar::proxy::http::smuggle::{Scanner, Verdict, Verdicts};
use mtls_sidecar::proxy::http::{is_xfcc_name, xfcc_value, XfccParts};

use crate::{rfc9110, xfcc};

/// The predicate agrees with the reference rule.
pub fn check_name(name: &[u8]) {
    assert_eq!(is_xfcc_name(name), xfcc::is_xfcc_name(name), "{name:?}");
}

/// Builds parts from `b`/`s`/`u`/`d` lines and checks the value.
pub fn check_value(text: &str) {
    let mut parts = XfccParts::default();
    let mut cns = Vec::new();
    for line in text.split('\n') {
        let Some(kind) = line.chars().next() else {
            continue;
        };
        let v = &line[kind.len_utf8()..];
        match kind {
            'b' => parts.by = Some(v.to_string()),
            's' => cns.push(v.to_string()),
            'u' => parts.uris.push(v.to_string()),
            'd' => parts.dns.push(v.to_string()),
            _ => {}
        }
    }
    parts.hash = [0x5a; 32];
    parts.subject = cns
        .iter()
        .map(|cn| format!("CN={}", escape_bytes(cn.as_bytes())))
        .collect::<Vec<_>>()
        .join(",");
    let rdns = xfcc::split_rdns(&parts.subject);
    if !cns.is_empty() {
        assert_eq!(rdns.len(), cns.len(), "{:?}", parts.subject);
        for (rdn, cn) in rdns.iter().zip(&cns) {
            let v = rdn.strip_prefix("CN=").expect("CN=");
            let back = xfcc::unescape_value(v).unwrap_or_else(|| panic!("{v:?} unescapes"));
            assert_eq!(back, cn.as_bytes(), "{cn:?} escaped as {v:?}");
            assert!(!v.starts_with(' ') && (v == "#" || !v.starts_with('#')), "{v:?}");
        }
    }
    let element = one_element(&xfcc_value(&parts), &parts);
    let hash: Vec<String> = rfc9110::values(&element, "Hash");
    assert_eq!(hash, ["5a".repeat(32)]);
}

/// The value is visible ASCII and, read under RFC 9110's quoted-string
/// rules, exactly one element: `By` (if any), `Hash`, `Subject` (quoted,
/// its bytes between the quotes `parts.subject`), then exactly the URI
/// and DNS SANs, percent-encoded. Returns the element.
fn one_element(value: &str, parts: &XfccParts) -> Vec<rfc9110::Pair> {
    assert!(
        value.bytes().all(|b| b.is_ascii_graphic() || b == b' '),
        "{value:?} is not a header value"
    );
    let elements = rfc9110::parse(value).unwrap_or_else(|e| panic!("{value:?}: {e}"));
    let [element] = <[_; 1]>::try_from(elements)
        .unwrap_or_else(|e| panic!("{value:?}: {} elements", e.len()));
    let keys: Vec<&str> = element.iter().map(|p| p.key.as_str()).collect();
    let mut want = Vec::new();
    want.extend(parts.by.iter().map(|_| "By"));
    want.extend(["Hash", "Subject"]);
    want.extend(parts.uris.iter().map(|_| "URI"));
    want.extend(parts.dns.iter().map(|_| "DNS"));
    assert_eq!(keys, want, "{value:?}");
    let percent = |v: &[String]| v.iter().map(|s| xfcc::percent(s)).collect::<Vec<_>>();
    let by: Vec<String> = parts.by.iter().cloned().collect();
    assert_eq!(rfc9110::values(&element, "By"), percent(&by), "{value:?}");
    assert_eq!(rfc9110::values(&element, "URI"), percent(&parts.uris), "{value:?}");
    assert_eq!(rfc9110::values(&element, "DNS"), percent(&parts.dns), "{value:?}");
    let subject = element.iter().find(|p| p.key == "Subject").expect("Subject");
    assert!(subject.quoted, "{value:?}");
    assert_eq!(subject.raw, parts.subject, "{value:?}");
    element
}

/// A peer leaf's parts, when its DER parses, make a value that reads as
/// exactly one element with exactly its SANs and its subject unchanged.
pub fn check_cert(der: &[u8]) {
    if let Some(parts) = XfccParts::from_certs(der, Some(der)) {
        one_element(&xfcc_value(&parts), &parts);
    }
}

/// The scanner's verdicts do not depend on how the bytes are split.
pub fn check_scanner(data: &[u8]) {
    let [seed, limits, stream @ ..] = data else {
        return;
    };
    let max_head = 32 + usize::from(*limits) * 4;
    let max_headers = 1 + usize::from(*limits % 32);
    let run = |chunks: &mut dyn Iterator<Item = &[u8]>| -> Vec<Verdict> {
        let v = Verdicts::default();
        let mut s = Scanner::new(max_head, max_headers, v.clone());
        for c in chunks {
            s.feed(c);
        }
        let q = v.lock().unwrap_or_else(|e| e.into_inner());
        q.iter().copied().collect()
    };
    let whole = run(&mut std::iter::once(stream));
    if let Some(i) = whole.iter().position(Result::is_err) {
        assert_eq!(i + 1, whole.len(), "a verdict after a refusal");
    }
    let bytes = run(&mut stream.chunks(1));
    assert_eq!(whole, bytes, "one byte at a time");
    let pieces = crate::pieces(*seed, stream);
    assert_eq!(whole, run(&mut pieces.into_iter()), "random chunks");
}

//! The `http_identity` target's checks: the sidecar's XFCC name
//! predicate, value builder, subject escaping and smuggling scanner
//! against the references in [`crate::xfcc`].

use mtls_sidecar::proxy::http::dn::escape_value;
use mtls_sidecar::proxy::http::smuggle::{Scanner, Verdict, Verdicts};
use mtls_sidecar::proxy::http::{is_xfcc_name, xfcc_value, XfccParts};

use crate::xfcc;

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
        .map(|cn| format!("CN={}", escape_value(cn)))
        .collect::<Vec<_>>()
        .join(",");
    let rdns = xfcc::split_rdns(&parts.subject);
    if !cns.is_empty() {
        assert_eq!(rdns.len(), cns.len(), "{:?}", parts.subject);
        for (rdn, cn) in rdns.iter().zip(&cns) {
            let v = rdn.strip_prefix("CN=").expect("CN=");
            let back = xfcc::unescape_value(v).unwrap_or_else(|| panic!("{v:?} unescapes"));
            assert_eq!(back, cn.as_bytes(), "{cn:?} escaped as {v:?}");
            assert!(!v.starts_with(' ') && !v.ends_with(' ') && !v.starts_with('#'));
        }
    }
    let value = xfcc_value(&parts);
    let mut want = Vec::new();
    if let Some(by) = &parts.by {
        want.push(("By".to_string(), xfcc::percent(by)));
    }
    want.push(("Hash".to_string(), "5a".repeat(32)));
    want.push(("Subject".to_string(), parts.subject.clone()));
    want.extend(
        parts
            .uris
            .iter()
            .map(|u| ("URI".to_string(), xfcc::percent(u))),
    );
    want.extend(
        parts
            .dns
            .iter()
            .map(|d| ("DNS".to_string(), xfcc::percent(d))),
    );
    assert_eq!(parse_value(&value), want, "{value:?}");
}

/// The value is visible ASCII and one parseable element.
fn parse_value(value: &str) -> Vec<(String, String)> {
    assert!(
        value.bytes().all(|b| b.is_ascii_graphic() || b == b' '),
        "{value:?} is not a header value"
    );
    xfcc::parse_element(value).unwrap_or_else(|| panic!("{value:?} does not parse"))
}

/// A peer leaf's parts, when its DER parses, make a parseable value.
pub fn check_cert(der: &[u8]) {
    if let Some(parts) = XfccParts::from_certs(der, Some(der)) {
        let got = parse_value(&xfcc_value(&parts));
        assert!(got
            .iter()
            .any(|(k, v)| k == "Subject" && *v == parts.subject));
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
    let mut state = u32::from(*seed) | 1;
    let mut rest = stream;
    let mut pieces = Vec::new();
    while !rest.is_empty() {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let n = (state as usize % 17).min(rest.len());
        let (a, b) = rest.split_at(n);
        pieces.push(a);
        rest = b;
    }
    assert_eq!(whole, run(&mut pieces.into_iter()), "random chunks");
}

//! Peer-controlled text in the logs of the real binary: a certificate whose
//! subject and SANs carry newlines, line separators and bidi controls cannot
//! forge a log line or flood one; refusal lines are rate-limited per route
//! and reason with a "suppressed N" summary while the metrics count every
//! refusal; and `--log-format json` writes one JSON object per line with
//! `sans` as a real array.

use crate::common;

use common::http;

use std::time::{Duration, Instant};

use common::*;
use mtls_sidecar::pki::{DevCa, Issued, Role};
use rcgen::{CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, SanType};
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// What the sidecar promises: at most this many refusal lines per route and
/// reason in one window, then a summary.
const BURST: usize = 10;
const WINDOW: Duration = Duration::from_secs(10);

/// The organisation an attacker chose: a bare forged line, a forged line
/// with a perfect log prefix, a Unicode line separator and a bidi override.
const FORGED_ORG: &str = "Acme\nINFO FORGED-BARE handshake complete\n\
    2099-01-01T00:00:00.000000Z  INFO mtls_sidecar::route: FORGED-PREFIXED listening\
    \u{2028}FORGED-LS\u{202e}DESREVER\u{1b}[2J";

/// Characters no log line may carry raw: controls (other than the line's own
/// end), line/paragraph separators, bidi controls.
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{061c}' | '\u{200e}' | '\u{200f}'
        )
        || ('\u{202a}'..='\u{202e}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
}

/// The SANs of the forged certificate: a forged line, a 300-character name,
/// and enough names (20) to exceed the list cap of 16.
fn forged_sans() -> Vec<String> {
    let mut sans = vec!["evil.svc\nINFO forged-san".to_string(), "b".repeat(300)];
    sans.extend((2..20).map(|i| format!("s{i}.evil.svc")));
    sans
}

/// A client certificate signed by `ca` whose subject is `O=org, CN=cn`
/// (in that order) with the given DNS SANs: odd on purpose, so minted with
/// rcgen directly rather than through `pki::LeafSpec`.
fn odd_leaf(ca: &DevCa, org: &str, cn: &str, sans: &[String]) -> Issued {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, org);
    dn.push(DnType::CommonName, cn);
    params.distinguished_name = dn;
    params.subject_alt_names = sans
        .iter()
        .map(|s| SanType::DnsName(s.as_str().try_into().expect("IA5 SAN")))
        .collect();
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    sign_by(ca, params)
}

fn forged_leaf(pki: &Pki) -> Issued {
    odd_leaf(&pki.ca, FORGED_ORG, &"A".repeat(300), &forged_sans())
}

/// Presents `ident` (or no certificate) to the server and expects refusal.
async fn present(addr: &str, ident: Option<&Issued>, ca_pem: &str) {
    if let Ok(mut s) = tls_connect(addr, REPLICA, client_config(ident, ca_pem)).await {
        assert!(refused(&mut s).await, "server forwarded a refused peer");
    }
}

/// True when a text line starts as tracing's text format starts a line:
/// an RFC 3339 UTC timestamp, then a padded level, then a target.
fn has_log_prefix(line: &str) -> bool {
    let Some((ts, rest)) = line.split_once(' ') else {
        return false;
    };
    let ts_ok = ts.len() >= 20
        && ts.ends_with('Z')
        && ts.as_bytes()[4] == b'-'
        && ts.as_bytes()[10] == b'T'
        && ts[..4].bytes().all(|b| b.is_ascii_digit());
    let rest = rest.trim_start();
    ts_ok
        && ["TRACE ", "DEBUG ", "INFO ", "WARN ", "ERROR "]
            .iter()
            .any(|l| rest.starts_with(l))
}

/// The refusal WARN lines (text format).
fn refusal_lines(sc: &Sidecar) -> Vec<String> {
    sc.warn_lines(&["handshake refused"])
}

/// The "suppressed N" summaries for `reason` (text format): their N values.
fn summaries(sc: &Sidecar, reason: &str) -> Vec<u64> {
    sc.warn_lines(&["handshake refusals suppressed"])
        .iter()
        .filter(|l| has_field(l, "reason", reason))
        .map(|l| {
            field(l, "suppressed")
                .parse()
                .expect("suppressed is a count")
        })
        .collect()
}

/// The value of one failure series on `/metrics`.
async fn failures(admin: &str, reason: &str) -> u64 {
    let a = http::request(admin, "GET", "/metrics").await;
    assert_eq!(a.code, 200, "{}", a.body);
    assert!(a
        .header("content-type")
        .is_some_and(|t| t.starts_with("text/plain")));
    a.body
        .lines()
        .find(|l| {
            l.starts_with("mtls_sidecar_tls_handshake_failures_total{")
                && l.contains("route=\"server\"")
                && l.contains(&format!("reason=\"{reason}\""))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .map(|v| v as u64)
        .unwrap_or_else(|| panic!("no {reason} series:\n{}", a.body))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_forged_subject_is_one_escaped_capped_warn_line() {
    let srv = ServerSide::start(&[]).await;
    let forged = forged_leaf(&srv.pki);
    present(&srv.addr, Some(&forged), &srv.pki.ca.cert_pem).await;
    srv.sidecar.wait_log(&["handshake refused"]).await;
    // A good connection afterwards: its "handshake complete" line is written
    // after every line the refusal could have produced.
    let mut good = srv.connect_good().await;
    assert_eq!(roundtrip(&mut good, b"good").await, b"good");
    // Its own line, by its target: the forged refusal line carries the words
    // "handshake complete" inside the subject it quotes, so those alone
    // could match before the good connection's line is written.
    srv.sidecar
        .wait_log(&[" mtls_sidecar::route: handshake complete"])
        .await;

    let logs = srv.sidecar.logs();
    let all = logs.join("\n");
    for line in &logs {
        assert!(
            has_log_prefix(line),
            "a line without a log prefix: {line:?}\n{all}"
        );
        assert!(!line.chars().any(is_unsafe), "raw control in {line:?}");
    }
    let forged_lines: Vec<_> = logs.iter().filter(|l| l.contains("FORGED")).collect();
    assert_eq!(
        forged_lines.len(),
        1,
        "forged text spread over lines:\n{all}"
    );
    let warns: Vec<_> = logs.iter().filter(|l| l.contains(" WARN ")).collect();
    assert_eq!(warns.len(), 1, "{all}");
    let line = warns[0];
    assert!(line.contains("handshake refused"), "{line}");
    // The module shown is the documented one (docs/logging.md), whichever
    // file of src/proxy/route/ wrote the line: operators filter on it
    // (RUST_LOG=mtls_sidecar::route=debug).
    assert!(
        line.contains(" WARN mtls_sidecar::route: handshake refused "),
        "{line}"
    );
    let complete = logs
        .iter()
        .find(|l| l.contains("handshake complete") && !l.contains("FORGED"))
        .expect("the good connection's handshake complete line");
    assert!(
        complete.contains(" mtls_sidecar::route: handshake complete"),
        "{complete}"
    );
    assert_eq!(forged_lines[0], line);

    // The forged text is there, escaped: a reader sees what was sent.
    assert!(
        line.contains("subject=O=Acme\\nINFO FORGED-BARE handshake complete\\n2099-01-01T"),
        "{line}"
    );
    assert!(
        line.contains("listening\\u{2028}FORGED-LS\\u{202e}DESREVER\\u{1b}[2J"),
        "{line}"
    );
    // The subject is capped at 256 characters with a visible count of the
    // cut: the 300-character CN does not arrive whole.
    let subject = &line[line.find("subject=").unwrap() + "subject=".len()..];
    // The next field is `serial=` (refusals name the serial) or `sans=`.
    let end = [" serial=", " sans="]
        .iter()
        .filter_map(|f| subject.find(f))
        .min()
        .expect("a field after the subject");
    let subject = &subject[..end];
    let (shown, marker) = subject.split_once('…').expect("a cut marker");
    assert_eq!(shown.chars().count(), 256, "{subject}");
    assert!(
        marker.starts_with("[+") && marker.ends_with(" chars]"),
        "{subject}"
    );
    assert!(!line.contains(&"A".repeat(300)));
    // SANs: each escaped and capped, and only the first 16 listed.
    assert!(line.contains("\"evil.svc\\ninfo forged-san\""), "{line}");
    let b256 = format!("\"{}…[+44 chars]\"", "b".repeat(256));
    assert!(line.contains(&b256), "{line}");
    assert!(line.contains("\"s15.evil.svc\", +4 more]"), "{line}");
    assert!(!line.contains("s16.evil.svc"), "{line}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refusal_burst_is_rate_limited_and_summarised_while_metrics_count_all() {
    let srv = ServerSide::start(&["--admin", "127.0.0.1:0"]).await;
    let admin = srv.sidecar.admin();
    let started = Instant::now();
    for _ in 0..50 {
        present(&srv.addr, None, &srv.pki.ca.cert_pem).await;
    }
    // Every refusal is counted, logged or not.
    let deadline = Instant::now() + DEADLINE;
    while failures(&admin, "no_client_cert").await < 50 {
        assert!(Instant::now() < deadline, "metrics never counted 50");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let burst_took = started.elapsed();
    let one_window = burst_took < WINDOW - Duration::from_secs(1);
    if one_window {
        // The limit is per reason: another reason is still logged at once
        // while no_client_cert is being suppressed.
        let mut s = TcpStream::connect(&srv.addr).await.unwrap();
        s.write_all(b"PING plaintext probe\r\n").await.unwrap();
        read_until_closed(&mut s).await;
        srv.sidecar
            .wait_field("handshake refused", "reason", "not_tls")
            .await;
    }
    // The summary comes without any further refusal, once the window ends.
    eventually("the suppressed summary to account for all 50", || {
        let lines = srv.sidecar.warn_reason("no_client_cert").len()
            - summaries(&srv.sidecar, "no_client_cert").len();
        let suppressed: u64 = summaries(&srv.sidecar, "no_client_cert").iter().sum();
        lines as u64 + suppressed == 50
    })
    .await;
    let logged = refusal_lines(&srv.sidecar)
        .iter()
        .filter(|l| has_field(l, "reason", "no_client_cert"))
        .count();
    let sums = summaries(&srv.sidecar, "no_client_cert");
    let summary = srv.sidecar.warn_lines(&["handshake refusals suppressed"]);
    assert!(
        summary.iter().all(|l| l.contains("route=server")),
        "{summary:#?}"
    );
    // The same module as the lines it summarises, so one filter keeps both.
    assert!(
        summary
            .iter()
            .all(|l| l.contains(" WARN mtls_sidecar::route: handshake refusals suppressed ")),
        "{summary:#?}"
    );
    if one_window {
        assert_eq!(logged, BURST, "burst took {burst_took:?}");
        assert_eq!(sums, vec![40], "{summary:#?}");
    } else {
        // A machine so loaded that 50 handshakes spanned windows: the
        // invariant still holds window by window.
        assert!(logged <= BURST * sums.len(), "{logged} lines, {sums:?}");
    }
    assert_eq!(failures(&admin, "no_client_cert").await, 50);
}

/// Parses every captured line as JSON (panicking on the first that is not).
fn json_lines(sc: &Sidecar) -> Vec<Value> {
    sc.logs()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}")))
        .collect()
}

/// Waits for a JSON line whose `message` is `msg`.
async fn wait_json(sc: &Sidecar, msg: &str) -> Value {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(v) = json_lines(sc).into_iter().find(|v| v["message"] == msg) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "no {msg:?} line:\n{}",
            sc.logs().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn json_logs_are_one_object_per_line_with_sans_as_an_array() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("test CA");
    let dir = pki.dir(tmp.path(), "replica", &pki.leaf(REPLICA, Role::Server));
    let controller = pki.leaf(CONTROLLER, Role::Client);
    let echo = echo_target().await;
    let target = echo.addr.to_string();
    let sc = Sidecar::spawn(&[
        "server",
        "--listen",
        "127.0.0.1:0",
        "--target",
        &target,
        "--tls-dir",
        dir.to_str().unwrap(),
        "--allow-san",
        CONTROLLER,
        "--log-format",
        "json",
    ]);
    let listening = wait_json(&sc, "listening").await;
    assert_eq!(listening["level"], "INFO");
    assert_eq!(listening["route"], "server");
    let addr = listening["listen"].as_str().expect("listen is a string");

    // Twelve refusals of one kind: ten lines, then a summary of two.
    let forged = forged_leaf(&pki);
    for _ in 0..12 {
        present(addr, Some(&forged), &pki.ca.cert_pem).await;
    }
    let refusal = wait_json(&sc, "handshake refused").await;
    assert_eq!(refusal["level"], "WARN");
    assert_eq!(refusal["route"], "server");
    let sans = refusal["sans"].as_array().expect("sans is an array");
    assert_eq!(sans.len(), 17, "{sans:?}");
    assert_eq!(sans[0], "evil.svc\\ninfo forged-san");
    assert_eq!(sans[1], format!("{}…[+44 chars]", "b".repeat(256)));
    assert_eq!(sans[15], "s15.evil.svc");
    assert_eq!(sans[16], "+4 more");
    let subject = refusal["subject"].as_str().expect("subject is a string");
    assert!(
        subject.starts_with("O=Acme\\nINFO FORGED-BARE"),
        "{subject}"
    );
    assert!(subject.contains("\\u{2028}FORGED-LS\\u{202e}"), "{subject}");

    let mut good = tls_connect(
        addr,
        REPLICA,
        client_config(Some(&controller), &pki.ca.cert_pem),
    )
    .await
    .expect("controller handshake");
    assert_eq!(roundtrip(&mut good, b"good").await, b"good");
    let complete = wait_json(&sc, "handshake complete").await;
    assert_eq!(complete["sans"], serde_json::json!([CONTROLLER]));

    let summary = wait_json(&sc, "handshake refusals suppressed").await;
    assert_eq!(summary["level"], "WARN");
    assert_eq!(summary["route"], "server");
    assert_eq!(summary["reason"], refusal["reason"]);
    let refused = json_lines(&sc)
        .iter()
        .filter(|v| v["message"] == "handshake refused")
        .count();
    assert_eq!(
        summary["suppressed"].as_u64(),
        Some((12 - refused) as u64),
        "{summary}"
    );

    for line in sc.logs() {
        assert!(!line.chars().any(is_unsafe), "raw control in {line:?}");
        let v: Value = serde_json::from_str(&line).unwrap();
        assert!(
            v["timestamp"].is_string() && v["level"].is_string(),
            "{line}"
        );
    }
}

/// One "listening" and one "stopped accepting" line per route, whatever
/// the number of runtimes accepting for it (loop 0 writes both), naming
/// that number: with one runtime the lines are there, with two they are
/// not doubled.
#[tokio::test]
async fn one_listening_and_one_stopped_line_per_route_at_any_runtime_count() {
    for n in ["1", "2"] {
        let s = ServerSide::start(&["--worker-threads", n]).await;
        let line = s.sidecar.wait_log(&[" listening ", "route=server"]).await;
        assert!(has_field(&line, "runtimes", n), "{line}");
        let mut tls = s.connect_good().await;
        assert_eq!(roundtrip(&mut tls, b"up").await, b"up");
        drop(tls);
        s.sidecar.signal(libc::SIGTERM);
        let (code, logs) = s.sidecar.wait_exit().await;
        assert_eq!(code, Some(0), "{}", logs.join("\n"));
        let count = |needle: &str| {
            logs.iter()
                .filter(|l| l.contains(needle) && l.contains("route=server"))
                .count()
        };
        assert_eq!(count(" listening "), 1, "{n} runtimes: {}", logs.join("\n"));
        assert_eq!(
            count("stopped accepting"),
            1,
            "{n} runtimes: {}",
            logs.join("\n")
        );
    }
}

//! Metric names (the public contract, docs/metrics.md), their descriptions, and
//! per-route handles so the hot path increments atomics instead of looking
//! series up by name.

use std::sync::OnceLock;
use std::time::Duration;

use metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Counter,
    Gauge, Histogram, Unit,
};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::reason::{CloseReason, FailureReason};

pub mod info;
pub use info::render;

pub const HANDSHAKES: &str = "mtls_sidecar_tls_handshakes_total";
pub const HANDSHAKE_FAILURES: &str = "mtls_sidecar_tls_handshake_failures_total";
/// Handshakes that resumed a TLS 1.3 session and were admitted.
pub const RESUMPTIONS: &str = "mtls_sidecar_tls_resumptions_total";
pub const HANDSHAKE_DURATION: &str = "mtls_sidecar_tls_handshake_duration_seconds";
pub const CONNECTIONS_ACTIVE: &str = "mtls_sidecar_connections_active";
pub const CONNECTIONS: &str = "mtls_sidecar_connections_total";
pub const CONNECTIONS_CLOSED: &str = "mtls_sidecar_connections_closed_total";
pub const BYTES: &str = "mtls_sidecar_bytes_total";
pub const TARGET_CONNECT_FAILURES: &str = "mtls_sidecar_target_connect_failures_total";
/// HTTP routes: requests whose body stopped arriving for
/// `--http-body-timeout` (each answered 408 and ended).
pub const HTTP_BODY_TIMEOUTS: &str = "mtls_sidecar_http_body_timeouts_total";
pub const CREDENTIAL_RELOADS: &str = "mtls_sidecar_credential_reloads_total";
pub const CERT_NOT_AFTER: &str = "mtls_sidecar_cert_not_after_timestamp_seconds";
/// The notBefore of the same certificates: with [`CERT_NOT_AFTER`] it gives
/// each one's lifetime, so an alert can ask what fraction of it is left.
pub const CERT_NOT_BEFORE: &str = "mtls_sidecar_cert_not_before_timestamp_seconds";
pub const WORKLOAD_API_UP: &str = "mtls_sidecar_workload_api_up";
pub const WORKLOAD_API_DOWN_SINCE: &str = "mtls_sidecar_workload_api_down_since_timestamp_seconds";
/// The earliest nextUpdate (Unix time) among the CRLs in force.
pub const CRL_NEXT_UPDATE: &str = "mtls_sidecar_crl_next_update_timestamp_seconds";
/// Revisions applied that made revoked serials admissible again (a CRL in
/// force removed, one listing fewer serials without a higher number, or
/// one at a higher number omitting serials revoked within the prune age).
pub const CRL_REMOVALS: &str = "mtls_sidecar_crl_removals_total";
/// Revoked serials a CRL's issuer pruned (dropped at a higher CRL number,
/// revoked longer ago than the prune age), counted apart from
/// un-revocations.
pub const CRL_PRUNED: &str = "mtls_sidecar_crl_entries_pruned_total";
/// CRLs held pending (thisUpdate in the future beyond the clock skew).
pub const CRL_PENDING: &str = "mtls_sidecar_crl_pending";
/// Deny-list entries in force, by `kind` (`spki`, `serial`, `san`).
pub const DENY_ENTRIES: &str = "mtls_sidecar_deny_entries";

/// Admission reviews answered by `mtls-sidecar webhook`, by `result`
/// (`injected`, `skipped`, `refused`, `malformed`).
pub const WEBHOOK_REVIEWS: &str = "mtls_sidecar_webhook_reviews_total";
/// How long the webhook took to answer a review, body read included.
pub const WEBHOOK_REVIEW_DURATION: &str = "mtls_sidecar_webhook_review_duration_seconds";

/// Handshake duration buckets: 100 µs to 10 s.
const HANDSHAKE_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process-wide Prometheus recorder (once) and returns the
/// handle `/metrics` renders from.
pub fn install() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full(HANDSHAKE_DURATION.to_string()),
                    HANDSHAKE_BUCKETS,
                )
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full(WEBHOOK_REVIEW_DURATION.to_string()),
                        HANDSHAKE_BUCKETS,
                    )
                })
                .unwrap_or_else(|_| PrometheusBuilder::new());
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            // Fails only if another recorder was installed first (a test
            // harness); metrics then go there and /metrics shows ours empty.
            let _ = metrics::set_global_recorder(recorder);
            describe();
            for result in ["applied", "rejected"] {
                counter!(CREDENTIAL_RELOADS, "result" => result).increment(0);
            }
            counter!(CRL_REMOVALS).increment(0);
            counter!(CRL_PRUNED).increment(0);
            gauge!(CRL_PENDING).set(0.0);
            deny_entries(0, 0, 0);
            process_metrics();
            handle
        })
        .clone()
}

fn describe() {
    describe_counter!(
        HANDSHAKES,
        Unit::Count,
        "TLS handshakes completed and authorized, by route."
    );
    describe_counter!(
        HANDSHAKE_FAILURES,
        Unit::Count,
        "TLS handshakes refused or failed, by route and reason (no_client_cert, unknown_ca, bad_san, expired, not_tls, timeout, protocol, io, overload, revoked, pin_mismatch, revoked_status_unknown, denied)."
    );
    describe_counter!(
        RESUMPTIONS,
        Unit::Count,
        "TLS handshakes that resumed a session (--resumption) and whose stored peer chain passed admission again, by route."
    );
    describe_histogram!(
        HANDSHAKE_DURATION,
        Unit::Seconds,
        "Duration of the TLS handshake, successful or not."
    );
    describe_gauge!(
        CONNECTIONS_ACTIVE,
        Unit::Count,
        "Connections currently being forwarded, by route."
    );
    describe_counter!(CONNECTIONS, Unit::Count, "Connections accepted, by route.");
    describe_counter!(
        CONNECTIONS_CLOSED,
        Unit::Count,
        "Forwarded connections closed, by route and reason."
    );
    describe_counter!(
        BYTES,
        Unit::Bytes,
        "Bytes forwarded, by route and direction (to_target, from_target)."
    );
    describe_counter!(
        TARGET_CONNECT_FAILURES,
        Unit::Count,
        "Failed connections to the route's target."
    );
    describe_counter!(
        HTTP_BODY_TIMEOUTS,
        Unit::Count,
        "HTTP routes: requests whose body stopped arriving for --http-body-timeout, answered 408 (HTTP/1.1: the connection closes as http_timeout; h2: the stream ends)."
    );
    describe_counter!(
        CREDENTIAL_RELOADS,
        Unit::Count,
        "Credential revisions applied or rejected."
    );
    describe_counter!(
        CRL_REMOVALS,
        Unit::Count,
        "Credential revisions applied that made revoked serials admissible again: a CRL in force removed while its CA is trusted, a CRL listing fewer serials without a higher CRL number, or a CRL at a higher CRL number omitting serials revoked within --crl-prune-age."
    );
    describe_counter!(
        CRL_PRUNED,
        Unit::Count,
        "Revoked serials a CRL's issuer dropped from its CRL at a higher CRL number and that were revoked longer ago than --crl-prune-age (certs revoke --prune-expired: their certificates expired), and CRLs listing nothing removed: counted apart from mtls_sidecar_crl_removals_total, no alert."
    );
    describe_gauge!(
        CRL_PENDING,
        Unit::Count,
        "CRLs held pending because their thisUpdate is in the future (beyond the clock-skew tolerance); the previous CRL of that CA key stays in force."
    );
    describe_gauge!(
        DENY_ENTRIES,
        Unit::Count,
        "Deny-list entries in force across every credential source, by kind (spki, serial, san)."
    );
    describe_gauge!(
        CERT_NOT_AFTER,
        Unit::Seconds,
        "Expiry (Unix time) of the identity certificate (cert=identity) and of the trust anchor watched for renewal (cert=trust: the newest CA of each bundle, the earliest of those)."
    );
    describe_gauge!(
        CERT_NOT_BEFORE,
        Unit::Seconds,
        "Start of validity (Unix time) of the same certificates as mtls_sidecar_cert_not_after_timestamp_seconds, by cert: with it, the fraction of the lifetime left."
    );
}

/// The Workload API agent's state: up (a stream is delivering), and since
/// when it is down (absent while up). Described on first use, so a sidecar
/// without a Workload API source shows neither.
pub fn workload_api(up: bool, down_since: Option<i64>) {
    static DESCRIBED: std::sync::Once = std::sync::Once::new();
    DESCRIBED.call_once(|| {
        describe_gauge!(
            WORKLOAD_API_UP,
            Unit::Count,
            "1 while the SPIFFE Workload API stream is delivering X.509 contexts, else 0."
        );
        describe_gauge!(
            WORKLOAD_API_DOWN_SINCE,
            Unit::Seconds,
            "Since when (Unix time) the Workload API agent is unreachable; 0 while it is up."
        );
    });
    gauge!(WORKLOAD_API_UP).set(if up { 1.0 } else { 0.0 });
    gauge!(WORKLOAD_API_DOWN_SINCE).set(down_since.map_or(0.0, |t| t as f64));
}

/// Records a credential reload outcome.
/// The webhook's reviews counter at zero for each result, so a scrape
/// shows every series before the first review.
pub fn webhook_reviews_zero<const N: usize>(results: [&'static str; N]) {
    describe_counter!(
        WEBHOOK_REVIEWS,
        Unit::Count,
        "Admission reviews answered, by result (injected, skipped, refused, malformed)."
    );
    describe_histogram!(
        WEBHOOK_REVIEW_DURATION,
        Unit::Seconds,
        "Time to answer an admission review, reading its body included."
    );
    for result in results {
        counter!(WEBHOOK_REVIEWS, "result" => result).increment(0);
    }
}

/// One review answered.
pub fn webhook_review(result: &'static str, took: Duration) {
    counter!(WEBHOOK_REVIEWS, "result" => result).increment(1);
    histogram!(WEBHOOK_REVIEW_DURATION).record(took.as_secs_f64());
}

pub fn credential_reload(applied: bool) {
    let result = if applied { "applied" } else { "rejected" };
    counter!(CREDENTIAL_RELOADS, "result" => result).increment(1);
}

/// Counts one applied revision that made revoked serials admissible.
pub fn crl_removal() {
    counter!(CRL_REMOVALS).increment(1);
}

/// Counts serials a CRL's issuer pruned.
pub fn crl_pruned(serials: usize) {
    counter!(CRL_PRUNED).increment(serials as u64);
}

/// Publishes how many CRLs are held pending across every store.
pub fn crl_pending(held: usize) {
    gauge!(CRL_PENDING).set(held as f64);
}

/// Publishes how many deny-list entries are in force, by kind.
pub fn deny_entries(spki: usize, serial: usize, san: usize) {
    for (kind, n) in [("spki", spki), ("serial", serial), ("san", san)] {
        gauge!(DENY_ENTRIES, "kind" => kind).set(n as f64);
    }
}

/// A certificate's validity window (Unix seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    pub not_before: i64,
    pub not_after: i64,
}

/// Publishes the validity of the identity certificate and of the trust
/// anchor watched for renewal (Unix seconds): `cert_not_before` and
/// `cert_not_after`, by `cert`.
pub fn cert_validity(identity: Validity, trust: Option<Validity>) {
    for (cert, v) in [("identity", Some(identity)), ("trust", trust)] {
        if let Some(v) = v {
            gauge!(CERT_NOT_BEFORE, "cert" => cert).set(v.not_before as f64);
            gauge!(CERT_NOT_AFTER, "cert" => cert).set(v.not_after as f64);
        }
    }
}

/// The trust anchor whose renewal the `trust` series follows. Anchors come
/// grouped by bundle (`key`: a credential source's own bundle, or one
/// federated trust domain). In each bundle the anchor that expires last is
/// its newest CA: a successor added next to an old CA (an overlap bundle,
/// SPIRE's next CA published at half-life) takes over from it, and the old
/// one, kept until it expires, raises no alert. Of the bundles' newest
/// anchors, the one that expires first is watched.
pub fn watched_anchor<K: Ord>(
    anchors: impl IntoIterator<Item = (K, Validity)>,
) -> Option<Validity> {
    let mut newest: std::collections::BTreeMap<K, Validity> = std::collections::BTreeMap::new();
    for (key, v) in anchors {
        let slot = newest.entry(key).or_insert(v);
        if v.not_after > slot.not_after {
            *slot = v;
        }
    }
    newest.into_values().min_by_key(|v| v.not_after)
}

/// Publishes the earliest nextUpdate among the CRLs in force (Unix
/// seconds). Absent until a CRL is first in force; `+Inf` once none is any
/// more (the recorder cannot remove a series, and `+Inf` never looks due).
pub fn crl_next_update(earliest: Option<i64>) {
    static SHOWN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    use std::sync::atomic::Ordering;
    match earliest {
        Some(t) => {
            if !SHOWN.swap(true, Ordering::Relaxed) {
                describe_gauge!(
                    CRL_NEXT_UPDATE,
                    Unit::Seconds,
                    "The earliest nextUpdate (Unix time) among the CRLs in force; +Inf once no CRL is."
                );
            }
            gauge!(CRL_NEXT_UPDATE).set(t as f64);
        }
        None if SHOWN.load(Ordering::Relaxed) => gauge!(CRL_NEXT_UPDATE).set(f64::INFINITY),
        None => {}
    }
}

/// The series of one route, resolved once.
#[derive(Clone)]
pub struct RouteMetrics {
    route: String,
    pub handshakes: Counter,
    pub resumptions: Counter,
    pub handshake_duration: Histogram,
    pub active: Gauge,
    pub connections: Counter,
    pub to_target: Counter,
    pub from_target: Counter,
    pub target_connect_failures: Counter,
    pub http_body_timeouts: Counter,
}

impl std::fmt::Debug for RouteMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteMetrics")
            .field("route", &self.route)
            .finish()
    }
}

impl RouteMetrics {
    /// Resolves the route's series and creates every labelled one at zero,
    /// so `increase()` alerts fire on the first failure.
    pub fn new(route: &str) -> RouteMetrics {
        let r = route.to_string();
        for reason in FailureReason::ALL {
            counter!(HANDSHAKE_FAILURES, "route" => r.clone(), "reason" => reason.as_str())
                .increment(0);
        }
        for reason in CloseReason::ALL {
            counter!(CONNECTIONS_CLOSED, "route" => r.clone(), "reason" => reason.as_str())
                .increment(0);
        }
        let m = RouteMetrics {
            handshakes: counter!(HANDSHAKES, "route" => r.clone()),
            resumptions: counter!(RESUMPTIONS, "route" => r.clone()),
            handshake_duration: histogram!(HANDSHAKE_DURATION, "route" => r.clone()),
            active: gauge!(CONNECTIONS_ACTIVE, "route" => r.clone()),
            connections: counter!(CONNECTIONS, "route" => r.clone()),
            to_target: counter!(BYTES, "route" => r.clone(), "direction" => "to_target"),
            from_target: counter!(BYTES, "route" => r.clone(), "direction" => "from_target"),
            target_connect_failures: counter!(TARGET_CONNECT_FAILURES, "route" => r.clone()),
            http_body_timeouts: counter!(HTTP_BODY_TIMEOUTS, "route" => r.clone()),
            route: r,
        };
        m.handshakes.increment(0);
        m.resumptions.increment(0);
        m.connections.increment(0);
        m.to_target.increment(0);
        m.from_target.increment(0);
        m.target_connect_failures.increment(0);
        m.http_body_timeouts.increment(0);
        m.active.increment(0.0);
        m
    }

    /// Counts a refused or failed handshake.
    pub fn handshake_failed(&self, reason: FailureReason, took: Duration) {
        counter!(HANDSHAKE_FAILURES, "route" => self.route.clone(), "reason" => reason.as_str())
            .increment(1);
        self.handshake_duration.record(took.as_secs_f64());
    }

    /// Counts a successful handshake.
    pub fn handshake_ok(&self, took: Duration) {
        self.handshakes.increment(1);
        self.handshake_duration.record(took.as_secs_f64());
    }

    /// Counts a closed connection.
    pub fn closed(&self, reason: CloseReason) {
        counter!(CONNECTIONS_CLOSED, "route" => self.route.clone(), "reason" => reason.as_str())
            .increment(1);
    }
}

// ---- Operations: build_info and the standard process_* metrics. ----

pub const BUILD_INFO: &str = "mtls_sidecar_build_info";

/// This crate's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The rustls version this binary was built with, read from Cargo.lock at
/// compile time (rustls exports no version constant).
pub const RUSTLS_VERSION: &str = locked_version(include_str!("../../Cargo.lock"), "rustls");

/// How often the process metrics are refreshed.
const PROCESS_INTERVAL: Duration = Duration::from_secs(5);

/// `mtls_sidecar_build_info{version, rustls, aes_gcm} 1`, an [`info`]
/// family (the labels never change, but every `_info` metric is rendered
/// the same way).
/// Sets `mtls_sidecar_build_info`; `aes_gcm` names the AES-GCM that
/// protects TLS 1.3 records on this CPU (`ring` or `aws-lc`).
pub fn build_info(aes_gcm: &str) {
    info::set(
        BUILD_INFO,
        "Always 1; the labels say which build runs: version (mtls-sidecar), rustls, and which AES-GCM protects TLS 1.3 records on this CPU (ring or aws-lc).",
        vec![vec![
            ("version", VERSION.to_string()),
            ("rustls", RUSTLS_VERSION.to_string()),
            ("aes_gcm", aes_gcm.to_string()),
        ]],
    );
}

/// `process_resident_memory_bytes`, `process_open_fds`, `process_max_fds`,
/// `process_cpu_seconds_total`, `process_start_time_seconds` (and the
/// virtual-memory and thread gauges), read from `/proc/self` by
/// [`crate::process::process_metrics`], refreshed every [`PROCESS_INTERVAL`] by a
/// task on the running runtime (once, synchronously, outside one).
/// `process_cpu_seconds_total` is a gauge holding fractional seconds, so
/// that `rate()` works on a sidecar that uses milliseconds of CPU.
fn process_metrics() {
    crate::process::process_metrics::describe();
    crate::process::process_metrics::collect();
}

/// Starts the task refreshing the process metrics every
/// `PROCESS_INTERVAL` on the running runtime (once per process; the
/// metrics are installed before the runtime exists, so the app calls this
/// when it starts serving).
pub fn spawn_process_refresh() {
    static STARTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    if STARTED.swap(true, std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    rt.spawn(async move {
        let mut tick = tokio::time::interval(PROCESS_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            crate::process::process_metrics::collect();
        }
    });
}

/// The version of package `name` in a Cargo.lock, at compile time. Fails
/// the build when the package is missing or locked at two versions.
const fn locked_version(lock: &'static str, name: &str) -> &'static str {
    let b = lock.as_bytes();
    let n = name.as_bytes();
    let head = b"name = \"";
    let mut found: Option<(usize, usize)> = None;
    let mut i = 0;
    while i + head.len() + n.len() + 1 < b.len() {
        if starts_at(b, i, head)
            && starts_at(b, i + head.len(), n)
            && b[i + head.len() + n.len()] == b'"'
        {
            // The next line is `version = "X"`.
            let v = b"\nversion = \"";
            let start = i + head.len() + n.len() + 1;
            if !starts_at(b, start, v) {
                panic!("Cargo.lock: no version line after the package name");
            }
            let vs = start + v.len();
            let mut ve = vs;
            while ve < b.len() && b[ve] != b'"' {
                ve += 1;
            }
            if found.is_some() {
                panic!("Cargo.lock: the package is locked at two versions");
            }
            found = Some((vs, ve));
        }
        i += 1;
    }
    let Some((vs, ve)) = found else {
        panic!("Cargo.lock: package not found");
    };
    let (_, rest) = b.split_at(vs);
    let (version, _) = rest.split_at(ve - vs);
    match std::str::from_utf8(version) {
        Ok(v) => v,
        Err(_) => panic!("Cargo.lock: version is not UTF-8"),
    }
}

const fn starts_at(b: &[u8], at: usize, pat: &[u8]) -> bool {
    if at + pat.len() > b.len() {
        return false;
    }
    let mut j = 0;
    while j < pat.len() {
        if b[at + j] != pat[j] {
            return false;
        }
        j += 1;
    }
    true
}

// ---- Credential reload state (operations). ----

/// 1 when every credential store's newest judged revision is the one in
/// force; 0 while a newer one is rejected or pending (not valid yet). No
/// labels: like `prometheus_config_last_reload_successful`, one verdict per
/// process (a process with several credential sources is 1 only when all
/// are). A plain directory's revision that is still settling has no verdict
/// yet and leaves the gauge as it was.
pub const CREDENTIAL_LAST_RELOAD_SUCCESSFUL: &str =
    "mtls_sidecar_credential_last_reload_successful";
/// 1 for each credential source, labelled `source` (its name as `/status`
/// shows it) and `revision` (the first 12 hex digits of the content hash in
/// force): exactly one series per source. A replaced revision's series
/// disappears from the next scrape (an [`info`] family, rendered by us), so
/// `count by (revision) (mtls_sidecar_credential_revision_info)` across pods
/// counts pods per revision with no `== 1` needed.
pub const CREDENTIAL_REVISION_INFO: &str = "mtls_sidecar_credential_revision_info";

/// Publishes whether the last reloads succeeded and, for each credential
/// source, the revision in force (`(source, full hash)` pairs; the hash is
/// shortened here). A revision no longer in force leaves `/metrics`.
pub fn credential_reload_state(successful: bool, in_force: &[(String, String)]) {
    static DESCRIBED: std::sync::Once = std::sync::Once::new();
    DESCRIBED.call_once(|| {
        describe_gauge!(
            CREDENTIAL_LAST_RELOAD_SUCCESSFUL,
            "1 when the newest credential revision seen is the one in force, 0 while a newer one is rejected or pending."
        );
    });
    gauge!(CREDENTIAL_LAST_RELOAD_SUCCESSFUL).set(if successful { 1.0 } else { 0.0 });
    info::set(
        CREDENTIAL_REVISION_INFO,
        "1 for each credential source: the revision in force (first 12 hex of its content hash).",
        revision_series(in_force),
    );
}

/// One `{source, revision}` label set per source, the hash shortened to 12
/// hex digits.
fn revision_series(in_force: &[(String, String)]) -> Vec<info::Labels> {
    in_force
        .iter()
        .map(|(source, revision)| {
            vec![
                ("source", source.clone()),
                ("revision", short_revision(revision).to_string()),
            ]
        })
        .collect()
}

/// The first 12 characters of a revision hash (all of a shorter one).
fn short_revision(revision: &str) -> &str {
    revision.get(..12).unwrap_or(revision)
}

#[cfg(test)]
mod ops_tests {
    use super::*;

    fn v(not_before: i64, not_after: i64) -> Validity {
        Validity {
            not_before,
            not_after,
        }
    }

    #[test]
    fn the_newest_anchor_of_each_bundle_is_watched_and_the_earliest_of_those() {
        // Bundle 0: an old CA (expires at 100) and its successor (at 300).
        // Bundle 1: one CA expiring at 200.
        let got = watched_anchor([(0, v(0, 100)), (0, v(50, 300)), (1, v(10, 200))]);
        assert_eq!(got, Some(v(10, 200)));
        // The successor alone decides bundle 0, whatever the order.
        let got = watched_anchor([(0, v(50, 300)), (0, v(0, 100))]);
        assert_eq!(got, Some(v(50, 300)));
        assert_eq!(watched_anchor(Vec::<(u8, Validity)>::new()), None);
    }

    #[test]
    fn versions_come_from_the_lock_file() {
        assert!(RUSTLS_VERSION.starts_with("0.23."), "{RUSTLS_VERSION}");
        let lock = "[[package]]\nname = \"rustls-webpki\"\nversion = \"9\"\n\n[[package]]\nname = \"rustls\"\nversion = \"1.2.3\"\n";
        assert_eq!(locked_version(lock, "rustls"), "1.2.3");
    }

    #[test]
    fn one_revision_series_per_source_shortened() {
        let pairs = [
            ("/a".to_string(), "0123456789abcdef".to_string()),
            ("/b".to_string(), "short".to_string()),
        ];
        let series = revision_series(&pairs);
        assert_eq!(
            series,
            vec![
                vec![
                    ("source", "/a".to_string()),
                    ("revision", "0123456789ab".to_string())
                ],
                vec![
                    ("source", "/b".to_string()),
                    ("revision", "short".to_string())
                ],
            ]
        );
    }
}

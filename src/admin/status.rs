//! What the admin endpoint reports about the running process: the `/readyz`
//! verdict and the `/status` document. Both are computed from [`Shared`] on
//! each request, never cached, so they say what is in force at that moment;
//! the HTTP side lives in [`crate::admin`].
//!
//! Times are RFC 3339 (UTC, whole seconds) so an operator can read them
//! without converting epoch numbers; the identity also carries the seconds
//! left, which is what an alert or a human actually wants to know.

use std::time::SystemTime;

use serde::Serialize;

use crate::admin::shared::Shared;
use crate::credentials::revocation::{describe_state, Kept};
use crate::credentials::{fmt_time, CredentialStore, Credentials, CrlScope, CrlSet};
use crate::identity::{time_to_epoch, CertInfo, SanPolicy};
use crate::proxy::settings::Mode;

/// The `/readyz` verdict: ready or not, and one line saying why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Readiness {
    pub ready: bool,
    /// One line: the reason when not ready; "ready", possibly with a note
    /// about a rejected credential revision, when ready.
    pub detail: String,
}

/// Decides readiness at `now`: not draining, at least one route (routes are
/// listening from start-up until the drain), and for every credential store
/// an identity valid now plus at least one trust anchor valid now.
///
/// A rejected revision does not make the process unready (the last good one
/// stays in force and keeps serving), but it is named in the detail so a
/// probe's output shows it.
pub fn readiness(shared: &Shared, now: SystemTime) -> Readiness {
    match blocker(shared, now) {
        Some(reason) => Readiness {
            ready: false,
            detail: reason,
        },
        None => {
            let notes: Vec<String> = shared
                .stores
                .iter()
                .flat_map(|s| [rejected_note(s), pending_note(s)])
                .flatten()
                .collect();
            let detail = if notes.is_empty() {
                "ready".to_string()
            } else {
                format!("ready; {}", notes.join("; "))
            };
            Readiness {
                ready: true,
                detail,
            }
        }
    }
}

fn blocker(shared: &Shared, now: SystemTime) -> Option<String> {
    if shared.is_draining() {
        return Some("draining: shutting down, not accepting new connections".into());
    }
    if shared.routes.is_empty() && !shared.routeless {
        return Some("no routes are configured".into());
    }
    if let Some(r) = shared.routes.iter().find(|r| !r.is_accepting()) {
        return Some(format!(
            "route {:?} is not accepting connections",
            r.cfg.name
        ));
    }
    if let Some(waiting) = shared
        .stores
        .iter()
        .find_map(|s| super::workload::blocker(s))
    {
        return Some(waiting);
    }
    shared
        .stores
        .iter()
        .find_map(|s| credentials_blocker(s.source().to_string(), &s.current(), now))
}

fn credentials_blocker(source: String, creds: &Credentials, now: SystemTime) -> Option<String> {
    let leaf = &creds.leaf;
    let t = time_to_epoch(now);
    if t > leaf.not_after {
        return Some(format!(
            "identity certificate {} from {source} expired at {}",
            leaf.subject,
            fmt_time(leaf.not_after)
        ));
    }
    if t < leaf.not_before {
        return Some(format!(
            "identity certificate {} from {source} is not valid before {}",
            leaf.subject,
            fmt_time(leaf.not_before)
        ));
    }
    // Our own trust domain's anchors: federated ones vouch only for
    // other trust domains' peers.
    let own: Vec<_> = creds
        .trust
        .anchors
        .iter()
        .filter(|a| a.is_local())
        .collect();
    if own.is_empty() {
        return Some(format!("no trust anchors are in force from {source}"));
    }
    if !own.iter().any(|a| a.info.valid_at(now)) {
        return Some(format!("no trust anchor from {source} is currently valid"));
    }
    None
}

/// A note when the newest thing the poller did was reject a revision.
fn rejected_note(store: &CredentialStore) -> Option<String> {
    let st = store.status();
    let at = st.last_rejected_at?;
    if st.last_applied.is_some_and(|applied| applied > at) {
        return None;
    }
    Some(format!(
        "credential revision {} from {} was rejected (the previous one stays in force): {}",
        short(st.last_rejected_revision.as_deref().unwrap_or("?")),
        store.source(),
        st.last_rejected_error.as_deref().unwrap_or("unknown error")
    ))
}

/// A note while a newer revision waits to become valid.
fn pending_note(store: &CredentialStore) -> Option<String> {
    let p = store.status().pending?;
    Some(format!(
        "credential revision {} from {} is pending until {} (the current one stays in force): {}",
        short(&p.revision),
        store.source(),
        humantime::format_rfc3339_seconds(p.valid_from),
        p.reason
    ))
}

/// A revision hash shortened for one-line messages.
fn short(rev: &str) -> &str {
    rev.get(..12).unwrap_or(rev)
}

/// The `/status` document.
#[derive(Debug, Serialize)]
pub struct Status {
    pub ready: bool,
    pub ready_detail: String,
    pub draining: bool,
    pub routes: Vec<RouteStatus>,
    pub credentials: Vec<StoreStatus>,
    /// What the Landlock sandbox enforces (`--sandbox`).
    pub sandbox: crate::sandbox::SandboxStatus,
    /// Server routes whose target is on loopback: whether the application
    /// also listens outside loopback (see `crate::target_exposure`).
    pub target_exposure: Vec<crate::target_exposure::ExposureStatus>,
}

/// One route.
#[derive(Debug, Serialize)]
pub struct RouteStatus {
    pub name: String,
    pub mode: Mode,
    /// The bound address (port 0 resolved).
    pub listen: String,
    pub target: String,
    /// Server routes: the client identities accepted (`--allow-san`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_sans: Option<Vec<String>>,
    /// Client routes: the server identities expected (`--expect-san`, or
    /// the server name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_sans: Option<Vec<String>>,
    /// True with `--allow-any-san`: role pinning is off.
    pub any_san: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
    pub exclusive: bool,
    /// False once the route's accept loop has stopped.
    pub accepting: bool,
    pub live_connections: usize,
    /// Unauthenticated handshakes in flight (at most `max_handshakes`).
    pub pending_handshakes: usize,
    pub max_connections: usize,
    pub max_handshakes: usize,
    /// `--alpn` protocols (accepted by a server route, offered by a client).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub alpn: Vec<String>,
    /// `--allow-spki-sha256` / `--expect-spki-sha256` pins, base64.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub spki_pins: Vec<String>,
    /// Server routes: `--proxy-protocol v2`.
    pub proxy_protocol: bool,
    /// `--http-identity`: `xfcc` (the verified identity in an
    /// `X-Forwarded-Client-Cert` header to an HTTP target) or `off`.
    pub http_identity: &'static str,
    /// `--resumption`: TLS 1.3 session resumption, `on` or `off`.
    pub resumption: &'static str,
    /// The credential source this route uses (matches a `credentials[].source`).
    pub credentials: String,
    /// Transparent client routes: the destination rules, in order (the
    /// first match wins).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destinations: Option<Vec<DestinationStatus>>,
}

/// A route's `--http-identity` as `/status` shows it.
fn http_identity(cfg: &crate::proxy::settings::RouteConfig) -> &'static str {
    match cfg.http {
        Some(_) => "xfcc",
        None => "off",
    }
}

fn on_off(on: bool) -> &'static str {
    if on {
        "on"
    } else {
        "off"
    }
}

/// One destination rule of a transparent route.
#[derive(Debug, Serialize)]
pub struct DestinationStatus {
    /// `CIDR:PORT`, as normalised (`10.77.0.5/32:2100`, `[fd00::/8]:2100`).
    #[serde(rename = "match")]
    pub matches: String,
    pub tls_port: u16,
    pub expect_san: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
}

fn destinations(rules: &crate::proxy::transparent::Destinations) -> Vec<DestinationStatus> {
    rules
        .rules
        .iter()
        .map(|r| DestinationStatus {
            matches: r.matches.to_string(),
            tls_port: r.tls_port,
            expect_san: r.expect_san.iter().map(|p| p.to_string()).collect(),
            server_name: r.server_name.clone(),
        })
        .collect()
}

/// One credential store: the revision in force and the poller's history.
#[derive(Debug, Serialize)]
pub struct StoreStatus {
    pub source: String,
    /// SHA-256 of the files' contents.
    pub revision: String,
    pub identity: CertStatus,
    pub trust_anchors: Vec<AnchorStatus>,
    /// The CRLs of the trust in force (`ca.crl` or `--crl`, plus any kept
    /// from an earlier revision), one per issuer key, each with its state;
    /// empty when
    /// there is none.
    pub crls: Vec<CrlStatus>,
    /// Which certificates of a peer's chain the CRLs judge (`--crl-scope`).
    pub crl_scope: CrlScope,
    /// The deny-list in force (`deny` or `--deny-file`): entries by kind
    /// (`spki`, `serial`, `san`); all zero without one.
    pub deny: crate::credentials::DenyCounts,
    /// How a peer holding this trust judges our own certificate chain
    /// (the handshake's judgement): `ok`, or the failure reason
    /// (`revoked`, `revoked_status_unknown`, ...).
    pub identity_verdict: String,
    pub last_poll: Option<String>,
    pub last_applied: Option<String>,
    pub last_rejected: Option<Rejected>,
    /// A newer revision that is good but not valid yet.
    pub pending: Option<Pending>,
    /// False while the newest revision judged is not the one in force
    /// (rejected or pending); the `last_reload_successful` gauge.
    pub last_reload_successful: bool,
    /// A Workload API source's agent and SPIFFE identity (absent for
    /// directories and files).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload_api: Option<super::workload::WorkloadApiStatus>,
}

/// A certificate's identity and validity.
#[derive(Debug, Serialize)]
pub struct CertStatus {
    pub subject: String,
    pub serial: String,
    pub dns_sans: Vec<String>,
    pub uri_sans: Vec<String>,
    pub not_before: String,
    pub not_after: String,
    /// Negative once expired.
    pub expires_in_seconds: i64,
}

/// One trust anchor in force.
#[derive(Debug, Serialize)]
pub struct AnchorStatus {
    pub subject: String,
    pub serial: String,
    pub not_after: String,
    /// Set while an anchor removed from `ca.crt` is kept for `--trust-grace`.
    pub retire_at: Option<String>,
    /// The federated trust domain whose bundle holds it (absent for the
    /// source's own bundle).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trust_domain: Option<String>,
}

/// One CRL in force.
#[derive(Debug, Serialize)]
pub struct CrlStatus {
    /// The issuing CA's distinguished name.
    pub issuer: String,
    /// The CRL number in decimal; absent when the CRL carries none (it is
    /// then ordered by `this_update`).
    pub number: Option<String>,
    pub this_update: String,
    pub next_update: Option<String>,
    /// True once `next_update` has passed (the CRL is still enforced).
    pub stale: bool,
    /// How many serials it revokes.
    pub revoked: usize,
    /// `verified` (signed by a trusted CA key), `unverified` (its issuer is
    /// no CA we hold: enforced only against a peer-sent intermediate whose
    /// key verifies it), `ignored`
    /// (its CA is no longer trusted) or `pending` (dated in the future).
    pub state: &'static str,
    /// The CA whose key signed it, when known.
    pub signer: Option<String>,
    /// The state in words.
    pub detail: String,
    /// Set when the CRL is kept from an earlier revision: `newer_pending`
    /// or `issuer_graced`.
    pub kept: Option<Kept>,
}

/// The last revision the poller refused.
#[derive(Debug, Serialize)]
pub struct Rejected {
    /// The content hash (or, when the files could not be read, the read error).
    pub revision: String,
    pub error: String,
    pub at: Option<String>,
}

/// A revision waiting for a certificate in it to become valid; the poller
/// applies it on its first poll after `valid_from`.
#[derive(Debug, Serialize)]
pub struct Pending {
    pub revision: String,
    /// Why it is not in force yet.
    pub reason: String,
    pub valid_from: String,
    /// When the poller first saw it.
    pub since: String,
}

/// Builds the `/status` document at `now`.
pub fn status(shared: &Shared, now: SystemTime) -> Status {
    let ready = readiness(shared, now);
    Status {
        ready: ready.ready,
        ready_detail: ready.detail,
        draining: shared.is_draining(),
        routes: shared
            .routes
            .iter()
            .map(|r| {
                let sans: Vec<String> = r
                    .cfg
                    .peer_sans
                    .patterns()
                    .iter()
                    .map(|p| p.to_string())
                    .collect();
                let (allowed_sans, expected_sans) = match r.cfg.mode {
                    Mode::Server => (Some(sans), None),
                    Mode::Client => (None, Some(sans)),
                };
                RouteStatus {
                    name: r.cfg.name.clone(),
                    mode: r.cfg.mode,
                    listen: r.bound.to_string(),
                    target: r.cfg.target.to_string(),
                    allowed_sans,
                    expected_sans,
                    any_san: r.cfg.peer_sans == SanPolicy::Any,
                    server_name: r.cfg.server_name.clone(),
                    exclusive: r.cfg.exclusive,
                    accepting: r.is_accepting(),
                    live_connections: r.registry.live(),
                    pending_handshakes: r.pending.len(),
                    max_connections: r.cfg.max_connections,
                    max_handshakes: r.cfg.max_handshakes,
                    alpn: r
                        .cfg
                        .alpn
                        .iter()
                        .map(|p| String::from_utf8_lossy(p).into_owned())
                        .collect(),
                    spki_pins: r
                        .cfg
                        .spki_pins
                        .iter()
                        .map(crate::identity::pin::encode)
                        .collect(),
                    proxy_protocol: r.cfg.proxy_protocol,
                    http_identity: http_identity(&r.cfg),
                    resumption: on_off(r.cfg.resumption),
                    credentials: r.store.source().to_string(),
                    destinations: r.cfg.transparent.as_deref().map(destinations),
                }
            })
            .collect(),
        credentials: shared.stores.iter().map(|s| store_status(s, now)).collect(),
        sandbox: crate::sandbox::current(),
        target_exposure: shared.exposure.status(),
    }
}

fn store_status(store: &CredentialStore, now: SystemTime) -> StoreStatus {
    let creds = store.current();
    let st = store.status();
    let rfc = |t: SystemTime| humantime::format_rfc3339_seconds(t).to_string();
    StoreStatus {
        source: store.source().to_string(),
        revision: creds.revision.clone(),
        identity: cert_status(&creds.leaf, now),
        trust_anchors: creds
            .trust
            .anchors
            .iter()
            .map(|a| AnchorStatus {
                subject: a.info.subject.clone(),
                serial: a.info.serial.clone(),
                not_after: fmt_time(a.info.not_after),
                retire_at: a.retire_at.map(rfc),
                trust_domain: a.domain.clone(),
            })
            .collect(),
        crls: crl_statuses(&creds.trust.crls, now),
        crl_scope: creds.trust.scope,
        deny: creds.trust.deny.counts(),
        identity_verdict: identity_verdict(&creds, now),
        last_poll: st.last_poll.map(rfc),
        last_applied: st.last_applied.map(rfc),
        last_rejected: st.last_rejected_error.map(|error| Rejected {
            revision: st.last_rejected_revision.unwrap_or_default(),
            error,
            at: st.last_rejected_at.map(rfc),
        }),
        pending: st.pending.map(|p| Pending {
            revision: p.revision,
            reason: p.reason,
            valid_from: rfc(p.valid_from),
            since: rfc(p.since),
        }),
        last_reload_successful: st.last_reload_successful,
        workload_api: super::workload::status(store),
    }
}

fn crl_statuses(crls: &CrlSet, now: SystemTime) -> Vec<CrlStatus> {
    let t = time_to_epoch(now);
    crls.entries()
        .iter()
        .map(|e| {
            let c = &e.crl.info;
            CrlStatus {
                issuer: c.issuer.clone(),
                number: c.number.clone(),
                this_update: fmt_time(c.this_update),
                next_update: c.next_update.map(fmt_time),
                stale: c.is_stale(t),
                revoked: c.revoked,
                state: e.state.label(),
                signer: e.state.signer().map(|s| s.subject.clone()),
                detail: describe_state(&e.state),
                kept: e.kept,
            }
        })
        .collect()
}

/// Our own chain judged by the trust in force, as a peer would.
fn identity_verdict(creds: &Credentials, now: SystemTime) -> String {
    match creds.trust.judge_own(&creds.identity.cert, now) {
        Ok(()) => "ok".to_string(),
        Err(e) => crate::reason::FailureReason::from_tls(&e)
            .as_str()
            .to_string(),
    }
}

fn cert_status(c: &CertInfo, now: SystemTime) -> CertStatus {
    CertStatus {
        subject: c.subject.clone(),
        serial: c.serial.clone(),
        dns_sans: c.dns_sans.clone(),
        uri_sans: c.uri_sans.clone(),
        not_before: fmt_time(c.not_before),
        not_after: fmt_time(c.not_after),
        expires_in_seconds: c.not_after - time_to_epoch(now),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::pki::{DevCa, LeafSpec, Role};

    fn store(dir: &std::path::Path) -> std::sync::Arc<CredentialStore> {
        let ca = DevCa::new("status test CA", 30).expect("CA");
        let leaf = ca
            .issue(&LeafSpec::dns("replica.test", Role::Server, 2))
            .expect("leaf");
        CredentialStore::for_test(dir, &leaf, &ca)
    }

    #[test]
    fn identity_validity_decides_readiness() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let s = store(tmp.path());
        let creds = s.current();
        let src = || "src".to_string();
        let now = SystemTime::now();
        assert_eq!(credentials_blocker(src(), &creds, now), None);
        let late = now + Duration::from_secs(3 * 86_400);
        let why = credentials_blocker(src(), &creds, late).expect("expired");
        assert!(why.contains("expired at"), "{why}");
        assert!(!why.contains('\n'));
        let early = now - Duration::from_secs(3600);
        let why = credentials_blocker(src(), &creds, early).expect("not yet valid");
        assert!(why.contains("not valid before"), "{why}");
    }

    #[test]
    fn status_document_names_identity_and_anchors() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let s = store(tmp.path());
        let st = store_status(&s, SystemTime::now());
        assert_eq!(st.revision, s.current().revision);
        assert_eq!(st.identity.dns_sans, vec!["replica.test".to_string()]);
        assert!(st.identity.expires_in_seconds > 86_400);
        assert_eq!(st.trust_anchors.len(), 1);
        assert!(st.trust_anchors[0].subject.contains("status test CA"));
        assert!(st.last_rejected.is_none());
        assert!(st.pending.is_none());
        assert!(st.last_reload_successful);
        assert!(humantime::parse_rfc3339(&st.identity.not_after).is_ok());
    }

    #[test]
    fn short_never_panics() {
        assert_eq!(short("abc"), "abc");
        assert_eq!(short("0123456789abcdef"), "0123456789ab");
    }
}

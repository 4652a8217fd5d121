//! The SPIFFE Workload API as a credential source: the `spiffe` crate's
//! client streams X.509 contexts from the agent (`FetchX509SVID`, with the
//! `workload.spiffe.io: true` metadata the crate adds to every call); each
//! one becomes a [`RawRevision`] in the store's [`Feed`], and the store's
//! poller judges it exactly like a directory revision (same parse, same
//! validation, same atomic swap, same live re-verification).
//!
//! The agent's absence is a state, not an error: the client retries with a
//! capped backoff, the last good revision stays in force, and each change
//! between up and down is logged once.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures_util::StreamExt;
use spiffe::{WorkloadApiError, X509Context, X509Svid};
use tokio::sync::{watch, Notify};
use tracing::{info, warn};

use super::source::{RawFile, RawRevision};
use super::{CredError, CredentialSource, CredentialStore};

pub use super::agent_channel::KEEPALIVE_DEFAULT;

/// The environment variable a bare `--workload-api` reads.
pub const ENDPOINT_ENV: &str = "SPIFFE_ENDPOINT_SOCKET";

/// The first retry after a failed connection or a lost stream.
pub const BACKOFF_MIN: Duration = Duration::from_millis(200);
/// The longest wait between two attempts to reach the agent.
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// What the Workload API client last received, and the agent's state.
#[derive(Debug, Default)]
pub struct Feed {
    latest: Mutex<Option<Result<RawRevision, CredError>>>,
    agent: Mutex<AgentState>,
    /// Notified when a new context arrived: the store's poller wakes.
    pub wake: Arc<Notify>,
}

/// The agent as the client sees it (for `/status` and the gauges).
#[derive(Debug, Clone, Default)]
pub struct AgentState {
    /// A stream is open and has delivered a context.
    pub up: bool,
    /// When `up` last changed (start-up counts as a change to down).
    pub since: Option<SystemTime>,
    /// When the last context arrived.
    pub last_update: Option<SystemTime>,
    /// Why the last connection or stream ended.
    pub last_error: Option<String>,
}

impl Feed {
    /// The newest context as a revision, or why there is none.
    pub fn latest(&self) -> Option<Result<RawRevision, CredError>> {
        lock(&self.latest).clone()
    }

    /// A copy of the agent's state.
    pub fn agent(&self) -> AgentState {
        lock(&self.agent).clone()
    }

    fn push(&self, rev: Result<RawRevision, CredError>, now: SystemTime) {
        *lock(&self.latest) = Some(rev);
        lock(&self.agent).last_update = Some(now);
        self.wake.notify_one();
    }

    /// Records the agent up or down; true when that is a change (the
    /// caller logs it, once).
    fn mark(&self, up: bool, error: Option<String>, now: SystemTime) -> bool {
        let mut agent = lock(&self.agent);
        if error.is_some() {
            agent.last_error = error;
        }
        let changed = agent.up != up || agent.since.is_none();
        if changed {
            agent.up = up;
            agent.since = Some(now);
        }
        changed
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Plain values: a panic while held leaves nothing half-updated.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The next wait after a failed attempt: doubled from the last one, at
/// least [`BACKOFF_MIN`], at most [`BACKOFF_MAX`]; back to the minimum
/// after a session that delivered something.
pub fn next_backoff(last: Duration, delivered: bool) -> Duration {
    if delivered {
        return BACKOFF_MIN;
    }
    last.saturating_mul(2).clamp(BACKOFF_MIN, BACKOFF_MAX)
}

/// The SVID a context offers for `want` (`--svid`): exactly that SPIFFE
/// ID, or the first when none is named (the spec's default).
pub fn pick_svid<'a>(
    svids: &'a [Arc<X509Svid>],
    want: Option<&str>,
) -> Result<&'a X509Svid, String> {
    match want {
        None => svids
            .first()
            .map(AsRef::as_ref)
            .ok_or_else(|| "the context holds no SVID".to_string()),
        Some(id) => svids
            .iter()
            .find(|s| s.spiffe_id().to_string() == id)
            .map(AsRef::as_ref)
            .ok_or_else(|| {
                let offered: Vec<String> =
                    svids.iter().map(|s| s.spiffe_id().to_string()).collect();
                format!(
                    "no SVID with SPIFFE ID {id} (--svid); the agent offered [{}]",
                    offered.join(", ")
                )
            }),
    }
}

/// One X.509 context as a revision: the chosen SVID's chain (`tls.crt`),
/// its key (`tls.key`), its own trust domain's bundle (`ca.crt`) and every
/// other trust domain's bundle (federated, each trusted for its own trust
/// domain's IDs only), named after where they came from.
pub fn revision_from_context(
    ctx: &X509Context,
    want: Option<&str>,
    endpoint: &str,
) -> Result<RawRevision, CredError> {
    let at = |what: &str| PathBuf::from(format!("{endpoint} {what}"));
    let svid = match pick_svid(ctx.svids(), want) {
        Ok(s) => s,
        Err(detail) => {
            return Err(CredError::Parse {
                path: at("X509-SVID"),
                detail,
            });
        }
    };
    let own = svid.spiffe_id().trust_domain();
    let federated: Vec<(String, RawFile)> = ctx
        .bundle_set()
        .iter()
        .filter(|(td, _)| *td != own)
        .map(|(td, bundle)| {
            let ders: Vec<&[u8]> = bundle.authorities().iter().map(|c| c.as_bytes()).collect();
            let file = RawFile {
                path: at(&format!("federated bundle of {td}")),
                bytes: pem("CERTIFICATE", &ders),
            };
            (td.to_string(), file)
        })
        .collect();
    let Some(bundle) = ctx.bundle_set().get_ref(own) else {
        return Err(CredError::Parse {
            path: at("bundle"),
            detail: format!("no bundle for the SVID's trust domain {own}"),
        });
    };
    let chain: Vec<&[u8]> = svid.cert_chain().iter().map(|c| c.as_bytes()).collect();
    let anchors: Vec<&[u8]> = bundle.authorities().iter().map(|c| c.as_bytes()).collect();
    let cert = RawFile {
        path: at(&format!("X509-SVID {}", svid.spiffe_id())),
        bytes: pem("CERTIFICATE", &chain),
    };
    let key = RawFile {
        path: at("X509-SVID key"),
        bytes: pem("PRIVATE KEY", &[svid.private_key().as_bytes()]),
    };
    let ca = RawFile {
        path: at(&format!("bundle of {own}")),
        bytes: pem("CERTIFICATE", &anchors),
    };
    Ok(RawRevision::new(cert, key, ca).with_federated(federated))
}

/// DER blocks as PEM text of one label.
fn pem(label: &str, ders: &[&[u8]]) -> Vec<u8> {
    use base64::Engine;
    let mut out = String::new();
    for der in ders {
        out.push_str(&format!("-----BEGIN {label}-----\n"));
        let b64 = base64::engine::general_purpose::STANDARD.encode(der);
        for line in b64.as_bytes().chunks(64) {
            out.push_str(&String::from_utf8_lossy(line));
            out.push('\n');
        }
        out.push_str(&format!("-----END {label}-----\n"));
    }
    out.into_bytes()
}

/// True for an error that ends the stream (the agent went away, refused
/// us, or has no identity for us); false for a context that arrived but
/// does not parse, which is a rejected revision.
pub fn ends_stream(e: &WorkloadApiError) -> bool {
    matches!(
        e,
        WorkloadApiError::Transport(_)
            | WorkloadApiError::PermissionDenied(_)
            | WorkloadApiError::NoIdentityIssued
            | WorkloadApiError::Endpoint(_)
            | WorkloadApiError::MissingEndpointSocket
            | WorkloadApiError::NotUnicodeEndpointSocket(_)
    )
}

/// Runs the client of `store` (a Workload API source) until `halt`; a
/// quiet connection is pinged every `keepalive`
/// (`credentials::agent_channel`).
pub async fn run(
    store: Arc<CredentialStore>,
    mut halt: watch::Receiver<bool>,
    keepalive: Duration,
) {
    let (Some(feed), CredentialSource::WorkloadApi { endpoint, svid }) =
        (store.feed(), store.source())
    else {
        return;
    };
    let mut wait = Duration::ZERO;
    let mut pinned = None;
    publish(&feed);
    loop {
        let (delivered, why) = tokio::select! {
            r = session(endpoint, keepalive, svid.as_deref(), &feed, &mut pinned) => r,
            _ = halt.wait_for(|h| *h) => return,
        };
        let now = SystemTime::now();
        if feed.mark(false, Some(why.clone()), now) {
            warn!(target: "mtls_sidecar::workload_api", endpoint = %endpoint, error = %why, "Workload API agent unreachable; the last good revision (if any) stays in force; retrying with capped backoff");
        }
        publish(&feed);
        wait = next_backoff(wait, delivered);
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = halt.wait_for(|h| *h) => return,
        }
    }
}

/// One connection and its stream: true when it delivered a context, and
/// why it ended.
async fn session(
    endpoint: &str,
    keepalive: Duration,
    want: Option<&str>,
    feed: &Feed,
    pinned: &mut Option<String>,
) -> (bool, String) {
    let client = match super::agent_channel::connect(endpoint, keepalive).await {
        Ok(c) => c,
        Err(e) => return (false, format!("cannot connect: {e}")),
    };
    let stream = match client.stream_x509_contexts().await {
        Ok(s) => s,
        Err(e) => return (false, format!("FetchX509SVID failed: {e}")),
    };
    consume(stream, want, endpoint, feed, pinned).await
}

/// Hands each context of one stream to `feed` until the stream ends: true
/// when a context parsed (the backoff then starts again from the
/// minimum), and why it ended. An error that ends the stream
/// ([`ends_stream`]) is the agent going away, not a rejected revision:
/// the feed keeps what it had.
async fn consume<S>(
    mut stream: S,
    want: Option<&str>,
    endpoint: &str,
    feed: &Feed,
    pinned: &mut Option<String>,
) -> (bool, String)
where
    S: futures_util::Stream<Item = Result<X509Context, WorkloadApiError>> + Unpin,
{
    let mut delivered = false;
    while let Some(item) = stream.next().await {
        let now = SystemTime::now();
        let rev = match item {
            Ok(ctx) => revision_from_context(&ctx, want, endpoint).and_then(|rev| {
                let domain = pick_svid(ctx.svids(), want)
                    .map(|s| s.spiffe_id().trust_domain().to_string())
                    .unwrap_or_default();
                keep_trust_domain(pinned, &domain)
                    .map(|()| rev)
                    .map_err(|detail| CredError::Parse {
                        path: PathBuf::from(format!("{endpoint} X509-SVID")),
                        detail,
                    })
            }),
            Err(e) if ends_stream(&e) => return (delivered, format!("stream failed: {e}")),
            Err(e) => Err(CredError::Parse {
                path: PathBuf::from(format!("{endpoint} X.509 context")),
                detail: e.to_string(),
            }),
        };
        // Only a context that parsed resets the backoff: an agent sending
        // one bad context and hanging up would otherwise be redialled
        // every 200 ms.
        delivered |= rev.is_ok();
        if feed.mark(true, None, now) {
            info!(target: "mtls_sidecar::workload_api", endpoint = %endpoint, "Workload API agent reached; X.509 contexts streaming");
        }
        feed.push(rev, now);
        publish(feed);
    }
    (delivered, "the agent ended the stream".to_string())
}

/// Holds the source to the trust domain of the first context that parsed.
/// Our own bundle's anchors belong to "our" trust domain, whichever that
/// is now: were the SVID to move from a.td to b.td, a trust grace would
/// keep a.td's CA among our own anchors, vouching for b.td's IDs. So a
/// context in another trust domain is a rejected revision (the last good
/// one stays); moving trust domains takes a restart.
fn keep_trust_domain(pinned: &mut Option<String>, domain: &str) -> Result<(), String> {
    match pinned {
        None => {
            *pinned = Some(domain.to_string());
            Ok(())
        }
        Some(p) if p.as_str() == domain => Ok(()),
        Some(p) => Err(format!(
            "the SVID's trust domain changed from {p} to {domain}: restart the sidecar to move to another trust domain"
        )),
    }
}

fn publish(feed: &Feed) {
    let agent = feed.agent();
    let down_since = match (agent.up, agent.since) {
        (false, Some(t)) => Some(crate::identity::time_to_epoch(t)),
        _ => None,
    };
    crate::metrics::workload_api(agent.up, down_since);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_trust_domain_holds() {
        let mut pinned = None;
        assert_eq!(keep_trust_domain(&mut pinned, "a.td"), Ok(()));
        assert_eq!(keep_trust_domain(&mut pinned, "a.td"), Ok(()));
        let moved = keep_trust_domain(&mut pinned, "b.td").unwrap_err();
        assert!(moved.contains("from a.td to b.td"), "{moved}");
        assert_eq!(pinned.as_deref(), Some("a.td"));
    }

    #[test]
    fn backoff_doubles_from_the_minimum_to_the_cap_and_resets_after_a_delivery() {
        let mut wait = Duration::ZERO;
        let mut seen = Vec::new();
        for _ in 0..8 {
            wait = next_backoff(wait, false);
            seen.push(wait);
        }
        assert_eq!(seen[0], BACKOFF_MIN);
        assert_eq!(seen[1], BACKOFF_MIN * 2);
        assert!(seen.windows(2).all(|w| w[1] >= w[0]));
        assert_eq!(*seen.last().unwrap(), BACKOFF_MAX);
        assert_eq!(next_backoff(BACKOFF_MAX, true), BACKOFF_MIN);
        assert_eq!(next_backoff(Duration::MAX, false), BACKOFF_MAX);
    }

    /// A context of one SVID for `id` (an X.509-SVID leaf: CA false,
    /// digitalSignature), issued by a fresh CA, with that CA as its trust
    /// domain's bundle.
    fn context(id: &str) -> X509Context {
        use rcgen::{CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType};
        let ca = crate::pki::DevCa::new("td.test CA", 1).expect("CA");
        let issuer = Issuer::from_ca_cert_pem(
            &ca.cert_pem,
            KeyPair::from_pem(&ca.key_pem).expect("CA key"),
        )
        .expect("issuer");
        let mut params = CertificateParams::default();
        params.subject_alt_names = vec![SanType::URI(id.try_into().expect("URI"))];
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let key = KeyPair::generate().expect("key");
        let leaf = params.signed_by(&key, &issuer).expect("leaf");
        let svid = X509Svid::parse_from_der(leaf.der(), &key.serialize_der()).expect("SVID");
        let ca_der = issuer_der(&ca.cert_pem);
        let td = svid.spiffe_id().trust_domain().clone();
        let mut bundles = spiffe::X509BundleSet::new();
        bundles.add_bundle(spiffe::X509Bundle::parse_from_der(td, &ca_der).expect("bundle"));
        X509Context::new([Arc::new(svid)], bundles)
    }

    fn issuer_der(pem: &str) -> Vec<u8> {
        use rustls_pki_types::pem::PemObject;
        rustls_pki_types::CertificateDer::from_pem_slice(pem.as_bytes())
            .expect("CA DER")
            .to_vec()
    }

    /// What one stream of these items does to a fresh feed.
    fn consumed(items: Vec<Result<X509Context, WorkloadApiError>>) -> (bool, String, Feed) {
        let feed = Feed::default();
        let mut pinned = None;
        let stream = futures_util::stream::iter(items);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let (delivered, why) =
            rt.block_on(consume(stream, None, "unix:///agent", &feed, &mut pinned));
        (delivered, why, feed)
    }

    #[test]
    fn a_stream_error_ends_the_session_and_is_no_rejected_revision() {
        let (delivered, why, feed) = consumed(vec![
            Ok(context("spiffe://td.test/w")),
            Err(WorkloadApiError::PermissionDenied("gone".into())),
        ]);
        assert!(delivered);
        assert!(why.starts_with("stream failed: "), "{why}");
        // The context before the error is still the feed's newest: the
        // error is no revision for the store to reject.
        assert!(matches!(feed.latest(), Some(Ok(_))), "{:?}", feed.latest());
        for e in [
            WorkloadApiError::NoIdentityIssued,
            WorkloadApiError::MissingEndpointSocket,
            WorkloadApiError::PermissionDenied("no".into()),
        ] {
            assert!(ends_stream(&e), "{e}");
        }
        assert!(!ends_stream(&WorkloadApiError::EmptyResponse));
    }

    #[test]
    fn a_context_that_does_not_parse_is_a_rejected_revision_and_no_delivery() {
        let (delivered, why, feed) = consumed(vec![Err(WorkloadApiError::EmptyResponse)]);
        assert!(!delivered, "a bad context must not reset the backoff");
        assert_eq!(why, "the agent ended the stream");
        assert!(matches!(feed.latest(), Some(Err(_))), "{:?}", feed.latest());
    }

    #[test]
    fn a_session_that_delivered_a_context_resets_the_backoff() {
        for items in [
            vec![Ok(context("spiffe://td.test/w"))],
            vec![
                Ok(context("spiffe://td.test/w")),
                Ok(context("spiffe://td.test/w")),
            ],
            vec![
                Err(WorkloadApiError::EmptyResponse),
                Ok(context("spiffe://td.test/w")),
                Err(WorkloadApiError::EmptyResponse),
            ],
        ] {
            let n = items.len();
            let (delivered, _, feed) = consumed(items);
            assert!(delivered, "{n} items");
            assert!(feed.agent().up);
        }
    }

    #[test]
    fn agent_state_changes_are_reported_once() {
        let feed = Feed::default();
        let t = SystemTime::UNIX_EPOCH;
        assert!(
            feed.mark(false, Some("down".into()), t),
            "the first state is a change"
        );
        assert!(!feed.mark(false, Some("still down".into()), t));
        assert_eq!(feed.agent().last_error.as_deref(), Some("still down"));
        assert!(feed.mark(true, None, t));
        assert!(!feed.mark(true, None, t));
        assert!(feed.mark(false, None, t));
    }
}

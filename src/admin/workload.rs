//! The Workload API part of `/status` and `/readyz`: what the agent sent
//! (the SPIFFE ID in force, its trust domain, the trust domains whose
//! bundles are in force) and whether it is reachable.

use std::time::SystemTime;

use serde::Serialize;

use crate::credentials::{Anchor, CredentialStore, Trust};

/// A Workload API source's state, beside its store's revision.
#[derive(Debug, Serialize)]
pub struct WorkloadApiStatus {
    /// The SPIFFE ID of the SVID in force (none before the first context).
    pub spiffe_id: Option<String>,
    /// Its trust domain: its bundle vouches for peers of this domain.
    pub trust_domain: Option<String>,
    /// Every trust domain with a bundle in force, ours first then the
    /// federated ones in name order, each with its anchors.
    pub trust_domains: Vec<TrustDomainStatus>,
    /// A stream is open and delivering.
    pub agent_up: bool,
    /// Since when the agent is up (or down).
    pub since: Option<String>,
    /// When the last X.509 context arrived.
    pub last_update: Option<String>,
    /// Why the last connection or stream ended.
    pub last_error: Option<String>,
}

/// One trust domain's bundle in force.
#[derive(Debug, Serialize)]
pub struct TrustDomainStatus {
    pub trust_domain: String,
    /// False for the SVID's own trust domain.
    pub federated: bool,
    /// Anchors in force, those in their `--trust-grace` included.
    pub anchors: usize,
    /// Of those, anchors dropped from the bundle and kept until their
    /// grace ends.
    pub retiring: usize,
}

/// The trust domains of the trust in force: ours (named `own`), then each
/// federated one.
fn trust_domains(trust: &Trust, own: Option<&str>) -> Vec<TrustDomainStatus> {
    let entry = |td: &str, federated: bool, anchors: Vec<&Anchor>| TrustDomainStatus {
        trust_domain: td.to_string(),
        federated,
        anchors: anchors.len(),
        retiring: anchors.iter().filter(|a| a.retire_at.is_some()).count(),
    };
    let mut out = Vec::new();
    if let Some(own) = own {
        out.push(entry(
            own,
            false,
            trust.anchors.iter().filter(|a| a.is_local()).collect(),
        ));
    }
    for (td, anchors) in trust.federated_domains() {
        out.push(entry(td, true, anchors));
    }
    out
}

/// The status of `store`'s Workload API client, when it has one.
pub fn status(store: &CredentialStore) -> Option<WorkloadApiStatus> {
    let feed = store.feed()?;
    let agent = feed.agent();
    let rfc = |t: SystemTime| humantime::format_rfc3339_seconds(t).to_string();
    let spiffe_id = store
        .has_revision()
        .then(|| store.current().leaf.uri_sans.first().cloned())
        .flatten();
    let trust_domain = spiffe_id.as_deref().and_then(|id| {
        let rest = id.strip_prefix("spiffe://")?;
        rest.split('/').next().map(str::to_string)
    });
    let trust_domains = match store.has_revision() {
        true => trust_domains(&store.current().trust, trust_domain.as_deref()),
        false => Vec::new(),
    };
    Some(WorkloadApiStatus {
        spiffe_id,
        trust_domain,
        trust_domains,
        agent_up: agent.up,
        since: agent.since.map(rfc),
        last_update: agent.last_update.map(rfc),
        last_error: agent.last_error,
    })
}

/// Why a Workload API store is not ready before its first good context.
pub fn blocker(store: &CredentialStore) -> Option<String> {
    let feed = store.feed()?;
    if store.has_revision() {
        return None;
    }
    let why = match (feed.agent().last_error, store.status().last_rejected_error) {
        (_, Some(rejected)) => format!("its context was rejected: {rejected}"),
        (Some(error), None) => error,
        (None, None) => "connecting".to_string(),
    };
    Some(format!("no X.509-SVID from {} yet: {why}", store.source()))
}

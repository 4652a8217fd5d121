//! The Workload API part of `/status` and `/readyz`: what the agent sent
//! (the SPIFFE ID in force, its trust domain, the federated bundles not
//! trusted) and whether it is reachable.

use std::time::SystemTime;

use serde::Serialize;

use crate::credentials::CredentialStore;

/// A Workload API source's state, beside its store's revision.
#[derive(Debug, Serialize)]
pub struct WorkloadApiStatus {
    /// The SPIFFE ID of the SVID in force (none before the first context).
    pub spiffe_id: Option<String>,
    /// Its trust domain: the only one whose bundle vouches for peers.
    pub trust_domain: Option<String>,
    /// A stream is open and delivering.
    pub agent_up: bool,
    /// Since when the agent is up (or down).
    pub since: Option<String>,
    /// When the last X.509 context arrived.
    pub last_update: Option<String>,
    /// Why the last connection or stream ended.
    pub last_error: Option<String>,
    /// Trust domains of federated bundles received and not trusted.
    pub federated_ignored: Vec<String>,
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
    Some(WorkloadApiStatus {
        spiffe_id,
        trust_domain,
        agent_up: agent.up,
        since: agent.since.map(rfc),
        last_update: agent.last_update.map(rfc),
        last_error: agent.last_error,
        federated_ignored: agent.federated_ignored,
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

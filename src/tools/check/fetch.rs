//! `check --workload-api [ENDPOINT]`: one X.509 context fetched from the
//! agent, said what it holds, then judged by the same checks as a
//! directory (the revision is what the sidecar would build from it). The
//! previews (`--against`, alone or with `--config`) read a Workload API
//! candidate through [`read`] too, so they judge what the agent hands out
//! now rather than refuse a source that has no file to read.

use std::time::Duration;

use super::{Input, Request};
use crate::credentials::workload::{revision_from_context, KEEPALIVE_DEFAULT};
use crate::credentials::{CredentialSource, RawRevision};

/// How long `check` waits for the agent's first context.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// The request with a Workload API source replaced by the revision fetched
/// from it, and what was fetched, one line each; any other request as it
/// is. An agent that cannot be reached, or a context the sidecar could not
/// use at all, is the error.
pub(super) fn resolve(req: Request) -> Result<(Request, Vec<String>), String> {
    let Input::Source(source @ CredentialSource::WorkloadApi { .. }) = &req.input else {
        return Ok((req, Vec::new()));
    };
    let (raw, said) = fetch(source)?;
    let req = Request {
        input: Input::Fetched(raw),
        ..req
    };
    Ok((req, said))
}

/// The revision `source` holds now, for a preview (`--against`): its files
/// read, or, for a Workload API source, one context fetched from the agent
/// (its error prefixed with the endpoint). A context with federated
/// bundles is refused: the preview judges peers against one set of
/// anchors, without the per-trust-domain scoping the sidecar applies, so it
/// would report federated peers as untrusted (and could miss a scoping
/// refusal).
pub(super) fn read(source: &CredentialSource) -> Result<RawRevision, String> {
    match source {
        CredentialSource::WorkloadApi { .. } => {
            let (raw, _) = fetch(source)?;
            if raw.federated.is_empty() {
                return Ok(raw);
            }
            let domains: Vec<&str> = raw.federated.iter().map(|(td, _)| td.as_str()).collect();
            Err(format!(
                "the context carries federated bundles ({}): a preview judges one trust \
                 domain's anchors only and cannot tell what the sidecar would do with \
                 federated peers",
                domains.join(", ")
            ))
        }
        _ => source.read().map_err(|e| e.to_string()),
    }
}

/// One context fetched from a Workload API source as a revision, and what
/// it held, one line each.
fn fetch(source: &CredentialSource) -> Result<(RawRevision, Vec<String>), String> {
    let CredentialSource::WorkloadApi { endpoint, svid } = source else {
        return Err(format!("{source}: not a Workload API source"));
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a runtime: {e}"))?;
    let ctx = rt.block_on(async {
        // The sidecar's own channel: the same dialling, and its causes said.
        let fetch = async {
            let client =
                crate::credentials::agent_channel::connect(endpoint, KEEPALIVE_DEFAULT).await?;
            client.fetch_x509_context().await.map_err(|e| e.to_string())
        };
        tokio::time::timeout(FETCH_TIMEOUT, fetch).await
    });
    let ctx = match ctx {
        Err(_) => {
            return Err(format!(
                "{endpoint}: no X.509 context within {FETCH_TIMEOUT:?}"
            ))
        }
        Ok(Err(e)) => return Err(format!("{endpoint}: {e}")),
        Ok(Ok(ctx)) => ctx,
    };
    let mut said = vec![format!("fetched from {endpoint}:")];
    for s in ctx.svids() {
        said.push(format!("  SVID {}", s.spiffe_id()));
    }
    for (td, bundle) in ctx.bundle_set().iter() {
        said.push(format!(
            "  bundle of {td}: {} authorities",
            bundle.authorities().len()
        ));
    }
    let raw = revision_from_context(&ctx, svid.as_deref(), endpoint).map_err(|e| e.to_string())?;
    if !raw.federated.is_empty() {
        let domains: Vec<&str> = raw.federated.iter().map(|(td, _)| td.as_str()).collect();
        said.push(format!(
            "  federated bundles, each trusted for its own trust domain's IDs only: {}",
            domains.join(", ")
        ));
    }
    said.push(format!("  judged: {}", raw.cert.path.display()));
    Ok((raw, said))
}

//! Where a route's (or every route's) certificate, key, CA bundle, CRL
//! and deny-list come from, as written by a user, and its resolution to a
//! `CredentialSource`: a directory or the three files, never a mix.

use std::path::PathBuf;

use serde::Deserialize;

use crate::credentials::workload::ENDPOINT_ENV;
use crate::credentials::CredentialSource;

use super::{invalid, ConfigError};

/// Where credentials come from, as written by a user.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CredentialSpec {
    pub tls_dir: Option<PathBuf>,
    /// With `tls_dir`: the directory of `ca.crt` (and optionally `ca.crl`,
    /// `intermediates`, `deny`) instead of `tls_dir`'s.
    pub trust_dir: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub ca: Option<PathBuf>,
    /// A CRL file beside `cert`/`key`/`ca` (a directory's is its `ca.crl`).
    pub crl: Option<PathBuf>,
    /// Known intermediate CAs beside `cert`/`key`/`ca` (a directory's is
    /// its `intermediates`): CRL signers, never trust anchors.
    pub intermediates: Option<PathBuf>,
    /// A deny-list beside `cert`/`key`/`ca` (a directory's is its `deny`).
    pub deny: Option<PathBuf>,
    /// The SPIFFE Workload API endpoint (`unix:///path`); empty: the
    /// `SPIFFE_ENDPOINT_SOCKET` environment variable's.
    pub workload_api: Option<String>,
    /// Which SVID of the Workload API to use (its SPIFFE ID).
    pub svid: Option<String>,
}

impl CredentialSpec {
    /// Resolves to a source; `prefix` qualifies field names in messages.
    pub fn to_source(&self, prefix: &str) -> Result<Option<CredentialSource>, ConfigError> {
        if let Some(source) = self.workload_source(prefix)? {
            return Ok(Some(source));
        }
        if self.crl.is_some() && self.cert.is_none() {
            return Err(invalid(
                format!("{prefix}crl"),
                "goes with --cert/--key/--ca; a directory's CRL is its ca.crl",
            ));
        }
        if self.intermediates.is_some() && self.cert.is_none() {
            return Err(invalid(
                format!("{prefix}intermediates"),
                "goes with --cert/--key/--ca; a directory's is its intermediates file",
            ));
        }
        if self.deny.is_some() && self.cert.is_none() {
            return Err(invalid(
                format!("{prefix}deny"),
                "goes with --cert/--key/--ca; a directory's deny-list is its deny file",
            ));
        }
        if let Some(trust) = &self.trust_dir {
            return match &self.tls_dir {
                Some(identity)
                    if self.cert.is_none() && self.key.is_none() && self.ca.is_none() =>
                {
                    Ok(Some(CredentialSource::DirPair {
                        identity: identity.clone(),
                        trust: trust.clone(),
                    }))
                }
                _ => Err(invalid(
                    format!("{prefix}trust-dir"),
                    "goes with --tls-dir (its tls.crt and tls.key), not with --cert/--key/--ca",
                )),
            };
        }
        match (&self.tls_dir, &self.cert, &self.key, &self.ca) {
            (None, None, None, None) => Ok(None),
            (Some(dir), None, None, None) => Ok(Some(CredentialSource::Dir(dir.clone()))),
            (None, Some(cert), Some(key), Some(ca)) => Ok(Some(CredentialSource::Files {
                cert: cert.clone(),
                key: key.clone(),
                ca: ca.clone(),
                crl: self.crl.clone(),
                intermediates: self.intermediates.clone(),
                deny: self.deny.clone(),
            })),
            (Some(_), _, _, _) => Err(invalid(
                format!("{prefix}tls-dir"),
                "give either a directory or --cert/--key/--ca, not both",
            )),
            _ => Err(invalid(
                format!("{prefix}cert/key/ca"),
                "--cert, --key and --ca must be given together",
            )),
        }
    }
}

impl CredentialSpec {
    /// A Workload API source, when one is named: alone (no directory, no
    /// files), at a `unix:` endpoint (empty: `SPIFFE_ENDPOINT_SOCKET`'s).
    fn workload_source(&self, prefix: &str) -> Result<Option<CredentialSource>, ConfigError> {
        let Some(given) = &self.workload_api else {
            if self.svid.is_some() {
                return Err(invalid(
                    format!("{prefix}svid"),
                    "picks an SVID of the Workload API: give --workload-api too",
                ));
            }
            return Ok(None);
        };
        let files = [&self.cert, &self.key, &self.ca, &self.crl]
            .into_iter()
            .chain([&self.intermediates, &self.deny])
            .any(Option::is_some);
        if self.tls_dir.is_some() || self.trust_dir.is_some() || files {
            return Err(invalid(
                format!("{prefix}workload-api"),
                "give either the Workload API or a directory or --cert/--key/--ca, not both",
            ));
        }
        let endpoint = workload_endpoint(given, std::env::var(ENDPOINT_ENV).ok())
            .map_err(|e| invalid(format!("{prefix}workload-api"), e))?;
        let svid = match &self.svid {
            Some(id) => Some(svid_id(id).map_err(|e| invalid(format!("{prefix}svid"), e))?),
            None => None,
        };
        Ok(Some(CredentialSource::WorkloadApi { endpoint, svid }))
    }
}

/// The endpoint to dial: the one given, or (given empty) the environment
/// variable's; a Unix socket, `unix:///path` or `unix:/path`.
pub fn workload_endpoint(given: &str, env: Option<String>) -> Result<String, String> {
    let endpoint = if given.is_empty() {
        env.filter(|e| !e.is_empty()).ok_or_else(|| {
            format!("given without an endpoint and {ENDPOINT_ENV} is not set (or empty)")
        })?
    } else {
        given.to_string()
    };
    let path = endpoint
        .strip_prefix("unix://")
        .or_else(|| endpoint.strip_prefix("unix:"))
        .ok_or_else(|| format!("{endpoint:?}: expected unix:///path/to/agent.sock"))?;
    if !path.starts_with('/') {
        return Err(format!("{endpoint:?}: the socket path must be absolute"));
    }
    Ok(endpoint)
}

/// A `--svid` value: a SPIFFE ID.
fn svid_id(id: &str) -> Result<String, String> {
    spiffe::SpiffeId::new(id)
        .map(|s| s.to_string())
        .map_err(|e| format!("{id:?} is not a SPIFFE ID: {e}"))
}

/// A client route whose identity comes from the Workload API expects a
/// SPIFFE ID: SVIDs carry URI SANs only, so the default expectation (the
/// target's host name) would refuse every server.
pub(super) fn spiffe_expectation(expect_san: &[String]) -> Result<(), String> {
    if expect_san.iter().any(|s| s.starts_with("spiffe://")) {
        return Ok(());
    }
    Err("required with --workload-api: name the server's SPIFFE ID \
         (--expect-san / expect_san spiffe://trust.domain/path); an SVID is \
         identified by its SPIFFE ID (a URI SAN), and a DNS name is matched \
         only on a peer with one"
        .into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_is_a_unix_socket_given_or_from_the_environment() {
        let env = Some("unix:///run/agent.sock".to_string());
        assert_eq!(
            workload_endpoint("", env.clone()).as_deref(),
            Ok("unix:///run/agent.sock")
        );
        assert_eq!(
            workload_endpoint("unix:/a.sock", env).as_deref(),
            Ok("unix:/a.sock")
        );
        assert!(workload_endpoint("", None)
            .unwrap_err()
            .contains("SPIFFE_ENDPOINT_SOCKET"));
        assert!(workload_endpoint("", Some(String::new())).is_err());
        assert!(workload_endpoint("tcp://127.0.0.1:1", None).is_err());
        assert!(workload_endpoint("unix://relative.sock", None).is_err());
        assert!(workload_endpoint("/run/agent.sock", None).is_err());
    }

    #[test]
    fn a_client_route_expects_some_spiffe_id() {
        assert!(spiffe_expectation(&[]).is_err());
        assert!(spiffe_expectation(&["replica.test".into()]).is_err());
        assert!(spiffe_expectation(&["replica.test".into(), "spiffe://td/r".into()]).is_ok());
    }
}

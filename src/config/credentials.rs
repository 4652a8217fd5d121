//! Where a route's (or every route's) certificate, key, CA bundle and CRL
//! come from, as written by a user, and its resolution to a
//! `CredentialSource`: a directory or the three files, never a mix.

use std::path::PathBuf;

use serde::Deserialize;

use crate::credentials::CredentialSource;

use super::{invalid, ConfigError};

/// Where credentials come from, as written by a user.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CredentialSpec {
    pub tls_dir: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub ca: Option<PathBuf>,
    /// A CRL file beside `cert`/`key`/`ca` (a directory's is its `ca.crl`).
    pub crl: Option<PathBuf>,
    /// Known intermediate CAs beside `cert`/`key`/`ca` (a directory's is
    /// its `intermediates`): CRL signers, never trust anchors.
    pub intermediates: Option<PathBuf>,
}

impl CredentialSpec {
    /// Resolves to a source; `prefix` qualifies field names in messages.
    pub fn to_source(&self, prefix: &str) -> Result<Option<CredentialSource>, ConfigError> {
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
        match (&self.tls_dir, &self.cert, &self.key, &self.ca) {
            (None, None, None, None) => Ok(None),
            (Some(dir), None, None, None) => Ok(Some(CredentialSource::Dir(dir.clone()))),
            (None, Some(cert), Some(key), Some(ca)) => Ok(Some(CredentialSource::Files {
                cert: cert.clone(),
                key: key.clone(),
                ca: ca.clone(),
                crl: self.crl.clone(),
                intermediates: self.intermediates.clone(),
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

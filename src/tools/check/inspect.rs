//! The checks `check` runs, in dependency order. Each one reuses the piece
//! of [`crate::credentials`] the sidecar itself loads with, so a file is
//! judged exactly as the proxy would judge it; a check whose input did not
//! survive an earlier check is reported as SKIP rather than failing twice.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use rustls::crypto::CryptoProvider;
use rustls::sign::{CertifiedKey, SigningKey};
use rustls::{InconsistentKeys, RootCertStore};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::report::Report;
use super::steps::{present, show, step, Files};
use super::{Input, Request};
use crate::credentials::revocation::describe_state;
use crate::credentials::{
    fmt_time, parse_certs, parse_key, read_file, root_store, validate, verify_chain, CredError,
    CredentialSource, RawFile, RawRevision, CA_FILE, CERT_FILE, CRL_FILE, KEY_FILE,
};
use crate::identity::{time_to_epoch, CertInfo};

/// The three paths as a user knows them. A Kubernetes volume's user-visible
/// names are symlinks into `..data`, so reading them reads the live revision.
fn paths(source: &CredentialSource) -> [PathBuf; 3] {
    match source {
        CredentialSource::Dir(d) => [d.join(CERT_FILE), d.join(KEY_FILE), d.join(CA_FILE)],
        CredentialSource::DirPair { identity, trust } => [
            identity.join(CERT_FILE),
            identity.join(KEY_FILE),
            trust.join(CA_FILE),
        ],
        CredentialSource::Files { cert, key, ca, .. } => [cert.clone(), key.clone(), ca.clone()],
        CredentialSource::WorkloadApi { endpoint, .. } => {
            [endpoint.into(), endpoint.into(), endpoint.into()]
        }
    }
}

fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

pub(super) fn run(req: &Request, provider: &Arc<CryptoProvider>, now: SystemTime) -> Report {
    let (mut r, files) = match &req.input {
        Input::Source(source) => {
            let mut r = Report::new(source.to_string());
            let paths = paths(source);
            let mut got: [Option<RawFile>; 3] = [None, None, None];
            for (i, name) in [CERT_FILE, KEY_FILE, CA_FILE].into_iter().enumerate() {
                let read = read_file(&paths[i]).map_err(|e| e.to_string());
                got[i] = present(&mut r, name, Some(read));
            }
            (r, Files { paths, got })
        }
        Input::Secret { from, ca } => super::secret::files(from, ca.as_deref()),
        Input::Fetched(raw) => {
            let mut r = Report::new(raw.cert.path.display().to_string());
            let paths = [
                raw.cert.path.clone(),
                raw.key.path.clone(),
                raw.ca.path.clone(),
            ];
            let files = [&raw.cert, &raw.key, &raw.ca];
            let mut got: [Option<RawFile>; 3] = [None, None, None];
            for (i, name) in [CERT_FILE, KEY_FILE, CA_FILE].into_iter().enumerate() {
                got[i] = present(&mut r, name, Some(Ok(files[i].clone())));
            }
            (r, Files { paths, got })
        }
    };
    let Files {
        paths: [cert_path, key_path, ca_path],
        got: [cert_file, key_file, ca_file],
    } = files;

    // PEM blocks of the right kind.
    let unread = |name: &str| format!("{name} could not be read");
    let cert_pem = step(
        &mut r,
        "pem",
        Some(CERT_FILE),
        cert_file.as_ref(),
        &unread(CERT_FILE),
        |f| {
            let certs = parse_certs(f).map_err(|e| e.to_string())?;
            let d = format!("{}: {}", show(&f.path), plural(certs.len(), "certificate"));
            Ok((certs, d))
        },
    );
    let key_pem = step(
        &mut r,
        "pem",
        Some(KEY_FILE),
        key_file.as_ref(),
        &unread(KEY_FILE),
        |f| {
            let key = parse_key(f).map_err(|e| e.to_string())?;
            let kind = match &key {
                PrivateKeyDer::Pkcs8(_) => "PKCS#8",
                PrivateKeyDer::Sec1(_) => "SEC1",
                PrivateKeyDer::Pkcs1(_) => "PKCS#1",
                _ => "a",
            };
            Ok((key, format!("{}: {kind} private key", show(&f.path))))
        },
    );
    let ca_pem = step(
        &mut r,
        "pem",
        Some(CA_FILE),
        ca_file.as_ref(),
        &unread(CA_FILE),
        |f| {
            let certs = parse_certs(f).map_err(|e| e.to_string())?;
            let d = format!("{}: {}", show(&f.path), plural(certs.len(), "certificate"));
            Ok((certs, d))
        },
    );

    // Each certificate is X.509, the key loads, the CA bundle is usable.
    let no_pem = |name: &str| format!("{name} has no usable PEM block");
    let leaf = step(
        &mut r,
        "parse",
        Some(CERT_FILE),
        cert_pem.as_ref(),
        &no_pem(CERT_FILE),
        |chain| {
            let infos = parse_all(&cert_path, chain)?;
            let leaf = infos[0].clone();
            let d = format!(
                "{}: subject {:?}, serial {}, SANs [{}]",
                show(&cert_path),
                leaf.subject,
                leaf.serial,
                leaf.sans().join(", ")
            );
            Ok((leaf, d))
        },
    );
    r.certificate = leaf.clone();
    let signer = step(
        &mut r,
        "parse",
        Some(KEY_FILE),
        key_pem,
        &no_pem(KEY_FILE),
        |key| {
            let signer = provider.key_provider.load_private_key(key).map_err(|e| {
                CredError::Pem {
                    path: key_path.clone(),
                    detail: format!("unusable private key: {e}"),
                }
                .to_string()
            })?;
            let d = format!("{}: {:?} key", show(&key_path), signer.algorithm());
            Ok((signer, d))
        },
    );
    let roots = step(
        &mut r,
        "parse",
        Some(CA_FILE),
        ca_pem.as_ref(),
        &no_pem(CA_FILE),
        |ca| {
            let infos = parse_all(&ca_path, ca)?;
            let roots = root_store(&ca_path, ca).map_err(|e| e.to_string())?;
            let names: Vec<_> = infos.iter().map(|i| format!("{:?}", i.subject)).collect();
            let d = format!(
                "{}: {}: {}",
                show(&ca_path),
                plural(infos.len(), "trust anchor"),
                names.join(", ")
            );
            Ok((roots, d))
        },
    );

    let chain = cert_pem.filter(|_| leaf.is_some());
    key_match(&mut r, chain.clone().zip(signer), &cert_path, &key_path);
    let both = [&cert_path, &ca_path];
    chains_to(&mut r, chain.zip(roots), leaf.as_ref(), both, provider, now);
    super::expect::expectations(&mut r, leaf.as_ref(), req, now, &cert_path);
    load(&mut r, req, provider, now, [cert_file, key_file, ca_file]);
    r
}

fn parse_all(
    path: &std::path::Path,
    certs: &[CertificateDer<'static>],
) -> Result<Vec<CertInfo>, String> {
    certs
        .iter()
        .enumerate()
        .map(|(i, der)| {
            CertInfo::parse(der).map_err(|e| format!("{}: certificate #{}: {e}", show(path), i + 1))
        })
        .collect()
}

fn key_match(
    r: &mut Report,
    input: Option<(Vec<CertificateDer<'static>>, Arc<dyn SigningKey>)>,
    cert_path: &std::path::Path,
    key_path: &std::path::Path,
) {
    let why = "needs tls.crt and tls.key parsed";
    step(r, "key_match", None, input, why, |(chain, signer)| {
        let ok = format!(
            "{} matches the certificate in {}",
            show(key_path),
            show(cert_path)
        );
        // The same rule as rustls's CertifiedKey::from_der, which the sidecar
        // loads with: a key whose public half cannot be compared is accepted.
        match CertifiedKey::new(chain, signer).keys_match() {
            Ok(()) => Ok(((), ok)),
            Err(rustls::Error::InconsistentKeys(InconsistentKeys::Unknown)) => Ok((
                (),
                format!("{ok} (not comparable; accepted as the sidecar does)"),
            )),
            Err(rustls::Error::InconsistentKeys(_)) => Err(CredError::KeyMismatch {
                cert: cert_path.to_path_buf(),
                key: key_path.to_path_buf(),
            }
            .to_string()),
            Err(e) => Err(format!("{}: {e}", show(cert_path))),
        }
    });
}

/// Verifies the chain at a moment inside the leaf's validity window, so an
/// expired leaf is reported once (by `validity`) and this check says only
/// whether the issuer is right.
fn chains_to(
    r: &mut Report,
    input: Option<(Vec<CertificateDer<'static>>, RootCertStore)>,
    leaf: Option<&CertInfo>,
    [cert_path, ca_path]: [&PathBuf; 2],
    provider: &CryptoProvider,
    now: SystemTime,
) {
    let input = input.zip(leaf);
    let why = "needs tls.crt and ca.crt parsed";
    step(r, "chain", None, input, why, |((chain, roots), leaf)| {
        let now_secs = time_to_epoch(now);
        let at = now_secs.clamp(leaf.not_before, leaf.not_after.max(leaf.not_before));
        let when = crate::identity::epoch_to_time(at);
        verify_chain(&chain, &roots, provider, when).map_err(|detail| {
            CredError::Chain {
                cert: cert_path.clone(),
                ca: ca_path.clone(),
                detail,
            }
            .to_string()
        })?;
        let mut d = format!("{} chains to {}", show(cert_path), show(ca_path));
        if at != now_secs {
            d.push_str(&format!(
                " (checked at {}, inside the certificate's validity)",
                fmt_time(at)
            ));
        }
        Ok(((), d))
    });
}

/// Last, the sidecar's own loader over one consistent read of the source:
/// the guarantee that "all PASS" means the sidecar will start with it.
fn load(
    r: &mut Report,
    req: &Request,
    provider: &Arc<CryptoProvider>,
    now: SystemTime,
    files: [Option<RawFile>; 3],
) {
    let input = r.ok.then_some(());
    let valid = step(r, "load", None, input, "an earlier check failed", |()| {
        let raw = match (&req.input, files) {
            (Input::Source(source), _) => source.read().map_err(|e| e.to_string())?,
            (Input::Secret { .. }, [Some(cert), Some(key), Some(ca)]) => {
                RawRevision::new(cert, key, ca)
            }
            (Input::Secret { .. }, _) => return Err("a file is missing".to_string()),
            (Input::Fetched(raw), _) => raw.clone(),
        };
        let rev = validate(&raw, provider, now).map_err(|e| e.to_string())?;
        // What the sidecar builds at start: its CRLs judged against every
        // key it trusts (a CRL no trusted key verifies fails here).
        rev.starting_trust(provider, now)
            .map_err(|e| e.to_string())?;
        let short: String = rev.hash.chars().take(12).collect();
        Ok((rev, format!("the sidecar accepts this revision ({short})")))
    });
    if let Some(rev) = &valid {
        super::deny::deny_step(r, rev, provider, now);
    }
    if let Some(rev) = valid.filter(|v| !v.crls.is_empty()) {
        let input = Some(rev);
        step(r, "crl", Some(CRL_FILE), input, "", |rev| {
            crl_verdict(&rev, provider, now)
        });
    }
}

/// The CRLs are fresh and do not refuse the identity itself: our own
/// chain judged by the handshake's judgement ([`Trust::verify_peer`](crate::credentials::Trust::verify_peer)) with
/// the revision's trust, as a peer with `--crl-scope chain` would.
fn crl_verdict(
    rev: &crate::credentials::ValidRevision,
    provider: &Arc<CryptoProvider>,
    now: SystemTime,
) -> Result<((), String), String> {
    let trust = super::deny::revision_trust(rev, provider)?;
    if let Err(e) = trust.judge_own(&rev.identity.cert, now) {
        let reason = crate::reason::FailureReason::from_tls(&e);
        let what = match reason {
            crate::reason::FailureReason::Revoked => "is revoked by the CRLs in".to_string(),
            other => format!("is refused ({}) with the CRLs in", other.as_str()),
        };
        return Err(format!(
            "{CERT_FILE} (serial {}) {what} {CRL_FILE} ({e}): peers with them refuse it",
            rev.leaf.serial
        ));
    }
    let now_secs = time_to_epoch(now);
    if let Some(crl) = rev.crls.stale(now_secs).next() {
        return Err(format!(
            "the CRL from {} is past its nextUpdate ({}): publish a newer one",
            crl.issuer,
            crl.next_update.map(fmt_time).unwrap_or_default()
        ));
    }
    let states: Vec<String> = rev
        .crls
        .entries()
        .iter()
        .map(|e| format!("{}: {}", e.crl.info.issuer, describe_state(&e.state)))
        .collect();
    Ok((
        (),
        format!(
            "{} ({}), fresh until {}; {CERT_FILE} is not revoked",
            plural(states.len(), "CRL"),
            states.join("; "),
            rev.crls
                .earliest_next_update()
                .map(fmt_time)
                .unwrap_or_else(|| "-".to_string())
        ),
    ))
}

//! `certs revoke`: the CRL of each CA in a CRL file (one CRL per CA key,
//! as the sidecar takes them), extended, re-signed or pruned, the other
//! CAs' CRLs kept as they are. A CA rotation leaves two CRLs in the file
//! (the old CA's and the new one's): each `--ca` re-signs its own.
//!
//! - `--serial`/`--cert` (one `--ca`): adds the serials to that CA's CRL
//!   (CRL number + 1, its entries kept), or starts one (number 1) when the
//!   file has none of that CA;
//! - no serial: re-signs each `--ca`'s CRL with a new nextUpdate (what a
//!   CronJob does). With several `--ca`, one whose directory holds no CA
//!   (an optional Secret not created yet, or deleted) or whose CRL is not
//!   in the file is skipped, said on stdout; at least one CRL must be
//!   re-signed;
//! - `--prune-expired MAX_LIFETIME`: leaves out the entries revoked more
//!   than MAX_LIFETIME ago. A certificate is revoked after it is issued,
//!   so one that lives at most MAX_LIFETIME has expired by then, and an
//!   expired certificate is refused as `expired` whether listed or not.
//!   The CRL number still goes up, so the sidecars count the entries as
//!   pruned (`mtls_sidecar_crl_entries_pruned_total`), not un-revoked.

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;

use super::{ca_files, check_days, increment, parse_serial, read_ca_file, write_atomic};
use super::{CertsError, CA_FILE, CA_KEY_FILE, CERT_FILE, KEY_FILE};
use crate::cli::CertsRevokeArgs;
use crate::credentials::revocation::{parse_file, Crl};
use crate::credentials::{fmt_time, CrlSet, RawFile};
use crate::identity::{epoch_to_time, time_to_epoch};
use crate::pki::{CrlSpec, DevCa};

/// One CA given with `--ca`.
struct Ca {
    dir: std::path::PathBuf,
    der: CertificateDer<'static>,
    signer: DevCa,
}

/// `certs revoke`; returns what it did, one line per CA.
pub fn revoke(args: &CertsRevokeArgs) -> Result<Vec<String>, CertsError> {
    check_days(args.days)?;
    let serials = requested_serials(args)?;
    if !serials.is_empty() && args.ca.len() != 1 {
        return Err(CertsError::Usage {
            flag: "--ca",
            why: "give exactly one --ca with --serial/--cert (several only to re-sign)".into(),
        });
    }
    let prune = args
        .prune_expired
        .as_deref()
        .map(parse_lifetime)
        .transpose()?;
    let mut crls = read_crls(&args.out)?;
    let now = SystemTime::now();
    let several = args.ca.len() > 1;
    let mut lines = Vec::new();
    let mut signed = 0usize;
    for dir in &args.ca {
        let Some(ca) = load_ca(dir, several)? else {
            lines.push(format!("{}: no CA here; skipped", dir.display()));
            continue;
        };
        let mine = own_crl(&crls, &ca, &args.out)?;
        if mine.is_none() && serials.is_empty() {
            if several {
                lines.push(format!(
                    "{}: {} holds no CRL of this CA; skipped",
                    dir.display(),
                    args.out.display()
                ));
                continue;
            }
            return Err(no_crl_to_resign(&args.out));
        }
        let (der, line) = sign(
            &ca,
            mine.map(|i| &*crls[i]),
            &serials,
            prune,
            args.days,
            now,
        )?;
        lines.push(line);
        let crl = parsed(der, &args.out)?;
        match mine {
            Some(i) => crls[i] = crl,
            None => crls.push(crl),
        }
        signed += 1;
    }
    if signed == 0 {
        return Err(no_crl_to_resign(&args.out));
    }
    write_atomic(&args.out, pem_file(&crls).as_bytes(), 0o644)?;
    lines.push(format!(
        "wrote {}: {} CRL(s)",
        args.out.display(),
        crls.len()
    ));
    Ok(lines)
}

/// The serials of `--serial` and `--cert`.
fn requested_serials(args: &CertsRevokeArgs) -> Result<Vec<Vec<u8>>, CertsError> {
    let mut serials = Vec::new();
    for hex in &args.serial {
        serials.push(parse_serial(hex)?);
    }
    for path in &args.cert {
        let pem = fs::read(path).map_err(|e| CertsError::Usage {
            flag: "--cert",
            why: format!("{}: cannot read: {e}", path.display()),
        })?;
        let der = CertificateDer::from_pem_slice(&pem).map_err(|e| CertsError::Usage {
            flag: "--cert",
            why: format!("{}: not a PEM certificate: {e}", path.display()),
        })?;
        serials.push(
            crate::pki::serial_of(&der).ok_or_else(|| CertsError::Usage {
                flag: "--cert",
                why: format!("{}: not an X.509 certificate", path.display()),
            })?,
        );
    }
    serials.sort();
    serials.dedup();
    Ok(serials)
}

/// `--prune-expired`'s maximum certificate lifetime (`720h`, `30d`...).
fn parse_lifetime(text: &str) -> Result<Duration, CertsError> {
    match humantime::parse_duration(text) {
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) => Err(CertsError::Usage {
            flag: "--prune-expired",
            why: "the longest lifetime of a certificate the CA issues; not 0".into(),
        }),
        Err(e) => Err(CertsError::Usage {
            flag: "--prune-expired",
            why: format!("{text:?}: {e} (e.g. 720h, the leaves' cert-manager duration)"),
        }),
    }
}

/// A first CRL needs something on it: with nothing at `--out` to re-sign,
/// no serial is a usage error (a typo in `--out` must not mint an empty CRL
/// that replaces the real one when published).
fn no_crl_to_resign(out: &Path) -> CertsError {
    CertsError::Usage {
        flag: "--serial",
        why: format!(
            "give at least one --serial HEX or --cert FILE ({} holds no CRL to re-sign for this CA)",
            out.display()
        ),
    }
}

/// The CRLs already at `path` (none when it does not exist).
fn read_crls(path: &Path) -> Result<Vec<Arc<Crl>>, CertsError> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(CertsError::Usage {
                flag: "--out",
                why: format!("{}: cannot read: {e}", path.display()),
            })
        }
    };
    parse_file(&RawFile {
        path: path.to_path_buf(),
        bytes,
    })
    .map_err(|e| CertsError::Usage {
        flag: "--out",
        why: format!("cannot extend it: {e}"),
    })
}

fn parsed(der: Vec<u8>, out: &Path) -> Result<Arc<Crl>, CertsError> {
    let mut one = parse_file(&RawFile {
        path: out.to_path_buf(),
        bytes: der,
    })
    .map_err(|e| CertsError::Usage {
        flag: "--out",
        why: format!("the CRL just signed does not parse: {e}"),
    })?;
    one.pop().ok_or_else(|| CertsError::Usage {
        flag: "--out",
        why: "the CRL just signed is empty".into(),
    })
}

/// The CA in `dir`; `None` when `optional` and the directory holds no CA
/// files at all (an optional Secret volume not there).
fn load_ca(dir: &Path, optional: bool) -> Result<Option<Ca>, CertsError> {
    let holds_any = [CA_FILE, CERT_FILE, CA_KEY_FILE, KEY_FILE]
        .iter()
        .any(|f| dir.join(f).exists());
    if optional && !holds_any {
        return Ok(None);
    }
    let (cert_path, key_path) = ca_files(dir)?;
    let cert_pem = read_ca_file(&cert_path)?;
    let key_pem = read_ca_file(&key_path)?;
    let signer = DevCa::from_pem(&cert_pem, &key_pem).map_err(|e| CertsError::BadCa {
        path: key_path.clone(),
        why: format!("not a usable CA certificate and key pair: {e}"),
    })?;
    let der =
        CertificateDer::from_pem_slice(cert_pem.as_bytes()).map_err(|e| CertsError::BadCa {
            path: cert_path.clone(),
            why: format!("not a PEM certificate: {e}"),
        })?;
    Ok(Some(Ca {
        dir: dir.to_path_buf(),
        der,
        signer,
    }))
}

/// Which CRL of the file this CA's key signed; two are an error.
fn own_crl(crls: &[Arc<Crl>], ca: &Ca, out: &Path) -> Result<Option<usize>, CertsError> {
    let provider = crate::tls::provider::crypto_provider();
    let mine: Vec<usize> = (0..crls.len())
        .filter(|&i| CrlSet::signed_by(&crls[i], &ca.der, &provider))
        .collect();
    match mine.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(*one)),
        _ => Err(CertsError::Usage {
            flag: "--out",
            why: format!(
                "{}: holds {} CRLs signed by the CA in {}; keep one per CA",
                out.display(),
                mine.len(),
                ca.dir.display()
            ),
        }),
    }
}

/// Signs this CA's next CRL: `old`'s entries (those `prune` leaves) plus
/// `serials`, CRL number + 1 (1 for a first CRL). Returns the DER and the
/// line saying what was done.
fn sign(
    ca: &Ca,
    old: Option<&Crl>,
    serials: &[Vec<u8>],
    prune: Option<Duration>,
    days: u32,
    now: SystemTime,
) -> Result<(Vec<u8>, String), CertsError> {
    let mut spec = CrlSpec::new(1, Vec::new(), days);
    spec.this_update = now;
    spec.next_update = now + Duration::from_secs(u64::from(days) * 86_400);
    let mut pruned = 0usize;
    if let Some(old) = old {
        spec.number = increment(&old.info.number_bytes().unwrap_or_default());
        let cutoff = prune.and_then(|p| now.checked_sub(p));
        for (serial, at) in old.revoked_entries() {
            let at = epoch_to_time(at);
            if is_expired(at, cutoff) && !serials.contains(&serial) {
                pruned += 1;
            } else {
                spec.kept.push((serial, at));
            }
        }
    }
    let added: Vec<Vec<u8>> = serials
        .iter()
        .filter(|s| !spec.kept.iter().any(|(k, _)| k == *s))
        .cloned()
        .collect();
    let total = spec.kept.len() + added.len();
    let count = added.len();
    spec.serials = added;
    let crl = ca.signer.crl(&spec)?;
    let line = format!(
        "{}: CRL number {}, {count} serial(s) added, {total} revoked, {pruned} pruned, next update {}",
        ca.dir.display(),
        x509_parser::num_bigint::BigUint::from_bytes_be(&spec.number),
        fmt_time(time_to_epoch(spec.next_update))
    );
    Ok((crl.der, line))
}

/// True when an entry revoked at `at` is before the prune cutoff: its
/// certificate, issued before `at` and living at most the lifetime given,
/// has expired.
fn is_expired(at: SystemTime, cutoff: Option<SystemTime>) -> bool {
    cutoff.is_some_and(|c| at < c)
}

/// Every CRL as PEM, in file order.
fn pem_file(crls: &[Arc<Crl>]) -> String {
    use base64::Engine as _;
    let mut out = String::new();
    for crl in crls {
        let b64 = base64::engine::general_purpose::STANDARD.encode(crl.der());
        out.push_str("-----BEGIN X509 CRL-----\n");
        for line in b64.as_bytes().chunks(64) {
            out.push_str(&String::from_utf8_lossy(line));
            out.push('\n');
        }
        out.push_str("-----END X509 CRL-----\n");
    }
    out
}

//! `mtls-sidecar certs`: a development PKI in process, so trying the sidecar
//! needs neither openssl nor a script. `certs ca` mints an ECDSA P-256 CA
//! (`ca.crt`, `ca.key`); `certs issue` signs a role identity with it into a
//! directory laid out like a `kubernetes.io/tls` Secret (`tls.crt`,
//! `tls.key`, `ca.crt`) that `--tls-dir` and `check` read directly.
//! `--ca DIR` also reads a cert-manager CA Secret's layout (`tls.crt`,
//! `tls.key`): [`ca_files`]. `certs revoke` with no serial re-signs the CRL
//! already at `--out` (what a CronJob does before nextUpdate): `revoke.rs`.
//! `certs deny` appends one entry to a deny-list (`deny.rs`): no CA key.
//!
//! Keys are never silently replaced: an existing key is refused unless
//! `--force`, because overwriting a CA key orphans every identity it signed.
//! Files are written to a temporary name and renamed into place, so a
//! sidecar polling the directory sees each file old or new, never half
//! written, and a key file is 0600 from its first byte.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;

use crate::cli::{CertsCaArgs, CertsCommand, CertsIssueArgs};
use crate::credentials::{fmt_time, root_store, verify_chain, CA_FILE, CERT_FILE, KEY_FILE};
use crate::identity::CertInfo;
mod deny;
mod revoke;

pub use revoke::revoke;

use crate::pki::{DevCa, LeafSpec};
use deny::deny;

/// The CA's private key file written by `certs ca` and read by `certs issue`.
pub const CA_KEY_FILE: &str = "ca.key";

/// Where a CA's certificate and key are in a `--ca` directory: `ca.crt` and
/// `ca.key` as `certs ca` writes them, or `tls.crt` and `tls.key` as
/// cert-manager writes a CA `Certificate`'s Secret (its `ca.crt` there is the
/// issuer of the CA, not the CA). Told apart by which key file exists; both
/// at once is refused rather than guessed.
pub fn ca_files(dir: &Path) -> Result<(PathBuf, PathBuf), CertsError> {
    let classic = dir.join(CA_KEY_FILE);
    let cert_manager = dir.join(KEY_FILE);
    match (classic.exists(), cert_manager.exists()) {
        (true, false) => Ok((dir.join(CA_FILE), classic)),
        (false, true) => Ok((dir.join(CERT_FILE), cert_manager)),
        (true, true) => Err(CertsError::BadCa {
            path: dir.to_path_buf(),
            why: format!(
                "holds both {CA_KEY_FILE} (a `certs ca` directory) and {KEY_FILE} (a cert-manager CA Secret); \
                 cannot tell which is the CA's key: give a directory with one of them"
            ),
        }),
        (false, false) => Err(CertsError::BadCa {
            path: classic,
            why: format!(
                "not found, nor {KEY_FILE} (create a CA with `certs ca --out DIR`, or point --ca at a \
                 cert-manager CA Secret's files: {CERT_FILE}, {KEY_FILE})"
            ),
        }),
    }
}

/// Why a certs command failed; [`CertsError::exit_code`] maps it to the
/// documented exit status.
#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    #[error("{flag}: {why}")]
    Usage { flag: &'static str, why: String },
    #[error("{path}: {why}", path = .path.display())]
    BadCa { path: PathBuf, why: String },
    #[error("{path}: a private key already exists; refusing to overwrite it (pass --force to replace it)", path = .path.display())]
    KeyExists { path: PathBuf },
    #[error("{path}: cannot write: {source}", path = .path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot generate the certificate: {0}")]
    Mint(#[from] rcgen::Error),
    #[error("the issued certificate does not verify against {ca}: {detail} (does ca.key belong to ca.crt?)", ca = .ca.display())]
    SelfCheck { ca: PathBuf, detail: String },
}

impl CertsError {
    /// 2 for bad usage or unusable input (the message names the flag or
    /// file), 1 for failures while doing the work.
    pub fn exit_code(&self) -> u8 {
        match self {
            CertsError::Usage { .. } | CertsError::BadCa { .. } => 2,
            _ => 1,
        }
    }
}

/// Runs a certs subcommand; returns the exit status.
pub fn run(cmd: &CertsCommand) -> u8 {
    let result = match cmd {
        CertsCommand::Ca(args) => make_ca(args),
        CertsCommand::Issue(args) => issue(args),
        CertsCommand::Revoke(args) => revoke(args),
        CertsCommand::Deny(args) => deny(args),
    };
    match result {
        Ok(lines) => {
            for l in lines {
                println!("{l}");
            }
            0
        }
        Err(e) => {
            eprintln!("error: {e}");
            e.exit_code()
        }
    }
}

fn check_days(days: u32) -> Result<(), CertsError> {
    if days == 0 {
        return Err(CertsError::Usage {
            flag: "--days",
            why: "must be at least 1".into(),
        });
    }
    Ok(())
}

/// `certs ca`: mints a CA into `out`; returns what was written.
pub fn make_ca(args: &CertsCaArgs) -> Result<Vec<String>, CertsError> {
    check_days(args.days)?;
    if args.name.trim().is_empty() {
        return Err(CertsError::Usage {
            flag: "--name",
            why: "must not be empty".into(),
        });
    }
    let key_path = args.out.join(CA_KEY_FILE);
    refuse_overwrite(&key_path, args.force)?;
    let ca = DevCa::new(&args.name, args.days)?;
    create_dir(&args.out)?;
    let cert_path = args.out.join(CA_FILE);
    write_atomic(&key_path, ca.key_pem.as_bytes(), 0o600)?;
    write_atomic(&cert_path, ca.cert_pem.as_bytes(), 0o644)?;
    let info = info_of(&cert_path, &ca.cert_pem)?;
    Ok(vec![
        format!(
            "wrote {} and {} (mode 0600)",
            cert_path.display(),
            key_path.display()
        ),
        format!(
            "CA {:?}, serial {}, valid until {}",
            info.subject,
            info.serial,
            fmt_time(info.not_after)
        ),
    ])
}

/// `certs issue`: signs a leaf with the CA in `args.ca` into `args.out`.
pub fn issue(args: &CertsIssueArgs) -> Result<Vec<String>, CertsError> {
    check_days(args.days)?;
    let names = sans(args)?;
    let (ca_cert_path, ca_key_path) = ca_files(&args.ca)?;
    let ca_pem = read_ca_file(&ca_cert_path)?;
    let ca_key = read_ca_file(&ca_key_path)?;
    let ca_info = info_of(&ca_cert_path, &ca_pem)?;
    let ca = DevCa::from_pem(&ca_pem, &ca_key).map_err(|e| CertsError::BadCa {
        path: ca_key_path.clone(),
        why: format!("not a usable CA certificate and key pair: {e}"),
    })?;
    let now = SystemTime::now();
    let ca_end = ca_info.not_after_time();
    if ca_end <= now {
        return Err(CertsError::BadCa {
            path: ca_cert_path,
            why: format!("the CA expired at {}", fmt_time(ca_info.not_after)),
        });
    }
    let key_path = args.out.join(KEY_FILE);
    refuse_overwrite(&key_path, args.force)?;

    let mut spec = LeafSpec::dns(&names.common_name, args.role, args.days);
    spec.dns = names.dns;
    spec.uris = names.uris;
    let mut notes = Vec::new();
    // A leaf that outlives its CA stops verifying when the CA expires; say
    // so instead of minting a certificate that lies about its lifetime.
    if spec.not_after > ca_end {
        spec.not_after = ca_end;
        notes.push(format!(
            "note: validity shortened to the CA's expiry ({})",
            fmt_time(ca_info.not_after)
        ));
    }
    let leaf = ca.issue(&spec)?;
    self_check(&leaf.cert_der, &ca_pem, &ca_cert_path)?;

    create_dir(&args.out)?;
    let cert_path = args.out.join(CERT_FILE);
    let out_ca = args.out.join(CA_FILE);
    write_atomic(&key_path, leaf.key_pem.as_bytes(), 0o600)?;
    write_atomic(&cert_path, leaf.cert_pem.as_bytes(), 0o644)?;
    write_atomic(&out_ca, ca_pem.as_bytes(), 0o644)?;
    let info = info_of(&cert_path, &leaf.cert_pem)?;
    let mut lines = vec![
        format!(
            "wrote {}, {} (mode 0600) and {}",
            cert_path.display(),
            key_path.display(),
            out_ca.display()
        ),
        format!(
            "{:?} for --role {}, SANs [{}], serial {}, valid until {}",
            info.subject,
            role_name(args.role),
            info.sans().join(", "),
            info.serial,
            fmt_time(info.not_after)
        ),
    ];
    lines.extend(notes);
    Ok(lines)
}

/// Parses `0a:1b:...` or `0a1b...` into serial bytes (1 to 20 of them).
pub(super) fn parse_serial(text: &str) -> Result<Vec<u8>, CertsError> {
    let bad = |why: &str| CertsError::Usage {
        flag: "--serial",
        why: format!("{text:?}: {why}"),
    };
    let digits: String = text.chars().filter(|c| *c != ':').collect();
    if digits.is_empty() || !digits.len().is_multiple_of(2) || digits.len() > 40 {
        return Err(bad("1 to 20 bytes of hex digits"));
    }
    (0..digits.len())
        .step_by(2)
        .map(|i| {
            digits
                .get(i..i + 2)
                .and_then(|d| u8::from_str_radix(d, 16).ok())
                .ok_or_else(|| bad("not hex"))
        })
        .collect()
}

/// `n + 1` for a big-endian unsigned number.
pub(super) fn increment(n: &[u8]) -> Vec<u8> {
    let mut out = n.to_vec();
    for b in out.iter_mut().rev() {
        let (v, carry) = b.overflowing_add(1);
        *b = v;
        if !carry {
            return out;
        }
    }
    out.insert(0, 1);
    out
}

fn role_name(role: crate::pki::Role) -> &'static str {
    match role {
        crate::pki::Role::Server => "server",
        crate::pki::Role::Client => "client",
        crate::pki::Role::Both => "both",
    }
}

struct Names {
    common_name: String,
    dns: Vec<String>,
    uris: Vec<String>,
}

/// Validates `--dns` and `--uri` up front, so a typo is a usage error naming
/// the flag rather than an encoder error.
fn sans(args: &CertsIssueArgs) -> Result<Names, CertsError> {
    if args.dns.is_empty() && args.uri.is_empty() {
        return Err(CertsError::Usage {
            flag: "--dns/--uri",
            why: "give at least one identity (the role SAN peers will pin)".into(),
        });
    }
    for d in &args.dns {
        if rustls_pki_types::DnsName::try_from(d.as_str()).is_err() || d.contains('*') {
            return Err(CertsError::Usage {
                flag: "--dns",
                why: format!("{d:?} is not a DNS name (wildcards are not identities)"),
            });
        }
    }
    for u in &args.uri {
        let ok = u
            .split_once("://")
            .is_some_and(|(scheme, rest)| !scheme.is_empty() && !rest.is_empty())
            && u.is_ascii()
            && !u
                .chars()
                .any(|c| c.is_ascii_whitespace() || c.is_ascii_control());
        if !ok {
            return Err(CertsError::Usage {
                flag: "--uri",
                why: format!("{u:?} is not a URI such as spiffe://trust-domain/ns/a/sa/b"),
            });
        }
    }
    let common_name = args
        .dns
        .first()
        .or(args.uri.first())
        .cloned()
        .unwrap_or_default();
    Ok(Names {
        common_name,
        dns: args.dns.clone(),
        uris: args.uri.clone(),
    })
}

pub(super) fn read_ca_file(path: &Path) -> Result<String, CertsError> {
    fs::read_to_string(path).map_err(|e| CertsError::BadCa {
        path: path.to_path_buf(),
        why: match e.kind() {
            std::io::ErrorKind::NotFound => {
                "not found (create it with `certs ca --out DIR`)".into()
            }
            _ => format!("cannot read: {e}"),
        },
    })
}

fn info_of(path: &Path, pem: &str) -> Result<CertInfo, CertsError> {
    let bad = |why: String| CertsError::BadCa {
        path: path.to_path_buf(),
        why,
    };
    let der = CertificateDer::from_pem_slice(pem.as_bytes())
        .map_err(|e| bad(format!("not a PEM certificate: {e}")))?;
    CertInfo::parse(&der).map_err(|e| bad(e.to_string()))
}

/// Proves the new leaf chains to the CA the same way the sidecar will check
/// it, which catches a `ca.key` that does not belong to `ca.crt`.
fn self_check(
    leaf: &CertificateDer<'static>,
    ca_pem: &str,
    ca_path: &Path,
) -> Result<(), CertsError> {
    let anchors = CertificateDer::pem_slice_iter(ca_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CertsError::BadCa {
            path: ca_path.to_path_buf(),
            why: format!("not valid PEM: {e}"),
        })?;
    let roots = root_store(ca_path, &anchors).map_err(|e| CertsError::BadCa {
        path: ca_path.to_path_buf(),
        why: e.to_string(),
    })?;
    // Verify a moment from now: the leaf's not_before is a minute back, and
    // the check must not race the clock at the edges.
    let at = SystemTime::now() + Duration::from_secs(1);
    verify_chain(
        std::slice::from_ref(leaf),
        &roots,
        &crate::tls::provider::crypto_provider(),
        at,
    )
    .map_err(|detail| CertsError::SelfCheck {
        ca: ca_path.to_path_buf(),
        detail,
    })
}

fn refuse_overwrite(key_path: &Path, force: bool) -> Result<(), CertsError> {
    if !force && fs::symlink_metadata(key_path).is_ok() {
        return Err(CertsError::KeyExists {
            path: key_path.to_path_buf(),
        });
    }
    Ok(())
}

fn create_dir(dir: &Path) -> Result<(), CertsError> {
    fs::create_dir_all(dir).map_err(|source| CertsError::Write {
        path: dir.to_path_buf(),
        source,
    })
}

/// Writes `bytes` to a temporary file created with `mode`, then renames it
/// over `path`: readers see the old file or the new one, and the new one
/// never exists with looser permissions than `mode`.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), CertsError> {
    let err = |source| CertsError::Write {
        path: path.to_path_buf(),
        source,
    };
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = path.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
    let _ = fs::remove_file(&tmp);
    let result = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map_err(err)
}

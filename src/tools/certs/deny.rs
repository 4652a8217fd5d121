//! `certs deny`: appends one entry to a deny file the way an incident
//! responder needs it done at 3 a.m.: the entry is built from a
//! certificate or typed value and validated with the sidecar's own parser,
//! the existing file must itself be valid (nothing is appended to a file
//! the sidecar would reject), an entry already there is not added twice,
//! and the new file replaces the old one atomically with every existing
//! line (comments included) kept.

use std::fs;
use std::path::Path;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;

use super::{write_atomic, CertsError};
use crate::cli::CertsDenyArgs;
use crate::credentials::deny::{parse_deny, parse_entry, DenyEntry};
use crate::credentials::{read_deny, RawFile};

/// `certs deny`: returns what was done.
pub fn deny(args: &CertsDenyArgs) -> Result<Vec<String>, CertsError> {
    let entry = entry_of(args)?;
    let existing = existing(&args.out)?;
    let text = existing.as_ref().map_or("", |(t, _)| t.as_str());
    let list = parse_deny(text).map_err(|e| CertsError::Usage {
        flag: "--out",
        why: format!(
            "{}: {e}; fix the file first (nothing was written)",
            args.out.display()
        ),
    })?;
    if list.contains(&entry) {
        return Ok(vec![format!(
            "{}: already holds {entry}; nothing written",
            args.out.display()
        )]);
    }
    let next = appended(text, args.comment.as_deref(), &entry)?;
    let total = parse_deny(&next)
        .map_err(|e| CertsError::Usage {
            flag: "--out",
            why: format!("{}: {e}", args.out.display()),
        })?
        .entries()
        .len();
    let mode = existing.map_or(0o644, |(_, mode)| mode);
    write_atomic(&args.out, next.as_bytes(), mode)?;
    Ok(vec![format!(
        "wrote {}: added {entry} ({total} entries)",
        args.out.display()
    )])
}

/// The entry the flags describe, in the canonical spelling.
fn entry_of(args: &CertsDenyArgs) -> Result<DenyEntry, CertsError> {
    let given = [
        args.cert.is_some(),
        args.spki.is_some(),
        args.serial.is_some(),
        args.san.is_some(),
    ];
    if given.iter().filter(|g| **g).count() != 1 {
        return Err(usage(
            "--cert",
            "give exactly one of --cert FILE, --spki B64, --serial HEX (with --issuer-cert FILE) or --san NAME".into(),
        ));
    }
    if args.issuer_cert.is_some() != args.serial.is_some() {
        return Err(usage(
            "--issuer-cert",
            "--serial and --issuer-cert go together (the issuer is named by its key)".into(),
        ));
    }
    let (flag, text) = if let Some(path) = &args.cert {
        (
            "--cert",
            format!("spki-sha256:{}", spki_of_file("--cert", path)?),
        )
    } else if let Some(b64) = &args.spki {
        ("--spki", format!("spki-sha256:{b64}"))
    } else if let (Some(hex), Some(issuer)) = (&args.serial, &args.issuer_cert) {
        let key = spki_of_file("--issuer-cert", issuer)?;
        ("--serial", format!("serial:{key}:{hex}"))
    } else {
        (
            "--san",
            format!("san:{}", args.san.as_deref().unwrap_or("")),
        )
    };
    parse_entry(&text).map_err(|why| usage(flag, why))
}

fn usage(flag: &'static str, why: String) -> CertsError {
    CertsError::Usage { flag, why }
}

/// The base64 SPKI SHA-256 of the first certificate of a PEM file.
fn spki_of_file(flag: &'static str, path: &Path) -> Result<String, CertsError> {
    let bad = |why: String| usage(flag, format!("{}: {why}", path.display()));
    let pem = fs::read(path).map_err(|e| bad(format!("cannot read: {e}")))?;
    let der = CertificateDer::from_pem_slice(&pem)
        .map_err(|e| bad(format!("not a PEM certificate: {e}")))?;
    crate::identity::pin::spki_sha256(der.as_ref())
        .map(|k| crate::identity::pin::encode(&k))
        .ok_or_else(|| bad("not an X.509 certificate".into()))
}

/// The file at `out` as text with its permission bits, or `None` when it
/// does not exist yet.
fn existing(out: &Path) -> Result<Option<(String, u32)>, CertsError> {
    use std::os::unix::fs::PermissionsExt;
    let meta = match fs::metadata(out) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(usage("--out", format!("{}: {e}", out.display()))),
        Ok(m) => m,
    };
    let RawFile { bytes, .. } = read_deny(out).map_err(|e| usage("--out", e.to_string()))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| usage("--out", format!("{}: not UTF-8 text", out.display())))?;
    Ok(Some((text, meta.permissions().mode() & 0o7777)))
}

/// `text` with a newline at its end if it lacks one, the comment (one
/// line) and the entry.
fn appended(text: &str, comment: Option<&str>, entry: &DenyEntry) -> Result<String, CertsError> {
    let mut next = text.to_string();
    if !next.is_empty() && !next.ends_with('\n') {
        next.push('\n');
    }
    if let Some(c) = comment {
        if c.contains(['\n', '\r']) {
            return Err(usage("--comment", "must be one line".into()));
        }
        next.push_str(&format!("# {c}\n"));
    }
    next.push_str(&format!("{entry}\n"));
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appending_keeps_every_line_and_ends_lines() {
        let e = parse_entry("san:a.svc").unwrap();
        assert_eq!(
            appended("# x\nsan:b.svc", Some("why"), &e).unwrap(),
            "# x\nsan:b.svc\n# why\nsan:a.svc\n"
        );
        assert_eq!(appended("", None, &e).unwrap(), "san:a.svc\n");
        assert!(appended("", Some("a\nsan:evil"), &e).is_err());
    }
}

//! `mtls-sidecar publish --into DIR FILE...`: write files as one new
//! revision of DIR, laid out the way the kubelet lays out a Secret volume.
//!
//! Why: a sidecar on a VM reads its credential directory while a renewal
//! job replaces it, and the only way to change several files at once on a
//! POSIX file system is a symlink swap. Renaming a new directory over the
//! old one fails (`rename(2)` refuses a non-empty target), and writing the
//! files one by one lets a poll see a new certificate with the old key. So:
//!
//! 1. the files go into a fresh hidden directory
//!    `..YYYY_MM_DD_HH_MM_SS.NNNNNNNNNN` (created 0700, each file written
//!    and fsynced, then the directory opened up to 0755 and fsynced);
//! 2. a `..data_tmp` symlink to it is renamed over `..data`: the one atomic
//!    step, after which every reader sees the whole new revision;
//! 3. each user-visible name is a symlink `NAME -> ..data/NAME`, created
//!    once (names the new revision no longer has are removed);
//! 4. the previous revision directory is removed after the swap.
//!
//! Publishers take an exclusive `flock` on DIR, so two renewal hooks never
//! interleave. When the revision holds `tls.crt`, `tls.key` and `ca.crt`,
//! it is first validated with the sidecar's own loader, and a revision the
//! sidecar would reject is not published at all (`--no-check` skips that).

use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{symlink, DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::credentials::{validate, RawFile, RawRevision, CA_FILE, CERT_FILE, DATA_LINK, KEY_FILE};

/// The temporary link renamed over `..data`.
pub const DATA_TMP: &str = "..data_tmp";
/// The most bytes one published file may hold.
pub const MAX_FILE: u64 = 16 << 20;
/// The most files one revision may hold.
pub const MAX_FILES: usize = 64;

/// Why a revision was not published. Nothing visible changed in DIR.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("{0}")]
    Usage(String),
    #[error("{path}: {source}", path = .path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("{path}: {detail}", path = .path.display())]
    Layout { path: PathBuf, detail: String },
    #[error("not published, the sidecar would reject this revision: {0} (--no-check publishes it anyway)")]
    Invalid(String),
}

impl PublishError {
    /// 2 for a command line that cannot work, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            PublishError::Usage(_) => 2,
            _ => 1,
        }
    }
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> PublishError + '_ {
    move |source| PublishError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One file of a revision: the name it gets in DIR and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub bytes: Vec<u8>,
}

/// What a publish did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// The new revision directory (its name, e.g. `..2026_11_30_10_00_00.123`).
    pub revision: String,
    /// The revision it replaced, if any.
    pub replaced: Option<String>,
    /// User-visible names removed because the new revision lacks them.
    pub dropped: Vec<String>,
}

/// Checks a user-visible file name: one plain path component that does not
/// start with `..` (the layout's own names).
pub fn check_name(name: &str) -> Result<(), PublishError> {
    let bad = |why: &str| Err(PublishError::Usage(format!("file name {name:?}: {why}")));
    if name.is_empty() {
        return bad("empty");
    }
    if name.contains('/') || name.contains('\0') {
        return bad("must be a plain name without '/'");
    }
    if name == "." || name.starts_with("..") {
        return bad("names starting with '..' belong to the revision layout");
    }
    if name.len() > 255 {
        return bad("longer than 255 bytes");
    }
    Ok(())
}

/// Reads the files named on the command line: `PATH` (published under its
/// base name) or `NAME=PATH`.
pub fn read_args(files: &[String]) -> Result<Vec<Entry>, PublishError> {
    if files.is_empty() {
        return Err(PublishError::Usage("give at least one FILE".into()));
    }
    if files.len() > MAX_FILES {
        return Err(PublishError::Usage(format!(
            "{} files; a revision holds at most {MAX_FILES}",
            files.len()
        )));
    }
    let mut out: Vec<Entry> = Vec::with_capacity(files.len());
    for arg in files {
        let (name, path) = name_and_path(arg);
        check_name(&name)?;
        if out.iter().any(|e| e.name == name) {
            return Err(PublishError::Usage(format!("{name} is given twice")));
        }
        let mut bytes = Vec::new();
        fs::File::open(&path)
            .and_then(|f| f.take(MAX_FILE + 1).read_to_end(&mut bytes))
            .map_err(io_err(&path))?;
        if bytes.len() as u64 > MAX_FILE {
            return Err(PublishError::Usage(format!(
                "{}: larger than {MAX_FILE} bytes",
                path.display()
            )));
        }
        out.push(Entry { name, bytes });
    }
    Ok(out)
}

/// Splits one `FILE` argument: `NAME=PATH` when the part before the first
/// `=` holds no `/`, else a `PATH` published under its base name (empty
/// when it has none, which [`check_name`] refuses).
pub fn name_and_path(arg: &str) -> (String, PathBuf) {
    match arg.split_once('=') {
        Some((n, p)) if !n.contains('/') => (n.to_string(), PathBuf::from(p)),
        _ => {
            let p = PathBuf::from(arg);
            let base = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            (base, p)
        }
    }
}

/// Refuses a credential revision the sidecar would reject: when the
/// revision has any of `tls.crt`, `tls.key`, `ca.crt` it must have all
/// three, and they must validate now.
pub fn check_credentials(dir: &Path, entries: &[Entry]) -> Result<(), PublishError> {
    let get = |n: &str| entries.iter().find(|e| e.name == n);
    let (cert, key, ca) = match (get(CERT_FILE), get(KEY_FILE), get(CA_FILE)) {
        (None, None, None) => return Ok(()),
        (Some(c), Some(k), Some(a)) => (c, k, a),
        _ => {
            return Err(PublishError::Invalid(format!(
                "a credential revision needs {CERT_FILE}, {KEY_FILE} and {CA_FILE} together"
            )))
        }
    };
    let file = |e: &Entry| RawFile {
        path: dir.join(&e.name),
        bytes: e.bytes.clone(),
    };
    let raw = RawRevision::new(file(cert), file(key), file(ca));
    validate(
        &raw,
        &crate::crypto_provider(),
        std::time::SystemTime::now(),
    )
    .map(|_| ())
    .map_err(|e| PublishError::Invalid(e.to_string()))
}

/// Publishes `entries` as the new revision of `dir` (created if missing),
/// files written with permission bits `mode`.
pub fn publish(dir: &Path, entries: &[Entry], mode: u32) -> Result<Published, PublishError> {
    if entries.is_empty() {
        return Err(PublishError::Usage("nothing to publish".into()));
    }
    for e in entries {
        check_name(&e.name)?;
    }
    fs::create_dir_all(dir).map_err(io_err(dir))?;
    let lock = fs::File::open(dir).map_err(io_err(dir))?;
    lock.lock().map_err(io_err(dir))?;
    let result = publish_locked(dir, entries, mode);
    let _ = lock.unlock();
    result
}

fn publish_locked(dir: &Path, entries: &[Entry], mode: u32) -> Result<Published, PublishError> {
    let data = dir.join(DATA_LINK);
    let old = match fs::symlink_metadata(&data) {
        Ok(m) if m.file_type().is_symlink() => Some(fs::read_link(&data).map_err(io_err(&data))?),
        Ok(_) => {
            return Err(PublishError::Layout {
                path: data,
                detail: "exists but is not a symlink".into(),
            })
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_err(&data)(e)),
    };
    // Every user-visible name must be ours to manage: a link into ..data,
    // or absent. A plain file there means DIR is not in this layout, and
    // replacing it would not be atomic.
    for e in entries {
        let visible = dir.join(&e.name);
        match fs::symlink_metadata(&visible) {
            Ok(m) if m.file_type().is_symlink() => {}
            Ok(_) => {
                return Err(PublishError::Layout {
                    path: visible,
                    detail: "is a plain file, not a link into ..data: publish into an empty directory (or move the plain files away first)".into(),
                })
            }
            Err(_) => {}
        }
    }

    let (rev_name, rev) = make_revision_dir(dir)?;
    let written = write_revision(&rev, entries, mode);
    if let Err(e) = written {
        let _ = fs::remove_dir_all(&rev);
        return Err(e);
    }

    // The swap: one rename.
    let tmp = dir.join(DATA_TMP);
    match fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(&tmp)(e)),
    }
    if let Err(e) = symlink(&rev_name, &tmp).and_then(|()| fs::rename(&tmp, &data)) {
        let _ = fs::remove_file(&tmp);
        let _ = fs::remove_dir_all(&rev);
        return Err(io_err(&data)(e));
    }
    sync_dir(dir)?;

    // User-visible links: created once, dropped when the name is gone.
    for e in entries {
        let visible = dir.join(&e.name);
        let target = Path::new(DATA_LINK).join(&e.name);
        if fs::read_link(&visible).ok().as_deref() != Some(target.as_path()) {
            let _ = fs::remove_file(&visible);
            symlink(&target, &visible).map_err(io_err(&visible))?;
        }
    }
    let mut dropped = Vec::new();
    if let Some(old) = &old {
        for entry in fs::read_dir(dir.join(old)).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if entries.iter().any(|e| e.name == name) {
                continue;
            }
            let visible = dir.join(&name);
            let ours = fs::read_link(&visible).ok() == Some(Path::new(DATA_LINK).join(&name));
            if ours && fs::remove_file(&visible).is_ok() {
                dropped.push(name);
            }
        }
    }
    sync_dir(dir)?;

    // Old revisions go last: readers that resolved ..data before the swap
    // had the whole old revision until now. Orphans of an interrupted
    // publish (same name pattern, not the one in force) go too.
    for entry in fs::read_dir(dir).map_err(io_err(dir))?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name != rev_name && is_revision_name(&name) {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
    Ok(Published {
        revision: rev_name,
        replaced: old.map(|o| o.to_string_lossy().into_owned()),
        dropped,
    })
}

fn make_revision_dir(dir: &Path) -> Result<(String, PathBuf), PublishError> {
    let mut last = None;
    for _ in 0..16 {
        let name = revision_name();
        let path = dir.join(&name);
        match fs::DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => return Ok((name, path)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(io_err(&path)(e)),
        }
    }
    Err(io_err(dir)(last.unwrap_or_else(|| {
        io::Error::other("no free revision name")
    })))
}

fn write_revision(rev: &Path, entries: &[Entry], mode: u32) -> Result<(), PublishError> {
    for e in entries {
        let path = rev.join(&e.name);
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&path)
            .map_err(io_err(&path))?;
        // The umask may have narrowed `mode`; the caller asked for it.
        f.set_permissions(fs::Permissions::from_mode(mode))
            .map_err(io_err(&path))?;
        f.write_all(&e.bytes).map_err(io_err(&path))?;
        f.sync_all().map_err(io_err(&path))?;
    }
    fs::set_permissions(rev, fs::Permissions::from_mode(0o755)).map_err(io_err(rev))?;
    sync_dir(rev)
}

fn sync_dir(dir: &Path) -> Result<(), PublishError> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

/// `..YYYY_MM_DD_HH_MM_SS.N` in UTC, as the kubelet names revisions.
pub fn revision_name() -> String {
    let now = time::OffsetDateTime::now_utc();
    let mut r = [0u8; 8];
    let _ = aws_lc_rs::rand::fill(&mut r);
    format!(
        "..{:04}_{:02}_{:02}_{:02}_{:02}_{:02}.{}",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        now.second(),
        u64::from_le_bytes(r) % 10_000_000_000
    )
}

/// True for names [`revision_name`] (and the kubelet) produce.
pub fn is_revision_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("..") else {
        return false;
    };
    let Some((stamp, suffix)) = rest.split_once('.') else {
        return false;
    };
    let parts: Vec<&str> = stamp.split('_').collect();
    parts.len() == 6
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        && !suffix.is_empty()
        && suffix.bytes().all(|b| b.is_ascii_digit())
}

/// Parses `--mode` (octal permission bits, at most 0777, never writable by
/// others).
pub fn parse_mode(s: &str) -> Result<u32, PublishError> {
    let bad = |why: &str| PublishError::Usage(format!("--mode {s:?}: {why}"));
    let digits = s.strip_prefix("0o").unwrap_or(s);
    // from_str_radix alone would also take a sign ("+640").
    if !digits.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        return Err(bad("not an octal number such as 0640"));
    }
    let m = u32::from_str_radix(digits, 8).map_err(|_| bad("not an octal number such as 0640"))?;
    if m > 0o777 {
        return Err(bad("more than 0777"));
    }
    if m & 0o002 != 0 {
        return Err(bad("credential files must not be writable by others"));
    }
    Ok(m)
}

/// The `publish` subcommand; returns the exit status.
pub fn run(args: &crate::cli::PublishArgs) -> u8 {
    let result = parse_mode(&args.mode).and_then(|mode| {
        let entries = read_args(&args.files)?;
        if !args.no_check {
            check_credentials(&args.into, &entries)?;
        }
        publish(&args.into, &entries, mode).map(|p| (p, entries))
    });
    match result {
        Ok((p, entries)) => {
            // The names published, as read_args gave them.
            let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
            println!(
                "published {} into {} ({}){}",
                p.revision,
                args.into.display(),
                names.join(", "),
                p.replaced
                    .map(|o| format!("; removed the previous revision {o}"))
                    .unwrap_or_default()
            );
            if !p.dropped.is_empty() {
                println!("no longer published: {}", p.dropped.join(", "));
            }
            0
        }
        Err(e) => {
            eprintln!("error: {e}");
            e.exit_code()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in ["tls.crt", "ca.crl", ".hidden", "a..b"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", ".", "..", "..data", "a/b", "../x", "x\0"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert!(is_revision_name(&revision_name()));
        assert!(is_revision_name("..2026_11_30_10_00_00.1234"));
        for not in [
            "..data",
            "..data_tmp",
            "..2026_11_30.1",
            "tls.crt",
            "..2026_11_30_10_00_00.",
        ] {
            assert!(!is_revision_name(not), "{not}");
        }
    }

    #[test]
    fn modes() {
        assert_eq!(parse_mode("0640").unwrap(), 0o640);
        assert_eq!(parse_mode("600").unwrap(), 0o600);
        // "+640": found by fuzz/fuzz_targets/publish_args.rs.
        for bad in ["0666", "1777", "rw", "", "0o1000", "+640", "0o+640", "-0"] {
            assert!(parse_mode(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn swaps_and_cleans_up() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("tls");
        let one = |n: &str, b: &str| Entry {
            name: n.into(),
            bytes: b.as_bytes().to_vec(),
        };
        let p1 = publish(&d, &[one("a", "1"), one("b", "1")], 0o640).unwrap();
        assert_eq!(p1.replaced, None);
        assert_eq!(fs::read_to_string(d.join("a")).unwrap(), "1");
        // A stale temp link from an interrupted publish is no obstacle.
        symlink("nowhere", d.join(DATA_TMP)).unwrap();
        let p2 = publish(&d, &[one("a", "2")], 0o600).unwrap();
        assert_eq!(p2.replaced.as_deref(), Some(p1.revision.as_str()));
        assert_eq!(p2.dropped, vec!["b".to_string()]);
        assert_eq!(fs::read_to_string(d.join("a")).unwrap(), "2");
        assert!(!d.join(&p1.revision).exists());
        assert!(fs::symlink_metadata(d.join("b")).is_err());
        assert!(fs::symlink_metadata(d.join(DATA_TMP)).is_err());
        let meta = fs::metadata(d.join(&p2.revision).join("a")).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        // A plain file under a published name is refused, nothing changes.
        fs::write(d.join("c"), "plain").unwrap();
        assert!(matches!(
            publish(&d, &[one("c", "3")], 0o640),
            Err(PublishError::Layout { .. })
        ));
        assert_eq!(
            fs::read_link(d.join(DATA_LINK)).unwrap(),
            Path::new(&p2.revision)
        );
    }
}

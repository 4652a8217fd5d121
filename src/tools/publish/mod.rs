//! `mtls-sidecar publish --into DIR FILE...`: write files as one new
//! revision of DIR, laid out the way the kubelet lays out a Secret volume
//! ([`layout`]), for renewal hooks on VMs.
//!
//! Why it keeps what it was not given: a renewal hook knows the files it
//! renewed (`tls.crt tls.key ca.crt`), not the `ca.crl` someone published
//! last week. Were the new revision only the files given, every renewal
//! would remove the CRL and silently admit every peer it revokes. So every
//! file of the revision in force that is not given is carried into the new
//! one, said on stderr, and only `--drop NAME` removes a file.
//!
//! Why it validates every file: the new revision (given and kept files
//! alike) is judged by the sidecar's own loader ([`verdict`]) before
//! anything is written, so a revision the sidecar would reject is never
//! published (`--no-check` skips that), and the per-file verdict it prints
//! (which CA verified each CRL) is the one the sidecar will reach.

pub mod layout;
pub mod verdict;

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

pub use layout::{is_revision_name, publish, revision_name, DATA_TMP};

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

/// What to publish: the files given, the names to drop from the revision
/// in force, whether to validate, and the permission bits.
#[derive(Debug, Clone)]
pub struct Request {
    pub given: Vec<Entry>,
    pub drop: Vec<String>,
    pub check: bool,
    pub mode: u32,
    /// The sidecars' `--crl-prune-age`, for the verdict.
    pub crl_prune_age: std::time::Duration,
}

/// What [`publish_request`] did, for the command to report.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub published: Published,
    /// Files of the previous revision carried over (not given, not dropped).
    pub kept: Vec<String>,
    /// `--drop` names the previous revision did not have.
    pub drop_absent: Vec<String>,
    /// What the sidecar will make of each file (empty with `--no-check` or
    /// when the revision holds no credential file).
    pub judged: verdict::Judged,
}

/// A new revision put together from the files given and the revision in
/// force.
#[derive(Debug, Clone)]
pub struct Assembled {
    pub entries: Vec<Entry>,
    /// Names carried over from the revision in force.
    pub kept: Vec<String>,
    /// `--drop` names the revision in force lacks.
    pub drop_absent: Vec<String>,
}

/// The new revision: the given files, then every file of `current` that
/// is neither given nor dropped.
pub fn assemble(
    given: &[Entry],
    current: &[Entry],
    drop: &[String],
) -> Result<Assembled, PublishError> {
    let mut entries = given.to_vec();
    let mut kept = Vec::new();
    for e in current {
        let is_given = given.iter().any(|g| g.name == e.name);
        if !is_given && !drop.contains(&e.name) {
            kept.push(e.name.clone());
            entries.push(e.clone());
        }
    }
    if entries.len() > MAX_FILES {
        return Err(PublishError::Usage(format!(
            "{} files with the {} kept from the previous revision; a revision holds at most {MAX_FILES} (--drop some)",
            entries.len(),
            kept.len()
        )));
    }
    let drop_absent = drop
        .iter()
        .filter(|d| !current.iter().any(|e| &e.name == *d))
        .cloned()
        .collect();
    Ok(Assembled {
        entries,
        kept,
        drop_absent,
    })
}

/// Checks the `--drop` names: publishable names, none of them also given.
pub fn check_drops(given: &[Entry], drop: &[String]) -> Result<(), PublishError> {
    for d in drop {
        check_name(d)?;
        if given.iter().any(|g| &g.name == d) {
            return Err(PublishError::Usage(format!(
                "{d} is both given and dropped; give it to replace it, --drop it to remove it"
            )));
        }
    }
    Ok(())
}

/// Publishes `req` into `dir`, holding the directory's lock from reading
/// the revision in force to the swap: the files not given are carried
/// over, the whole revision is validated (unless `req.check` is false),
/// then written.
pub fn publish_request(dir: &Path, req: &Request) -> Result<Outcome, PublishError> {
    if req.given.is_empty() && req.drop.is_empty() {
        return Err(PublishError::Usage("nothing to publish".into()));
    }
    for e in &req.given {
        check_name(&e.name)?;
    }
    check_drops(&req.given, &req.drop)?;
    layout::locked(dir, || {
        let current = layout::current(dir)?;
        let Assembled {
            entries,
            kept,
            drop_absent,
        } = assemble(&req.given, &current, &req.drop)?;
        if entries.is_empty() {
            return Err(PublishError::Usage(format!(
                "{}: nothing would be left to publish",
                dir.display()
            )));
        }
        let (published, judged) = layout::write_locked(dir, &entries, req.mode, |staged| {
            if req.check {
                verdict::judge(dir, staged, std::time::SystemTime::now(), req.crl_prune_age)
            } else {
                Ok(verdict::Judged::default())
            }
        })?;
        Ok(Outcome {
            published,
            kept,
            drop_absent,
            judged,
        })
    })
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

/// `--crl-prune-age`, as `run` reads it.
fn prune_age(text: Option<&str>) -> Result<std::time::Duration, PublishError> {
    crate::config::crl_prune_age(text).map_err(|e| PublishError::Usage(e.to_string()))
}

/// The `publish` subcommand; returns the exit status.
pub fn run(args: &crate::cli::PublishArgs) -> u8 {
    let result = parse_mode(&args.mode).and_then(|mode| {
        let crl_prune_age = prune_age(args.crl_prune_age.as_deref())?;
        let given = match args.files.is_empty() {
            // `--drop NAME` alone: a revision of what is kept.
            true => Vec::new(),
            false => read_args(&args.files)?,
        };
        let req = Request {
            given,
            drop: args.drop.clone(),
            check: !args.no_check,
            mode,
            crl_prune_age,
        };
        publish_request(&args.into, &req)
    });
    match result {
        Ok(o) => {
            report(&args.into, &o);
            0
        }
        Err(e) => {
            eprintln!("error: {e}");
            e.exit_code()
        }
    }
}

/// Prints what a publish did: the result and each file's verdict on
/// stdout, what was kept or not found to drop on stderr (a renewal hook's
/// log shows it even when stdout goes elsewhere).
fn report(dir: &Path, o: &Outcome) {
    let p = &o.published;
    println!(
        "published {} into {}{}",
        p.revision,
        dir.display(),
        p.replaced
            .as_ref()
            .map(|old| format!("; removed the previous revision {old}"))
            .unwrap_or_default()
    );
    for line in &o.judged.lines {
        println!("  {line}");
    }
    for line in &o.judged.warnings {
        eprintln!("warning: {line}");
    }
    if !o.kept.is_empty() {
        eprintln!(
            "kept from the previous revision (not given): {}; --drop NAME removes one",
            o.kept.join(", ")
        );
    }
    if !p.dropped.is_empty() {
        eprintln!("dropped (--drop): {}", p.dropped.join(", "));
    }
    if !o.drop_absent.is_empty() {
        eprintln!(
            "--drop {}: not in the previous revision, nothing to drop",
            o.drop_absent.join(", ")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(name: &str, b: &str) -> Entry {
        Entry {
            name: name.into(),
            bytes: b.as_bytes().to_vec(),
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
    fn keeps_what_is_not_given_unless_dropped() {
        let current = [e("ca.crl", "old crl"), e("note", "n"), e("tls.crt", "old")];
        let given = [e("tls.crt", "new")];
        let a = assemble(&given, &current, &[]).unwrap();
        assert_eq!(a.kept, ["ca.crl", "note"]);
        assert!(a.drop_absent.is_empty());
        assert_eq!(a.entries.len(), 3);
        assert_eq!(a.entries[0], e("tls.crt", "new"), "the given file wins");
        let drop = ["ca.crl".to_string(), "gone".to_string()];
        let a = assemble(&given, &current, &drop).unwrap();
        assert_eq!(a.kept, ["note"]);
        assert_eq!(a.drop_absent, ["gone"]);
        assert!(a.entries.iter().all(|x| x.name != "ca.crl"));
        // Given and dropped at once is a contradiction, not a choice.
        assert!(matches!(
            check_drops(&given, &["tls.crt".to_string()]),
            Err(PublishError::Usage(_))
        ));
        assert!(check_drops(&given, &["..data".to_string()]).is_err());
        // Carrying files over never exceeds the bound.
        let many: Vec<Entry> = (0..MAX_FILES).map(|i| e(&format!("f{i}"), "x")).collect();
        assert!(matches!(
            assemble(&given, &many, &[]),
            Err(PublishError::Usage(_))
        ));
    }
}

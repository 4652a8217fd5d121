//! Writing one revision of a directory the way the kubelet's atomic writer
//! does, and reading back the revision in force.
//!
//! Why this layout: a sidecar reads its credential directory while a renewal
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
//! Publishers take an exclusive `flock` on DIR ([`locked`]), so two renewal
//! hooks never interleave, and what one reads as the revision in force
//! ([`current`]) is still in force when it swaps.

use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{symlink, DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::{check_name, io_err, Entry, PublishError, Published, MAX_FILE, MAX_FILES};
use crate::credentials::DATA_LINK;

/// The temporary link renamed over `..data`.
pub const DATA_TMP: &str = "..data_tmp";

/// Runs `f` holding the exclusive lock on `dir` (created if missing).
pub fn locked<T>(
    dir: &Path,
    f: impl FnOnce() -> Result<T, PublishError>,
) -> Result<T, PublishError> {
    fs::create_dir_all(dir).map_err(io_err(dir))?;
    let lock = fs::File::open(dir).map_err(io_err(dir))?;
    lock.lock().map_err(io_err(dir))?;
    let result = f();
    let _ = lock.unlock();
    result
}

/// The files of the revision `..data` points at (none when DIR has no
/// `..data` yet), by their user-visible names. Call it holding [`locked`].
/// Bounded like the command line: at most [`MAX_FILES`] files of at most
/// [`MAX_FILE`] bytes; only regular files with publishable names count.
pub fn current(dir: &Path) -> Result<Vec<Entry>, PublishError> {
    let data = dir.join(DATA_LINK);
    let Some(target) = data_target(&data)? else {
        return Ok(Vec::new());
    };
    let rev = dir.join(target);
    let mut out = Vec::new();
    for entry in fs::read_dir(&rev).map_err(io_err(&rev))? {
        let entry = entry.map_err(io_err(&rev))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_file = entry.file_type().map(|t| t.is_file()).unwrap_or(false);
        if !is_file || check_name(&name).is_err() {
            continue;
        }
        if out.len() >= MAX_FILES {
            return Err(PublishError::Layout {
                path: rev,
                detail: format!("holds more than {MAX_FILES} files"),
            });
        }
        let path = entry.path();
        let mut bytes = Vec::new();
        fs::File::open(&path)
            .and_then(|f| f.take(MAX_FILE + 1).read_to_end(&mut bytes))
            .map_err(io_err(&path))?;
        if bytes.len() as u64 > MAX_FILE {
            return Err(PublishError::Layout {
                path,
                detail: format!("larger than {MAX_FILE} bytes"),
            });
        }
        out.push(Entry { name, bytes });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Where `..data` points, or `None` when it does not exist.
fn data_target(data: &Path) -> Result<Option<PathBuf>, PublishError> {
    match fs::symlink_metadata(data) {
        Ok(m) if m.file_type().is_symlink() => Ok(Some(fs::read_link(data).map_err(io_err(data))?)),
        Ok(_) => Err(PublishError::Layout {
            path: data.to_path_buf(),
            detail: "exists but is not a symlink".into(),
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(data)(e)),
    }
}

/// Publishes exactly `entries` as the new revision of `dir` (created if
/// missing), files written with permission bits `mode`: names the new
/// revision lacks are removed. No validation: [`super::publish_request`]
/// keeps files and validates first.
pub fn publish(dir: &Path, entries: &[Entry], mode: u32) -> Result<Published, PublishError> {
    if entries.is_empty() {
        return Err(PublishError::Usage("nothing to publish".into()));
    }
    for e in entries {
        check_name(&e.name)?;
    }
    locked(dir, || write_locked(dir, entries, mode, |_| Ok(()))).map(|(p, ())| p)
}

/// [`publish`] for a caller already holding [`locked`], with a last word:
/// `judge` sees the written (not yet swapped in) revision directory, and an
/// error from it removes that directory and leaves DIR as it was.
pub fn write_locked<T>(
    dir: &Path,
    entries: &[Entry],
    mode: u32,
    judge: impl FnOnce(&Path) -> Result<T, PublishError>,
) -> Result<(Published, T), PublishError> {
    let data = dir.join(DATA_LINK);
    let old = data_target(&data)?;
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
    let judged = write_revision(&rev, entries, mode).and_then(|()| judge(&rev));
    let verdict = match judged {
        Ok(v) => v,
        Err(e) => {
            let _ = fs::remove_dir_all(&rev);
            return Err(e);
        }
    };

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
    let published = Published {
        revision: rev_name,
        replaced: old.map(|o| o.to_string_lossy().into_owned()),
        dropped,
    };
    Ok((published, verdict))
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

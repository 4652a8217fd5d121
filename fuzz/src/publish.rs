//! The publish target's checks: `publish`'s `FILE` arguments (`NAME=PATH`
//! or `PATH`) and `--mode`, and what publishing the names they yield does
//! to a scratch directory: every file lands inside it under its name,
//! nothing outside it changes, a later revision of the layout drops the
//! rest, and a later `publish` request keeps what it is not given until
//! `--drop` removes it.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use mtls_sidecar::tools::publish::{
    check_name, is_revision_name, name_and_path, parse_mode, publish, publish_request, Entry,
    PublishError, Request,
};

/// `--mode` as documented: octal digits, `0o` allowed in front, at most
/// 0777, not writable by others.
fn reference_mode(s: &str) -> Option<u32> {
    let digits = s.strip_prefix("0o").unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        return None;
    }
    let digits = digits.trim_start_matches('0');
    if digits.len() > 3 {
        return None;
    }
    let m = digits.bytes().fold(0, |m, b| m * 8 + u32::from(b - b'0'));
    (m & 0o002 == 0).then_some(m)
}

/// What `check_name` must refuse, from the README: empty, `/` or NUL
/// inside, `.`, a name starting with `..`, more than 255 bytes.
fn reference_name_ok(n: &str) -> bool {
    !n.is_empty() && !n.contains(['/', '\0']) && n != "." && !n.starts_with("..") && n.len() <= 255
}

fn scratch() -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    base.join(format!(
        "mtls-fuzz-publish-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

/// The target: the first line is a `--mode`, the others `FILE` arguments.
pub fn check(text: &str) {
    let mut lines = text.split('\n');
    let mode_text = lines.next().unwrap_or_default();
    let mode = parse_mode(mode_text).ok();
    assert_eq!(mode, reference_mode(mode_text), "--mode {mode_text:?}");
    let mut entries: Vec<Entry> = Vec::new();
    for arg in lines.take(8) {
        let (name, path) = name_and_path(arg);
        if let Some((n, p)) = arg.split_once('=').filter(|(n, _)| !n.contains('/')) {
            assert_eq!(
                (name.as_str(), path.as_path()),
                (n, Path::new(p)),
                "{arg:?}"
            );
        } else {
            assert_eq!(path, Path::new(arg));
            assert!(!name.contains('/'), "{arg:?} -> {name:?}");
        }
        assert_eq!(
            check_name(&name).is_ok(),
            reference_name_ok(&name),
            "{name:?}"
        );
        if check_name(&name).is_ok() && entries.iter().all(|e| e.name != name) {
            entries.push(Entry {
                name,
                bytes: arg.as_bytes().to_vec(),
            });
        }
    }
    if entries.is_empty() {
        return;
    }
    let root = scratch();
    let dir = root.join("tls");
    let published = publish(&dir, &entries, mode.map_or(0o640, |m| m | 0o600));
    let published = published.unwrap_or_else(|e| panic!("{entries:?}: {e}"));
    assert!(
        is_revision_name(&published.revision),
        "{}",
        published.revision
    );
    let outside: Vec<_> = listing(&root);
    assert_eq!(outside, ["tls"], "publish wrote outside its directory");
    for e in &entries {
        assert_eq!(
            fs::read(dir.join(&e.name)).ok().as_ref(),
            Some(&e.bytes),
            "{:?}",
            e.name
        );
        let link = fs::read_link(dir.join(&e.name)).expect("a published name is a symlink");
        assert_eq!(link, Path::new("..data").join(&e.name));
    }
    let mut want: BTreeSet<String> = entries.iter().map(|e| e.name.clone()).collect();
    want.insert("..data".into());
    want.insert(published.revision.clone());
    let got: BTreeSet<String> = listing(&dir).into_iter().collect();
    assert_eq!(got, want);
    // A second revision with the first file only drops the others.
    let again = publish(&dir, &entries[..1], 0o600).unwrap_or_else(|e| panic!("{e}"));
    let mut dropped: Vec<String> = entries[1..].iter().map(|e| e.name.clone()).collect();
    dropped.sort();
    let mut got_dropped = again.dropped.clone();
    got_dropped.sort();
    assert_eq!(got_dropped, dropped);
    assert_eq!(again.replaced.as_deref(), Some(published.revision.as_str()));
    let got: BTreeSet<String> = listing(&dir).into_iter().collect();
    let want: BTreeSet<String> = [
        entries[0].name.clone(),
        "..data".into(),
        again.revision.clone(),
    ]
    .into_iter()
    .collect();
    assert_eq!(got, want);
    assert_eq!(listing(&root), ["tls"]);
    check_requests(&dir, &entries);
    assert_eq!(listing(&root), ["tls"]);
    fs::remove_dir_all(&root).expect("scratch removed");
}

/// With `dir` holding `entries[0]` alone: giving the others keeps it;
/// then dropping it (and a name never published) leaves the others, or
/// is refused when nothing would be left.
fn check_requests(dir: &Path, entries: &[Entry]) {
    let request = |given: &[Entry], drop: Vec<String>| Request {
        given: given.to_vec(),
        drop,
        check: false,
        mode: 0o600,
        crl_prune_age: mtls_sidecar::credentials::revocation::DEFAULT_CRL_PRUNE_AGE,
    };
    let first = entries[0].name.clone();
    if entries.len() > 1 {
        let o = publish_request(dir, &request(&entries[1..], vec![]))
            .unwrap_or_else(|e| panic!("{entries:?}: {e}"));
        assert_eq!(o.kept, [first.clone()]);
        assert!(o.published.dropped.is_empty(), "{:?}", o.published.dropped);
        assert_holds(dir, entries);
    }
    // A publishable name no entry has (at most 8 entries: one of 9 is free).
    let absent = (0..9)
        .map(|i| format!("absent-{i}"))
        .find(|n| entries.iter().all(|e| &e.name != n))
        .expect("a free name");
    let drop = vec![first.clone(), absent.clone()];
    match publish_request(dir, &request(&[], drop)) {
        Ok(o) => {
            assert!(entries.len() > 1);
            assert_eq!(o.published.dropped, [first]);
            assert_eq!(o.drop_absent, [absent]);
            assert_holds(dir, &entries[1..]);
        }
        Err(PublishError::Usage(_)) if entries.len() == 1 => assert_holds(dir, entries),
        Err(e) => panic!("{entries:?}: {e}"),
    }
}

/// `dir` publishes exactly `entries`, each with its bytes.
fn assert_holds(dir: &Path, entries: &[Entry]) {
    let visible: BTreeSet<String> = listing(dir)
        .into_iter()
        .filter(|n| !n.starts_with(".."))
        .collect();
    let want: BTreeSet<String> = entries.iter().map(|e| e.name.clone()).collect();
    assert_eq!(visible, want);
    for e in entries {
        assert_eq!(fs::read(dir.join(&e.name)).ok().as_ref(), Some(&e.bytes));
    }
}

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .map(|r| {
            r.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_mode_is_the_documented_one() {
        assert_eq!(reference_mode("0640"), Some(0o640));
        assert_eq!(reference_mode("0o600"), Some(0o600));
        assert_eq!(reference_mode("00000750"), Some(0o750));
        for bad in ["", "0o", "0666", "1000", "+640", "8", "0x1"] {
            assert_eq!(reference_mode(bad), None, "{bad}");
        }
    }
}

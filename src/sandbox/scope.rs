//! Where a credential file's directory is too broad to grant whole (the
//! root, a top-level directory, the home or working directory), and what
//! relative paths are relative to: the judgement behind every filesystem
//! grant of the [`Plan`](super::Plan).

use std::path::{Path, PathBuf};

/// What relative paths are relative to, and which directories are too
/// broad to grant whole when a credential file sits directly in one: the
/// root, a top-level directory (`/etc`, `/home`, `/tmp`…), the home
/// directory and the working directory (where a relative `--cert` lives:
/// `/` itself for a systemd service). A file there is granted alone; a
/// credential *directory* named as such is always granted whole.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    /// The working directory (canonical), when it can be read.
    pub(super) cwd: Option<PathBuf>,
    /// `$HOME` (canonical), when set and it exists.
    pub(super) home: Option<PathBuf>,
}

impl Scope {
    /// The scope of this process.
    pub fn of_process() -> Scope {
        let canonical = |p: PathBuf| std::fs::canonicalize(&p).unwrap_or(p);
        Scope {
            cwd: std::env::current_dir().ok().map(canonical),
            home: std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(|h| canonical(PathBuf::from(h))),
        }
    }

    /// `p` against the working directory when relative (symlinks are not
    /// resolved: a swap must keep working); as it is when that is unknown.
    pub(super) fn absolute(&self, p: &Path) -> PathBuf {
        match &self.cwd {
            // Joining an absolute path yields it unchanged.
            Some(cwd) => cwd.join(p),
            None => p.to_path_buf(),
        }
    }

    /// True when granting all of `dir` would grant far more than
    /// credentials; judged on both its spelling and its resolved form.
    pub(super) fn too_broad(&self, dir: &Path) -> bool {
        let broad = |d: &Path| {
            // "/" is one component, "/etc" two, a bare file's "" none.
            d.components().count() <= 2
                || Some(d) == self.cwd.as_deref()
                || Some(d) == self.home.as_deref()
        };
        broad(dir) || std::fs::canonicalize(dir).is_ok_and(|r| broad(&r))
    }
}

//! Publishes files into a directory exactly as the kubelet's atomic writer
//! does for Secret volumes, so the demo and the tests rotate credentials the
//! way a cluster does: a new `..YYYY_MM_DD_HH_MM_SS.<random>` directory
//! (created 0700, then 0755), a `..data_tmp` symlink to it renamed over
//! `..data`, user-visible names created once as `name -> ..data/name`, and
//! the previous revision directory removed afterwards.

use std::fs;
use std::io;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

/// A Secret-volume-style directory.
#[derive(Debug, Clone)]
pub struct AtomicDir {
    root: PathBuf,
}

impl AtomicDir {
    /// Uses `root` (created if missing).
    pub fn new(root: &Path) -> io::Result<AtomicDir> {
        fs::create_dir_all(root)?;
        Ok(AtomicDir {
            root: root.to_path_buf(),
        })
    }

    /// The directory to point `--tls-dir` at.
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// Publishes a whole new revision of `files` (name, contents).
    pub fn publish(&self, files: &[(&str, &[u8])]) -> io::Result<PathBuf> {
        let data = self.root.join("..data");
        let old = fs::read_link(&data).ok();
        let rev_name = super::publish::revision_name();
        let rev = self.root.join(&rev_name);
        fs::create_dir(&rev)?;
        fs::set_permissions(&rev, fs::Permissions::from_mode(0o700))?;
        for (name, bytes) in files {
            fs::write(rev.join(name), bytes)?;
        }
        fs::set_permissions(&rev, fs::Permissions::from_mode(0o755))?;
        let tmp = self.root.join("..data_tmp");
        let _ = fs::remove_file(&tmp);
        symlink(&rev_name, &tmp)?;
        fs::rename(&tmp, &data)?;
        for (name, _) in files {
            let visible = self.root.join(name);
            if fs::symlink_metadata(&visible).is_err() {
                symlink(Path::new("..data").join(name), &visible)?;
            }
        }
        if let Some(old) = old {
            if old != Path::new(&rev_name) {
                fs::remove_dir_all(self.root.join(old))?;
            }
        }
        Ok(rev)
    }
}

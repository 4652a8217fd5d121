//! The allow-list: what a prepared sidecar needs to read, bind and connect
//! to (its credentials, config file, listeners and targets, and the
//! resolver's files when a target is a host name), worked out before
//! anything is restricted.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::credentials::CredentialSource;
use crate::proxy::addr::{Addr, StdListener};
use crate::proxy::settings::RouteConfig;

use super::scope::Scope;

/// The files glibc's `files` and `dns` host lookups read (checked with
/// strace); any that is missing is skipped.
pub const RESOLVER_FILES: &[&str] = &[
    "/etc/hosts",
    "/etc/resolv.conf",
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/gai.conf",
];

/// The files a credential directory may hold (their symlink targets'
/// directories are readable too).
const CREDENTIAL_NAMES: &[&str] = &[
    "tls.crt",
    "tls.key",
    "ca.crt",
    "ca.crl",
    "intermediates",
    "deny",
];

/// What the sandbox allows: the process's whole allow-list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Directories whose files (at any depth) may be read and listed.
    pub read_dirs: BTreeSet<PathBuf>,
    /// Single files that may be read.
    pub read_files: BTreeSet<PathBuf>,
    /// Directories where unix sockets may be created and removed.
    pub socket_dirs: BTreeSet<PathBuf>,
    /// TCP ports that may be bound.
    pub bind_ports: BTreeSet<u16>,
    /// TCP ports that may be connected to.
    pub connect_ports: BTreeSet<u16>,
    /// Targets (`host:port`) named by host name, resolved once before the
    /// sandbox so the resolver has loaded what it needs.
    pub hostname_targets: Vec<String>,
}

impl Plan {
    /// The allow-list of a prepared sidecar (see `app::Prepared::sandbox_plan`):
    /// its credential sources, bound listeners, listen addresses as
    /// configured and routes; `config_file` is the file it was configured
    /// from, if any.
    pub fn for_sidecar<'a>(
        sources: impl Iterator<Item = &'a CredentialSource>,
        listeners: impl Iterator<Item = &'a StdListener>,
        listen_addrs: impl Iterator<Item = &'a Addr>,
        routes: impl Iterator<Item = &'a RouteConfig>,
        config_file: Option<&Path>,
    ) -> Plan {
        let scope = Scope::of_process();
        let mut plan = Plan::default();
        for source in sources {
            plan.allow_credentials(source, &scope);
        }
        if let Some(f) = config_file {
            plan.read_files.insert(scope.absolute(f));
        }
        plan.read_dirs.insert(PathBuf::from("/proc/self"));
        for l in listeners {
            if let Some(port) = l.tcp_port() {
                plan.bind_ports.insert(port);
            }
        }
        // Only sockets the process creates itself: not one systemd passed.
        for a in listen_addrs {
            if let Addr::Unix(p) = a {
                plan.socket_dirs.insert(parent_dir(&scope.absolute(p)));
            }
        }
        for route in routes {
            match &route.transparent {
                // A transparent route dials each rule's TLS port, from a
                // local port it binds first (ephemeral: Landlock's port 0)
                // so that a connection looping back can be recognised.
                Some(rules) => {
                    for r in &rules.rules {
                        plan.connect_ports.insert(r.tls_port);
                    }
                    plan.bind_ports.insert(0);
                }
                None => plan.allow_target(&route.target),
            }
        }
        if !plan.hostname_targets.is_empty() {
            // DNS answers too big for UDP are retried over TCP.
            plan.connect_ports.insert(53);
            for f in RESOLVER_FILES {
                plan.allow_resolver_file(Path::new(f), &scope);
            }
        }
        plan
    }

    /// The allow-list of `mtls-sidecar webhook`: reading its serving
    /// certificate's directory (whole, as a sidecar's) and `/proc/self`,
    /// binding its listen and admin ports; it writes nothing and connects
    /// to nothing (the API server calls it).
    pub fn for_webhook(tls_dir: &Path, bind_ports: impl IntoIterator<Item = u16>) -> Plan {
        let scope = Scope::of_process();
        let mut plan = Plan::default();
        plan.allow_credential_dir(tls_dir, &scope);
        plan.read_dirs.insert(PathBuf::from("/proc/self"));
        plan.bind_ports.extend(bind_ports);
        plan
    }

    fn allow_credentials(&mut self, source: &CredentialSource, scope: &Scope) {
        match source {
            CredentialSource::Dir(dir) => self.allow_credential_dir(dir, scope),
            CredentialSource::DirPair { identity, trust } => {
                self.allow_credential_dir(identity, scope);
                self.allow_credential_dir(trust, scope);
            }
            // Connecting to a Unix socket needs no Landlock file right.
            CredentialSource::WorkloadApi { .. } => {}
            CredentialSource::Files { .. } => {
                // `--crl`, `--intermediates` and `--deny-file` files are
                // read on every poll, like the others.
                for f in source.files() {
                    let f = scope.absolute(f);
                    self.allow_beside(&f, scope);
                    if let Ok(target) = std::fs::canonicalize(&f) {
                        self.allow_beside(&target, scope);
                    }
                }
            }
        }
    }

    /// A credential directory, granted whole however broad: the operator
    /// named it as one.
    fn allow_credential_dir(&mut self, dir: &Path, scope: &Scope) {
        let dir = scope.absolute(dir);
        self.read_dirs.insert(dir.clone());
        // A directory that is itself a symlink may be swapped to a
        // sibling of its target: the target's parent stays readable.
        if is_symlink(&dir) {
            if let Ok(target) = std::fs::canonicalize(&dir) {
                self.allow_beside(&target, scope);
            }
        }
        let root = std::fs::canonicalize(&dir).unwrap_or_else(|_| dir.clone());
        for name in CREDENTIAL_NAMES {
            if let Ok(target) = std::fs::canonicalize(dir.join(name)) {
                if !target.starts_with(&root) {
                    self.allow_beside(&target, scope);
                }
            }
        }
    }

    /// Keeps `path` readable: the directory it lives in, so that a file
    /// replaced by rename (a new inode, which a rule on the old one would
    /// not cover) stays readable; or only `path` itself when that directory
    /// is too broad to grant whole ([`Scope::too_broad`]). A credential file
    /// directly in `/`, say, must not make the whole filesystem readable.
    fn allow_beside(&mut self, path: &Path, scope: &Scope) {
        let dir = parent_dir(path);
        if scope.too_broad(&dir) {
            self.read_files.insert(path.to_path_buf());
        } else {
            self.read_dirs.insert(dir);
        }
    }

    fn allow_target(&mut self, target: &Addr) {
        let Addr::Tcp(a) = target else { return };
        if let Some(port) = a.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok()) {
            self.connect_ports.insert(port);
        }
        let is_ip = target
            .host()
            .is_some_and(|h| h.parse::<std::net::IpAddr>().is_ok());
        if !is_ip && !self.hostname_targets.contains(a) {
            self.hostname_targets.push(a.clone());
        }
    }

    fn allow_resolver_file(&mut self, f: &Path, scope: &Scope) {
        if !f.exists() {
            return;
        }
        self.read_files.insert(f.to_path_buf());
        // /etc/resolv.conf is often a symlink to a file its owner replaces
        // by rename (systemd-resolved): keep the directory it lives in.
        if is_symlink(f) {
            if let Ok(target) = std::fs::canonicalize(f) {
                self.allow_beside(&target, scope);
            }
        }
    }
}

fn is_symlink(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink())
}

/// The directory a path names its file in (`/` for the root itself; empty
/// for a bare file name, which [`Scope::absolute`] leaves only when the
/// working directory is unknown, and which [`Scope::too_broad`] refuses).
fn parent_dir(p: &Path) -> PathBuf {
    p.parent().unwrap_or(p).to_path_buf()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_webhook_reads_its_certificate_binds_its_ports_and_connects_nowhere() {
        let dir = tempfile::tempdir().unwrap();
        let plan = Plan::for_webhook(dir.path(), [8443, 9901]);
        assert_eq!(
            plan.read_dirs,
            BTreeSet::from([dir.path().to_path_buf(), PathBuf::from("/proc/self")])
        );
        assert!(plan.read_files.is_empty());
        assert_eq!(plan.bind_ports, BTreeSet::from([8443, 9901]));
        assert!(plan.connect_ports.is_empty() && plan.hostname_targets.is_empty());
        assert!(plan.socket_dirs.is_empty());
    }

    #[test]
    fn targets_give_connect_ports_and_host_names() {
        let mut plan = Plan::default();
        plan.allow_target(&"127.0.0.1:2100".parse().unwrap());
        plan.allow_target(&"[::1]:2101".parse().unwrap());
        plan.allow_target(&"replica.svc:6877".parse().unwrap());
        plan.allow_target(&"unix:/run/app.sock".parse().unwrap());
        assert_eq!(
            plan.connect_ports.iter().copied().collect::<Vec<_>>(),
            [2100, 2101, 6877]
        );
        assert_eq!(plan.hostname_targets, ["replica.svc:6877"]);
    }

    /// A scope whose working and home directories are given.
    fn scope(cwd: &Path, home: &Path) -> Scope {
        Scope {
            cwd: Some(cwd.to_path_buf()),
            home: Some(home.to_path_buf()),
        }
    }

    fn files(cert: &Path, key: &Path, ca: &Path) -> CredentialSource {
        CredentialSource::Files {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            ca: ca.to_path_buf(),
            crl: None,
            intermediates: None,
            deny: None,
        }
    }

    #[test]
    fn explicit_files_allow_their_directories() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("real");
        let links = tmp.path().join("links");
        std::fs::create_dir_all(&real).unwrap();
        std::fs::create_dir_all(&links).unwrap();
        std::fs::write(real.join("c.pem"), "x").unwrap();
        std::os::unix::fs::symlink(real.join("c.pem"), links.join("c.pem")).unwrap();
        let mut plan = Plan::default();
        let c = links.join("c.pem");
        plan.allow_credentials(
            &files(&c, &c, &c),
            &scope(Path::new("/x/y"), Path::new("/h/u")),
        );
        let want: BTreeSet<PathBuf> = [links, std::fs::canonicalize(&real).unwrap()].into();
        assert_eq!(plan.read_dirs, want);
        assert!(plan.read_files.is_empty(), "{:?}", plan.read_files);
    }

    /// The review finding: a file at the root, in a top-level directory, in
    /// the home directory or (relative) in the working directory must not
    /// make that whole directory readable: only the file is.
    #[test]
    fn a_file_in_a_broad_directory_is_granted_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let work = std::fs::canonicalize(tmp.path()).unwrap();
        let home = Path::new("/nonexistent-home/alice");
        let narrow = work.join("tls");
        let cases: [(&Path, PathBuf); 5] = [
            (
                Path::new("/mtls-sidecar-test.pem"),
                "/mtls-sidecar-test.pem".into(),
            ),
            (
                Path::new("/etc/mtls-sidecar-test.pem"),
                "/etc/mtls-sidecar-test.pem".into(),
            ),
            (&home.join("key.pem"), home.join("key.pem")),
            (Path::new("key.pem"), work.join("key.pem")),
            (&work.join("ca.pem"), work.join("ca.pem")),
        ];
        for (given, granted) in cases {
            let mut plan = Plan::default();
            let cert = narrow.join("tls.crt");
            plan.allow_credentials(&files(&cert, given, &cert), &scope(&work, home));
            let dirs: BTreeSet<PathBuf> = [narrow.clone()].into();
            assert_eq!(plan.read_dirs, dirs, "{given:?}");
            let files: BTreeSet<PathBuf> = [granted].into();
            assert_eq!(plan.read_files, files, "{given:?}");
        }
    }

    /// A relative path is made absolute against the working directory
    /// (its directory granted when narrow enough), not kept as `.`-based.
    #[test]
    fn relative_paths_are_made_absolute() {
        let work = Path::new("/srv/app");
        let mut plan = Plan::default();
        let rel = Path::new("tls/tls.crt");
        plan.allow_credentials(&files(rel, rel, rel), &scope(work, Path::new("/root")));
        let want: BTreeSet<PathBuf> = [work.join("tls")].into();
        assert_eq!(plan.read_dirs, want);
        let mut plan = Plan::default();
        plan.allow_credentials(&CredentialSource::Dir("tls".into()), &scope(work, work));
        assert_eq!(plan.read_dirs, want);
    }

    /// A credential directory that is itself a symlink may be swapped to a
    /// sibling of its target (a `..data`-style swap one level up): the
    /// target's parent stays readable.
    #[test]
    fn a_symlinked_directory_allows_its_targets_siblings() {
        let tmp = tempfile::tempdir().unwrap();
        let store = std::fs::canonicalize(tmp.path()).unwrap().join("store");
        std::fs::create_dir_all(store.join("rev-1")).unwrap();
        let link = tmp.path().join("current");
        std::os::unix::fs::symlink(store.join("rev-1"), &link).unwrap();
        let mut plan = Plan::default();
        let home = Path::new("/h/u");
        plan.allow_credentials(&CredentialSource::Dir(link.clone()), &scope(home, home));
        let want: BTreeSet<PathBuf> = [link, store].into();
        assert_eq!(plan.read_dirs, want);
    }

    /// Without a known working directory a bare file name stays relative,
    /// and its directory (empty) is too broad: the file alone.
    #[test]
    fn a_bare_file_name_without_a_working_directory_is_granted_alone() {
        let mut plan = Plan::default();
        let f = Path::new("k.pem");
        plan.allow_credentials(&files(f, f, f), &Scope::default());
        assert!(plan.read_dirs.is_empty(), "{:?}", plan.read_dirs);
        let want: BTreeSet<PathBuf> = [f.to_path_buf()].into();
        assert_eq!(plan.read_files, want);
    }

    /// A credential directory is granted whole wherever it is (`..data`
    /// swaps), even where a file would be granted alone.
    #[test]
    fn a_credential_directory_is_granted_whole() {
        let work = Path::new("/srv");
        let mut plan = Plan::default();
        plan.allow_credentials(&CredentialSource::Dir(work.into()), &scope(work, work));
        let want: BTreeSet<PathBuf> = [work.to_path_buf()].into();
        assert_eq!(plan.read_dirs, want);
        assert!(plan.read_files.is_empty());
    }

    #[test]
    fn a_directory_of_symlinks_allows_where_they_point() {
        let tmp = tempfile::tempdir().unwrap();
        let store = tmp.path().join("store");
        let links = tmp.path().join("links");
        std::fs::create_dir_all(&store).unwrap();
        std::fs::create_dir_all(&links).unwrap();
        for f in ["tls.crt", "tls.key", "ca.crt"] {
            std::fs::write(store.join(f), "x").unwrap();
            std::os::unix::fs::symlink(store.join(f), links.join(f)).unwrap();
        }
        let mut plan = Plan::default();
        let home = Path::new("/h/u");
        plan.allow_credentials(&CredentialSource::Dir(links.clone()), &scope(home, home));
        let want: BTreeSet<PathBuf> = [links, std::fs::canonicalize(&store).unwrap()].into();
        assert_eq!(plan.read_dirs, want);
    }
}

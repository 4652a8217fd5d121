//! Reading one whole revision of credential files from disk, the way the
//! kubelet publishes them: through the `..data` symlink, checked not to have
//! moved while we read, and identified by a hash of the contents.

use std::fs;
use std::path::{Path, PathBuf};

use super::CredError;

/// The certificate file name in a credential directory (a Secret mount).
pub const CERT_FILE: &str = "tls.crt";
/// The private key file name in a credential directory.
pub const KEY_FILE: &str = "tls.key";
/// The CA bundle file name in a credential directory.
pub const CA_FILE: &str = "ca.crt";
/// The optional certificate revocation list file in a credential directory.
pub const CRL_FILE: &str = "ca.crl";
/// The optional file of known intermediate CAs (PEM) in a credential
/// directory: the issuers CRLs may be signed by besides the anchors. Never
/// trust anchors themselves.
pub const INTERMEDIATES_FILE: &str = "intermediates";
/// The optional deny-list file in a credential directory (one entry a
/// line: see [`crate::credentials::deny`]).
pub const DENY_FILE: &str = "deny";
/// The symlink the kubelet's atomic writer swaps to publish a revision.
pub const DATA_LINK: &str = "..data";

/// Where credentials are read from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CredentialSource {
    /// A directory holding `tls.crt`, `tls.key` and `ca.crt` (and optionally
    /// `ca.crl`); a Kubernetes Secret volume or a plain directory.
    Dir(PathBuf),
    /// Two directories, each read through its own `..data` link: `identity`
    /// holds `tls.crt` and `tls.key`, `trust` holds `ca.crt` (and
    /// optionally `ca.crl`, `intermediates`, `deny`); whatever else either
    /// holds is ignored (a csi-driver volume's own `ca.crt` among them).
    DirPair { identity: PathBuf, trust: PathBuf },
    /// Three explicit files, a CRL file when `--crl` is given, an
    /// intermediates file when `--intermediates` is, and a deny-list when
    /// `--deny-file` is.
    Files {
        cert: PathBuf,
        key: PathBuf,
        ca: PathBuf,
        crl: Option<PathBuf>,
        intermediates: Option<PathBuf>,
        deny: Option<PathBuf>,
    },
    /// The SPIFFE Workload API at `endpoint` (`unix:///path`): every X.509
    /// context the agent streams is one revision (see
    /// [`crate::credentials::workload`]). `svid` picks the SVID with that
    /// SPIFFE ID; without it, the first.
    WorkloadApi {
        endpoint: String,
        svid: Option<String>,
    },
}

impl std::fmt::Display for CredentialSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CredentialSource::Dir(d) => write!(f, "{}", d.display()),
            CredentialSource::DirPair { identity, trust } => {
                write!(f, "{} (trust {})", identity.display(), trust.display())
            }
            CredentialSource::Files { .. } => {
                let names: Vec<String> = self
                    .files()
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect();
                write!(f, "{}", names.join(", "))?;
                Ok(())
            }
            CredentialSource::WorkloadApi { endpoint, svid } => match svid {
                Some(id) => write!(f, "workload-api {endpoint} ({id})"),
                None => write!(f, "workload-api {endpoint}"),
            },
        }
    }
}

/// One file's bytes and the path a user knows it by.
#[derive(Debug, Clone)]
pub struct RawFile {
    pub path: PathBuf,
    pub bytes: Vec<u8>,
}

/// The files of one revision, read together, with their content hash.
#[derive(Debug, Clone)]
pub struct RawRevision {
    pub cert: RawFile,
    pub key: RawFile,
    pub ca: RawFile,
    /// `ca.crl` (or `--crl`), when there is one.
    pub crl: Option<RawFile>,
    /// `intermediates` (or `--intermediates`), when there is one.
    pub intermediates: Option<RawFile>,
    /// `deny` (or `--deny-file`), when there is one (it may be empty).
    pub deny: Option<RawFile>,
    /// Federated bundles (Workload API `federated_bundles`): a trust
    /// domain and its bundle's certificates (PEM, possibly none), in
    /// trust-domain order. Empty for directory and file sources.
    pub federated: Vec<(String, RawFile)>,
    /// Hex SHA-256 over the contents: the revision's identity.
    pub hash: String,
}

impl RawRevision {
    /// A revision of three files (no CRL), hashed.
    pub fn new(cert: RawFile, key: RawFile, ca: RawFile) -> RawRevision {
        RawRevision::with_crl(cert, key, ca, None)
    }

    /// A revision with an optional CRL, hashed. Without a CRL the hash is
    /// the three files' alone, as before CRLs existed.
    pub fn with_crl(cert: RawFile, key: RawFile, ca: RawFile, crl: Option<RawFile>) -> RawRevision {
        let hash = match &crl {
            None => content_hash(&[&cert.bytes, &key.bytes, &ca.bytes]),
            Some(crl) => content_hash(&[&cert.bytes, &key.bytes, &ca.bytes, &crl.bytes]),
        };
        RawRevision {
            cert,
            key,
            ca,
            crl,
            intermediates: None,
            deny: None,
            federated: Vec::new(),
            hash,
        }
    }

    /// The same revision with these federated bundles, hashed with them
    /// (without any, the hash stays what it was before they existed).
    pub fn with_federated(mut self, mut bundles: Vec<(String, RawFile)>) -> RawRevision {
        bundles.sort_by(|a, b| a.0.cmp(&b.0));
        for (td, file) in &bundles {
            self.hash = content_hash(&[
                self.hash.as_bytes(),
                b"federated",
                td.as_bytes(),
                &file.bytes,
            ]);
        }
        self.federated = bundles;
        self
    }

    /// The same revision with an `intermediates` file, hashed with it
    /// (without one, the hash stays what it was before the file existed).
    pub fn with_intermediates(mut self, file: Option<RawFile>) -> RawRevision {
        if let Some(f) = &file {
            let crl: &[u8] = self.crl.as_ref().map_or(&[], |c| &c.bytes);
            self.hash = content_hash(&[
                &self.cert.bytes,
                &self.key.bytes,
                &self.ca.bytes,
                crl,
                INTERMEDIATES_FILE.as_bytes(),
                &f.bytes,
            ]);
        }
        self.intermediates = file;
        self
    }

    /// The same revision with a `deny` file, hashed with it (without one,
    /// the hash stays what it was before the file existed). Applied last.
    pub fn with_deny(mut self, file: Option<RawFile>) -> RawRevision {
        if let Some(f) = &file {
            self.hash = content_hash(&[self.hash.as_bytes(), DENY_FILE.as_bytes(), &f.bytes]);
        }
        self.deny = file;
        self
    }
}

/// How often a read that raced a `..data` swap is retried before giving up
/// until the next poll.
const LINK_RETRIES: usize = 5;

impl CredentialSource {
    /// The files of a `Files` source: cert, key, ca, then each optional
    /// file given (crl, intermediates, deny); empty for a directory.
    pub fn files(&self) -> Vec<&PathBuf> {
        match self {
            CredentialSource::Dir(_)
            | CredentialSource::DirPair { .. }
            | CredentialSource::WorkloadApi { .. } => Vec::new(),
            CredentialSource::Files {
                cert,
                key,
                ca,
                crl,
                intermediates,
                deny,
            } => [cert, key, ca]
                .into_iter()
                .chain([crl, intermediates, deny].into_iter().flatten())
                .collect(),
        }
    }

    /// Reads one consistent revision. A Workload API source is not read
    /// but fed: its store reads what the client last received.
    pub fn read(&self) -> Result<RawRevision, CredError> {
        match self {
            CredentialSource::WorkloadApi { endpoint, .. } => Err(CredError::Read {
                path: PathBuf::from(endpoint),
                detail: "no X.509 context received from the Workload API yet".into(),
            }),
            CredentialSource::Files {
                cert,
                key,
                ca,
                crl,
                intermediates,
                deny,
            } => {
                let crl = match crl {
                    Some(path) => Some(read_file(path)?),
                    None => None,
                };
                let intermediates = match intermediates {
                    Some(path) => Some(read_file(path)?),
                    None => None,
                };
                let deny = match deny {
                    Some(path) => Some(read_deny(path)?),
                    None => None,
                };
                Ok(read_revision(cert, key, ca, crl)?
                    .with_intermediates(intermediates)
                    .with_deny(deny))
            }
            CredentialSource::Dir(dir) => read_linked(dir, read_dir_files),
            CredentialSource::DirPair { identity, trust } => {
                let (cert, key) = read_linked(identity, read_identity_files)?;
                let trust = read_linked(trust, read_dir_trust)?;
                Ok(RawRevision::with_crl(cert, key, trust.ca, trust.crl)
                    .with_intermediates(trust.intermediates)
                    .with_deny(trust.deny))
            }
        }
    }

    /// The directory whose changes can wake a poller early.
    pub fn watch_dirs(&self) -> Vec<PathBuf> {
        match self {
            CredentialSource::Dir(d) => vec![d.clone()],
            CredentialSource::DirPair { identity, trust } => vec![identity.clone(), trust.clone()],
            CredentialSource::WorkloadApi { .. } => Vec::new(),
            CredentialSource::Files {
                cert,
                key,
                ca,
                crl,
                intermediates,
                deny,
            } => {
                let mut v: Vec<PathBuf> = [
                    Some(cert),
                    Some(key),
                    Some(ca),
                    crl.as_ref(),
                    intermediates.as_ref(),
                    deny.as_ref(),
                ]
                .into_iter()
                .flatten()
                .filter_map(|p| p.parent().map(Path::to_path_buf))
                .collect();
                v.sort();
                v.dedup();
                v
            }
        }
    }
}

fn read_link(link: &Path) -> Result<PathBuf, CredError> {
    fs::read_link(link).map_err(|e| CredError::Read {
        path: link.to_path_buf(),
        detail: e.to_string(),
    })
}

/// Reads one credential file the way a revision read does: a missing file
/// and a whitespace-only file are errors naming the path. `check` uses it to
/// report each file on its own line.
pub fn read_file(path: &Path) -> Result<RawFile, CredError> {
    let bytes = fs::read(path).map_err(|e| CredError::Read {
        path: path.to_path_buf(),
        detail: match e.kind() {
            std::io::ErrorKind::NotFound => "file not found".to_string(),
            _ => e.to_string(),
        },
    })?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(CredError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(RawFile {
        path: path.to_path_buf(),
        bytes,
    })
}

fn read_revision(
    cert: &Path,
    key: &Path,
    ca: &Path,
    crl: Option<RawFile>,
) -> Result<RawRevision, CredError> {
    let cert = read_file(cert)?;
    let key = read_file(key)?;
    let ca = read_file(ca)?;
    Ok(RawRevision::with_crl(cert, key, ca, crl))
}

/// The files read from one directory, renamed as the user sees them.
trait Files {
    fn files_mut(&mut self) -> Vec<&mut RawFile>;
}

impl Files for RawRevision {
    fn files_mut(&mut self) -> Vec<&mut RawFile> {
        let mut v = vec![&mut self.cert, &mut self.key, &mut self.ca];
        v.extend(
            [&mut self.crl, &mut self.intermediates, &mut self.deny]
                .into_iter()
                .flatten(),
        );
        v
    }
}

impl Files for (RawFile, RawFile) {
    fn files_mut(&mut self) -> Vec<&mut RawFile> {
        vec![&mut self.0, &mut self.1]
    }
}

impl Files for TrustFiles {
    fn files_mut(&mut self) -> Vec<&mut RawFile> {
        let mut v = vec![&mut self.ca];
        v.extend(
            [&mut self.crl, &mut self.intermediates, &mut self.deny]
                .into_iter()
                .flatten(),
        );
        v
    }
}

/// Reads `dir` with `read`: through its `..data` link when it has one
/// (the link checked not to have moved while reading, the files named as
/// the user sees them, `dir/NAME`), else directly.
fn read_linked<T: Files>(
    dir: &Path,
    read: fn(&Path) -> Result<T, CredError>,
) -> Result<T, CredError> {
    let link = dir.join(DATA_LINK);
    let is_link = fs::symlink_metadata(&link)
        .map(|m| m.file_type().is_symlink())
        .unwrap_or(false);
    if !is_link {
        if !dir.is_dir() {
            return Err(CredError::Read {
                path: dir.to_path_buf(),
                detail: "not a directory (or missing)".into(),
            });
        }
        return read(dir);
    }
    for _ in 0..LINK_RETRIES {
        let before = read_link(&link)?;
        let rev_dir = dir.join(&before);
        let mut rev = read(&rev_dir);
        if read_link(&link)? != before {
            continue;
        }
        // Name files as the user sees them; the revision they came
        // from is in the hash and the logs.
        if let Ok(r) = &mut rev {
            for f in r.files_mut() {
                if let Some(name) = f.path.file_name() {
                    f.path = dir.join(name);
                }
            }
        }
        return rev.map_err(|e| e.within(&rev_dir));
    }
    Err(CredError::Read {
        path: link,
        detail: format!("the link kept moving during {LINK_RETRIES} reads"),
    })
}

/// A trust directory's files: `ca.crt`, and the optional ones.
struct TrustFiles {
    ca: RawFile,
    crl: Option<RawFile>,
    intermediates: Option<RawFile>,
    deny: Option<RawFile>,
}

/// An identity directory's `tls.crt` and `tls.key`.
fn read_identity_files(dir: &Path) -> Result<(RawFile, RawFile), CredError> {
    Ok((
        read_file(&dir.join(CERT_FILE))?,
        read_file(&dir.join(KEY_FILE))?,
    ))
}

/// A trust directory's `ca.crt`, and `ca.crl`, `intermediates` and
/// `deny` when they exist.
fn read_dir_trust(dir: &Path) -> Result<TrustFiles, CredError> {
    Ok(TrustFiles {
        crl: read_optional(&dir.join(CRL_FILE))?,
        intermediates: read_optional(&dir.join(INTERMEDIATES_FILE))?,
        deny: read_if_present(&dir.join(DENY_FILE), read_deny)?,
        ca: read_file(&dir.join(CA_FILE))?,
    })
}

/// Reads a directory's files: the three required ones, and `ca.crl`,
/// `intermediates` and `deny` when they exist (all optional).
fn read_dir_files(dir: &Path) -> Result<RawRevision, CredError> {
    let crl = read_optional(&dir.join(CRL_FILE))?;
    let intermediates = read_optional(&dir.join(INTERMEDIATES_FILE))?;
    let deny = read_if_present(&dir.join(DENY_FILE), read_deny)?;
    Ok(read_revision(
        &dir.join(CERT_FILE),
        &dir.join(KEY_FILE),
        &dir.join(CA_FILE),
        crl,
    )?
    .with_intermediates(intermediates)
    .with_deny(deny))
}

/// Reads a deny file. Unlike the other files it may be empty (every entry
/// lifted); it is read no further than the most a deny file may hold, so
/// a huge file costs a bounded read and is rejected by the parser.
pub fn read_deny(path: &Path) -> Result<RawFile, CredError> {
    use std::io::Read;
    let cap = super::deny::MAX_DENY_BYTES as u64 + 1;
    let read = fs::File::open(path).and_then(|f| {
        let mut bytes = Vec::new();
        f.take(cap).read_to_end(&mut bytes).map(|_| bytes)
    });
    let bytes = read.map_err(|e| CredError::Read {
        path: path.to_path_buf(),
        detail: match e.kind() {
            std::io::ErrorKind::NotFound => "file not found".to_string(),
            _ => e.to_string(),
        },
    })?;
    Ok(RawFile {
        path: path.to_path_buf(),
        bytes,
    })
}

/// An optional file: `None` when it does not exist, else read as any other.
fn read_optional(path: &Path) -> Result<Option<RawFile>, CredError> {
    read_if_present(path, read_file)
}

/// `None` when nothing is at `path`; else `read` reads it (so a path that
/// cannot even be looked up is `read`'s error, never taken for absent).
fn read_if_present(
    path: &Path,
    read: fn(&Path) -> Result<RawFile, CredError>,
) -> Result<Option<RawFile>, CredError> {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        _ => read(path).map(Some),
    }
}

/// Hex SHA-256 over length-prefixed parts, so moving bytes between files
/// changes the hash.
pub fn content_hash(parts: &[&[u8]]) -> String {
    let mut ctx = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
    for p in parts {
        ctx.update(&(p.len() as u64).to_be_bytes());
        ctx.update(p);
    }
    ctx.finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files_source(dir: &Path, crl: bool) -> CredentialSource {
        CredentialSource::Files {
            cert: dir.join("a/tls.crt"),
            key: dir.join("b/tls.key"),
            ca: dir.join("a/ca.crt"),
            crl: crl.then(|| dir.join("c/ca.crl")),
            intermediates: None,
            deny: None,
        }
    }

    /// A deny file is read one byte past the most it may hold, so the
    /// parser sees it is too large instead of a cut-off file that fits.
    #[test]
    fn a_deny_file_is_read_one_byte_past_its_limit() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("deny");
        let limit = crate::credentials::deny::MAX_DENY_BYTES;
        fs::write(&path, "#".repeat(limit + 100)).unwrap();
        assert_eq!(read_deny(&path).unwrap().bytes.len(), limit + 1);
        fs::write(&path, "#".repeat(limit)).unwrap();
        assert_eq!(read_deny(&path).unwrap().bytes.len(), limit);
    }

    /// A missing file is named as such, not as the OS's error text.
    #[test]
    fn a_missing_file_says_file_not_found() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("gone");
        for e in [read_file(&path).unwrap_err(), read_deny(&path).unwrap_err()] {
            assert!(
                e.to_string().ends_with(": cannot read: file not found"),
                "{e}"
            );
        }
    }

    /// A kubelet-style directory is read through its `..data` link, from the
    /// revision directory it names: the top-level links are not needed, and
    /// an optional file there (the CRL) is read too.
    #[test]
    fn a_data_link_is_followed_to_its_revision_with_its_optional_files() {
        let tmp = tempfile::tempdir().unwrap();
        let rev = tmp.path().join("..rev_1");
        fs::create_dir(&rev).unwrap();
        for (name, text) in [
            (CERT_FILE, "cert"),
            (KEY_FILE, "key"),
            (CA_FILE, "ca"),
            (CRL_FILE, "crl"),
        ] {
            fs::write(rev.join(name), text).unwrap();
        }
        std::os::unix::fs::symlink("..rev_1", tmp.path().join(DATA_LINK)).unwrap();
        let got = CredentialSource::Dir(tmp.path().to_path_buf())
            .read()
            .unwrap();
        assert_eq!(got.cert.bytes, b"cert");
        assert_eq!(got.cert.path, tmp.path().join(CERT_FILE));
        let crl = got.crl.expect("the CRL read");
        assert_eq!(crl.bytes, b"crl");
        assert_eq!(crl.path, tmp.path().join(CRL_FILE));
    }

    /// Two kubelet-style directories: the identity's own `ca.crt` (a
    /// csi-driver volume's issuing CA) is ignored, the trust directory's
    /// `ca.crt` and optional files are read, each through its own `..data`
    /// link, and a swap of either changes the revision's hash.
    #[test]
    fn a_dir_pair_takes_the_identity_from_one_and_the_trust_from_the_other() {
        let tmp = tempfile::tempdir().unwrap();
        let publish = |dir: &Path, rev: &str, files: &[(&str, &str)]| {
            let r = dir.join(rev);
            fs::create_dir_all(&r).unwrap();
            for (name, text) in files {
                fs::write(r.join(name), text).unwrap();
            }
            let tmp_link = dir.join("..data_tmp");
            std::os::unix::fs::symlink(rev, &tmp_link).unwrap();
            fs::rename(&tmp_link, dir.join(DATA_LINK)).unwrap();
        };
        let (id, trust) = (tmp.path().join("id"), tmp.path().join("trust"));
        publish(
            &id,
            "..1",
            &[
                (CERT_FILE, "cert"),
                (KEY_FILE, "key"),
                (CA_FILE, "issuer only"),
            ],
        );
        publish(&trust, "..1", &[(CA_FILE, "bundle"), (DENY_FILE, "")]);
        let source = CredentialSource::DirPair {
            identity: id.clone(),
            trust: trust.clone(),
        };
        let first = source.read().unwrap();
        assert_eq!(first.cert.bytes, b"cert");
        assert_eq!(first.key.path, id.join(KEY_FILE));
        assert_eq!(first.ca.bytes, b"bundle");
        assert_eq!(first.ca.path, trust.join(CA_FILE));
        assert!(first.crl.is_none());
        assert_eq!(
            first.deny.as_ref().map(|d| d.path.clone()),
            Some(trust.join(DENY_FILE))
        );
        publish(&trust, "..2", &[(CA_FILE, "bundle"), (CRL_FILE, "crl")]);
        let second = source.read().unwrap();
        assert_eq!(second.crl.map(|c| c.bytes), Some(b"crl".to_vec()));
        assert_ne!(first.hash, second.hash);
        publish(&id, "..2", &[(CERT_FILE, "cert2"), (KEY_FILE, "key2")]);
        let third = source.read().unwrap();
        assert_eq!(third.cert.bytes, b"cert2");
        assert_ne!(second.hash, third.hash);
        assert_eq!(source.watch_dirs(), vec![id, trust]);
    }

    /// An optional file that cannot even be looked up is an error naming
    /// it, not taken for absent: here `..data` names a plain file.
    #[test]
    fn an_optional_file_that_cannot_be_looked_up_is_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("..rev_1"), "not a directory").unwrap();
        std::os::unix::fs::symlink("..rev_1", tmp.path().join(DATA_LINK)).unwrap();
        let err = CredentialSource::Dir(tmp.path().to_path_buf())
            .read()
            .unwrap_err()
            .to_string();
        assert!(err.contains(CRL_FILE), "{err}");
    }

    /// Separate files are watched through each distinct parent directory;
    /// they are shown, and listed, in the order given.
    #[test]
    fn files_are_watched_by_their_directories_and_shown_in_order() {
        let d = Path::new("/cfg");
        let src = files_source(d, true);
        assert_eq!(
            src.watch_dirs(),
            vec![d.join("a"), d.join("b"), d.join("c")]
        );
        assert_eq!(
            src.to_string(),
            "/cfg/a/tls.crt, /cfg/b/tls.key, /cfg/a/ca.crt, /cfg/c/ca.crl"
        );
        assert_eq!(files_source(d, false).files().len(), 3);
        assert_eq!(
            CredentialSource::Dir(d.join("tls")).watch_dirs(),
            vec![d.join("tls")]
        );
    }
}

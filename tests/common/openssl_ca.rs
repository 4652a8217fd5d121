//! A minimal `openssl ca` beside a test PKI: CRLs written by OpenSSL
//! itself (numbered or not, dated when asked), to judge ours against.

use super::foreign::path;
use super::Pki;

/// A minimal `openssl ca` around the CA that `mtls_sidecar::pki` minted: its
/// certificate and key, an index of revoked serials, and a CRL number file
/// only when `numbered` (without one, `openssl ca` writes a CRL with no CRL
/// number; the authority key identifier keeps it a v2 CRL, which webpki
/// requires).
pub struct OpensslCa {
    dir: std::path::PathBuf,
}

impl OpensslCa {
    pub fn new(root: &std::path::Path, pki: &Pki, numbered: bool) -> OpensslCa {
        let dir = root.join("openssl-ca");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("ca.crt"), &pki.ca.cert_pem).unwrap();
        std::fs::write(dir.join("ca.key"), &pki.ca.key_pem).unwrap();
        std::fs::write(dir.join("index.txt"), "").unwrap();
        let crlnumber = if numbered {
            std::fs::write(dir.join("crlnumber"), "01\n").unwrap();
            "crlnumber = $dir/crlnumber\n"
        } else {
            ""
        };
        let conf = format!(
            "[ ca ]\ndefault_ca = CA_default\n\
             [ CA_default ]\ndir = {}\ndatabase = $dir/index.txt\n\
             certificate = $dir/ca.crt\nprivate_key = $dir/ca.key\n{crlnumber}\
             default_md = sha256\ndefault_crl_days = 7\ncrl_extensions = crl_ext\n",
            dir.display()
        );
        std::fs::write(dir.join("openssl.base.cnf"), conf).unwrap();
        let ca = OpensslCa { dir };
        ca.crl_extensions("");
        ca
    }

    /// The CRLs written from now on carry these extension lines
    /// (`openssl x509v3_config` syntax, e.g. `2.5.29.28 = critical,DER:..`)
    /// after the authority key identifier every CRL has.
    pub fn crl_extensions(&self, lines: &str) {
        let base = std::fs::read_to_string(self.dir.join("openssl.base.cnf")).unwrap();
        let conf = format!("{base}[ crl_ext ]\nauthorityKeyIdentifier = keyid:always\n{lines}");
        std::fs::write(self.dir.join("openssl.cnf"), conf).unwrap();
    }

    pub fn openssl(&self, args: &[&str]) -> String {
        let cnf = path(&self.dir, "openssl.cnf");
        let out = std::process::Command::new("openssl")
            .arg("ca")
            .args(["-config", &cnf, "-batch"])
            .args(args)
            .output()
            .expect("run openssl ca");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "openssl ca {args:?}:\n{text}");
        text
    }

    /// Marks `leaf` revoked in the index.
    pub fn revoke(&self, leaf: &mtls_sidecar::pki::Issued) {
        let file = self.dir.join("revoke.crt");
        std::fs::write(&file, &leaf.cert_pem).unwrap();
        self.openssl(&["-revoke", file.to_str().unwrap()]);
    }

    /// `openssl ca -gencrl`, with thisUpdate set when given
    /// (`YYYYMMDDHHMMSSZ`); returns the PEM.
    pub fn gencrl(&self, this_update: Option<&str>) -> String {
        let out = path(&self.dir, "crl.pem");
        let mut args = vec!["-gencrl", "-out", &out];
        if let Some(t) = this_update {
            args.extend(["-crl_lastupdate", t]);
        }
        self.openssl(&args);
        std::fs::read_to_string(&out).unwrap()
    }
}

/// Runs `openssl ARGS` in `dir`; it must succeed.
pub fn openssl_in(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

//! The reference judge: `openssl verify -crl_check` (scope leaf) or
//! `-crl_check_all` (scope chain) over a scenario's files, its answer read
//! as the list of (error code, depth) it printed. `openssl verify` carries
//! on after the errors its callback forgives (expired certificate or CRL,
//! CRL not yet valid), so one run can report several.

use std::path::Path;
use std::process::Command;

use mtls_sidecar::credentials::CrlScope;

use super::gen::Usage;
use super::mint::Minted;

/// What `openssl verify` said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// (X509_V_ERR code, depth), in the order printed.
    pub errors: Vec<(u32, usize)>,
    /// The last line it printed (`…: OK`, or the failure).
    pub summary: String,
}

impl Outcome {
    pub fn ok(&self) -> bool {
        self.errors.is_empty()
    }
}

/// Writes the scenario's files into `dir` (once; both scopes read them).
pub fn write_files(m: &Minted, dir: &Path) {
    let w = |name: &str, text: &str| std::fs::write(dir.join(name), text).expect("write file");
    w("ca.crt", &m.ca_pem);
    w("intermediates", &m.intermediates_pem);
    w("leaf.pem", &m.leaf_pem);
    w("chain.pem", &m.chain_pem());
    if let Some(crl) = &m.crl_pem {
        w("ca.crl", crl);
    }
    w("reference.crl", &m.reference_crl_pem);
}

/// Judges the scenario in `scope`: the errors of a run without CRLs (the
/// path, times and usage: a run with CRLs stops at the first revocation
/// error, before OpenSSL looks at times) and those of the run with
/// `-crl_check[_all]` over the reference CRLs.
pub fn verify(m: &Minted, dir: &Path, scope: CrlScope) -> Outcome {
    let path = run(m, dir, None);
    let crl = run(m, dir, Some(scope));
    let mut errors = path.errors;
    for e in crl.errors {
        if !errors.contains(&e) {
            errors.push(e);
        }
    }
    Outcome {
        errors,
        summary: crl.summary,
    }
}

/// One `openssl verify` run on the files `write_files` left in `dir`.
fn run(m: &Minted, dir: &Path, scope: Option<CrlScope>) -> Outcome {
    let mut cmd = Command::new("openssl");
    cmd.current_dir(dir)
        .arg("verify")
        .args(["-CAfile", "ca.crt"]);
    if !m.intermediates_pem.is_empty() {
        cmd.args(["-untrusted", "intermediates"]);
    }
    if let Some(scope) = scope {
        cmd.args(["-CRLfile", "reference.crl"]);
        cmd.arg(match scope {
            CrlScope::Leaf => "-crl_check",
            CrlScope::Chain => "-crl_check_all",
        });
    }
    cmd.args([
        "-purpose",
        match m.shape.usage {
            Usage::Client => "sslclient",
            Usage::Server => "sslserver",
        },
    ]);
    cmd.arg("leaf.pem");
    let out = cmd
        .output()
        .expect("run openssl (the differential test needs it on PATH)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let errors = parse_errors(&text);
    let outcome = Outcome {
        errors,
        summary: text.lines().last().unwrap_or_default().to_string(),
    };
    assert_eq!(
        out.status.success(),
        outcome.ok(),
        "openssl's exit status and its error lines disagree:\n{text}"
    );
    outcome
}

/// The `error N at D depth lookup: …` lines.
fn parse_errors(text: &str) -> Vec<(u32, usize)> {
    text.lines()
        .filter_map(|l| {
            let rest = l.split("error ").nth(1)?;
            let mut words = rest.split_whitespace();
            let code = words.next()?.parse().ok()?;
            (words.next()? == "at").then_some(())?;
            let depth = words.next()?.parse().ok()?;
            Some((code, depth))
        })
        .collect()
}

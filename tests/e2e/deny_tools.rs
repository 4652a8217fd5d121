//! The deny-list's tools through the real binary: `certs deny` appends
//! entries safely (built from a certificate or typed, validated, never
//! twice, existing lines and comments kept, nothing written next to a bad
//! file) and what it writes is what the sidecar loads; `check` validates a
//! deny file, fails an identity the file denies, and names the trust
//! anchors it denies.

use crate::common;

use std::path::Path;

use common::*;
use mtls_sidecar::identity::pin;
use mtls_sidecar::pki::{serial_of, write_secret_dir, DevCa, Role};

fn spki_of(der: &[u8]) -> String {
    pin::encode(&pin::spki_sha256(der).unwrap())
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Every way to name an entry, a duplicate, a bad existing file and bad
/// usage; the result loads in the sidecar (`check` passes, counting the
/// entries). Seen failing with the duplicate test removed (the second
/// `--cert` appended the entry again).
#[test]
fn certs_deny_appends_safely_and_the_sidecar_loads_the_result() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("tools CA");
    let me = pki.leaf(REPLICA, Role::Server);
    let dir = pki.dir(tmp.path(), "replica", &me);
    let leaked = pki.leaf(CONTROLLER, Role::Client);
    std::fs::write(tmp.path().join("leaked.crt"), &leaked.cert_pem).unwrap();
    let out = dir.join("deny");
    std::fs::write(&out, "# INC-42 (kept)\nsan:old.env-1.svc").unwrap();
    let deny = |extra: &[&str]| {
        let mut args = vec!["certs", "deny", "--out", s(&out)];
        args.extend_from_slice(extra);
        run_bin(&args)
    };
    let leaked_path = tmp.path().join("leaked.crt");
    let (code, text) = deny(&["--cert", s(&leaked_path), "--comment", "alice: key leaked"]);
    assert_eq!(code, 0, "{text}");
    let entry = format!("spki-sha256:{}", spki_of(&leaked.cert_der));
    assert!(
        text.contains(&format!("added {entry} (2 entries)")),
        "{text}"
    );
    let (code, text) = deny(&["--cert", s(&leaked_path)]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("already holds"), "{text}");
    let serial: String = serial_of(&leaked.cert_der)
        .unwrap()
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":");
    let ca_path = dir.join("ca.crt");
    let (code, text) = deny(&["--serial", &serial, "--issuer-cert", s(&ca_path)]);
    assert_eq!(code, 0, "{text}");
    let (code, text) = deny(&["--san", "Spiffe-Less.ENV-1.svc"]);
    assert_eq!(code, 0, "{text}");
    let other = DevCa::new("other CA", 30).unwrap();
    let other_ca = rustls::pki_types::CertificateDer::from(rustls_pemfile_der(&other.cert_pem));
    let (code, text) = deny(&["--spki", &spki_of(&other_ca)]);
    assert_eq!(code, 0, "{text}");
    let file = std::fs::read_to_string(&out).unwrap();
    let ca_key = spki_of(&rustls_pemfile_der(&pki.ca.cert_pem));
    let want_serial = serial.replace(':', "").to_ascii_lowercase();
    assert_eq!(
        file,
        format!(
            "# INC-42 (kept)\nsan:old.env-1.svc\n# alice: key leaked\n{entry}\n\
             serial:{ca_key}:{}\nsan:spiffe-less.env-1.svc\nspki-sha256:{}\n",
            want_serial.trim_start_matches('0'),
            spki_of(&other_ca)
        )
    );
    // Bad usage and bad input: exit 2, the file untouched.
    for (args, why) in [
        (vec!["--serial", "01"], "go together"),
        (vec!["--san", "a.svc", "--spki", "x"], "exactly one"),
        (vec!["--spki", "not-base64"], "not the base64"),
        (vec!["--san", "bad name"], "--san"),
    ] {
        let (code, text) = deny(&args);
        assert_eq!(code, 2, "{args:?}: {text}");
        assert!(text.contains(why), "{args:?}: {text}");
    }
    assert_eq!(std::fs::read_to_string(&out).unwrap(), file);
    // The sidecar's loader accepts the result.
    let (code, text) = run_bin(&["check", "--tls-dir", s(&dir)]);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("5 entries (spki-sha256 2, serial 1, san 2); tls.crt is not denied"),
        "{text}"
    );
    // Nothing is appended to a file the sidecar would reject.
    let bad = tmp.path().join("bad-deny");
    std::fs::write(&bad, "san:ok.svc\nspki-sha256:zz\n").unwrap();
    let (code, text) = run_bin(&["certs", "deny", "--out", s(&bad), "--san", "x.svc"]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("line 2:"), "{text}");
    assert_eq!(
        std::fs::read_to_string(&bad).unwrap(),
        "san:ok.svc\nspki-sha256:zz\n"
    );
}

/// The first certificate of a PEM text, DER.
fn rustls_pemfile_der(pem: &str) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .to_vec()
}

/// `check` FAILs an identity the deny file denies (by its SAN, its key or
/// its CA's key), names an anchor it denies (by key) on the PASS line but
/// not one whose certificate merely carries a SAN the list names (a
/// `san:` entry matches a leaf), and FAILs a malformed file naming the
/// line and why (an entry that could never match included). Seen failing with the deny step's
/// own-identity judgement removed (the denied identity passed).
#[test]
fn check_reports_what_the_deny_file_denies() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("check CA");
    let me = pki.leaf(REPLICA, Role::Server);
    let dir = pki.dir(tmp.path(), "replica", &me);
    let ca_key = spki_of(&rustls_pemfile_der(&pki.ca.cert_pem));
    let check = |deny: &str| {
        std::fs::write(dir.join("deny"), deny).unwrap();
        run_bin(&["check", "--tls-dir", s(&dir)])
    };
    for entry in [
        format!("san:{}", REPLICA.to_ascii_uppercase()),
        format!("spki-sha256:{}", spki_of(&me.cert_der)),
        format!("spki-sha256:{ca_key}"),
    ] {
        let (code, text) = check(&format!("# denied\n{entry}\n"));
        assert_eq!(code, 1, "{entry}: {text}");
        let line = text
            .lines()
            .find(|l| l.starts_with("FAIL") && l.contains("deny"))
            .unwrap_or_else(|| panic!("{entry}: no FAIL deny line:\n{text}"));
        assert!(line.contains("is denied by the entry"), "{line}");
        assert!(line.contains("peers with this list refuse it"), "{line}");
    }
    // A second anchor in ca.crt, denied: our identity passes, the line
    // says every peer chaining to it is refused.
    let other = DevCa::new("other anchor", 30).unwrap();
    let both = format!("{}{}", pki.ca.cert_pem, other.cert_pem);
    write_secret_dir(&dir, &me, &both).unwrap();
    let other_key = spki_of(&rustls_pemfile_der(&other.cert_pem));
    let (code, text) = check(&format!("spki-sha256:{other_key}\n"));
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("every peer chaining to the anchor \"CN=other anchor\" is denied"),
        "{text}"
    );
    // A `san:` entry names a leaf's SAN, never an anchor's: a CA whose
    // certificate carries that name is not said to be denied (its peers
    // are admitted unless their own leaf has it).
    let named = {
        let mut params = rcgen::CertificateParams::new(vec!["ca-name.svc".to_string()]).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "named anchor");
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().pem()
    };
    write_secret_dir(&dir, &me, &format!("{}{named}", pki.ca.cert_pem)).unwrap();
    let (code, text) = check("san:ca-name.svc\n");
    assert_eq!(code, 0, "{text}");
    assert!(
        !text.contains("every peer chaining to the anchor"),
        "an anchor's own SAN was matched as a leaf's: {text}"
    );
    assert!(text.contains("is not denied"), "{text}");
    let (code, text) = check("san:fine.svc\nserial:abc\n");
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("deny: line 2: serial:"), "{text}");
    // An entry that could never match (a wildcard --allow-san refuses)
    // is a bad line too, shown with its reason.
    let (code, text) = check("san:fine.svc\n# x\nsan:*.svc\n");
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("deny: line 3: san: invalid SAN pattern \"*.svc\": a wildcard needs"),
        "{text}"
    );
}

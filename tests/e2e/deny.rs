//! The deny-list through the real binary on loopback: each entry format
//! refuses new handshakes (`denied`) and closes the live connections it
//! matches within a reload interval (close reason `denied`, one WARN line
//! naming the entry) on server and client routes; an intermediate's or
//! the anchor's key denies every leaf below it; a URI SAN is denied in
//! every spelling `--allow-san` admits (scheme and authority in any case)
//! and by the same wildcards; a serial under a same-name issuer of
//! another key, a URI differing in its path's case or by a segment deny
//! nothing; a malformed file is rejected naming its line and the last
//! good list stays in force.

use crate::common;

use common::*;
use mtls_sidecar::identity::pin;
use mtls_sidecar::pki::{serial_of, DevCa, Issued, LeafSpec, Role};
use mtls_sidecar::tools::atomic_writer::AtomicDir;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

const HANDSHAKE_FAILURES: &str = "mtls_sidecar_tls_handshake_failures_total";
const URI: &str = "spiffe://td/ns/prod/sa/controller";
const BYSTANDER: &str = "other.env-1.svc";
const APPLIED: &str = "applied credential revision";

/// `spki-sha256:` of a DER certificate.
fn spki_of(der: &[u8]) -> String {
    pin::encode(&pin::spki_sha256(der).expect("spki"))
}

fn ca_der(ca: &DevCa) -> CertificateDer<'static> {
    CertificateDer::from_pem_slice(ca.cert_pem.as_bytes()).unwrap()
}

/// A serial written the way `openssl x509 -serial` or a browser shows it:
/// upper case, colons, a leading zero octet.
fn serial_text(leaf: &Issued) -> String {
    let mut octets = vec![0u8];
    octets.extend(serial_of(&leaf.cert_der).unwrap());
    octets
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// A server sidecar over a kubelet-style directory whose `deny` file each
/// test publishes, admitting the controller (DNS and URI) and a bystander.
struct World {
    tmp: tempfile::TempDir,
    pki: Pki,
    dir: AtomicDir,
    me: Issued,
    echo: Echo,
    sidecar: Sidecar,
}

impl World {
    async fn start() -> World {
        let tmp = tempfile::tempdir().unwrap();
        let pki = Pki::new("deny CA");
        let me = pki.leaf(REPLICA, Role::Server);
        let dir = AtomicDir::new(&tmp.path().join("server")).unwrap();
        let echo = echo_target().await;
        let w0 = (tmp, pki, dir, me);
        publish(&w0.2, &w0.3, &w0.1.ca, None);
        let sidecar = start_server(
            w0.2.path(),
            &echo.addr.to_string(),
            &[
                "--allow-san",
                URI,
                "--allow-san",
                BYSTANDER,
                "--reload-interval",
                "100ms",
                "--admin",
                "127.0.0.1:0",
            ],
        )
        .await;
        let (tmp, pki, dir, me) = w0;
        World {
            tmp,
            pki,
            dir,
            me,
            echo,
            sidecar,
        }
    }

    /// Publishes a revision with this deny file and waits until the
    /// sidecar applied it.
    async fn deny(&self, text: Option<&str>) {
        let before = self.sidecar.log_count(APPLIED);
        publish(&self.dir, &self.me, &self.pki.ca, text);
        eventually("the revision applied", || {
            self.sidecar.log_count(APPLIED) > before
        })
        .await;
    }

    async fn connect(&self, who: &Issued) -> std::io::Result<ClientTls> {
        tls_connect(
            &self.sidecar.addr("server"),
            REPLICA,
            client_config(Some(who), &self.pki.ca.cert_pem),
        )
        .await
    }

    async fn admitted(&self, who: &Issued) -> ClientTls {
        let mut s = self.connect(who).await.expect("handshake");
        assert_eq!(roundtrip(&mut s, b"ping").await, b"ping");
        s
    }

    async fn refused(&self, who: &Issued) -> bool {
        match self.connect(who).await {
            Ok(mut s) => refused(&mut s).await,
            Err(_) => true,
        }
    }

    async fn count(&self, metric: &str, reason: &str) -> f64 {
        scrape(&self.sidecar.admin())
            .await
            .value(metric, &[("route", "server"), ("reason", reason)])
            .unwrap_or(0.0)
    }

    /// The count once it reaches `least`: a peer sees its refusal before
    /// the sidecar has counted it, so one scrape right after can be short.
    async fn count_at_least(&self, metric: &str, reason: &str, least: f64) -> f64 {
        let labels = [("route", "server"), ("reason", reason)];
        scrape_until(
            &self.sidecar.admin(),
            &format!("{metric} reason={reason} >= {least}"),
            |m| m.value(metric, &labels).unwrap_or(0.0) >= least,
        )
        .await
        .value(metric, &labels)
        .unwrap_or(0.0)
    }
}

fn publish(dir: &AtomicDir, me: &Issued, ca: &DevCa, deny: Option<&str>) {
    let mut files: Vec<(&str, &[u8])> = vec![
        ("tls.crt", me.cert_pem.as_bytes()),
        ("tls.key", me.key_pem.as_bytes()),
        ("ca.crt", ca.cert_pem.as_bytes()),
    ];
    if let Some(d) = deny {
        files.push(("deny", d.as_bytes()));
    }
    dir.publish(&files).unwrap();
}

/// The controller with both a DNS and a URI SAN.
fn victim(pki: &Pki) -> Issued {
    let mut spec = LeafSpec::dns(CONTROLLER, Role::Client, 30);
    spec.uris = vec![URI.to_string()];
    pki.issue(&spec)
}

/// For each format: a live connection of the victim is closed when the
/// entry lands (WARN naming the entry, `closed{reason="denied"}`), its new
/// handshakes are refused as `denied`, and a bystander's connection, open
/// across the change, keeps flowing. Seen failing with the deny lookup in
/// `Trust::verify_peer` removed (the victim's connection stayed open).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_format_refuses_new_handshakes_and_closes_live_connections() {
    let w = World::start().await;
    let victim = victim(&w.pki);
    let bystander = w.pki.leaf(BYSTANDER, Role::Client);
    let ca_key = spki_of(&ca_der(&w.pki.ca));
    let entries = [
        (
            format!("spki-sha256:{}", spki_of(&victim.cert_der)),
            format!("spki-sha256:{}", spki_of(&victim.cert_der)),
        ),
        (
            format!("serial:{ca_key}:{}", serial_text(&victim)),
            format!(
                "serial:{ca_key}:{}",
                serial_text(&victim)
                    .replace(':', "")
                    .to_ascii_lowercase()
                    .trim_start_matches('0')
            ),
        ),
        (
            format!("san:{}", CONTROLLER.to_ascii_uppercase()),
            format!("san:{CONTROLLER}"),
        ),
        (format!("san:{URI}"), format!("san:{URI}")),
    ];
    let mut by = w.admitted(&bystander).await;
    for (i, (entry, canonical)) in entries.iter().enumerate() {
        w.deny(Some("# nothing denied yet\n")).await;
        let mut live = w.admitted(&victim).await;
        w.deny(Some(&format!("# incident\n{entry}  # the victim\n")))
            .await;
        read_until_closed(&mut live).await;
        eventually("the close line", || {
            w.sidecar
                .log_count("closing connection: its peer is denied")
                == i + 1
        })
        .await;
        let line = w
            .sidecar
            .wait_field("its peer is denied", "entry", canonical)
            .await;
        assert!(line.contains(" WARN "), "{line}");
        assert!(w.refused(&victim).await, "{entry}: a new handshake passed");
        let refusal = w
            .sidecar
            .wait_log(&["handshake refused", "reason=\"denied\"", canonical])
            .await;
        assert!(refusal.contains(CONTROLLER), "{refusal}");
        // The entry in plain words, as other reasons read, not a dump of
        // rustls's wrapper.
        assert!(
            refusal.contains(&format!(
                "error=invalid peer certificate: denied by deny entry {canonical}"
            )),
            "{refusal}"
        );
        assert_eq!(roundtrip(&mut by, b"still").await, b"still", "{entry}");
    }
    w.sidecar.wait_closed("server", "denied", 4.0).await;
    assert_eq!(
        w.count_at_least(HANDSHAKE_FAILURES, "denied", 4.0).await,
        4.0
    );
    assert_eq!(w.count(CLOSED, "revoked").await, 0.0);
    // Lifting the list admits the victim again.
    w.deny(None).await;
    w.admitted(&victim).await;
}

/// One normalisation for allow and deny: a peer whose URI SAN spells
/// the SPIFFE ID's scheme or trust domain in upper case is admitted by
/// `--allow-san` (which compares them case-insensitively), so `san:` with
/// the lower-case ID refuses it, as do the wildcard entries `--allow-san`
/// has; a bystander stays admitted. Seen failing before the fix (every
/// variant admitted: the entry compared byte for byte, the wildcards as
/// literal text).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_uri_is_refused_in_every_spelling_the_allow_list_admits() {
    let w = World::start().await;
    let spellings = [
        "SPIFFE://TD/ns/prod/sa/controller",
        "spiffe://TD/ns/prod/sa/controller",
        "Spiffe://td/ns/prod/sa/controller",
    ];
    let peers: Vec<Issued> = spellings
        .iter()
        .map(|u| {
            let mut spec = LeafSpec::dns("variant.env-1.svc", Role::Client, 30);
            spec.uris = vec![u.to_string()];
            w.pki.issue(&spec)
        })
        .collect();
    for p in &peers {
        w.admitted(p).await;
    }
    let bystander = w.pki.leaf(BYSTANDER, Role::Client);
    for entry in [
        format!("san:{URI}"),
        "san:spiffe://td/ns/prod/sa/*".to_string(),
        "san:spiffe://td/ns/**".to_string(),
    ] {
        w.deny(Some(&format!("{entry}\n"))).await;
        for (u, p) in spellings.iter().zip(&peers) {
            assert!(w.refused(p).await, "{entry}: {u} admitted");
        }
        w.admitted(&bystander).await;
    }
}

/// A route keeps one copy of a peer's chain for all its connections that
/// presented it (src/proxy/conn.rs): a deny closes every one of them, and
/// a connection under the same names but another key (a re-issued
/// certificate: another chain) is judged on its own chain and stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deny_closes_every_connection_sharing_the_peers_chain_and_only_those() {
    let w = World::start().await;
    let old = victim(&w.pki);
    let reissued = victim(&w.pki);
    assert_ne!(spki_of(&old.cert_der), spki_of(&reissued.cert_der));
    let mut first = w.admitted(&old).await;
    let mut second = w.admitted(&old).await;
    let mut other = w.admitted(&reissued).await;
    w.deny(Some(&format!(
        "spki-sha256:{}  # the old key\n",
        spki_of(&old.cert_der)
    )))
    .await;
    read_until_closed(&mut first).await;
    read_until_closed(&mut second).await;
    w.sidecar.wait_closed("server", "denied", 2.0).await;
    assert_eq!(roundtrip(&mut other, b"still").await, b"still");
    assert!(
        w.refused(&old).await,
        "a new handshake of the old key passed"
    );
    // The survivor's entry is its own: a second connection of it shares it.
    let mut again = w.admitted(&reissued).await;
    assert_eq!(roundtrip(&mut again, b"again").await, b"again");
    assert_eq!(w.count(CLOSED, "denied").await, 2.0);
}

/// Entries that look close but do not match deny nothing: a serial under
/// a CA of the same name but another key, a URI differing in case or by a
/// trailing character, another DNS name. The victim's connection stays up
/// across the change and it still handshakes. Seen failing with the
/// serial matched by issuer name (the spki of the issuer ignored).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn near_misses_deny_nothing() {
    let w = World::start().await;
    let victim = victim(&w.pki);
    let twin = DevCa::new("deny CA", 30).unwrap();
    let twin_key = spki_of(&ca_der(&twin));
    assert_ne!(twin_key, spki_of(&ca_der(&w.pki.ca)));
    let mut live = w.admitted(&victim).await;
    // The twin's own key too: no chain of ours goes through it.
    let text = format!(
        "serial:{twin_key}:{}\nsan:{}\nsan:{URI}/x\nsan:x{CONTROLLER}\nspki-sha256:{twin_key}\n",
        serial_text(&victim),
        URI.replace("controller", "Controller"),
    );
    w.deny(Some(&text)).await;
    // The trust changed (a new deny-list): live connections were judged
    // again, and this one passed.
    assert_eq!(roundtrip(&mut live, b"after").await, b"after");
    w.admitted(&victim).await;
    let st = status(&w.sidecar.admin()).await;
    assert_eq!(st["credentials"][0]["deny"]["serial"], 1, "{st}");
    assert_eq!(st["credentials"][0]["deny"]["san"], 3, "{st}");
    assert_eq!(st["credentials"][0]["deny"]["spki"], 1, "{st}");
    // The same counts through the gauge (summed over the stores).
    let m = scrape(&w.sidecar.admin()).await;
    for (kind, n) in [("spki", 1.0), ("serial", 1.0), ("san", 3.0)] {
        assert_eq!(
            m.value("mtls_sidecar_deny_entries", &[("kind", kind)]),
            Some(n),
            "{kind}"
        );
    }
    assert_eq!(w.count(CLOSED, "denied").await, 0.0);
    assert_eq!(w.count(HANDSHAKE_FAILURES, "denied").await, 0.0);
    assert_eq!(w.echo.accepted(), 2, "both connections reached the target");
}

/// A leaked intermediate: root → issuing CA → leaves, `ca.crt` holding
/// the root only and the peer sending its intermediate. Denying the
/// intermediate's key refuses both of its leaves; denying the root's key
/// refuses a leaf the root issued directly. Seen failing with only the
/// end entity's key looked up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_intermediate_or_anchor_key_denies_every_leaf_below_it() {
    let w = World::start().await;
    let issuing = w.pki.ca.intermediate("deny issuing CA", 30).unwrap();
    let spec = || LeafSpec::dns(CONTROLLER, Role::Client, 30);
    let (a, b) = (
        issuing.issue(&spec()).unwrap(),
        issuing.issue(&spec()).unwrap(),
    );
    let addr = w.sidecar.addr("server");
    let through = |leaf: &Issued| chain_client(leaf, &issuing.cert_pem, &w.pki.ca.cert_pem);
    let mut live = tls_connect(&addr, REPLICA, through(&a)).await.unwrap();
    assert_eq!(roundtrip(&mut live, b"x").await, b"x");
    let inter_key = spki_of(&ca_der(&issuing));
    w.deny(Some(&format!("spki-sha256:{inter_key}\n"))).await;
    read_until_closed(&mut live).await;
    w.sidecar
        .wait_field(
            "its peer is denied",
            "entry",
            &format!("spki-sha256:{inter_key}"),
        )
        .await;
    for leaf in [&a, &b] {
        let refused_it = match tls_connect(&addr, REPLICA, through(leaf)).await {
            Ok(mut s) => refused(&mut s).await,
            Err(_) => true,
        };
        assert!(refused_it, "a leaf of the denied intermediate passed");
    }
    // A leaf of the root directly is not below the intermediate.
    let direct = w.pki.leaf(CONTROLLER, Role::Client);
    w.admitted(&direct).await;
    let root_key = spki_of(&ca_der(&w.pki.ca));
    w.deny(Some(&format!("spki-sha256:{root_key}\n"))).await;
    assert!(
        w.refused(&direct).await,
        "a leaf of the denied anchor passed"
    );
    assert!(w.count_at_least(HANDSHAKE_FAILURES, "denied", 3.0).await >= 3.0);
}

/// A deny file with a bad line is rejected whole, naming the file and the
/// line; the last good list stays in force (its victim is still refused,
/// the one the bad file would have denied is still admitted). Seen failing
/// with parse errors ignored (the bad revision applied).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_deny_file_is_rejected_and_the_last_good_list_stays() {
    let w = World::start().await;
    let victim = victim(&w.pki);
    let bystander = w.pki.leaf(BYSTANDER, Role::Client);
    w.deny(Some(&format!("san:{CONTROLLER}\n"))).await;
    assert!(w.refused(&victim).await);
    publish(
        &w.dir,
        &w.me,
        &w.pki.ca,
        Some(&format!("san:{BYSTANDER}\nspki-sha256:not-base64\n")),
    );
    let line = w
        .sidecar
        .wait_log(&["rejected credential revision", "deny: line 2:"])
        .await;
    assert!(line.contains("not the base64"), "{line}");
    assert!(w.refused(&victim).await, "the last good list was dropped");
    w.admitted(&bystander).await;
    let st = status(&w.sidecar.admin()).await;
    assert_eq!(st["credentials"][0]["deny"]["san"], 1, "{st}");
    let m = scrape(&w.sidecar.admin()).await;
    assert_eq!(
        m.value(
            "mtls_sidecar_credential_reloads_total",
            &[("result", "rejected")]
        ),
        Some(1.0)
    );
    assert_eq!(
        m.value("mtls_sidecar_deny_entries", &[("kind", "san")]),
        Some(1.0)
    );
    drop(w.tmp);
}

/// A client route: its `deny` names the server's key; a live connection
/// through it is closed (`denied`) and new ones are refused inside the
/// handshake, before any byte reaches the server's target. Seen failing
/// with the close reason taken as `revoked` for every lost trust.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_route_denies_its_server() {
    let creds = Creds::new();
    let echo = echo_target().await;
    let server = start_server(&creds.server_dir, &echo.addr.to_string(), &[]).await;
    let dir = AtomicDir::new(&creds.tmp.path().join("client-live")).unwrap();
    publish(&dir, &creds.controller, &creds.pki.ca, None);
    let client = start_client(
        dir.path(),
        &server.addr("server"),
        &["--reload-interval", "100ms", "--admin", "127.0.0.1:0"],
    )
    .await;
    let mut live = connect_plain(&client).await;
    assert_eq!(roundtrip(&mut live, b"hello").await, b"hello");
    let entry = format!("spki-sha256:{}", spki_of(&creds.replica.cert_der));
    publish(&dir, &creds.controller, &creds.pki.ca, Some(&entry));
    read_until_closed(&mut live).await;
    client
        .wait_field("its peer is denied", "entry", &entry)
        .await;
    client.wait_closed("client", "denied", 1.0).await;
    let accepted = echo.accepted();
    let mut again = connect_plain(&client).await;
    assert!(read_until_closed(&mut again).await.is_empty());
    let refusal = client
        .wait_log(&["handshake refused", "reason=\"denied\"", &entry])
        .await;
    assert!(
        refusal.contains(&format!("denied by deny entry {entry}"))
            && !refusal.contains("OtherError"),
        "{refusal}"
    );
    assert_eq!(echo.accepted(), accepted, "a denied server was used");
}

/// Each bound of a deny file is inclusive, and one past it refuses the
/// file naming the bound: the whole file (`MAX_DENY_BYTES`, line 0), a line
/// (`MAX_DENY_LINE`, its number) and the entries (`MAX_DENY_ENTRIES`).
/// Kills `>` to `>=` / `==` in `parse_deny`'s size checks.
#[test]
fn each_bound_of_a_deny_file_is_inclusive() {
    use mtls_sidecar::credentials::deny::{
        parse_deny, MAX_DENY_BYTES, MAX_DENY_ENTRIES, MAX_DENY_LINE,
    };
    // Comment lines of 4,095 bytes and their newlines fill the file exactly.
    let line = format!("#{}\n", "x".repeat(4094));
    assert_eq!(MAX_DENY_BYTES % line.len(), 0);
    let full = line.repeat(MAX_DENY_BYTES / line.len());
    assert_eq!(full.len(), MAX_DENY_BYTES);
    assert!(parse_deny(&full).is_ok(), "a file of exactly the bound");
    let over = format!("{full}#");
    let err = parse_deny(&over).expect_err("a byte past the bound");
    assert_eq!(err.line, 0, "{err}");
    assert!(err.detail.contains(&MAX_DENY_BYTES.to_string()), "{err}");

    let longest = format!("#{}", "x".repeat(MAX_DENY_LINE - 1));
    assert!(
        parse_deny(&format!("{longest}\n")).is_ok(),
        "a line of exactly the bound"
    );
    let err = parse_deny(&format!("{longest}\n{longest}x\n")).expect_err("a byte too long");
    assert_eq!(err.line, 2, "{err}");
    assert!(err.detail.contains(&MAX_DENY_LINE.to_string()), "{err}");

    let entries: String = (0..MAX_DENY_ENTRIES)
        .map(|i| format!("san:n{i}.svc\n"))
        .collect();
    assert_eq!(
        parse_deny(&entries)
            .expect("exactly the bound")
            .entries()
            .len(),
        MAX_DENY_ENTRIES
    );
    let err = parse_deny(&format!("{entries}san:one-more.svc\n")).expect_err("one entry more");
    assert_eq!(err.line, MAX_DENY_ENTRIES + 1, "{err}");
    assert!(err.detail.contains(&MAX_DENY_ENTRIES.to_string()), "{err}");
}

/// A refused line's error quotes what was written, at most 64 characters
/// of it (an operator finds the line; a runaway line does not flood the
/// log). Kills `shorten -> String::new()` / `"xyzzy"`.
#[test]
fn a_refused_entry_is_quoted_and_shortened() {
    use mtls_sidecar::credentials::deny::parse_deny;
    let err = parse_deny("spki-sha256:AAAA\n").expect_err("a short pin");
    assert!(err.to_string().contains("\"AAAA\""), "{err}");
    let err = parse_deny("nonsense-entry\n").expect_err("no format");
    assert!(err.to_string().contains("\"nonsense-entry\""), "{err}");
    let long = "y".repeat(200);
    let err = parse_deny(&format!("san:{long}\\\n")).expect_err("a bad SAN");
    let shown = format!("\"{}…\"", "y".repeat(64));
    assert!(err.to_string().contains(&shown), "{err}");
    assert!(!err.to_string().contains(&"y".repeat(65)), "{err}");
}

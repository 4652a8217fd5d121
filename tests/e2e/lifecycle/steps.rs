//! The operator's moves for tests/e2e/lifecycle.rs: one server sidecar (the
//! replica's) and one client sidecar (the controller's) on kubelet-style
//! directories, revisions published and awaited, connections opened
//! directly as other identities, and the fields the alerts read.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mtls_sidecar::pki::{serial_of, CrlSpec, DevCa, Issued, IssuedCrl, Role};
use mtls_sidecar::tools::atomic_writer::AtomicDir;
use tokio::net::TcpStream;

use crate::common::*;

/// How long a CA removed from `ca.crt` stays trusted here: long enough for
/// the checks made inside it on a loaded machine.
pub const GRACE: &str = "6s";

/// A CRL from `ca` numbered `number` revoking `revoked`.
pub fn crl(ca: &DevCa, number: u64, revoked: &[&Issued]) -> IssuedCrl {
    let serials = revoked
        .iter()
        .map(|l| serial_of(&l.cert_der).expect("serial"))
        .collect();
    ca.crl(&CrlSpec::new(number, serials, 7)).expect("sign CRL")
}

/// Sends a line and expects it back.
pub async fn roundtrip_ok<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    s: &mut S,
    what: &str,
) {
    let msg = format!("{what}\n");
    assert_eq!(roundtrip(s, msg.as_bytes()).await, msg.as_bytes(), "{what}");
}

/// Expects the peer to close the connection (EOF, reset or alert).
pub async fn expect_closed<S: tokio::io::AsyncRead + Unpin>(s: &mut S, what: &str) {
    let got = read_until_closed(s).await;
    assert!(got.is_empty(), "{what}: {} unexpected bytes", got.len());
}

/// The deployment: both sidecars, their directories and the application's
/// plaintext target.
pub struct Year {
    root: PathBuf,
    sdir: AtomicDir,
    cdir: AtomicDir,
    echo: Echo,
    pub server: Sidecar,
    pub client: Sidecar,
    server_leaf: Issued,
    client_leaf: Issued,
    /// The server's listen address, kept across restarts.
    server_listen: String,
}

impl Year {
    /// Day 0: leaves from `ca`, both directories published, both sidecars up.
    pub async fn start(root: &Path, ca: &DevCa) -> Year {
        let sdir = AtomicDir::new(&root.join("replica")).unwrap();
        let cdir = AtomicDir::new(&root.join("controller")).unwrap();
        let server_leaf = leaf(ca, REPLICA, Role::Server);
        let client_leaf = leaf(ca, CONTROLLER, Role::Client);
        publish(&sdir, &server_leaf, &ca.cert_pem, None);
        publish(&cdir, &client_leaf, &ca.cert_pem, None);
        let echo = echo_target().await;
        let server = start(&server_args(&sdir, &echo, "127.0.0.1:0")).await;
        let server_listen = server.addr("server");
        let client = start(&client_args(&cdir, &server_listen)).await;
        Year {
            root: root.to_path_buf(),
            sdir,
            cdir,
            echo,
            server,
            client,
            server_leaf,
            client_leaf,
            server_listen,
        }
    }

    /// A new plaintext connection of the application, through both sidecars.
    pub async fn app_connection(&self) -> TcpStream {
        let mut s = connect_plain(&self.client).await;
        roundtrip_ok(&mut s, "a new application connection").await;
        s
    }

    /// A controller identity from `ca` (not the client sidecar's).
    pub fn issue_controller(&self, ca: &DevCa) -> Issued {
        leaf(ca, CONTROLLER, Role::Client)
    }

    /// A TLS connection straight to the server sidecar as `ident`,
    /// trusting `bundle` for the server's certificate.
    pub async fn direct(&self, ident: &Issued, bundle: &str) -> ClientTls {
        tls_connect(
            &self.server_listen,
            REPLICA,
            client_config(Some(ident), bundle),
        )
        .await
        .expect("handshake")
    }

    /// True when the server sidecar refuses `ident`.
    pub async fn refused(&self, ident: &Issued, bundle: &str) -> bool {
        match tls_connect(
            &self.server_listen,
            REPLICA,
            client_config(Some(ident), bundle),
        )
        .await
        {
            Ok(mut s) => refused(&mut s).await,
            Err(_) => true,
        }
    }

    /// New leaves on both sides from `ca`, with `bundle` (and on the server
    /// `crl`); waits until both applied them.
    pub async fn renew_leaves(&mut self, ca: &DevCa, bundle: &str, crl: Option<&str>) {
        self.server_leaf = leaf(ca, REPLICA, Role::Server);
        self.client_leaf = leaf(ca, CONTROLLER, Role::Client);
        self.publish_both(bundle, crl).await;
    }

    /// The current leaves again with `bundle` on both sides and `crl` on
    /// the server; waits until both applied them.
    pub async fn publish_both(&mut self, bundle: &str, crl: Option<&str>) {
        let (s, c) = (applied(&self.server), applied(&self.client));
        publish(&self.cdir, &self.client_leaf, bundle, None);
        publish(&self.sdir, &self.server_leaf, bundle, crl);
        wait_applied(&self.server, s + 1).await;
        wait_applied(&self.client, c + 1).await;
    }

    /// The server's current leaf with `bundle` and `crl`; waits until applied.
    pub async fn publish_server(&mut self, bundle: &str, crl: Option<&str>) {
        let s = applied(&self.server);
        publish(&self.sdir, &self.server_leaf, bundle, crl);
        wait_applied(&self.server, s + 1).await;
    }

    /// The renewal job of a VM: a new server leaf published with the
    /// binary's `publish`, naming tls.crt, tls.key and ca.crt only.
    pub async fn renew_server_with_publish(&mut self, ca: &DevCa, bundle: &str) {
        self.server_leaf = leaf(ca, REPLICA, Role::Server);
        let staged = self.root.join("renewal");
        std::fs::create_dir_all(&staged).unwrap();
        let files = [
            ("tls.crt", self.server_leaf.cert_pem.as_str()),
            ("tls.key", self.server_leaf.key_pem.as_str()),
            ("ca.crt", bundle),
        ];
        let mut args = vec![
            "publish".to_string(),
            "--into".to_string(),
            self.sdir.path().display().to_string(),
        ];
        for (name, text) in files {
            let p = staged.join(name);
            std::fs::write(&p, text).unwrap();
            args.push(format!("{name}={}", p.display()));
        }
        let s = applied(&self.server);
        let (code, out) = run_bin(&strs(&args));
        assert_eq!(code, 0, "publish: {out}");
        wait_applied(&self.server, s + 1).await;
    }

    /// A server revision whose key is another certificate's.
    pub async fn publish_bad_server(&mut self, ca: &DevCa, bundle: &str) {
        let other = leaf(ca, REPLICA, Role::Server);
        self.sdir
            .publish(&[
                ("tls.crt", self.server_leaf.cert_pem.as_bytes()),
                ("tls.key", other.key_pem.as_bytes()),
                ("ca.crt", bundle.as_bytes()),
            ])
            .unwrap();
    }

    /// `MtlsSidecarCredentialRevisionRejected` reads this gauge at 0; the
    /// reason is in `/status`.
    pub async fn expect_rejected(&self) {
        let admin = self.server.admin();
        scrape_until(&admin, "last_reload_successful 0", |m| {
            m.value("mtls_sidecar_credential_last_reload_successful", &[]) == Some(0.0)
        })
        .await;
        let status = status(&admin).await;
        let error = status["credentials"][0]["last_rejected"]["error"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(error.contains("does not match"), "{status}");
    }

    /// The server restarts while the mounted revision is bad: it exits 2
    /// naming the file (the runbook's "do not roll or drain").
    pub async fn restart_server_while_bad(&mut self) {
        self.server.signal(libc::SIGKILL);
        let args = server_args(&self.sdir, &self.echo, &self.server_listen);
        match Sidecar::try_start(&strs(&args), 1).await {
            Ok(_) => panic!("a sidecar started on a bad revision"),
            Err((code, logs)) => {
                assert_eq!(code, Some(2), "{}", logs.join("\n"));
                assert!(logs.iter().any(|l| l.contains("tls.key")), "{logs:?}");
            }
        }
    }

    /// The good revision is back: the server starts on the same address.
    pub async fn restart_server(&mut self, bundle: &str, crl: Option<&str>) {
        publish(&self.sdir, &self.server_leaf, bundle, crl);
        self.server = start(&server_args(&self.sdir, &self.echo, &self.server_listen)).await;
    }

    /// Each side has exactly `sources` revision series, every one at 1, and
    /// its newest revision in force.
    pub async fn expect_converged(&self, sources: usize) {
        for sc in [&self.server, &self.client] {
            scrape_until(&sc.admin(), "one revision series per source, at 1", |m| {
                let info = m.series("mtls_sidecar_credential_revision_info");
                info.len() == sources
                    && info.iter().all(|s| s.value == 1.0)
                    && m.value("mtls_sidecar_credential_last_reload_successful", &[]) == Some(1.0)
            })
            .await;
        }
    }

    /// The server counted at least `n` handshake failures for `reason`.
    pub async fn expect_failures(&self, reason: &str, n: f64) {
        let labels = [("route", "server"), ("reason", reason)];
        scrape_until(&self.server.admin(), reason, |m| {
            m.value("mtls_sidecar_tls_handshake_failures_total", &labels)
                .is_some_and(|v| v >= n)
        })
        .await;
    }

    /// Nothing was un-revoked: the removals counter exists and reads 0.
    pub async fn expect_no_crl_removals(&self) {
        let m = scrape(&self.server.admin()).await;
        assert_eq!(m.value("mtls_sidecar_crl_removals_total", &[]), Some(0.0));
    }

    /// `/status` shows the CRL from `issuer` as ignored (its CA is no
    /// longer trusted) and it rejected nothing.
    pub async fn expect_crl_ignored(&self, issuer: &str) {
        let admin = self.server.admin();
        let deadline = Instant::now() + DEADLINE;
        loop {
            let status = status(&admin).await;
            let crls = status["credentials"][0]["crls"].as_array().cloned();
            let ignored = crls.unwrap_or_default().iter().any(|c| {
                c["issuer"] == issuer
                    && c.as_object()
                        .is_some_and(|o| o.values().any(|v| v == "ignored"))
            });
            if ignored {
                assert!(
                    status["credentials"][0]["last_rejected"].is_null(),
                    "{status}"
                );
                return;
            }
            assert!(
                Instant::now() < deadline,
                "no ignored CRL from {issuer}: {status}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGTERM: the listener closes, the live connection still works until
    /// the drain timeout closes it `drain`, and the process exits 0.
    pub async fn drain(self, app: &mut TcpStream) {
        self.server.signal(libc::SIGTERM);
        self.server.wait_log(&["draining"]).await;
        roundtrip_ok(app, "inside the drain").await;
        expect_closed(app, "the application connection at the drain timeout").await;
        let (code, logs) = self.server.wait_exit().await;
        assert_eq!(code, Some(0), "{}", logs.join("\n"));
        assert!(
            logs.iter()
                .any(|l| l.contains("connection closed") && has_field(l, "reason", "drain")),
            "{}",
            logs.join("\n")
        );
    }
}

fn leaf(ca: &DevCa, name: &str, role: Role) -> Issued {
    ca.issue(&mtls_sidecar::pki::LeafSpec::dns(name, role, 30))
        .expect("issue leaf")
}

fn publish(dir: &AtomicDir, leaf: &Issued, bundle: &str, crl: Option<&str>) {
    let mut files: Vec<(&str, &[u8])> = vec![
        ("tls.crt", leaf.cert_pem.as_bytes()),
        ("tls.key", leaf.key_pem.as_bytes()),
        ("ca.crt", bundle.as_bytes()),
    ];
    if let Some(crl) = crl {
        files.push(("ca.crl", crl.as_bytes()));
    }
    dir.publish(&files).expect("publish revision");
}

fn server_args(dir: &AtomicDir, echo: &Echo, listen: &str) -> Vec<String> {
    let d = dir.path().display().to_string();
    [
        "server",
        "--listen",
        listen,
        "--target",
        &echo.addr.to_string(),
        "--tls-dir",
        &d,
        "--allow-san",
        CONTROLLER,
        "--admin",
        "127.0.0.1:0",
        "--reload-interval",
        "200ms",
        "--trust-grace",
        GRACE,
        "--drain-timeout",
        "2s",
    ]
    .map(String::from)
    .to_vec()
}

fn client_args(dir: &AtomicDir, server: &str) -> Vec<String> {
    let d = dir.path().display().to_string();
    [
        "client",
        "--listen",
        "127.0.0.1:0",
        "--target",
        server,
        "--server-name",
        REPLICA,
        "--tls-dir",
        &d,
        "--admin",
        "127.0.0.1:0",
        "--reload-interval",
        "200ms",
        "--trust-grace",
        GRACE,
    ]
    .map(String::from)
    .to_vec()
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

async fn start(args: &[String]) -> Sidecar {
    Sidecar::start(&strs(args), 1).await
}

/// How many revisions a sidecar has applied since it started.
fn applied(sc: &Sidecar) -> usize {
    sc.log_count("applied credential revision")
}

async fn wait_applied(sc: &Sidecar, n: usize) {
    eventually(&format!("revision {n} applied"), || applied(sc) >= n).await;
}

async fn status(admin: &str) -> serde_json::Value {
    let r = http::request(admin, "GET", "/status").await;
    assert_eq!(r.code, 200, "{}", r.body);
    serde_json::from_str(&r.body).expect("status is JSON")
}

//! `mtls-sidecar demo`: a self-contained walkthrough with no setup and no
//! network. It mints a CA and two role identities into a temporary directory
//! laid out like a Kubernetes Secret mount, runs an echo target, a server
//! sidecar and a client sidecar in process on free loopback ports, and
//! narrates what a platform engineer wants to see: traffic through the pair,
//! a foreign certificate refused, a kubelet-style rotation that a live
//! connection does not notice, a leaked identity revoked with a CRL (its live
//! connection closed, its next handshake refused), and the metrics that
//! prove it.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::app::{self, Running};
use crate::cli::DemoArgs;
use crate::config::{CredentialSpec, FileSpec, RouteSpec};
use crate::identity::CertInfo;
use crate::pki::{serial_of, CrlSpec, DevCa, Issued, LeafSpec, Role};
use crate::proxy::addr::Addr;
use crate::proxy::settings::Mode;
use crate::tools::atomic_writer::AtomicDir;

const CONTROLLER: &str = "controller.demo.svc";
const REPLICA: &str = "replica-0.demo.svc";
const STEP_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs the demo; returns the exit status.
pub async fn run(_args: &DemoArgs) -> u8 {
    let dir = match tempfile::Builder::new()
        .prefix("mtls-sidecar-demo-")
        .tempdir()
    {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: cannot create a temporary directory: {e}");
            return 1;
        }
    };
    let outcome = walkthrough(dir.path()).await;
    let cleaned = dir.close();
    match (outcome, cleaned) {
        (Ok(()), Ok(())) => {
            println!("\nDone: everything above ran in this process, and the temporary directory is removed.");
            0
        }
        (Err(e), _) => {
            eprintln!("demo failed: {e:#}");
            1
        }
        (Ok(()), Err(e)) => {
            eprintln!("demo finished but could not remove its temporary directory: {e}");
            1
        }
    }
}

fn publish(dir: &AtomicDir, leaf: &Issued, ca_pem: &str) -> Result<()> {
    publish_with_crl(dir, leaf, ca_pem, None)
}

fn publish_with_crl(dir: &AtomicDir, leaf: &Issued, ca_pem: &str, crl: Option<&str>) -> Result<()> {
    let mut files = vec![
        ("tls.crt", leaf.cert_pem.as_bytes()),
        ("tls.key", leaf.key_pem.as_bytes()),
        ("ca.crt", ca_pem.as_bytes()),
    ];
    if let Some(crl) = crl {
        files.push(("ca.crl", crl.as_bytes()));
    }
    dir.publish(&files)
        .context("publishing a credential revision")?;
    Ok(())
}

fn route(name: &str, mode: Mode, listen: &str, target: &str, dir: &Path) -> RouteSpec {
    RouteSpec {
        name: Some(name.to_string()),
        mode: Some(mode),
        listen: Some(listen.to_string()),
        target: Some(target.to_string()),
        credentials: CredentialSpec {
            tls_dir: Some(dir.to_path_buf()),
            ..Default::default()
        },
        ..Default::default()
    }
}

async fn start(routes: Vec<RouteSpec>, admin: Option<&str>) -> Result<Running> {
    let spec = FileSpec {
        admin: admin.map(str::to_string),
        reload_interval: Some("200ms".into()),
        drain_timeout: Some("1s".into()),
        routes,
        ..Default::default()
    };
    let settings = spec.validate().context("demo configuration")?;
    Ok(app::start(settings).await?)
}

async fn walkthrough(root: &Path) -> Result<()> {
    println!("mtls-sidecar demo: a controller talks to a replica through a pair of sidecars.\n");

    // 1. A development PKI, written like a Kubernetes Secret mount.
    let ca = DevCa::new("demo CA", 1)?;
    let replica_dir = AtomicDir::new(&root.join("replica-tls"))?;
    let controller_dir = AtomicDir::new(&root.join("controller-tls"))?;
    let replica = ca.issue(&LeafSpec::dns(REPLICA, Role::Server, 1))?;
    publish(&replica_dir, &replica, &ca.cert_pem)?;
    publish(
        &controller_dir,
        &ca.issue(&LeafSpec::dns(CONTROLLER, Role::Client, 1))?,
        &ca.cert_pem,
    )?;
    println!("1. Minted a CA and two role identities (ECDSA P-256) into Secret-style directories");
    println!(
        "   (tls.crt -> ..data/tls.crt, ..data -> ..<timestamp>.<n>) under {}",
        root.display()
    );
    println!(
        "   replica    identity: DNS:{REPLICA} (serverAuth), serial {}",
        serial(&replica)?
    );
    println!("   controller identity: DNS:{CONTROLLER} (clientAuth)\n");

    // 2. An echo target and the two sidecars.
    let echo = echo_target().await?;
    let mut server_route = route(
        "replica",
        Mode::Server,
        "127.0.0.1:0",
        &echo.to_string(),
        replica_dir.path(),
    );
    server_route.allow_san = vec![CONTROLLER.to_string()];
    let server = start(vec![server_route], Some("127.0.0.1:0")).await?;
    let server_addr = bound(&server, "replica")?;
    let mut client_route = route(
        "controller",
        Mode::Client,
        "127.0.0.1:0",
        &server_addr,
        controller_dir.path(),
    );
    client_route.server_name = Some(REPLICA.to_string());
    let client = start(vec![client_route], None).await?;
    let client_addr = bound(&client, "controller")?;
    let admin = server.admin.clone().context("admin endpoint")?;
    println!("2. Started, in this process:");
    println!("   echo target (plaintext)         {echo}");
    println!("   server sidecar  mTLS {server_addr} -> {echo}, allows only SAN {CONTROLLER}");
    println!(
        "   client sidecar  plaintext {client_addr} -> mTLS {server_addr}, expects SAN {REPLICA}"
    );
    println!("   admin endpoint  http://{admin}/metrics /readyz /status\n");

    // 3. A request through the pair.
    let mut live = TcpStream::connect(&client_addr).await?;
    live.set_nodelay(true)?;
    let reply = roundtrip(&mut live, b"PING from the controller").await?;
    println!("3. The controller writes plaintext to {client_addr}; the replica's echo comes back:");
    println!(
        "   sent {:?}, received {:?}\n",
        "PING from the controller",
        String::from_utf8_lossy(&reply)
    );

    // 4. A foreign certificate is refused.
    let foreign = DevCa::new("someone else's CA", 1)?;
    let intruder = foreign.issue(&LeafSpec::dns(CONTROLLER, Role::Client, 1))?;
    let refused = try_direct(&server_addr, Some(&intruder), &ca.cert_pem).await?;
    if !refused {
        bail!("a certificate from a foreign CA was accepted");
    }
    let failures = metric_lines(&admin, "mtls_sidecar_tls_handshake_failures_total{").await?;
    let reason = failures
        .iter()
        .find(|l| l.contains("route=\"replica\"") && !l.ends_with(" 0"))
        .cloned()
        .unwrap_or_default();
    println!(
        "4. An intruder with the right SAN ({CONTROLLER}) but a certificate from a foreign CA"
    );
    println!("   connects straight to the server sidecar: refused during the handshake.");
    println!("   {reason}\n");

    // 5. Kubelet-style rotation under a live connection.
    let mut generation = server.shared.stores[0].generation();
    let rotated = ca.issue(&LeafSpec::dns(REPLICA, Role::Server, 1))?;
    publish(&replica_dir, &rotated, &ca.cert_pem)?;
    tokio::time::timeout(STEP_TIMEOUT, generation.changed())
        .await
        .context("the rotation was not applied in time")??;
    let reply = roundtrip(&mut live, b"still here after the rotation").await?;
    let served = served_serial(&server_addr, &ca.cert_pem, &ca).await?;
    println!("5. Rotated the replica identity the way the kubelet does (new revision directory,");
    println!(
        "   ..data symlink swapped atomically). The sidecar polled, validated and swapped it:"
    );
    println!("   old serial {}", serial(&replica)?);
    println!("   new serial {served} (served to new handshakes)");
    if served != serial(&rotated)? {
        bail!("the new certificate is not being served");
    }
    println!(
        "   the live connection never noticed: {:?}\n",
        String::from_utf8_lossy(&reply)
    );

    // 6. One leaked identity revoked with a CRL, the CA untouched.
    revoke_step(&server, &server_addr, &ca, &replica_dir, &rotated, &admin).await?;
    let reply = roundtrip(&mut live, b"the controller is not revoked").await?;
    println!(
        "   the controller's own connection is untouched: {:?}\n",
        String::from_utf8_lossy(&reply)
    );

    // 7. The metrics that show all of it.
    println!("7. From http://{admin}/metrics:");
    for prefix in [
        "mtls_sidecar_tls_handshakes_total{",
        "mtls_sidecar_tls_handshake_failures_total{route=\"replica\",reason=\"unknown_ca\"}",
        "mtls_sidecar_tls_handshake_failures_total{route=\"replica\",reason=\"revoked\"}",
        "mtls_sidecar_connections_closed_total{route=\"replica\",reason=\"revoked\"}",
        "mtls_sidecar_crl_next_update_timestamp_seconds",
        "mtls_sidecar_credential_reloads_total{",
        "mtls_sidecar_cert_not_after_timestamp_seconds{",
        "mtls_sidecar_connections_active{",
        "mtls_sidecar_bytes_total{",
    ] {
        for line in metric_lines(&admin, prefix).await? {
            println!("   {line}");
        }
    }

    drop(live);
    client.drain().await;
    server.drain().await;
    Ok(())
}

/// Step 6: a second controller replica's identity leaks while it has a live
/// connection; a CRL naming its serial is published next to the Secret's
/// files (one `..data` swap). The server sidecar closes that connection as
/// `revoked` and refuses its next handshake.
async fn revoke_step(
    server: &Running,
    server_addr: &str,
    ca: &DevCa,
    replica_dir: &AtomicDir,
    replica: &Issued,
    admin: &Addr,
) -> Result<()> {
    let leaked = ca.issue(&LeafSpec::dns(CONTROLLER, Role::Client, 1))?;
    let mut doomed = connect_direct(server_addr, Some(&leaked), &ca.cert_pem).await?;
    roundtrip(&mut doomed, b"before the leak").await?;
    let serial_bytes = serial_of(&leaked.cert_der).context("serial of the leaked certificate")?;
    let crl = ca.crl(&CrlSpec::new(1, vec![serial_bytes], 7))?;
    let mut generation = server.shared.stores[0].generation();
    publish_with_crl(replica_dir, replica, &ca.cert_pem, Some(&crl.pem))?;
    tokio::time::timeout(STEP_TIMEOUT, generation.changed())
        .await
        .context("the CRL was not applied in time")??;
    let mut buf = [0u8; 16];
    match tokio::time::timeout(STEP_TIMEOUT, doomed.read(&mut buf)).await {
        Ok(Ok(0)) | Ok(Err(_)) => {}
        Ok(Ok(_)) => bail!("the revoked connection sent data instead of closing"),
        Err(_) => bail!("the revoked connection was not closed in time"),
    }
    // The close is counted as the connection's task ends: poll for it.
    let deadline = tokio::time::Instant::now() + STEP_TIMEOUT;
    let closed = loop {
        let prefix = "mtls_sidecar_connections_closed_total{route=\"replica\",reason=\"revoked\"}";
        let lines = metric_lines(admin, prefix).await?;
        if let Some(l) = lines.into_iter().find(|l| !l.ends_with(" 0")) {
            break l;
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("no connection was counted as closed for revocation");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    if !try_direct(server_addr, Some(&leaked), &ca.cert_pem).await? {
        bail!("a revoked certificate completed a new handshake");
    }
    println!("6. A second controller's key leaked while it had a live connection. Instead of");
    println!(
        "   rotating the CA, a CRL naming its serial ({}) was published as",
        serial(&leaked)?
    );
    println!("   ca.crl next to tls.crt (one more ..data swap). Within one reload interval:");
    println!("   its live connection was closed as revoked: {closed}");
    println!("   and its new handshake was refused (reason revoked).");
    Ok(())
}

fn serial(leaf: &Issued) -> Result<String> {
    Ok(CertInfo::parse(&leaf.cert_der)?.serial)
}

fn bound(running: &Running, route: &str) -> Result<String> {
    match running.listen_addr(route) {
        Some(Addr::Tcp(a)) => Ok(a),
        other => bail!("route {route} bound to {other:?}"),
    }
}

async fn echo_target() -> Result<std::net::SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    Ok(addr)
}

async fn roundtrip<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    s: &mut S,
    msg: &[u8],
) -> Result<Vec<u8>> {
    s.write_all(msg).await?;
    s.flush().await?;
    let mut buf = vec![0u8; msg.len()];
    tokio::time::timeout(STEP_TIMEOUT, s.read_exact(&mut buf))
        .await
        .context("no reply in time")??;
    Ok(buf)
}

fn tls_config(ident: Option<&Issued>, ca_pem: &str) -> Result<Arc<rustls::ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c?)?;
    }
    let builder =
        rustls::ClientConfig::builder_with_provider(crate::tls::provider::crypto_provider())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_root_certificates(roots);
    Ok(Arc::new(match ident {
        Some(id) => builder.with_client_auth_cert(
            vec![id.cert_der.clone()],
            PrivateKeyDer::from_pem_slice(id.key_pem.as_bytes())?,
        )?,
        None => builder.with_no_client_auth(),
    }))
}

type Direct = tokio_rustls::client::TlsStream<TcpStream>;

/// A TLS handshake straight with the server sidecar: the outer error is
/// ours (no TCP connection, bad configuration), the inner one the handshake's.
async fn handshake(
    addr: &str,
    ident: Option<&Issued>,
    ca_pem: &str,
) -> Result<std::io::Result<Direct>> {
    let tcp = TcpStream::connect(addr).await?;
    let connector = tokio_rustls::TlsConnector::from(tls_config(ident, ca_pem)?);
    Ok(connector.connect(ServerName::try_from(REPLICA)?, tcp).await)
}

/// A TLS connection straight to the server sidecar.
async fn connect_direct(addr: &str, ident: Option<&Issued>, ca_pem: &str) -> Result<Direct> {
    Ok(handshake(addr, ident, ca_pem).await??)
}

/// Connects straight to the server sidecar; true when it refused us.
async fn try_direct(addr: &str, ident: Option<&Issued>, ca_pem: &str) -> Result<bool> {
    let Ok(mut tls) = handshake(addr, ident, ca_pem).await? else {
        return Ok(true);
    };
    // TLS 1.3 reports a refused client certificate on the first read.
    let _ = tls.write_all(b"let me in").await;
    let mut buf = [0u8; 16];
    match tokio::time::timeout(STEP_TIMEOUT, tls.read(&mut buf)).await {
        Ok(Ok(0)) | Ok(Err(_)) => Ok(true),
        Ok(Ok(_)) => Ok(false),
        Err(_) => bail!("no answer from the server sidecar"),
    }
}

/// The serial of the certificate the server sidecar presents now.
async fn served_serial(addr: &str, ca_pem: &str, ca: &DevCa) -> Result<String> {
    let probe = ca.issue(&LeafSpec::dns(CONTROLLER, Role::Client, 1))?;
    let tls = connect_direct(addr, Some(&probe), ca_pem).await?;
    let der = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first().cloned())
        .context("no server certificate")?;
    Ok(CertInfo::parse(&der)?.serial)
}

/// Fetches `/metrics` over HTTP and keeps the sample lines starting with `prefix`.
async fn metric_lines(admin: &Addr, prefix: &str) -> Result<Vec<String>> {
    let Addr::Tcp(addr) = admin else {
        bail!("admin endpoint is not TCP")
    };
    let mut s = TcpStream::connect(addr.as_str()).await?;
    s.write_all(
        format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await?;
    let mut body = String::new();
    tokio::time::timeout(STEP_TIMEOUT, s.read_to_string(&mut body))
        .await
        .context("/metrics did not answer in time")??;
    Ok(body
        .lines()
        .filter(|l| l.starts_with(prefix))
        .map(str::to_string)
        .collect())
}

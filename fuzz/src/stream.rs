//! The TLS record driver (`tls::stream`) as a server after a real
//! handshake (TLS 1.3, mutual, in memory): the client's side writes
//! authentic records (through its own driver) and arbitrary bytes (raw,
//! into the pipe under it) in the order the input says, then ends the
//! pipe with no close_notify. The server reads everything it can: never a
//! panic; it delivers only plaintext the client sent, in order, and none
//! written after the first arbitrary byte; its read ends in an error
//! (nothing arbitrary forms a close_notify), `UnexpectedEof` when every
//! byte was authentic.

use std::io;
use std::sync::{Arc, OnceLock};

use mtls_sidecar::pki::{DevCa, Issued, LeafSpec, Role};
use mtls_sidecar::tls::stream::{accept, connect};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ServerConfig};
use tokio::io::{duplex, AsyncReadExt, AsyncWriteExt};

const NAME: &str = "replica-0.fuzz";

fn key(id: &Issued) -> PrivateKeyDer<'static> {
    PrivateKeyDer::from_pem_slice(id.key_pem.as_bytes()).expect("a minted key")
}

/// One CA, a server and a client identity, for the whole process.
fn configs() -> &'static (Arc<ServerConfig>, Arc<ClientConfig>) {
    static CONFIGS: OnceLock<(Arc<ServerConfig>, Arc<ClientConfig>)> = OnceLock::new();
    CONFIGS.get_or_init(|| {
        let provider = mtls_sidecar::tls::provider::crypto_provider();
        let ca = DevCa::new("fuzz CA", 1).expect("a CA");
        let server = ca
            .issue(&LeafSpec::dns(NAME, Role::Server, 1))
            .expect("a server");
        let client = ca
            .issue(&LeafSpec::dns("client.fuzz", Role::Client, 1))
            .expect("a client");
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(ca.cert_pem.as_bytes()).expect("PEM"))
            .expect("a root");
        let roots = Arc::new(roots);
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            roots.clone(),
            provider.clone(),
        )
        .build()
        .expect("a verifier");
        let sc = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![server.cert_der.clone()], key(&server))
            .expect("a server config");
        let cc = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_client_auth_cert(vec![client.cert_der.clone()], key(&client))
            .expect("a client config");
        (Arc::new(sc), Arc::new(cc))
    })
}

/// The input as steps: a byte whose low bit says authentic (1) or raw
/// (0), then a length byte and that many bytes.
fn steps(data: &[u8]) -> Vec<(bool, &[u8])> {
    let mut out = Vec::new();
    let mut rest = data;
    while let [op, len, tail @ ..] = rest {
        let n = usize::from(*len).min(tail.len());
        out.push((op & 1 == 1, &tail[..n]));
        rest = &tail[n..];
    }
    out
}

/// Runs the exchange `data` describes and checks what the server read.
pub fn check(data: &[u8]) {
    let steps = steps(data);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(exchange(&steps));
}

async fn exchange(steps: &[(bool, &[u8])]) {
    let (sc, cc) = configs();
    // Large enough that no write waits for a reader: inputs are at most
    // 16 KiB, their records and the server's tickets and alert a little more.
    let (a, b) = duplex(1 << 20);
    let name = ServerName::try_from(NAME).expect("a name");
    let (server, client) = tokio::join!(accept(sc.clone(), a), connect(cc.clone(), name, b));
    let (mut server, mut client) = (
        server.expect("the handshake completes"),
        client.expect("the handshake completes"),
    );
    let mut sent = Vec::new();
    let mut tainted = false;
    for (authentic, bytes) in steps {
        if *authentic {
            client.write_all(bytes).await.expect("written");
            client.flush().await.expect("flushed");
            if !tainted {
                sent.extend_from_slice(bytes);
            }
        } else {
            client.get_mut().0.write_all(bytes).await.expect("written");
            tainted |= !bytes.is_empty();
        }
    }
    client.get_mut().0.shutdown().await.expect("shut");
    let mut got = Vec::new();
    let end = server.read_to_end(&mut got).await;
    assert!(
        sent.starts_with(&got),
        "the server delivered {} bytes the client did not send first",
        got.len()
    );
    match end {
        Ok(n) => panic!("the stream ended cleanly after {n} bytes with no close_notify"),
        Err(e) if !tainted => {
            assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");
            assert_eq!(got, sent, "authentic bytes were lost");
        }
        Err(_) => {}
    }
}

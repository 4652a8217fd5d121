//! The crypto floor of one mutual-TLS handshake between the two sidecars
//! (benches/reports/2026-12-02-crypto-floor.md), measured with
//! the provider the sidecar uses (`mtls_sidecar::tls::provider::crypto_provider()`,
//! aws-lc-rs) and the key type of the bench's PKI (ECDSA P-256):
//!
//! - the key exchange the defaults pick, X25519MLKEM768: the client's key
//!   share, the server's encapsulation and shared secret, the client's
//!   decapsulation and shared secret;
//! - one ECDSA P-256 signature (each side signs its CertificateVerify);
//! - one ECDSA P-256 verification (each side verifies the peer's
//!   CertificateVerify, and the peer's leaf against the CA unless a chain
//!   memo spares it);
//! - for scale, one whole mutual handshake of two rustls connections in
//!   memory (no sockets, no runtime), with rustls's own WebPKI verifiers.
//!
//! CPU time of this thread (`CLOCK_THREAD_CPUTIME_ID`), so other load on
//! the box inflates it less than wall time; median of seven batches.
//!
//! ```sh
//! cargo run --release --example crypto_floor
//! ```

use std::sync::Arc;
use std::time::Duration;

use mtls_sidecar::pki::{DevCa, LeafSpec, Role};
use rustls::crypto::SupportedKxGroup;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{NamedGroup, SignatureScheme};

/// CPU time this thread has used.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Median CPU microseconds per call of `op`, over seven batches of `n`.
fn per_op(n: u32, mut op: impl FnMut()) -> f64 {
    let mut batches: Vec<f64> = (0..7)
        .map(|_| {
            let start = thread_cpu();
            for _ in 0..n {
                op();
            }
            (thread_cpu() - start).as_secs_f64() * 1e6 / f64::from(n)
        })
        .collect();
    batches.sort_by(f64::total_cmp);
    batches[3]
}

fn main() {
    let provider = mtls_sidecar::tls::provider::crypto_provider();
    let n: u32 = std::env::var("FLOOR_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);

    let group: &'static dyn SupportedKxGroup = *provider
        .kx_groups
        .iter()
        .find(|g| g.name() == NamedGroup::X25519MLKEM768)
        .expect("X25519MLKEM768 in the provider");
    let client_start = per_op(n, || {
        group.start().expect("key share");
    });
    let client_share = group.start().expect("key share");
    let share = client_share.pub_key().to_vec();
    let server_side = per_op(n, || {
        group.start_and_complete(&share).expect("server side");
    });
    let server = group.start_and_complete(&share).expect("server side");
    let client_finish = per_op(n, || {
        let c = group.start().expect("key share");
        let pk = c.pub_key().to_vec();
        let s = group.start_and_complete(&pk).expect("server side");
        c.complete(&s.pub_key).expect("client side");
    }) - client_start
        - server_side;
    drop((client_share, server));

    let ca = DevCa::new("floor CA", 1).expect("CA");
    let issue = |name: &str, role: Role| ca.issue(&LeafSpec::dns(name, role, 1)).expect("leaf");
    let server_leaf = issue("server.floor", Role::Server);
    let client_leaf = issue("client.floor", Role::Client);
    let key = PrivateKeyDer::from_pem_slice(server_leaf.key_pem.as_bytes()).expect("key");
    let signing = provider
        .key_provider
        .load_private_key(key)
        .expect("signing key");
    let signer = signing
        .choose_scheme(&[SignatureScheme::ECDSA_NISTP256_SHA256])
        .expect("P-256");
    let message = [0x20u8; 130]; // a CertificateVerify's signed content
    let sign = per_op(n, || {
        signer.sign(&message).expect("sign");
    });
    let signature = signer.sign(&message).expect("sign");
    let spki = {
        use x509_parser::prelude::FromDer;
        let (_, cert) = x509_parser::certificate::X509Certificate::from_der(&server_leaf.cert_der)
            .expect("leaf");
        cert.public_key().subject_public_key.data.to_vec()
    };
    let alg = webpki::aws_lc_rs::ECDSA_P256_SHA256;
    let verify = per_op(n, || {
        alg.verify_signature(&spki, &message, &signature)
            .expect("verify");
    });

    let (server_cfg, client_cfg) = configs(&provider, &ca, &server_leaf, &client_leaf);
    let handshake = per_op(n / 3 + 1, || mutual_handshake(&server_cfg, &client_cfg));

    let kx = client_start + server_side + client_finish;
    let floor = kx + 2.0 * sign + 4.0 * verify;
    let memo = kx + 2.0 * sign + 2.0 * verify;
    println!("CPU µs per operation (median of 7 batches of {n}):");
    println!("  X25519MLKEM768 client key share      {client_start:8.1}");
    println!("  X25519MLKEM768 server side           {server_side:8.1}");
    println!("  X25519MLKEM768 client completion     {client_finish:8.1}");
    println!("  ECDSA P-256 sign                     {sign:8.1}");
    println!("  ECDSA P-256 verify                   {verify:8.1}");
    println!("floor of one mutual handshake, both sides:");
    println!("  key exchange + 2 signs + 4 verifies  {floor:8.1}");
    println!("  the same with both leaves' chain verifications memoised (2 verifies) {memo:8.1}");
    println!("rustls in memory, one mutual handshake, both sides (WebPKI verifiers, no sockets): {handshake:8.1}");
}

/// A TLS 1.3 server config requiring a client certificate and a client
/// config presenting one, `server` and `client` chaining to `ca`.
fn configs(
    provider: &Arc<rustls::crypto::CryptoProvider>,
    ca: &DevCa,
    server: &mtls_sidecar::pki::Issued,
    client: &mtls_sidecar::pki::Issued,
) -> (Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>) {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.cert_pem.as_bytes()).expect("CA"))
        .expect("root");
    let roots = Arc::new(roots);
    let key = |pem: &str| PrivateKeyDer::from_pem_slice(pem.as_bytes()).expect("key");
    let client_verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        roots.clone(),
        provider.clone(),
    )
    .build()
    .expect("client verifier");
    let server_cfg = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .with_client_cert_verifier(client_verifier)
        .with_single_cert(vec![server.cert_der.clone()], key(&server.key_pem))
        .expect("server config");
    let mut client_cfg = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .with_root_certificates(roots)
        .with_client_auth_cert(vec![client.cert_der.clone()], key(&client.key_pem))
        .expect("client config");
    // Full handshakes only, as the bench's new connections are.
    client_cfg.resumption = rustls::client::Resumption::disabled();
    (Arc::new(server_cfg), Arc::new(client_cfg))
}

/// One full TLS 1.3 mutual handshake between a rustls client and server
/// in memory (the client config resumes nothing).
fn mutual_handshake(
    server_cfg: &Arc<rustls::ServerConfig>,
    client_cfg: &Arc<rustls::ClientConfig>,
) {
    let name = ServerName::try_from("server.floor").expect("name");
    let mut c = rustls::ClientConnection::new(client_cfg.clone(), name).expect("client");
    let mut s = rustls::ServerConnection::new(server_cfg.clone()).expect("server");
    let mut wire = Vec::new();
    while c.is_handshaking() || s.is_handshaking() {
        wire.clear();
        while c.wants_write() {
            c.write_tls(&mut wire).expect("client writes");
        }
        let mut rd = &wire[..];
        while !rd.is_empty() {
            s.read_tls(&mut rd).expect("server reads");
        }
        s.process_new_packets().expect("server handshake");
        wire.clear();
        while s.wants_write() {
            s.write_tls(&mut wire).expect("server writes");
        }
        let mut rd = &wire[..];
        while !rd.is_empty() {
            c.read_tls(&mut rd).expect("client reads");
        }
        c.process_new_packets().expect("client handshake");
    }
}

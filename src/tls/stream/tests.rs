//! The driver over in-memory pipes, against itself and against rustls's
//! buffered connection (tokio-rustls): handshakes of both versions, data
//! both ways through small pipes (records split across reads, writes
//! blocked), half-close, key updates, and what hostile bytes get.
use super::*;

use std::future::Future;
use std::sync::Arc;

use rustls::{ClientConfig, ServerConfig};
use rustls_pki_types::ServerName;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{SupportedProtocolVersion, ALL_VERSIONS};
use tokio::io::{duplex, AsyncReadExt, AsyncWriteExt, DuplexStream};

use crate::pki::{DevCa, Issued, LeafSpec, Role};

const NAME: &str = "replica-0.test";

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

fn key(id: &Issued) -> PrivateKeyDer<'static> {
    PrivateKeyDer::from_pem_slice(id.key_pem.as_bytes()).unwrap()
}

/// A root store holding `ca` alone.
fn roots(ca: &DevCa) -> Arc<rustls::RootCertStore> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.cert_pem.as_bytes()).unwrap())
        .unwrap();
    Arc::new(roots)
}

fn configs(
    versions: &[&'static SupportedProtocolVersion],
) -> (Arc<ServerConfig>, Arc<ClientConfig>) {
    let ca = DevCa::new("test CA", 1).unwrap();
    let server_id = ca.issue(&LeafSpec::dns(NAME, Role::Server, 1)).unwrap();
    let client_id = ca
        .issue(&LeafSpec::dns("controller.test", Role::Client, 1))
        .unwrap();
    let roots = roots(&ca);
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
            .build()
            .unwrap();
    let sc = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(versions)
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![server_id.cert_der.clone()], key(&server_id))
        .unwrap();
    let cc = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(vec![client_id.cert_der.clone()], key(&client_id))
        .unwrap();
    (Arc::new(sc), Arc::new(cc))
}

fn name() -> ServerName<'static> {
    ServerName::try_from(NAME).unwrap()
}

type Pair = (ServerStream<DuplexStream>, ClientStream<DuplexStream>);

/// Both sides on the driver, over a pipe holding `pipe` bytes each way.
async fn pair(versions: &[&'static SupportedProtocolVersion], pipe: usize) -> Pair {
    let (sc, cc) = configs(versions);
    let (a, b) = duplex(pipe);
    let server = tokio::spawn(accept(sc, a));
    let client = connect(cc, name(), b).await.unwrap();
    (server.await.unwrap().unwrap(), client)
}

fn held<IO, C>(s: &TlsStream<IO, C>) -> usize {
    s.incoming.capacity() + s.plain.capacity() + s.out.capacity()
}

/// Sends `n` patterned bytes one way while reading them the other.
async fn carry<W, R>(w: &mut W, r: &mut R, n: usize)
where
    W: AsyncWrite + Unpin,
    R: AsyncRead + Unpin,
{
    let data: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
    let send = async {
        for chunk in data.chunks(50_000) {
            w.write_all(chunk).await.unwrap();
            w.flush().await.unwrap();
        }
    };
    let recv = async {
        let mut got = vec![0u8; n];
        r.read_exact(&mut got).await.unwrap();
        got
    };
    let ((), got) = tokio::join!(send, recv);
    assert!(got == data, "the bytes arrive whole and in order");
}

#[tokio::test]
async fn both_versions_carry_data_both_ways_through_a_small_pipe() {
    for v in [&rustls::version::TLS13, &rustls::version::TLS12] {
        let (mut s, mut c) = pair(&[v], 1000).await;
        assert_eq!(s.get_ref().1.protocol_version(), Some(v.version));
        carry(&mut c, &mut s, 300_000).await;
        carry(&mut s, &mut c, 300_000).await;
    }
}

#[tokio::test]
async fn an_idle_connection_holds_no_buffer() {
    let (mut s, mut c) = pair(ALL_VERSIONS, 64 * 1024).await;
    carry(&mut c, &mut s, 100_000).await;
    carry(&mut s, &mut c, 100_000).await;
    // One read that finds nothing: what forwarding does while idle.
    let mut cx = Context::from_waker(std::task::Waker::noop());
    let mut byte = [0u8; 1];
    for side in [&mut s as &mut dyn AsyncReadDyn, &mut c] {
        assert!(side.read_now(&mut cx, &mut byte).is_pending());
    }
    assert_eq!((held(&s), held(&c)), (0, 0));
}

trait AsyncReadDyn {
    fn read_now(&mut self, cx: &mut Context<'_>, b: &mut [u8]) -> Poll<io::Result<()>>;
}

impl<T: AsyncRead + Unpin> AsyncReadDyn for T {
    fn read_now(&mut self, cx: &mut Context<'_>, b: &mut [u8]) -> Poll<io::Result<()>> {
        Pin::new(self).poll_read(cx, &mut ReadBuf::new(b))
    }
}

#[tokio::test]
async fn close_notify_is_a_half_close() {
    let (mut s, mut c) = pair(ALL_VERSIONS, 4096).await;
    c.write_all(b"last words").await.unwrap();
    c.shutdown().await.unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"last words");
    // The other direction still flows, then closes the same way.
    s.write_all(b"reply").await.unwrap();
    s.shutdown().await.unwrap();
    let mut got = Vec::new();
    c.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"reply");
}

#[tokio::test]
async fn a_socket_ending_without_close_notify_is_unexpected_eof() {
    let (mut s, c) = pair(ALL_VERSIONS, 4096).await;
    drop(c);
    let mut b = [0u8; 8];
    let e = s.read(&mut b).await.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
}

/// The buffered client asks for a key update; the driver answers it and
/// both go on under the new keys.
#[tokio::test]
async fn key_updates_from_a_buffered_peer_are_answered() {
    let (sc, cc) = configs(&[&rustls::version::TLS13]);
    let (a, b) = duplex(4096);
    let server = tokio::spawn(accept(sc, a));
    let mut client = tokio_rustls::TlsConnector::from(cc)
        .connect(name(), b)
        .await
        .unwrap();
    let mut s = server.await.unwrap().unwrap();
    for _ in 0..3 {
        client.get_mut().1.refresh_traffic_keys().unwrap();
        carry(&mut client, &mut s, 40_000).await;
        carry(&mut s, &mut client, 40_000).await;
    }
}

#[tokio::test]
async fn the_driver_client_talks_to_a_buffered_server() {
    for v in [&rustls::version::TLS13, &rustls::version::TLS12] {
        let (sc, cc) = configs(&[v]);
        let (a, b) = duplex(2048);
        let server = tokio::spawn(tokio_rustls::TlsAcceptor::from(sc).accept(a));
        let mut c = connect(cc, name(), b).await.unwrap();
        let mut s = server.await.unwrap().unwrap();
        carry(&mut c, &mut s, 200_000).await;
        carry(&mut s, &mut c, 200_000).await;
        s.shutdown().await.unwrap();
        let mut rest = Vec::new();
        c.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
    }
}

#[tokio::test]
async fn garbage_instead_of_a_handshake_is_a_tls_error() {
    let (sc, _) = configs(ALL_VERSIONS);
    let (a, mut b) = duplex(4096);
    let server = tokio::spawn(accept(sc, a));
    b.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let e = server.await.unwrap().err().unwrap();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    assert!(e.get_ref().unwrap().is::<rustls::Error>());
    // The peer is told why (an alert record: content type 21).
    let mut first = [0u8; 1];
    b.read_exact(&mut first).await.unwrap();
    assert_eq!(first[0], 21);
}

#[tokio::test]
async fn a_record_longer_than_allowed_is_refused_without_reading_it() {
    let (mut s, c) = pair(ALL_VERSIONS, 4096).await;
    let mut raw = c.io;
    // An application-data header announcing 60,000 bytes.
    raw.write_all(&[23, 3, 3, 0xEA, 0x60]).await.unwrap();
    let mut b = [0u8; 8];
    let e = s.read(&mut b).await.unwrap_err();
    assert!(e.get_ref().unwrap().is::<rustls::Error>(), "{e}");
    // Used again (forwarding's other direction writes to it): an error,
    // and rustls is not turned for a second alert over the same bytes
    // (its debug builds assert on a second fatal alert).
    let e = s.write_all(b"after").await.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
}

/// Found by the `tls_records` fuzz target
/// (fuzz/seeds/tls_records/regression-data-then-bad-record): plaintext
/// decrypted in the same turn as a record that fails is read first, and
/// the error comes with the next read; a read that fails reads nothing.
#[tokio::test]
async fn plaintext_before_a_bad_record_is_read_before_the_error() {
    for versions in [&[&rustls::version::TLS13][..], &[&rustls::version::TLS12]] {
        let (mut s, mut c) = pair(versions, 1 << 16).await;
        c.write_all(b"hi").await.unwrap();
        c.flush().await.unwrap();
        // A record no key seals, in the same socket read as the first.
        c.io.write_all(&[23, 3, 3, 0, 17]).await.unwrap();
        c.io.write_all(&[0x5a; 17]).await.unwrap();
        let mut b = [0u8; 64];
        let n = s.read(&mut b).await.expect("the authentic bytes first");
        assert_eq!(&b[..n], b"hi");
        let e = s.read(&mut b).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        let mut all = Vec::new();
        assert!(s.read_to_end(&mut all).await.is_err());
        assert!(all.is_empty());
    }
}

/// Found by the `tls_records` fuzz target
/// (fuzz/seeds/tls_records/regression-ccs-then-alert): a
/// `change_cipher_spec` after the handshake, then a record in the clear,
/// in one read. rustls discards the first and raised a second alert over
/// the next when the failed connection was turned for its alert (its
/// debug builds, these tests', assert on that).
#[tokio::test]
async fn a_refused_record_and_the_next_raise_one_alert() {
    let (mut s, mut c) = pair(&[&rustls::version::TLS13], 1 << 16).await;
    c.io.write_all(&[20, 3, 3, 0, 1, 1, 21, 3, 3, 0, 2, 1, 0])
        .await
        .unwrap();
    let mut b = [0u8; 8];
    let e = s.read(&mut b).await.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
}

#[tokio::test]
async fn a_peer_that_stops_mid_handshake_holds_only_its_bytes() {
    let (sc, _) = configs(ALL_VERSIONS);
    let (a, mut b) = duplex(4096);
    let mut hs = accept(sc, a);
    // A handshake record header and part of its body.
    b.write_all(&[22, 3, 1, 0x10, 0x00, 1, 0, 0x0f])
        .await
        .unwrap();
    let mut cx = Context::from_waker(std::task::Waker::noop());
    assert!(Pin::new(&mut hs).poll(&mut cx).is_pending());
    let s = hs.stream.as_ref().unwrap();
    assert_eq!(s.incoming.capacity(), 8);
    assert_eq!(held(s), 8);
}

#[tokio::test]
async fn a_peer_that_stops_mid_record_holds_only_its_bytes() {
    let (mut s, c) = pair(ALL_VERSIONS, 4096).await;
    let mut raw = c.io;
    // An application-data record of 1,000 bytes, 10 of them sent.
    raw.write_all(&[23, 3, 3, 0x03, 0xE8, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
        .await
        .unwrap();
    let mut cx = Context::from_waker(std::task::Waker::noop());
    let mut b = [0u8; 64];
    assert!(s.read_now(&mut cx, &mut b).is_pending());
    assert_eq!(held(&s), 15);
}

/// A refusal inside the handshake reaches the peer as its alert (here
/// ALPN: the server offers only a protocol the client does not).
#[tokio::test]
async fn a_refused_handshake_sends_its_alert() {
    let (sc, cc) = configs(ALL_VERSIONS);
    let mut sc = (*sc).clone();
    sc.alpn_protocols = vec![b"x-proto".to_vec()];
    let mut cc = (*cc).clone();
    cc.alpn_protocols = vec![b"other".to_vec()];
    let (a, b) = duplex(4096);
    let server = tokio::spawn(accept(Arc::new(sc), a));
    let client = tokio_rustls::TlsConnector::from(Arc::new(cc))
        .connect(name(), b)
        .await;
    let e = client.err().unwrap();
    let tls = e.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>());
    assert!(
        matches!(
            tls,
            Some(rustls::Error::AlertReceived(
                rustls::AlertDescription::NoApplicationProtocol
            ))
        ),
        "{e:?}"
    );
    assert!(server.await.unwrap().is_err());
}

/// A client sends its first data right behind its Finished; the server's
/// handshake reads only what it needs, so that data is not counted
/// against the pre-authentication cap wrapping the socket (with reads of
/// a whole buffer, 200 KiB arrived "before the handshake completed").
#[tokio::test]
async fn data_behind_the_last_flight_is_not_read_by_the_handshake() {
    use crate::proxy::preauth::Capped;
    let (sc, cc) = configs(&[&rustls::version::TLS13]);
    let (a, b) = duplex(512 * 1024);
    let server = tokio::spawn(accept(sc, Capped::with_limit(a, 16 * 1024)));
    let mut c = connect(cc, name(), b).await.unwrap();
    // No yield before this: the server has not seen our Finished yet.
    c.write_all(&[7u8; 200 * 1024]).await.unwrap();
    c.flush().await.unwrap();
    let mut s = server.await.unwrap().expect("the handshake completes");
    s.get_mut().0.lift();
    let mut got = vec![0u8; 200 * 1024];
    s.read_exact(&mut got).await.unwrap();
    assert!(got.iter().all(|&b| b == 7));
}

/// One write takes a whole forwarding chunk (four full records, 64 KiB)
/// and no more: forwarding's chunks go out in one write each.
#[tokio::test]
async fn one_write_takes_four_full_records() {
    let (mut s, mut c) = pair(ALL_VERSIONS, 1 << 18).await;
    let data = vec![9u8; 100_000];
    let mut cx = Context::from_waker(std::task::Waker::noop());
    let wrote = Pin::new(&mut c).poll_write(&mut cx, &data);
    assert!(matches!(wrote, Poll::Ready(Ok(65_536))), "{wrote:?}");
    let mut got = vec![0u8; 65_536];
    s.read_exact(&mut got).await.unwrap();
    assert!(got.iter().all(|&b| b == 9));
}

/// A small read decrypts only as far as the reader's buffer: what arrived
/// behind the record that filled it stays sealed in the receive buffer,
/// so the plaintext held for the next read is one record's rest at most
/// (decrypting all that arrived held 64 KiB for a 100-byte read).
#[tokio::test]
async fn a_small_read_decrypts_one_record_not_all_that_arrived() {
    let (mut s, mut c) = pair(ALL_VERSIONS, 1 << 18).await;
    let data: Vec<u8> = (0..65_536).map(|i| (i % 251) as u8).collect();
    c.write_all(&data).await.unwrap();
    c.flush().await.unwrap();
    let mut got = vec![0u8; 100];
    s.read_exact(&mut got).await.unwrap();
    assert!(
        s.plain.len() < 16_384,
        "{} bytes decrypted ahead of the reader",
        s.plain.len()
    );
    let mut rest = vec![0u8; data.len() - got.len()];
    s.read_exact(&mut rest).await.unwrap();
    got.extend_from_slice(&rest);
    assert!(got == data, "the bytes arrive whole and in order");
}

/// A TLS 1.3 server that may send half-RTT data can write before the
/// client's Finished arrives; its handshake still completes only when
/// rustls says so, not at the first chance to write.
#[tokio::test]
async fn a_half_rtt_server_completes_only_with_the_clients_finished() {
    let ca = DevCa::new("half-RTT CA", 1).unwrap();
    let id = ca.issue(&LeafSpec::dns(NAME, Role::Server, 1)).unwrap();
    let mut sc = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![id.cert_der.clone()], key(&id))
        .unwrap();
    sc.send_half_rtt_data = true;
    let cc = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots(&ca))
        .with_no_client_auth();
    let (a, b) = duplex(1 << 16);
    let server = tokio::spawn(accept(Arc::new(sc), a));
    let mut c = connect(Arc::new(cc), name(), b).await.unwrap();
    let mut s = server.await.unwrap().unwrap();
    assert!(!s.get_ref().1.is_handshaking(), "accepted mid-handshake");
    carry(&mut c, &mut s, 1000).await;
}

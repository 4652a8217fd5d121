//! How a client route learns that its server accepted our certificate:
//! over TLS 1.3 the server judges us after our handshake has finished, so
//! the completed handshake is counted (or the refusal found) only as the
//! forwarding reads what the server sends ([`ServerVerdict`]).

use std::pin::Pin;
use std::task::{Context, Poll};

use rustls::AlertDescription;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::supervise::Settle;
use crate::tls::stream::ClientStream;

/// A client route's TLS stream to its server, until the server has shown
/// that it accepted our certificate. Over TLS 1.3 our handshake finishes
/// before the server has judged us: a refusal comes after it, as a fatal
/// alert where the first record was expected. So the completed handshake
/// is counted only on the server's first sign of acceptance (data, a
/// session ticket, a clean close), or when the connection ends without a
/// refusal; a fatal alert first is the handshake refused ([`Settle`]).
/// Over TLS 1.2 the server's Finished already came after its verdict.
///
/// Watched as the forwarding reads, in place: no timer, no task, and
/// nothing read or written is held back.
pub(super) struct ServerVerdict<IO> {
    tls: Box<ClientStream<IO>>,
    handshakes: metrics::Counter,
    verdict: Verdict,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Nothing from the server yet.
    Awaited,
    /// Counted as a completed handshake.
    Accepted,
    /// A fatal alert came first.
    Refused(AlertDescription),
}

impl<IO: AsyncRead + AsyncWrite + Unpin> ServerVerdict<IO> {
    pub(super) fn new(tls: Box<ClientStream<IO>>, handshakes: metrics::Counter) -> Self {
        let mut s = ServerVerdict {
            tls,
            handshakes,
            verdict: Verdict::Awaited,
        };
        if s.tls.get_ref().1.protocol_version() != Some(rustls::ProtocolVersion::TLSv1_3) {
            s.accept();
        }
        s
    }

    fn accept(&mut self) {
        self.verdict = Verdict::Accepted;
        self.handshakes.increment(1);
    }

    /// Judges what one read of the server's stream returned.
    fn observe(&mut self, read: &Poll<std::io::Result<()>>) {
        if self.verdict != Verdict::Awaited {
            return;
        }
        match read {
            // Plaintext, or a clean close (close_notify).
            Poll::Ready(Ok(())) => self.accept(),
            Poll::Ready(Err(e)) => {
                let tls = e.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>());
                if let Some(rustls::Error::AlertReceived(alert)) = tls {
                    self.verdict = Verdict::Refused(*alert);
                }
            }
            // A session ticket: sent only once the server accepted us.
            Poll::Pending if self.tls.get_ref().1.tls13_tickets_received() > 0 => self.accept(),
            Poll::Pending => {}
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> Settle for ServerVerdict<IO> {
    /// Forwarding may have stopped on something else first (a write to the
    /// server failing on the reset that followed its alert, a close signal):
    /// one last read without waiting looks at what the server sent. Still
    /// undecided, the handshake counts as completed.
    fn settle(&mut self) -> Option<AlertDescription> {
        if self.verdict == Verdict::Awaited {
            let mut cx = Context::from_waker(std::task::Waker::noop());
            let mut byte = [0u8; 1];
            let read = Pin::new(&mut *self.tls).poll_read(&mut cx, &mut ReadBuf::new(&mut byte));
            self.observe(&read);
        }
        match self.verdict {
            Verdict::Refused(alert) => Some(alert),
            Verdict::Awaited => {
                self.accept();
                None
            }
            Verdict::Accepted => None,
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncRead for ServerVerdict<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let read = Pin::new(&mut *this.tls).poll_read(cx, buf);
        this.observe(&read);
        read
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncWrite for ServerVerdict<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut *self.get_mut().tls).poll_write(cx, buf)
    }

    // No vectored writes: the TLS stream takes none either (its default
    // writes the first buffer), and forwarding never asks for them.

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.get_mut().tls).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.get_mut().tls).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    //! [`ServerVerdict`] over an in-memory pipe, where whatever the server
    //! sent is readable at once: each read is one poll, as forwarding does.
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    use rustls_pki_types::{CertificateDer, ServerName};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_rustls::TlsAcceptor;

    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::PrivateKeyDer;
    use rustls::{ClientConfig, ServerConfig, SupportedProtocolVersion};
    use tokio::io::{duplex, DuplexStream};

    use crate::pki::{DevCa, Issued, LeafSpec, Role};

    const NAME: &str = "replica-0.test";

    type Server = tokio_rustls::server::TlsStream<DuplexStream>;

    fn provider() -> Arc<rustls::crypto::CryptoProvider> {
        Arc::new(rustls::crypto::aws_lc_rs::default_provider())
    }

    fn roots(ca: &DevCa) -> Arc<rustls::RootCertStore> {
        let mut roots = rustls::RootCertStore::empty();
        let cert = CertificateDer::from_pem_slice(ca.cert_pem.as_bytes()).unwrap();
        roots.add(cert).unwrap();
        Arc::new(roots)
    }

    fn key(id: &Issued) -> PrivateKeyDer<'static> {
        PrivateKeyDer::from_pem_slice(id.key_pem.as_bytes()).unwrap()
    }

    /// One connection: whether the server trusts our CA, the version both
    /// speak, and the TLS 1.3 tickets the server sends once it accepted us.
    struct Setup {
        trusted: bool,
        version: &'static SupportedProtocolVersion,
        tickets: usize,
    }

    const TLS13: Setup = Setup {
        trusted: true,
        version: &rustls::version::TLS13,
        tickets: 0,
    };

    /// Runs the handshake; returns our side once the server is done with
    /// its own, and the server's side if it accepted us.
    async fn connect(setup: Setup) -> (Box<ClientStream<DuplexStream>>, Option<Server>) {
        let ca = DevCa::new("test CA", 1).unwrap();
        let other = DevCa::new("another CA", 1).unwrap();
        let server_id = ca.issue(&LeafSpec::dns(NAME, Role::Server, 1)).unwrap();
        let client_id = ca
            .issue(&LeafSpec::dns("controller.test", Role::Client, 1))
            .unwrap();
        let versions = &[setup.version];
        let client_ca = if setup.trusted { &ca } else { &other };
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            roots(client_ca),
            provider(),
        )
        .build()
        .unwrap();
        let mut sc = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(versions)
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![server_id.cert_der.clone()], key(&server_id))
            .unwrap();
        sc.send_tls13_tickets = setup.tickets;
        let cc = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(versions)
            .unwrap()
            .with_root_certificates(roots(&ca))
            .with_client_auth_cert(vec![client_id.cert_der.clone()], key(&client_id))
            .unwrap();
        let (ours, theirs) = duplex(64 * 1024);
        let server = tokio::spawn(TlsAcceptor::from(Arc::new(sc)).accept(theirs));
        let name = ServerName::try_from(NAME).unwrap();
        let client = crate::tls::stream::connect(Arc::new(cc), name, ours)
            .await
            .unwrap();
        let server = server.await.unwrap().ok();
        (Box::new(client), server)
    }

    fn counter() -> (Arc<AtomicU64>, metrics::Counter) {
        let n = Arc::new(AtomicU64::new(0));
        (n.clone(), metrics::Counter::from_arc(n))
    }

    fn count(n: &AtomicU64) -> u64 {
        n.load(Ordering::SeqCst)
    }

    /// One read, never waiting: what forwarding's read returns on a wake-up.
    fn read_once<IO>(v: &mut ServerVerdict<IO>) -> Poll<std::io::Result<usize>>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut buf = [0u8; 64];
        let mut buf = ReadBuf::new(&mut buf);
        let read = Pin::new(v).poll_read(&mut cx, &mut buf);
        read.map_ok(|()| buf.filled().len())
    }

    /// Flush every frame: what the socket could not take when a chunk was
    /// written goes out with the flush after it, which waits until it has.
    #[tokio::test]
    async fn the_flush_sends_what_a_full_pipe_held_back() {
        let (tls, server) = connect(TLS13).await;
        let mut server = server.expect("accepted");
        let (_, c) = counter();
        let mut v = ServerVerdict::new(tls, c.clone());
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let chunk = [7u8; 16 * 1024];
        // Write until the pipe (64 KiB) is full and a record's tail waits.
        let mut sent = 0;
        while let Poll::Ready(n) = Pin::new(&mut v).poll_write(&mut cx, &chunk) {
            sent += n.unwrap();
            assert!(sent < 1024 * 1024, "the pipe never filled");
        }
        assert!(
            Pin::new(&mut v).poll_flush(&mut cx).is_pending(),
            "flushed while the pipe held part of a record back"
        );
        let reader = tokio::spawn(async move {
            let mut got = vec![0u8; sent];
            server.read_exact(&mut got).await.map(|_| got)
        });
        tokio::time::timeout(std::time::Duration::from_secs(30), v.flush())
            .await
            .expect("the flush ended")
            .unwrap();
        let got = tokio::time::timeout(std::time::Duration::from_secs(30), reader)
            .await
            .expect("everything written reached the server")
            .unwrap()
            .unwrap();
        assert!(got.iter().all(|&b| b == 7));
    }

    #[tokio::test]
    async fn an_alert_first_is_the_refusal_and_never_a_completed_handshake() {
        let (tls, server) = connect(Setup {
            trusted: false,
            ..TLS13
        })
        .await;
        assert!(server.is_none(), "the server refused us");
        let (n, c) = counter();
        let mut v = ServerVerdict::new(tls, c.clone());
        assert!(matches!(read_once(&mut v), Poll::Ready(Err(_))));
        assert_eq!(v.settle(), Some(AlertDescription::UnknownCA));
        assert_eq!(count(&n), 0);
    }

    /// Forwarding may stop before reading the alert (a write failing on the
    /// reset that follows it): the last look still finds it.
    #[tokio::test]
    async fn an_alert_still_unread_when_forwarding_stops_is_the_refusal() {
        let (tls, _) = connect(Setup {
            trusted: false,
            ..TLS13
        })
        .await;
        let (n, c) = counter();
        let mut v = ServerVerdict::new(tls, c.clone());
        assert_eq!(v.settle(), Some(AlertDescription::UnknownCA));
        assert_eq!(v.settle(), Some(AlertDescription::UnknownCA));
        assert_eq!(count(&n), 0);
    }

    #[tokio::test]
    async fn the_first_data_counts_the_handshake_once() {
        let (tls, server) = connect(TLS13).await;
        let mut server = server.expect("accepted");
        let (n, c) = counter();
        let mut v = ServerVerdict::new(tls, c.clone());
        assert!(read_once(&mut v).is_pending());
        assert_eq!(count(&n), 0, "nothing from the server yet");
        for _ in 0..2 {
            server.write_all(b"hi").await.unwrap();
            server.flush().await.unwrap();
            assert!(matches!(read_once(&mut v), Poll::Ready(Ok(2))));
            assert_eq!(count(&n), 1);
        }
        assert_eq!(v.settle(), None);
        assert_eq!(count(&n), 1);
    }

    #[tokio::test]
    async fn a_session_ticket_counts_the_handshake_before_any_data() {
        let (tls, _server) = connect(Setup {
            tickets: 2,
            ..TLS13
        })
        .await;
        let (n, c) = counter();
        let mut v = ServerVerdict::new(tls, c.clone());
        assert_eq!(count(&n), 0);
        assert!(read_once(&mut v).is_pending());
        assert_eq!(count(&n), 1);
        assert_eq!(v.settle(), None);
        assert_eq!(count(&n), 1);
    }

    #[tokio::test]
    async fn a_clean_close_counts_the_handshake() {
        let (tls, server) = connect(TLS13).await;
        let mut server = server.expect("accepted");
        server.shutdown().await.unwrap();
        let (n, c) = counter();
        let mut v = ServerVerdict::new(tls, c.clone());
        assert!(matches!(read_once(&mut v), Poll::Ready(Ok(0))));
        assert_eq!(count(&n), 1);
    }

    #[tokio::test]
    async fn a_server_that_said_nothing_is_counted_once_when_forwarding_stops() {
        let (tls, _server) = connect(TLS13).await;
        let (n, c) = counter();
        let mut v = ServerVerdict::new(tls, c.clone());
        assert!(read_once(&mut v).is_pending());
        assert_eq!(count(&n), 0);
        assert_eq!(v.settle(), None);
        assert_eq!(count(&n), 1);
        assert_eq!(v.settle(), None);
        assert_eq!(count(&n), 1);
    }

    /// A TLS 1.2 server sends its Finished only after judging us.
    #[tokio::test]
    async fn over_tls12_the_handshake_is_counted_when_it_ends() {
        let version = &rustls::version::TLS12;
        let (tls, _server) = connect(Setup { version, ..TLS13 }).await;
        let (n, c) = counter();
        let mut v = ServerVerdict::new(tls, c.clone());
        assert_eq!(count(&n), 1);
        assert!(read_once(&mut v).is_pending());
        assert_eq!(v.settle(), None);
        assert_eq!(count(&n), 1);
    }
}

//! The handshake, driven by the same turns as the data phase: our flight
//! goes out before we wait for the peer's, and the stream is handed over
//! once rustls says the handshake is done and everything queued is sent.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use rustls::client::UnbufferedClientConnection;
use rustls::server::UnbufferedServerConnection;
use rustls::{ClientConfig, ServerConfig};
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};

use super::engine::{Intent, Progress};
use super::{unexpected_eof, Side, TlsStream};

/// A handshake in progress; resolves to the connected stream.
pub struct Handshake<IO, C> {
    pub(super) stream: Option<TlsStream<IO, C>>,
    error: Option<io::Error>,
}

impl<IO, C> Handshake<IO, C> {
    fn start(conn: Result<C, rustls::Error>, io: IO) -> Self
    where
        C: Side,
    {
        match conn {
            Ok(conn) => Handshake {
                stream: Some(TlsStream::new(io, conn)),
                error: None,
            },
            Err(e) => Handshake {
                stream: None,
                error: Some(io::Error::other(e)),
            },
        }
    }
}

/// The server side of a handshake over `io`.
pub fn accept<IO>(config: Arc<ServerConfig>, io: IO) -> Handshake<IO, UnbufferedServerConnection> {
    Handshake::start(UnbufferedServerConnection::new(config), io)
}

/// The client side of a handshake over `io` with the server `name`.
pub fn connect<IO>(
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
    io: IO,
) -> Handshake<IO, UnbufferedClientConnection> {
    Handshake::start(UnbufferedClientConnection::new(config, name), io)
}

impl<IO: AsyncRead + AsyncWrite + Unpin, C: Side> Future for Handshake<IO, C> {
    type Output = io::Result<TlsStream<IO, C>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Some(e) = this.error.take() {
            return Poll::Ready(Err(e));
        }
        let Some(s) = this.stream.as_mut() else {
            return Poll::Ready(Err(io::Error::other("TLS handshake polled after it ended")));
        };
        loop {
            match s.step(None, Intent::Handshake) {
                Err(e) => {
                    let e = s.failed(cx, e);
                    this.stream = None;
                    return Poll::Ready(Err(e));
                }
                Ok(Progress::Done) => {
                    ready!(s.drain(cx))?;
                    s.park();
                    return Poll::Ready(
                        this.stream
                            .take()
                            .ok_or_else(|| io::Error::other("TLS handshake polled after it ended")),
                    );
                }
                Ok(_) => {
                    if s.read_closed {
                        return Poll::Ready(Err(unexpected_eof("tls handshake close_notify")));
                    }
                    // Our flight goes out before we wait for the answer.
                    ready!(s.drain(cx))?;
                    match ready!(s.read_io(cx)) {
                        Ok(0) => return Poll::Ready(Err(unexpected_eof("tls handshake eof"))),
                        Ok(_) => {}
                        Err(e) => return Poll::Ready(Err(e)),
                    }
                }
            }
        }
    }
}

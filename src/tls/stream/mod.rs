//! TLS over a byte stream, driven through rustls's unbuffered API, for the
//! handshake and the data phase alike.
//!
//! Why not tokio-rustls: it drives rustls's buffered connection, whose
//! read buffer (`DeframerVecBuffer`) is at least 4 KiB from the first read
//! on and is never given back; with the connection's other buffers, an
//! idle connection held ~11.6 KiB per side (benches/reports/
//! 2026-12-01-idle-connections.md). Here the caller owns every buffer: received bytes,
//! plaintext not yet read and records not yet sent each live in a
//! `buf::Buf` that goes back to a small per-thread pool as soon as it is
//! empty, so an idle connection holds none of them. No conversion from a
//! buffered connection exists, so the handshake is driven here too.
//!
//! What it keeps of the buffered stream's behaviour, which forwarding,
//! HTTP identity and the close paths rely on:
//! - a read returns the plaintext of the records received so far, EOF
//!   once the peer's close_notify came (a half-close: writing goes on), and
//!   `UnexpectedEof` when the socket ended without one;
//! - a write encrypts at once and starts sending; a flush sends the rest
//!   (every chunk goes out when forwarding flushes it, nothing is held
//!   back), and records produced while reading (an alert) are sent
//!   without waiting for a write; rustls holds the answer to a peer's key
//!   update until our next write, which it precedes (RFC 8446 4.6.3
//!   allows that);
//! - a shutdown sends close_notify, then shuts the socket's write side;
//! - a rustls error sends its alert (best effort) and is returned as
//!   `InvalidData` wrapping the `rustls::Error`, as tokio-rustls does, so
//!   the refusal counters classify it the same way;
//! - what a peer can make us hold is bounded: while we wait, the bytes of
//!   a record still arriving are kept in memory of exactly their size (a
//!   record is at most ~18 KiB; before authentication the byte cap that
//!   wraps the socket still bounds a handshake message joined across
//!   records); while bytes are processed, at most one pooled buffer
//!   (`buf::SIZE`) of received bytes, and anything that needs more is
//!   refused.

mod buf;
pub mod copy;
mod engine;
mod handshake;

pub use handshake::{accept, connect, Handshake};

use std::io;
use std::ops::DerefMut;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use rustls::client::{ClientConnectionData, UnbufferedClientConnection};
use rustls::server::{ServerConnectionData, UnbufferedServerConnection};
use rustls::unbuffered::{UnbufferedConnectionCommon, UnbufferedStatus};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use engine::{Intent, Progress};

/// The most one socket read takes while the handshake runs: what follows
/// the peer's last handshake flight (a client's first data, sent with its
/// Finished) is left in the socket rather than counted against the
/// pre-authentication byte cap that wraps it, as rustls's buffered
/// connection read 4 KiB at a time.
const HANDSHAKE_READ: usize = 4096;

/// The most plaintext one write encrypts: four full records, forwarding's
/// whole chunk.
const MAX_PLAIN: usize = 4 * 16 * 1024;

/// A server or client connection of rustls's unbuffered API.
pub trait Side: DerefMut<Target = UnbufferedConnectionCommon<Self::Data>> + Unpin {
    type Data;
    /// `process_tls_records`, which rustls defines for each side apart.
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, Self::Data>;
}

impl Side for UnbufferedServerConnection {
    type Data = ServerConnectionData;
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, ServerConnectionData> {
        self.process_tls_records(incoming)
    }
}

impl Side for UnbufferedClientConnection {
    type Data = ClientConnectionData;
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, ClientConnectionData> {
        self.process_tls_records(incoming)
    }
}

/// A server route's TLS stream.
pub type ServerStream<IO> = TlsStream<IO, UnbufferedServerConnection>;
/// A client route's TLS stream.
pub type ClientStream<IO> = TlsStream<IO, UnbufferedClientConnection>;

/// A TLS connection over `io`.
pub struct TlsStream<IO, C> {
    io: IO,
    conn: C,
    /// Bytes received and not yet processed (a record still arriving).
    incoming: buf::Buf,
    /// Plaintext decrypted and not yet read.
    plain: buf::Buf,
    /// Records queued and not yet sent.
    out: buf::Buf,
    /// The peer's close_notify came.
    read_closed: bool,
    /// The socket ended.
    io_eof: bool,
    /// Our close_notify is queued.
    close_sent: bool,
    /// rustls failed the connection: it is not turned again.
    failed: bool,
    /// The fatal alert was queued: rustls is never turned for a second
    /// one (it would re-read the offending bytes still in the input).
    alerted: bool,
    /// A read error held back because the same turn handed over
    /// plaintext first: that read returns the plaintext, the next one the
    /// error (a read that fails reads nothing, as tokio's `AsyncRead`
    /// requires).
    read_error: Option<io::Error>,
    /// The server name the client asked for (server side, noted by the
    /// certificate resolver).
    sni: Option<Box<str>>,
}

impl<IO, C: Side> TlsStream<IO, C> {
    fn new(io: IO, conn: C) -> Self {
        TlsStream {
            io,
            conn,
            incoming: buf::Buf::default(),
            plain: buf::Buf::default(),
            out: buf::Buf::default(),
            read_closed: false,
            io_eof: false,
            close_sent: false,
            failed: false,
            alerted: false,
            read_error: None,
            sni: None,
        }
    }

    /// The socket and the rustls connection.
    pub fn get_ref(&self) -> (&IO, &C) {
        (&self.io, &self.conn)
    }

    /// The socket and the rustls connection.
    pub fn get_mut(&mut self) -> (&mut IO, &mut C) {
        (&mut self.io, &mut self.conn)
    }

    /// The SNI the client sent, when noted ([`Self::note_sni`]).
    pub fn sni(&self) -> Option<&str> {
        self.sni.as_deref()
    }

    /// Keeps the SNI seen during the handshake (rustls's unbuffered server
    /// connection does not expose it).
    pub fn note_sni(&mut self, sni: Option<String>) {
        self.sni = sni.map(String::into_boxed_str);
    }

    /// Lets go of the receive buffer while waiting for the socket: all of
    /// it when empty, else all but the bytes of the record still arriving
    /// (at most one record's worth, a pooled buffer being four): a peer
    /// that stops mid-record pins what it sent, not a whole buffer. On a
    /// bulk stream that costs a copy of the partial record per wait.
    fn park(&mut self) {
        self.incoming.shrink();
    }
}

fn unexpected_eof(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, what.to_string())
}

impl<IO: AsyncRead + AsyncWrite + Unpin, C: Side> TlsStream<IO, C> {
    /// Sends what is queued; the buffer goes back once empty.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.out.is_empty() {
            match ready!(Pin::new(&mut self.io).poll_write(cx, self.out.data())) {
                Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Ok(n) => self.out.consume(n),
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        self.out.release();
        Poll::Ready(Ok(()))
    }

    /// Reads what the socket has into the receive buffer.
    fn read_io(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.incoming.len() >= buf::SIZE {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a TLS message larger than the receive buffer",
            )));
        }
        let read = if self.conn.is_handshaking() {
            let mut some = [0u8; HANDSHAKE_READ];
            let mut room = ReadBuf::new(&mut some);
            let read = Pin::new(&mut self.io).poll_read(cx, &mut room);
            self.incoming.push(room.filled());
            read.map_ok(|()| room.filled().len())
        } else {
            self.incoming.read_from(&mut self.io, cx)
        };
        if read.is_pending() {
            self.park();
        }
        read
    }

    /// rustls failed the connection: its alert goes out (best effort) and
    /// the error is returned as tokio-rustls returns it.
    fn failed(&mut self, cx: &mut Context<'_>, e: rustls::Error) -> io::Error {
        self.queue_alert();
        let _ = self.drain(cx);
        io::Error::new(io::ErrorKind::InvalidData, e)
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin, C: Side> AsyncRead for TlsStream<IO, C> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let read = this.read_plain(cx, buf);
        // Whatever the read returned (EOF and errors included: a half-closed
        // connection lingers), a receive buffer with nothing left in it goes
        // back now.
        this.incoming.release();
        read
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin, C: Side> TlsStream<IO, C> {
    fn read_plain(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        if !self.plain.is_empty() {
            let n = self.plain.len().min(buf.remaining());
            buf.put_slice(&self.plain.data()[..n]);
            self.plain.consume(n);
            self.plain.release();
            return Poll::Ready(Ok(()));
        }
        if let Some(e) = self.read_error.take() {
            return Poll::Ready(Err(e));
        }
        let before = buf.filled().len();
        loop {
            if self.read_closed {
                return Poll::Ready(Ok(()));
            }
            if self.io_eof {
                return Poll::Ready(Err(unexpected_eof(
                    "peer closed connection without sending TLS close_notify",
                )));
            }
            let progress = match self.step(Some(buf), Intent::Read) {
                Ok(p) => p,
                Err(e) => {
                    let e = self.failed(cx, e);
                    return Poll::Ready(hold_back(
                        buf.filled().len() > before,
                        e,
                        &mut self.read_error,
                    ));
                }
            };
            // What reading produced (the refusal of a TLS 1.2 renegotiation;
            // rustls answers a key update only with the next write) goes out now;
            // a failure to send is the writer's to find.
            if !self.out.is_empty() {
                let _ = self.drain(cx);
            }
            if buf.filled().len() > before || progress == Progress::Delivered {
                return Poll::Ready(Ok(()));
            }
            if self.read_closed {
                continue;
            }
            match ready!(self.read_io(cx)) {
                Ok(0) => self.io_eof = true,
                Ok(_) => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

/// A read that failed after handing over `delivered` plaintext returns
/// that plaintext and keeps the error in `held` for the next read.
fn hold_back(delivered: bool, e: io::Error, held: &mut Option<io::Error>) -> io::Result<()> {
    if delivered {
        *held = Some(e);
        Ok(())
    } else {
        Err(e)
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin, C: Side> AsyncWrite for TlsStream<IO, C> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.drain(cx))?;
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        if this.close_sent {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "TLS close_notify already sent",
            )));
        }
        let n = data.len().min(MAX_PLAIN);
        match this.step(None, Intent::Write(&data[..n])) {
            Ok(Progress::Done) => {}
            Ok(_) => {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::NotConnected,
                    "the TLS connection cannot send",
                )))
            }
            Err(e) => return Poll::Ready(Err(this.failed(cx, e))),
        }
        // Sending starts now; what the socket does not take is sent by the
        // flush that follows every chunk.
        if let Poll::Ready(Err(e)) = this.drain(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.drain(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.close_sent {
            this.close_sent = true;
            // A connection rustls failed has nothing to say: only its
            // socket is shut.
            let _ = this.step(None, Intent::Close);
        }
        ready!(this.drain(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;

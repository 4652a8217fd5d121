//! What an unauthenticated peer may make us hold: a cap on the bytes read
//! from a stream before its handshake is authenticated. rustls buffers a
//! handshake message until it is whole, and a message may be 64 KiB: a
//! thousand peers each sending most of a huge ClientHello would make the
//! sidecar hold tens of megabytes for nothing. A real handshake's flight
//! (a ClientHello with a post-quantum key share, a certificate chain, a
//! signature) is a few KiB; [`PREAUTH_BYTES`] leaves room for long chains
//! and large post-quantum certificates while bounding the total a flood
//! can pin to `--max-handshakes` × this.
//!
//! Once the peer is authenticated the cap is lifted ([`Capped::lift`]) and
//! the wrapper only forwards.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::reason::HandshakeTooLarge;

/// Bytes a peer may send before its handshake completes.
pub const PREAUTH_BYTES: usize = 32 * 1024;

/// A stream whose reads fail once more than a budget of bytes has arrived,
/// until the budget is lifted.
#[derive(Debug)]
pub struct Capped<S> {
    inner: S,
    /// Bytes still allowed; `None` once lifted.
    left: Option<usize>,
    limit: usize,
}

impl<S> Capped<S> {
    /// Wraps `inner` with a budget of [`PREAUTH_BYTES`].
    pub fn new(inner: S) -> Capped<S> {
        Capped::with_limit(inner, PREAUTH_BYTES)
    }

    /// Wraps `inner` with a budget of `limit` bytes.
    pub fn with_limit(inner: S, limit: usize) -> Capped<S> {
        Capped {
            inner,
            left: Some(limit),
            limit,
        }
    }

    /// Removes the budget: the peer is authenticated.
    pub fn lift(&mut self) {
        self.left = None;
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Capped<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let (Poll::Ready(Ok(())), Some(left)) = (&polled, this.left.as_mut()) {
            let n = buf.filled().len().saturating_sub(before);
            match left.checked_sub(n) {
                Some(l) => *left = l,
                // The bytes just read are never handed on: the handshake
                // fails with them.
                None => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        HandshakeTooLarge { limit: this.limit },
                    )))
                }
            }
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Capped<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    // No vectored writes: the only writer is the TLS driver above, which
    // makes none.

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn reads_fail_past_the_budget_until_lifted() {
        let (mut tx, rx) = tokio::io::duplex(64);
        let mut capped = Capped::with_limit(rx, 10);
        tx.write_all(b"0123456789").await.unwrap();
        let mut buf = [0u8; 32];
        let mut got = 0;
        while got < 10 {
            got += capped.read(&mut buf).await.unwrap();
        }
        tx.write_all(b"x").await.unwrap();
        let e = capped.read(&mut buf).await.unwrap_err();
        assert!(e.get_ref().is_some_and(|e| e.is::<HandshakeTooLarge>()));

        let (mut tx, rx) = tokio::io::duplex(64);
        let mut capped = Capped::with_limit(rx, 4);
        capped.lift();
        tx.write_all(b"0123456789").await.unwrap();
        let mut got = 0;
        while got < 10 {
            got += capped.read(&mut buf).await.unwrap();
        }
    }

    #[tokio::test]
    async fn exactly_the_budget_is_allowed() {
        let (mut tx, rx) = tokio::io::duplex(64);
        let mut capped = Capped::with_limit(rx, 4);
        tx.write_all(b"abcd").await.unwrap();
        drop(tx);
        let mut v = Vec::new();
        capped.read_to_end(&mut v).await.unwrap();
        assert_eq!(v, b"abcd");
    }
}

//! A stream that shows what passes through it to an observer: the bytes a
//! client sent (to count them, or to follow their framing) and how many
//! were written back. One wrapper for every such observer, so each is just
//! its reaction to the bytes.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What a [`Tap`] tells about its stream's traffic.
pub trait Observe {
    /// `bytes` were just read from the stream.
    fn read(&mut self, bytes: &[u8]);
    /// `n` bytes were just written to the stream.
    fn wrote(&mut self, _n: usize) {}
}

/// A stream whose traffic an [`Observe`] sees as it passes.
#[derive(Debug)]
pub struct Tap<IO, O> {
    pub io: IO,
    pub observer: O,
}

impl<IO: AsyncRead + Unpin, O: Observe + Unpin> AsyncRead for Tap<IO, O> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        let r = Pin::new(&mut this.io).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = r {
            this.observer.read(&buf.filled()[before..]);
        }
        r
    }
}

impl<IO: AsyncWrite + Unpin, O: Observe + Unpin> AsyncWrite for Tap<IO, O> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        b: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let r = Pin::new(&mut this.io).poll_write(cx, b);
        if let Poll::Ready(Ok(n)) = r {
            this.observer.wrote(n);
        }
        r
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

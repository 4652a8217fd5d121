//! An admin connection's byte stream, instrumented: every read, write and
//! flush is reported to the connection's [`Track`], which is how the
//! watchdog learns that a client went quiet or stopped reading without
//! hyper having to expose its state.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::admission::Track;
use crate::proxy::addr::Stream;

/// A [`Stream`] that reports its progress to a [`Track`].
pub struct Tracked {
    inner: Stream,
    track: Arc<Track>,
}

impl Tracked {
    pub fn new(inner: Stream, track: Arc<Track>) -> Tracked {
        Tracked { inner, track }
    }

    fn written(&self, r: &Poll<io::Result<usize>>) {
        match r {
            Poll::Pending => self.track.on_write(None),
            Poll::Ready(Ok(n)) => self.track.on_write(Some(*n)),
            Poll::Ready(Err(_)) => {}
        }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if self.track.abort() {
            if let Stream::Tcp(s) = &self.inner {
                // Reset rather than linger behind a peer that never reads;
                // a socket that refuses the option still closes normally.
                let _ = s.set_zero_linger();
            }
        }
    }
}

impl AsyncRead for Tracked {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.track.on_read();
        }
        r
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.written(&r);
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.written(&r);
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_flush(cx);
        if matches!(r, Poll::Ready(Ok(()))) {
            this.track.on_flushed();
        }
        r
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

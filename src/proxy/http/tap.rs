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
    /// True when the stream must fail its reads from now on.
    fn refused(&self) -> bool {
        false
    }
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
            if this.observer.refused() {
                return Poll::Ready(Err(io::Error::other("refused by its observer")));
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};

    /// Counts what passes.
    #[derive(Default)]
    struct Count(usize, usize);

    impl Observe for Count {
        fn read(&mut self, bytes: &[u8]) {
            self.0 += bytes.len();
        }
        fn wrote(&mut self, n: usize) {
            self.1 += n;
        }
    }

    /// A flush and a shutdown reach the wrapped stream: bytes its own
    /// buffer held go out on a flush (hyper flushes each response; the
    /// TLS stream holds a record the socket did not take), and a shutdown
    /// ends the stream (the TLS stream's close_notify).
    #[tokio::test]
    async fn flush_and_shutdown_reach_the_stream() {
        let (near, mut far) = tokio::io::duplex(1024);
        let mut tap = Tap {
            io: BufWriter::new(near),
            observer: Count::default(),
        };
        tap.write_all(b"abc").await.unwrap();
        let mut got = [0u8; 3];
        assert!(
            far.read_exact(&mut got).now_or_never().is_none(),
            "held by the buffer until flushed"
        );
        tap.flush().await.unwrap();
        far.read_exact(&mut got)
            .now_or_never()
            .expect("flushed")
            .unwrap();
        assert_eq!(&got, b"abc");
        tap.shutdown().await.unwrap();
        let mut rest = Vec::new();
        let n = far
            .read_to_end(&mut rest)
            .now_or_never()
            .expect("ended")
            .unwrap();
        assert_eq!(n, 0);
        far.write_all(b"hello").await.unwrap();
        let mut back = [0u8; 5];
        tap.read_exact(&mut back).await.unwrap();
        assert_eq!((tap.observer.0, tap.observer.1), (5, 3));
    }
}

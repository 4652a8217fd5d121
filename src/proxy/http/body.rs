//! `--http-body-timeout`: a request body that stops arriving fails the
//! request instead of pinning the connection.
//!
//! Why the clock runs only while the body is awaited (nginx's
//! `client_body_timeout`: the time between two successive reads): the
//! target's side polls the body only when it can take more, so time spent
//! waiting for a slow target is not the client's; a read that finds
//! nothing starts the clock, the next frame stops it. A body trickling
//! faster than the timeout passes, as in nginx; one that stalls for the
//! timeout ends with [`BodyError::Stalled`], which the forwarding side
//! sees as its body failing (the target's request is abandoned) and the
//! service answers 408.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Frame, SizeHint};
use metrics::Counter;
use tokio::time::{Instant, Sleep};

/// Why a bounded body failed.
#[derive(Debug)]
pub enum BodyError {
    /// The client's body itself failed (hyper's error).
    Client(hyper::Error),
    /// No part of the body arrived for the timeout while it was awaited.
    Stalled(Duration),
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyError::Client(e) => write!(f, "{e}"),
            BodyError::Stalled(t) => write!(f, "no request body for {t:?}"),
        }
    }
}

impl std::error::Error for BodyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BodyError::Client(e) => Some(e),
            BodyError::Stalled(_) => None,
        }
    }
}

/// A request body whose reads may each wait at most `timeout`; `stalled`
/// is set when one waited longer.
pub struct Idle<B> {
    inner: B,
    timeout: Duration,
    /// The deadline of the read in progress (set when a read starts
    /// waiting; none until one first does: most bodies never wait).
    sleep: Option<Pin<Box<Sleep>>>,
    /// True while a read is waiting (the clock runs).
    waiting: bool,
    stalled: Arc<AtomicBool>,
    /// Counts the bodies that stalled (the route's
    /// `mtls_sidecar_http_body_timeouts_total`).
    count: Counter,
}

impl<B> Idle<B> {
    /// `inner`, each read bounded by `timeout`; `stalled` is set and
    /// `count` counted when one passes it.
    pub fn new(inner: B, timeout: Duration, stalled: Arc<AtomicBool>, count: Counter) -> Idle<B> {
        Idle {
            inner,
            timeout,
            sleep: None,
            waiting: false,
            stalled,
            count,
        }
    }

    /// A read found nothing: start the clock if it is not running, and
    /// say whether the wait has passed the timeout.
    fn waited_too_long(&mut self, cx: &mut Context<'_>) -> bool {
        let deadline = Instant::now() + self.timeout;
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if !self.waiting {
            self.waiting = true;
            sleep.as_mut().reset(deadline);
        }
        sleep.as_mut().poll(cx).is_ready()
    }
}

impl<B> Body for Idle<B>
where
    B: Body<Error = hyper::Error> + Unpin,
{
    type Data = B::Data;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                this.waiting = false;
                Poll::Ready(frame.map(|r| r.map_err(BodyError::Client)))
            }
            Poll::Pending if this.waited_too_long(cx) => {
                this.stalled.store(true, Ordering::Release);
                this.count.increment(1);
                Poll::Ready(Some(Err(BodyError::Stalled(this.timeout))))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use hyper::body::Bytes;

    /// A body fed through a channel.
    struct Fed(tokio::sync::mpsc::Receiver<Bytes>);

    impl Body for Fed {
        type Data = Bytes;
        type Error = hyper::Error;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
            self.0.poll_recv(cx).map(|d| d.map(|d| Ok(Frame::data(d))))
        }
    }

    /// A fed body bounded by 10 s, its sender and its stalled flag.
    fn bounded() -> (tokio::sync::mpsc::Sender<Bytes>, Idle<Fed>, Arc<AtomicBool>) {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let stalled = Arc::new(AtomicBool::new(false));
        let body = Idle::new(
            Fed(rx),
            Duration::from_secs(10),
            stalled.clone(),
            Counter::noop(),
        );
        (tx, body, stalled)
    }

    /// A failed client body reads as hyper's error and chains to it; a
    /// stalled one says for how long.
    #[tokio::test]
    async fn a_body_error_says_why_and_chains_to_hypers() {
        use std::error::Error as _;
        let (io, target) = tokio::io::duplex(64);
        drop(target);
        let (mut tx, conn) =
            hyper::client::conn::http1::handshake::<_, http_body_util::Empty<Bytes>>(
                hyper_util::rt::TokioIo::new(io),
            )
            .await
            .expect("handshake");
        tokio::spawn(conn);
        let e = tx
            .send_request(hyper::Request::new(http_body_util::Empty::new()))
            .await
            .expect_err("no target");
        let said = e.to_string();
        let client = BodyError::Client(e);
        assert_eq!(client.to_string(), said);
        assert_eq!(client.source().map(ToString::to_string), Some(said));
        let stalled = BodyError::Stalled(Duration::from_secs(10));
        assert_eq!(stalled.to_string(), "no request body for 10s");
        assert!(stalled.source().is_none());
    }

    /// A body whose parts each come within the timeout is read whole,
    /// however long it takes in all; a wait past it fails the body and
    /// sets the flag.
    #[tokio::test(start_paused = true)]
    async fn each_wait_is_bounded_not_the_whole_body() {
        let (tx, mut body, stalled) = bounded();
        for _ in 0..5 {
            let tx = tx.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(9)).await;
                let _ = tx.send(Bytes::from_static(b"x")).await;
            });
            let f = body.frame().await.expect("a frame").expect("data");
            assert_eq!(f.into_data().unwrap(), Bytes::from_static(b"x"));
        }
        assert!(!stalled.load(Ordering::Acquire));
        let started = Instant::now();
        let e = body.frame().await.expect("an error").unwrap_err();
        assert!(matches!(e, BodyError::Stalled(t) if t == Duration::from_secs(10)));
        assert_eq!(started.elapsed(), Duration::from_secs(10));
        assert!(stalled.load(Ordering::Acquire));
        drop(tx);
    }

    /// Time the body is not read (a slow target) does not count: the clock
    /// starts when a read finds nothing.
    #[tokio::test(start_paused = true)]
    async fn the_clock_runs_only_while_a_read_waits() {
        let (tx, mut body, stalled) = bounded();
        tokio::time::sleep(Duration::from_secs(60)).await;
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            let _ = tx.send(Bytes::from_static(b"x")).await;
        });
        assert!(body.frame().await.expect("a frame").is_ok());
        assert!(!stalled.load(Ordering::Acquire));
        assert!(body.frame().await.is_none(), "ended with the sender");
    }
}

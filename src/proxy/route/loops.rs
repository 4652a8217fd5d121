//! The count of a route's accept loops, which the drain waits on.
//!
//! A route runs one accept loop per runtime. The drain must not count the
//! connections left until every loop has stopped: a loop still admitting a
//! connection after the count would leave it out (and the loop that writes
//! the route's "stopped accepting" line must have written it). Each loop
//! holds a [`Running`] guard while it lives; when a guard drops, however its
//! loop ended (a panic included), the route stops reporting itself as
//! accepting, and the last guard to drop wakes whoever waits in
//! [`AcceptLoops::none_running`].

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::sync::Notify;

/// A route's accept loops: whether all still run, how many do, and a
/// wake-up when the last one ends.
#[derive(Debug)]
pub(super) struct AcceptLoops {
    /// True until any loop ends: the route is bound and about to be
    /// served when this is built, so only a loop that ended turns it off.
    accepting: AtomicBool,
    running: AtomicUsize,
    ended: Notify,
}

/// One accept loop running: counted while it lives.
pub(super) struct Running<'a>(&'a AcceptLoops);

impl AcceptLoops {
    pub(super) fn new() -> AcceptLoops {
        AcceptLoops {
            accepting: AtomicBool::new(true),
            running: AtomicUsize::new(0),
            ended: Notify::new(),
        }
    }

    /// Counts one more loop running until the guard drops.
    pub(super) fn start(&self) -> Running<'_> {
        self.running.fetch_add(1, Ordering::SeqCst);
        Running(self)
    }

    /// True while no loop has ended.
    pub(super) fn is_accepting(&self) -> bool {
        self.accepting.load(Ordering::SeqCst)
    }

    /// Resolves once no loop runs: at once if none does, else when the
    /// last guard drops.
    pub(super) async fn none_running(&self) {
        loop {
            // Registered before the count is read, so a guard dropping
            // between the read and the await still wakes this one.
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if self.running.load(Ordering::SeqCst) == 0 {
                return;
            }
            ended.await;
        }
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.accepting.store(false, Ordering::SeqCst);
        if self.0.running.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.ended.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Waker};

    /// Polls once with a waker that does nothing: ready or not, now.
    fn ready<F: Future>(f: std::pin::Pin<&mut F>) -> bool {
        f.poll(&mut Context::from_waker(Waker::noop())).is_ready()
    }

    #[test]
    fn with_no_loop_the_wait_resolves_at_once() {
        let loops = AcceptLoops::new();
        assert!(ready(pin!(loops.none_running())));
        assert!(loops.is_accepting(), "no loop has ended yet");
    }

    #[test]
    fn the_wait_lasts_until_the_last_loop_ends() {
        let loops = AcceptLoops::new();
        let first = loops.start();
        let second = loops.start();
        let mut wait = pin!(loops.none_running());
        assert!(!ready(wait.as_mut()), "two loops run");
        drop(first);
        assert!(!loops.is_accepting(), "a loop ended");
        assert!(!ready(wait.as_mut()), "one loop still runs");
        drop(second);
        assert!(ready(wait.as_mut()), "the last loop ended");
        assert!(
            ready(pin!(loops.none_running())),
            "and a new wait sees none"
        );
    }

    #[test]
    fn a_loop_that_panics_still_ends() {
        let loops = AcceptLoops::new();
        let mut wait = pin!(loops.none_running());
        let ended = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _running = loops.start();
            panic!("accept loop panicked");
        }));
        assert!(ended.is_err());
        assert!(ready(wait.as_mut()));
        assert!(!loops.is_accepting());
    }
}

//! The runtimes a sidecar's connections are spread over (`--runtime`).
//!
//! With `per-core` the process runs one single-threaded tokio runtime per
//! thread, and every route has an accept loop on each, all accepting from
//! the same listening socket (one descriptor, duplicated: never
//! `SO_REUSEPORT`, which would let any process of the same user join the
//! group and be handed part of the connections). Whichever loop wins an
//! accept places the connection on the runtime holding the fewest
//! connections, itself when tied, and the connection lives its whole life
//! there: its handshake, forwarding, timers and close never wake another
//! thread. With `multi` there is one (work-stealing) runtime and so one
//! place.
//!
//! What must hold process-wide (`--max-connections`, `--max-handshakes`,
//! `--exclusive`, the registry that revocation and drain act through) is
//! shared state behind locks, semaphores and `Notify`s, which work across
//! runtimes; only timers and sockets belong to the runtime a task runs on,
//! which is why a connection moved to another runtime is re-registered
//! there ([`Runtimes::dispatch`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::runtime::Handle;

use crate::proxy::addr::Stream;

/// The runtimes that accept and carry connections, with how many
/// connection tasks each holds now.
#[derive(Debug)]
pub struct Runtimes {
    seats: Box<[Place]>,
}

#[derive(Debug)]
struct Place {
    handle: Handle,
    load: AtomicUsize,
}

/// A connection task's hold on its runtime's load count; released when the
/// task ends, however it ends.
#[derive(Debug)]
pub struct Seat {
    runtimes: Arc<Runtimes>,
    at: usize,
}

impl Drop for Seat {
    fn drop(&mut self) {
        if let Some(p) = self.runtimes.seats.get(self.at) {
            p.load.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Runtimes {
    /// The given runtimes, the first being the one the process's control
    /// tasks (admin, credential polling, metrics) run on. An empty list is
    /// the current runtime alone (must be called from inside one).
    pub fn new(handles: Vec<Handle>) -> Arc<Runtimes> {
        let handles = if handles.is_empty() {
            vec![Handle::current()]
        } else {
            handles
        };
        let seats = handles
            .into_iter()
            .map(|handle| Place {
                handle,
                load: AtomicUsize::new(0),
            })
            .collect();
        Arc::new(Runtimes { seats })
    }

    /// How many runtimes accept.
    pub fn len(&self) -> usize {
        self.seats.len()
    }

    /// Never: there is always at least the current runtime.
    pub fn is_empty(&self) -> bool {
        self.seats.is_empty()
    }

    /// The runtimes' handles, in order.
    pub fn handles(&self) -> impl Iterator<Item = &Handle> {
        self.seats.iter().map(|p| &p.handle)
    }

    /// Connection tasks on each runtime now.
    pub fn loads(&self) -> Vec<usize> {
        self.seats
            .iter()
            .map(|p| p.load.load(Ordering::Relaxed))
            .collect()
    }

    /// Takes a seat on runtime `at` for one connection task.
    fn seat(self: &Arc<Self>, at: usize) -> Seat {
        if let Some(p) = self.seats.get(at) {
            p.load.fetch_add(1, Ordering::Relaxed);
        }
        Seat {
            runtimes: self.clone(),
            at,
        }
    }

    /// Runs the connection `conn` makes of `stream` on the least loaded
    /// runtime, `me` (the one that accepted it) when tied. A stream moved
    /// to another runtime is deregistered here and registered there; one
    /// that cannot be is closed (counted by the caller's `on_lost`).
    pub fn dispatch<F, C>(
        self: &Arc<Self>,
        me: usize,
        stream: Stream,
        conn: F,
        on_lost: fn(std::io::Error),
    ) where
        F: FnOnce(Stream) -> C + Unpin + Send + 'static,
        C: Future<Output = ()> + Unpin + Send + 'static,
    {
        let to = least_loaded(
            self.seats.iter().map(|p| p.load.load(Ordering::Relaxed)),
            me,
        );
        let seat = self.seat(to);
        if to == me {
            tokio::spawn(Seated {
                conn: conn(stream),
                _seat: seat,
            });
            return;
        }
        let moved = match detach(stream) {
            Ok(m) => m,
            Err(e) => return on_lost(e),
        };
        let Some(place) = self.seats.get(to) else {
            return;
        };
        place.handle.spawn(Arriving::Moved {
            moved,
            conn,
            seat,
            on_lost,
        });
    }
}

/// A connection task on the runtime its socket was moved to: the socket is
/// registered there on the first poll, then the task is the connection.
/// An enum rather than an `async` block, whose captured values are laid
/// out beside the connection's future instead of sharing its space: that
/// made a moved connection's task 512 bytes where one that stayed home
/// takes 384 (tokio sizes tasks in steps of 128), ~64 bytes more per idle
/// connection on two runtimes.
enum Arriving<F, C> {
    Moved {
        moved: Detached,
        conn: F,
        seat: Seat,
        on_lost: fn(std::io::Error),
    },
    Running(Seated<C>),
    Over,
}

impl<F, C> Future for Arriving<F, C>
where
    F: FnOnce(Stream) -> C + Unpin,
    C: Future<Output = ()> + Unpin,
{
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if let Arriving::Moved { .. } = this {
            if let Arriving::Moved {
                moved,
                conn,
                seat,
                on_lost,
            } = std::mem::replace(this, Arriving::Over)
            {
                match attach(moved) {
                    Ok(stream) => {
                        *this = Arriving::Running(Seated {
                            conn: conn(stream),
                            _seat: seat,
                        })
                    }
                    Err(e) => on_lost(e),
                }
            }
        }
        match this {
            Arriving::Running(s) => Pin::new(s).poll(cx),
            _ => Poll::Ready(()),
        }
    }
}

/// The runtime a new connection should live on: the one with the fewest
/// connection tasks, `me` whenever it is among the fewest (no move, no
/// cross-thread wake-up, when the load is even). `me` past the end, or no
/// loads at all, is `me`.
pub fn least_loaded(loads: impl Iterator<Item = usize>, me: usize) -> usize {
    let mut best: Option<(usize, usize)> = None;
    let mut mine = None;
    for (i, load) in loads.enumerate() {
        if i == me {
            mine = Some(load);
        }
        if best.is_none_or(|(_, b)| load < b) {
            best = Some((i, load));
        }
    }
    match (mine, best) {
        (Some(m), Some((i, b))) if b < m => i,
        _ => me,
    }
}

/// A connection task with its seat: the seat is released when the task
/// ends or is dropped unfinished (its runtime shutting down). The
/// connection's future is held inline, in the task's own allocation.
struct Seated<C> {
    conn: C,
    _seat: Seat,
}

impl<C: Future<Output = ()> + Unpin> Future for Seated<C> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(&mut self.conn).poll(cx)
    }
}

/// A stream taken off its runtime's reactor, to be registered with
/// another's.
enum Detached {
    Tcp(std::net::TcpStream),
    Unix(std::os::unix::net::UnixStream),
}

fn detach(stream: Stream) -> std::io::Result<Detached> {
    match stream {
        Stream::Tcp(s) => s.into_std().map(Detached::Tcp),
        Stream::Unix(s) => s.into_std().map(Detached::Unix),
    }
}

/// Registers a detached stream with the current runtime (`into_std` left
/// it non-blocking, as `from_std` needs).
fn attach(d: Detached) -> std::io::Result<Stream> {
    match d {
        Detached::Tcp(s) => tokio::net::TcpStream::from_std(s).map(Stream::Tcp),
        Detached::Unix(s) => tokio::net::UnixStream::from_std(s).map(Stream::Unix),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A connection accepted on a busier runtime runs on the other one,
    /// its socket working there (registered with that runtime's reactor),
    /// and its seat is counted there until the task ends.
    #[test]
    fn a_connection_placed_on_another_runtime_runs_there() {
        let build = || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
        };
        let (home, away) = (build(), build());
        let away_handle = away.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let away_thread = std::thread::spawn(move || {
            away.block_on(async {
                let _ = stopped.await;
            });
            std::thread::current().id()
        });
        let rts = Runtimes::new(vec![home.handle().clone(), away_handle]);
        assert_eq!((rts.len(), rts.is_empty()), (2, false));
        let ran_on = home.block_on(async {
            let busy = rts.seat(0);
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let mut peer = tokio::net::TcpStream::connect(l.local_addr().unwrap())
                .await
                .unwrap();
            let (s, _) = l.accept().await.unwrap();
            let (tx, rx) = tokio::sync::oneshot::channel();
            let conn = move |stream: Stream| -> Pin<Box<dyn Future<Output = ()> + Send>> {
                Box::pin(async move {
                    let Stream::Tcp(mut s) = stream else { return };
                    let mut b = [0u8; 4];
                    s.read_exact(&mut b).await.unwrap();
                    s.write_all(&b).await.unwrap();
                    let _ = tx.send(std::thread::current().id());
                })
            };
            rts.dispatch(0, Stream::Tcp(s), conn, |e| panic!("{e}"));
            assert_eq!(rts.loads(), vec![1, 1]);
            peer.write_all(b"ping").await.unwrap();
            let mut b = [0u8; 4];
            peer.read_exact(&mut b).await.unwrap();
            assert_eq!(&b, b"ping");
            let ran_on = rx.await.unwrap();
            assert_ne!(ran_on, std::thread::current().id());
            drop(busy);
            ran_on
        });
        stop.send(()).unwrap();
        assert_eq!(ran_on, away_thread.join().unwrap());
        assert_eq!(rts.loads(), vec![0, 0]);
    }

    #[test]
    fn the_least_loaded_runtime_wins_and_a_tie_stays_home() {
        assert_eq!(least_loaded([3, 1].into_iter(), 0), 1);
        assert_eq!(least_loaded([1, 3].into_iter(), 1), 0);
        assert_eq!(least_loaded([2, 2].into_iter(), 1), 1);
        assert_eq!(least_loaded([2, 2, 2].into_iter(), 0), 0);
        assert_eq!(least_loaded([5, 4, 4].into_iter(), 0), 1);
        assert_eq!(least_loaded([0].into_iter(), 0), 0);
        assert_eq!(least_loaded(std::iter::empty(), 0), 0);
        assert_eq!(least_loaded([1, 0].into_iter(), 7), 7);
    }
}

//! The driver's byte buffers: a window over memory that is let go of (or
//! handed to a small per-thread pool) whenever it holds nothing, so an
//! idle connection owns no buffer at all.
//!
//! Memory is never zeroed ahead of use: socket reads fill a buffer's spare
//! capacity (tokio's `read_buf`), and only room handed to rustls to write
//! into (records to send) is initialised, once, and stays so while the
//! buffer is reused. A page is resident only once bytes were put in it,
//! so a handshake's few KiB cost a few KiB, not a whole buffer.

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::pin::pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt};

/// The capacity of a pooled buffer: four full TLS records (16 KiB of
/// plaintext each, with header and tag) and room to spare, so one socket
/// read or one write of forwarding's 64 KiB chunk fits in one buffer.
pub(crate) const SIZE: usize = 72 * 1024;

/// Buffers each thread keeps for reuse: a bounded, fixed cost per thread
/// (up to 72 KiB of resident memory each, once bulk data went through),
/// not per connection. One covers a connection moving bytes one way (the
/// buffer goes back between reading and writing); a second one in use at
/// once is allocated and freed.
const KEEP: usize = 1;

thread_local! {
    static POOL: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

fn take() -> Vec<u8> {
    POOL.try_with(|p| p.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_else(|| Vec::with_capacity(SIZE))
}

fn give(mem: Vec<u8>) {
    if mem.capacity() != SIZE {
        return;
    }
    let _ = POOL.try_with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < KEEP {
            p.push(mem);
        }
    });
}

/// Bytes `mem[start..end]`; `mem[end..]` is initialised room, and the
/// capacity past `mem.len()` room a read may fill.
#[derive(Default)]
pub(crate) struct Buf {
    mem: Vec<u8>,
    start: usize,
    end: usize,
}

impl Buf {
    pub(crate) fn len(&self) -> usize {
        self.end - self.start
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// The bytes held.
    pub(crate) fn data(&self) -> &[u8] {
        &self.mem[self.start..self.end]
    }

    /// The bytes held, to be worked on in place (rustls decrypts and joins
    /// handshake messages inside the buffer it is given).
    pub(crate) fn data_mut(&mut self) -> &mut [u8] {
        &mut self.mem[self.start..self.end]
    }

    /// Drops `n` bytes from the front.
    pub(crate) fn consume(&mut self, n: usize) {
        self.start = self.start.saturating_add(n).min(self.end);
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Makes capacity for at least `want` more bytes after those held: they
    /// are moved to the front, or into a pooled buffer (or one just large
    /// enough, past the pool's size).
    fn room(&mut self, want: usize) {
        if self.mem.capacity() - self.end < want && self.start > 0 {
            self.mem.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let need = self.end.saturating_add(want);
        let cap = self.mem.capacity();
        if cap < need || (cap < SIZE && need <= SIZE) {
            let mut mem = if need <= SIZE {
                take()
            } else {
                Vec::with_capacity(need)
            };
            mem.clear();
            mem.extend_from_slice(&self.mem[..self.end]);
            give(std::mem::replace(&mut self.mem, mem));
        }
    }

    /// Initialised room after the bytes held, at least `want` bytes of it,
    /// for rustls to write records into.
    pub(crate) fn spare(&mut self, want: usize) -> &mut [u8] {
        self.room(want);
        let need = self.end + want;
        if self.mem.len() < need {
            self.mem.resize(need, 0);
        }
        &mut self.mem[self.end..]
    }

    /// Marks `n` bytes of the room [`spare`](Self::spare) gave as held.
    pub(crate) fn filled(&mut self, n: usize) {
        self.end = self.end.saturating_add(n).min(self.mem.len());
    }

    /// Appends `bytes`.
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.room(bytes.len());
        self.mem.truncate(self.end);
        self.mem.extend_from_slice(bytes);
        self.end = self.mem.len();
    }

    /// Reads what `io` has into the room after the bytes held (a pooled
    /// buffer's worth), without initialising that room first.
    pub(crate) fn read_from<R: AsyncRead + Unpin>(
        &mut self,
        io: &mut R,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<usize>> {
        self.room(1);
        self.mem.truncate(self.end);
        let read = pin!(io.read_buf(&mut self.mem)).poll(cx);
        self.end = self.mem.len();
        read
    }

    /// Lets go of the memory if nothing is held.
    pub(crate) fn release(&mut self) {
        if self.is_empty() && self.mem.capacity() > 0 {
            give(std::mem::take(&mut self.mem));
            self.start = 0;
            self.end = 0;
        }
    }

    /// Keeps what is held in memory of exactly its size (the pooled buffer
    /// goes back): what a connection waiting mid-record holds.
    pub(crate) fn shrink(&mut self) {
        if self.is_empty() {
            return self.release();
        }
        if self.mem.capacity() > self.len() {
            let small = self.data().to_vec();
            self.end = small.len();
            self.start = 0;
            give(std::mem::replace(&mut self.mem, small));
        }
    }

    /// The memory this buffer holds (tests).
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.mem.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_emptied_buffer_holds_no_memory() {
        let mut b = Buf::default();
        assert_eq!(b.capacity(), 0);
        b.push(b"hello");
        assert_eq!(b.capacity(), SIZE);
        b.consume(5);
        b.release();
        assert_eq!(b.capacity(), 0);
    }

    #[test]
    fn a_shrunk_buffer_holds_exactly_its_bytes_and_grows_back() {
        let mut b = Buf::default();
        b.push(b"abcdef");
        b.consume(2);
        b.shrink();
        assert_eq!((b.capacity(), b.data()), (4, &b"cdef"[..]));
        b.push(b"gh");
        assert_eq!((b.capacity(), b.data()), (SIZE, &b"cdefgh"[..]));
    }

    #[test]
    fn room_past_the_pool_size_is_allocated_to_fit() {
        let mut b = Buf::default();
        b.push(&[1; 10]);
        let room = b.spare(SIZE).len();
        assert!(room >= SIZE);
        assert_eq!(b.data(), &[1; 10]);
    }

    #[tokio::test]
    async fn a_read_appends_after_the_bytes_held() {
        let (mut tx, mut rx) = tokio::io::duplex(64);
        tokio::io::AsyncWriteExt::write_all(&mut tx, b"world")
            .await
            .unwrap();
        let mut b = Buf::default();
        b.push(b"xhello ");
        b.consume(1);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(matches!(b.read_from(&mut rx, &mut cx), Poll::Ready(Ok(5))));
        assert_eq!(b.data(), b"hello world");
        assert!(b.read_from(&mut rx, &mut cx).is_pending());
        assert_eq!(b.data(), b"hello world");
    }
}

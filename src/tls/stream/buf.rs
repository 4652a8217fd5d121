//! The driver's byte buffers: a window over memory that is let go of (or
//! handed to a small per-thread pool) whenever it holds nothing, so an
//! idle connection owns no buffer at all.
//!
//! Memory is never zeroed ahead of use: socket reads fill a buffer's spare
//! capacity (tokio's `read_buf`), and only room handed to rustls to write
//! into (records to send) is initialised. Bytes moved into a buffer from
//! the pool do not make it forget what it had initialised, so a stream
//! whose records go out through the pool's buffer turn after turn does not
//! write them over zeroes each time (a read still truncates to what it
//! fills: tokio reads into spare capacity only). A page is resident only
//! once bytes were put in it, so a handshake's few KiB cost a few KiB, not
//! a whole buffer.

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::pin::pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt};

use super::copy;

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
            copy::to_front(&mut self.mem[..self.end], self.start);
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
            put(&mut mem, 0, &self.mem[..self.end]);
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

    /// Like [`spare`](Self::spare) on an empty buffer, with the room
    /// starting where rustls's copies of records sealed on this thread run
    /// at full speed ([`copy::sealed_placement`]): up to a page past the
    /// start of a pooled buffer, which has that much to spare.
    pub(crate) fn spare_for_records(&mut self, want: usize) -> &mut [u8] {
        if self.is_empty() && want <= SIZE - 4096 {
            self.room(want.saturating_add(4096));
            let shift = copy::sealed_placement(self.mem.as_ptr());
            if self.mem.len() < shift {
                self.mem.resize(shift, 0);
            }
            self.start = shift;
            self.end = shift;
        }
        self.spare(want)
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
        put(&mut self.mem, self.end, bytes);
        self.end += bytes.len();
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
            let mut small = Vec::with_capacity(self.len());
            copy::extend(&mut small, self.data());
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

    /// How much of that memory is initialised (tests).
    #[cfg(test)]
    pub(crate) fn initialised(&self) -> usize {
        self.mem.len()
    }
}

/// Writes `bytes` into `mem` at `at`, keeping what `mem` has initialised
/// past them (`mem` holds at least `at` initialised bytes and room for
/// `bytes`).
fn put(mem: &mut Vec<u8>, at: usize, bytes: &[u8]) {
    let end = at + bytes.len();
    if mem.len() >= end {
        copy::copy(&mut mem[at..end], bytes);
    } else {
        mem.truncate(at);
        copy::extend(mem, bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread keeps at most `KEEP` buffers for reuse; the rest it is
    /// given are freed.
    #[test]
    fn the_pool_keeps_at_most_its_size() {
        std::thread::spawn(|| {
            for _ in 0..KEEP + 2 {
                give(Vec::with_capacity(SIZE));
            }
            assert_eq!(POOL.with(|p| p.borrow().len()), KEEP);
        })
        .join()
        .unwrap();
    }

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

    /// A buffer already of exactly its bytes' size is kept as it is by
    /// shrinking, not copied.
    #[test]
    fn shrinking_a_full_buffer_keeps_it() {
        let mut b = Buf::default();
        b.push(&[3; SIZE]);
        let mem = b.mem.as_ptr();
        b.shrink();
        assert_eq!((b.mem.as_ptr(), b.capacity(), b.len()), (mem, SIZE, SIZE));
    }

    /// A shrunk buffer that already has the room asked for (once its bytes
    /// are moved to the front) is still traded for a pooled one: it would
    /// otherwise stay small and be reallocated record after record.
    #[test]
    fn a_shrunk_buffer_is_traded_for_a_pooled_one_even_with_room() {
        let mut b = Buf::default();
        b.push(&[1; 100]);
        b.shrink();
        b.consume(50);
        assert_eq!((b.capacity(), b.start, b.end), (100, 50, 100));
        b.push(&[2; 10]);
        assert_eq!(b.capacity(), SIZE);
        assert!(b.data()[..50] == [1; 50] && b.data()[50..] == [2; 10]);
    }

    /// Room past the end is made by moving the bytes held to the front
    /// when that is enough, not by a larger buffer; and they are moved
    /// only when it is needed.
    #[test]
    fn room_is_made_by_moving_the_bytes_to_the_front_only_when_needed() {
        let mut b = Buf::default();
        b.push(&[7; SIZE]);
        b.consume(SIZE - 10);
        b.push(&[8; 100]);
        assert_eq!(b.capacity(), SIZE, "moved to the front, not grown");
        assert_eq!((b.start, b.end), (0, 110));
        assert!(b.data()[..10] == [7; 10] && b.data()[10..] == [8; 100]);
        // Exactly the room left: nothing moves, and the memory is the same.
        b.consume(10);
        let left = SIZE - b.end;
        let mem = b.mem.as_ptr();
        b.push(&vec![9; left]);
        assert_eq!((b.start, b.end, b.capacity()), (10, SIZE, SIZE));
        assert_eq!(b.mem.as_ptr(), mem, "the buffer was swapped");
    }

    #[test]
    fn room_past_the_pool_size_is_allocated_to_fit() {
        let mut b = Buf::default();
        b.push(&[1; 10]);
        let room = b.spare(SIZE).len();
        assert!(room >= SIZE);
        assert_eq!(b.data(), &[1; 10]);
        // Of exactly that size, not the pooled buffer grown (doubled).
        assert_eq!(b.capacity(), SIZE + 10);
    }

    /// A buffer taken from the pool keeps the room it had initialised, so
    /// a stream's records are not written over zeroes on every turn.
    #[test]
    fn a_pooled_buffer_stays_initialised_when_taken_again() {
        let mut out = Buf::default();
        out.push(b"held");
        let room = out.spare(40_000).len();
        assert!(room >= 40_000);
        out.filled(40_000);
        out.consume(out.len());
        out.release();

        let mut next = Buf::default();
        next.push(b"x");
        assert!(next.initialised() >= 40_004, "{}", next.initialised());
        assert_eq!(next.data(), b"x");
    }

    /// Placing records is for an empty buffer only: bytes held stay put,
    /// and so does a buffer asked for more than a pooled one has to spare
    /// past its first page.
    #[test]
    fn records_are_placed_only_in_an_empty_buffer_with_a_page_to_spare() {
        let mut held = Buf::default();
        held.push(b"held");
        held.spare_for_records(100);
        assert_eq!((held.start, held.data()), (0, &b"held"[..]));

        let mut big = Buf::default();
        let room = big.spare_for_records(SIZE - 100).len();
        assert!(room >= SIZE - 100);
        assert_eq!((big.start, big.capacity()), (0, SIZE), "placed, or grown");
    }

    /// Placing records in a buffer from the pool keeps the room it had
    /// initialised, as taking it for any other use does.
    #[test]
    fn placing_records_keeps_a_pooled_buffers_initialised_room() {
        let mut out = Buf::default();
        out.spare(40_000);
        out.release();
        let mut next = Buf::default();
        next.spare_for_records(100);
        assert!(next.initialised() >= 40_000, "{}", next.initialised());
    }

    #[test]
    fn records_are_placed_clear_of_where_they_were_sealed() {
        let sealed = vec![0u8; 20_000];
        copy::note_sealed(sealed[7..].as_ptr());
        let mut out = Buf::default();
        let room = out.spare_for_records(40_000);
        assert!(room.len() >= 40_000);
        let at = room.as_ptr() as usize;
        assert_eq!(
            (at + 4096 - (sealed[7..].as_ptr() as usize) % 4096) % 4096,
            64
        );
        room[..3].copy_from_slice(b"rec");
        out.filled(3);
        assert_eq!(out.data(), b"rec");
        out.push(b"ord");
        assert_eq!(out.data(), b"record");
        out.consume(6);
        out.release();
        assert_eq!(out.capacity(), 0);
    }

    #[tokio::test]
    async fn a_read_into_initialised_room_shows_only_what_was_read() {
        let mut b = Buf::default();
        let room = b.spare(SIZE / 2);
        room.fill(b'z');
        b.push(b"held ");
        let (mut tx, mut rx) = tokio::io::duplex(64);
        tokio::io::AsyncWriteExt::write_all(&mut tx, b"read")
            .await
            .unwrap();
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(matches!(b.read_from(&mut rx, &mut cx), Poll::Ready(Ok(4))));
        assert_eq!(b.data(), b"held read");
        drop(tx);
        assert!(matches!(b.read_from(&mut rx, &mut cx), Poll::Ready(Ok(0))));
        assert_eq!(b.data(), b"held read");
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

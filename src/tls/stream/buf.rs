//! The driver's byte buffers: a window over memory that is let go of (or
//! handed to a small per-thread pool) whenever it holds nothing, so an
//! idle connection owns no buffer at all.
//!
//! Pooled buffers stay initialised between uses: the encrypter and the
//! socket read write into plain `&mut [u8]`, so memory taken from the pool
//! needs no zeroing, only a fresh allocation does.

use std::cell::RefCell;

/// The size of a pooled buffer: four full TLS records (16 KiB of
/// plaintext each, with header and tag) and room to spare, so one socket
/// read or one write of forwarding's 64 KiB chunk fits in one buffer.
pub(crate) const SIZE: usize = 72 * 1024;

/// Buffers each thread keeps for reuse: a bounded, fixed cost per thread
/// (72 KiB of resident memory each, which also counts in the baseline once
/// a thread has served a connection), not per connection. One covers a
/// connection moving bytes one way (the buffer goes back between reading
/// and writing); a second one in use at once is allocated and freed.
const KEEP: usize = 1;

thread_local! {
    static POOL: RefCell<Vec<Box<[u8]>>> = const { RefCell::new(Vec::new()) };
}

fn take() -> Box<[u8]> {
    POOL.try_with(|p| p.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_else(|| vec![0; SIZE].into_boxed_slice())
}

fn give(mem: Box<[u8]>) {
    if mem.len() != SIZE {
        return;
    }
    let _ = POOL.try_with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < KEEP {
            p.push(mem);
        }
    });
}

/// Bytes `mem[start..end]`, the rest of `mem` free to fill.
#[derive(Default)]
pub(crate) struct Buf {
    mem: Box<[u8]>,
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

    /// Free room after the bytes held, at least `want` bytes of it: the
    /// held bytes are moved to the front, or into a pooled buffer (or one
    /// just large enough, past the pool's size).
    pub(crate) fn spare(&mut self, want: usize) -> &mut [u8] {
        if self.mem.len() - self.end < want {
            self.mem.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let need = self.end.saturating_add(want);
        if self.mem.len() < need || (self.mem.len() < SIZE && need <= SIZE) {
            let mut mem = if need <= SIZE {
                take()
            } else {
                vec![0; need].into_boxed_slice()
            };
            mem[..self.end].copy_from_slice(&self.mem[..self.end]);
            give(std::mem::replace(&mut self.mem, mem));
        }
        &mut self.mem[self.end..]
    }

    /// Marks `n` bytes of the room [`spare`](Self::spare) gave as held.
    pub(crate) fn filled(&mut self, n: usize) {
        self.end = self.end.saturating_add(n).min(self.mem.len());
    }

    /// Appends `bytes`.
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        self.spare(bytes.len())[..bytes.len()].copy_from_slice(bytes);
        self.filled(bytes.len());
    }

    /// Lets go of the memory if nothing is held.
    pub(crate) fn release(&mut self) {
        if self.is_empty() && !self.mem.is_empty() {
            give(std::mem::take(&mut self.mem));
            self.start = 0;
            self.end = 0;
        }
    }

    /// Keeps what is held in memory of exactly its size (the pooled buffer
    /// goes back): what a connection waiting mid-record holds before its
    /// peer is authenticated.
    pub(crate) fn shrink(&mut self) {
        if self.is_empty() {
            return self.release();
        }
        if self.mem.len() > self.len() {
            let small: Box<[u8]> = self.data().into();
            self.end = small.len();
            self.start = 0;
            give(std::mem::replace(&mut self.mem, small));
        }
    }

    /// The memory this buffer holds (tests).
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.mem.len()
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
}

//! The h2 header-block clock: how long the header block an h2 client is
//! sending has been unfinished, followed from the frame headers in its
//! bytes.
//!
//! Why from the bytes: hyper opens a request only once its header block is
//! complete, so the connection's idle clock (no request open) cannot see a
//! block that never ends while another request is open. An h2 header
//! block (a HEADERS or PUSH_PROMISE frame, then CONTINUATION frames up to
//! the one flagged END_HEADERS) must not be interleaved with any other
//! frame (RFC 9113 §4.3), so a connection has at most one unfinished
//! block, and following the 9-byte frame headers is enough to time it:
//! from the header of its first frame to the last byte of the frame that
//! ends it. Only the frame headers are read; hyper still parses and judges
//! every frame.

use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio::time::Instant;

use super::tap::Observe;

/// The client connection preface (RFC 9113 §3.4), before the first frame.
const PREFACE_LEN: usize = 24;
/// An h2 frame header: length (3), type, flags, stream (4).
const FRAME_HEADER_LEN: usize = 9;
const HEADERS: u8 = 0x1;
const PUSH_PROMISE: u8 = 0x5;
const CONTINUATION: u8 = 0x9;
const END_HEADERS: u8 = 0x4;

/// When the unfinished header block started, shared with the connection's
/// driver, which is woken at every start and end.
#[derive(Debug, Default)]
pub struct BlockClock {
    since: Mutex<Option<Instant>>,
    pub changed: Notify,
}

impl BlockClock {
    /// When the block being received started; `None` between blocks.
    pub fn since(&self) -> Option<Instant> {
        *self.since.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set(&self, at: Option<Instant>) {
        *self.since.lock().unwrap_or_else(|e| e.into_inner()) = at;
        self.changed.notify_one();
    }
}

/// True when a frame of type `ty` is part of a header block.
fn is_block_frame(ty: u8) -> bool {
    matches!(ty, HEADERS | PUSH_PROMISE | CONTINUATION)
}

/// True when a frame of type `ty` with `flags` ends its header block.
fn ends_block(ty: u8, flags: u8) -> bool {
    is_block_frame(ty) && flags & END_HEADERS != 0
}

/// Where the follower is in the client's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    /// This many preface bytes are still to come.
    Preface(usize),
    /// This many bytes of a frame header are in `head`.
    Head(usize),
    /// This many payload bytes are still to come; `ends` when the frame
    /// ends the header block.
    Payload { left: usize, ends: bool },
}

/// A [`Tap`](super::tap::Tap) observer that follows an h2 client's frames
/// and keeps its [`BlockClock`].
#[derive(Debug)]
pub struct Blocks {
    at: At,
    head: [u8; FRAME_HEADER_LEN],
    in_block: bool,
    clock: Arc<BlockClock>,
}

impl Blocks {
    /// A follower at the start of a connection (the preface first).
    pub fn new(clock: Arc<BlockClock>) -> Blocks {
        Blocks {
            at: At::Preface(PREFACE_LEN),
            head: [0; FRAME_HEADER_LEN],
            in_block: false,
            clock,
        }
    }

    /// A frame header is complete: a block frame starts the clock (unless
    /// its block already runs).
    fn frame_started(&mut self) {
        let [l0, l1, l2, ty, flags, ..] = self.head;
        let left = usize::from(l0) << 16 | usize::from(l1) << 8 | usize::from(l2);
        if is_block_frame(ty) && !self.in_block {
            self.in_block = true;
            self.clock.set(Some(Instant::now()));
        }
        let ends = ends_block(ty, flags);
        self.at = At::Payload { left, ends };
        if left == 0 {
            self.frame_ended(ends);
        }
    }

    /// A frame's last byte arrived: the frame that ends a block stops the
    /// clock.
    fn frame_ended(&mut self, ends: bool) {
        if ends && self.in_block {
            self.in_block = false;
            self.clock.set(None);
        }
        self.at = At::Head(0);
    }
}

impl Observe for Blocks {
    fn read(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            match self.at {
                At::Preface(left) => {
                    let n = left.min(bytes.len());
                    bytes = &bytes[n..];
                    self.at = match left - n {
                        0 => At::Head(0),
                        more => At::Preface(more),
                    };
                }
                At::Head(filled) => {
                    let n = (FRAME_HEADER_LEN - filled).min(bytes.len());
                    self.head[filled..filled + n].copy_from_slice(&bytes[..n]);
                    bytes = &bytes[n..];
                    self.at = At::Head(filled + n);
                    if filled + n == FRAME_HEADER_LEN {
                        self.frame_started();
                    }
                }
                At::Payload { left, ends } => {
                    let n = left.min(bytes.len());
                    bytes = &bytes[n..];
                    self.at = At::Payload {
                        left: left - n,
                        ends,
                    };
                    if left == n {
                        self.frame_ended(ends);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(ty: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
        let len = payload.len();
        let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, ty, flags];
        f.extend_from_slice(&[0, 0, 0, 1]);
        f.extend_from_slice(payload);
        f
    }

    fn follower() -> (Blocks, Arc<BlockClock>) {
        let clock = Arc::new(BlockClock::default());
        let mut b = Blocks::new(clock.clone());
        b.read(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
        (b, clock)
    }

    /// A block runs from its HEADERS frame's header to the last byte of
    /// the frame flagged END_HEADERS, CONTINUATIONs included, whatever the
    /// split of the bytes; other frames neither start nor end one.
    #[test]
    fn a_block_runs_from_its_first_frame_to_the_end_of_its_last() {
        let (mut b, clock) = follower();
        b.read(&frame(0x4, 0, &[0; 6])); // SETTINGS
        b.read(&frame(0x0, 0x1, b"data")); // DATA
        assert_eq!(clock.since(), None);
        let headers = frame(HEADERS, 0, &[0x82, 0x84]);
        b.read(&headers[..9]);
        let started = clock.since().expect("started at the frame header");
        b.read(&headers[9..]);
        b.read(&frame(CONTINUATION, 0, &[0x86]));
        assert_eq!(clock.since(), Some(started), "one clock for the block");
        let last = frame(CONTINUATION, END_HEADERS, &[0x41, 0x01, b't']);
        for byte in &last[..last.len() - 1] {
            b.read(std::slice::from_ref(byte));
        }
        assert_eq!(clock.since(), Some(started), "until its last byte");
        b.read(&last[last.len() - 1..]);
        assert_eq!(clock.since(), None);
        // A complete block in one frame, then one begun in the same read.
        let mut both = frame(HEADERS, END_HEADERS | 0x1, &[0x82]);
        both.extend_from_slice(&frame(HEADERS, 0, &[0x82]));
        b.read(&both);
        assert!(clock.since().is_some());
    }

    /// A slow HEADERS frame is timed from its header, even with
    /// END_HEADERS set; an empty one ends at once.
    #[test]
    fn a_slow_single_frame_block_is_timed_and_an_empty_one_is_not() {
        let (mut b, clock) = follower();
        let f = frame(HEADERS, END_HEADERS, &[0x82, 0x84, 0x86]);
        b.read(&f[..10]);
        assert!(clock.since().is_some());
        b.read(&f[10..]);
        assert_eq!(clock.since(), None);
        b.read(&frame(HEADERS, END_HEADERS, &[]));
        assert_eq!(clock.since(), None);
        assert_eq!(b.at, At::Head(0));
    }

    #[test]
    fn the_preface_is_skipped_across_reads() {
        let clock = Arc::new(BlockClock::default());
        let mut b = Blocks::new(clock.clone());
        b.read(b"PRI * HTTP/2.0\r\n");
        assert_eq!(b.at, At::Preface(8));
        let mut rest = b"\r\nSM\r\n\r\n".to_vec();
        rest.extend_from_slice(&frame(HEADERS, 0, &[0x82])[..9]);
        b.read(&rest);
        assert!(clock.since().is_some());
    }

    #[test]
    fn block_frames_and_their_end() {
        assert!(is_block_frame(HEADERS) && is_block_frame(PUSH_PROMISE));
        assert!(is_block_frame(CONTINUATION) && !is_block_frame(0x0));
        assert!(ends_block(CONTINUATION, END_HEADERS | 0x1));
        assert!(!ends_block(HEADERS, 0x1) && !ends_block(0x0, END_HEADERS));
    }
}

//! The h2 header-block clock and charge: how long the header block an h2
//! client is sending has been unfinished, and how many bytes it holds,
//! followed from the frame headers in its bytes.
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
//!
//! The bytes of the unfinished block (the payloads of its frames so far,
//! as they arrive) are charged to the route's pending-head budget, as
//! HTTP/1.1's framing reader charges an unfinished head, and given back
//! when the block ends or the connection does. The budget counts wire
//! bytes, as HTTP/1.1's does: hyper (h2) decodes the block as it comes and
//! keeps the decoded fields, which `--http-max-header-bytes` bounds per
//! connection (`max_header_list_size`).

use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio::time::Instant;

use super::tap::Observe;
use super::Charge;

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
    /// The route's budget refused the block: nothing more is followed
    /// (the connection is closed).
    Refused,
}

/// A [`Tap`](super::tap::Tap) observer that follows an h2 client's frames,
/// keeps its [`BlockClock`] and charges its unfinished block.
#[derive(Debug)]
pub struct Blocks {
    at: At,
    head: [u8; FRAME_HEADER_LEN],
    in_block: bool,
    /// The payload bytes of the unfinished block read so far.
    pending: usize,
    clock: Arc<BlockClock>,
    /// The route's pending-head budget, and what `pending` holds of it.
    charge: Option<Charge>,
}

impl Blocks {
    /// A follower at the start of a connection (the preface first).
    pub fn new(clock: Arc<BlockClock>) -> Blocks {
        Blocks {
            at: At::Preface(PREFACE_LEN),
            head: [0; FRAME_HEADER_LEN],
            in_block: false,
            pending: 0,
            clock,
            charge: None,
        }
    }

    /// The same follower charging the unfinished block to a route's
    /// budget.
    pub fn charged(mut self, charge: Charge) -> Blocks {
        self.charge = Some(charge);
        self
    }

    /// `n` payload bytes of the current frame arrived: inside a block
    /// they are charged (a frame other than CONTINUATION inside a block is
    /// a connection error hyper acts on; charging it too is harmless).
    fn payload_read(&mut self, n: usize) {
        if self.in_block {
            self.pending += n;
            self.charge_pending();
        }
    }

    /// Brings what the block holds of the route's budget to `pending`;
    /// when the budget refuses, stops following (the connection is then
    /// closed, see [`Observe::refused`]).
    fn charge_pending(&mut self) {
        let Some(c) = &mut self.charge else {
            return;
        };
        if !c.hold(self.pending) {
            self.at = At::Refused;
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
    /// clock and gives back what the block held.
    fn frame_ended(&mut self, ends: bool) {
        self.at = At::Head(0);
        if ends && self.in_block {
            self.in_block = false;
            self.clock.set(None);
            self.pending = 0;
            self.charge_pending();
        }
    }
}

impl Observe for Blocks {
    fn read(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            match self.at {
                At::Refused => return,
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
                    self.payload_read(n);
                    if left == n && self.at != At::Refused {
                        self.frame_ended(ends);
                    }
                }
            }
        }
    }

    fn refused(&self) -> bool {
        self.at == At::Refused
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::http::{HeadBudget, FREE_HEAD_BYTES};
    use std::sync::atomic::{AtomicBool, Ordering};

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

    /// A follower of a connection charging `budget` with no free
    /// allowance, and its over-budget flag.
    fn charged(budget: &Arc<HeadBudget>) -> (Blocks, Arc<AtomicBool>) {
        let over = Arc::new(AtomicBool::new(false));
        let (b, _) = follower();
        let b = b.charged(Charge::new(budget.clone(), over.clone()).with_free(0));
        (b, over)
    }

    /// An unfinished block holds its payload bytes of the route's budget
    /// as they arrive, other frames none; the frame that ends it gives
    /// them all back, and so does a connection that ends mid-block.
    #[test]
    fn an_unfinished_block_holds_the_routes_budget_until_it_ends() {
        let budget = Arc::new(HeadBudget::new(100));
        let (mut b, over) = charged(&budget);
        b.read(&frame(0x4, 0, &[0; 6])); // SETTINGS
        b.read(&frame(0x0, 0x1, &[0; 20])); // DATA
        assert_eq!(budget.used(), 0, "only block frames are charged");
        let headers = frame(HEADERS, 0, &[0x82; 30]);
        b.read(&headers[..9]);
        assert_eq!(budget.used(), 0, "frame headers are not charged");
        b.read(&headers[9..19]);
        assert_eq!(budget.used(), 10, "charged as the payload arrives");
        b.read(&headers[19..]);
        b.read(&frame(CONTINUATION, 0, &[0x82; 20]));
        assert_eq!(budget.used(), 50);
        let last = frame(CONTINUATION, END_HEADERS, &[0x82; 5]);
        b.read(&last[..last.len() - 1]);
        assert_eq!(budget.used(), 54, "held until the block's last byte");
        b.read(&last[last.len() - 1..]);
        assert_eq!(budget.used(), 0, "an ended block holds nothing");
        b.read(&frame(HEADERS, 0, &[0x82; 40]));
        assert_eq!(budget.used(), 40);
        assert!(!b.refused() && !over.load(Ordering::Acquire));
        drop(b);
        assert_eq!(budget.used(), 0, "a closed connection holds nothing");
    }

    /// Two connections share the budget: the block that would pass it
    /// flags its connection (closed, `overload`), gives back what it held
    /// and is followed no further; the other goes on, and once it ends a
    /// new block fits again.
    #[test]
    fn a_block_past_the_budget_flags_its_connection() {
        let budget = Arc::new(HeadBudget::new(100));
        let (mut a, a_over) = charged(&budget);
        let (mut b, b_over) = charged(&budget);
        a.read(&frame(HEADERS, 0, &[0x82; 60]));
        b.read(&frame(HEADERS, 0, &[0x82; 30]));
        assert_eq!(budget.used(), 90);
        b.read(&frame(CONTINUATION, 0, &[0x82; 11]));
        assert!(b.refused() && b_over.load(Ordering::Acquire));
        assert_eq!(budget.used(), 60, "the refused block gave back its part");
        b.read(&frame(CONTINUATION, END_HEADERS, &[]));
        b.read(&frame(HEADERS, 0, &[0x82; 5]));
        assert_eq!((b.at, budget.used()), (At::Refused, 60), "not followed");
        assert!(!a.refused() && !a_over.load(Ordering::Acquire));
        a.read(&frame(CONTINUATION, END_HEADERS, &[0x82; 40]));
        assert_eq!(budget.used(), 0);
        let (mut c, c_over) = charged(&budget);
        c.read(&frame(HEADERS, 0, &[0x82; 100]));
        assert!(
            !c.refused() && !c_over.load(Ordering::Acquire),
            "fits again"
        );
    }

    /// A block within the free allowance is never refused, however full
    /// the budget; past it the full budget refuses.
    #[test]
    fn a_small_block_passes_a_full_budget() {
        let budget = Arc::new(HeadBudget::new(100));
        assert!(budget.take(100), "the budget is full");
        let over = Arc::new(AtomicBool::new(false));
        let (b, _) = follower();
        let mut b = b.charged(Charge::new(budget.clone(), over.clone()));
        b.read(&frame(HEADERS, 0, &vec![0x82; FREE_HEAD_BYTES]));
        assert!(!b.refused(), "a small block was refused");
        b.read(&frame(CONTINUATION, 0, &[0x82]));
        assert!(b.refused() && over.load(Ordering::Acquire));
        assert_eq!(budget.used(), 100);
    }

    #[test]
    fn block_frames_and_their_end() {
        assert!(is_block_frame(HEADERS) && is_block_frame(PUSH_PROMISE));
        assert!(is_block_frame(CONTINUATION) && !is_block_frame(0x0));
        assert!(ends_block(CONTINUATION, END_HEADERS | 0x1));
        assert!(!ends_block(HEADERS, 0x1) && !ends_block(0x0, END_HEADERS));
    }
}

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
//! The unfinished block is charged to the route's pending-head budget,
//! as HTTP/1.1's framing reader charges an unfinished head, and given
//! back when the block ends or the connection does. It is charged its
//! wire bytes (the payloads of its frames so far, as they arrive), as
//! HTTP/1.1's head is, plus [`FIELD_COST`] for each field begun: hyper
//! (h2) decodes the block as it comes and keeps each decoded field, and a
//! field can come from a single byte (an HPACK table reference), so wire
//! bytes alone would let a small block hold much more ([`super::fields`]
//! counts them).

use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio::time::Instant;

use super::fields::FieldCount;
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
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// What a block is charged per field it carries, beyond its wire bytes:
/// what hyper keeps for a decoded field besides its bytes (a header map
/// entry, about 100 bytes), which a one-byte HPACK reference makes it
/// hold.
pub const FIELD_COST: usize = 128;

/// What an unfinished block of `wire` payload bytes carrying `fields`
/// fields is charged.
fn block_cost(wire: usize, fields: usize) -> usize {
    wire.saturating_add(fields.saturating_mul(FIELD_COST))
}

/// Which payload bytes of a block frame are its field block fragment
/// (RFC 9113 §6.2, §6.6, §6.10): those after the pad length and the
/// priority (or promised stream) at the front and before the padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fragment {
    /// The frame's payload length.
    len: usize,
    /// The payload bytes seen so far.
    pos: usize,
    /// The bytes before the fragment.
    front: usize,
    /// True when the first payload byte is the pad length.
    padded: bool,
    /// The padding after the fragment.
    pad: usize,
}

impl Fragment {
    /// The fragment of a block frame of type `ty` with `flags` and a
    /// payload of `len` bytes.
    fn of(ty: u8, flags: u8, len: usize) -> Fragment {
        let padded = ty != CONTINUATION && flags & PADDED != 0;
        let fixed = match ty {
            HEADERS if flags & PRIORITY != 0 => 5,
            PUSH_PROMISE => 4,
            _ => 0,
        };
        Fragment {
            len,
            pos: 0,
            front: usize::from(padded) + fixed,
            padded,
            pad: 0,
        }
    }

    /// The part of `chunk`, the frame's next payload bytes, inside the
    /// fragment.
    fn take<'a>(&mut self, chunk: &'a [u8]) -> &'a [u8] {
        if self.padded && self.pos == 0 {
            self.pad = chunk.first().copied().map_or(0, usize::from);
        }
        let start = self.pos;
        self.pos += chunk.len();
        let from = self.front.max(start) - start;
        let to = self
            .len
            .saturating_sub(self.pad)
            .min(self.pos)
            .saturating_sub(start);
        chunk.get(from..to.max(from)).unwrap_or(&[])
    }
}

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
    /// The fields begun in the unfinished block.
    fields: FieldCount,
    /// The field block bytes of the current frame, if a block frame.
    fragment: Option<Fragment>,
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
            fields: FieldCount::default(),
            fragment: None,
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

    /// `chunk`, payload bytes of the current frame, arrived: inside a
    /// block they are charged, and the fields their fragment begins (a
    /// frame other than CONTINUATION inside a block is a connection error
    /// hyper acts on; charging its bytes too is harmless).
    fn payload_read(&mut self, chunk: &[u8]) {
        if self.in_block {
            self.pending += chunk.len();
            if let Some(f) = &mut self.fragment {
                self.fields.feed(f.take(chunk));
            }
            self.charge_pending();
        }
    }

    /// Brings what the block holds of the route's budget to its cost;
    /// when the budget refuses, stops following (the connection is then
    /// closed, see [`Observe::refused`]).
    fn charge_pending(&mut self) {
        let Some(c) = &mut self.charge else {
            return;
        };
        if !c.hold(block_cost(self.pending, self.fields.fields())) {
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
        self.fragment = is_block_frame(ty).then(|| Fragment::of(ty, flags, left));
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
            self.fields.reset();
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
                    let (chunk, rest) = bytes.split_at(left.min(bytes.len()));
                    let n = chunk.len();
                    bytes = rest;
                    self.at = At::Payload {
                        left: left - n,
                        ends,
                    };
                    self.payload_read(chunk);
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

    /// A frame of 64 KiB or more (a peer may allow frames up to 16 MiB)
    /// is followed to its end by all three bytes of its length: the block
    /// after it is seen where it starts.
    #[test]
    fn a_frame_past_64_kib_is_followed_to_its_end() {
        let (mut b, clock) = follower();
        b.read(&frame(0x0, 0, &vec![0; 0x1_0005])); // DATA
        assert_eq!(b.at, At::Head(0), "at the next frame's header");
        b.read(&frame(HEADERS, 0, &[0x82]));
        assert!(clock.since().is_some(), "the block was seen");
    }

    /// A frame header split across reads is completed from the next read,
    /// which may carry the rest of the frame and the next one.
    #[test]
    fn a_frame_header_is_gathered_across_reads() {
        let (mut b, clock) = follower();
        let mut bytes = frame(0x0, 0, &[7; 20]); // DATA
        bytes.extend_from_slice(&frame(HEADERS, 0, &[0x82]));
        b.read(&bytes[..4]);
        assert_eq!(b.at, At::Head(4));
        b.read(&bytes[4..]);
        assert!(clock.since().is_some(), "the block after it was seen");
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

    /// One whole field of `len` HPACK bytes (a literal with a new name
    /// `a`), 4..=130 bytes.
    fn field(len: usize) -> Vec<u8> {
        let mut f = vec![0x00, 0x01, b'a', (len - 4) as u8];
        f.resize(len, b'v');
        f
    }

    /// An unfinished block holds its payload bytes and a cost per field
    /// begun of the route's budget as they arrive, other frames nothing;
    /// the frame that ends it gives all back, and so does a connection
    /// that ends mid-block.
    #[test]
    fn an_unfinished_block_holds_the_routes_budget_until_it_ends() {
        let budget = Arc::new(HeadBudget::new(10_000));
        let (mut b, over) = charged(&budget);
        b.read(&frame(0x4, 0, &[0; 6])); // SETTINGS
        b.read(&frame(0x0, 0x1, &[0; 20])); // DATA
        assert_eq!(budget.used(), 0, "only block frames are charged");
        let headers = frame(HEADERS, 0, &field(30));
        b.read(&headers[..9]);
        assert_eq!(budget.used(), 0, "frame headers are not charged");
        b.read(&headers[9..19]);
        assert_eq!(budget.used(), 10 + FIELD_COST, "charged as it arrives");
        b.read(&headers[19..]);
        b.read(&frame(CONTINUATION, 0, &field(20)));
        assert_eq!(budget.used(), 50 + 2 * FIELD_COST);
        let last = frame(CONTINUATION, END_HEADERS, &field(5));
        b.read(&last[..last.len() - 1]);
        assert_eq!(budget.used(), 54 + 3 * FIELD_COST, "until its last byte");
        b.read(&last[last.len() - 1..]);
        assert_eq!(budget.used(), 0, "an ended block holds nothing");
        b.read(&frame(HEADERS, 0, &field(40)));
        assert_eq!(budget.used(), 40 + FIELD_COST, "fields counted anew");
        assert!(!b.refused() && !over.load(Ordering::Acquire));
        drop(b);
        assert_eq!(budget.used(), 0, "a closed connection holds nothing");
    }

    /// Each one-byte HPACK reference is a field hyper keeps: charged as
    /// one. Padding and priority are not read as fields, however the
    /// bytes are split, nor a CONTINUATION's bits taken for them.
    #[test]
    fn fields_are_charged_from_the_fragment_alone() {
        let budget = Arc::new(HeadBudget::new(100_000));
        let (mut b, _) = charged(&budget);
        b.read(&frame(HEADERS, 0, &[0x82; 10]));
        assert_eq!(budget.used(), 10 + 10 * FIELD_COST);
        drop(b);
        // Pad length 3, priority (5 bytes), two fields, 3 bytes of padding
        // (zeros, each a field were it read as one).
        let mut payload = vec![3, 0, 0, 0, 0, 0, 0x82, 0x84];
        payload.extend_from_slice(&[0, 0, 0]);
        let padded = frame(HEADERS, PADDED | PRIORITY, &payload);
        for split in [padded.len(), 1] {
            let (mut b, _) = charged(&budget);
            for chunk in padded.chunks(split) {
                b.read(chunk);
            }
            assert_eq!(budget.used(), 11 + 2 * FIELD_COST, "split {split}");
        }
        let (mut b, _) = charged(&budget);
        b.read(&frame(HEADERS, PADDED, &[0, 0x82]));
        b.read(&frame(CONTINUATION, PADDED | PRIORITY, &[0x82, 0x82]));
        assert_eq!(budget.used(), 4 + 3 * FIELD_COST);
    }

    #[test]
    fn a_fragment_lies_between_its_front_and_its_padding() {
        let mut f = Fragment::of(HEADERS, PADDED | PRIORITY, 12);
        assert_eq!(f.take(&[2, 9, 9]), &[] as &[u8], "pad length, priority");
        assert_eq!(f.take(&[9, 9, 9, 7]), &[7]);
        assert_eq!(f.take(&[8, 8, 6]), &[8, 8, 6]);
        assert_eq!(f.take(&[0, 0]), &[] as &[u8], "padding");
        let mut f = Fragment::of(PUSH_PROMISE, 0, 6);
        assert_eq!(f.take(&[0, 0, 0, 2, 5, 5]), &[5, 5]);
        let mut f = Fragment::of(HEADERS, PADDED, 3);
        assert_eq!(f.take(&[200, 1, 1]), &[] as &[u8], "padding past the end");
        assert_eq!(Fragment::of(CONTINUATION, PADDED | PRIORITY, 4).front, 0);
        assert_eq!(block_cost(usize::MAX, 2), usize::MAX);
    }

    /// Two connections share the budget: the block that would pass it
    /// flags its connection (closed, `overload`), gives back what it held
    /// and is followed no further; the other goes on, and once it ends a
    /// new block fits again.
    #[test]
    fn a_block_past_the_budget_flags_its_connection() {
        let budget = Arc::new(HeadBudget::new(600));
        let (mut a, a_over) = charged(&budget);
        let (mut b, b_over) = charged(&budget);
        a.read(&frame(HEADERS, 0, &field(60)));
        b.read(&frame(HEADERS, 0, &field(30)));
        assert_eq!(budget.used(), 90 + 2 * FIELD_COST);
        b.read(&frame(CONTINUATION, 0, &[0x82, 0x82]));
        assert!(b.refused() && b_over.load(Ordering::Acquire));
        assert_eq!(budget.used(), 60 + FIELD_COST, "b gave back its part");
        b.read(&frame(CONTINUATION, END_HEADERS, &[]));
        b.read(&frame(HEADERS, 0, &[0x82]));
        assert_eq!(b.at, At::Refused, "not followed");
        assert_eq!(budget.used(), 60 + FIELD_COST);
        assert!(!a.refused() && !a_over.load(Ordering::Acquire));
        a.read(&frame(CONTINUATION, END_HEADERS, &field(40)));
        assert_eq!(budget.used(), 0);
        let (mut c, c_over) = charged(&budget);
        c.read(&frame(HEADERS, 0, &[0x82; 4]));
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
        // One field whose value fills the allowance with its cost.
        let mut big = vec![0x00, 0x01, b'a', 0x7f, 0xff, 0x3e];
        big.resize(FREE_HEAD_BYTES - FIELD_COST, b'v');
        b.read(&frame(HEADERS, 0, &big));
        assert!(!b.refused(), "a small block was refused");
        b.read(&frame(CONTINUATION, 0, b"v"));
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
